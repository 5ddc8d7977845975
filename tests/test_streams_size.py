"""The stream store stays in small pieces: no module over 400 lines, no function over 60, none
above cyclomatic complexity 12 (STYLE.md, habit 1), so the owner and follower halves stay apart."""

import ast
import subprocess
import sys
from pathlib import Path

STREAMS = Path(__file__).resolve().parent.parent / "app" / "streams"
MODULES = sorted(STREAMS.glob("*.py"))


def test_no_stream_module_over_400_lines() -> None:
    assert {p.name: n for p in MODULES if (n := len(p.read_text().splitlines())) > 400} == {}


def test_no_stream_function_over_60_lines() -> None:
    long = {
        f"{p.name}:{node.name}": node.end_lineno - node.lineno + 1
        for p in MODULES
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > 60
    }
    assert long == {}


def test_no_stream_function_above_complexity_12() -> None:
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run(
        [str(ruff), "check", str(STREAMS), "--select", "C901", "--config", "lint.mccabe.max-complexity=12",
         "--output-format", "concise", "--no-cache"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout
