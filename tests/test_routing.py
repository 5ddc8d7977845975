"""Routing pieces on their own: route configuration (validated at start), the breaker's states,
the weighted order, backoff and Retry-After, and the routed stream's deadlines."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from pydantic import ValidationError

from app.config_file import ConfigError
from app.core.patches import Patch, TextDelta
from app.main import create_app
from app.providers.registry import ProviderRegistry
from app.routing.breaker import Breaker
from app.routing.errors import DeadlineExceeded
from app.routing.router import Router
from app.routing.stream import RoutedStream
from app.routing.targets import Policy
from app.routing.verdicts import retry_after_seconds
from app.settings import Settings
from tests.fakes import FakeAdapter


@pytest.mark.parametrize(("routes", "message"), [
    ({"a": {"targets": ["b"]}, "b": {"targets": ["c", "a"]}, "c": {"targets": ["mock/x"]}},
     "routes.a.targets: the routes form a cycle: a -> b -> a"),
    ({"a": {"targets": ["mock/x"], "hedge_after_ms": 100}}, "routes.a.hedge_after_ms: hedging needs"),
    ({"a/b": {"targets": ["mock/x"]}}, "routes.a/b: a route name has no '/'"),
    ({"a": {"targets": ["mock/x"], "first_token_timeout": 1000}}, "routes.a.first_token_timeout: 1000.0 is above"),
    ({"a": {"targets": [{"model": "mock/x", "weight": 0}]}}, "routes.a.targets.0.weight"),
    ({"a": {"targets": []}}, "routes.a.targets"),
    ({"a": {"targets": ["mock/x"], "strategy": "random"}}, "routes.a.strategy"),
])
def test_bad_routes_are_refused_when_settings_load(routes: dict, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(routes=routes)
    assert message in str(info.value)


def test_a_route_to_an_unknown_provider_is_refused_when_the_app_starts() -> None:
    with pytest.raises(ConfigError, match=r"routes\.smart\.targets\.1\.model: unknown provider 'nope'"):
        create_app(Settings(routes={"smart": {"targets": ["mock/a", "nope/b"]}}))


def test_routes_from_the_environment_and_from_the_toml_file(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("FOUNDRY_ROUTES", '{"fast": {"targets": ["mock/a", {"model": "mock/b", "weight": 3}]}}')
    routes = Settings().routes
    assert [t.model for t in routes["fast"].targets] == ["mock/a", "mock/b"] and routes["fast"].targets[1].weight == 3
    monkeypatch.delenv("FOUNDRY_ROUTES")
    config = tmp_path / "gateway.toml"
    config.write_text('[routes.smart]\nstrategy = "weighted"\nhedge_after_ms = 400\n'
                      'targets = ["mock/a", {model = "mock/b", weight = 2, options = {seed = 1}}]\n')
    monkeypatch.setenv("FOUNDRY_CONFIG", str(config))
    smart = Settings().routes["smart"]
    assert smart.strategy == "weighted" and smart.hedge_after_ms == 400
    assert smart.targets[1].options == {"seed": 1}


def test_the_breaker_opens_cools_down_and_probes_once() -> None:
    now = [0.0]
    breaker = Breaker(failures=2, cooldown=10, clock=lambda: now[0])
    breaker.failure()
    assert breaker.allow() and breaker.state == "closed"
    breaker.failure()
    assert breaker.state == "open" and not breaker.allow() and breaker.retry_in() == 10
    now[0] = 10
    assert breaker.allow() and breaker.state == "half_open"  # the probe
    assert not breaker.allow()  # one probe at a time
    breaker.failure()
    assert breaker.state == "open" and not breaker.allow()
    now[0] = 20
    assert breaker.allow()
    breaker.success()
    assert breaker.state == "closed" and breaker.allow() and breaker.failed == 0


async def test_weighted_routes_spread_first_picks_by_weight_and_keep_the_rest_as_fallbacks() -> None:
    registry = ProviderRegistry({"a": FakeAdapter(name="a"), "b": FakeAdapter(name="b")})
    routes = Settings(routes={"w": {"strategy": "weighted", "targets": [{"model": "a/m", "weight": 1},
                                                                         {"model": "b/m", "weight": 3}]}}).routes
    router = Router(registry=registry, routes=routes, policy=Policy(), rng=random.Random(7))
    orders = [tuple(t.name for t in router.session("w").targets) for _ in range(400)]
    firsts = Counter(order[0] for order in orders)
    assert set(orders) == {("a/m", "b/m"), ("b/m", "a/m")}  # every order keeps both targets
    assert firsts["b/m"] > 2 * firsts["a/m"] > 0


def test_backoff_is_exponential_jittered_and_capped() -> None:
    router = Router(registry=ProviderRegistry({}), routes={}, policy=Policy(backoff=0.1, backoff_max=0.5),
                    rng=random.Random(1))
    for retry, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.5), (9, 0.5)]:
        delays = [router.backoff(retry) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays) and len(set(delays)) > 1


@pytest.mark.parametrize(("value", "seconds"), [("3", 3.0), ("0.5", 0.5), (None, None), ("soon", None),
                                                ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0)])
def test_retry_after_values(value: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(value) == seconds


async def _batches(release: asyncio.Event) -> AsyncIterator[list[Patch]]:
    yield [TextDelta(text="one")]
    await release.wait()
    yield [TextDelta(text="two")]


class _Upstream:
    def __init__(self, release: asyncio.Event) -> None:
        self.iterator = _batches(release)
        self.closed = False

    def __aiter__(self) -> AsyncIterator[list[Patch]]:
        return self.iterator

    async def aclose(self) -> None:
        self.closed = True


def _routed(upstream: _Upstream, *, idle: float, total: float = 60) -> RoutedStream:
    loop = asyncio.get_running_loop()
    return RoutedStream(upstream=upstream, iterator=upstream.iterator, buffered=[], ended=False, idle=idle,
                        total=total, total_at=loop.time() + total)


async def test_the_idle_deadline_cancels_a_silent_read_and_closes_the_upstream() -> None:
    upstream = _Upstream(asyncio.Event())  # never released: the second read stays silent
    stream = _routed(upstream, idle=0.05)
    seen = []
    with pytest.raises(DeadlineExceeded) as info:
        async with asyncio.timeout(10):
            async for batch in stream:
                seen.append(batch)
    assert info.value.deadline == "idle" and info.value.code == "timeout" and len(seen) == 1
    assert upstream.closed


async def test_time_the_run_spends_elsewhere_is_not_upstream_silence() -> None:
    release = asyncio.Event()
    release.set()  # the upstream answers at once whenever it is read
    upstream = _Upstream(release)
    seen = []
    async for batch in _routed(upstream, idle=0.05):
        seen.append(batch)
        await asyncio.sleep(0.2)  # the run is busy (a slow validator, a slow client), not reading
    assert len(seen) == 2 and upstream.closed
