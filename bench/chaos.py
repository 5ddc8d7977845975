"""The chaos soak: three gateway replicas behind nginx, a private Redis (one, or a cluster with
--cluster), PostgreSQL (a database of its own) and a fake upstream with realistic pacing and faults;
a seeded load of streams whose readers disconnect and resume at random ids through the balancer or
straight to any replica, cancels sent to other replicas, and a fault schedule (SIGTERM and SIGKILL
of replicas with restarts, an upstream outage, a Redis restart). Checks invariants on every stream
and prints figures; exits 1 on any broken invariant. The last line reads
`chaos: <N> streams, <F> faults, <B> broken invariants`.

Invariants: every started stream ends with exactly one final; the ids a reader sees over all its
resumes are contiguous from 1 to the final's, and an id read twice carries the same frame; every
run has exactly one run record whose output tokens equal its final's (billed once); the key's
spend counter in Redis equals the sum of its records' cost.

Profiles: `--profile short` (the default, what `make chaos` and CI run: ~2 minutes, 300 streams)
and `--profile long` (20 minutes, 4000 streams, every fault kind). `--faults` picks the fault
kinds: `term` and `kill` (a replica SIGTERMed or SIGKILLed, then restarted), `upstream` (the fake
upstream down for 4 s), `redis` (a Redis restart; it also resets INFO commandstats, which the
figures read). Default: all four, in both profiles.
Usage: `python bench/chaos.py [--profile short|long] [--cluster] [--faults term,kill,upstream,redis]
[--seed 7] [--json out.json]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.chaos_fleet import Fleet  # noqa: E402

PROFILES = {"short": {"streams": 300, "duration": 60.0}, "long": {"streams": 4000, "duration": 1200.0}}
T0 = time.monotonic()
"""The soak's start: the times of a stream's timeline and of the faults count from it."""
MIX = [("paced", 0.76), ("stall", 0.08), ("reset", 0.08), ("limit", 0.08)]


@dataclass
class Stream:
    """What one stream's reader saw."""

    n: int
    kind: str
    tokens: int
    started: float = 0.0
    sid: str | None = None
    refused: str | None = None
    frames: dict[int, tuple[str, bytes]] = field(default_factory=dict)
    ttft: float | None = None
    gaps: list[tuple[float, float]] = field(default_factory=list)  # (time the gap ended, seconds)
    resumes: int = 0
    cancelled: bool = False
    broken: list[str] = field(default_factory=list)
    timeline: list[str] = field(default_factory=list)
    """What the reader did and got, with times from the soak's start (printed when it broke)."""

    def note(self, text: str) -> None:
        self.timeline.append(f"{time.monotonic() - T0:7.2f} {text}")

    @property
    def finals(self) -> list[int]:
        return [i for i, (event, _) in self.frames.items() if event == "final"]

    def final(self) -> dict[str, Any] | None:
        finals = self.finals
        return orjson.loads(self.frames[finals[0]][1]) if finals else None


def plan(seed: int, streams: int, duration: float) -> list[tuple[float, Stream]]:
    """The load, seeded: when each stream starts, what the upstream does with it, how long it is."""
    rng = random.Random(seed)
    kinds, weights = zip(*MIX, strict=True)
    out = []
    for n in range(streams):
        at = duration * 0.9 * n / streams + rng.uniform(0, 0.3)
        out.append((at, Stream(n=n, kind=rng.choices(kinds, weights)[0], tokens=rng.randint(60, 200))))
    return out


def fault_plan(kinds: list[str], duration: float, replicas: int) -> list[tuple[float, str, int]]:
    """The fault schedule: each kind at its own moments, spread over the load, deterministic."""
    slots = {"term": [0.15, 0.55], "kill": [0.3, 0.75], "upstream": [0.42], "redis": [0.65]}
    out = []
    for k, kind in enumerate(kinds):
        for j, fraction in enumerate(slots[kind]):
            out.append((duration * fraction, kind, (k + j) % replicas))
    return sorted(out)


