"""POST /v1/generate: run to completion and answer JSON, or 202 and run in the background."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from app.api.access import JsonCallerDep, open_run
from app.api.convert import to_spec
from app.api.json_body import JSONBodyRoute
from app.api.readers import final_or_gone
from app.api.responses import JSON, final_status_code
from app.api.schemas import ErrorBody, FinalPayload, GenerateRequest, StreamAccepted

router = APIRouter(tags=["generate"], route_class=JSONBodyRoute)

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 403, 404, 413, 415, 422, 429, 500, 502, 503, 504)
}


async def generate(body: GenerateRequest, caller: JsonCallerDep) -> Response:
    caller.record.model = body.model
    handle, limit_headers = await open_run(caller, to_spec(body))
    stream_id = handle.run.stream_id
    if body.stream:  # the run goes on with no reader here; subscribers read its log by id
        handle.detached = True
        url = f"/v1/stream/{stream_id}"
        return JSON({"stream_id": stream_id, "stream_url": url}, status_code=202,
                    headers={"Location": url, **limit_headers})
    final = await final_or_gone(caller.request, handle, cancel=body.on_disconnect != "continue")
    if final is None:  # the client left: nobody reads this answer
        return Response(status_code=499)
    return JSON(final.data(), status_code=final_status_code(final),
                headers={"X-Stream-ID": stream_id, **limit_headers})


router.add_api_route(
    "/v1/generate", generate, methods=["POST"],
    response_model=FinalPayload,
    responses={
        202: {"model": StreamAccepted, "description": "`stream: true`: the run goes on in the background."},
        **_ERRORS,
    },
    summary="Run to completion and answer the final payload as JSON",
)
