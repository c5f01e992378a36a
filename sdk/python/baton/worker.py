"""The worker: claims tasks over the stream-worker dialect, runs their handlers, keeps their
leases alive with heartbeats on a thread of its own, and reports their outcomes in batches.

::

    worker = baton.Worker("http://127.0.0.1:8081", concurrency=8)

    @worker.task("resize")
    def resize(task: baton.Task) -> dict:
        return {"ok": True, "input": task.input}

    worker.run()  # until SIGTERM/SIGINT; then a graceful shutdown
"""
from __future__ import annotations

import asyncio
import collections
import ctypes
import http.server
import inspect
import json
import logging
import os
import signal
import socket
import ssl
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import (Any, Awaitable, Callable, Deque, Dict, List, Mapping, Optional, Sequence, Set, TypeVar, cast)

from . import _wire as wire
from ._http import Backoff, Transport, make_ssl_context, retrying
from .task import CancelEvent, PipelineInfo, Task
from .errors import (APIError, Aborted, CATEGORIES, CONFIGURATION, INFRASTRUCTURE, RetryAfter, TaskError, USER_CODE,
                     transient)

__all__ = ["Worker", "AsyncWorker", "Task", "PipelineInfo", "CancelEvent"]

PATH_CLAIM_BATCH = "/internal/worker/claim-batch"
PATH_REPORT_BATCH = "/internal/worker/report-batch"
PATH_HEARTBEAT = "/internal/worker/heartbeat"
PATH_TASK_COMPLETE = "/internal/task-complete"
MAX_BATCH = 256
#: How much longer than its long poll a claim request may take.
CLAIM_SLACK = 15.0
#: How long, after the shutdown grace, the worker still tries to hand back and report.
HAND_BACK_TIMEOUT = 10.0
#: Caps the message and stack of a reported failure.
MAX_ERROR_TEXT = 64 << 10
SHUTDOWN_MESSAGE = "worker: shut down before the task finished"

H = TypeVar("H", bound=Callable[..., Any])


def _truncate(s: str) -> str:
    return s if len(s) <= MAX_ERROR_TEXT else s[:MAX_ERROR_TEXT] + "…(truncated)"


# --- attempts --------------------------------------------------------------------------------

RUNNING, SETTLING, DONE = "running", "settling", "done"


class _Attempt:
    __slots__ = ("task", "claim", "handler", "lock", "state", "in_handler", "thread_ident", "aio_task", "aio_loop",
                 "cancel_requested", "lost", "timed_out", "every", "next_beat", "beating", "abort_at", "deadline",
                 "backoff", "aborted")

    def __init__(self, task: Task, claim: wire.StreamClaim, handler: Optional[Callable[..., Any]], every: float) -> None:
        self.task = task
        self.claim = claim
        self.handler = handler
        self.lock = threading.Lock()
        self.state = RUNNING
        self.in_handler = False
        self.thread_ident: Optional[int] = None
        self.aio_task: Optional["asyncio.Task[Any]"] = None
        self.aio_loop: Optional[asyncio.AbstractEventLoop] = None
        self.cancel_requested = False
        self.lost = False
        self.timed_out = False
        self.aborted = False
        self.every = every
        self.next_beat = time.monotonic() + every
        self.beating = False
        self.abort_at: Optional[float] = None
        self.deadline: Optional[float] = None
        self.backoff = Backoff()


class _Report:
    __slots__ = ("kind", "body", "done", "backoff")

    def __init__(self, kind: str, body: Dict[str, Any], done: Callable[[str, Any], None]) -> None:
        self.kind, self.body, self.done, self.backoff = kind, body, done, Backoff()


