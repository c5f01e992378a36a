"""Exceptions of the Baton SDK.

Two families:

* :class:`BatonError` and its subclasses are raised **by the SDK** when a call to the server
  fails: :class:`APIError` (the server answered with an error status; it carries the status, the
  error code and message of the answer's body) and :class:`TransportError` (no answer at all).
* :class:`TaskError` and its subclasses are raised **by a handler** to fail its task with an
  error category and a retry decision; :class:`Aborted` is raised *into* a handler that the
  worker stopped for good.
"""
from __future__ import annotations

import json
from typing import Any, Dict, Optional, Type

__all__ = [
    "BatonError", "APIError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "Conflict",
    "Gone", "PayloadTooLarge", "Unprocessable", "RateLimited", "ServerError", "NotImplementedByServer",
    "Unavailable", "TransportError", "TaskError", "NonRetryable", "RetryAfter", "Aborted",
    "CATEGORIES", "RETRYABLE_BY_DEFAULT", "USER_CODE", "DATA_QUALITY", "INFRASTRUCTURE",
    "CONFIGURATION", "TIMEOUT", "CANCELLED",
]

#: The error categories of a failed task (docs/lifecycle.md#retries).
USER_CODE = "USER_CODE"
DATA_QUALITY = "DATA_QUALITY"
INFRASTRUCTURE = "INFRASTRUCTURE"
CONFIGURATION = "CONFIGURATION"
TIMEOUT = "TIMEOUT"
CANCELLED = "CANCELLED"
CATEGORIES = (USER_CODE, DATA_QUALITY, INFRASTRUCTURE, CONFIGURATION, TIMEOUT, CANCELLED)
#: Whether the server retries a failure of each category when the error does not say.
RETRYABLE_BY_DEFAULT: Dict[str, bool] = {
    USER_CODE: True, INFRASTRUCTURE: True, TIMEOUT: True,
    DATA_QUALITY: False, CONFIGURATION: False, CANCELLED: False,
}


class BatonError(Exception):
    """The base of every error the SDK raises about a call to the server."""


class TransportError(BatonError):
    """No answer came from the server (connection refused or reset, timeout, TLS failure)."""

    def __init__(self, method: str, url: str, cause: BaseException) -> None:
        super().__init__(f"{method} {url}: {type(cause).__name__}: {cause}")
        self.method = method
        self.url = url
        self.cause = cause


class APIError(BatonError):
    """The server answered with an error status.

    Attributes: ``status`` (the HTTP status), ``code`` (the body's machine-readable code, e.g.
    ``lease_mismatch`` or ``invalid_request``; for producer answers, whose ``error`` member is a
    human text, the code is derived from the status, e.g. ``not_found``), ``message`` (the human
    text), ``body`` (the decoded answer, or the raw text), ``retry_after`` (seconds the answer's
    ``Retry-After`` asked for, or None), ``method`` and ``path``.
    """

    status_codes: Dict[int, str] = {
        400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
        405: "method_not_allowed", 408: "request_timeout", 409: "conflict", 410: "gone",
        413: "payload_too_large", 422: "unprocessable", 429: "rate_limited",
        500: "internal_error", 501: "not_implemented", 502: "bad_gateway", 503: "unavailable",
        504: "gateway_timeout",
    }

    def __init__(self, status: int, code: str, message: str, body: Any = None, *,
                 retry_after: Optional[float] = None, method: str = "", path: str = "") -> None:
        where = f"{method} {path}: ".lstrip() if (method or path) else ""
        super().__init__(f"{where}{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        self.retry_after = retry_after
        self.method = method
        self.path = path

    @property
    def transient(self) -> bool:
        """Whether repeating the same request may succeed: 408, 429 and 5xx."""
        return self.status >= 500 or self.status in (408, 429)

    @classmethod
    def from_answer(cls, status: int, raw: bytes, *, retry_after: Optional[float] = None,
                    method: str = "", path: str = "") -> "APIError":
        """The error of an answer: its class by status, code and message from its JSON body."""
        body: Any
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, ValueError):
            body = raw.decode("utf-8", "replace")[:500]
        code = cls.status_codes.get(status, f"http_{status}")
        message = ""
        if isinstance(body, dict):
            err = body.get("error")
            if isinstance(body.get("message"), str):
                message = body["message"]
                if isinstance(err, str) and err:
                    code = err
            elif isinstance(err, str):
                message = err
            if isinstance(body.get("code"), str) and body["code"]:
                code = body["code"]
            if not message and isinstance(body.get("errors"), list):
                message = "; ".join(str(e.get("message", e)) if isinstance(e, dict) else str(e)
                                    for e in body["errors"])
        elif isinstance(body, str):
            message = body.strip()
        klass = _by_status.get(status) or (ServerError if status >= 500 else APIError)
        return klass(status, code, message or code, body, retry_after=retry_after, method=method, path=path)


