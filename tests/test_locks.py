"""The two hashed locks (`make lock`): the runtime one serves (`make run`, the Dockerfile) and holds
no test or docs tool; the dev one adds those at the same versions, so the tests run what serves."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.support import REPO

RUNTIME = REPO / "requirements" / "runtime.lock.txt"
DEV = REPO / "requirements" / "dev.lock.txt"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _pins(path: Path) -> dict[str, str]:
    """name -> version for each requirement; each must carry a hash (pip's --require-hashes needs all)."""
    entries = re.split(r"\n(?=[A-Za-z0-9])", path.read_text().strip())
    pins = {}
    for entry in entries:
        match = _PIN.match(entry)
        assert match, f"{path.name}: not an exact pin: {entry.splitlines()[0]!r}"
        assert "--hash=sha256:" in entry, f"{path.name}: {match.group(1)} has no hash"
        pins[_name(match.group(1))] = match.group(2)
    return pins


def _declared() -> tuple[list[str], list[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = [r for group in ("test", "docs") for r in project["optional-dependencies"][group]]
    return [_name(r) for r in project["dependencies"]], [_name(r) for r in extras]


def test_the_runtime_lock_is_the_dev_lock_without_the_tools() -> None:
    runtime, dev = _pins(RUNTIME), _pins(DEV)
    declared, tools = _declared()
    assert [name for name in declared if name not in runtime] == []
    assert [name for name in (*declared, *tools) if name not in dev] == []
    assert {name: (version, dev.get(name)) for name, version in runtime.items() if dev.get(name) != version} == {}
    # What only tests and docs use stays out of what serves (pyyaml is runtime too: uvicorn's).
    assert sorted(set(tools) & set(runtime)) == ["pyyaml"]


def test_serving_installs_only_the_runtime_lock() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "-r requirements/runtime.lock.txt" in dockerfile and "dev.lock" not in dockerfile
    makefile = (REPO / "Makefile").read_text()
    run_install = makefile.split("$(VENV)/.installed-run:", 1)[1].split("\n\n", 1)[0]
    assert "-r $(RUNTIME_LOCK)" in run_install and "DEV_LOCK" not in run_install
