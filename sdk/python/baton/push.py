"""Push targets: HTTP endpoints that Baton POSTs tasks to (``runtime: push``).

* :func:`verify` / :func:`check` authenticate a delivery (docs/contracts/push.md: the bearer
  secret, ``Baton-Timestamp`` and the HMAC-SHA256 ``Baton-Signature`` over the raw body);
* :func:`wsgi_middleware` and :func:`asgi_middleware` put that check in front of any WSGI or
  ASGI application (401 to a delivery not signed by Baton);
* :class:`Callbacks` reports an attempt through the callback dialect (started, heartbeat,
  completed with the envelope's token);
* :class:`PushTarget` is a whole target: handlers registered per task name, run like a
  Worker's (heartbeats on a thread of their own, cooperative cancellation), served as a WSGI
  app (``target.wsgi``), an ASGI app (``target.asgi``) or a stand-alone server (``serve``).
"""
from __future__ import annotations

import hashlib
import hmac
import http.server
import io
import json
import logging
import os
import threading
import time
import traceback
from typing import (Any, Awaitable, Callable, Dict, Iterable, List, Mapping, MutableMapping, Optional, Set, Tuple,
                    TypeVar, cast)

from . import _wire as wire
from ._http import Backoff, Transport, retrying
from .errors import APIError, CATEGORIES, TaskError, USER_CODE
from .scoped import TaskScope

__all__ = ["verify", "check", "PushUnauthorized", "wsgi_middleware", "asgi_middleware", "Callbacks", "PushTarget",
           "DEFAULT_TOLERANCE"]

#: How far Baton-Timestamp may be from the target's clock, either way (Baton's own verifier's).
DEFAULT_TOLERANCE = 300.0

H = TypeVar("H", bound=Callable[..., Any])


class PushUnauthorized(Exception):
    """A delivery that is not Baton's: missing or wrong bearer secret, a stale or malformed
    timestamp, or a wrong signature. ``str(err)`` says which."""


def _header(headers: Any, name: str) -> str:
    """A header of a mapping whose keys may be of any case, or of a WSGI environ."""
    if headers is None:
        return ""
    get = getattr(headers, "get", None)
    if get is None:
        return ""
    v = get(name)
    if v is None:
        v = get(name.lower())
    if v is None and isinstance(headers, Mapping):
        environ_key = "HTTP_" + name.upper().replace("-", "_")
        v = headers.get(environ_key)
        if v is None:
            low = name.lower()
            for k, val in headers.items():
                if isinstance(k, str) and k.lower() == low:
                    v = val
                    break
    if isinstance(v, bytes):
        v = v.decode("latin-1")
    return "" if v is None else str(v)


def check(headers: Any, body: bytes, secret: str, *, tolerance: float = DEFAULT_TOLERANCE,
          now: Optional[float] = None) -> None:
    """Raises PushUnauthorized unless the delivery (its headers and raw body bytes) carries the
    target's secret as a bearer token, a Baton-Timestamp within ``tolerance`` seconds of ``now``
    and a valid ``v1=`` HMAC-SHA256 Baton-Signature. ``headers``: any mapping (case-insensitive
    or not) or a WSGI environ."""
    if not secret:
        raise ValueError("baton: push verification needs the target's secret")
    if not isinstance(body, (bytes, bytearray)):
        raise TypeError("baton: verify the raw body bytes, before parsing them")
    auth = _header(headers, "Authorization")
    if not hmac.compare_digest(auth.encode("utf-8"), b"Bearer " + secret.encode("utf-8")):
        raise PushUnauthorized("missing or wrong bearer secret")
    ts = _header(headers, "Baton-Timestamp")
    if not ts.isdigit() or not ts.isascii():
        raise PushUnauthorized("Baton-Timestamp is not decimal Unix seconds")
    if abs((time.time() if now is None else now) - int(ts)) > tolerance:
        raise PushUnauthorized("Baton-Timestamp is outside the tolerance window")
    sig = _header(headers, "Baton-Signature")
    hexpart = sig[3:] if sig.startswith("v1=") else ""
    if len(hexpart) != 64 or any(c not in "0123456789abcdef" for c in hexpart):
        raise PushUnauthorized("Baton-Signature is not v1= and 64 lowercase hex digits")
    mac = hmac.new(secret.encode("utf-8"), ts.encode("ascii") + b"." + bytes(body), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(hexpart.encode("ascii"), mac.encode("ascii")):
        raise PushUnauthorized("wrong Baton-Signature")


def verify(headers: Any, body: bytes, secret: str, *, tolerance: float = DEFAULT_TOLERANCE,
           now: Optional[float] = None) -> bool:
    """Whether the delivery is Baton's (see check, which says why not)."""
    try:
        check(headers, body, secret, tolerance=tolerance, now=now)
    except PushUnauthorized:
        return False
    return True


_UNAUTHORIZED_HEADERS = [("Content-Type", "application/json"), ("WWW-Authenticate", 'Bearer realm="baton-push"')]


def _unauthorized_body(err: Exception) -> bytes:
    return json.dumps({"error": f"not a delivery signed by Baton: {err}"}).encode()


WSGIApp = Callable[[Dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def wsgi_middleware(app: WSGIApp, secret: str, *, tolerance: float = DEFAULT_TOLERANCE) -> WSGIApp:
    """Wraps a WSGI app so that it only sees deliveries signed by Baton: others are answered
    401 with ``WWW-Authenticate: Bearer realm="baton-push"``. The app reads the body as usual
    (``environ["wsgi.input"]``); ``environ["baton.push.body"]`` holds its bytes."""
    if not secret:
        raise ValueError("baton: wsgi_middleware needs the target's secret")

    def wrapped(environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            n = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            n = 0
        body = environ["wsgi.input"].read(n) if n > 0 else b""
        try:
            check(environ, body, secret, tolerance=tolerance)
        except PushUnauthorized as e:
            data = _unauthorized_body(e)
            start_response("401 Unauthorized", _UNAUTHORIZED_HEADERS + [("Content-Length", str(len(data)))])
            return [data]
        environ["wsgi.input"] = io.BytesIO(body)
        environ["baton.push.body"] = body
        return app(environ, start_response)
    return wrapped


ASGIApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Dict[str, Any]]], Callable[[Dict[str, Any]], Awaitable[None]]],
                   Awaitable[None]]


