"""The end of a run is built in one place (app/core/ending.py): every final by `final_event`, every
report by `RunEnding.end`, and a report tells its outcome from its final."""

import ast
from pathlib import Path

import pytest

from app.core.ending import RouteNames, RunEnding, final_event, final_status
from app.core.events import AssistantMessage, Usage
from app.core.report import RunReport
from app.core.transcript import Transcript

APP = Path(__file__).resolve().parent.parent / "app"


def _calls(name: str) -> set[str]:
    """The app modules that call `name(...)`."""
    found = set()
    for path in APP.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
                found.add(str(path.relative_to(APP)))
    return found


def test_finals_and_reports_are_made_only_by_the_ending_module() -> None:
    assert _calls("FinalEvent") == {"core/ending.py"}
    assert _calls("RunReport") == {"core/ending.py"}


def test_a_final_that_is_not_ok_takes_its_statuss_stop_reason_and_a_bare_one_is_empty() -> None:
    error = {"code": "upstream_error", "message": "boom", "retryable": False}
    final = final_event("error", error, model="m", provider="p", stop_reason="stop")
    assert (final.stop_reason, final.message, final.usage, final.attempts) == ("error", AssistantMessage(), Usage(), ())
    assert final_event("blocked", error, model="m", provider="p").stop_reason == "content_filter"
    ok = final_event("ok", model="m", provider="p", stop_reason="length", route=RouteNames(route="r", target="p/m"))
    assert (ok.stop_reason, ok.error, ok.route, ok.target) == ("length", None, "r", "p/m")


def test_a_status_given_as_text_is_checked() -> None:
    assert final_status("cancelled") == "cancelled"
    with pytest.raises(ValueError):
        final_status("done")


def test_the_report_reads_its_outcome_from_its_final_and_tells_the_observers() -> None:
    seen: list[RunReport] = []
    ending = RunEnding(model="alias", provider="p", request_id="req", owner="key", observers=[seen.append])
    final = ending.bare_final("cancelled", {"code": "cancelled", "message": "gone", "retryable": False},
                              served_model="p/served", steps=2)
    report = ending.end(final, stream_id="str_1", transcript=Transcript(), logger=None,
                        events={"start": 1, "final": 1}, opened=False)
    assert seen == [report]
    assert (report.status, report.stop_reason, report.error_code, report.steps) == ("cancelled", "cancelled", "cancelled", 2)
    assert (report.model, report.served_model, report.owner, report.events, report.opened) == (
        "alias", "p/served", "key", 2, False)
    assert report.usage is final.usage and report.validation is None and report.duration >= 0
