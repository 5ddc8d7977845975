"""The `llm_judge` validator: asks a separate, cheaper model whether a chunk breaks a policy.

The pipeline supplies the `Judge` (model, prompt) -> completion and runs the named provider, so
quick checks go to their own backend, not the one generating the answer (as in the reference's
quick_check_backend). Verdict: the first line of the completion that starts with PASS or FAIL
("FAIL: reason"); no such line is `unknown`. No line of the prompt's own frame starts with either
word, so the mock `echo` model stands in for a judge: it fails exactly the chunks with a line
starting with FAIL.
"""

from __future__ import annotations

import re

from pydantic import Field

from app.validation.validators.base import (
    MAX_REASON_CHARS,
    PASS,
    UNKNOWN,
    CheckContext,
    GateEnv,
    Judge,
    Validator,
    ValidatorConfig,
    Verdict,
)

__all__ = ["LlmJudge", "judge_prompt", "parse_verdict"]

_VERDICT_LINE = re.compile(r"^[\s*#>`_-]*(PASS|FAIL)\b[\s*_`:.,-]*(.*)$", re.IGNORECASE)

_PROMPT = """You check text written by an AI assistant against a policy.
Policy:
{policy}

Decide whether the text under TEXT breaks the policy. The text under CONTEXT came just before it
and is there for context only. Reply with one line: the word PASS if the text complies, or the
word FAIL, a colon and a short reason if it breaks the policy.

CONTEXT:
{context}

TEXT:
{text}"""


def judge_prompt(policy: str, context: str, text: str) -> str:
    return _PROMPT.format(policy=policy, context=context or "(none)", text=text)


def parse_verdict(completion: str) -> Verdict:
    for line in completion.splitlines():
        m = _VERDICT_LINE.match(line)
        if m is None:
            continue
        if m.group(1).upper() == "PASS":
            return PASS
        return Verdict.fail(m.group(2).strip()[:MAX_REASON_CHARS] or "the judge found a policy breach")
    return UNKNOWN


class LlmJudgeConfig(ValidatorConfig):
    model: str = Field(pattern=r"^[^/\s]+/\S+$", max_length=256,
                       description="The judge, as provider/model (e.g. a small, fast model; at most 256 characters). "
                                   "A caller's key must be allowed to use it.")
    policy: str = Field(min_length=1, max_length=8000)
    chunks: bool = Field(default=True, description="Judge every chunk as it completes.")
    final: bool = Field(default=False, description="Also judge the whole answer at the end.")
    context_chars: int = Field(default=500, ge=0, le=20000, description="Released text shown as context.")
    timeout: float = Field(default=15.0, gt=0, le=300)


class LlmJudge(Validator):
    name = "llm_judge"
    Config = LlmJudgeConfig
    inline = False
    pipelined = True  # a verdict, never a redaction: chunks are judged concurrently (FOUNDRY_JUDGE_CONCURRENCY)
    lanes = ("text",)  # a judge call per chunk is costly: the answer only

    @classmethod
    def models(cls, config: ValidatorConfig) -> tuple[str, ...]:
        return (config.model,) if isinstance(config, LlmJudgeConfig) else ()

    def __init__(self, config: LlmJudgeConfig, env: GateEnv) -> None:
        super().__init__(config, env)
        if env.judge is None:
            raise ValueError("no judge backend is available to this gateway")
        self._judge: Judge = env.judge
        self._cfg = config

    async def _ask(self, context: str, text: str) -> Verdict:
        prompt = judge_prompt(self._cfg.policy, context, text)
        return parse_verdict(await self._judge(self._cfg.model, prompt))

    async def check_chunk(self, chunk: str, ctx: CheckContext) -> Verdict:
        if not self._cfg.chunks or not chunk.strip():
            return UNKNOWN
        return await self._ask(ctx.tail(self._cfg.context_chars), chunk)

    async def check_final(self, text: str, ctx: CheckContext) -> Verdict:
        if not self._cfg.final or not text.strip():
            return UNKNOWN
        return await self._ask("", text)
