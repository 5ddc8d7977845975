"""The `json_schema` validator: tool-call arguments against their ToolSpec, the answer against a schema.

Tool calls are judged when complete (the gate holds their fragments until then); a call of a
tool the request did not declare fails. The answer is judged at the end (a partial JSON text
cannot be judged), after an optional Markdown code fence is taken off.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Iterator
from typing import Any

import orjson
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import SchemaError, best_match
from pydantic import Field, field_validator
from referencing import Registry

from app.core.errors import RequestError
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
from app.validation.validators.patterns import compile_pattern

__all__ = ["JsonSchema", "MAX_SCHEMA_BYTES", "MAX_SCHEMA_DEPTH", "MAX_SCHEMA_NODES", "check_caller_schema"]

_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(?P<body>.*?)\n?```$", re.DOTALL)

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 32
MAX_SCHEMA_NODES = 10_000
_REFS = frozenset({"$ref", "$dynamicRef", "$recursiveRef"})
_NO_RETRIEVAL = Registry()  # no `retrieve`: a reference outside the schema is unresolvable, never fetched


# -- caller schemas are data: no retrieval, bounded, patterns through RE2 ---------------------


@functools.lru_cache(maxsize=1024)
def _rx(pattern: str) -> Any:
    return compile_pattern(pattern)


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _rx(patrn).search(instance):
        yield ValidationError(f"{instance[:80]!r} does not match {patrn!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        rx = _rx(pattern)
        for key, value in instance.items():
            if rx.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    known = schema.get("properties", {})
    patterns = [_rx(p) for p in schema.get("patternProperties", {})]
    extras = [k for k in instance if k not in known and not any(rx.search(k) for rx in patterns)]
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        yield ValidationError(f"additional properties are not allowed ({', '.join(sorted(map(repr, extras)))})")


# The stock keywords run caller patterns through Python's backtracking `re`; these use RE2.
_Validator = validators.extend(Draft202012Validator, {
    "pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties,
})


def check_caller_schema(schema: Any) -> None:
    """Refuse (ValueError) a schema the gateway will not evaluate: too big or deep, a reference
    outside the schema (only `#...`), an `$id` (it would move references elsewhere), a pattern
    RE2 refuses, or not a valid JSON Schema. Iterative: a deep schema costs no recursion."""
    seen: set[str] = set()  # the keywords met that matter together
    nodes = 0
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            raise ValueError(f"schema has more than {MAX_SCHEMA_NODES} nodes")
        if depth > MAX_SCHEMA_DEPTH:
            raise ValueError(f"schema is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        if isinstance(node, dict):
            for key, value in node.items():
                _check_keyword(key, value, seen)
                stack.append((value, depth + 1))
        elif isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
    if {"patternProperties", "unevaluatedProperties"} <= seen:
        raise ValueError("unevaluatedProperties with patternProperties is not supported")
    _check_whole(schema)


def _check_keyword(key: str, value: Any, seen: set[str]) -> None:
    """One keyword of a caller's schema: local references only, no `$id`, RE2 patterns."""
    if isinstance(value, str):
        if key in _REFS and not value.startswith("#"):
            raise ValueError(f"{key} {value[:100]!r}: only local references (#/...) are allowed")
        if key == "$id" and not value.startswith("#"):
            raise ValueError(f"{key} is not allowed: references stay inside the schema")
        if key == "pattern":
            compile_pattern(value)
    if key == "patternProperties" and isinstance(value, dict):
        seen.add(key)
        for pattern in value:
            compile_pattern(pattern)
    if key == "unevaluatedProperties":
        seen.add(key)


def _check_whole(schema: Any) -> None:
    """The schema's size as JSON, and its validity as JSON Schema."""
    try:
        size = len(orjson.dumps(schema))
    except orjson.JSONEncodeError as exc:
        raise ValueError(f"schema is not encodable JSON: {exc}") from None
    if size > MAX_SCHEMA_BYTES:
        raise ValueError(f"schema is larger than {MAX_SCHEMA_BYTES} bytes")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"not a valid JSON Schema: {exc.message[:300]}") from None
    except RecursionError:
        raise ValueError("schema is too deeply nested") from None


def caller_validator(schema: dict[str, Any]) -> Any:
    """A validator for a schema that passed `check_caller_schema`: no retrieval, RE2 patterns."""
    return _Validator(schema, registry=_NO_RETRIEVAL)


def _first_error(validator: Any, instance: Any) -> Any:
    """The best error, or None; a reference that loops or an instance too deep is an error too."""
    try:
        return best_match(validator.iter_errors(instance))
    except RecursionError:
        return ValidationError("the value is nested too deeply for the schema (or the schema refers to itself)")
    except Exception as exc:  # an unresolvable local reference, ...: the schema cannot judge it
        return ValidationError(f"the schema cannot be evaluated: {type(exc).__name__}")


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
            check_caller_schema(schema)
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
        self._answer = caller_validator(config.schema_) if config.schema_ is not None else None
        self._check_tools = config.tools
        self._tools = {}
        for name, spec in env.tools.items():
            parameters = thaw(spec.parameters)
            try:
                check_caller_schema(parameters)
            except ValueError as exc:
                raise RequestError(f"tools: parameters of {name!r}: {exc}", status=422, code="invalid_request",
                                   field="tools") from None
            self._tools[name] = caller_validator(parameters)

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
        # In a worker thread: a large answer against a large schema never holds the event loop.
        error = await asyncio.to_thread(_first_error, self._answer, answer)
        if error is not None:
            return Verdict.fail(f"answer does not match the schema at {_where(error)}: {error.message}")
        return PASS

    async def check_tool_call(self, call: ToolCallCheck, ctx: CheckContext) -> Verdict:
        if not self._check_tools or call.server:
            return UNKNOWN  # provider-run tools have no caller schema
        validator = self._tools.get(call.name)
        if validator is None:
            return Verdict.fail(f"tool {call.name!r} is not declared in the request")
        error = await asyncio.to_thread(_first_error, validator, call.arguments)
        if error is not None:
            return Verdict.fail(
                f"arguments of {call.name} ({call.id}) do not match its parameters at {_where(error)}: {error.message}"
            )
        return PASS
