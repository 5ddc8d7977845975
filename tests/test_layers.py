"""DESIGN.md section 3: imports run one way; providers import neither settings, validation nor tools."""

import ast
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"
FORBIDDEN_FOR_PROVIDERS = ("app.settings", "app.validation", "app.tools", "app.run", "app.pipeline", "app.api")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_providers_import_no_settings_validation_or_tools() -> None:
    offenders = {
        f"{path.name}: {name}"
        for path in sorted((APP / "providers").glob("*.py"))
        for name in _imports(path)
        if name.startswith(FORBIDDEN_FOR_PROVIDERS)
    }
    assert not offenders


def test_core_imports_only_core() -> None:
    offenders = {
        f"{path.name}: {name}"
        for path in sorted((APP / "core").glob("*.py"))
        for name in _imports(path)
        if name.startswith("app.") and not name.startswith("app.core")
    }
    assert not offenders
