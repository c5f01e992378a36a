"""What one task attempt can do with its capability token, in either dialect: the internal one
(a Worker's Task, on the internal listener) and the task-scoped one (TaskScope, on the public
listener, for untrusted code). Both publish buffered batches, read their datasets' rows, query
them, mint object storage credentials and report dataset events."""
from __future__ import annotations

import datetime
import json
import os
import threading
import time
import urllib.parse
from typing import Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Union, cast

from . import _wire as wire
from ._blob import put_file, put_s3
from ._http import Transport, retrying
from .errors import APIError, NotImplementedByServer, TaskError, CONFIGURATION

__all__ = ["PublishedBatch", "TaskOperations", "Routes", "INTERNAL_ROUTES", "SCOPED_ROUTES", "CAPABILITY_HEADER"]

CAPABILITY_HEADER = "X-Trace-Task-Capability"


class Routes(NamedTuple):
    """The paths of an attempt's own calls in one dialect."""
    heartbeat: str
    complete: str
    events: str
    publish: str
    credentials: str
    rows: str  # prefix: {dataset}/rows follows
    query: str
    secrets: Optional[str]


INTERNAL_ROUTES = Routes("/internal/heartbeat", "/internal/task-complete", "/internal/events", "/internal/buffer-publish",
                         "/internal/task-credentials", "/internal/task-datasets/", "/internal/task-query", "/internal/task-secrets")
SCOPED_ROUTES = Routes("/v1/task/heartbeat", "/v1/task/complete", "/v1/task/events", "/v1/task/buffer-publish",
                       "/v1/task/credentials", "/v1/task/datasets/", "/v1/task/query", None)


class PublishedBatch(NamedTuple):
    """A batch publish_batch wrote: where (``uri``; None when it was left in BATON_BUFFER_DIR
    for the wrapper to publish), how many rows, and whether the server had it already."""
    uri: Optional[str]
    rows: int
    duplicate: bool


