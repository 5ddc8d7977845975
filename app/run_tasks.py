"""The runs' tasks: each run from its admission to its end, one asyncio task each.

`RunTasks.start(spec)` admits a run (503 when draining or full), then starts one asyncio task that
opens it (app/opener.py: the route to its first content, the stream log) and executes it
(app/run.py). The caller gets a `RunHandle`: `opened()` gives the `Run` once its log exists, or
raises the `GatewayError` that answers the request over HTTP. From then on every response reads
the run's log; none drives the run. One cancellation path: `RunHandle.cancel(reason)` cancels the
task (a reader whose client left, `POST /v1/stream/{id}/cancel` through the log's canceller, the
drain, a revoked key), and the run ends where it waits with the final that reason calls for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog

from app.cache.replay import ReplayRun
from app.cache.service import CachePlan, ResponseCache
from app.core.errors import GatewayError
from app.core.report import RunObserver
from app.lifecycle import FINALS_SECONDS, Admission, ShuttingDown
from app.observability import get_logger
from app.opener import RunOpener, RunSpec
from app.routing.router import Router, RouteSession
from app.run import CancelReason, Run
from app.streams.log import StreamLog
from app.tools import ToolRegistry
from app.tracing import RunTrace, Tracing

__all__ = ["ClientGone", "RunHandle", "RunTasks"]


class ClientGone(GatewayError):
    """The client left before its run's response began (nobody reads this answer)."""

    status = 499
    code = "client_closed_request"




class RunHandle:
    """The API's hold on one run: wait for it to open, cancel it. The task is the gateway's."""

    __slots__ = ("task", "reason", "detached", "trace", "owner", "cache", "_run", "_opened", "_begun")

    def __init__(self, owner: str | None = None) -> None:
        self.task: asyncio.Task[None] | None = None
        self.owner = owner
        """The API key id that started the run (None: open mode, the admin key)."""
        self.reason: CancelReason | None = None
        """Why the task was cancelled (the first reason given wins)."""
        self._run: Run | None = None
        self.detached = False
        """No response reads the run (a background run): its own log line is written when it ends."""
        self._opened: asyncio.Future[Run] = asyncio.get_running_loop().create_future()
        self._begun = False
        self.trace: RunTrace | None = None
        """The run's span, when tracing is on (app/tracing.py)."""
        self.cache: str | None = None
        """`hit` or `miss` once opened, when a cache rule applied (the X-Foundry-Cache header)."""

    @property
    def trace_id(self) -> str | None:
        return self.trace.trace_id if self.trace is not None else None

    @property
    def run(self) -> Run:
        """The run, once opened."""
        if self._run is None:
            raise RuntimeError("the run has not opened")
        return self._run

    @property
    def log(self) -> StreamLog:
        return self.run.log

    @property
    def opening(self) -> asyncio.Future[Run]:
        """Resolves to the run once its log exists; or to the error that answers the request."""
        return self._opened

    async def opened(self) -> Run:
        return await asyncio.shield(self._opened)

    def opened_as(self, run: Run) -> None:
        """The run's log exists: readers may start."""
        self._run = run
        self._opened.set_result(run)

    def begin(self) -> None:
        """The task runs: a cancel from now on reaches it where it waits."""
        self._begun = True

    def cancel(self, reason: CancelReason) -> bool:
        """Cancel the run's task (once); False when it had already ended."""
        if self.task is None or self.task.done():
            return False
        if self.reason is None:
            self.reason = reason
            if self._begun:  # else the task sees the reason when it starts
                self.task.cancel()
        return True