class BadRequest(APIError):
    """400: the request is malformed or invalid; ``body`` may list every error."""


class Unauthorized(APIError):
    """401: a missing or wrong API key or token."""


class Forbidden(APIError):
    """403: the credential does not allow this."""


class NotFound(APIError):
    """404: no such job, task, pipeline, dataset or bundle."""


class Conflict(APIError):
    """409: the state does not allow it (an attempt no longer current, a finished job...)."""


class Gone(APIError):
    """410: the attempt expired; abort it."""


class PayloadTooLarge(APIError):
    """413: the body is over the server's limit."""


class Unprocessable(APIError):
    """422: e.g. an Idempotency-Key reused with another body."""


class RateLimited(APIError):
    """429: too many requests; ``retry_after`` says when to try again."""


class ServerError(APIError):
    """5xx: the server failed."""


class NotImplementedByServer(ServerError):
    """501: the server was built or configured without this feature (e.g. no Query Service, or
    object storage that is not S3 for credentials)."""


class Unavailable(ServerError):
    """503: the server's database is unavailable; ``retry_after`` says when to try again."""


_by_status: Dict[int, Type[APIError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone,
    413: PayloadTooLarge, 422: Unprocessable, 429: RateLimited, 501: NotImplementedByServer,
    503: Unavailable,
}


def transient(err: BaseException) -> bool:
    """Whether an error of a call is worth retrying: no answer, or a 408, 429 or 5xx answer."""
    if isinstance(err, APIError):
        return err.transient
    return isinstance(err, (TransportError, OSError))


class TaskError(Exception):
    """Raise it from a handler to fail the task with an error category.

    ``category`` is one of :data:`CATEGORIES` (default ``USER_CODE``); ``retryable`` overrides
    the category's default (None: the default of :data:`RETRYABLE_BY_DEFAULT`); ``code`` is an
    optional machine-readable code kept with the error.
    """

    def __init__(self, category: str = USER_CODE, message: str = "", retryable: Optional[bool] = None,
                 *, code: Optional[str] = None) -> None:
        if category not in CATEGORIES:
            raise ValueError(f"baton: unknown error category {category!r}; want one of {', '.join(CATEGORIES)}")
        super().__init__(message or category)
        self.category = category
        self.message = message or category
        self.retryable = retryable
        self.code = code

    @property
    def will_retry(self) -> bool:
        """Whether the server retries this failure (while attempts remain)."""
        return RETRYABLE_BY_DEFAULT[self.category] if self.retryable is None else self.retryable


class NonRetryable(TaskError):
    """A failure not to retry, whatever its category (USER_CODE by default)."""

    def __init__(self, message: str = "", category: str = USER_CODE, *, code: Optional[str] = None) -> None:
        super().__init__(category, message, retryable=False, code=code)


class RetryAfter(TaskError):
    """A retryable failure whose next attempt should not start before ``seconds`` from now.

    The server has no per-failure delay: the worker keeps the attempt (heartbeating) for
    ``seconds`` before it reports the failure, so the retry starts at least that late, plus the
    task's own backoff. A shutdown reports it at once.
    """

    def __init__(self, seconds: float, message: str = "", category: str = USER_CODE) -> None:
        if seconds < 0:
            raise ValueError("baton: RetryAfter needs a non-negative number of seconds")
        super().__init__(category, message or f"retry after {seconds:g}s", retryable=True)
        self.seconds = float(seconds)


class Aborted(BaseException):
    """Raised inside a handler the worker stopped for good: its lease was lost, its task
    cancelled, or the worker shut down, and the handler did not return within the grace.

    It derives from BaseException, so that ``except Exception`` in user code does not swallow
    it. The aborted handler's result is never reported.
    """
