"""`make test` runs every stage (ruff, mypy, the fast tests, the slow ones) whatever the others gave,
names each that failed on its last line, and exits non-zero if any did; pytest's 5 (a marker that
selected no test) fails no stage. Run against stand-ins for the tools, each saying what it was asked."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO

_STUB = """#!/bin/sh
echo "$(basename "$0") $*" >> "$STAGES_LOG"
case "$(basename "$0") $*" in
  "ruff "*) exit "$RUFF_RC";;
  "mypy"*) exit "$MYPY_RC";;
  *"-m not slow"*) exit "$FAST_RC";;
  *"-m slow"*) exit "$SLOW_RC";;
esac
exit 99
"""


def make_test(tmp_path: Path, *, ruff: int = 0, mypy: int = 0, fast: int = 0, slow: int = 0) -> tuple[int, str, list[str]]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for tool in ("ruff", "mypy", "python", "uv"):  # uv: the installer, present (nothing to install)
        path = venv / "bin" / tool
        path.write_text(_STUB)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (venv / ".installed-test").touch()  # newer than pyproject.toml and the lock: nothing to install
    log = tmp_path / "stages.log"
    outer = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")  # when the suite itself runs under make test
    env = {k: v for k, v in os.environ.items() if k not in outer}
    env.update(STAGES_LOG=str(log), RUFF_RC=str(ruff), MYPY_RC=str(mypy), FAST_RC=str(fast), SLOW_RC=str(slow))
    done = subprocess.run(["make", "--no-print-directory", "test", f"VENV={venv}"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout.strip().splitlines()[-1], log.read_text().splitlines()


pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def test_every_stage_runs_and_each_failure_is_named_at_the_end(tmp_path: Path) -> None:
    status, last, ran = make_test(tmp_path, ruff=1, fast=1)
    stages = [line.split()[0] + (" fast" if "-m not slow" in line else " slow" if "-m slow" in line else "")
              for line in ran]
    # mypy runs beside the fast tests: which of the two starts first is the scheduler's choice
    assert stages[0] == "ruff" and sorted(stages[1:3]) == ["mypy", "python fast"] and stages[3:] == ["python slow"]
    assert status != 0
    assert last == "== make test: FAILED: ruff(exit 1) fast(exit 1)"


def test_all_green_and_a_stage_that_selected_nothing_pass(tmp_path: Path) -> None:
    status, last, _ = make_test(tmp_path, slow=5)
    assert (status, last) == (0, "== make test: every stage passed: ruff, mypy, fast, slow")


def test_failed_tests_are_tests_that_ran(tmp_path: Path) -> None:
    status, last, _ = make_test(tmp_path, fast=1, slow=5)
    assert (status, last) == (2, "== make test: FAILED: fast(exit 1)")


def test_no_test_run_at_all_fails(tmp_path: Path) -> None:
    status, last, _ = make_test(tmp_path, fast=5, slow=5)
    assert status != 0 and "no test ran" in last
