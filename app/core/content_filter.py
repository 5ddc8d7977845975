"""A provider's content-filter annotations, kept for the final (Azure OpenAI's `prompt_filter_results`
and per-choice `content_filter_results`, docs/providers.md).

`prompt` is the prompt's annotations as sent. `completion` is the answer's, by category: Azure
annotates each checked segment of the answer, so a category keeps its latest annotation, except
that one that filtered or detected something stays (a later clean segment does not clear it).
`offsets` is the last `content_filter_offsets` of Azure's asynchronous filter (how far it checked).
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

__all__ = ["ContentFilterData", "merge_content_filter"]


class ContentFilterData(TypedDict):
    prompt: NotRequired[Annotated[list[dict[str, Any]], Field(
        description="The prompt's annotations as the provider sent them (Azure's `prompt_filter_results`).")]]
    completion: NotRequired[Annotated[dict[str, Any], Field(
        description="The answer's annotations by category (Azure's `content_filter_results`): the latest "
                    "per category, one that filtered or detected something kept.")]]
    offsets: NotRequired[Annotated[dict[str, Any], Field(
        description="Azure's asynchronous filter: the last `content_filter_offsets` (how far it checked).")]]


def _flagged(annotation: Any) -> bool:
    return isinstance(annotation, dict) and bool(annotation.get("filtered") or annotation.get("detected"))


def merge_content_filter(old: ContentFilterData | None, new: ContentFilterData) -> ContentFilterData:
    """`new` (one chunk's annotations) over `old` (the stream's so far)."""
    if old is None:
        return new
    out: ContentFilterData = {**old}
    if "prompt" in new:
        out["prompt"] = [*old.get("prompt", ()), *new["prompt"]]
    if "completion" in new:
        completion = dict(old.get("completion", {}))
        for category, annotation in new["completion"].items():
            if not _flagged(completion.get(category)) or _flagged(annotation):
                completion[category] = annotation
        out["completion"] = completion
    if "offsets" in new:
        out["offsets"] = new["offsets"]
    return out