def parse_frames(buffer: bytes) -> tuple[list[tuple[int, str, bytes]], bytes]:
    """Whole SSE frames of a buffer (id, event, data), and the rest."""
    frames = []
    while (end := buffer.find(b"\n\n")) >= 0:
        block, buffer = buffer[:end], buffer[end + 2:]
        fid, event, data = None, "message", b""
        for line in block.split(b"\n"):
            if line.startswith(b"id: "):
                fid = int(line[4:])
            elif line.startswith(b"event: "):
                event = line[7:].decode()
            elif line.startswith(b"data: "):
                data = line[6:]
        if fid is not None:
            frames.append((fid, event, data))
    return frames, buffer


class Load:
    """Runs the planned streams against the fleet and checks what each reader sees."""

    def __init__(self, fleet: Fleet, key: str, seed: int) -> None:
        self.fleet, self.key, self.rng = fleet, key, random.Random(seed + 1)
        self.headers = {"authorization": f"Bearer {key}"}
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(30, read=20),
                                        limits=httpx.Limits(max_connections=500, max_keepalive_connections=100))

    async def run(self, stream: Stream) -> None:
        rng = random.Random(self.rng.random())
        stream.started = time.monotonic()
        body = {"model": f"chaos/{stream.kind}-{stream.tokens}", "stream": True,
                "messages": [{"role": "user", "content": f"chaos {stream.n}"}]}
        for _ in range(20):  # a start refused before any run began (503 while a replica drains) is retried
            try:
                r = await self.client.post(f"{self.fleet.front}/v1/generate", json=body, headers=self.headers)
            except httpx.TransportError:
                r = None
            stream.note(f"start -> {r.status_code if r is not None else 'transport error'}")
            if r is not None and r.status_code == 202:
                stream.sid = r.json()["stream_id"]
                break
            stream.refused = f"{r.status_code}" if r is not None else "transport"
            if r is not None and r.status_code < 500:  # an honest refusal (the upstream's 429): no stream
                return
            await asyncio.sleep(0.5)
        else:
            return
        stream.refused = None
        await self.read(stream, rng)

    async def read(self, stream: Stream, rng: random.Random) -> None:
        deadline = time.monotonic() + 90
        last = 0
        cancel_at = rng.randint(2, 40) if rng.random() < 0.06 else None
        while not stream.finals and time.monotonic() < deadline:
            after = last if stream.resumes == 0 or rng.random() < 0.5 else rng.randint(0, last)
            base = self.fleet.front if rng.random() < 0.6 else rng.choice(self.fleet.live_urls() or [self.fleet.front])
            leave = rng.randint(3, 60) if rng.random() < 0.35 else None
            try:
                last = await self._read_once(stream, f"{base}/v1/stream/{stream.sid}?after={after}", leave,
                                             cancel_at, last)
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                stream.note(f"  read ended: {type(exc).__name__}")
                await asyncio.sleep(0.3)
            if cancel_at is not None and max(stream.frames, default=0) >= cancel_at and not stream.cancelled:
                await self.cancel(stream, rng)
            if not stream.finals:
                stream.resumes += 1
        if not stream.finals:
            stream.broken.append("no final within 90 s")

    async def _read_once(self, stream: Stream, url: str, leave: int | None, cancel_at: int | None,
                         last: int) -> int:
        read = 0
        port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1]
        where = "front" if url.startswith(self.fleet.front) else f"replica {self.fleet.index_of(int(port))}"
        stream.note(f"GET {where} after={url.rsplit('=', 1)[1]}")
        async with self.client.stream("GET", url, headers=self.headers) as r:
            if r.status_code != 200:
                stream.note(f"  -> {r.status_code}")
            if r.status_code in (502, 503, 404):  # a replica away, a store away: resume later
                await asyncio.sleep(0.3)
                return last
            if r.status_code == 410:
                await r.aread()
                stream.broken.append(f"resume after {url.rsplit('=', 1)[1]}: 410 {r.text[:120]}")
                raise httpx.HTTPStatusError("410", request=r.request, response=r)
            r.raise_for_status()
            buffer, previous = b"", None
            async for chunk in r.aiter_bytes():
                frames, buffer = parse_frames(buffer + chunk)
                for fid, event, data in frames:
                    now = time.monotonic()
                    self._take(stream, fid, event, data)
                    if event == "token":
                        stream.ttft = stream.ttft or now - stream.started
                        if previous is not None:
                            stream.gaps.append((now, now - previous))
                        previous = now
                    last, read = max(last, fid), read + 1
                if stream.finals or (leave is not None and read >= leave):
                    stream.note(f"  read {read} frames, up to id {last}" + (" (the final)" if stream.finals else
                                                                              " (the reader leaves)"))
                    break
                if cancel_at is not None and last >= cancel_at and not stream.cancelled:
                    break
            else:
                stream.note(f"  body ended after {read} frames, up to id {last}")
        return last

    def _take(self, stream: Stream, fid: int, event: str, data: bytes) -> None:
        seen = stream.frames.get(fid)
        if seen is not None:
            if seen != (event, data) and event != "ping":
                stream.broken.append(f"id {fid} read twice with different frames")
            return
        stream.frames[fid] = (event, data)  # holes are checked once the stream ended (check_stream)

    async def cancel(self, stream: Stream, rng: random.Random) -> None:
        stream.cancelled = True
        urls = self.fleet.live_urls()
        if not urls:
            return
        try:
            r = await self.client.post(f"{rng.choice(urls)}/v1/stream/{stream.sid}/cancel", headers=self.headers)
        except httpx.TransportError:
            return
        stream.note(f"cancel -> {r.status_code} {r.text[:80]}")
        if r.status_code not in (200, 503):
            stream.broken.append(f"cancel answered {r.status_code}")

    async def aclose(self) -> None:
        await self.client.aclose()


