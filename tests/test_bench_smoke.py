"""The benchmark still runs (tiny sizes; no timing is asserted, numbers live in bench/ output)."""

import json
import subprocess
import sys
import time

import pytest

from tests.support import REPO

# The benchmarks' own smoke tests: `make bench` runs them before the benchmarks (they check the bench
# scripts, not the gateway; `make test` leaves them out to keep CI short).
pytestmark = [pytest.mark.slow, pytest.mark.bench]


def test_bench_runs_end_to_end_and_reports_every_number(tmp_path):
    out = tmp_path / "bench.json"
    subprocess.run(
        [sys.executable, "bench/run.py", "--streams", "4", "--chunks", "5", "--concurrency", "2",
         "--ttft-rounds", "2", "--memory-streams", "4", "--rounds", "2", "--requests", "4", "--gate", "--facades",
         "--json", str(out)],
        cwd=REPO, check=True, timeout=300, capture_output=True,  # three servers start slowly on a loaded machine
    )
    results = json.loads(out.read_text())
    assert {"relay", "gateway", "gateway_validators", "ratio", "ratio_validators", "openai_facade",
            "openai_facade_vs_stream", "anthropic_facade", "anthropic_facade_vs_stream"} <= set(results["cpu_us_per_chunk"])
    assert {"direct_median", "gateway_added_median", "relay_added_median"} <= set(results["ttft_ms_c1"])
    assert {"relay", "gateway", "gateway_over_relay"} == set(results["cpu_ms_per_request"])
    assert results["events_per_second_c50"]["gateway"] > 0 and results["events_per_second_c50"]["relay"] > 0
    assert {"per_open_stream", "relay_per_open_stream", "first_wave_per_open_stream", "relay_first_wave_per_open_stream",
            "per_retained_stream", "per_retained_stream_store_counted"} <= set(results["memory_kib"])
    assert {"added_ttft_ms_c1", "request_cpu_ms_over_relay"} <= set(results["goals"])


def test_workers_bench_reports_the_scaling_of_the_gateway_and_the_floor(tmp_path):
    out = tmp_path / "workers.json"
    subprocess.run([sys.executable, "bench/workers_bench.py", "--streams", "4", "--requests", "8", "--concurrency", "4",
                    "--rounds", "1", "--json", str(out)],
                   cwd=REPO, check=True, timeout=300, capture_output=True)  # four servers, two of them with 2 workers
    results = json.loads(out.read_text())
    for load in ("chunks_200", "chunks_1"):
        assert set(results[load]) == {"gateway_x1", "gateway_x2", "floor_x1", "floor_x2"}
        assert all(r["per_second"] > 0 and r["cpu_us_each"] >= 0 for r in results[load].values())  # CPU in ticks
    assert set(results["scaling_chunks"]) == set(results["scaling_requests"]) == {"gateway", "floor"}


def test_open_bench_runs_for_every_adapter():
    done = subprocess.run([sys.executable, "bench/open_bench.py", "--requests", "10"],
                          cwd=REPO, check=True, timeout=120, capture_output=True)
    figures = json.loads(done.stdout)["gateway_open_cpu_us"]
    assert set(figures) == {"gateway_built"}
    for way in figures.values():
        assert set(way) == {"openai/gpt-4o-mini", "openai-responses/gpt-4o-mini", "anthropic/claude"}
        assert all(us > 0 for us in way.values())


def test_cache_bench_reports_a_hits_ttft_and_cpu_against_a_miss(tmp_path):
    out = tmp_path / "cache.json"
    subprocess.run([sys.executable, "bench/cache_bench.py", "--requests", "5", "--rounds", "1", "--json", str(out)],
                   cwd=REPO, check=True, timeout=300, capture_output=True)
    results = json.loads(out.read_text())
    assert set(results["ttft_ms_median"]) == set(results["cpu_us_per_request"]) == {"miss", "hit"}
    assert "hit_added_ttft_ms" in results and "hit_cpu_ratio" in results


def test_record_ids_bench_reports_each_kind_of_id(tmp_path):
    out = tmp_path / "ids.json"
    subprocess.run([sys.executable, "bench/record_ids_bench.py", "--prefill", "100", "--rounds", "2", "--json", str(out)],
                   cwd=REPO, check=True, timeout=300, capture_output=True)
    results = json.loads(out.read_text())
    assert set(results["cpu_us_per_record"]) == {"random", "time_ordered"}
    assert all(v > 0 for v in results["cpu_us_per_record"].values()) and results["records_per_kind"] == 4000


def test_facade_bench_runs_and_reports_each_translation(tmp_path):
    out = tmp_path / "facade.json"
    subprocess.run([sys.executable, "bench/facade_bench.py", "--events", "200", "--json", str(out)],
                   cwd=REPO, check=True, timeout=60, capture_output=True)
    results = json.loads(out.read_text())
    assert set(results["us_per_event"]) == {"canonical_frame", "openai_chunk", "anthropic_delta", "responses_delta"}
    assert set(results["facade_vs_canonical_frame"]) == {"openai_chunk", "anthropic_delta", "responses_delta"}

