"""Build the Bedrock recordings under tests/fixtures/bedrock*/ from their event lists.

Each `<name>.events.json` lists the frames of one response as AWS documents them (ConverseStream
events: https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html,
exception frames: `:message-type: exception`). This script writes `<name>.bin`, the response body
byte for byte as the wire carries it (AWS event-stream frames, prelude and message CRC32 valid),
and `<name>.expected.json`, the outcome read off the events (the shape of shared/fixtures'
expected files). Run it after editing an event list: `python scripts/build_cloud_fixtures.py`.

tests/fixtures/bedrock-invoke/ holds Claude on Bedrock (`InvokeModelWithResponseStream`): every
Anthropic recording of shared/fixtures/anthropic with each SSE event's data, byte for byte, as the
base64 `bytes` of one `chunk` frame (the expected outcome is the recording's own), and
`<name>.events.json` lists of `{"chunk": <event>}` / `{"exception": ...}` entries for the rest.

`encode_frame` is the small encoder: botocore ships only a decoder (the tests decode every file
with botocore's own `EventStreamBuffer` to prove the frames valid).
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def encode_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: string headers (type 7), the payload, both CRC32s."""
    head = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        head += struct.pack("!B", len(raw_name)) + raw_name + b"\x07" + struct.pack("!H", len(raw_value)) + raw_value
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack("!II", total, len(head))
    prelude += struct.pack("!I", binascii.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + head + payload
    return message + struct.pack("!I", binascii.crc32(message) & 0xFFFFFFFF)


def _payload(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def frame_for(entry: dict[str, Any]) -> bytes:
    """An event list entry -> its frame: `{"event": type, "payload": {...}}`, `{"exception": type,
    "payload": {...}}`, or `{"chunk": <Anthropic event>}` (InvokeModelWithResponseStream)."""
    if "exception" in entry:
        headers = {":exception-type": entry["exception"], ":content-type": "application/json",
                   ":message-type": "exception"}
        return encode_frame(headers, _payload(entry["payload"]))
    if "chunk" in entry:
        inner = _payload(entry["chunk"])
        body = {"bytes": base64.b64encode(inner).decode(), **({"p": entry["p"]} if "p" in entry else {})}
        return encode_frame({":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},
                            _payload(body))
    headers = {":event-type": entry["event"], ":content-type": "application/json", ":message-type": "event"}
    return encode_frame(headers, _payload(entry["payload"]))


def expected_converse(name: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    text, reasoning, signatures, errors = [], [], [], []
    calls: dict[int, dict[str, Any]] = {}
    usage, finish, signed = None, None, {}
    for entry in events:
        if "exception" in entry:
            errors.append({"exception_type": entry["exception"], "message": entry["payload"].get("message")})
            continue
        kind, data = entry["event"], entry["payload"]
        if kind == "contentBlockStart" and "toolUse" in data.get("start", {}):
            tool = data["start"]["toolUse"]
            calls[data["contentBlockIndex"]] = {"id": tool["toolUseId"], "name": tool["name"], "arguments": ""}
        elif kind == "contentBlockDelta":
            delta = data["delta"]
            if "text" in delta:
                text.append(delta["text"])
            elif "toolUse" in delta:
                calls[data["contentBlockIndex"]]["arguments"] += delta["toolUse"]["input"]
            elif "reasoningContent" in delta:
                content = delta["reasoningContent"]
                reasoning.append(content.get("text", ""))
                if content.get("signature"):
                    signed[data["contentBlockIndex"]] = True
                else:
                    signed.setdefault(data["contentBlockIndex"], False)
        elif kind == "messageStop":
            finish = data.get("stopReason")
        elif kind == "metadata":
            usage = data.get("usage")
    signatures = list(signed.values())
    tool_calls = [{**call, "arguments_is_json": _is_json(call["arguments"])} for call in calls.values()]
    return {"fixture": f"{name}.bin", "provider": "bedrock", "model": None, "text": "".join(text),
            "reasoning": "".join(reasoning) if reasoning else None, "tool_calls": tool_calls, "usage": usage,
            "finish_reason": finish, "reasoning_signatures": signatures, "errors": errors, "frames": len(events)}


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


SHARED_ANTHROPIC = ROOT.parent.parent.parent / "shared" / "fixtures" / "anthropic"


def chunk_frame(data: bytes, index: int) -> bytes:
    """One Anthropic event's JSON (as sent) in a `chunk` frame; Bedrock pads payloads with `p`."""
    body = {"bytes": base64.b64encode(data).decode(), "p": "abcdefghijklmnopqrstuvwxyz"[: index % 26]}
    return encode_frame({":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},
                        _payload(body))


def build_invoke(folder: Path) -> list[Path]:
    written = []
    for sse in sorted(SHARED_ANTHROPIC.glob("*.sse")):
        events = [block for block in sse.read_bytes().split(b"\n\n") if block.strip()]
        datas = [b"\n".join(line[6:] for line in block.split(b"\n") if line.startswith(b"data: ")) for block in events]
        (folder / f"{sse.stem}.bin").write_bytes(b"".join(chunk_frame(d, i) for i, d in enumerate(datas)))
        expected = json.loads(sse.with_suffix(".expected.json").read_text())
        expected["fixture"], expected["frames"] = f"{sse.stem}.bin", len(datas)
        (folder / f"{sse.stem}.expected.json").write_text(json.dumps(expected, indent=2, ensure_ascii=False) + "\n")
        written.append(folder / f"{sse.stem}.bin")
    for source in sorted(folder.glob("*.events.json")):
        name = source.name.removesuffix(".events.json")
        entries = json.loads(source.read_text())
        (folder / f"{name}.bin").write_bytes(b"".join(frame_for(e) for e in entries))
        errors = [{"exception_type": e["exception"], "message": e["payload"]["message"]} for e in entries if "exception" in e]
        text = "".join(e["chunk"]["delta"].get("text", "") for e in entries
                       if "chunk" in e and e["chunk"]["type"] == "content_block_delta")
        expected = {"fixture": f"{name}.bin", "provider": "bedrock-invoke", "text": text, "errors": errors,
                    "frames": len(entries)}
        (folder / f"{name}.expected.json").write_text(json.dumps(expected, indent=2) + "\n")
        written.append(folder / f"{name}.bin")
    return written


def build(folder: Path) -> list[Path]:
    written = []
    for source in sorted(folder.glob("*.events.json")):
        name = source.name.removesuffix(".events.json")
        events = json.loads(source.read_text())
        (folder / f"{name}.bin").write_bytes(b"".join(frame_for(e) for e in events))
        expected = expected_converse(name, events)
        (folder / f"{name}.expected.json").write_text(json.dumps(expected, indent=2, ensure_ascii=False) + "\n")
        written.append(folder / f"{name}.bin")
    return written


if __name__ == "__main__":
    for path in [*build(ROOT / "bedrock"), *build_invoke(ROOT / "bedrock-invoke")]:
        sys.stdout.write(f"{path.relative_to(ROOT.parent.parent)}\n")
