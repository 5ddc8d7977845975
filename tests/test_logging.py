"""One JSON log line per request, with ids and numbers, never content or secrets."""

import json

import httpx

from app.main import create_app
from app.settings import Settings


async def test_one_line_per_request_without_content(capsys):
    secret = "sk-test-0123456789abcdefghij"
    app = create_app(Settings(openai_api_key=secret))
    body = {"model": "mock/echo", "messages": [{"role": "user", "content": "my private words"}]}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        await c.post("/v1/stream", json=body, headers={"X-Request-ID": "rid-1"})
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    requests = [line for line in lines if line.get("event") == "request"]
    assert len(requests) == 1
    line = requests[0]
    assert line["request_id"] == "rid-1" and line["model"] == "mock/echo" and line["status"] == 200
    assert line["stream_status"] == "ok" and line["output_tokens"] == 3 and line["ttft_ms"] is not None
    assert line["stream_id"].startswith("str_") and "duration_ms" in line
    everything = json.dumps(lines)
    assert "private" not in everything and secret not in everything


async def test_a_gateway_logging_warnings_and_up_gathers_no_request_line(capsys, monkeypatch):
    """The request line is info: at `FOUNDRY_LOG_LEVEL=warning` it is not written, and its fields (the
    run's report among them) are not gathered either; back at info, the line is whole."""
    from app.api.middleware import RequestLog

    gathered: list[str] = []
    fields = RequestLog.fields
    monkeypatch.setattr(RequestLog, "fields", lambda self: gathered.append(self.request_id) or fields(self))
    body = {"model": "mock/echo", "messages": [{"role": "user", "content": "hi"}]}
    for level, expected in (("warning", []), ("info", ["rid-info"])):
        app = create_app(Settings(log_level=level))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            assert (await c.post("/v1/stream", json=body, headers={"X-Request-ID": f"rid-{level}"})).status_code == 200
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
        assert gathered == expected
        assert [line["request_id"] for line in lines if line.get("event") == "request"] == expected
        gathered.clear()
