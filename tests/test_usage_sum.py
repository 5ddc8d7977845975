"""A run's usage is the sum of its steps' (`Usage.add`), every count of it."""

from __future__ import annotations

import dataclasses

from app.core.cost import Cost
from app.core.usage import Usage


def test_every_count_of_a_step_is_added_and_an_unknown_output_stays_unknown() -> None:
    counts = [f.name for f in dataclasses.fields(Usage) if f.type in ("int", int)]
    assert len(counts) >= 7
    total = Usage(**{name: 10 * (i + 1) for i, name in enumerate(counts)})
    step = Usage(**{name: i + 1 for i, name in enumerate(counts)}, output_unknown=True)
    total.add(step)
    assert {name: getattr(total, name) for name in counts} == {name: 11 * (i + 1) for i, name in enumerate(counts)}
    assert total.output_unknown and total.cost is None and total.cost_usd is None


def test_a_priced_step_adds_its_cost() -> None:
    total = Usage(input_tokens=1, cost=Cost(input_usd=0.5, output_usd=0.25, source="s"))
    total.add(Usage(output_tokens=2, cost=Cost(input_usd=0.125, output_usd=0.125, source="s")))
    assert total.cost is not None and total.cost_usd == total.cost.total_usd == 1.0
    total.add(Usage(input_tokens=1))  # an unpriced step keeps the cost so far
    assert total.cost_usd == 1.0 and total.input_tokens == 2
