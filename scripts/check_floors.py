"""Check that the lowest version of every direct dependency that pyproject.toml allows works.

Creates a throwaway virtualenv, installs `[project.dependencies]` read from pyproject.toml with
uv's `--resolution lowest-direct` (each direct dependency at its floor, the rest as resolved),
then imports the app and runs a smoke test in it (scripts/floors_smoke.py): the lifespan, GET
/healthz, POST /v1/stream with `mock/simple` ending in a `final`. A `>=` that is not true fails
here rather than for the first user who installs it.

Usage: `python scripts/check_floors.py [--keep DIR]` (`make floors`); exit status 1 on failure.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UV = "uv>=0.5,<1"  # the installer only, in the throwaway venv


def run(*cmd: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, text=True, **kwargs)  # type: ignore[call-overload]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="build the venv here and keep it (default: a temporary folder)")
    args = parser.parse_args()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"]
    with tempfile.TemporaryDirectory(prefix="floors-") as tmp:
        where = args.keep or Path(tmp)
        venv = where / "venv"
        python = venv / "bin" / "python"
        run(sys.executable, "-m", "venv", "--clear", venv)
        run(python, "-m", "pip", "install", "--quiet", UV)
        reqs = where / "requirements-floors.txt"
        reqs.write_text("\n".join(requirements) + "\n")
        run(venv / "bin" / "uv", "pip", "install", "--quiet", "--python", python, "--resolution", "lowest-direct",
            "-r", reqs)
        frozen = run(venv / "bin" / "uv", "pip", "freeze", "--python", python, capture_output=True).stdout
        installed = {_name(line): line.split("==", 1)[1] for line in frozen.splitlines() if "==" in line}
        lifted = []
        for requirement in requirements:
            name, floor = _name(requirement), _floor(requirement)
            print(f"  {name}: floor {floor}, installed {installed.get(name)}")
            if floor is not None and _release(installed.get(name, "")) != _release(floor):
                lifted.append(f"{name}>={floor} installed {installed.get(name)}")
        if lifted:  # another dependency needs more: the declared floor cannot be installed, so it is not true
            print("FAILED: floors that cannot be installed with the others (raise them):", "; ".join(lifted),
                  file=sys.stderr)
            return 1
        try:
            run(python, ROOT / "scripts" / "floors_smoke.py", cwd=ROOT, env={"PYTHONPATH": str(ROOT),
                                                                          "FOUNDRY_DATA_DIR": str(where / "var"),
                                                                          "PATH": "/usr/bin:/bin"})
        except subprocess.CalledProcessError:
            print("FAILED: the app does not work at its declared floors (see above)", file=sys.stderr)
            return 1
    print("floors OK")
    return 0


def _floor(requirement: str) -> str | None:
    """`fastapi>=0.132,<1` -> `0.132`; None without a `>=`."""
    for part in requirement.split(";")[0].split(","):
        if ">=" in part:
            return part.split(">=", 1)[1].strip()
    return None


def _release(version: str) -> tuple[int, ...]:
    """`2.12.0` and `2.12` compare equal (trailing zeros dropped); pre-releases are not floors here."""
    parts = [int(p) for p in version.split(".") if p.isdigit()]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _name(requirement: str) -> str:
    """`openai[aiohttp]>=3.54,<4` -> `openai` (normalised as PyPI compares names)."""
    name = requirement.split(";")[0]
    for stop in "[<>=!~ ":
        name = name.split(stop)[0]
    return name.strip().lower().replace("_", "-").replace(".", "-")


if __name__ == "__main__":
    sys.exit(main())
