// The Vercel AI SDK against the gateway on loopback: `node clients.mjs <scenario> <gateway url> <model>`
// prints one JSON object of what the client saw (tests/test_node_clients.py asserts on it).
// Scenarios: `chat` (@ai-sdk/openai `.chat()`: Chat Completions), `responses` (@ai-sdk/openai default
// provider: the Responses API), `anthropic` (@ai-sdk/anthropic, which sets eager_input_streaming on
// every tool). Each runs generateText and streamText with the given model and tools that have no
// `execute`, so the model's tool calls come back to the caller.
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, jsonSchema, streamText, tool } from "ai";

const [scenario, base, modelName] = process.argv.slice(2);
const names = ["GetWeatherArgs", "get_stock_price", "pelican_name_generator", "fixed_version"];
const tools = Object.fromEntries(names.map((name) => [name, tool({
  description: name,
  inputSchema: jsonSchema({ type: "object", properties: {}, additionalProperties: true }),
})]));

function model() {
  if (scenario === "anthropic") return createAnthropic({ baseURL: `${base}/v1`, apiKey: "sk-ant-client" })(modelName);
  const openai = createOpenAI({ baseURL: `${base}/v1`, apiKey: "sk-client" });
  return scenario === "chat" ? openai.chat(modelName) : openai(modelName);
}

const calls = (list) => list.map((c) => [c.toolName, c.input]);
const plain = await generateText({ model: model(), prompt: "go", tools, maxRetries: 0 });
const streamed = streamText({ model: model(), prompt: "go", tools, maxRetries: 0 });
const deltas = {};
let text = "";
let error = null;
for await (const part of streamed.fullStream) {
  if (part.type === "text-delta") text += part.text;
  else if (part.type === "tool-input-delta") deltas[part.id] = (deltas[part.id] ?? 0) + 1;
  else if (part.type === "error") error = String(part.error);
}
console.log(JSON.stringify({
  plain: { text: plain.text, calls: calls(plain.toolCalls), usage: plain.usage, finish: plain.finishReason },
  streamed: { text, calls: calls(await streamed.toolCalls), usage: await streamed.usage,
              finish: await streamed.finishReason, inputDeltas: Object.values(deltas), error },
}));
