"""Chunk validation: chunkers, validators and the gate that holds events until they pass.

The pipeline checks specs at the HTTP edge (`check_specs`), builds one gate per run
(`build_gate`, None when no validator applies: the run then uses a `PassThroughGate`), feeds
it every canonical event (`admit_all`) and ends it (`finish`); `Blocked` ends the stream with final{status: "blocked"}.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core.lazy import lazy_names

if TYPE_CHECKING:
    from app.validation.checks import Blocked, Observer
    from app.validation.chunking import CHUNKERS, DEFAULT_CHUNKING, DEFAULT_MAX_CHARS, build_chunker
    from app.validation.contract import Gate, PassThroughGate
    from app.validation.gate import ValidationGate, build_gate
    from app.validation.specs import ValidatorSpec, called_models, check_specs
    from app.validation.validators import VALIDATORS
    from app.validation.validators.base import Judge, Validator, Verdict

__all__ = [
    "CHUNKERS",
    "DEFAULT_CHUNKING",
    "DEFAULT_MAX_CHARS",
    "VALIDATORS",
    "Blocked",
    "Gate",
    "Judge",
    "Observer",
    "PassThroughGate",
    "ValidationGate",
    "Validator",
    "ValidatorSpec",
    "Verdict",
    "build_chunker",
    "build_gate",
    "called_models",
    "check_specs",
]

# Each public name -> its submodule, imported on first use (PEP 562): importing one
# submodule (settings read `specs`) does not import the gate, the judge and the providers under it.
_HOMES = {
    "Blocked": "checks",
    "Observer": "checks",
    "CHUNKERS": "chunking",
    "DEFAULT_CHUNKING": "chunking",
    "DEFAULT_MAX_CHARS": "chunking",
    "build_chunker": "chunking",
    "Gate": "contract",
    "PassThroughGate": "contract",
    "ValidationGate": "gate",
    "build_gate": "gate",
    "ValidatorSpec": "specs",
    "called_models": "specs",
    "check_specs": "specs",
    "VALIDATORS": "validators",
    "Judge": "validators.base",
    "Validator": "validators.base",
    "Verdict": "validators.base",
}

__getattr__ = lazy_names(__name__, _HOMES)
