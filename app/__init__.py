"""Foundry Gateway: one canonical SSE event stream for every LLM provider."""

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("foundry-gateway")  # pyproject.toml's version, the one place it is written
except PackageNotFoundError:  # run from a source tree that was never installed
    VERSION = "0+unknown"
