"""A run's token usage, as the provider reported it, and its cost when priced: the final's `usage`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from app.core.cost import Cost, CostData

__all__ = ["Usage", "UsageData"]


class UsageData(TypedDict):
    input_tokens: int
    output_tokens: Annotated[int | None, Field(
        description="null when unknown: the stream ended before the provider reported it (cancelled, broken).")]
    total_tokens: Annotated[int | None, Field(description="null when output_tokens is.")]
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    cache_write_1h_tokens: NotRequired[Annotated[int, Field(
        description="The part of cache_write_tokens written for 1 hour (Anthropic); absent when none.")]]
    cost_usd: NotRequired[Annotated[float, Field(
        description="USD, when the model has a price (FOUNDRY_PRICES, else genai-prices); absent otherwise.")]]
    cost: NotRequired[Annotated[CostData, Field(
        description="cost_usd by kind of token, and the price source (docs/access-control.md#how-cost-is-computed).")]]


@dataclass(slots=True, kw_only=True)
class Usage:
    """Token usage, whatever the provider reported; zeros where it reported nothing."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_1h_tokens: int = 0  # the part of cache_write_tokens written for 1 hour (Anthropic)
    output_unknown: bool = False
    """The stream ended before the provider reported its output (cancelled, broken): the output
    and total counts are unknown, `null` on the wire rather than a false 0."""
    cost_usd: float | None = None
    """USD, set by the gateway when it knows the model's price: `cost`'s total."""
    cost: Cost | None = None

    def to_dict(self) -> UsageData:
        out: UsageData = {
            "input_tokens": self.input_tokens,
            "output_tokens": None if self.output_unknown else self.output_tokens,
            "total_tokens": None if self.output_unknown else self.total_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }
        if self.cache_write_1h_tokens:
            out["cache_write_1h_tokens"] = self.cache_write_1h_tokens
        if self.cost_usd is not None:
            out["cost_usd"] = self.cost_usd
        if self.cost is not None:
            out["cost"] = self.cost.to_dict()
        return out

    def add(self, other: Usage) -> None:
        """Sum another step's usage, and its cost when priced, into this one (multi-step tool runs)."""
        # each count by name: a loop of getattr/setattr over their names cost 1.1 us a call, this 0.3 (timeit)
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.total_tokens += other.total_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.cache_write_1h_tokens += other.cache_write_1h_tokens
        self.output_unknown = self.output_unknown or other.output_unknown
        if other.cost is not None:
            self.cost = other.cost if self.cost is None else self.cost.plus(other.cost)
            self.cost_usd = self.cost.total_usd
