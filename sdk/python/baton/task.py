"""What a worker's handler receives: :class:`Task`, one claimed attempt of a task with the calls
its capability token allows, its :class:`PipelineInfo` for a pipeline job's task, and the
:class:`CancelEvent` that says when to stop."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable, Dict, Generator, List, Mapping, Optional, Set, Tuple

from . import _wire as wire
from ._http import Transport
from ._ops import INTERNAL_ROUTES, TaskOperations
from .errors import APIError, CONFIGURATION, TaskError

__all__ = ["Task", "PipelineInfo", "CancelEvent"]


class PipelineInfo:
    """The data plane of a pipeline job's task: ``job`` (``dag_name``, ``name``,
    ``pipeline_version``, ...), ``operator``, ``inputs`` (the datasets it reads; the one whose
    event started it carries the event's version and cursor), ``outputs`` (the datasets it
    writes; ``write_mode`` ``buffered`` for those it publishes batches into), ``trigger`` and
    ``config`` (equal to the task's input)."""

    def __init__(self, claim: Mapping[str, Any]) -> None:
        self.job: wire.PipelineTaskJob = claim["job"]
        self.operator: str = claim.get("operator", "")
        self.inputs: List[wire.PipelineTaskInput] = list(claim.get("inputs") or [])
        self.outputs: List[wire.PipelineTaskOutput] = list(claim.get("outputs") or [])
        self.trigger: Optional[Dict[str, Any]] = claim.get("trigger")
        self.config: Any = claim.get("config")

    def input(self, dataset: str) -> wire.PipelineTaskInput:
        """The input of that dataset (name or uuid)."""
        for i in self.inputs:
            if dataset in (i.get("dataset_name"), i.get("dataset_uuid")):
                return i
        raise KeyError(f"baton: the task reads no dataset {dataset!r}")

    def __repr__(self) -> str:
        return f"PipelineInfo(job={self.job.get('name')!r}, operator={self.operator!r})"


class CancelEvent:
    """Set when the attempt must stop: a cancellation was requested, the lease was lost, the
    execution timeout passed or the worker is shutting down past its grace. ``is_set()``,
    ``wait(timeout)`` (threads) and ``await event`` / ``await event.wait_async()`` (asyncio)."""

    def __init__(self) -> None:
        self._ev = threading.Event()
        self._waiters: List[Tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._mu = threading.Lock()
        self.reason: Optional[str] = None

    def is_set(self) -> bool:
        return self._ev.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until set (or timeout); returns whether it is set."""
        return self._ev.wait(timeout)

    def _set(self, reason: str) -> None:
        with self._mu:
            if self._ev.is_set():
                return
            self.reason = reason
            self._ev.set()
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(lambda f=fut: f.done() or f.set_result(None))
            except RuntimeError:
                pass  # the loop is closed

    async def wait_async(self) -> None:
        """Waits, without blocking the event loop, until set."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._mu:
            if self._ev.is_set():
                return
            self._waiters.append((loop, fut))
        await fut

    def __await__(self) -> Generator[Any, None, None]:
        return self.wait_async().__await__()

    def __bool__(self) -> bool:
        return self.is_set()


class Task(TaskOperations):
    """One claimed attempt of a task, as a handler receives it.

    Attributes: ``id`` (the task's global id), ``job_id``, ``key`` (the producer's taskId),
    ``name``, ``attempt``, ``queue``, ``input`` (the task's input as submitted), ``parents``
    (each parent's output by its taskId), ``timeout`` (seconds, or None), ``traceparent``,
    ``pipeline`` (a :class:`PipelineInfo`, or None), ``claim`` (the raw claim answer),
    ``logger`` (a logger adapter naming the task), ``cancelled`` (a :class:`CancelEvent`) and
    ``heartbeat_details`` (what the handler last passed to :meth:`heartbeat`).

    Besides, with the attempt's capability token: :meth:`publish_batch`, :meth:`rows`,
    :meth:`query`, :meth:`credentials`, :meth:`report_events`, :meth:`secret`, :meth:`secrets`.
    """

    def __init__(self, claim: wire.StreamClaim, transport: Transport, *, worker_id: str, blob_url: Optional[str],
                 logger: logging.Logger, beat_now: Optional[Callable[[], None]] = None) -> None:
        pipeline = PipelineInfo(claim) if claim.get("job") else None
        super().__init__(transport, INTERNAL_ROUTES, task_id=claim.get("task_id") or claim["job_id"],
                         attempt=int(claim["attempt_id"]), lease_token=claim["lease_token"],
                         token=claim.get("capability_token", ""), token_expires_at=claim.get("capability_token_expires_at"),
                         outputs=pipeline.outputs if pipeline else None, blob_url=blob_url)
        self.claim = claim
        self.id = self.task_id
        self.job_id: str = claim.get("run_id", "")
        self.key: str = claim.get("task_key", "")
        self.name: str = claim.get("task_name", "")
        self.queue: str = claim.get("stream", "")
        self.input: Any = claim.get("payload")
        self.parents: Dict[str, Any] = dict(claim.get("dependency_outputs") or {})
        t = claim.get("timeout_seconds")
        self.timeout: Optional[float] = float(t) if t else None
        self.traceparent: Optional[str] = claim.get("traceparent")
        self.pipeline = pipeline
        self.worker_id = worker_id
        self.cancelled = CancelEvent()
        self.heartbeat_details: Any = None
        self.logger = logging.LoggerAdapter(logger, {"task_id": self.id, "task": self.name, "attempt": self.attempt})
        self._beat_now = beat_now
        self._secrets: Optional[Dict[str, str]] = None

    @property
    def dependency_outputs(self) -> Dict[str, Any]:
        """Alias of ``parents``."""
        return self.parents

    def should_cancel(self) -> bool:
        """Whether the handler should stop now (see ``cancelled``)."""
        return self.cancelled.is_set()

    @property
    def cancel_reason(self) -> Optional[str]:
        """Why ``cancelled`` is set: ``cancel_requested``, ``lease_lost``, ``timeout`` or
        ``shutdown``; None while it is not."""
        return self.cancelled.reason

    def heartbeat(self, details: Any = None) -> None:
        """Records progress details (kept as ``heartbeat_details``) and asks the heartbeat
        thread to beat now. Heartbeats do not need the handler: they run on their own thread."""
        self.heartbeat_details = details
        if self._beat_now is not None:
            self._beat_now()

    def secrets(self) -> Dict[str, str]:
        """The values of the secrets the task's job declares, by name (asked once)."""
        if self._secrets is None:
            try:
                ans = self._post("/internal/task-secrets", self._fence())
            except APIError as e:
                if e.code == "secret_unavailable":
                    raise TaskError(CONFIGURATION, e.message, retryable=False) from e
                raise
            self._secrets = dict(ans.get("secrets") or {})
        return dict(self._secrets)

    def secret(self, name: str) -> str:
        """One secret's value; KeyError when the job declares no such secret."""
        s = self.secrets()
        if name not in s:
            raise KeyError(f"baton: the task's job declares no secret {name!r}")
        return s[name]

    def __repr__(self) -> str:
        return f"Task(name={self.name!r}, key={self.key!r}, id={self.id!r}, attempt={self.attempt})"
