"""The benchmark still runs (tiny sizes; no timing is asserted, numbers live in bench/ output)."""

import json
import subprocess
import sys

from tests.support import REPO


def test_bench_runs_end_to_end_and_reports_every_number(tmp_path):
    out = tmp_path / "bench.json"
    subprocess.run(
        [sys.executable, "bench/run.py", "--streams", "4", "--chunks", "5", "--concurrency", "2",
         "--ttft-rounds", "2", "--memory-streams", "4", "--gate", "--facades", "--facade-rounds", "1", "--json", str(out)],
        cwd=REPO, check=True, timeout=300, capture_output=True,  # a guard, not a timing: the machine is shared
    )
    results = json.loads(out.read_text())
    assert set(results["cpu_us_per_chunk"]) == {"relay", "gateway", "ratio", "gateway_two_regex_validators",
                                                "stream_interleaved", "openai_facade", "openai_facade_vs_stream",
                                                "anthropic_facade", "anthropic_facade_vs_stream"}
    for key in ("ttft_ms_c1", "ttft_ms_c50"):
        assert {"direct_median", "gateway_median", "added_median", "relay_added_median"} <= set(results[key])
    assert results["gateway_events_per_second"] > 0 and "memory_kib_per_open_stream" in results


def test_facade_bench_runs_and_reports_each_translation(tmp_path):
    out = tmp_path / "facade.json"
    subprocess.run([sys.executable, "bench/facade_bench.py", "--events", "200", "--json", str(out)],
                   cwd=REPO, check=True, timeout=60, capture_output=True)
    results = json.loads(out.read_text())
    assert set(results["us_per_event"]) == {"canonical_frame", "openai_chunk", "anthropic_delta"}
    assert set(results["facade_vs_canonical_frame"]) == {"openai_chunk", "anthropic_delta"}