def test_store_bench_reports_the_redis_to_memory_ratio_and_the_replica_lost_time(tmp_path):
    import shutil

    from tests.redis_support import unavailable

    if shutil.which("redis-server") is None:
        unavailable("bench/store_bench.py starts its own redis-server: none on PATH")
    out = tmp_path / "store.json"
    done = subprocess.run(
        [sys.executable, "bench/store_bench.py", "--streams", "4", "--chunks", "5", "--concurrency", "2",
         "--rounds", "1", "--lease", "2", "--json", str(out)],
        cwd=REPO, check=False, timeout=600, capture_output=True,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    results = json.loads(out.read_text())
    assert {"memory_store", "redis_store", "ratio", "redis_server"} == set(results["cpu_us_per_chunk"])
    assert results["replica_lost"]["final_error_code"] == "replica_lost"
    assert results["replica_lost"]["detected_after_kill_seconds"] > 0


def test_redis_writes_bench_reports_each_batch_size_for_each_client():
    import shutil

    from tests.redis_support import unavailable

    if shutil.which("redis-server") is None:
        unavailable("bench/redis_writes.py starts its own redis-server: none on PATH")
    done = subprocess.run([sys.executable, "bench/redis_writes.py", "--batches", "20", "--sizes", "1,3"],
                          cwd=REPO, check=False, timeout=120, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    results = json.loads(done.stdout)
    assert set(results) == {"1 per batch", "3 per batch"}
    assert all(set(r["us_per_batch"]) == {"socket_timeout", "none", "hiredis_packing"} for r in results.values())
    assert all(set(r["us_per_command_saved"]) == {"socket_timeout", "hiredis_packing"} for r in results.values())


def test_routing_bench_runs_and_reports_its_cost(tmp_path):
    out = tmp_path / "routing.json"
    subprocess.run([sys.executable, "bench/routing_bench.py", "--requests", "20", "--chunks", "3", "--rounds", "2",
                    "--json", str(out)], cwd=REPO, check=True, timeout=120, capture_output=True)
    results = json.loads(out.read_text())
    assert set(results["cpu_us_per_request"]) == {"direct", "routed_model", "routed_route"}
    assert "routing_cost_us_per_request" in results and "routing_cost_us_per_chunk" in results


def test_compare_runs_a_checkout_against_the_relay():
    done = subprocess.run([sys.executable, "bench/compare.py", ".", "--rounds", "3", "--requests", "6",
                           "--chunk-streams", "6"], cwd=REPO, check=True, timeout=300, capture_output=True)
    results = json.loads(done.stdout)
    assert set(results) == {"direct_ttft_ms", ".", "relay"}
    for name in (".", "relay"):  # CPU is read in 10 ms ticks: six requests may read 0
        assert results[name]["cpu_ms_per_request"] >= 0 and results[name]["added_ttft_median_ms"] is not None
        assert results[name]["cpu_us_per_chunk"] > 0  # 1,200 chunks each


def test_transport_bench_reports_each_client(tmp_path):
    out = tmp_path / "transport.json"
    subprocess.run([sys.executable, "bench/transport_bench.py", "--requests", "5", "--rounds", "1", "--json", str(out)],
                   cwd=REPO, check=True, timeout=120, capture_output=True)
    ways = json.loads(out.read_text())["ways"]
    assert set(ways) == {"httpx2_default", "sdk_aiohttp", "gateway_on_httpx2_default", "gateway_on_sdk_aiohttp",
                         "gateway_own", "aiohttp"}
    assert all(way["round_trip_median_us"] > 0 for way in ways.values())


@pytest.fixture(scope="module")
def paced_results(tmp_path_factory):
    """One tiny run of bench/paced_bench.py: the pacer, the floor and both stores under paced load."""
    import shutil

    from tests.redis_support import unavailable

    if shutil.which("redis-server") is None:
        unavailable("bench/paced_bench.py starts its own redis-server: none on PATH")
    out = tmp_path_factory.mktemp("paced") / "paced.json"
    done = subprocess.run(
        [sys.executable, "bench/paced_bench.py", "--streams", "6", "--tokens", "5", "--ramp", "0.05", "--rounds", "1",
         "--json", str(out)],
        cwd=REPO, check=False, timeout=300, capture_output=True,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return out


@pytest.mark.slow
def test_paced_bench_measures_every_token_of_each_target_and_shows_hiredis(paced_results):
    results = json.loads(paced_results.read_text())
    assert set(results["targets"]) == {"floor", "memory_store", "redis_store"}
    for figures in results["targets"].values():
        # every token of every stream came back with its upstream stamp: the gaps are real ones
        assert figures["events"] == 6 * 5 and figures["streams_without_tokens"] == 0
        assert figures["outcomes"] == {"served": 6, "refused": 0, "failed": 0}
        assert {"p50", "p99", "max"} == set(figures["gap_added_ms"])
        assert figures["ttft_ms"]["p50"] > 0 and figures["transit_ms"]["p50"] > 0
    assert "redis_server_cpu_us_per_event" in results["targets"]["redis_store"]
    assert results["hiredis"] == {"redis_utils_HIREDIS_AVAILABLE": True, "extension_mapped_in_gateway": True}
    assert set(results["core_share"]) == {"load_generator", "pacer"}


@pytest.mark.slow
def test_goals_prints_one_line_per_goal_from_one_run(tmp_path, paced_results):
    run = tmp_path / "run.json"
    subprocess.run(
        [sys.executable, "bench/run.py", "--streams", "4", "--chunks", "5", "--concurrency", "2", "--ttft-rounds", "2",
         "--memory-streams", "4", "--rounds", "1", "--requests", "4", "--gate", "--json", str(run)],
        cwd=REPO, check=True, timeout=300, capture_output=True,
    )
    out = tmp_path / "goals.json"
    done = subprocess.run([sys.executable, "bench/goals.py", str(run), str(paced_results), "--json", str(out)],
                          cwd=REPO, check=True, timeout=60, capture_output=True, text=True)
    goals = json.loads(out.read_text())
    assert len(goals) == 15
    lines = done.stdout.splitlines()
    inconclusive = sum(bool(g["inconclusive"]) for g in goals)
    assert lines[-1] == f"{sum(g['holds'] is True for g in goals)} of 15 goals met, {inconclusive} inconclusive"
    peers = [g for g in goals if "Portkey" in g["name"]]  # no peers in this run: said so, not judged
    assert len(peers) == 2 and all("make bench-peers" in g["inconclusive"] for g in peers)
    for goal in goals:  # each goal's line names it, with its figure (or n/a) and its limit
        line = next(line for line in lines if goal["name"] in line)
        assert f"goal <= {goal['limit']}" in line
        assert line.split()[0] in {"met", "NOT", "no", "inconclusive"}
    assert any("redis-py reply parser: hiredis" in line for line in lines)


@pytest.mark.timeout(900)  # the subprocess's own bound: two gateways start under valgrind (10 min on a slow machine)
def test_instructions_bench_counts_a_gateway_and_the_floor_under_callgrind(tmp_path):
    import shutil

    from tests.redis_support import unavailable

    if shutil.which("valgrind") is None:
        unavailable("bench/instructions.py counts under valgrind: none on PATH (apt-get install valgrind)")
    out = tmp_path / "instructions.json"
    subprocess.run([sys.executable, "bench/instructions.py", "--requests", "2", "--streams", "0", "--json", str(out)],
                   check=True, timeout=900, cwd=REPO, capture_output=True)
    results = json.loads(out.read_text())
    floor, gateway = results["relay"], results[str(REPO.resolve())]
    # a request through the gateway runs more instructions than through the floor, and both are counted
    assert 0 < floor["instructions_per_request"] < gateway["instructions_per_request"]
    assert gateway["per_request_over_floor"] > 1


def test_a_benchmark_killed_mid_run_leaves_no_server_behind(tmp_path):
    """A test's timeout kills a benchmark with SIGKILL, which runs no `finally`: its servers (here the
    fake upstream and a private Redis) die with it (`bench.run.dies_with_parent`), where they went on
    loading the machine and skewing the next benchmark's numbers. The limiter bench's Redis too
    (bench/limiter_bench.py; LiteLLM's and Portkey's servers, bench/litellm_bench.py and
    bench/peers_bench.py, start the same way)."""
    import shutil

    from tests.redis_support import unavailable

    if shutil.which("redis-server") is None:
        unavailable("bench/store_bench.py's redis_server needs redis-server on PATH")
    pids = tmp_path / "pids"
    script = ("import shutil, sys, time\nfrom pathlib import Path\nsys.path.insert(0, '.')\n"
              "from bench.run import server, free_port\n"
              "from bench.store_bench import redis_server\nfrom bench.limiter_bench import _redis_server\n"
              "with server('bench.upstream:app', free_port()) as up, redis_server() as (red, _):\n"
              f"    lim = _redis_server(shutil.which('redis-server'), free_port(), Path({str(tmp_path)!r}))\n"
              f"    open({str(pids)!r}, 'w').write(f'{{up.pid}} {{red.pid}} {{lim.pid}}')\n    time.sleep(600)\n")
    bench = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while not pids.exists() or not pids.read_text():
            assert bench.poll() is None and time.monotonic() < deadline, "the servers did not start"
            time.sleep(0.1)
        children = [int(pid) for pid in pids.read_text().split()]
    finally:
        bench.kill()
        bench.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in children), children


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:  # the state after the command's closing parenthesis, as bench/run.py reads it
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, waiting for its reaper
    except FileNotFoundError:
        return False
