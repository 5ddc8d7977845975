"""The validation gate's summary as data (`final.validation`, the run report and record): chunks
checked, redactions, verdict counts per validator, the block, and the `llm_judge` calls' usage.
Re-exported by app/core/events.py."""

from __future__ import annotations

from typing import Annotated, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

__all__ = ["BlockedBy", "ChunkCounts", "JudgeUsageData", "ValidationData", "ValidatorStatsData"]


ValidatorStatsData = TypedDict(
    "ValidatorStatsData", {"pass": int, "fail": int, "unknown": int, "error": int, "checks": int, "seconds": float}
)


class ChunkCounts(TypedDict):
    text: int
    reasoning: int


class BlockedBy(TypedDict):
    validator: str
    reason: str


class JudgeUsageData(TypedDict):
    """One judge model's calls in a run (`llm_judge`), billed to the run's key like any call."""

    calls: Annotated[int, Field(description="Calls made to the judge model.")]
    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost_usd: NotRequired[Annotated[float, Field(description="When the judge model has a price (FOUNDRY_PRICES).")]]


class ValidationData(TypedDict):
    """What the validation gate did: chunks checked, redactions, verdict counts per validator."""

    chunking: str
    chunks: ChunkCounts
    redactions: int
    validators: dict[str, ValidatorStatsData]
    blocked: NotRequired[BlockedBy]
    judge: NotRequired[Annotated[dict[str, JudgeUsageData], Field(
        description="Usage of the `llm_judge` calls, by judge model; counted toward the key's tpm and budget "
                    "and in GET /v1/usage.")]]