def asgi_middleware(app: ASGIApp, secret: str, *, tolerance: float = DEFAULT_TOLERANCE) -> ASGIApp:
    """Wraps an ASGI app so that its HTTP requests are deliveries signed by Baton (401
    otherwise); the app receives the body as usual, ``scope["baton.push.body"]`` holds it."""
    if not secret:
        raise ValueError("baton: asgi_middleware needs the target's secret")

    async def wrapped(scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Dict[str, Any]]],
                      send: Callable[[Dict[str, Any]], Awaitable[None]]) -> None:
        if scope.get("type") != "http":
            await app(scope, receive, send)
            return
        chunks: List[bytes] = []
        while True:
            msg = await receive()
            if msg.get("type") == "http.disconnect":
                return
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        body = b"".join(chunks)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            check(headers, body, secret, tolerance=tolerance)
        except PushUnauthorized as e:
            data = _unauthorized_body(e)
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(k.lower().encode(), v.encode()) for k, v in _UNAUTHORIZED_HEADERS]
                        + [(b"content-length", str(len(data)).encode())]})
            await send({"type": "http.response.body", "body": data})
            return
        scope["baton.push.body"] = body
        sent = False

        async def replay() -> Dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()
        await app(scope, replay, send)
    return wrapped


class Callbacks:
    """Reports one pushed attempt through the callback dialect, with the envelope's token
    (``Authorization: Bearer``): :meth:`started`, :meth:`heartbeat`, :meth:`completed`,
    :meth:`failed`, :meth:`cancelled`. Transient failures are retried; refusals raise
    :class:`baton.APIError` (409/410: the attempt is no longer this target's)."""

    def __init__(self, envelope: Mapping[str, Any], worker_id: Optional[str] = None) -> None:
        for k in ("taskId", "attempt", "taskToken", "callbackBaseUrl"):
            if not envelope.get(k):
                raise ValueError(f"baton: the push envelope has no {k}")
        self.envelope = envelope
        self.worker_id = worker_id or f"py-push-{os.getpid()}"
        self._t = Transport(str(envelope["callbackBaseUrl"]))
        self._token = str(envelope["taskToken"])
        self._mu = threading.Lock()

    @property
    def token(self) -> str:
        with self._mu:
            return self._token

    def _call(self, what: str, body: Mapping[str, Any]) -> Dict[str, Any]:
        path = f"/v1/tasks/{self.envelope['taskId']}/{what}"
        payload = {"attempt": self.envelope["attempt"], "workerId": self.worker_id, **body}
        if self.envelope.get("attemptId"):
            payload["attemptId"] = self.envelope["attemptId"]
        def once() -> Any:
            return self._t.call("POST", path, payload, headers={"Authorization": "Bearer " + self.token})
        ans = retrying(once, attempts=8)
        if isinstance(ans, dict) and ans.get("taskToken"):
            with self._mu:
                self._token = ans["taskToken"]
        return cast(Dict[str, Any], ans)

    def started(self) -> wire.CallbackStartedAnswer:
        """Says the target started the attempt."""
        return cast(wire.CallbackStartedAnswer, self._call("started", {}))

    def heartbeat(self, progress_pct: Optional[float] = None, message: Optional[str] = None) -> wire.CallbackHeartbeatAnswer:
        """Extends the lease; the answer's ``shouldCancel`` asks to stop."""
        body: Dict[str, Any] = {}
        if progress_pct is not None:
            body["progressPct"] = progress_pct
        if message is not None:
            body["message"] = message
        return cast(wire.CallbackHeartbeatAnswer, self._call("heartbeat", body))

    def completed(self, output: Any = None, *, metrics: Optional[Mapping[str, Any]] = None) -> wire.CallbackCompletedAnswer:
        """Reports success with the output."""
        body: Dict[str, Any] = {"outcome": "SUCCEEDED", "output": output}
        if metrics:
            body["metrics"] = dict(metrics)
        return cast(wire.CallbackCompletedAnswer, self._call("completed", body))

    def failed(self, message: str, category: str = USER_CODE, *, retryable: Optional[bool] = None,
               stack_trace: Optional[str] = None) -> wire.CallbackCompletedAnswer:
        """Reports a failure with an error category."""
        if category not in CATEGORIES:
            raise ValueError(f"baton: unknown error category {category!r}")
        err: Dict[str, Any] = {"category": category, "message": message}
        if retryable is not None:
            err["retryable"] = retryable
        if stack_trace:
            err["stackTrace"] = stack_trace
        return cast(wire.CallbackCompletedAnswer, self._call("completed", {"outcome": "FAILED", "error": err}))

    def cancelled(self, partial_progress: Any = None) -> wire.CallbackCompletedAnswer:
        """Reports the attempt cancelled."""
        body: Dict[str, Any] = {"outcome": "CANCELLED"}
        if partial_progress is not None:
            body["partialProgress"] = partial_progress
        return cast(wire.CallbackCompletedAnswer, self._call("completed", body))