class _Reporter:
    """Sends the reports that are ready as /internal/worker/report-batch requests: at once when
    a sender is free, the reports queued meanwhile together in the next request. Transient
    failures are retried with backoff until the worker gives up at the end of its shutdown."""

    def __init__(self, w: "_BaseWorker", senders: int = 2) -> None:
        self.w = w
        self.queue: Deque[_Report] = collections.deque()
        self.cond = threading.Condition()
        self.busy = 0
        self.abandon = threading.Event()
        self.threads = [threading.Thread(target=self._loop, name=f"baton-report-{i}", daemon=True) for i in range(senders)]
        for t in self.threads:
            t.start()

    def submit(self, r: _Report) -> None:
        with self.cond:
            self.queue.append(r)
            self.cond.notify()

    def pending(self) -> int:
        with self.cond:
            return len(self.queue) + self.busy

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.queue:
                    self.cond.wait()
                n = min(len(self.queue), MAX_BATCH)
                batch = [self.queue.popleft() for _ in range(n)]
                self.busy += n
            try:
                self._send(batch)
            finally:
                with self.cond:
                    self.busy -= n
                    self.cond.notify_all()

    def _send(self, batch: List[_Report]) -> None:
        b = Backoff()
        while batch:
            if self.abandon.is_set():
                for r in batch:
                    r.done("abandoned", None)
                return
            reports = [{"type": r.kind, **r.body} for r in batch]
            retry: List[_Report] = []
            err: Optional[BaseException] = None
            try:
                ans = self.w._internal.call("POST", PATH_REPORT_BATCH, {"worker_id": self.w.worker_id, "reports": reports},
                                            timeout=30.0)
                results = ans.get("results") if isinstance(ans, dict) else None
                if not isinstance(results, list) or len(results) != len(batch):
                    raise APIError(502, "bad_answer", f"{len(results or [])} results for {len(batch)} reports",
                                   method="POST", path=PATH_REPORT_BATCH)
            except Exception as e:  # noqa: BLE001
                if not transient(e):
                    self.w.log.error("report batch refused: %s", e)
                    for r in batch:
                        r.done("refused", e)
                    return
                self.w.log.warning("report batch failed, retrying: %s", e)
                err, retry = e, batch
            else:
                for r, res in zip(batch, results):
                    status = int(res.get("status") or 502) if isinstance(res, dict) else 502
                    if status == 200:
                        r.done("delivered", res)
                        continue
                    e2 = APIError.from_answer(status, json.dumps(res).encode(), retry_after=res.get("retry_after"),
                                              method="POST", path=f"/internal/worker/{r.kind}")
                    if status in (404, 409, 410):
                        r.done("not_ours", e2)
                    elif e2.transient:
                        err = e2
                        retry.append(r)
                    else:
                        r.done("refused", e2)
            batch = retry
            if batch:
                if self.abandon.wait(b.after(err)):
                    continue