def check_stream(stream: Stream) -> None:
    if stream.sid is None:
        return
    finals = stream.finals
    if len(finals) != 1:
        stream.broken.append(f"{len(finals)} finals")
        return
    if sorted(stream.frames) != list(range(1, finals[0] + 1)):
        missing = sorted(set(range(1, finals[0] + 1)) - set(stream.frames))[:5]
        stream.broken.append(f"ids not contiguous up to the final {finals[0]} (missing {missing})")


async def run_load(fleet: Fleet, key: str, streams: list[tuple[float, Stream]], seed: int) -> None:
    load = Load(fleet, key, seed)
    t0 = time.monotonic()

    async def one(at: float, stream: Stream) -> None:
        await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
        await load.run(stream)

    try:
        await asyncio.gather(*(one(at, s) for at, s in streams))
    finally:
        await load.aclose()


async def inject(fleet: Fleet, faults: list[tuple[float, str, int]], windows: list[tuple[float, float, str]],
                 settle: float) -> None:
    """Each fault at its planned time, and never before the fleet has settled after the last one:
    the soak injects single faults. A fault's recovery (a replica restarted, Redis back) takes a
    while; the next one waits for it plus `settle` (two leases: every owner has written back what
    a Redis restarted empty lost, every follower has claimed what a dead owner left). Two faults
    inside that window (Redis restarted empty, then the one replica that held a stream killed
    before it could write it back) lose what only those two held: docs/scaling.md says so."""
    t0 = time.monotonic()
    ready = t0
    for at, kind, index in faults:
        await asyncio.sleep(max(0.0, t0 + at - time.monotonic(), ready - time.monotonic()))
        started = time.monotonic()
        await fleet.fault(kind, index)
        ready = time.monotonic() + settle
        windows.append((started, time.monotonic() + 2.0, kind))
        FAULTS.append(f"{started - T0:7.2f}..{time.monotonic() - T0:.2f} {kind}"
                      + (f" replica {index}" if kind in ("term", "kill") else ""))


