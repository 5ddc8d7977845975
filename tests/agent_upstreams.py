"""Scripted loopback providers in the real wire formats for the real-agent tests
(tests/test_real_agents.py): the first turn calls the agent's shell tool, the turn after the
tool's output answers with text; any other request (a side query: a title, a summary) gets text."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

COMMAND = "echo agent-ran-shell"
ANSWER = "The shell said agent-ran-shell."
USAGE = {"input_tokens": 12, "output_tokens": 7}


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


async def _frames(frames: list[bytes]) -> AsyncIterator[bytes]:
    for frame in frames:
        yield frame


@dataclass
class AnthropicScript:
    requests: list[dict[str, Any]] = field(default_factory=list)

    async def messages(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        after_tool = any(isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"])
                         for m in body.get("messages", []))
        shell = next((t["name"] for t in body.get("tools") or () if t.get("name") == "Bash"), None)
        start = _sse("message_start", {"message": {"id": "msg_script", "type": "message", "role": "assistant",
                                                   "model": body.get("model"), "content": [], "stop_reason": None,
                                                   "stop_sequence": None, "usage": {**USAGE, "output_tokens": 1}}})
        if shell and not after_tool:
            block = {"type": "tool_use", "id": "toolu_script_1", "name": shell, "input": {}}
            arguments = json.dumps({"command": COMMAND, "description": "Print a marker"})
            frames = [start, _sse("content_block_start", {"index": 0, "content_block": block}),
                      _sse("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta",
                                                                         "partial_json": arguments[:20]}}),
                      _sse("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta",
                                                                         "partial_json": arguments[20:]}}),
                      _sse("content_block_stop", {"index": 0}),
                      _sse("message_delta", {"delta": {"stop_reason": "tool_use", "stop_sequence": None},
                                             "usage": USAGE}),
                      _sse("message_stop", {})]
        else:
            frames = [start, _sse("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
                      _sse("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": ANSWER}}),
                      _sse("content_block_stop", {"index": 0}),
                      _sse("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                             "usage": USAGE}),
                      _sse("message_stop", {})]
        return StreamingResponse(_frames(frames), media_type="text/event-stream")

    async def count_tokens(self, request: Request) -> Response:
        return JSONResponse({"input_tokens": 12})

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/messages", self.messages, methods=["POST"]),
                                 Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"])])


def _shell_call(tools: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The name and JSON arguments of a call to the agent's shell tool, as its schema asks."""
    for tool in tools:
        if tool.get("type") != "function" or tool.get("name") not in ("shell", "shell_command", "exec_command"):
            continue
        command = ((tool.get("parameters") or {}).get("properties") or {}).get("command") or {}
        value: Any = ["bash", "-lc", COMMAND] if command.get("type") == "array" else COMMAND
        key = "cmd" if tool["name"] == "exec_command" and "cmd" in (tool.get("parameters") or {}).get("properties", {}) \
            else "command"
        return tool["name"], json.dumps({key: value})
    return None


CODE_MODE = f"const r = await tools.exec_command({{cmd: {json.dumps(COMMAND)}}});\ntext(r.output);"


def _code_mode_call(items: list[dict[str, Any]]) -> bool:
    """Whether the request offers Codex's code-mode `exec` (a custom tool in a `namespace`, sent in an
    `additional_tools` input item, as Codex does for models whose `tool_mode` is `code_mode_only`)."""
    return any(tool.get("type") == "custom" and tool.get("name") == "exec"
               for item in items if item.get("type") == "additional_tools"
               for space in item.get("tools") or () for tool in space.get("tools") or ())


@dataclass
class ResponsesScript:
    requests: list[dict[str, Any]] = field(default_factory=list)

    async def responses(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        items = body.get("input") if isinstance(body.get("input"), list) else []
        after_tool = any(str(i.get("type", "")).endswith("_output") for i in items)
        code_mode = not after_tool and _code_mode_call(items)
        call = None if after_tool or code_mode else _shell_call(body.get("tools") or [])
        response = {"id": "resp_script", "object": "response", "created_at": 1, "status": "in_progress",
                    "model": body.get("model"), "output": [], "usage": None}
        seq = iter(range(1000))

        def ev(kind: str, **data: Any) -> bytes:
            return _sse(kind, {**data, "sequence_number": next(seq)})

        frames = [ev("response.created", response=response), ev("response.in_progress", response=response)]
        if code_mode:
            item = {"type": "custom_tool_call", "id": "ctc_script", "call_id": "call_script_1", "name": "exec",
                    "input": "", "status": "in_progress"}
            done = {**item, "input": CODE_MODE, "status": "completed"}
            frames += [ev("response.output_item.added", output_index=0, item=item),
                       ev("response.custom_tool_call_input.delta", item_id="ctc_script", output_index=0,
                          delta=CODE_MODE),
                       ev("response.custom_tool_call_input.done", item_id="ctc_script", output_index=0,
                          input=CODE_MODE),
                       ev("response.output_item.done", output_index=0, item=done)]
        elif call is not None:
            item = {"type": "function_call", "id": "fc_script", "call_id": "call_script_1", "name": call[0],
                    "arguments": "", "status": "in_progress"}
            done = {**item, "arguments": call[1], "status": "completed"}
            frames += [ev("response.output_item.added", output_index=0, item=item),
                       ev("response.function_call_arguments.delta", item_id="fc_script", output_index=0,
                          delta=call[1]),
                       ev("response.function_call_arguments.done", item_id="fc_script", output_index=0,
                          arguments=call[1]),
                       ev("response.output_item.done", output_index=0, item=done)]
        else:
            part = {"type": "output_text", "text": "", "annotations": []}
            item = {"type": "message", "id": "msg_script", "role": "assistant", "status": "in_progress", "content": []}
            done = {**item, "status": "completed", "content": [{**part, "text": ANSWER}]}
            frames += [ev("response.output_item.added", output_index=0, item=item),
                       ev("response.content_part.added", item_id="msg_script", output_index=0, content_index=0,
                          part=part),
                       ev("response.output_text.delta", item_id="msg_script", output_index=0, content_index=0,
                          delta=ANSWER),
                       ev("response.output_text.done", item_id="msg_script", output_index=0, content_index=0,
                          text=ANSWER),
                       ev("response.content_part.done", item_id="msg_script", output_index=0, content_index=0,
                          part={**part, "text": ANSWER}),
                       ev("response.output_item.done", output_index=0, item=done)]
        usage = {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 7,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 19}
        frames.append(ev("response.completed", response={**response, "status": "completed", "output": [done],
                                                         "usage": usage}))
        return StreamingResponse(_frames(frames), media_type="text/event-stream")

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/responses", self.responses, methods=["POST"])])
