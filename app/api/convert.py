"""GenerateRequest (HTTP schema) -> RunSpec (pipeline input)."""

from __future__ import annotations

from app.api.schemas import GenerateRequest
from app.cache.config import CacheChoice
from app.pipeline import RunSpec
from app.providers.base import ProviderRequest
from app.validation import check_specs


def to_spec(body: GenerateRequest, *, held: bool = False) -> RunSpec:
    """Also refuses (422) unknown validators, bad validator configs and unknown chunkers. `held`: the
    run is its reader's, which holds its place in the log (RunSpec.held)."""
    check_specs(body.validators, body.chunking)
    request = ProviderRequest(
        model=body.model,
        messages=tuple(body.messages),
        tools=tuple(body.tools),
        tool_choice=body.tool_choice,
        temperature=body.temperature,
        max_tokens=body.max_tokens,
        options=dict(body.provider_options),
        stop=tuple(body.stop),
        parallel_tool_calls=body.parallel_tool_calls,
        cache_control=dict(body.cache_control) if body.cache_control is not None else None,
        output_schema=dict(body.output_schema) if body.output_schema is not None else None,
    )
    return RunSpec(
        request=request,
        validators=tuple(body.validators),
        chunking=body.chunking,
        max_steps=body.max_steps,
        timeouts=body.timeouts,
        cache=CacheChoice(lookup=body.cache, store=body.cache),
        mcp_filters=(tuple(body.mcp_tools),) if body.mcp_tools is not None else (),
        held=held,
    )
