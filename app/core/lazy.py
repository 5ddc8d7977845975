"""Package names resolved on first use (PEP 562), for packages whose light parts are read by
commands that must start at once (`config check`): importing one submodule does not import the
others behind the package's names."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_names"]


def lazy_names(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """The package's module `__getattr__`: each public name in `homes` (name -> submodule) is
    imported from its submodule when first asked for, then kept on the package."""

    def __getattr__(name: str) -> object:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{homes[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
