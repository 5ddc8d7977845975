"""Foundry models: immutable, strict, and clear about what is wrong."""

import pytest
from pydantic import ValidationError

from app.core.messages import FrozenDict, Message, ToolCall, ToolSpec, check_unique_tool_names, freeze, thaw


@pytest.mark.parametrize(
    "data",
    [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 1}}]},
        {"role": "tool", "content": "2", "tool_call_id": "c1"},
    ],
)
def test_valid_messages(data):
    assert Message.model_validate(data).role == data["role"]


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"role": "robot", "content": "x"}, "role"),
        ({"role": "user", "content": ""}, "non-empty"),
        ({"role": "assistant", "content": ""}, "non-empty"),
        ({"role": "tool", "content": "2"}, "tool_call_id"),
        ({"role": "user", "content": "x", "tool_call_id": "c1"}, "only tool messages"),
        ({"role": "user", "content": "x", "tool_calls": [{"id": "c", "name": "n"}]}, "only assistant"),
        ({"role": "user", "content": "x", "colour": "red"}, "extra"),
        ({"role": "user", "content": 5}, "string"),
    ],
)
def test_invalid_messages(data, needle):
    with pytest.raises(ValidationError) as err:
        Message.model_validate(data)
    assert needle in str(err.value).lower()


def test_messages_are_immutable():
    m = Message(role="user", content="hi")
    with pytest.raises(ValidationError):
        m.content = "changed"  # type: ignore[misc]


def test_tool_call_arguments_are_deeply_immutable_and_compare_by_content():
    a = ToolCall(id="c1", name="f", arguments={"x": [1, {"y": 2}]})
    b = ToolCall(id="c1", name="f", arguments={"x": [1, {"y": 2}]})
    assert a == b and hash(a.arguments) == hash(b.arguments)
    assert a.arguments == {"x": (1, {"y": 2})}
    with pytest.raises(TypeError):
        a.arguments["x"] = 1
    with pytest.raises(TypeError):
        a.arguments["x"][1]["y"] = 3
    assert thaw(a.arguments) == {"x": [1, {"y": 2}]}
    assert isinstance(freeze({"a": {}}), FrozenDict)


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"type": "object", "properties": {"a": {}}, "required": ["a", "b"]}, "missing from properties: b"),
        ({"type": "array"}, "type 'object'"),
        ({"type": "object", "properties": []}, "properties must be an object"),
        ({"type": "object", "required": "a"}, "list of strings"),
        ({"type": "object", "properties": {"a": {"default": {1, 2}}}}, "serialisable"),
    ],
)
def test_tool_spec_schema_checks(params, needle):
    with pytest.raises(ValidationError) as err:
        ToolSpec(name="add", parameters=params)
    assert needle in str(err.value)


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dot.name"])
def test_tool_spec_name_rule(name):
    with pytest.raises(ValidationError):
        ToolSpec(name=name)


def test_tool_spec_immutable_and_duplicate_names():
    spec = ToolSpec(name="add", parameters={"type": "object", "properties": {"a": {"type": "integer"}},
                                            "required": ["a"]})
    with pytest.raises(TypeError):
        spec.parameters["type"] = "array"
    with pytest.raises(ValueError, match="duplicate tool name: add"):
        check_unique_tool_names([spec, spec])
