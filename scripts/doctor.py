"""`make doctor`: how lean this checkout is to install, start and test, measured now.

Prints the runtime install's size (the packages of requirements/runtime.lock.txt, as installed
in this venv), the command line's start time (`--version`, `config check`: the median of a few
runs), and on request the time of `make run` from a fresh clone to the first answer (`--install`:
a clone of HEAD in a temporary folder, the package cache as it is, until POST /v1/generate answers)
and the suites' times (`--suites`: minutes). Each number stands beside
its goal; nothing here fails on a number (timings go with the machine's load).

Usage: `python scripts/doctor.py [--install] [--suites]` (`make doctor`, `make doctor DOCTOR_SUITES=1`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_LOCK = ROOT / "requirements" / "runtime.lock.txt"
BIN = Path(sys.executable).parent
MB = 1_000_000


def _locked_names(lock: Path) -> list[str]:
    return re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", lock.read_text(), re.M)


def _installed_bytes(name: str) -> int:
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return 0
    total = 0
    for file in dist.files or ():
        path = Path(str(dist.locate_file(file)))
        if path.is_file():
            total += path.stat().st_size
    return total


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def install_size() -> None:
    names = _locked_names(RUNTIME_LOCK)
    sizes = sorted(((_installed_bytes(n), n) for n in names), reverse=True)
    runtime = sum(size for size, _ in sizes)
    print(f"runtime install: {len(names)} packages of {RUNTIME_LOCK.relative_to(ROOT)}, {runtime / MB:.0f} MB "
          f"installed (what `make run` and the image add to Python)")
    print("  largest: " + ", ".join(f"{n} {s / MB:.0f} MB" for s, n in sizes[:6]))
    venv = Path(sys.prefix)
    print(f"this venv ({venv}): {_tree_bytes(venv) / MB:.0f} MB (with the test and docs tools when made by "
          f"`make install-test`)")


def _median_seconds(argv: list[str], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cli_start() -> None:
    command = str(BIN / "foundry-gateway")
    for argv in (["--version"], ["--help"], ["config", "check"]):
        seconds = _median_seconds([command, *argv])
        print(f"foundry-gateway {' '.join(argv)}: {seconds:.2f} s (median of 5; goal < 1 s)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _first_answer(port: int, server: subprocess.Popen[bytes], deadline: float) -> None:
    body = json.dumps({"model": "mock/simple", "messages": [{"role": "user", "content": "hi"}]}).encode()
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"doctor: the server exited with status {server.returncode} before answering")
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/generate", data=body,
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.2)  # not listening yet: a poll of a process we do not control
    raise SystemExit("doctor: no answer from the fresh install within 10 minutes")


def fresh_install() -> None:
    """`make run` from a fresh clone of this checkout's HEAD, timed to the first answer."""
    with tempfile.TemporaryDirectory(prefix="doctor-") as tmp:
        clone, start = Path(tmp) / "clone", time.monotonic()
        subprocess.run(["git", "clone", "--quiet", ROOT, clone], check=True)
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VIRTUAL_ENV")}
        server = subprocess.Popen(["make", "run", f"PORT={port}"], cwd=clone, env=env, start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _first_answer(port, server, time.monotonic() + 600)
            total = time.monotonic() - start
        finally:
            os.killpg(server.pid, signal.SIGTERM)  # make and the server it started: their own session
            server.wait(timeout=30)
        print(f"make run from a fresh clone to the first answer: {total:.0f} s (goal < 60 s with a warm pip "
              f"cache); its .venv: {_tree_bytes(clone / '.venv') / MB:.0f} MB")


def suites() -> None:
    for name, marker in (("fast", "not slow"), ("slow", "slow")):
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", marker], cwd=ROOT,
                              capture_output=True, text=True)
        lines = done.stdout.strip().splitlines()
        goal = "; goal < 5 min" if name == "fast" else ""
        print(f"{name} suite: {time.monotonic() - start:.0f} s{goal} ({lines[-1] if lines else 'no output'})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="time a fresh runtime install to the first answer")
    parser.add_argument("--suites", action="store_true", help="time the fast and the slow suite (minutes)")
    args = parser.parse_args()
    install_size()
    cli_start()
    if args.install:
        fresh_install()
    if args.suites:
        suites()
    return 0


if __name__ == "__main__":
    sys.exit(main())