def _parse_time(s: Any) -> Optional[float]:
    if not isinstance(s, str) or not s:
        return None
    try:
        return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class TaskOperations:
    """The calls about one attempt that its capability token allows (see the subclasses
    :class:`baton.Task` and :class:`baton.TaskScope`)."""

    #: The task's global id (a UUID), attempt number and lease token: the fence of every call.
    task_id: str
    attempt: int
    lease_token: str

    def __init__(self, transport: Transport, routes: Routes, *, task_id: str, attempt: int, lease_token: str,
                 token: str, token_expires_at: Optional[str] = None, outputs: Optional[List[wire.PipelineTaskOutput]] = None,
                 blob_url: Optional[str] = None, buffer_dir: Optional[str] = None) -> None:
        self._t = transport
        self._routes = routes
        self.task_id = task_id
        self.attempt = attempt
        self.lease_token = lease_token
        self._token = token
        self._token_exp = token_expires_at
        self._outputs: List[wire.PipelineTaskOutput] = list(outputs or [])
        self._blob_url = blob_url
        self._buffer_dir = buffer_dir
        self._mu = threading.Lock()
        self._batches = 0
        self._creds: Optional[wire.TaskCredentials] = None
        self._creds_at = 0.0

    # --- the token ------------------------------------------------------------------------

    @property
    def capability_token(self) -> str:
        """The attempt's newest capability token (heartbeat answers renew it)."""
        with self._mu:
            return self._token

    def _renew(self, answer: Mapping[str, Any]) -> None:
        tok = answer.get("capability_token")
        if isinstance(tok, str) and tok:
            with self._mu:
                self._token = tok
                self._token_exp = answer.get("capability_token_expires_at")

    def _fence(self) -> Dict[str, Any]:
        return {"task_id": self.task_id, "attempt": self.attempt, "lease_token": self.lease_token}

    def _post(self, path: str, body: Mapping[str, Any], *, timeout: float = 30.0, attempts: int = 5) -> Any:
        def once() -> Any:
            return self._t.call("POST", path, body, headers={CAPABILITY_HEADER: self.capability_token}, timeout=timeout)
        return retrying(once, attempts=attempts)

    def _get(self, path: str, *, timeout: float = 30.0) -> Any:
        def once() -> Any:
            return self._t.call("GET", path, headers={CAPABILITY_HEADER: self.capability_token}, timeout=timeout)
        return retrying(once, attempts=5)

    # --- datasets -------------------------------------------------------------------------

    def _buffered_output(self, dataset: str) -> Optional[wire.PipelineTaskOutput]:
        for o in self._outputs:
            if o.get("write_mode") == "buffered" and dataset in (o.get("dataset_name"), o.get("dataset_uuid")):
                return o
        return None

    def publish_batch(self, dataset: str, rows: Iterable[Mapping[str, Any]]) -> PublishedBatch:
        """Adds rows (JSON objects) to the buffered dataset ``dataset`` (its name or uuid), one of
        the task's job's buffered outputs: writes them as one JSONL batch under the attempt's own
        prefix of the object storage, then publishes the batch (buffer-publish). A retried attempt
        may publish the same rows again; the dataset's unique key keeps each row once."""
        lines = []
        for i, r in enumerate(rows):
            if not isinstance(r, Mapping):
                raise TypeError(f"baton: publish_batch: row {i + 1} is a {type(r).__name__}, not a JSON object")
            lines.append(json.dumps(r, separators=(",", ":"), allow_nan=False))
        return self.publish_jsonl(dataset, ("\n".join(lines) + "\n").encode("utf-8") if lines else b"")

    def publish_jsonl(self, dataset: str, jsonl: bytes) -> PublishedBatch:
        """publish_batch for rows already encoded as JSONL (one JSON object a line)."""
        if not dataset:
            raise ValueError("baton: publish_batch: the dataset name is required")
        if jsonl and not jsonl.endswith(b"\n"):
            jsonl += b"\n"
        count = jsonl.count(b"\n")
        out = self._buffered_output(dataset)
        if out is None and self._outputs:
            names = ", ".join(repr(o.get("dataset_name") or o.get("dataset_uuid")) for o in self._outputs
                              if o.get("write_mode") == "buffered") or "no buffered dataset"
            raise TaskError(CONFIGURATION, f"baton: publish_batch: dataset {dataset!r} is not a buffered output of this "
                                           f"task's job (its outputs: {names})", retryable=False)
        segment = out["dataset_uuid"] if out is not None else dataset
        with self._mu:
            self._batches += 1
            name = f"batch-{self._batches:04d}.jsonl"
        key = f"buffers/{segment}/{self.task_id}/{self.attempt}/{name}"
        uri = self._write(dataset, segment, key, name, jsonl)
        if uri is None:
            return PublishedBatch(None, count, False)
        body = {**self._fence(), "batch_uri": uri, "record_count": count, "content_type": "application/jsonl",
                "batch_size_bytes": len(jsonl)}
        if out is not None or _looks_like_uuid(segment):
            body["dataset_uuid"] = segment
        try:
            ans = self._post(self._routes.publish, body)
        except APIError as e:
            if e.code in ("dataset_version_not_current", "pipeline_version_rolled_back"):
                raise TaskError(CONFIGURATION, str(e), retryable=False) from e
            raise
        return PublishedBatch(uri, count, bool(ans.get("duplicate")))

    def _write(self, dataset: str, segment: str, key: str, name: str, data: bytes) -> Optional[str]:
        blob = self._blob_url
        if blob and blob.startswith("file://"):
            return put_file(blob, key, data)
        try:
            creds = self.credentials()
        except NotImplementedByServer:
            if self._buffer_dir:
                # No S3: leave the rows to the wrapper, which publishes NAME.jsonl once the child
                # succeeded.
                path = os.path.join(self._buffer_dir, f"{dataset}.jsonl")
                with open(path, "ab") as f:
                    f.write(data)
                return None
            raise TaskError(CONFIGURATION, "baton: publish_batch: the server's object storage is not S3 and no "
                                           "file:// blob URL is known (set BATON_BLOB_URL)", retryable=False) from None
        suffix = f"/{segment}/{self.task_id}/{self.attempt}/"
        prefix = next((p for p in creds.get("write_prefixes", []) if p.endswith(suffix) and "/buffers/" in p), "")
        if not prefix:
            raise TaskError(CONFIGURATION, f"baton: publish_batch: {dataset!r} is not a buffered dataset this task "
                                           "writes: its credentials cannot write its batches", retryable=False)
        return put_s3(prefix + name, data, access_key=creds["access_key_id"], secret_key=creds["secret_access_key"],
                      session_token=creds.get("session_token"), region=creds.get("region", ""),
                      endpoint_url=creds.get("endpoint_url"))

    def row_pages(self, dataset: Union[str, Mapping[str, Any]], *, where: Optional[Mapping[str, Any]] = None,
                  cursor: Optional[int] = None, page_size: Optional[int] = None) -> Iterator[wire.DatasetRowPage]:
        """Pages of the rows of a buffered dataset the task reads or writes (see rows)."""
        if isinstance(dataset, Mapping):
            ds = dataset.get("dataset_uuid") or dataset.get("dataset_name")
            if not ds:
                raise ValueError("baton: rows: the input names no dataset_uuid")
        else:
            ds = dataset
        if not ds:
            raise ValueError("baton: rows: the dataset is required")
        q: Dict[str, str] = {}
        if where is not None:
            q["where"] = json.dumps(where, separators=(",", ":"))
        if cursor is not None:
            q["cursor"] = str(cursor)
        if page_size is not None:
            q["limit"] = str(page_size)
        while True:
            path = self._routes.rows + urllib.parse.quote(str(ds), safe="") + "/rows"
            if q:
                path += "?" + urllib.parse.urlencode(q)
            page = cast(wire.DatasetRowPage, self._get(path))
            yield page
            nxt = page.get("next_after")
            if nxt is None:
                return
            q["after"] = str(nxt)

    def rows(self, dataset: Union[str, Mapping[str, Any]], *, where: Optional[Mapping[str, Any]] = None,
             cursor: Optional[int] = None, page_size: Optional[int] = None) -> Iterator[wire.DatasetRow]:
        """The rows of a buffered dataset the task's job reads or writes (a name, a uuid, or one
        of the task's pipeline inputs), oldest first, page by page. By default an input that
        started the task reads the rows of the event's batch; ``where`` narrows (never widens)
        the input's filter; ``cursor`` reads one batch (0: every batch)."""
        for page in self.row_pages(dataset, where=where, cursor=cursor, page_size=page_size):
            yield from page["rows"]

    def query(self, sql: str, *, limit: Optional[int] = None, timeout: float = 120.0) -> wire.QueryResult:
        """Runs read-only SQL over the datasets the task may read (the task's query endpoint)."""
        if not sql or not sql.strip():
            raise ValueError("baton: query needs an SQL statement")
        body: Dict[str, Any] = {**self._fence(), "sql": sql}
        if limit is not None:
            body["limit"] = limit
        return cast(wire.QueryResult, self._post(self._routes.query, body, timeout=timeout))

    def credentials(self) -> wire.TaskCredentials:
        """The attempt's short-lived object storage credentials (S3 only; a file store answers
        501, raised as :class:`baton.NotImplementedByServer`), minted anew once the last have a
        third of their life left."""
        with self._mu:
            c, at = self._creds, self._creds_at
        if c is not None:
            exp = _parse_time(c.get("expiration"))
            if exp is not None and exp - time.time() > (exp - at) / 3:
                return c
        at = time.time()
        c = cast(wire.TaskCredentials, self._post(self._routes.credentials, self._fence()))
        with self._mu:
            self._creds, self._creds_at = c, at
        return c

    def report_events(self, events: List[Mapping[str, Any]]) -> wire.EventsAnswer:
        """Reports dataset events (``{dataset_uuid, dataset_version, cursor}`` or partition
        events) of the task's tenant."""
        if not events:
            raise ValueError("baton: report_events needs at least one event")
        return cast(wire.EventsAnswer, self._post(self._routes.events, {**self._fence(), "events": list(events)}))


def _looks_like_uuid(s: str) -> bool:
    parts = s.split("-")
    return len(parts) == 5 and [len(p) for p in parts] == [8, 4, 4, 4, 12]
