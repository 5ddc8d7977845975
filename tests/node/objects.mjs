// The Vercel AI SDK's streamObject against the gateway on loopback:
// `node objects.mjs <chat|responses> <gateway url> <model>` prints one JSON object of what the client
// saw (tests/test_node_objects.py asserts on it). `chat`: @ai-sdk/openai `.chat()` (Chat Completions,
// `response_format: json_schema`); `responses`: its default provider (the Responses API, `text.format`).
import { createOpenAI } from "@ai-sdk/openai";
import { streamObject } from "ai";
import { z } from "zod";

const [scenario, base, modelName] = process.argv.slice(2);
const openai = createOpenAI({ baseURL: `${base}/v1`, apiKey: "sk-client" });
const model = scenario === "chat" ? openai.chat(modelName) : openai(modelName);
const schema = z.object({ city: z.string(), sunny: z.boolean() });
const result = streamObject({ model, schema, prompt: "The weather in Paris?", maxRetries: 0 });
const partials = [];
let error = null;
for await (const part of result.fullStream) {
  if (part.type === "object") partials.push(part.object);
  else if (part.type === "error") error = String(part.error);
}
let object = null;
try { object = await result.object; } catch (e) { error = error ?? String(e); }
console.log(JSON.stringify({ object, partials, error, finish: await result.finishReason }));
