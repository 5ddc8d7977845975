"""The SSE decoder alone (app/providers/sse.py): CPU per upstream chunk on the recorded streams,
and its cost on one line that never ends (the hostile case: linear, not quadratic).

- `per_chunk`: every recording under ../shared/fixtures fed in reads of 173 bytes (as the fake
  upstreams serve them) and in whole-event reads; microseconds per read, best of `--rounds`.
- `long_line`: a `data:` line of `--line-mib` MiB fed in 16 KiB reads with no line end, through
  a decoder whose cap is above it (the buffering alone) and through one at the default cap (where
  it stops); seconds of CPU.

Usage: `python bench/sse_decoder_bench.py [--rounds 5] [--line-mib 64]`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.providers.sse import SSEDecoder  # noqa: E402

FIXTURES = ROOT.parent / "shared" / "fixtures"


def _reads(body: bytes, step: int) -> list[bytes]:
    return [body[i:i + step] for i in range(0, len(body), step)]


def per_chunk(rounds: int) -> dict[str, float]:
    bodies = [p.read_bytes() for p in sorted(FIXTURES.glob("*/*.sse"))]
    out: dict[str, float] = {}
    for name, split in (("reads_173", lambda b: _reads(b, 173)),
                        ("whole_events", lambda b: [e + b"\n\n" for e in b.split(b"\n\n") if e])):
        reads = [split(b) for b in bodies] * 20
        count = sum(len(r) for r in reads)
        best = float("inf")
        for _ in range(rounds):
            start = time.process_time()
            for body in reads:
                decoder = SSEDecoder()
                for chunk in body:
                    decoder.feed(chunk)
                decoder.flush()
            best = min(best, time.process_time() - start)
        out[f"{name}_us_per_read"] = round(best / count * 1e6, 3)
    return out


def long_line(mib: int) -> dict[str, float]:
    chunk = b"x" * 16384
    count = mib * 1024 * 1024 // len(chunk)
    decoder = SSEDecoder(max_line_bytes=(mib + 1) << 20, max_event_bytes=(mib + 1) << 20)
    start = time.process_time()
    decoder.feed(b"data: ")
    for _ in range(count):
        decoder.feed(chunk)
    buffered = time.process_time() - start
    capped = SSEDecoder()
    start = time.process_time()
    try:
        capped.feed(b"data: ")
        for _ in range(count):
            capped.feed(chunk)
    except ValueError:
        pass
    return {"long_line_mib": mib, "buffered_cpu_s": round(buffered, 3),
            "capped_cpu_s": round(time.process_time() - start, 4)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--line-mib", type=int, default=64)
    args = parser.parse_args()
    result = per_chunk(args.rounds)
    if "max_line_bytes" in SSEDecoder.__init__.__code__.co_varnames:
        result.update(long_line(args.line_mib))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