class _Pool:
    """Threads that run handlers: one more is started whenever none is idle, so that a thread
    stuck in an aborted handler never holds up other tasks."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.q: Deque[Callable[[], None]] = collections.deque()
        self.cond = threading.Condition()
        self.idle = 0
        self.n = 0

    def submit(self, fn: Callable[[], None]) -> None:
        with self.cond:
            self.q.append(fn)
            if self.idle >= len(self.q):
                self.cond.notify()
                return
            self.n += 1
            t = threading.Thread(target=self._loop, name=f"{self.name}-{self.n}", daemon=True)
        t.start()

    def _loop(self) -> None:
        while True:
            with self.cond:
                self.idle += 1
                while not self.q:
                    self.cond.wait()
                self.idle -= 1
                fn = self.q.popleft()
            try:
                fn()
            except Aborted:
                pass  # an abort that arrived once the handler had returned: settled already
            except BaseException:  # noqa: BLE001 - a bug must not kill the pool
                logging.getLogger("baton.worker").exception("baton worker: internal error")


def _async_raise(ident: int, exc: type) -> bool:
    n = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc))
    if n > 1:  # pragma: no cover - undo: more than one thread would get it
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)
        return False
    return bool(n == 1)


class _HealthHandler(http.server.BaseHTTPRequestHandler):
    worker: "_BaseWorker"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?")[0] not in ("/healthz", "/"):
            self.send_error(404)
            return
        ok = self.worker.healthy()
        body = json.dumps({"ok": ok, **self.worker.health()}).encode()
        self.send_response(200 if ok else 503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


class _BaseWorker:
    """What the thread and asyncio workers share: claims, heartbeats, reports, shutdown."""

    _is_async = False

    def __init__(self, internal_url: Optional[str] = None, *, queues: Optional[Sequence[str]] = None, concurrency: int = 1,
                 worker_id: Optional[str] = None, heartbeat_interval: Optional[float] = None, poll_wait: float = 20.0,
                 shutdown_grace: float = 30.0, abort_grace: float = 10.0, blob_url: Optional[str] = None,
                 ca_file: Optional[str] = None, cert_file: Optional[str] = None, key_file: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None, health_port: Optional[int] = None,
                 health_host: str = "0.0.0.0", health_failures: int = 5, health_timeout: float = 60.0,
                 isolation: Optional[str] = None, logger: Optional[logging.Logger] = None) -> None:
        url = internal_url or os.environ.get("BATON_INTERNAL_URL", "")
        if not url:
            raise ValueError("baton: a worker needs the server's internal URL (or set BATON_INTERNAL_URL)")
        if concurrency < 1:
            raise ValueError("baton: concurrency must be at least 1")
        for name, v in (("poll_wait", poll_wait), ("shutdown_grace", shutdown_grace), ("abort_grace", abort_grace),
                        ("health_timeout", health_timeout)):
            if v < 0:
                raise ValueError(f"baton: {name} must not be negative")
        if poll_wait > 60:
            raise ValueError("baton: poll_wait is at most 60 seconds (the server's limit)")
        if heartbeat_interval is not None and heartbeat_interval <= 0:
            raise ValueError("baton: heartbeat_interval must be positive")
        if queues is not None and any(not q for q in queues):
            raise ValueError("baton: empty queue name")
        self.internal_url = url.rstrip("/")
        self.queues = list(queues) if queues else None
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname() or 'worker'}-{os.getpid()}"
        self.heartbeat_interval = heartbeat_interval
        self.poll_wait = poll_wait
        self.shutdown_grace = shutdown_grace
        self.abort_grace = abort_grace
        self.blob_url = blob_url if blob_url is not None else os.environ.get("BATON_BLOB_URL") or None
        self.isolation = isolation
        self.health_port = health_port
        self.health_host = health_host
        self.health_failures = health_failures
        self.health_timeout = health_timeout
        self.log = logger or logging.getLogger("baton.worker")
        ctx = make_ssl_context(ca_file, cert_file, key_file, ssl_context)
        self._internal = Transport(url, ssl_context=ctx)
        self._claimer = Transport(url, ssl_context=ctx)  # its own, so that stop() can interrupt it
        self._handlers: Dict[str, Callable[..., Any]] = {}
        self._mu = threading.Lock()
        self._slots = threading.Condition()
        self._free = concurrency
        self._attempts: Set[_Attempt] = set()
        self._beat_cond = threading.Condition()
        self._beat_wake = 0.0  # when the heartbeat thread wakes next (0: it is busy)
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._started = False
        self._unreported = 0
        self._claim_failures = 0
        self._failing_since: Optional[float] = None
        self._last_claim_ok: Optional[float] = None
        self._reporter: Optional[_Reporter] = None
        self._beats: Optional[ThreadPoolExecutor] = None
        self._health_server: Optional[http.server.ThreadingHTTPServer] = None
        self.completed = 0

    # --- registration ---------------------------------------------------------------------

    def _check_handler(self, fn: Callable[..., Any]) -> None:
        raise NotImplementedError

    def register(self, name: str, fn: Callable[..., Any]) -> None:
        """Registers fn for tasks named ``name`` (replacing an earlier one)."""
        if not name or not callable(fn):
            raise ValueError("baton: register needs a task name and a callable")
        self._check_handler(fn)
        with self._mu:
            self._handlers[name] = fn

    def task(self, name: str) -> Callable[[H], H]:
        """A decorator that registers the function as the handler of tasks named ``name``."""
        def deco(fn: H) -> H:
            self.register(name, fn)
            return fn
        return deco

    # --- health ---------------------------------------------------------------------------

    def healthy(self) -> bool:
        """False once claims keep failing: ``health_failures`` failures in a row, or failures
        for ``health_timeout`` seconds without a successful claim request."""
        with self._mu:
            if self._claim_failures >= self.health_failures > 0:
                return False
            if self._failing_since is not None and time.monotonic() - self._failing_since > self.health_timeout:
                return False
            return not self._stopped.is_set()

    def health(self) -> Dict[str, Any]:
        """Numbers behind healthy(): consecutive claim failures, running attempts, completed."""
        with self._mu:
            last = None if self._last_claim_ok is None else round(time.monotonic() - self._last_claim_ok, 3)
            return {"worker_id": self.worker_id, "claim_failures": self._claim_failures, "running": len(self._attempts),
                    "completed": self.completed, "seconds_since_claim": last, "stopping": self._stopping.is_set()}

    def _claim_result(self, ok: bool) -> None:
        with self._mu:
            if ok:
                self._claim_failures = 0
                self._failing_since = None
                self._last_claim_ok = time.monotonic()
            else:
                self._claim_failures += 1
                if self._failing_since is None:
                    self._failing_since = time.monotonic()

    # --- running --------------------------------------------------------------------------

    def run(self) -> None:
        """Claims and runs tasks until stop() or, when called on the main thread, SIGTERM or
        SIGINT; then shuts down gracefully: stops claiming, lets running handlers finish within
        ``shutdown_grace``, hands back the attempts that did not (a retryable INFRASTRUCTURE
        failure, after aborting their handlers), delivers the pending reports and returns.
        Raises RuntimeError when some outcome could not be delivered."""
        if self._started:
            raise RuntimeError("baton: a worker runs once")
        self._started = True
        queues = self.queues or sorted(self._handlers)
        if not queues:
            raise RuntimeError("baton: no handlers registered and no queues given")
        old: Dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                old[sig] = signal.signal(sig, lambda s, f: self.stop())
        try:
            self._run(queues)
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
        if self._unreported:
            raise RuntimeError(f"baton: {self._unreported} attempt outcome(s) not delivered before shutdown; "
                               "the server will time them out")

    def _start_runtime(self) -> None:
        pass

    def _stop_runtime(self) -> None:
        pass

    def _run(self, queues: List[str]) -> None:
        self._reporter = _Reporter(self)
        self._beats = ThreadPoolExecutor(max_workers=min(8, self.concurrency) + 1, thread_name_prefix="baton-heartbeat")
        self._start_runtime()
        if self.health_port is not None:
            handler = type("Health", (_HealthHandler,), {"worker": self})
            self._health_server = http.server.ThreadingHTTPServer((self.health_host, self.health_port), handler)
            threading.Thread(target=self._health_server.serve_forever, name="baton-health", daemon=True).start()
        scheduler = threading.Thread(target=self._beat_loop, name="baton-heartbeats", daemon=True)
        scheduler.start()
        claimer = threading.Thread(target=self._claim_loop, args=(queues,), name="baton-claim", daemon=True)
        claimer.start()
        self.log.info("worker %s started: queues %s, concurrency %d", self.worker_id, queues, self.concurrency)
        while not self._stopping.wait(0.5):
            pass
        self.log.info("worker %s stopping", self.worker_id)
        self._claimer.interrupt()
        claimer.join(CLAIM_SLACK)
        # Let running handlers finish within the grace.
        deadline = time.monotonic() + self.shutdown_grace
        while self._running_handlers() and time.monotonic() < deadline:
            time.sleep(0.05)
        forced = self._force_all()
        if forced:
            self.log.warning("shutdown grace of %gs passed: handed back %d running task(s)", self.shutdown_grace, forced)
        deadline = time.monotonic() + HAND_BACK_TIMEOUT
        while (self._live() or self._reporter.pending()) and time.monotonic() < deadline:
            time.sleep(0.02)
        if self._live() or self._reporter.pending():
            self._reporter.abandon.set()
            deadline = time.monotonic() + 2
            while self._live() and time.monotonic() < deadline:
                time.sleep(0.02)
            with self._mu:
                self._unreported += len(self._attempts)
        self._stopped.set()
        with self._beat_cond:
            self._beat_cond.notify_all()
        self._beats.shutdown(wait=False)
        if self._health_server is not None:
            self._health_server.shutdown()
            self._health_server.server_close()
        self._stop_runtime()
        self._internal.close()
        self._claimer.close()
        self.log.info("worker %s stopped", self.worker_id)

    def stop(self) -> None:
        """Starts the graceful shutdown (run() returns once it is over). Safe from any thread
        and from a signal handler."""
        self._stopping.set()

    def _live(self) -> int:
        with self._mu:
            return len(self._attempts)

    def _running_handlers(self) -> int:
        with self._mu:
            return sum(1 for a in self._attempts if a.state == RUNNING)

    # --- claims ---------------------------------------------------------------------------

    def _claim_loop(self, queues: List[str]) -> None:
        b = Backoff()
        while not self._stopping.is_set():
            with self._slots:
                while self._free == 0 and not self._stopping.is_set():
                    self._slots.wait(0.5)
                if self._stopping.is_set():
                    return
                n = min(self._free, MAX_BATCH)
                self._free -= n
            body: Dict[str, Any] = {"worker_id": self.worker_id, "streams": queues,
                                    "max_wait_ms": int(self.poll_wait * 1000), "max_tasks": n}
            if self.isolation:
                body["isolation"] = self.isolation
            try:
                ans = self._claimer.call("POST", PATH_CLAIM_BATCH, body, timeout=self.poll_wait + CLAIM_SLACK)
                claims = ans.get("claims") if isinstance(ans, dict) else None
                if not isinstance(claims, list) or len(claims) > n:
                    raise APIError(502, "bad_answer", f"claim-batch answered {ans!r:.200}", method="POST", path=PATH_CLAIM_BATCH)
            except Exception as e:  # noqa: BLE001
                self._release_slots(n)
                if self._stopping.is_set():
                    return
                self._claim_result(False)
                if isinstance(e, APIError) and not e.transient:
                    self.log.error("claim refused: %s", e)
                else:
                    self.log.warning("claim failed: %s", e)
                self._stopping.wait(b.after(e))
                continue
            self._claim_result(True)
            b.reset()
            self._release_slots(n - len(claims))
            for c in claims:
                self._start(cast(wire.StreamClaim, c))

    def _release_slots(self, n: int) -> None:
        if n:
            with self._slots:
                self._free += n
                self._slots.notify()

    def _every(self, claim: Mapping[str, Any]) -> float:
        server = float(claim.get("heartbeat_interval_seconds") or 0)
        mine = self.heartbeat_interval or 0
        if server > 0 and mine > 0:
            return min(server, mine)
        if server > 0 or mine > 0:
            return server or mine
        ttl = float(claim.get("lease_ttl_seconds") or 0)
        return ttl / 3 if ttl > 0 else 10.0

    def _start(self, claim: wire.StreamClaim) -> None:
        with self._mu:
            handler = self._handlers.get(claim.get("task_name", ""))
        att: _Attempt
        task = Task(claim, self._internal, worker_id=self.worker_id, blob_url=self.blob_url, logger=self.log,
                    beat_now=lambda: self._beat_now(att))
        att = _Attempt(task, claim, handler, self._every(claim))
        if task.timeout:
            att.deadline = time.monotonic() + task.timeout
        with self._mu:
            self._attempts.add(att)
        if min(att.next_beat, att.deadline or att.next_beat) < self._beat_wake:
            # Due before the heartbeat thread's next turn: wake it (it sleeps a second at most).
            with self._beat_cond:
                self._beat_cond.notify()
        self._dispatch(att)

    def _dispatch(self, att: _Attempt) -> None:
        raise NotImplementedError

    # --- heartbeats -----------------------------------------------------------------------

    def _beat_now(self, att: _Attempt) -> None:
        with self._beat_cond:
            att.next_beat = time.monotonic()
            self._beat_cond.notify()

    def _beat_loop(self) -> None:
        assert self._beats is not None
        while not self._stopped.is_set():
            now = time.monotonic()
            wake = now + 1.0
            with self._mu:
                atts = list(self._attempts)
            for a in atts:
                if a.state == DONE:
                    continue
                if a.abort_at is not None and now >= a.abort_at:
                    a.abort_at = None
                    self._abort(a)
                elif a.abort_at is not None:
                    wake = min(wake, a.abort_at)
                if a.deadline is not None and now >= a.deadline and not a.timed_out:
                    a.timed_out = True
                    self._stop_cooperatively(a, "timeout")
                    a.next_beat = now  # let the server apply its timeout now
                elif a.deadline is not None and not a.timed_out:
                    wake = min(wake, a.deadline)
                if not a.beating and not a.lost:
                    if now >= a.next_beat:
                        a.beating = True
                        try:
                            self._beats.submit(self._beat, a)
                        except RuntimeError:
                            return  # shut down
                    else:
                        wake = min(wake, a.next_beat)
            with self._beat_cond:
                self._beat_wake = wake
                d = wake - time.monotonic()
                if d > 0:
                    self._beat_cond.wait(d)
                self._beat_wake = 0.0

    def _beat(self, a: _Attempt) -> None:
        t = a.task
        body = {"worker_id": self.worker_id, "job_id": a.claim["job_id"], "lease_token": t.lease_token, "attempt_id": t.attempt}
        try:
            # Waited for up to half the lease, not only the interval: a server slower than the interval
            # (a busy machine) still applies a late heartbeat, and one given up on is lost.
            ttl = float(a.claim.get("lease_ttl_seconds") or 0)
            ans = self._internal.call("POST", PATH_HEARTBEAT, body, timeout=min(30.0, max(a.every, ttl / 2, 1.0)))
        except Exception as e:  # noqa: BLE001
            if a.state == DONE:
                pass
            elif isinstance(e, APIError) and not e.transient:
                self.log.info("lease lost on %s attempt %d: %s", t.id, t.attempt, e)
                a.lost = True
                self._stop_cooperatively(a, "lease_lost")
            else:
                self.log.warning("heartbeat of %s failed, retrying: %s", t.id, e)
                a.next_beat = time.monotonic() + min(a.every, a.backoff.after(e))
            a.beating = False
            with self._beat_cond:
                self._beat_cond.notify()
            return
        a.backoff.reset()
        t._renew(ans)
        if ans.get("should_cancel") and not a.cancel_requested:
            a.cancel_requested = True
            self.log.info("cancellation requested for %s (%s)", t.id, ans.get("cancel_reason"))
            self._stop_cooperatively(a, "cancel_requested")
        a.next_beat = time.monotonic() + a.every
        a.beating = False
        with self._beat_cond:
            self._beat_cond.notify()

    def _stop_cooperatively(self, a: _Attempt, reason: str) -> None:
        """Sets the task's cancel event; the handler is aborted for good after abort_grace."""
        a.task.cancelled._set(reason)
        if a.abort_at is None and a.state == RUNNING:
            a.abort_at = time.monotonic() + self.abort_grace
            with self._beat_cond:
                self._beat_cond.notify()

    # --- aborts and outcomes --------------------------------------------------------------

    def _fire_abort(self, a: _Attempt) -> bool:
        """Raises Aborted in the handler (thread) or cancels it (asyncio); a.lock held."""
        raise NotImplementedError

    def _abort(self, a: _Attempt) -> None:
        """The grace after a cooperative stop passed and the handler still runs: abort it for
        good and settle the attempt without its result."""
        with a.lock:
            if a.state != RUNNING:
                return
            a.aborted = True
            fired = self._fire_abort(a)
            a.state = SETTLING
        self.log.warning("aborted the handler of %s attempt %d (%s)%s", a.task.id, a.task.attempt,
                         a.task.cancel_reason, "" if fired else "; it was not interruptible")
        if a.cancel_requested:
            self._report_cancelled(a)
        else:
            self._release(a)

    def _force_all(self) -> int:
        """Shutdown grace over: abort every running handler and hand its attempt back."""
        with self._mu:
            atts = [a for a in self._attempts if a.state == RUNNING]
        n = 0
        for a in atts:
            with a.lock:
                if a.state != RUNNING:
                    continue
                a.aborted = True
                a.task.cancelled._set("shutdown")
                self._fire_abort(a)
                a.state = SETTLING
            n += 1
            if a.cancel_requested:
                self._report_cancelled(a)
            elif a.lost:
                self._release(a)
            else:
                self._report_fail(a, {"code": INFRASTRUCTURE, "message": SHUTDOWN_MESSAGE, "retryable": True})
        return n

    def _finish(self, a: _Attempt, ok: bool, value: Any = None, exc: Optional[BaseException] = None,
                stack: str = "") -> None:
        """The handler returned (ok, value) or raised exc: report the outcome."""
        with a.lock:
            if a.state != RUNNING:
                return
            a.state = SETTLING
        if a.cancel_requested:
            self._report_cancelled(a)
        elif a.lost:
            # The server no longer counts the attempt as this worker's: whatever the handler
            # returned is not reported, so a newer attempt decides the task.
            a.task.logger.info("attempt lost: its outcome is not reported")
            self._release(a)
        elif ok:
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as e:
                self._report_fail(a, {"code": USER_CODE, "message": f"encode the handler's output: {e}", "retryable": False})
                return
            self._report_complete(a, value)
        elif exc is None:
            a.task.logger.info("handler aborted: its outcome is not reported")
            self._release(a)
        elif a.timed_out:
            a.task.logger.info("task timeout passed: the server times the attempt out (%s)", exc)
            self._release(a)
        elif isinstance(exc, RetryAfter) and exc.seconds > 0:
            f = self._failure(exc, stack)
            end = time.monotonic() + exc.seconds

            def later() -> None:
                while time.monotonic() < end and not (self._stopping.is_set() or a.lost or a.cancel_requested):
                    time.sleep(min(0.2, max(0.0, end - time.monotonic())))
                if a.cancel_requested:
                    self._report_cancelled(a)
                elif a.lost:
                    self._release(a)
                else:
                    self._report_fail(a, f)
            threading.Thread(target=later, name="baton-retry-after", daemon=True).start()
        else:
            self._report_fail(a, self._failure(exc, stack))

    @staticmethod
    def _failure(exc: BaseException, stack: str) -> Dict[str, Any]:
        if isinstance(exc, TaskError):
            # The dialect's error.code is the category; a code of a USER_CODE error travels in
            # its place (the server keeps it as the error's code under USER_CODE).
            code = exc.code if exc.code and exc.category == USER_CODE and exc.code not in CATEGORIES else exc.category
            f: Dict[str, Any] = {"code": code, "message": _truncate(exc.message)}
            if exc.retryable is not None:
                f["retryable"] = exc.retryable
        else:
            name = type(exc).__name__
            code = USER_CODE if name in CATEGORIES else name
            f = {"code": code, "message": _truncate(f"{name}: {exc}" if str(exc) else name), "retryable": True}
        if stack:
            f["stack"] = _truncate(stack)
        return f

    def _body(self, a: _Attempt) -> Dict[str, Any]:
        c = a.claim
        b = {"job_id": c["job_id"], "attempt_id": a.task.attempt, "lease_token": a.task.lease_token, "stream": c.get("stream", "")}
        if c.get("message_id"):
            b["message_id"] = c["message_id"]
        return b

    def _report_complete(self, a: _Attempt, value: Any) -> None:
        body = self._body(a)
        body["result"] = value

        def done(kind: str, res: Any) -> None:
            if kind == "refused":
                # The result itself is unacceptable (too large, say): fail the attempt instead.
                self._report_fail(a, {"code": USER_CODE, "message": f"the server refused the task's output: {res}"})
                return
            self._settled(a, kind, res, "completed")
        assert self._reporter is not None
        self._reporter.submit(_Report("complete", body, done))

    def _report_fail(self, a: _Attempt, failure: Dict[str, Any]) -> None:
        body = self._body(a)
        body["error"] = failure
        assert self._reporter is not None
        self._reporter.submit(_Report("fail", body, lambda kind, res: self._settled(a, kind, res, "failed")))

    def _report_cancelled(self, a: _Attempt) -> None:
        def send() -> None:
            body = {"task_id": a.task.id, "attempt": a.task.attempt, "lease_token": a.task.lease_token, "status": "Canceled"}
            try:
                def once() -> Any:
                    return self._internal.call("POST", PATH_TASK_COMPLETE, body)
                res = retrying(once, attempts=8)
                self._settled(a, "delivered", res, "canceled")
            except APIError as e:
                self._settled(a, "not_ours" if e.status in (404, 409, 410) else "refused", e, "canceled")
            except Exception as e:  # noqa: BLE001
                self._settled(a, "abandoned", e, "canceled")
        threading.Thread(target=send, name="baton-cancel-report", daemon=True).start()

    def _settled(self, a: _Attempt, kind: str, res: Any, outcome: str) -> None:
        t = a.task
        if kind == "delivered":
            t.logger.debug("task %s", outcome)
            with self._mu:
                self.completed += 1
        elif kind == "not_ours":
            t.logger.info("attempt no longer ours: %s not committed (%s)", outcome, res)
        elif kind == "abandoned":
            t.logger.error("outcome %s not reported: the worker stopped", outcome)
            with self._mu:
                self._unreported += 1
        else:
            t.logger.error("server refused the %s report: %s", outcome, res)
        self._release(a)

    def _release(self, a: _Attempt) -> None:
        with a.lock:
            if a.state == DONE:
                return
            a.state = DONE
        with self._mu:
            self._attempts.discard(a)
        self._release_slots(1)