FAULTS: list[str] = []
"""The faults injected, with their times (printed with a broken stream's timeline)."""


def timelines(streams: list[Stream], fleet: Fleet, most: int = 12) -> list[str]:
    """Each broken stream's timeline (what its reader did and got, when) and what Redis holds of
    it; with the faults' times in the figures, enough to find the cause from CI's log alone."""
    broken = [s for s in streams if s.broken]
    lines = []
    for s in broken[:most]:
        lines.append(f"stream {s.sid or s.n} ({s.kind}, {s.tokens} tokens): {'; '.join(s.broken)[:300]}")
        if s.sid is not None:
            lines.append(f"  {fleet.stream_state(s.sid)}")
        shown = s.timeline if len(s.timeline) <= 80 else [*s.timeline[:50], f"... ({len(s.timeline) - 80} lines)",
                                                           *s.timeline[-30:]]
        lines += [f"  {t}" for t in shown]
    return lines


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def soak(args: argparse.Namespace) -> int:
    profile = PROFILES[args.profile]
    n_streams = args.streams or profile["streams"]
    duration = args.duration or profile["duration"]
    kinds = [k for k in args.faults.split(",") if k]
    async with Fleet.up(cluster=args.cluster, replicas=3, log_level=args.log_level) as fleet:
        key = await fleet.make_key()
        streams = plan(args.seed, n_streams, duration)
        faults = fault_plan(kinds, duration, 3)
        windows: list[tuple[float, float, str]] = []
        before, memory = fleet.commandstats(), fleet.redis_memory()
        global T0
        T0 = time.monotonic()
        await asyncio.gather(run_load(fleet, key, streams, args.seed),
                             inject(fleet, faults, windows, settle=2 * fleet.lease_seconds))
        ops = {k: v - before.get(k, 0) for k, v in fleet.commandstats().items()}
        ops["_memory_growth"] = fleet.redis_memory() - memory
        await fleet.stop_replicas()  # SIGTERM: records flushed, counters settled
        records = await fleet.records()
        spend = await fleet.spend_counter()
        return report(args, [s for _, s in streams], windows, records, spend, ops, fleet)  # logs still there


def check_records(streams: list[Stream], records: dict[str, dict[str, Any]], spend: float | None,
                  broken: list[str]) -> None:
    for stream in streams:
        if stream.sid is None:
            continue
        record = records.get(stream.sid)
        final = stream.final()
        if record is None:
            broken.append(f"{stream.sid}: no run record (final {final and final.get('status')})")
            continue
        if final is not None and record["status"] != final.get("status"):
            broken.append(f"{stream.sid}: the reader's final says {final.get('status')}, the run record "
                          f"{record['status']}")
        usage = (final or {}).get("usage") or {}
        if final is not None and usage.get("output_tokens") is not None \
                and record["output_tokens"] != usage["output_tokens"]:
            broken.append(f"{stream.sid}: record bills {record['output_tokens']} output tokens, the final "
                          f"{usage['output_tokens']}")
    recorded = sum(r["cost_usd"] or 0.0 for r in records.values())
    if spend is not None and abs(spend - recorded) > 1e-9 + 1e-6 * recorded:
        broken.append(f"the key's spend counter is {spend:.9f} USD, its records sum to {recorded:.9f}")


