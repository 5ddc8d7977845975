"""Cost of the validation gate, in process (no HTTP): CPU per chunk and added latency per token.

A synthetic answer (sentences with abbreviations, numbers, URLs) is cut into ~4-character
tokens and fed through `ValidationGate.admit`/`finish` as fast as possible. Reported per setup:

- CPU per chunk and per token (process time over the whole stream);
- hold per released token: how many later tokens had to arrive before it went out (a token
  waits for the end of its sentence), and the wall time from its admit to its release. At a
  real upstream's pace the added latency is about hold x the inter-token interval;
- with no validators `build_gate` returns None and the pipeline skips the gate: zero cost.

Usage: `python bench/gate_bench.py [--tokens 200000] [--json out.json]`. Prints numbers only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.events import TokenEvent
from app.validation import ValidatorSpec, build_gate

_WORDS = (
    "the gateway holds each token until its sentence passed every validator and then releases it whole "
    "streams arrive from many providers with different framing yet one canonical event stream comes out"
).split()
_EXTRAS = ["e.g.", "Dr.", "3.14", "v1.2.3", "https://example.com/a.b", "approx.", "U.S.", "42"]

SETUPS: dict[str, tuple[str, list[ValidatorSpec]]] = {
    "sentence + 2 regex": ("sentence", [
        ValidatorSpec(name="regex_deny", config={"patterns": [r"(?i)\bpassword\b"]}),
        ValidatorSpec(name="regex_deny", config={"patterns": [r"sk-[A-Za-z0-9]{20,}"]}),
    ]),
    "word + 2 regex": ("word", [
        ValidatorSpec(name="regex_deny", config={"patterns": [r"(?i)\bpassword\b"]}),
        ValidatorSpec(name="regex_deny", config={"patterns": [r"sk-[A-Za-z0-9]{20,}"]}),
    ]),
    "sentence + all rules": ("sentence", [
        ValidatorSpec(name="regex_deny", config={"patterns": [r"(?i)\bpassword\b", r"sk-[A-Za-z0-9]{20,}"]}),
        ValidatorSpec(name="banned_words", config={"words": ["darn", "heck", "big bad wolf"]}),
        ValidatorSpec(name="pii", config={"action": "redact"}),
        ValidatorSpec(name="max_length", config={"max": 10_000_000}),
    ]),
}


def synthetic_tokens(n: int, seed: int = 7) -> list[TokenEvent]:
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n * 4:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 22))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), rng.choice(_EXTRAS))
        sentence = " ".join(words).capitalize() + rng.choice([". ", ". ", "! ", "? ", ".\n"])
        parts.append(sentence)
        size += len(sentence)
    text = "".join(parts)[: n * 4]
    return [TokenEvent(index=i, content=text[i * 4:(i + 1) * 4]) for i in range(n)]


def _gate(chunking: str, specs: list[ValidatorSpec]):
    gate = build_gate(request_specs=specs, operator_specs=[], chunking=chunking, tools=(), judge=None)
    assert gate is not None
    return gate


async def cpu(chunking: str, specs: list[ValidatorSpec], events: list[TokenEvent]) -> dict[str, float]:
    """Process time of admit/finish alone (no timing calls inside the loop)."""
    gate = _gate(chunking, specs)
    released = 0
    cpu0 = time.process_time()
    for event in events:
        released += len(await gate.admit(event))
    released += len(await gate.finish())
    spent = time.process_time() - cpu0
    assert released == len(events)
    chunks = gate.summary()["chunks"]["text"]
    return {"chunks": chunks, "cpu_us_per_chunk": spent / chunks * 1e6, "cpu_us_per_token": spent / len(events) * 1e6}


async def latency(chunking: str, specs: list[ValidatorSpec], events: list[TokenEvent]) -> dict[str, float]:
    gate = _gate(chunking, specs)
    admitted_at = [0.0] * len(events)
    waits: list[float] = []
    holds: list[int] = []
    for n, event in enumerate(events):
        admitted_at[n] = time.perf_counter()
        for out in await gate.admit(event):
            waits.append(time.perf_counter() - admitted_at[out.index])
            holds.append(n - out.index)
    for out in await gate.finish():
        waits.append(time.perf_counter() - admitted_at[out.index])
        holds.append(len(events) - out.index)
    return {
        "hold_tokens_mean": statistics.fmean(holds),
        "hold_tokens_p95": statistics.quantiles(holds, n=20)[-1],
        "wait_us_per_token_mean": statistics.fmean(waits) * 1e6,
        "wait_us_per_token_p95": statistics.quantiles(waits, n=20)[-1] * 1e6,
    }


async def baseline(events: list[TokenEvent]) -> dict[str, float]:
    """No validators: build_gate gives None and the pipeline appends events directly."""
    assert build_gate(request_specs=[], operator_specs=[], chunking=None, tools=(), judge=None) is None
    out: list[TokenEvent] = []
    cpu0 = time.process_time()
    for event in events:
        out.append(event)
    return {"cpu_us_per_token": (time.process_time() - cpu0) / len(events) * 1e6}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=200_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    events = synthetic_tokens(args.tokens)
    results: dict[str, dict[str, float]] = {"no validators (gate skipped)": await baseline(events)}
    for name, (chunking, specs) in SETUPS.items():
        await cpu(chunking, specs, events[:2000])  # warm up
        results[name] = {**await cpu(chunking, specs, events), **await latency(chunking, specs, events)}
    print(f"{args.tokens} tokens of ~4 characters, in process\n")
    for name, r in results.items():
        print(f"{name}:")
        for key, value in r.items():
            print(f"  {key:24} {value:,.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
