"""Where each cloud's model answers: the URL of one streamed call (pure, no I/O).

- Vertex AI (https://cloud.google.com/vertex-ai/generative-ai/docs/reference/rest): `{host}/v1/projects/
  {project}/locations/{location}/publishers/{google|anthropic}/models/{model}:{method}`; the host is
  `https://{location}-aiplatform.googleapis.com`, or `https://aiplatform.googleapis.com` for the
  `global` location; `VERTEX_BASE_URL` replaces the host (a proxy, Private Service Connect, a fake).
  Gemini streams with `streamGenerateContent?alt=sse`, Claude with `streamRawPredict`.
- Azure OpenAI (https://learn.microsoft.com/azure/ai-foundry/openai/reference): with
  `OPENAI_API_VERSION` the deployment paths `{endpoint}/openai/deployments/{deployment}/chat/completions
  ?api-version=...` (Responses: `{endpoint}/openai/responses?api-version=...`, the deployment as
  `model`); without it the v1 API, `{endpoint}/openai/v1/chat/completions` and `.../v1/responses`,
  the deployment as `model`. An endpoint that already ends in `/openai/v1` is used as given.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import quote

from app.core.messages import AdapterError

__all__ = ["azure_url", "is_vertex_claude", "vertex_host", "vertex_url"]


def vertex_host(location: str, base_url: str | None = None) -> str:
    if base_url:
        return base_url.rstrip("/")
    return "https://aiplatform.googleapis.com" if location == "global" else f"https://{location}-aiplatform.googleapis.com"


def is_vertex_claude(model: str) -> bool:
    """Anthropic's models on Vertex AI are named `claude-...` (`claude-sonnet-4-5@20250929`)."""
    return model.startswith("claude-")


def vertex_url(model: str, *, project: str, location: str, base_url: str | None = None) -> str:
    """The streaming URL of `model` (Gemini or Claude) in `project` at `location`."""
    if not model or "/" in model:
        raise AdapterError(f"not a Vertex AI model name: {model!r}", field="model")
    publisher, method = ("anthropic", "streamRawPredict") if is_vertex_claude(model) else (
        "google", "streamGenerateContent?alt=sse")
    return (f"{vertex_host(location, base_url)}/v1/projects/{quote(project, safe='')}/locations/"
            f"{quote(location, safe='')}/publishers/{publisher}/models/{quote(model, safe='@')}:{method}")


def azure_url(endpoint: str, deployment: str, *, api: Literal["chat", "responses"],
              api_version: str | None = None) -> str:
    """The Chat Completions or Responses URL of `deployment` on an Azure OpenAI resource."""
    if not deployment or "/" in deployment:
        raise AdapterError(f"not an Azure OpenAI deployment name: {deployment!r}", field="model")
    base = endpoint.rstrip("/")
    path = "chat/completions" if api == "chat" else "responses"
    if base.endswith("/openai/v1"):
        return f"{base}/{path}"
    if api_version is None:
        return f"{base}/openai/v1/{path}"
    version = quote(api_version, safe="-.")
    if api == "chat":
        return f"{base}/openai/deployments/{quote(deployment, safe='-._')}/{path}?api-version={version}"
    return f"{base}/openai/{path}?api-version={version}"
