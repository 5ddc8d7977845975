"""A hostile upstream against a gateway process (uvicorn, loopback): what it costs the gateway.

- `gzip_error`: one request answered 500 with a gzip body that inflates to `--mib` MiB (306 KB on
  the wire for 300 MiB): the gateway's peak RSS (VmHWM) before and after, and its answer's size.
- `long_line`: one request answered 200 `text/event-stream` whose body is one `data:` line of
  `--mib` MiB: the gateway's CPU seconds for it, the bytes the upstream sent before the gateway
  let go, and the slowest `/healthz` asked meanwhile (one after another, from another client).
- `long_line_buffered`: the same with FOUNDRY_UPSTREAM_MAX_EVENT_BYTES above the line, so the
  whole line is buffered (the decoder's linear buffering, not the cap, is measured).
- `blank_lines`: one request answered 200 `text/event-stream` with a gzip body of `--mib` MiB of
  `\n` (about 1 KB on the wire per MiB): the gateway's CPU, its answer, the slowest `/healthz`.
- `interim_heads`: one request answered by `--heads` `HTTP/1.1 100 Continue` heads, then a short
  stream: the gateway's CPU for them (aiohttp's client skips each), the slowest `/healthz`.

`--root DIR` runs the gateway from another checkout (e.g. the code before the bounds, for the
before/after figures). Usage: `python bench/hostile_bench.py [--mib 300] [--root DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run import cpu_seconds, emit, free_port, server  # noqa: E402
from tests.hostile_upstream import HostileUpstream, endless_line, gzip_bomb, raw_answer  # noqa: E402


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


class _Upstream:
    """A HostileUpstream served from a thread of its own (its own event loop)."""

    def __init__(self, answer: Any) -> None:
        self.hostile = HostileUpstream(answer)
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._serve(),), daemon=True)

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with self.hostile:
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> HostileUpstream:
        self._thread.start()
        self._ready.wait(30)
        return self.hostile

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


def _gateway_env(upstream: str, **extra: str) -> dict[str, str]:
    return {"OPENAI_API_KEY": "bench-key-0123456789", "OPENAI_BASE_URL": upstream + "/v1",
            "FOUNDRY_UPSTREAM_MAX_RETRIES": "0", "FOUNDRY_RECORDS": "false", **extra}


ASK = {"model": "openai/m", "messages": [{"role": "user", "content": "bench"}]}


def gzip_error(mib: int, root: Path) -> dict[str, Any]:
    bomb = gzip_bomb(mib, prefix=b'{"error": {"type": "api_error", "message": "', suffix=b'"}}')
    answer = raw_answer(500, bomb, [("content-encoding", "gzip"), ("content-type", "application/json")])
    with _Upstream(answer) as upstream, server("app.main:app", port := free_port(), _gateway_env(upstream.url),
                                                cwd=root) as proc:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            client.get("/healthz")
            before = _peak_rss(proc.pid)
            started = time.monotonic()
            response = client.post("/v1/generate", json=ASK)
            seconds = time.monotonic() - started
            after = _peak_rss(proc.pid)
    return {"wire_bytes": len(bomb), "inflated_mib": mib, "status": response.status_code,
            "answer_bytes": len(response.content), "peak_rss_before_mib": round(before / 2**20, 1),
            "peak_rss_after_mib": round(after / 2**20, 1), "seconds": round(seconds, 2)}


def long_line(mib: int, root: Path, **extra: str) -> dict[str, Any]:
    with _Upstream(endless_line(mib << 20, step=1 << 16)) as upstream, \
            server("app.main:app", port := free_port(), _gateway_env(upstream.url, **extra), cwd=root) as proc:
        base = f"http://127.0.0.1:{port}"
        outcome: dict[str, Any] = {}

        def run() -> None:
            with httpx.Client(base_url=base, timeout=900) as client:
                response = client.post("/v1/generate", json=ASK)
                outcome["status"] = response.status_code
                outcome["code"] = response.json().get("error", {}).get("code")

        cpu_before = cpu_seconds(proc.pid)
        started = time.monotonic()
        thread = threading.Thread(target=run)
        thread.start()
        slowest, asked = 0.0, 0
        with httpx.Client(base_url=base, timeout=900) as probe:
            while thread.is_alive():
                t0 = time.perf_counter()
                probe.get("/healthz")
                slowest = max(slowest, time.perf_counter() - t0)
                asked += 1
                time.sleep(0.01)
        thread.join()
        seconds = time.monotonic() - started
        cpu = cpu_seconds(proc.pid) - cpu_before
        sent = upstream.seen[0].sent if upstream.seen else 0
    return {**outcome, "line_mib": mib, "upstream_sent_mib": round(sent / 2**20, 2), "gateway_cpu_s": round(cpu, 2),
            "seconds": round(seconds, 2), "healthz_asked": asked, "healthz_slowest_ms": round(slowest * 1000, 1)}


def _probed(base: str, upstream: HostileUpstream, proc: Any) -> dict[str, Any]:
    """One generate against the gateway while /healthz is asked one after another: its outcome,
    the gateway's CPU, the slowest /healthz."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        with httpx.Client(base_url=base, timeout=900) as client:
            response = client.post("/v1/generate", json=ASK)
            outcome["status"] = response.status_code
            outcome["code"] = response.json().get("error", {}).get("code")

    cpu_before = cpu_seconds(proc.pid)
    started = time.monotonic()
    thread = threading.Thread(target=run)
    thread.start()
    slowest, asked = 0.0, 0
    with httpx.Client(base_url=base, timeout=900) as probe:
        while thread.is_alive():
            t0 = time.perf_counter()
            probe.get("/healthz")
            slowest = max(slowest, time.perf_counter() - t0)
            asked += 1
            time.sleep(0.01)
    thread.join()
    return {**outcome, "gateway_cpu_s": round(cpu_seconds(proc.pid) - cpu_before, 2),
            "seconds": round(time.monotonic() - started, 2), "healthz_asked": asked,
            "healthz_slowest_ms": round(slowest * 1000, 1)}


