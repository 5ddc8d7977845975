"""Gateway-executed tools: the operator registers them, the model sees them, the gateway runs them.

See app/tools/config.py for the configuration format and app/tools/registry.py for how one
run offers and executes them; the pipeline (app/pipeline.py) loops provider steps around them.
"""

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
