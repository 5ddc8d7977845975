"""Built-in validators by name: the request's and the operator's `validators: [{name, config}]`."""

from __future__ import annotations

from app.validation.validators.base import Validator
from app.validation.validators.judge import LlmJudge
from app.validation.validators.pii import Pii
from app.validation.validators.rules import BannedWords, MaxLength, RegexDeny
from app.validation.validators.schema import JsonSchema

__all__ = ["VALIDATORS"]

VALIDATORS: dict[str, type[Validator]] = {
    cls.name: cls for cls in (MaxLength, RegexDeny, BannedWords, Pii, JsonSchema, LlmJudge)
}
