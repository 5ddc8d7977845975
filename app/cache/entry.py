"""A cached run and its byte form.

The value is the run's own stream log as its frames (`start` to `final`, the bytes every reader
got), behind a header with a checksum: a corrupt or truncated entry is refused (`CorruptEntry`),
and the cache counts it as a miss instead of replaying a broken stream.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass
from typing import Any

import orjson

from app.core.ending import RouteNames, final_event
from app.core.events import AssistantMessage, FinalEvent, StreamEvent, Usage
from app.core.messages import Message, ReasoningBlock, ToolCall
from app.streams.frames import decode_frames

__all__ = ["CachedRun", "CorruptEntry", "decode_entry", "encode_entry"]

_MAGIC = b"FGC1"
_DIGEST = 64  # hex sha256


class CorruptEntry(ValueError):
    """A stored entry that is not one this gateway wrote whole."""


@dataclass(slots=True, frozen=True, kw_only=True)
class CachedRun:
    """An `ok` run, as it was released: its content events, its final, its timings."""

    events: list[StreamEvent]
    final: FinalEvent
    created_at: float
    """Wall-clock time the answer was stored."""
    ttft: float | None
    duration: float

    @property
    def age(self) -> float:
        return max(0.0, time.time() - self.created_at)


def encode_entry(frames: bytes, *, created_at: float, ttft: float | None, duration: float) -> bytes:
    """The stored form of a run's log frames (`start` to `final`)."""
    header = orjson.dumps({"created_at": created_at, "ttft": ttft, "duration": duration, "size": len(frames)})
    body = header + b"\n" + frames
    return _MAGIC + hashlib.sha256(body).hexdigest().encode() + body


def decode_entry(data: bytes) -> CachedRun:
    """The run an entry holds; CorruptEntry unless it is whole and ends with an `ok` final."""
    if not data.startswith(_MAGIC):
        raise CorruptEntry("not a cache entry")
    digest, body = data[len(_MAGIC):len(_MAGIC) + _DIGEST], data[len(_MAGIC) + _DIGEST:]
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise CorruptEntry("checksum mismatch (truncated or altered)")
    try:
        header_bytes, frames = body.split(b"\n", 1)
        header = orjson.loads(header_bytes)
        if header["size"] != len(frames):
            raise CorruptEntry("size mismatch")
        last = frames.rstrip(b"\n").rsplit(b"\n\n", 1)[-1].split(b"\n")
        if len(last) != 3 or last[1] != b"event: final":
            raise CorruptEntry("no final")
        final = final_from_data(orjson.loads(last[2][6:]))
        events = decode_frames(frames)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptEntry(f"unreadable: {type(exc).__name__}") from None
    if final.status != "ok":
        raise CorruptEntry("not an ok run")
    return CachedRun(events=events, final=final, created_at=float(header["created_at"]), ttft=header["ttft"],
                     duration=float(header["duration"]))


def final_from_data(data: dict[str, Any]) -> FinalEvent:
    """A final event back from its payload (`FinalEvent.data()`); the attempts of the original's
    route are left out (a replay made none)."""
    message = data["message"]
    usage = {k: v for k, v in data["usage"].items() if k in _USAGE_FIELDS}
    return final_event(
        data["status"], data.get("error"), model=data["model"], provider=data["provider"],
        message=AssistantMessage(
            content=message["content"],
            tool_calls=tuple(ToolCall.model_validate(c) for c in message["tool_calls"]),
            reasoning=tuple(ReasoningBlock.model_validate(b) for b in message.get("reasoning", ()))),
        usage=Usage(**usage), stop_reason=data["stop_reason"], steps=data["steps"],
        max_steps_reached=data["max_steps_reached"],
        messages=tuple(Message.model_validate(m) for m in data.get("messages", ())),
        route=RouteNames(route=data.get("route"), target=data.get("target")), content_filter=data.get("content_filter"),
    )


_USAGE_FIELDS = frozenset(f.name for f in dataclasses.fields(Usage)) - {"output_unknown"}
