"""HTTP plumbing shared by every client of the SDK: keep-alive connections (one per thread),
JSON requests, error answers as exceptions, and retries with jittered exponential backoff."""
from __future__ import annotations

import email.utils
import http.client
import json
import random
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple, TypeVar

from .errors import APIError, TransportError, transient

T = TypeVar("T")

#: Bounds of the exponential backoff between retries, and the cap on a Retry-After.
MIN_BACKOFF = 0.1
MAX_BACKOFF = 10.0
MAX_RETRY_AFTER = 60.0
MAX_ANSWER = 64 << 20

USER_AGENT = "baton-sdk-python/0.1.0"


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class Backoff:
    """Exponential delays from MIN_BACKOFF to MAX_BACKOFF with ±50% jitter; ``after(err)`` waits
    longer when the error's answer asked for it with Retry-After."""

    def __init__(self, lo: float = MIN_BACKOFF, hi: float = MAX_BACKOFF) -> None:
        self.lo, self.hi, self.n = lo, hi, 0

    def next(self) -> float:
        d = min(self.hi, self.lo * (2 ** min(self.n, 30)))
        self.n += 1
        return float(d * (0.5 + random.random()))

    def after(self, err: Optional[BaseException]) -> float:
        d = self.next()
        if isinstance(err, APIError) and err.retry_after is not None and err.retry_after > d:
            d = min(err.retry_after, MAX_RETRY_AFTER)
        return d

    def reset(self) -> None:
        self.n = 0


def _read_body(res: http.client.HTTPResponse) -> bytes:
    """The whole answer, refused past MAX_ANSWER. (read(n) would allocate n bytes up front on
    Python 3.9, so the length is checked first.)"""
    length = res.getheader("Content-Length")
    if length is not None and length.isdigit() and int(length) > MAX_ANSWER:
        raise http.client.HTTPException(f"answer of {length} bytes is over the limit of {MAX_ANSWER}")
    data = res.read()
    if len(data) > MAX_ANSWER:
        raise http.client.HTTPException(f"answer is over the limit of {MAX_ANSWER} bytes")
    return data


