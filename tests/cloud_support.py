"""The clouds' recordings (tests/fixtures/<cloud>/) and a driver for event-stream bodies."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from app.core.accumulator import Accumulator
from app.core.events import StreamEvent
from app.providers.eventstream import EventStreamDecoder
from app.providers.framing import FrameDecoder, StreamNormalizer
from tests.support import Recording, run_bytes

CLOUD_FIXTURES = Path(__file__).resolve().parent / "fixtures"


def cloud_recordings(cloud: str, suffix: str = ".bin") -> list[Recording]:
    """Every `<name><suffix>` under tests/fixtures/<cloud>/ with its `.expected.json`."""
    out = []
    for path in sorted((CLOUD_FIXTURES / cloud).glob(f"*{suffix}")):
        name = path.name.removesuffix(suffix)
        expected = json.loads((path.parent / f"{name}.expected.json").read_text())
        out.append(Recording(cloud, name, path.read_bytes(), expected))
    if not out:
        raise RuntimeError(f"no recordings under {CLOUD_FIXTURES / cloud}")
    return out


def run_frames(chunks: Iterable[bytes], normalizer: StreamNormalizer[Any], *, model: str = "m",
               provider: str = "bedrock", decoder: FrameDecoder[Any] | None = None,
               ) -> tuple[list[StreamEvent], Accumulator]:
    """Bytes through the production path (`tests.support.run_bytes`) framed as an AWS event stream
    unless another decoder is given."""
    return run_bytes(chunks, normalizer, model=model, provider=provider, decoder=decoder or EventStreamDecoder())
