"""The `json_schema` validator: tool-call arguments against their ToolSpec, the answer against a schema.

Tool calls are judged when complete (the gate holds their fragments until then); a call of a
tool the request did not declare fails. The answer is judged at the end (a partial JSON text
cannot be judged), after an optional Markdown code fence is taken off.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from pydantic import Field, field_validator

from app.core.messages import thaw
from app.validation.validators.base import (
    PASS,
    UNKNOWN,
    CheckContext,
    GateEnv,
    ToolCallCheck,
    Validator,
    ValidatorConfig,
    Verdict,
)

__all__ = ["JsonSchema"]

_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(?P<body>.*?)\n?```$", re.DOTALL)


def _check_schema(schema: dict[str, Any]) -> None:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"not a valid JSON Schema: {exc.message}") from None


class JsonSchemaConfig(ValidatorConfig):
    schema_: dict[str, Any] | None = Field(
        default=None, alias="schema", description="JSON Schema the final answer must match (None: tool calls only)."
    )
    tools: bool = Field(default=True, description="Check tool-call arguments against the tools' parameters.")

    model_config = ValidatorConfig.model_config | {"populate_by_name": True}

    @field_validator("schema_")
    @classmethod
    def _valid(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None:
            _check_schema(schema)
        return schema


def _where(error: Any) -> str:
    path = "/".join(str(p) for p in error.absolute_path)
    return f"/{path}" if path else "the top level"


class JsonSchema(Validator):
    name = "json_schema"
    Config = JsonSchemaConfig
    lanes = ("text",)

    def __init__(self, config: JsonSchemaConfig, env: GateEnv) -> None:
        super().__init__(config, env)
        self._answer = Draft202012Validator(config.schema_) if config.schema_ is not None else None
        self._check_tools = config.tools
        self._tools = {name: Draft202012Validator(thaw(spec.parameters)) for name, spec in env.tools.items()}

    async def check_final(self, text: str, ctx: CheckContext) -> Verdict:
        if self._answer is None or (not text.strip() and ctx.tool_calls):
            return UNKNOWN  # no answer schema, or the turn is a tool call, not an answer
        body = text.strip()
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group("body")
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return Verdict.fail(f"answer is not valid JSON: {exc}")
        error = best_match(self._answer.iter_errors(answer))
        if error is not None:
            return Verdict.fail(f"answer does not match the schema at {_where(error)}: {error.message}")
        return PASS

    async def check_tool_call(self, call: ToolCallCheck, ctx: CheckContext) -> Verdict:
        if not self._check_tools or call.server:
            return UNKNOWN  # provider-run tools have no caller schema
        validator = self._tools.get(call.name)
        if validator is None:
            return Verdict.fail(f"tool {call.name!r} is not declared in the request")
        error = best_match(validator.iter_errors(call.arguments))
        if error is not None:
            return Verdict.fail(
                f"arguments of {call.name} ({call.id}) do not match its parameters at {_where(error)}: {error.message}"
            )
        return PASS