class Worker(_BaseWorker):
    """A worker that runs handlers on threads: ``concurrency`` tasks at once.

    Register handlers with ``@worker.task("name")`` (or :meth:`register`); a handler takes a
    :class:`Task` and returns a JSON-able output, or raises: :class:`baton.TaskError` (and its
    subclasses) fail the task with their category and retry decision, any other exception is a
    retryable ``USER_CODE`` failure with its traceback as the stack.

    Options: ``internal_url`` (default ``$BATON_INTERNAL_URL``), ``queues`` (default: the
    registered task names), ``concurrency``, ``worker_id`` (default hostname-pid),
    ``heartbeat_interval`` (at most the server's), ``poll_wait`` (a claim's long poll, seconds),
    ``shutdown_grace`` (30 s), ``abort_grace`` (10 s: from a cooperative stop to the abort),
    ``blob_url`` (default ``$BATON_BLOB_URL``; for publish_batch on a file store), ``ca_file``,
    ``cert_file``, ``key_file`` or ``ssl_context`` (mutual TLS), ``health_port`` (serve
    ``GET /healthz``), ``health_failures``/``health_timeout`` (when it turns unhealthy),
    ``isolation`` and ``logger``.
    """

    def _check_handler(self, fn: Callable[..., Any]) -> None:
        if inspect.iscoroutinefunction(fn):
            raise TypeError("baton: Worker runs plain functions; use AsyncWorker for async def handlers")

    def _start_runtime(self) -> None:
        self._pool = _Pool("baton-handler")

    def _dispatch(self, att: _Attempt) -> None:
        self._pool.submit(lambda: self._run_one(att))

    def _run_one(self, a: _Attempt) -> None:
        try:
            if a.handler is None:
                self._finish(a, False, exc=TaskError(CONFIGURATION, f"no handler for task name {a.task.name!r} on worker "
                                                                   f"{self.worker_id}", retryable=False))
                return
            with a.lock:
                a.thread_ident = threading.get_ident()
                a.in_handler = True
            try:
                out = a.handler(a.task)
                ok, exc, stack = True, None, ""
            except Aborted:
                ok, out, exc, stack = False, None, None, ""
            except BaseException as e:  # noqa: BLE001 - every failure is reported
                ok, out, exc, stack = False, None, e, traceback.format_exc()
            with a.lock:
                a.in_handler = False
            self._finish(a, ok, out, exc, stack)
        except Aborted:
            # The abort arrived as the handler returned: the attempt was settled by the abort.
            with a.lock:
                a.in_handler = False

    def _fire_abort(self, a: _Attempt) -> bool:
        if a.in_handler and a.thread_ident is not None:
            return _async_raise(a.thread_ident, Aborted)
        return False


