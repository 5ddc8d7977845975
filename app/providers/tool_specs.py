"""Tool specs and tool_choice, checked once for every wire format (no provider's shape here).

Each provider's converter turns the checked result into its own wire form: OpenAI Chat
(`openai_chat_convert`), Responses, Gemini, Anthropic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from pydantic import ValidationError

from app.core.messages import AdapterError, ToolSpec

__all__ = ["ForcedTool", "checked_tool_choice", "checked_tools", "first_error"]

ChoiceWord = Literal["auto", "none", "required"]
_CHOICE_WORDS = frozenset(get_args(ChoiceWord))


@dataclass(frozen=True, slots=True)
class ForcedTool:
    """tool_choice naming one tool the model must call."""

    name: str


def first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else err["msg"]


def checked_tools(tools: Sequence[ToolSpec | Mapping[str, Any]]) -> list[ToolSpec]:
    """The specs as ToolSpecs; a malformed spec or a duplicate name raises AdapterError."""
    out: list[ToolSpec] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if isinstance(tool, Mapping):
            try:
                tool = ToolSpec.model_validate(dict(tool))
            except ValidationError as exc:
                raise AdapterError(f"tools[{i}]: {first_error(exc)}") from None
        elif not isinstance(tool, ToolSpec):
            raise AdapterError(f"tools[{i}] is not a ToolSpec")
        if tool.name in seen:
            raise AdapterError(f"duplicate tool name: {tool.name}")
        seen.add(tool.name)
        out.append(tool)
    return out


def checked_tool_choice(
    choice: str | None, tools: Sequence[ToolSpec | Mapping[str, Any]]
) -> ChoiceWord | ForcedTool | None:
    """`auto` / `none` / `required` / a tool's name, checked against the tools (None: leave it out).

    Without tools, `auto` and `none` say nothing (providers refuse a tool_choice without tools),
    and `required` or a name is a mistake.
    """
    if choice is None:
        return None
    if choice in _CHOICE_WORDS:
        if not tools:
            if choice == "required":
                raise AdapterError("tool_choice 'required' needs tools")
            return None
        return cast(ChoiceWord, choice)
    names = {t.name if isinstance(t, ToolSpec) else t.get("name") for t in tools}
    if choice in names:
        return ForcedTool(choice)
    raise AdapterError(f"tool_choice {choice!r} is not auto, none, required or the name of a given tool")
