"""No private name of a dependency in app/: a library's `_private` module or attribute is not
its API, and an upgrade may change or remove it without notice.

Two checks between them: this AST walk finds private modules imported (`from x._y import`,
`import x._y`, `from x import _y`) and private attributes reached through an imported module
(`x._y.z`, `getattr(x, "_y")`); ruff's SLF001, enabled for app/ in pyproject.toml, finds
private attributes read on any other object (`obj._attr`) that is not `self` or `cls`.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

APP = REPO / "app"
OWN = "app"
def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _third_party(module: str) -> bool:
    return module.split(".")[0] not in (OWN, "__future__")


def private_names(source: str) -> list[str]:
    """Each use of a dependency's private module or attribute in `source`, as `line: name`."""
    tree = ast.parse(source)
    modules: set[str] = set()  # local names bound to an imported module (import x, import x.y as z)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _third_party(alias.name) and any(_private(part) for part in alias.name.split(".")):
                    found.append(f"{node.lineno}: import {alias.name}")
                modules.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _third_party(node.module):
            if any(_private(part) for part in node.module.split(".")):
                found.append(f"{node.lineno}: from {node.module} import ...")
            found += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names if _private(a.name)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
            if chain and chain[0] in modules and _private(chain[-1]):
                found.append(f"{node.lineno}: {'.'.join(chain)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
            chain = _chain(node.args[0])
            if chain and chain[0] in modules:
                found.append(f"{node.lineno}: {node.func.id}({'.'.join(chain)}, {node.args[1].value!r})")
    return found


def _chain(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None for anything but names and attributes."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


@pytest.mark.parametrize(("snippet", "expected"), [
    ("from starlette._exception_handler import wrap_app_handling_exceptions\n",
     ["1: from starlette._exception_handler import ..."]),
    ("import fastapi.routing\n_included = getattr(fastapi.routing, '_effective_route_context_var', None)\n",
     ["2: getattr(fastapi.routing, '_effective_route_context_var')"]),
    ("import fastapi.routing\nvar = fastapi.routing._effective_route_context_var\n",
     ["2: fastapi.routing._effective_route_context_var"]),
    ("import httpx2._utils\n", ["1: import httpx2._utils"]),
    ("from httpx2 import _utils\n", ["1: from httpx2 import _utils"]),
    ("import httpx2 as h\nh._utils.get_environment_proxies()\n", ["2: h._utils"]),
    ("from app.providers import _private_helper\nimport fastapi\nfastapi.__version__\nfrom . import _ours\n", []),
])
def test_the_check_finds_a_dependency_s_private_names(snippet: str, expected: list[str]) -> None:
    assert private_names(snippet) == expected


def test_app_uses_no_private_name_of_a_dependency() -> None:
    found = [f"{path.relative_to(REPO)}:{hit}" for path in sorted(APP.rglob("*.py"))
             for hit in private_names(path.read_text())]
    assert found == []


def test_ruff_checks_private_attributes_in_app() -> None:
    """SLF001 is on for app/ (pyproject.toml): an object's private attribute is refused there."""
    snippet = "import httpx2\n\nclient = httpx2.AsyncClient()\nclient._transport_for_url(None)\n"
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run([str(ruff), "check", "--no-cache", "--output-format", "concise",
                             "--stdin-filename", str(APP / "api" / "snippet.py"), "-"],
                            input=snippet, capture_output=True, text=True, cwd=REPO, env={**os.environ}, check=False)
    assert "SLF001" in result.stdout, result.stdout + result.stderr