class Response:
    """An answer: status, headers (lower-case names) and the raw body."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else None


def make_ssl_context(ca_file: Optional[str] = None, cert_file: Optional[str] = None,
                     key_file: Optional[str] = None, context: Optional[ssl.SSLContext] = None) -> Optional[ssl.SSLContext]:
    """An SSLContext that trusts ca_file (or the system's CAs) and presents the client
    certificate cert_file/key_file (mutual TLS); None when nothing is set."""
    if context is not None:
        return context
    if not (ca_file or cert_file or key_file):
        return None
    if bool(cert_file) != bool(key_file):
        raise ValueError("baton: mutual TLS needs both cert_file and key_file")
    ctx = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
    if cert_file and key_file:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


class Transport:
    """Requests to one server listener (a base URL), on keep-alive connections kept per thread.

    ``headers`` are sent with every request (e.g. ``x-api-key``).
    """

    def __init__(self, base_url: str, *, headers: Optional[Mapping[str, str]] = None,
                 ssl_context: Optional[ssl.SSLContext] = None, timeout: float = 30.0) -> None:
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"baton: URL {base_url!r}: want http(s)://host[:port]")
        if u.scheme == "http" and ssl_context is not None:
            raise ValueError(f"baton: URL {base_url!r}: TLS options need an https:// URL")
        self.base_url = base_url.rstrip("/")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self.headers = {"User-Agent": USER_AGENT, **(headers or {})}
        self.ssl_context = ssl_context
        self.timeout = timeout
        self._local = threading.local()
        self._interrupted = False
        self._all: "list[http.client.HTTPConnection]" = []
        self._lock = threading.Lock()

    def _conn(self, fresh: bool = False) -> Tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it was used before."""
        c: Optional[http.client.HTTPConnection] = getattr(self._local, "conn", None)
        if c is not None and not fresh:
            return c, True
        if c is not None:
            c.close()
        if self.scheme == "https":
            c = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.ssl_context)
        else:
            c = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self._local.conn = c
        with self._lock:
            self._all.append(c)
        return c, False

    def _drop(self) -> None:
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    def close(self) -> None:
        """Closes every connection (of every thread)."""
        with self._lock:
            conns, self._all = self._all, []
        for c in conns:
            c.close()

    def interrupt(self) -> None:
        """Breaks off the requests in flight on this transport's connections (e.g. a long
        poll) by shutting their sockets down; they, and any later request, raise TransportError."""
        self._interrupted = True
        with self._lock:
            conns = list(self._all)
        for c in conns:
            sock = c.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def url(self, path: str) -> str:
        return self.base_url + path

    def send(self, method: str, path: str, body: Optional[bytes] = None,
             headers: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None) -> Response:
        """One request; an answer of any status is returned, no answer raises TransportError."""
        hdrs = dict(self.headers)
        if headers:
            hdrs.update(headers)
        if body is not None:
            hdrs.setdefault("Content-Length", str(len(body)))
        for attempt in (0, 1):
            if self._interrupted:
                raise TransportError(method, self.url(path), ConnectionAbortedError("the transport was interrupted"))
            conn, reused = self._conn()
            try:
                conn.timeout = timeout if timeout is not None else self.timeout
                if conn.sock is not None:
                    conn.sock.settimeout(conn.timeout)
                conn.request(method, self.prefix + path, body=body, headers=hdrs)
                res = conn.getresponse()
                data = _read_body(res)
                out = Response(res.status, {k.lower(): v for k, v in res.getheaders()}, data)
                if res.will_close:
                    self._drop()
                return out
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest, http.client.BadStatusLine) as e:
                self._drop()
                # A kept-alive connection the server closed meanwhile: the request never
                # reached it. Try once more on a new connection.
                if reused and attempt == 0:
                    continue
                raise TransportError(method, self.url(path), e) from e
            except (OSError, http.client.HTTPException) as e:
                self._drop()
                raise TransportError(method, self.url(path), e) from e
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, body: Any = None, *, headers: Optional[Mapping[str, str]] = None,
             timeout: Optional[float] = None, raw: Optional[bytes] = None, content_type: str = "application/json") -> Any:
        """A JSON request: ``body`` is encoded as JSON (or ``raw`` sent as it is); a 2xx answer
        is decoded and returned, any other raises APIError."""
        data: Optional[bytes] = raw
        hdrs: Dict[str, str] = dict(headers or {})
        if raw is None and body is not None:
            data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode("utf-8")
        if data is not None:
            hdrs.setdefault("Content-Type", content_type)
        res = self.send(method, path, data, hdrs, timeout)
        if res.status // 100 != 2:
            raise APIError.from_answer(res.status, res.body, retry_after=parse_retry_after(res.headers.get("retry-after")),
                                       method=method, path=path)
        try:
            return res.json()
        except ValueError as e:
            raise APIError(res.status, "bad_answer", f"the answer is not JSON: {e}", res.body[:200],
                           method=method, path=path) from e

    def stream(self, path: str, headers: Optional[Mapping[str, str]] = None,
               timeout: Optional[float] = None) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """A GET whose answer is read as it arrives, on a connection of its own (closed by the
        caller). A non-2xx answer raises APIError."""
        if self.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout or self.timeout, context=self.ssl_context)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
        hdrs = dict(self.headers)
        hdrs.update(headers or {})
        try:
            conn.request("GET", self.prefix + path, headers=hdrs)
            res = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise TransportError("GET", self.url(path), e) from e
        if res.status // 100 != 2:
            body = _read_body(res)
            conn.close()
            raise APIError.from_answer(res.status, body, retry_after=parse_retry_after(res.getheader("Retry-After")),
                                       method="GET", path=path)
        return conn, res


def retrying(fn: Callable[[], T], *, attempts: int, deadline: Optional[float] = None,
             sleep: Callable[[float], Any] = time.sleep, on_retry: Optional[Callable[[BaseException, float], None]] = None) -> T:
    """Calls fn until it returns, retrying transient errors (no answer, 408, 429, 5xx) with
    jittered backoff honouring Retry-After, at most ``attempts`` times in all (0: no limit) and
    not past ``deadline`` (a time.monotonic() value)."""
    b = Backoff()
    n = 0
    while True:
        n += 1
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - classified below
            if not transient(e) or (attempts and n >= attempts):
                raise
            d = b.after(e)
            if deadline is not None and time.monotonic() + d > deadline:
                raise
            if on_retry is not None:
                on_retry(e, d)
            sleep(d)


def iter_sse(res: http.client.HTTPResponse) -> Iterator[Dict[str, str]]:
    """The events of a Server-Sent Events stream: dicts with ``event``, ``id`` and ``data``
    (data lines joined by newlines); comments are skipped."""
    event: Dict[str, str] = {}
    data: "list[str]" = []
    while True:
        raw = res.readline()
        if not raw:
            return
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if name == "data":
                data.append(value)
            elif name in ("event", "id", "retry"):
                event[name] = value
            continue
        if event or data:
            event["data"] = "\n".join(data)
            yield event
        event, data = {}, []
