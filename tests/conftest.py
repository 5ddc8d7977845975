import os
from collections.abc import Iterator
from pathlib import Path

import certifi
import pytest
from hypothesis import HealthCheck, settings

from tests.records_support import database_url, postgres, postgres_url  # noqa: F401 - database fixtures

# Property tests re-split recordings many ways; keep CI bounded, deterministic and deadline-free.
settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="session")
def _records_in_a_temporary_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Apps the tests build keep their run records (the default SQLite file) in a temporary data
    directory, never in the checkout's ./var. Tests about records pass their own database.

    Nor do they refuse runs because this (shared, busy) machine makes their event loop late: with
    the default bound (0.5 s) a test whose client shares the gateway's loop got 503 `overloaded`
    whenever the machine was loaded. Tests about that bound set it (tests/test_overload.py)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FOUNDRY_DATA_DIR", str(tmp_path_factory.mktemp("foundry-data")))
        mp.setenv("FOUNDRY_MAX_LOOP_LAG_SECONDS", "0")
        mp.setenv("SSL_CERT_FILE", _one_root(tmp_path_factory.mktemp("trust") / "root.pem"))
        yield


def _one_root(path: Path) -> str:
    """A trust store of one root certificate for the tests, which speak plain HTTP on loopback:
    every httpx client loads its trust store when it is built (certifi's ~140 roots: ~35 ms of CPU
    each, a third of the CPU of a test file that builds a client per test), and so does each
    gateway the tests start. Tests about TLS name their own CA (tests/test_transport.py)."""
    bundle = Path(certifi.where()).read_text()
    end = "-----END CERTIFICATE-----"
    path.write_text(bundle[bundle.index("-----BEGIN CERTIFICATE-----") : bundle.index(end) + len(end)] + "\n")
    return str(path)


from tests.redis_support import private_redis, redis_url  # noqa: E402,F401  (fixtures for the Redis tests)