class AsyncWorker(_BaseWorker):
    """A worker that runs ``async def`` handlers on one asyncio event loop (a thread of its
    own), up to ``concurrency`` at once. Claims, heartbeats and reports run on other threads,
    so a handler that blocks the loop keeps its lease. An aborted handler is cancelled
    (``asyncio.CancelledError`` inside it). ``await task.cancelled`` waits for a stop.
    Options as :class:`Worker`."""

    _is_async = True

    def _check_handler(self, fn: Callable[..., Any]) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError("baton: AsyncWorker runs async def handlers; use Worker for plain functions")

    def _start_runtime(self) -> None:
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.call_soon(ready.set)
            self._loop.run_forever()
        self._loop_thread = threading.Thread(target=main, name="baton-asyncio", daemon=True)
        self._loop_thread.start()
        ready.wait()

    def _stop_runtime(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)

    def _dispatch(self, att: _Attempt) -> None:
        asyncio.run_coroutine_threadsafe(self._run_one(att), self._loop)

    async def _run_one(self, a: _Attempt) -> None:
        if a.handler is None:
            self._finish(a, False, exc=TaskError(CONFIGURATION, f"no handler for task name {a.task.name!r} on worker "
                                                               f"{self.worker_id}", retryable=False))
            return
        a.aio_task = asyncio.current_task()
        a.aio_loop = asyncio.get_running_loop()
        exc: Optional[BaseException]
        with a.lock:
            a.in_handler = True
        try:
            out = await cast(Callable[[Task], Awaitable[Any]], a.handler)(a.task)
            ok, exc, stack = True, None, ""
        except asyncio.CancelledError as e:
            if a.aborted:
                ok, out, exc, stack = False, None, None, ""
            else:  # cancelled by the handler's own code, not by the worker: a failure
                ok, out, exc, stack = False, None, TaskError(USER_CODE, "the handler was cancelled (asyncio.CancelledError)"), \
                    "".join(traceback.format_exception(type(e), e, e.__traceback__))
        except Aborted:
            ok, out, exc, stack = False, None, None, ""
        except BaseException as e:  # noqa: BLE001
            ok, out, exc, stack = False, None, e, traceback.format_exc()
        with a.lock:
            a.in_handler = False
        # Reporting may block briefly (queues, threads): never on the loop.
        self._finish(a, ok, out, exc, stack)

    def _fire_abort(self, a: _Attempt) -> bool:
        if a.in_handler and a.aio_task is not None and a.aio_loop is not None:
            a.aio_loop.call_soon_threadsafe(a.aio_task.cancel)
            return True
        return False