class PushTarget:
    """A push target that runs a handler per task name, like a Worker.

    ``secret`` is the target's ``--push-secret`` (deliveries not signed with it are answered
    401). A delivery is answered 202 at once (a repeated Idempotency-Key: 202 with
    ``duplicate: true``, not run again); the handler then runs on a thread with a
    :class:`baton.TaskScope` (``task.input``, ``task.parents``, ``task.cancelled``,
    ``publish_batch``, ``rows``, ``query``...) while another thread heartbeats every
    ``heartbeatIntervalMs``; its return value or exception is reported through the callback
    dialect like a Worker's. Serve it with ``target.wsgi`` (a WSGI app), ``target.asgi`` (an
    ASGI app) or :meth:`serve`.
    """

    def __init__(self, secret: Optional[str], *, worker_id: Optional[str] = None, tolerance: float = DEFAULT_TOLERANCE,
                 logger: Optional[logging.Logger] = None) -> None:
        self.secret = secret
        self.worker_id = worker_id or f"py-push-{os.getpid()}"
        self.tolerance = tolerance
        self.log = logger or logging.getLogger("baton.push")
        self._handlers: Dict[str, Callable[[TaskScope], Any]] = {}
        self._seen: Set[str] = set()
        self._mu = threading.Lock()
        self.done = threading.Semaphore(0)
        if not secret:
            self.log.warning("push target without a secret: deliveries are not authenticated")

    def task(self, name: str) -> Callable[[H], H]:
        """A decorator registering the handler of tasks named ``name``."""
        def deco(fn: H) -> H:
            if not name or not callable(fn):
                raise ValueError("baton: PushTarget.task needs a name and a callable")
            self._handlers[name] = fn
            return fn
        return deco

    def accept(self, headers: Any, body: bytes) -> Tuple[int, Dict[str, Any]]:
        """Handles one delivery: (status, JSON answer). Starts the task's thread on 202."""
        if self.secret:
            try:
                check(headers, body, self.secret, tolerance=self.tolerance)
            except PushUnauthorized as e:
                return 401, {"error": f"not a delivery signed by Baton: {e}"}
        try:
            env = json.loads(body)
        except ValueError as e:
            return 400, {"error": f"the delivery is not JSON: {e}"}
        if not isinstance(env, dict) or not env.get("taskId"):
            return 400, {"error": "the delivery is not a task envelope"}
        key = _header(headers, "Idempotency-Key") or str(env.get("idempotencyKey") or "")
        with self._mu:
            duplicate = bool(key) and key in self._seen
            if key:
                self._seen.add(key)
        if not duplicate:
            threading.Thread(target=self._run, args=(env,), name="baton-push-task", daemon=True).start()
        return 202, {"accepted": True, "duplicate": duplicate}

    def _run(self, env: Dict[str, Any]) -> None:
        try:
            self._run_one(env)
        finally:
            self.done.release()

    def _run_one(self, env: Dict[str, Any]) -> None:
        cb = Callbacks(env, self.worker_id)
        try:
            cb.started()
        except APIError as e:
            self.log.info("%s: started refused (%s); not running it", env.get("taskKey"), e)
            return
        scope = TaskScope.from_push(env)
        stop = threading.Event()
        lost = threading.Event()

        def beat() -> None:
            every = float(env.get("heartbeatIntervalMs") or 30000) / 1000
            b = Backoff()
            wait = every
            while not stop.wait(wait):
                try:
                    ans = cb.heartbeat()
                    wait = every
                except APIError as e:
                    if e.transient:
                        wait = min(every, b.after(e))
                        continue
                    lost.set()
                    scope.cancelled._set("lease_lost")
                    return
                except Exception as e:  # noqa: BLE001
                    wait = min(every, b.after(e))
                    continue
                if ans.get("shouldCancel"):
                    scope.cancelled._set("cancel_requested")
        hb = threading.Thread(target=beat, name="baton-push-heartbeat", daemon=True)
        hb.start()
        handler = self._handlers.get(str(env.get("taskName", "")))
        out: Any = None
        exc: Optional[BaseException] = None
        try:
            if handler is None:
                raise TaskError("CONFIGURATION", f"no handler for task name {env.get('taskName')!r}", retryable=False)
            out = handler(scope)
            json.dumps(out)
        except BaseException as e:  # noqa: BLE001 - reported
            exc = e
        finally:
            stop.set()
            hb.join(5)
        if lost.is_set():
            self.log.info("%s: lease lost; outcome not reported", env.get("taskKey"))
            return
        try:
            if scope.cancelled.reason == "cancel_requested":
                cb.cancelled()
            elif exc is None:
                cb.completed(out)
            elif isinstance(exc, TaskError):
                cb.failed(exc.message, exc.category, retryable=exc.retryable,
                          stack_trace="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            else:
                cb.failed(f"{type(exc).__name__}: {exc}", USER_CODE, retryable=True,
                          stack_trace="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        except APIError as e:
            self.log.info("%s: report refused: %s", env.get("taskKey"), e)

    def wsgi(self, environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        """The target as a WSGI application (POST deliveries to any path)."""
        if environ.get("REQUEST_METHOD") != "POST":
            start_response("405 Method Not Allowed", [("Allow", "POST"), ("Content-Length", "0")])
            return [b""]
        try:
            n = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            n = 0
        body = environ["wsgi.input"].read(n) if n > 0 else b""
        status, ans = self.accept(environ, body)
        data = json.dumps(ans).encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
        if status == 401:
            headers.append(("WWW-Authenticate", 'Bearer realm="baton-push"'))
        reason = {202: "Accepted", 400: "Bad Request", 401: "Unauthorized"}.get(status, "")
        start_response(f"{status} {reason}", headers)
        return [data]

    async def asgi(self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Dict[str, Any]]],
                   send: Callable[[Dict[str, Any]], Awaitable[None]]) -> None:
        """The target as an ASGI application."""
        if scope.get("type") != "http":
            return
        chunks: List[bytes] = []
        while True:
            msg = await receive()
            if msg.get("type") == "http.disconnect":
                return
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        status, ans = self.accept(headers, b"".join(chunks)) if scope.get("method") == "POST" else (405, {"error": "POST only"})
        data = json.dumps(ans).encode()
        hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        if status == 401:
            hdrs.append((b"www-authenticate", b'Bearer realm="baton-push"'))
        await send({"type": "http.response.start", "status": status, "headers": hdrs})
        await send({"type": "http.response.body", "body": data})

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> http.server.ThreadingHTTPServer:
        """Starts a stand-alone threaded HTTP server for the target and returns it (its
        ``server_address`` says the port; ``shutdown()`` stops it)."""
        target = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                status, ans = target.accept(self.headers, self.rfile.read(n))
                data = json.dumps(ans).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 401:
                    self.send_header("WWW-Authenticate", 'Bearer realm="baton-push"')
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                target.log.debug(format, *args)
        srv = http.server.ThreadingHTTPServer((host, port), Handler)
        threading.Thread(target=srv.serve_forever, name="baton-push-server", daemon=True).start()
        return srv
