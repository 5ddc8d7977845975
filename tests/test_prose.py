"""Docstrings and comments in app/ give reasons, not tracker references: the reader has the code,
not the tracker (STYLE.md habit 6). No `issue 14`, `issues 7 and 9`, `#29` in any docstring or comment."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from tests.support import REPO

TRACKER = re.compile(r"\bissues?\s*#?\d+|(?<![\w&])#\d+\b", re.IGNORECASE)


def _docstrings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every string standing alone as a statement: module, class and function docstrings, and the
    attribute docstrings under assignments."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            yield node.lineno, node.value.value


def _comments(source: str) -> Iterator[tuple[int, str]]:
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string.lstrip("#")


def tracker_references(path: Path) -> list[str]:
    """`line: reference` for each tracker reference in the file's docstrings, then its comments."""
    source = path.read_text()
    prose = [*_docstrings(ast.parse(source)), *_comments(source)]
    return [f"{line}: {match.group(0)}" for line, text in prose for match in TRACKER.finditer(text)]


def test_no_tracker_reference_in_app_docstrings_or_comments() -> None:
    found = [f"{path.relative_to(REPO)}:{ref}" for path in sorted((REPO / "app").rglob("*.py"))
             for ref in tracker_references(path)]
    assert found == []


def test_the_check_sees_each_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('"""Records (issue 14)."""\n\nX = 1  # see Issue 7\n"""Attribute: issues 3 and 4."""\n'
                      'Y = "issue 5 in a plain string is data"  # tracked as #29\n')
    found = [ref.split(": ", 1)[1] for ref in tracker_references(sample)]
    assert found == ["issue 14", "issues 3", "Issue 7", "#29"]

