"""The client's own request on a same-wire route (DESIGN.md section 10), as the adapters of that
wire send it, and a provider event encoded again for the client."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from app.providers.sse import encode_event

__all__ = ["Passthrough", "Wire", "passthrough_for", "relay_frame"]

Wire = Literal["anthropic-messages", "openai-chat", "openai-responses"]
"""A wire format a drop-in facade speaks and a provider may speak too (a same-wire route)."""


@dataclass(slots=True, frozen=True, kw_only=True)
class Passthrough:
    """The client's own request, for a provider that speaks the facade's wire (DESIGN.md section
    10): sent as the client wrote it, with the resolved model, `stream` on, the request's
    `options` (the caller's `provider_options` and the operator's) on top, and the client's
    namespace headers and query string. A provider of another wire ignores it and sends the
    canonical request."""

    wire: Wire
    body: dict[str, Any]
    """The client's JSON body less the gateway's own fields."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """The provider's namespace headers as the client sent them (`anthropic-beta`, ...)."""
    query: Mapping[str, str] = field(default_factory=dict)
    relay: bool = False
    """The response's provider events go to the client as sent (`Relay` patches beside the others)."""

    def wire_body(self, model: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """The body to send: the client's, the model resolved, streamed, `options` applied (a None
        value drops a field)."""
        body = {**self.body, "model": model, "stream": True}
        for key, value in options.items():
            body.pop(key, None)
            if value is not None:
                body[key] = value
        return body


def passthrough_for(passthrough: Passthrough | None, wire: Wire) -> Passthrough | None:
    """The request's passthrough when it is for this wire."""
    return passthrough if passthrough is not None and passthrough.wire == wire else None


relay_frame = encode_event
"""An SSE event encoded again as its provider sent it (app/providers/sse.py)."""
