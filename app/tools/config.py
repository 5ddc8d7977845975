"""How the operator registers gateway tools in configuration (`tools` in Settings).

One list, each item tagged by `kind`:
- `builtin`: a tool that ships with the gateway (`calculator`).
- `python`: a callable by import path, `target = "package.module:function"`.
- `http`: an endpoint at a fixed `url` (JSON in, JSON out).
Every item may set `timeout` (seconds), `providers` (the providers it is offered to and run
for; all when unset) and `processor` (import path of a transcript display processor).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from app.core.messages import TOOL_NAME_RE, ToolSpec

__all__ = ["BUILTIN_TOOLS", "BuiltinToolConfig", "HttpToolConfig", "PythonToolConfig", "ToolConfig",
           "default_tools"]

BUILTIN_TOOLS = ("calculator",)
_IMPORT_PATH = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"
_PROVIDER_NAME = r"^[a-z0-9][a-z0-9_.-]{0,63}$"


class _ToolConfigBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=TOOL_NAME_RE.pattern, description="The tool's name, as the model calls it.")
    timeout: float = Field(default=10.0, gt=0, le=600, description="Seconds one call may take.")
    providers: list[Annotated[str, Field(pattern=_PROVIDER_NAME)]] | None = Field(
        default=None, description="Providers this tool is offered to and run for (all when unset).",
    )
    processor: str | None = Field(
        default=None, pattern=_IMPORT_PATH,
        description="Import path of a transcript processor shaping this tool's input/output for display.",
    )
    deterministic: bool = Field(default=False, description=(
        "The same arguments always give the same result: runs that call it may be cached (docs/caching.md)."))


class _DeclaredTool(_ToolConfigBase):
    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema (type object) of the arguments, as the model sees it.",
    )

    @model_validator(mode="after")
    def _spec_is_valid(self) -> _DeclaredTool:
        self.spec()  # a bad schema fails at configuration load, not at the first call
        return self

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)


class BuiltinToolConfig(_ToolConfigBase):
    kind: Literal["builtin"] = "builtin"
    timeout: float = Field(default=5.0, gt=0, le=600)

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in BUILTIN_TOOLS:
            raise ValueError(f"no built-in tool {name!r} (built in: {', '.join(BUILTIN_TOOLS)})")
        return name


class PythonToolConfig(_DeclaredTool):
    kind: Literal["python"] = "python"
    target: str = Field(pattern=_IMPORT_PATH, description="`package.module:function`.")


class HttpToolConfig(_DeclaredTool):
    kind: Literal["http"] = "http"
    url: str = Field(description="The endpoint the gateway POSTs calls to (http or https).")
    headers: dict[str, SecretStr] = Field(default_factory=dict, description="Sent with every call (secrets).")

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")) or len(url) < 10:
            raise ValueError("url must be an http:// or https:// URL")
        return url


ToolConfig = Annotated[BuiltinToolConfig | PythonToolConfig | HttpToolConfig, Field(discriminator="kind")]


def default_tools() -> list[ToolConfig]:
    """Out of the box: the calculator, for the embedded mock provider only (real providers get no
    gateway tool the operator did not configure)."""
    return [BuiltinToolConfig(name="calculator", providers=["mock"])]
