"""Running a handler in a test, without a server: :func:`run_local` and :class:`LocalTask`."""
from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
import traceback
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, cast

from . import _wire as wire
from ._http import Transport
from ._ops import PublishedBatch
from .errors import CANCELLED, NotImplementedByServer, TaskError, USER_CODE
from .task import Task

__all__ = ["run_local", "LocalTask"]


class LocalTask(Task):
    """A :class:`baton.Task` that talks to no server and records what the handler did:
    ``heartbeats`` (the details of each heartbeat), ``events`` (reported dataset events),
    ``published`` (dataset → rows of every publish_batch) and ``queries`` (SQL it ran).

    ``datasets`` maps a dataset name (or uuid) to the rows that :meth:`rows` yields;
    ``query_results`` maps SQL text to a QueryResult-shaped answer (or is a callable of the
    SQL); ``secrets`` are what :meth:`secrets` returns; ``credentials`` (a TaskCredentials
    dict) are what :meth:`credentials` returns (default: none, as on a file store).
    :meth:`cancel` sets ``cancelled`` as a cancellation request would.
    """

    def __init__(self, input: Any = None, parents: Optional[Mapping[str, Any]] = None, *, name: str = "local",
                 key: str = "local", attempt: int = 1, job_id: str = "job-local", queue: Optional[str] = None,
                 timeout: Optional[float] = None, pipeline: Optional[Mapping[str, Any]] = None,
                 datasets: Optional[Mapping[str, Sequence[Mapping[str, Any]]]] = None,
                 query_results: Any = None, secrets: Optional[Mapping[str, str]] = None,
                 credentials: Optional[wire.TaskCredentials] = None, logger: Optional[logging.Logger] = None) -> None:
        if attempt < 1:
            raise ValueError("baton: attempt numbers start at 1")
        claim: Dict[str, Any] = {
            "claimed": True, "job_id": "00000000-0000-0000-0000-000000000001", "attempt_id": attempt,
            "lease_token": "local-lease", "stream": queue or name, "message_id": "0-0",
            "payload": {} if input is None else input, "task_id": "00000000-0000-0000-0000-000000000001",
            "task_key": key, "task_name": name, "run_id": job_id, "dependency_outputs": dict(parents or {}),
            "timeout_seconds": timeout, "lease_ttl_seconds": 90, "heartbeat_interval_seconds": 30,
            "lease_expires_at": "", "capability_token": "local-token", "capability_token_expires_at": "",
        }
        if pipeline:
            claim.update({"job": {}, "operator": name, "config": claim["payload"], "inputs": [], "outputs": []})
            claim.update(pipeline)
        super().__init__(cast(wire.StreamClaim, claim), Transport("http://baton.invalid"), worker_id="local", blob_url=None,
                         logger=logger or logging.getLogger("baton.local"))
        self.input = input
        self.heartbeats: List[Any] = []
        self.events: List[Mapping[str, Any]] = []
        self.published: Dict[str, List[Dict[str, Any]]] = {}
        self.queries: List[str] = []
        self._datasets = {k: [dict(r) for r in v] for k, v in (datasets or {}).items()}
        self._query_results = query_results
        self._local_secrets = dict(secrets or {})
        self._local_creds = credentials
        self._lock = threading.Lock()

    def cancel(self, reason: str = "cancel_requested") -> None:
        """Requests the handler's cancellation, as a heartbeat answer would."""
        self.cancelled._set(reason)

    def heartbeat(self, details: Any = None) -> None:
        with self._lock:
            self.heartbeat_details = details
            self.heartbeats.append(details)

    def publish_jsonl(self, dataset: str, jsonl: bytes) -> PublishedBatch:
        if not dataset:
            raise ValueError("baton: publish_batch: the dataset name is required")
        outs = self.pipeline.outputs if self.pipeline else []
        if outs and not any(o.get("write_mode") == "buffered" and dataset in (o.get("dataset_name"), o.get("dataset_uuid"))
                            for o in outs):
            raise TaskError("CONFIGURATION", f"baton: publish_batch: dataset {dataset!r} is not a buffered output of this "
                                             "task's job", retryable=False)
        rows = [json.loads(line) for line in jsonl.decode("utf-8").splitlines() if line.strip()]
        with self._lock:
            self.published.setdefault(dataset, []).extend(rows)
            n = len(self.published) and sum(1 for _ in self.published)
        return PublishedBatch(f"local://buffers/{dataset}/{self.task_id}/{self.attempt}/batch-{n:04d}.jsonl", len(rows), False)

    def row_pages(self, dataset: Any, *, where: Optional[Mapping[str, Any]] = None, cursor: Optional[int] = None,
                  page_size: Optional[int] = None) -> Any:
        name = dataset.get("dataset_name") or dataset.get("dataset_uuid") if isinstance(dataset, Mapping) else dataset
        if name not in self._datasets:
            raise KeyError(f"baton: run_local was given no rows of dataset {name!r}")
        rows = [r for r in self._datasets[name] if all(
            (r.get(k) in v) if isinstance(v, list) else r.get(k) == v for k, v in (where or {}).items())]
        yield {"rows": rows, "next_after": None}

    def query(self, sql: str, *, limit: Optional[int] = None, timeout: float = 120.0) -> wire.QueryResult:
        self.queries.append(sql)
        q = self._query_results
        if callable(q):
            return cast(wire.QueryResult, q(sql))
        if isinstance(q, Mapping) and sql in q:
            return cast(wire.QueryResult, q[sql])
        raise KeyError(f"baton: run_local was given no result for the query {sql!r}")

    def credentials(self) -> wire.TaskCredentials:
        if self._local_creds is None:
            raise NotImplementedByServer(501, "credentials_unavailable", "run_local was given no credentials")
        return self._local_creds

    def report_events(self, events: List[Mapping[str, Any]]) -> wire.EventsAnswer:
        if not events:
            raise ValueError("baton: report_events needs at least one event")
        self.events.extend(events)
        return {"ok": True, "received": len(events), "stored": len(events)}

    def secrets(self) -> Dict[str, str]:
        return dict(self._local_secrets)