def report(args: argparse.Namespace, streams: list[Stream], windows: list[tuple[float, float, str]],
           records: dict[str, dict[str, Any]], spend: float | None, ops: dict[str, int], fleet: Fleet) -> int:
    broken: list[str] = []
    for stream in streams:
        check_stream(stream)
        broken += [f"{stream.sid or stream.n}: {b}" for b in stream.broken]
    check_records(streams, records, spend, broken)
    started = [s for s in streams if s.sid is not None]
    finished = [s for s in started if len(s.finals) == 1]
    statuses: dict[str, int] = {}
    for s in finished:
        final = s.final() or {}
        name = final.get("status", "?") + ("" if final.get("status") == "ok" else
                                           ":" + str((final.get("error") or {}).get("code")))
        statuses[name] = statuses.get(name, 0) + 1
    refused: dict[str, int] = {}
    for s in streams:
        if s.sid is None:
            refused[f"{s.kind}:{s.refused}"] = refused.get(f"{s.kind}:{s.refused}", 0) + 1
    events = sum(max(s.frames, default=0) for s in started)
    during = [g for s in started for end, g in s.gaps if any(a <= end <= b for a, b, _ in windows)]
    outside = [g for s in started for end, g in s.gaps if not any(a <= end <= b for a, b, _ in windows)]
    ttft = [s.ttft for s in started if s.ttft is not None]
    figures = {
        "profile": args.profile, "seed": args.seed, "redis": "cluster" if args.cluster else "single",
        "streams": len(streams), "started": len(started), "refused": refused,
        "finished": len(finished), "faults": len(windows), "fault_kinds": sorted({k for _, _, k in windows}),
        "finals_per_stream": sorted({len(s.finals) for s in started}), "final_statuses": statuses,
        "resumes": sum(s.resumes for s in started), "cancels": sum(s.cancelled for s in started),
        "events": events, "runs_recorded": len(records),
        "ttft_ms_p50": round(percentile(ttft, 0.5) * 1000, 1), "ttft_ms_p99": round(percentile(ttft, 0.99) * 1000, 1),
        "gap_ms_p50": round(percentile(outside, 0.5) * 1000, 1), "gap_ms_p99": round(percentile(outside, 0.99) * 1000, 1),
        "added_gap_ms_p99_during_faults": round((percentile(during, 0.99) - percentile(outside, 0.99)) * 1000, 1),
        "redis_retained_kib_per_stream": round(ops.pop("_memory_growth") / 1024 / max(1, len(started)), 1),
        "redis_ops": sum(ops.values()), "redis_ops_per_event": round(sum(ops.values()) / max(1, events), 3),
        "redis_top_commands": dict(sorted(ops.items(), key=lambda kv: -kv[1])[:8]),
        "gateway_cpu_s": round(fleet.cpu_total, 2),
        "gateway_cpu_ms_per_stream": round(fleet.cpu_total * 1000 / max(1, len(started)), 2),
        "gateway_cpu_us_per_event": round(fleet.cpu_total * 1e6 / max(1, events), 1),
        "gateway_rss_mib_peak": round(fleet.rss_peak / 2**20, 1),
        "faults_at": [f.strip() for f in FAULTS],
        "broken": broken[:50],
    }
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    for name, value in figures.items():
        if name != "broken":
            print(f"{name}: {value}")
    for line in broken[:50]:
        print(f"BROKEN {line}")
    for line in timelines(streams, fleet):
        print(f"TIMELINE {line}")
    if broken:
        print(f"TIMELINE replica logs: {fleet.keep_logs()}")
    print(f"chaos: {len(streams)} streams, {len(windows)} faults, {len(broken)} broken invariants")
    return 1 if broken else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="short")
    parser.add_argument("--streams", type=int, default=0, help="override the profile's number of streams")
    parser.add_argument("--duration", type=float, default=0.0, help="override the profile's load seconds")
    parser.add_argument("--faults", default="term,kill,upstream,redis", help="comma-separated: term,kill,upstream,redis")
    parser.add_argument("--cluster", action="store_true", help="a three-master Redis Cluster instead of one Redis")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--log-level", default="warning", help="the replicas' FOUNDRY_LOG_LEVEL (their logs are "
                        "kept, and their folder printed, when an invariant broke)")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    return asyncio.run(soak(args))


if __name__ == "__main__":
    sys.exit(main())
