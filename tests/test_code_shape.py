"""Smaller pieces: no module of app/ over 400 lines, no function over 60 (ruff's C901 holds the
cyclomatic complexity at 12, pyproject.toml), so a reader can hold each one in mind."""

import ast
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(APP.rglob("*.py"))


def test_no_module_is_over_400_lines() -> None:
    long = {str(p.relative_to(APP)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long


def test_no_function_is_over_60_lines() -> None:
    long = {
        f"{p.relative_to(APP)}:{node.lineno} {node.name}": node.end_lineno - node.lineno + 1
        for p in _modules()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    }
    assert not long