class RunTasks:
    """Owns every run's task: admits it, opens and executes it, and ends the runs on demand (a
    revoked key, the drain, shutdown)."""

    def __init__(self, *, router: Router, opener: RunOpener, admission: Admission, tools: ToolRegistry,
                 cache: ResponseCache | None, tracing: Tracing | None) -> None:
        self.router = router
        self.opener = opener
        self.admission = admission
        self.tools = tools
        self.cache = cache
        self.tracing = tracing
        self.log = get_logger("foundry.pipeline")
        self.handles: set[RunHandle] = set()
        """Every run's handle, from its admission to its task's end."""

    def start(self, spec: RunSpec, *, request_id: str | None = None,
              observers: Sequence[RunObserver] = ()) -> RunHandle:
        """Admit a run and start its task; an unknown model or route (404) and a full or draining
        gateway (503) are refused at once, everything else through `RunHandle.opened()`.
        `observers` get this run's report only."""
        session = self.router.session(spec.model, spec.timeouts)
        handle = RunHandle(spec.owner)
        self.admission.admit(handle)  # 503 when draining or full
        if self.tracing is not None:  # the span starts with the request, the caller's context its parent
            request = spec.request
            handle.trace = self.tracing.start_run(model=spec.model, messages=request.messages, parent=None,
                                                  temperature=request.temperature, max_tokens=request.max_tokens)
            observers = (*observers, handle.trace.observe)
        self.handles.add(handle)
        handle.task = asyncio.get_running_loop().create_task(
            self._lifetime(handle, spec, session, request_id, observers), name="run")
        return handle

    async def _lifetime(self, handle: RunHandle, spec: RunSpec, session: RouteSession, request_id: str | None,
                        observers: Sequence[RunObserver]) -> None:
        """The run's task. Traced, the run's span is current in it (attempts, tools and judge calls
        are its children) and its trace id is in every log line of the run (this task's context)."""
        trace = handle.trace
        if trace is None or self.tracing is None:
            await self._execute(handle, spec, session, request_id, observers)
            return
        structlog.contextvars.bind_contextvars(trace_id=trace.trace_id)
        try:
            with self.tracing.use(trace.span):
                await self._execute(handle, spec, session, request_id, observers)
        finally:
            trace.close()  # a run that left no report (cancelled before its first attempt)

    async def _execute(self, handle: RunHandle, spec: RunSpec, session: RouteSession, request_id: str | None,
                       observers: Sequence[RunObserver]) -> None:
        """Open, then execute; the slot is given back however it ends."""
        handle.begin()
        cache = self._cache_plan(spec, session)
        try:
            run = await self._open(handle, spec, session, request_id, observers, cache)
            if run is not None:
                await run.execute(lambda: handle.reason)
                if handle.detached and run.report is not None:
                    self.log.info("background_stream", request_id=request_id, model=run.model,
                                  provider=run.provider, **run.report.log_fields())
                if cache is not None and self.cache is not None:
                    await self.cache.keep(cache, run)
        finally:
            if cache is not None and self.cache is not None:
                self.cache.release(cache)
            self.admission.release(handle)
            self.handles.discard(handle)

    def _cache_plan(self, spec: RunSpec, session: RouteSession) -> CachePlan | None:
        """The request's response-cache plan (app/cache), when a rule applies and the caller allows it."""
        if self.cache is None:
            return None
        offered = self.tools.for_run(session.primary.provider, (t.name for t in spec.tools), spec.mcp_filters).specs
        return self.cache.plan(model=spec.model, targets=[t.name for t in session.targets], request=spec.request,
                               gateway_tools=[t.name for t in offered], validators=[*spec.validators,
                               *spec.policy_validators], chunking=spec.chunking, owner=spec.owner, choice=spec.cache)

    async def _open(self, handle: RunHandle, spec: RunSpec, session: RouteSession, request_id: str | None,
                    observers: Sequence[RunObserver], cache: CachePlan | None) -> Run | None:
        """The opened run, its log cancelled through `handle`; None when it did not open (the handle says why).
        A cache hit (or a request following an identical one in flight) opens a replay."""
        opening = handle.opening
        try:
            if handle.reason is not None:
                raise asyncio.CancelledError
            replay = await self.cache.find(cache) if cache is not None and self.cache is not None else None
            run = await self.opener.open(spec, session, request_id=request_id, observers=observers, replay=replay,
                                         canceller=lambda: handle.cancel("cancel_request"))
        except asyncio.CancelledError:
            opening.set_exception(ShuttingDown("the gateway shut down before the run started; retry it")
                                  if handle.reason in (None, "shutdown") else ClientGone("the client went away"))
            return None
        except GatewayError as exc:
            if handle.trace is not None:  # no target served: the run's span ends with the error
                handle.trace.close(exc.code)
            opening.set_exception(exc)
            return None
        except Exception as exc:
            self.log.error("run_open_failed", exception=type(exc).__name__)
            opening.set_exception(exc)
            return None
        if cache is not None and self.cache is not None:
            self.cache.opened(cache, run)
            handle.cache = "hit" if isinstance(run, ReplayRun) else "miss"
        handle.opened_as(run)
        return run

    def owners(self) -> set[str]:
        """The keys of the runs in progress here."""
        return {handle.owner for handle in self.handles if handle.owner is not None}

    def end_of(self, owner: str) -> int:
        """A key was revoked: its runs here end at once with `final{error: key_revoked}`; how many."""
        return sum(handle.cancel("key_revoked") for handle in list(self.handles) if handle.owner == owner)

    async def drain(self, grace: float) -> int:
        """Drain (SIGTERM): refuse new runs at once (/readyz 503), let running streams finish for
        `grace` seconds, then end the rest with `final{status: "error", error.code: "shutdown",
        retryable: true}` (their upstreams closed; one still opening answers 503). Returns how many were cut."""
        admission = self.admission
        admission.draining = True
        loop = asyncio.get_running_loop()
        await admission.until_idle(loop.time() + grace)
        cut = len(self.handles)
        for handle in list(self.handles):
            handle.cancel("shutdown")
        await admission.until_idle(loop.time() + FINALS_SECONDS)  # cut runs write their finals
        self.log.info("drained", cut_runs=cut)
        return cut

    async def aclose(self) -> None:
        """End every run still going (a shutdown final each) and wait for their tasks."""
        for handle in list(self.handles):
            handle.cancel("shutdown")
        tasks = [h.task for h in self.handles if h.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