def run_local(handler: Callable[..., Any], input: Any = None, parents: Optional[Mapping[str, Any]] = None, *,
              task: Optional[LocalTask] = None, cancel_after: Optional[float] = None, **task_options: Any) -> Any:
    """Runs ``handler`` (a plain or ``async def`` function of a Task) once, as a worker would,
    with a :class:`LocalTask` (pass ``task=`` to inspect what it recorded, or its options as
    keywords: ``name``, ``key``, ``attempt``, ``pipeline``, ``datasets``, ``query_results``,
    ``secrets``, ...), and returns its output.

    The worker's rules apply: the output must be JSON-able (else a non-retryable USER_CODE
    TaskError is raised); a TaskError (NonRetryable, RetryAfter...) is raised as it is; any other
    exception is raised as a retryable USER_CODE TaskError whose ``__cause__`` is it and whose
    ``stack`` is its traceback; a handler whose cancellation was requested (``cancel_after``
    seconds, or ``task.cancel()``) ends as CANCELLED (a TaskError of that category) whatever it
    returns."""
    if task is None:
        task = LocalTask(input, parents, **task_options)
    elif input is not None or parents is not None or task_options:
        raise ValueError("baton: run_local takes either task= or the task's input and options")
    timer = None
    if cancel_after is not None:
        timer = threading.Timer(cancel_after, task.cancel)
        timer.daemon = True
        timer.start()
    try:
        try:
            if inspect.iscoroutinefunction(handler):
                out = asyncio.run(handler(task))
            else:
                out = handler(task)
        except TaskError:
            if task.cancel_reason == "cancel_requested":
                raise TaskError(CANCELLED, "the task was cancelled", retryable=False) from None
            raise
        except Exception as e:  # noqa: BLE001 - the worker's rule, below
            if task.cancel_reason == "cancel_requested":
                raise TaskError(CANCELLED, "the task was cancelled", retryable=False) from e
            err = TaskError(USER_CODE, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__, retryable=True)
            err.stack = traceback.format_exc()  # type: ignore[attr-defined]
            raise err from e
    finally:
        if timer is not None:
            timer.cancel()
    if task.cancel_reason == "cancel_requested":
        raise TaskError(CANCELLED, "the task was cancelled", retryable=False)
    try:
        return json.loads(json.dumps(out, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise TaskError(USER_CODE, f"encode the handler's output: {e}", retryable=False) from e