def blank_lines(mib: int, root: Path) -> dict[str, Any]:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = b"".join([*(compressor.compress(b"\n" * (1 << 20)) for _ in range(mib)), compressor.flush()])
    answer = raw_answer(200, body, [("content-type", "text/event-stream"), ("content-encoding", "gzip")])
    with _Upstream(answer) as upstream, server("app.main:app", port := free_port(), _gateway_env(upstream.url),
                                                cwd=root) as proc:
        return {"wire_bytes": len(body), "inflated_mib": mib, **_probed(f"http://127.0.0.1:{port}", upstream, proc)}


_SHORT_STREAM = (b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
                 b'"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')


def interim_heads(heads: int, root: Path) -> dict[str, Any]:
    async def answer(seen: Any, writer: asyncio.StreamWriter) -> None:
        block = b"HTTP/1.1 100 Continue\r\n\r\n" * 1000
        for _ in range(heads // 1000):
            writer.write(block)
            await writer.drain()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + _SHORT_STREAM)
        await writer.drain()
        writer.close()

    with _Upstream(answer) as upstream, server("app.main:app", port := free_port(), _gateway_env(upstream.url),
                                                cwd=root) as proc:
        return {"heads": heads, **_probed(f"http://127.0.0.1:{port}", upstream, proc)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=300)
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--heads", type=int, default=100_000)
    parser.add_argument("--only", choices=["gzip_error", "long_line", "long_line_buffered", "blank_lines",
                                           "interim_heads"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs = {
        "gzip_error": lambda: gzip_error(args.mib, args.root),
        "long_line": lambda: long_line(args.mib, args.root),
        "long_line_buffered": lambda: long_line(args.mib, args.root,
                                                FOUNDRY_UPSTREAM_MAX_EVENT_BYTES=str((args.mib + 64) << 20)),
        "blank_lines": lambda: blank_lines(args.mib, args.root),
        "interim_heads": lambda: interim_heads(args.heads, args.root),
    }
    results = {name: run() for name, run in runs.items() if args.only in (None, name)}
    emit({"root": str(args.root), **results}, args.json)


if __name__ == "__main__":
    main()
