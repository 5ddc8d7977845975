"""MCP servers the operator declares (`[[mcp_servers]]` in the config file, FOUNDRY_MCP_SERVERS JSON).

Two transports: `stdio` (a command the gateway starts, with its arguments and environment) and
`http` (Streamable HTTP at a URL, with headers or a bearer). Secrets come from the gateway's
environment by name (`env_from`, `headers_from`, `bearer_env`) or as values (`env`, `headers`,
secret strings): either way they are never logged, and a server that quotes one back has it
replaced by `[redacted]` before the text goes anywhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

__all__ = ["MCP_SEPARATOR", "McpSecretMissing", "McpServerConfig", "ResolvedSecrets", "mcp_tool_name"]

MCP_SEPARATOR = "__"
"""`<server>__<tool>`: the name the model and /mcp clients see."""
SERVER_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
_PROVIDER_NAME = r"^[a-z0-9][a-z0-9_.-]{0,63}$"


class McpSecretMissing(ValueError):
    """A server's secret names an environment variable that is not set (the gateway does not start)."""


def mcp_tool_name(server: str, tool: str) -> str:
    return f"{server}{MCP_SEPARATOR}{tool}"


@dataclass(slots=True, frozen=True)
class ResolvedSecrets:
    """What a server's secrets resolve to, at start: the child's environment or the headers."""

    env: Mapping[str, str]
    headers: Mapping[str, str]

    @property
    def values(self) -> list[str]:
        return [v for v in (*self.env.values(), *self.headers.values()) if v]


class McpServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=SERVER_NAME_RE, description="The server's name: its tools are `<name>__<tool>`. "
                                                          "No `__` inside.")
    transport: Literal["stdio", "http"] = Field(description="`stdio` (command) or `http` (Streamable HTTP url).")
    command: str | None = Field(default=None, min_length=1, description="stdio: the program to start.")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments.")
    env: dict[Annotated[str, Field(pattern=_ENV_NAME)], SecretStr] = Field(
        default_factory=dict, description="stdio: environment values for the child (secrets).")
    env_from: dict[Annotated[str, Field(pattern=_ENV_NAME)], Annotated[str, Field(pattern=_ENV_NAME)]] = Field(
        default_factory=dict, description="stdio: child variable -> the gateway's environment variable it is "
                                          "read from at start (the value is a secret).")
    cwd: str | None = Field(default=None, description="stdio: working directory of the child.")
    url: str | None = Field(default=None, description="http: the server's Streamable HTTP endpoint.")
    headers: dict[str, SecretStr] = Field(default_factory=dict, description="http: headers sent (secrets).")
    headers_from: dict[str, Annotated[str, Field(pattern=_ENV_NAME)]] = Field(
        default_factory=dict, description="http: header -> the gateway's environment variable holding its value.")
    bearer_env: str | None = Field(default=None, pattern=_ENV_NAME, description=(
        "http: the gateway's environment variable holding a bearer token (`Authorization: Bearer ...`)."))
    timeout: float = Field(default=30.0, gt=0, le=600, description="Seconds one tool call may take.")
    connect_timeout: float = Field(default=15.0, gt=0, le=300, description="Seconds to connect and list tools.")
    max_concurrency: int = Field(default=8, ge=1, le=1000, description="Calls in flight to this server at once.")
    max_result_bytes: int = Field(default=1 << 20, ge=1024, le=64 << 20, description=(
        "A result larger than this (its text, structured content and media) is refused as an error."))
    restart_backoff_seconds: float = Field(default=1.0, gt=0, le=60, description=(
        "First wait before reconnecting a server that died or could not start; doubled per failure."))
    restart_backoff_max_seconds: float = Field(default=30.0, gt=0, le=3600, description="The longest such wait.")
    providers: list[Annotated[str, Field(pattern=_PROVIDER_NAME)]] | None = Field(
        default=None, description="Providers its tools are offered to in runs (all when unset).")

    @model_validator(mode="after")
    def _transport_fields(self) -> McpServerConfig:
        if MCP_SEPARATOR in self.name:
            raise ValueError(f"name {self.name!r} must not contain {MCP_SEPARATOR!r}")
        if self.transport == "stdio":
            if not self.command:
                raise ValueError("a stdio server needs `command`")
            if self.url or self.headers or self.headers_from or self.bearer_env:
                raise ValueError("url, headers, headers_from and bearer_env are for http servers")
        else:
            if not self.url or not re.match(r"^https?://.+", self.url):
                raise ValueError("an http server needs `url` (http:// or https://)")
            if self.command or self.args or self.env or self.env_from or self.cwd:
                raise ValueError("command, args, env, env_from and cwd are for stdio servers")
        return self

    def resolve(self, environ: Mapping[str, str] | None = None) -> ResolvedSecrets:
        """The secrets read from the environment now; ValueError naming a variable that is not set."""
        environ = os.environ if environ is None else environ
        missing = [var for var in (*self.env_from.values(), *self.headers_from.values(), self.bearer_env)
                   if var is not None and not environ.get(var)]
        if missing:
            raise McpSecretMissing(f"{self.name}: environment variable {missing[0]} is not set")
        env = {k: v.get_secret_value() for k, v in self.env.items()}
        env.update({child: environ[var] for child, var in self.env_from.items()})
        headers = {k: v.get_secret_value() for k, v in self.headers.items()}
        headers.update({header: environ[var] for header, var in self.headers_from.items()})
        if self.bearer_env is not None:
            headers["authorization"] = f"Bearer {environ[self.bearer_env]}"
        return ResolvedSecrets(env=env, headers=headers)
