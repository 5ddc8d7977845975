"""A GatewayError's details are one list (`ErrorDetails`): its keyword arguments, its attributes and
the optional keys of its `error` object."""

import dataclasses

from app.core.errors import ErrorData, ErrorDetails, GatewayError, RequestError, UpstreamRateLimited


def test_the_details_are_the_error_objects_optional_keys() -> None:
    names = {f.name for f in dataclasses.fields(ErrorDetails)}
    assert names == set(ErrorData.__annotations__) - {"code", "message", "retryable", "errors", "attempts"}


def test_every_detail_set_reaches_the_error_object_and_no_other() -> None:
    values = {f.name: (7 if "status" in f.name or f.name == "first_available" else f"{f.name}-value")
              for f in dataclasses.fields(ErrorDetails)}
    error = GatewayError("failed", code="some_code", status=418, retryable=True, **values)
    assert error.to_dict() == {"code": "some_code", "message": "failed", "retryable": True, **values}
    assert error.status == 418 and all(getattr(error, name) == value for name, value in values.items())
    assert GatewayError("failed").to_dict() == {"code": "internal_error", "message": "failed", "retryable": False}


def test_a_class_keeps_its_defaults_unless_the_error_sets_its_own() -> None:
    assert (RequestError("bad").status, RequestError("bad").code) == (400, "invalid_request")
    assert (RequestError("bad", status=422).status, GatewayError("x").status) == (422, 500)
    limited = UpstreamRateLimited("slow down", retry_after="7")
    assert limited.retryable and limited.to_dict()["retry_after"] == "7" and str(limited) == "slow down"


def test_details_text_is_scrubbed_and_the_message_is_the_exceptions_text() -> None:
    key = "sk-proj-" + "a" * 40
    error = RequestError(f"bad key {key}", reason=f"echoed {key}", field="messages.0")
    assert key not in str(error) and key not in str(error.to_dict()) and error.args == (error.message,)
    assert error.field == "messages.0"
