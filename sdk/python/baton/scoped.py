"""The task-scoped client: what untrusted code (a ``baton worker --exec`` child, a user-code
bundle, a push target's task) can do with nothing but its attempt's capability token, on the
public listener (docs/contracts/task-scoped.md)."""
from __future__ import annotations

import base64
import json
import os
import sys
import threading
from typing import Any, Dict, List, Mapping, Optional, cast

from . import _wire as wire
from ._http import Backoff, Transport
from ._ops import SCOPED_ROUTES, TaskOperations
from .errors import APIError, CATEGORIES, TaskError, USER_CODE
from .task import CancelEvent, PipelineInfo

__all__ = ["TaskScope", "token_claims"]


def token_claims(token: str) -> Dict[str, Any]:
    """The claims of a capability token (a JWT; readable, not encrypted): ``task_id``,
    ``attempt``, ``lease_token`` and what it grants. Not verified: the server does that."""
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("baton: a capability token is a JWT of three dot-separated parts")
    try:
        raw = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"baton: the capability token's claims are not readable: {e}") from e
    if not isinstance(claims, dict):
        raise ValueError("baton: the capability token's claims are not a JSON object")
    return claims


class TaskScope(TaskOperations):
    """One attempt, seen from code that holds only its capability token.

    Build it with :meth:`from_env` (a ``baton worker --exec`` child or a bundle: the token in
    ``TRACE_TASK_CAPABILITY_TOKEN``, the server in ``BATON_URL``, the payload in the file
    ``BATON_TASK_PAYLOAD``), :meth:`from_payload` (a Lambda-style ``handler(event, context)``
    whose event carries ``capability_token``) or :meth:`from_push` (a push envelope).

    Attributes: ``task_id``, ``attempt``, ``lease_token``, ``payload`` (the whole payload, or
    {}), ``input``, ``parents``, ``key``, ``name``, ``job_id``, ``pipeline`` and ``cancelled``
    (set by a heartbeat answer asking to cancel, or refusing the attempt).

    Calls: :meth:`heartbeat`, :meth:`complete`, :meth:`fail`, :meth:`report_cancelled`,
    :meth:`report_events`, :meth:`publish_batch`, :meth:`credentials`, :meth:`rows`,
    :meth:`query`; :meth:`keep_alive` heartbeats on a thread of its own.
    """

    def __init__(self, url: str, token: str, *, task_id: Optional[str] = None, attempt: Optional[int] = None,
                 lease_token: Optional[str] = None, payload: Optional[Mapping[str, Any]] = None,
                 blob_url: Optional[str] = None, buffer_dir: Optional[str] = None, timeout: float = 30.0) -> None:
        if not url:
            raise ValueError("baton: TaskScope needs the server's public URL (BATON_URL)")
        if not token:
            raise ValueError("baton: TaskScope needs the attempt's capability token (TRACE_TASK_CAPABILITY_TOKEN)")
        if not (task_id and attempt and lease_token):
            c = token_claims(token)
            task_id = task_id or c.get("task_id")
            attempt = attempt or c.get("attempt")
            lease_token = lease_token or c.get("lease_token")
        if not (task_id and attempt and lease_token):
            raise ValueError("baton: TaskScope needs task_id, attempt and lease_token (or a token whose claims name them)")
        p: Dict[str, Any] = dict(payload or {})
        pipeline = PipelineInfo(p) if p.get("job") and isinstance(p.get("job"), dict) and "outputs" in p else None
        super().__init__(Transport(url, timeout=timeout), SCOPED_ROUTES, task_id=str(task_id), attempt=int(attempt),
                         lease_token=str(lease_token), token=token, outputs=pipeline.outputs if pipeline else None,
                         blob_url=blob_url, buffer_dir=buffer_dir)
        self.url = url.rstrip("/")
        self.payload = p
        self.input: Any = p.get("input", p.get("work_payload"))
        self.parents: Dict[str, Any] = dict(p.get("dependency_outputs") or {})
        self.key: str = p.get("task_key", "")
        self.name: str = p.get("name", "")
        self.job_id: str = p.get("job_id", "")
        self.pipeline = pipeline
        self.cancelled = CancelEvent()
        self._keep: Optional[threading.Thread] = None
        self._keep_stop = threading.Event()

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "TaskScope":
        """The attempt of a ``baton worker --exec`` child or a bundle, from its environment."""
        env = os.environ if environ is None else environ
        payload: Dict[str, Any] = {}
        path = env.get("BATON_TASK_PAYLOAD")
        if path:
            with open(path, encoding="utf-8") as f:
                payload = json.load(f)
        attempt = env.get("BATON_ATTEMPT")
        return cls(env.get("BATON_URL", ""), env.get("TRACE_TASK_CAPABILITY_TOKEN", "") or payload.get("capability_token", ""),
                   task_id=env.get("BATON_TASK_ID") or payload.get("task_id"),
                   attempt=int(attempt) if attempt else payload.get("attempt"),
                   lease_token=env.get("BATON_LEASE_TOKEN") or payload.get("lease_token"), payload=payload,
                   blob_url=env.get("BATON_BLOB_URL"), buffer_dir=env.get("BATON_BUFFER_DIR"))

    @classmethod
    def from_payload(cls, event: Mapping[str, Any], url: Optional[str] = None) -> "TaskScope":
        """The attempt of a Lambda-style handler's event (it carries ``capability_token``);
        ``url`` defaults to ``$BATON_URL``."""
        return cls(url or os.environ.get("BATON_URL") or "", str(event.get("capability_token", "")),
                   task_id=event.get("task_id"), attempt=event.get("attempt"), lease_token=event.get("lease_token"),
                   payload=event, blob_url=os.environ.get("BATON_BLOB_URL"), buffer_dir=os.environ.get("BATON_BUFFER_DIR"))

    @classmethod
    def from_push(cls, envelope: Mapping[str, Any]) -> "TaskScope":
        """The attempt of a push delivery's envelope (``taskToken``, ``callbackBaseUrl``)."""
        payload = {"task_id": envelope.get("taskId"), "job_id": envelope.get("runId"), "task_key": envelope.get("taskKey"),
                   "name": envelope.get("taskName"), "attempt": envelope.get("attempt"), "input": envelope.get("input"),
                   "dependency_outputs": envelope.get("dependencyOutputs")}
        for k in ("job", "operator", "config", "inputs", "outputs", "trigger"):
            if k in envelope:
                payload[k] = envelope[k]
        return cls(str(envelope.get("callbackBaseUrl", "")), str(envelope.get("taskToken", "")), task_id=envelope.get("taskId"),
                   attempt=envelope.get("attempt"), lease_token=envelope.get("leaseToken"), payload=payload)

    def should_cancel(self) -> bool:
        """Whether a heartbeat asked the attempt to stop (or refused it)."""
        return self.cancelled.is_set()

    def heartbeat(self) -> wire.HeartbeatAnswer:
        """Extends the lease; renews the token past half its life; sets ``cancelled`` when the
        answer asks to cancel. A refusal (401/403/409/410/404) sets ``cancelled`` and raises."""
        try:
            ans = cast(wire.HeartbeatAnswer, self._post(self._routes.heartbeat, self._fence()))
        except APIError as e:
            if e.status in (401, 403, 404, 409, 410):
                self.cancelled._set("lease_lost")
            raise
        self._renew(cast(Mapping[str, Any], ans))
        if ans.get("should_cancel"):
            self.cancelled._set("cancel_requested")
        return ans

    def keep_alive(self, interval: Optional[float] = None) -> "TaskScope":
        """Heartbeats every ``interval`` seconds (default: a third of the lease, else 10 s) on a
        thread of its own until :meth:`complete`, :meth:`fail` or :meth:`report_cancelled`;
        usable as a context manager (``with scope.keep_alive(): ...``)."""
        if self._keep is not None:
            return self
        every = interval or float(self.payload.get("heartbeat_interval_seconds") or 0) or 10.0

        def loop() -> None:
            b = Backoff()
            wait = every
            while not self._keep_stop.wait(wait):
                try:
                    self.heartbeat()
                    wait = every
                    b.reset()
                except APIError as e:
                    if not e.transient:
                        return
                    wait = min(every, b.after(e))
                except Exception as e:  # noqa: BLE001
                    wait = min(every, b.after(e))
        self._keep = threading.Thread(target=loop, name="baton-scope-heartbeat", daemon=True)
        self._keep.start()
        return self

    def __enter__(self) -> "TaskScope":
        return self.keep_alive()

    def __exit__(self, *exc: object) -> None:
        self._stop_keep()

    def _stop_keep(self) -> None:
        self._keep_stop.set()
        if self._keep is not None and self._keep is not threading.current_thread():
            self._keep.join(5)

    def _complete(self, body: Dict[str, Any]) -> wire.CompleteAnswer:
        self._stop_keep()
        return cast(wire.CompleteAnswer, self._post(self._routes.complete, {**self._fence(), **body}))

    def complete(self, output: Any = None, *, datasets_published: Optional[List[Mapping[str, Any]]] = None,
                 events: Optional[List[Mapping[str, Any]]] = None) -> wire.CompleteAnswer:
        """Completes the attempt with ``output`` (kept as the task's output as it is)."""
        body: Dict[str, Any] = {"status": "Completed", "output": output}
        if datasets_published:
            body["datasets_published"] = list(datasets_published)
        if events:
            body["events"] = list(events)
        return self._complete(body)

    def fail(self, message: str, category: str = USER_CODE, *, retryable: Optional[bool] = None,
             stack_trace: Optional[str] = None) -> wire.CompleteAnswer:
        """Fails the attempt with an error category (retried by the category's default unless
        ``retryable`` says otherwise)."""
        if category not in CATEGORIES:
            raise ValueError(f"baton: unknown error category {category!r}")
        err: Dict[str, Any] = {"category": category, "message": message}
        if stack_trace:
            err["stack_trace"] = stack_trace
        if retryable is not None:
            err["retryable"] = retryable
        return self._complete({"status": "Failed", "error": err, "error_message": message})

    def fail_with(self, exc: BaseException) -> wire.CompleteAnswer:
        """Fails the attempt as a worker would report exc: a TaskError's category and retry
        flag, else a retryable USER_CODE failure with the traceback."""
        import traceback
        stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if isinstance(exc, TaskError):
            return self.fail(exc.message, exc.category, retryable=exc.retryable, stack_trace=stack)
        return self.fail(f"{type(exc).__name__}: {exc}", USER_CODE, retryable=True, stack_trace=stack)

    def report_cancelled(self) -> wire.CompleteAnswer:
        """Reports the attempt cancelled (after a heartbeat asked to cancel)."""
        return self._complete({"status": "Canceled"})

    def run(self, fn: Any) -> Any:
        """Runs ``fn(self)`` under :meth:`keep_alive` and reports its outcome: complete with its
        return value, or fail with its exception (see fail_with), or cancelled when a cancel was
        requested meanwhile. Returns the output (None after a failure)."""
        self.keep_alive()
        try:
            out = fn(self)
        except Exception as e:  # noqa: BLE001 - reported
            if self.cancelled.reason == "cancel_requested":
                self.report_cancelled()
            else:
                print(f"baton: task failed: {e}", file=sys.stderr)
                self.fail_with(e)
            return None
        if self.cancelled.reason == "cancel_requested":
            self.report_cancelled()
            return None
        self.complete(out)
        return out
