"""Gateway-executed tools: the operator registers them, the model sees them, the gateway runs them.

See app/tools/config.py for the configuration format and app/tools/registry.py for how one
run offers and executes them; the pipeline (app/pipeline.py) loops provider steps around them.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.tools.base import Tool, ToolError, encode_output, import_object
    from app.tools.calculator import CALCULATOR_SPEC, CalculatorTool, calculate
    from app.tools.config import BuiltinToolConfig, HttpToolConfig, PythonToolConfig, ToolConfig, default_tools
    from app.tools.registry import Execution, RunTools, ToolRegistry, build_tools

__all__ = [
    "CALCULATOR_SPEC",
    "BuiltinToolConfig",
    "CalculatorTool",
    "Execution",
    "HttpToolConfig",
    "PythonToolConfig",
    "RunTools",
    "Tool",
    "ToolConfig",
    "ToolError",
    "ToolRegistry",
    "build_tools",
    "calculate",
    "default_tools",
    "encode_output",
    "import_object",
]

# Each public name -> its submodule, imported on first use (PEP 562): the settings read
# `app.tools.config` without importing the registry and the MCP client behind it.
_HOMES = {name: module for module, names in {
    "base": ("Tool", "ToolError", "encode_output", "import_object"),
    "calculator": ("CALCULATOR_SPEC", "CalculatorTool", "calculate"),
    "config": ("BuiltinToolConfig", "HttpToolConfig", "PythonToolConfig", "ToolConfig", "default_tools"),
    "registry": ("Execution", "RunTools", "ToolRegistry", "build_tools"),
}.items() for name in names}


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
