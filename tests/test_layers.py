"""DESIGN.md section 3: imports run one way (down or across the layers, never up, no cycle between packages);
providers import neither settings, validation nor tools; core imports only core."""

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


# DESIGN.md section 3: api -> pipeline/run -> routing -> providers, validation, tools, streams, records,
# auth -> core. A package may import its peers and anything below, never above; the modules outside
# that line sit where what they import puts them (settings reads every package's configuration).
RANK = {
    "core": 0, "redis_client": 0,
    "providers": 1, "validation": 1, "tools": 1, "streams": 1, "records": 1, "auth": 1, "observability": 1,
    "tracing": 1,
    "lifecycle": 1,
    "routing": 2, "accounting": 2, "recording": 2,
    "run": 3, "run_tasks": 3, "opener": 3, "pipeline": 3, "cache": 3, "settings": 3, "config_file": 1, "config_load": 3,
    "api": 4, "startup": 4,
    "main": 5,
    "cli": 6,
}


def _package_imports() -> dict[str, set[str]]:
    """Package -> the app packages it imports (command-line entry points, `__main__`, excepted)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(APP.rglob("*.py")):
        if path.name == "__main__.py":
            continue
        source = path.relative_to(APP).parts[0].removesuffix(".py")
        targets = {name.split(".")[1] for name in _imports(path) if name.startswith("app.")}
        graph.setdefault(source, set()).update(targets - {source})
    return graph


def test_every_package_has_its_place_in_the_layers() -> None:
    assert set(_package_imports()) - {"__init__", "web"} <= set(RANK)


def test_imports_run_down_or_across_never_up() -> None:
    upward = {f"{source} -> {target}" for source, targets in _package_imports().items()
              for target in targets if source in RANK and RANK[target] > RANK[source]}
    assert not upward


def test_no_two_packages_import_each_other_even_through_others() -> None:
    graph = _package_imports()

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), list(graph.get(start, ()))
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        return False

    assert not {f"{a} <-> {b}" for a, targets in graph.items() for b in targets if reaches(b, a)}
