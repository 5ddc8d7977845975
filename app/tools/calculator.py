"""The built-in `calculator` tool: arithmetic through `ast`, never `eval`.

Numbers (int, float), + - * / // % **, unary signs and parentheses; nothing else parses.
Sizes are bounded before they are computed, so no expression can stall the event loop or eat
memory: the expression's length, integers' size in bits, and exponents.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from app.core.messages import ToolCall, ToolSpec, freeze
from app.tools.base import ToolError

__all__ = ["CALCULATOR_SPEC", "CalculatorTool", "calculate", "evaluate"]

MAX_EXPRESSION_CHARS = 1_000
MAX_INT_BITS = 4_096  # about 1,233 decimal digits
MAX_EXPONENT = 10_000

CALCULATOR_SPEC = ToolSpec(
    name="calculator",
    description="Evaluate an arithmetic expression: numbers, + - * / // % ** and parentheses.",
    parameters=freeze({
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "For example: (2 + 3) * 4 / 5"}},
        "required": ["expression"],
    }),
)

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression; ToolError when it is not one or is out of bounds."""
    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("expression must be a non-empty string")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ToolError(f"not an arithmetic expression: {expression[:80]!r}") from None
    try:
        return _check(_eval(tree.body))
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except (OverflowError, RecursionError):
        raise ToolError("result too large") from None


def calculate(expression: str) -> str:
    """The expression's value as text: integers exactly, floats to 15 significant digits."""
    value = evaluate(expression)
    return str(value) if isinstance(value, int) else format(value, ".15g")


def _eval(node: ast.expr) -> Number:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and type(node.value) is not bool:
        return _check(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        _guard(node.op, left, right)
        return _check(_BINARY[type(node.op)](left, right))
    raise ToolError(f"unsupported in an arithmetic expression: {ast.unparse(node)[:40]!r}")


def _guard(op: ast.operator, left: Number, right: Number) -> None:
    """Refuse, before computing, what would exceed the bounds."""
    if isinstance(op, ast.Pow):
        if abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponent larger than {MAX_EXPONENT}")
        if (isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1
                and left.bit_length() * right > MAX_INT_BITS):
            raise ToolError("result too large")
        if isinstance(right, float) and left < 0 and not right.is_integer():
            raise ToolError("a negative number to a fractional power is not a real number")
    elif (isinstance(op, ast.Mult) and isinstance(left, int) and isinstance(right, int)
          and left.bit_length() + right.bit_length() > MAX_INT_BITS + 1):
        raise ToolError("result too large")


def _check(value: Number) -> Number:
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise ToolError("result too large")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ToolError("result is not a finite number")
    else:  # complex from an odd power; never a plain number
        raise ToolError("result is not a real number")
    return value


class CalculatorTool:
    """`calculator(expression)` -> its value as text."""

    def __init__(self, *, timeout: float = 5.0, spec: ToolSpec = CALCULATOR_SPEC) -> None:
        self.spec = spec
        self.timeout = timeout

    async def run(self, call: ToolCall) -> str:
        unknown = set(call.arguments) - {"expression"}
        if unknown:
            raise ToolError(f"calculator takes only 'expression', got {sorted(unknown)}")
        return calculate(call.arguments.get("expression", ""))
