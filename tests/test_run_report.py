"""Every run ends with one typed RunReport, handed to the gateway's observers (the plug-in seam)."""

import httpx

from app.core.report import RunReport
from app.main import create_app
from app.settings import Settings
from tests.support import parse_sse


def client(app):
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")


async def test_observers_get_the_report_of_a_run():
    reports: list[RunReport] = []
    app = create_app(Settings(), observers=[reports.append])
    body = {"model": "mock/tool_call", "messages": [{"role": "user", "content": "What is 2+2?"}],
            "validators": [{"name": "regex_deny", "config": {"patterns": ["(?i)password"]}}]}
    async with client(app) as c:
        r = await c.post("/v1/stream", json=body, headers={"X-Request-ID": "rid-7"})
    frames = parse_sse(r.content)
    final = frames[-1][2]
    assert len(reports) == 1
    report = reports[0]
    assert report.stream_id == r.headers["x-stream-id"] and report.request_id == "rid-7"
    assert (report.model, report.provider, report.status) == ("mock/tool_call", "mock", "ok")
    assert report.stop_reason == final["stop_reason"] and report.error is None and report.error_code is None
    assert report.steps == 2 == final["steps"] and report.tools_run == 1
    assert report.usage.to_dict() == final["usage"] and report.events == len(frames)
    assert report.validation is not None and report.validation["validators"]["regex_deny"]["fail"] == 0
    assert report.ttft is not None and report.duration >= report.ttft
    assert report.final.data() == final
    assert report.transcript.status == "ok" and report.transcript.get_response_messages()[0].content == "Sum is 4"
    assert report.log_fields()["stream_status"] == "ok"


async def test_a_failed_run_reports_its_error_and_a_raising_observer_changes_nothing():
    reports: list[RunReport] = []

    def broken(report: RunReport) -> None:
        raise RuntimeError("observer bug")

    app = create_app(Settings(), observers=[broken])
    app.state.gateway.add_observer(reports.append)
    body = {"model": "mock/lorem-20", "messages": [{"role": "user", "content": "hi"}],
            "provider_options": {"fail_after": 3}}
    async with client(app) as c:
        r = await c.post("/v1/generate", json=body)
    assert r.status_code == 502 and r.json()["status"] == "error"
    (report,) = reports
    assert report.status == "error" and report.error_code == r.json()["error"]["code"]
    assert report.stop_reason == "error" and report.request_id is not None


def test_the_http_status_of_a_json_answer_is_decided_by_the_api_from_the_final():
    from app.api.responses import final_status_code
    from app.core.events import AssistantMessage, FinalEvent, Usage

    def final(status, code=None):
        error = {"code": code, "message": "m", "retryable": False} if code else None
        return FinalEvent(status=status, message=AssistantMessage(), usage=Usage(), stop_reason=None, model="m",
                          provider="p", error=error)

    assert final_status_code(final("ok")) == 200 and final_status_code(final("blocked", "validation_failed")) == 200
    assert final_status_code(final("error", "internal_error")) == 500
    assert final_status_code(final("error", "upstream_timeout")) == 504
    assert final_status_code(final("error", "upstream_incomplete")) == 502
    assert final_status_code(final("cancelled", "cancelled")) == 502
