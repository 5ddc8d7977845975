"""POST /v1/chat/completions and GET /v1/models in OpenAI's shapes, on the same pipeline as
/v1/stream: the request becomes the canonical RunSpec, the run is opened by the same Gateway,
and its released events are translated (app/api/compat/openai_response.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path
from starlette.responses import Response

from app.api.access import CallerDep, PrincipalDep
from app.api.compat.common import FacadeError, FacadeRoute, answer, open_run, route_responses
from app.api.compat.models import anthropic_list, anthropic_model, find, openai_list, openai_model, served_models
from app.api.compat.openai_request import to_run_spec
from app.api.compat.openai_response import ChunkWriter, OpenAIErrors, completion
from app.api.compat.openai_schema import FORWARDED, ChatCompletionRequest
from app.api.compat.relay import ChatEnding, passthrough_spec, relay_answer, same_wire
from app.api.deps import GatewayDep
from app.api.responses import JSON
from app.providers.passthrough import Wire

__all__ = ["router"]

ERRORS = OpenAIErrors()
WIRE: Wire = "openai-chat"


class OpenAIRoute(FacadeRoute):
    writer = ERRORS


router = APIRouter(tags=["openai-compatible"], route_class=OpenAIRoute)


@router.post(
    "/v1/chat/completions",
    response_class=Response,
    responses=route_responses(
        answer="`stream: false`: a `chat.completion` object. `stream: true`: Server-Sent Events, one "
               "`chat.completion.chunk` per `data:` line, ending with `data: [DONE]`.",
        errors='OpenAI\'s error format: `{"error": {"message", "type", "param", "code"}}`.',
        example=OpenAIErrors.body(400, "n: must be 1", "n", "invalid_request")),
    summary="OpenAI Chat Completions (drop-in): the same run as /v1/stream, in OpenAI's shapes",
)
async def chat_completions(body: ChatCompletionRequest, caller: CallerDep) -> Response:
    """To OpenAI or a compatible server, the client's own request and, streamed, the upstream's own
    chunks (app/api/compat/relay.py); to another provider, translated."""
    gateway, request = caller.gateway, caller.request
    body.model = gateway.registry.qualify(body.model)  # `gpt-5` as the SDKs send it
    same = same_wire(gateway, body.model, WIRE)
    spec = to_run_spec(body, passthrough=same)
    if same:
        spec = await passthrough_spec(spec, request, WIRE, relay=bool(body.stream),
                                      provider_options=body.provider_options)
    handle, limit_headers = await open_run(caller, spec, body=body, forwards=FORWARDED,
                                           held=not (same and body.stream))
    run = handle.run
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    if run.relay is not None:
        return relay_answer(gateway, handle, run.relay, ChatEnding(include_usage=include_usage), limit_headers)
    writer = ChunkWriter(run, model=body.model, include_usage=include_usage) if body.stream else None
    return await answer(gateway, request, handle, stream=writer, headers=limit_headers,
                        build=lambda events, final: completion(run, body.model, events, final),
                        error=lambda status, text, code: ERRORS.body(status, text, None, code))


@router.get("/v1/models", summary="The models this gateway serves to the caller (OpenAI's list; Anthropic's with "
                                  "anthropic-version): a key limited to some models sees only those")
async def list_models(
    principal: PrincipalDep, gateway: GatewayDep,
    anthropic_version: Annotated[str | None, Header(alias="anthropic-version")] = None,
) -> JSON:
    models = served_models(gateway, principal)
    return JSON(anthropic_list(models) if anthropic_version else openai_list(models))


@router.get("/v1/models/{model_id:path}",
            summary="One served model (OpenAI's shape; Anthropic's with anthropic-version)")
async def get_model(
    principal: PrincipalDep, gateway: GatewayDep, model_id: Annotated[str, Path(max_length=256)],
    anthropic_version: Annotated[str | None, Header(alias="anthropic-version")] = None,
) -> JSON:
    model = find(gateway, model_id, principal)
    if model is None:
        raise FacadeError(f"the model {model_id!r} is not served here", param="model", status=404,
                          code="model_not_found")
    return JSON(anthropic_model(model) if anthropic_version else openai_model(model))
