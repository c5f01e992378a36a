"""The producer client: jobs, pipelines, datasets, queries and bundles on the public listener."""
from __future__ import annotations

import io
import json
import os
import zipfile
import ssl
import time
import urllib.parse
import uuid
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence,
                    TypeVar, Union, cast)

from . import _wire as wire
from ._http import Backoff, Transport, iter_sse, make_ssl_context, retrying
from .errors import APIError, BatonError, TransportError, transient

__all__ = ["Client", "JobEvent", "build_bundle"]

T = TypeVar("T")
_q = urllib.parse.quote


def _path(*parts: str) -> str:
    return "/" + "/".join(_q(p, safe="") for p in parts)


def _query(**params: Any) -> str:
    items = {k: (json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else
                 ("true" if v is True else "false" if v is False else str(v)))
             for k, v in params.items() if v is not None}
    return ("?" + urllib.parse.urlencode(items)) if items else ""


class JobEvent(dict):  # type: ignore[type-arg]
    """One event of a job's stream: the producer API's event object (``id``, ``type``,
    ``taskId``, ``at``, ``data``), as a dict."""


class Client:
    """A client of a Baton server's public listener, authenticated with an API key.

    ``url`` is the public listener (e.g. ``http://127.0.0.1:8080``; default ``$BATON_URL``),
    ``api_key`` the producer key (default ``$BATON_API_KEY``). Idempotent calls (every GET, and
    the POSTs that carry an Idempotency-Key or are idempotent on the server) are retried on no
    answer, 408, 429 and 5xx with jittered backoff honouring ``Retry-After``, up to ``retries``
    attempts in all; other errors raise :class:`baton.APIError` subclasses at once.
    ``ca_file``/``cert_file``/``key_file`` or ``ssl_context`` configure TLS.

    A Client is safe to share between threads (each thread keeps its own connection).
    """

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None, *, timeout: float = 30.0,
                 retries: int = 5, ca_file: Optional[str] = None, cert_file: Optional[str] = None,
                 key_file: Optional[str] = None, ssl_context: Optional[ssl.SSLContext] = None) -> None:
        url = url or os.environ.get("BATON_URL") or ""
        api_key = api_key if api_key is not None else os.environ.get("BATON_API_KEY", "")
        if not url:
            raise ValueError("baton: Client needs the server's URL (or set BATON_URL)")
        if not api_key:
            raise ValueError("baton: Client needs an API key (or set BATON_API_KEY)")
        if retries < 1:
            raise ValueError("baton: retries must be at least 1")
        self.url = url.rstrip("/")
        self.retries = retries
        self._t = Transport(url, headers={"x-api-key": api_key}, timeout=timeout,
                            ssl_context=make_ssl_context(ca_file, cert_file, key_file, ssl_context))

    def close(self) -> None:
        """Closes the client's connections."""
        self._t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing -------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None, *, idempotent: bool, headers: Optional[Mapping[str, str]] = None,
              raw: Optional[bytes] = None, content_type: str = "application/json", timeout: Optional[float] = None) -> Any:
        def once() -> Any:
            return self._t.call(method, path, body, headers=headers, raw=raw, content_type=content_type, timeout=timeout)
        return retrying(once, attempts=self.retries if idempotent else 1)

    # --- jobs -----------------------------------------------------------------------------

    def submit(self, job: Mapping[str, Any], *, idempotency_key: Optional[str] = None,
               traceparent: Optional[str] = None) -> wire.JobCreated:
        """Submits a job (``{"name": ..., "tasks": [...]}``, a ``CreateJobRequest``) and returns its
        creation answer.

        Every submission carries an ``Idempotency-Key`` (a fresh UUID unless given), so a retry
        after a lost answer returns the same job instead of creating a second one.
        """
        if not isinstance(job, Mapping) or not job.get("tasks"):
            raise ValueError("baton: submit needs a job document with a non-empty \"tasks\" list")
        raw = json.dumps(job, separators=(",", ":")).encode("utf-8")
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        if traceparent:
            headers["traceparent"] = traceparent
        return cast(wire.JobCreated, self._call("POST", "/jobs", raw=raw, headers=headers, idempotent=True))

    def get_job(self, job_id: str) -> wire.JobDetail:
        """The job's view: status, progress and every task with its output or error."""
        return cast(wire.JobDetail, self._call("GET", _path("jobs", job_id), idempotent=True))

    def get_task(self, job_id: str, task_id: str) -> wire.TaskDetail:
        """One task of a job (by its taskId or global id), with its attempts."""
        return cast(wire.TaskDetail, self._call("GET", _path("jobs", job_id, "tasks", task_id), idempotent=True))

    def list_job_pages(self, *, status: Optional[str] = None, limit: Optional[int] = None,
                       cursor: Optional[str] = None) -> Iterator[wire.JobList]:
        """The tenant's jobs, newest first, a page (``{"jobs", "nextCursor"}``) at a time."""
        while True:
            page = cast(wire.JobList, self._call("GET", "/jobs" + _query(status=status, limit=limit, cursor=cursor), idempotent=True))
            yield page
            cursor = page.get("nextCursor")
            if not cursor:
                return

    def list_jobs(self, *, status: Optional[str] = None, page_size: Optional[int] = None) -> Iterator[wire.JobListItem]:
        """Every job of the tenant, newest first (fetching pages as it goes)."""
        for page in self.list_job_pages(status=status, limit=page_size):
            yield from page["jobs"]

    def job_events(self, job_id: str, *, after: int = 0, limit: Optional[int] = None) -> Iterator[wire.Event]:
        """Every event of the job so far, oldest first, read page by page."""
        while True:
            page = cast(wire.EventPage, self._call("GET", _path("jobs", job_id, "events") + _query(after=after, limit=limit), idempotent=True))
            yield from page["events"]
            if not page["events"]:
                return
            after = page["nextAfter"]

    def watch(self, job_id: str, *, last_event_id: Optional[Union[int, str]] = None,
              timeout: Optional[float] = None, read_timeout: float = 60.0) -> Iterator[JobEvent]:
        """Follows the job over Server-Sent Events: yields each event (``id``, ``type``,
        ``taskId``, ``at``, ``data``) as it happens, and finally the stream's end as an event of
        type ``"end"`` whose ``data`` is ``{"jobId", "status"}``; then the iteration stops.

        A dropped stream (network error, server restart, no byte within ``read_timeout``; the
        server sends a keep-alive every 15 s) is resumed with ``Last-Event-ID``, so no event is
        lost or repeated. ``timeout`` bounds the whole watch (TimeoutError past it).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        last = None if last_event_id is None else str(last_event_id)
        b = Backoff(0.2, 5.0)
        path = _path("jobs", job_id, "events")
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"baton: watching job {job_id}: no end within {timeout}s")
            headers = {"Accept": "text/event-stream"}
            if last is not None:
                headers["Last-Event-ID"] = last
            conn = None
            try:
                rt = read_timeout if deadline is None else max(0.1, min(read_timeout, deadline - time.monotonic()))
                conn, res = self._t.stream(path, headers, timeout=rt)
                for ev in iter_sse(res):
                    name = ev.get("event", "message")
                    try:
                        data = json.loads(ev["data"]) if ev.get("data") else None
                    except ValueError:
                        data = ev.get("data")
                    if name == "end":
                        yield JobEvent(type="end", id=None, taskId=None, data=data)
                        return
                    if "id" in ev:
                        last = ev["id"]
                    b.reset()
                    if isinstance(data, dict):
                        yield JobEvent(data)
                    else:
                        yield JobEvent(type=name, id=ev.get("id"), data=data)
            except APIError as e:
                if not e.transient:
                    raise
                err: Optional[BaseException] = e
            except (TransportError, OSError) as e:
                err = e
            else:
                err = None  # the server ended the stream without `end` (shutting down)
            finally:
                if conn is not None:
                    conn.close()
            d = b.after(err)
            if deadline is not None:
                d = min(d, max(0.0, deadline - time.monotonic()))
            time.sleep(d)

    def wait(self, job_id: str, *, timeout: Optional[float] = None) -> wire.JobDetail:
        """Watches the job to its end, then returns its final view."""
        for _ in self.watch(job_id, timeout=timeout):
            pass
        return self.get_job(job_id)

    def cancel(self, job_id: str) -> wire.JobSummary:
        """Cancels the job: waiting and pending tasks at once, running ones cooperatively."""
        return cast(wire.JobSummary, self._call("POST", _path("jobs", job_id, "cancel"), {}, idempotent=True))

    def resume(self, job_id: str) -> wire.JobResumed:
        """Resumes a failed or canceled job: its failed, canceled and skipped tasks run again."""
        return cast(wire.JobResumed, self._call("POST", _path("jobs", job_id, "resume"), {}, idempotent=True))

    def add_tasks(self, job_id: str, tasks: Sequence[Mapping[str, Any]]) -> wire.TasksAdded:
        """Adds tasks (``TaskSpec`` mappings) to a running job; they may depend on its tasks and
        on each other."""
        if not tasks:
            raise ValueError("baton: add_tasks needs at least one task")
        return cast(wire.TasksAdded, self._call("POST", _path("jobs", job_id, "tasks"), {"tasks": list(tasks)}, idempotent=False))

    # --- pipelines ------------------------------------------------------------------------

    def deploy_pipeline(self, document: Union[str, bytes, Mapping[str, Any]], *, activate: Optional[bool] = None) -> wire.PipelineDeployed:
        """Deploys a pipeline document: YAML text (str/bytes) or a JSON-able mapping."""
        if isinstance(document, Mapping):
            raw, ctype = json.dumps(document).encode("utf-8"), "application/json"
        elif isinstance(document, (str, bytes)):
            raw = document.encode("utf-8") if isinstance(document, str) else document
            ctype = "application/yaml"
        else:
            raise TypeError("baton: deploy_pipeline needs YAML text or a mapping")
        return cast(wire.PipelineDeployed, self._call("POST", "/pipelines" + _query(activate=activate), raw=raw,
                                                      content_type=ctype, idempotent=True))

    def list_pipelines(self) -> wire.PipelineList:
        """The tenant's pipelines."""
        return cast(wire.PipelineList, self._call("GET", "/pipelines", idempotent=True))

    def get_pipeline(self, name: str) -> wire.Pipeline:
        """A pipeline with its active version, jobs and datasets."""
        return cast(wire.Pipeline, self._call("GET", _path("pipelines", name), idempotent=True))

    def pipeline_versions(self, name: str) -> wire.PipelineVersionList:
        """The pipeline's versions."""
        return cast(wire.PipelineVersionList, self._call("GET", _path("pipelines", name, "versions"), idempotent=True))

    def get_pipeline_version(self, name: str, version: str) -> wire.PipelineVersionDocument:
        """One version's document."""
        return cast(wire.PipelineVersionDocument, self._call("GET", _path("pipelines", name, "versions", version), idempotent=True))

    def activate_pipeline_version(self, name: str, version: str, *, force: bool = False) -> wire.PipelineVersionActivated:
        """Activates a built (or, with force, a building) version."""
        body: Dict[str, Any] = {"force": True} if force else {}
        return cast(wire.PipelineVersionActivated,
                    self._call("POST", _path("pipelines", name, "versions", version, "activate"), body, idempotent=True))

    def rollback_pipeline(self, name: str, version: Optional[str] = None) -> wire.Rollback:
        """Makes ``version`` (default: the one deployed before the active one) active again."""
        body: Dict[str, Any] = {"version": version} if version else {}
        return cast(wire.Rollback, self._call("POST", _path("pipelines", name, "rollback"), body, idempotent=False))

    def run_pipeline_job(self, name: str, job: str, body: Optional[Mapping[str, Any]] = None, *,
                         idempotency_key: Optional[str] = None) -> wire.SourceRun:
        """Runs a manual source job of the pipeline once."""
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        return cast(wire.SourceRun, self._call("POST", _path("pipelines", name, "jobs", job, "run"), dict(body or {}),
                                               headers=headers, idempotent=True))

    # --- datasets -------------------------------------------------------------------------

    def list_datasets(self) -> wire.DatasetList:
        """The tenant's datasets."""
        return cast(wire.DatasetList, self._call("GET", "/datasets", idempotent=True))

    def get_dataset(self, name: str) -> wire.Dataset:
        """A dataset with its versions and recent events."""
        return cast(wire.Dataset, self._call("GET", _path("datasets", name), idempotent=True))

    def dataset_row_pages(self, name: str, *, where: Optional[Mapping[str, Any]] = None, cursor: Optional[int] = None,
                          limit: Optional[int] = None) -> Iterator[wire.DatasetRowPage]:
        """The rows of a buffered dataset, a page at a time (following ``next_after``)."""
        after: Optional[int] = None
        while True:
            q = _query(where=dict(where) if where is not None else None, cursor=cursor, after=after, limit=limit)
            page = cast(wire.DatasetRowPage, self._call("GET", _path("datasets", name, "rows") + q, idempotent=True))
            yield page
            after = page.get("next_after")
            if after is None:
                return

    def dataset_rows(self, name: str, *, where: Optional[Mapping[str, Any]] = None, cursor: Optional[int] = None,
                     page_size: Optional[int] = None) -> Iterator[wire.DatasetRow]:
        """Every row of a buffered dataset, oldest first."""
        for page in self.dataset_row_pages(name, where=where, cursor=cursor, limit=page_size):
            yield from page["rows"]

    def set_dataset_current_version(self, name: str, dataset_version: str) -> wire.Dataset:
        """Cuts the dataset over to one of its registered versions."""
        if not dataset_version:
            raise ValueError("baton: set_dataset_current_version needs a dataset version")
        return cast(wire.Dataset, self._call("POST", _path("datasets", name, "current"),
                                             {"dataset_version": dataset_version}, idempotent=True))

    cutover = set_dataset_current_version

    # --- query ----------------------------------------------------------------------------

    def query(self, sql: str, *, limit: Optional[int] = None, timeout: Optional[float] = 120.0) -> wire.QueryResult:
        """Runs one read-only SQL statement over the tenant's datasets (``POST /v1/query``)."""
        if not sql or not sql.strip():
            raise ValueError("baton: query needs an SQL statement")
        body: Dict[str, Any] = {"sql": sql}
        if limit is not None:
            body["limit"] = limit
        return cast(wire.QueryResult, self._call("POST", "/v1/query", body, idempotent=True, timeout=timeout))

    # --- bundles --------------------------------------------------------------------------

    def upload_bundle(self, bundle: Union[bytes, str, "os.PathLike[str]"]) -> wire.Bundle:
        """Uploads a user-code bundle: the zip's bytes, or the path of a .zip file."""
        if isinstance(bundle, (bytes, bytearray)):
            raw = bytes(bundle)
        else:
            with open(bundle, "rb") as f:
                raw = f.read()
        if not raw.startswith(b"PK"):
            raise ValueError("baton: upload_bundle needs a zip archive")
        return cast(wire.Bundle, self._call("POST", "/v1/udf/bundles", raw=raw, content_type="application/zip", idempotent=False))

    def list_bundles(self, *, page_size: Optional[int] = None) -> Iterator[wire.Bundle]:
        """The tenant's bundles, newest first."""
        cursor: Optional[str] = None
        while True:
            page = cast(wire.BundleList, self._call("GET", "/v1/udf/bundles" + _query(limit=page_size, cursor=cursor), idempotent=True))
            yield from page["bundles"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def get_bundle(self, bundle_id: str) -> wire.Bundle:
        """One bundle, with its manifest."""
        return cast(wire.Bundle, self._call("GET", _path("v1", "udf", "bundles", bundle_id), idempotent=True))

    def disable_bundle(self, bundle_id: str) -> wire.Bundle:
        """Disables a bundle: no new attempt downloads it."""
        return cast(wire.Bundle, self._call("POST", _path("v1", "udf", "bundles", bundle_id, "disable"), {}, idempotent=True))


def build_bundle(source: Union[str, "os.PathLike[str]", Mapping[str, bytes]], *, entrypoint: Optional[str] = None,
                 runtime: Optional[str] = None, env_allowlist: Optional[Sequence[str]] = None) -> bytes:
    """A user-code bundle (a zip with its ``bundle_manifest.json``) of a folder or of a mapping
    path → bytes, as ``baton udf build`` makes it: every regular file (``.git`` and
    ``__pycache__`` left out), the runtime guessed from the entrypoint, the entrypoint from the
    usual names (``main.py``, ``index.js``, ``index.mjs``, ``handler.py``, ``bootstrap``). Vendor
    this SDK into the folder with ``pip install --target DIR ./sdk/python``."""
    import hashlib
    files: Dict[str, bytes] = {}
    if isinstance(source, Mapping):
        files = {str(k): bytes(v) for k, v in source.items()}
    else:
        root = os.fspath(source)
        if not os.path.isdir(root):
            raise ValueError(f"baton: build_bundle: {root!r} is not a folder")
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__"))
            for fn in sorted(filenames):
                full = os.path.join(dirpath, fn)
                if os.path.islink(full) or not os.path.isfile(full):
                    raise ValueError(f"baton: build_bundle: {full!r} is not a regular file")
                with open(full, "rb") as f:
                    files[os.path.relpath(full, root).replace(os.sep, "/")] = f.read()
    files.pop("bundle_manifest.json", None)
    if not files:
        raise ValueError("baton: build_bundle: no files")
    if entrypoint is None:
        entrypoint = next((e for e in ("main.py", "index.js", "index.mjs", "handler.py", "bootstrap") if e in files), None)
        if entrypoint is None:
            raise ValueError("baton: build_bundle: no entrypoint given and none of the usual names found")
    if runtime is None:
        mod = entrypoint.split(".")[0].replace(".", "/")
        runtime = ("python" if entrypoint.endswith(".py") or f"{mod}.py" in files else
                   "node" if entrypoint.endswith((".js", ".mjs", ".cjs")) else "binary")
    manifest: Dict[str, Any] = {"schema_version": 1, "runtime": runtime, "entrypoint": entrypoint,
                                "files": [{"path": p, "sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)}
                                          for p, d in sorted(files.items())]}
    if env_allowlist:
        manifest["env_allowlist"] = list(env_allowlist)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("bundle_manifest.json", (2020, 1, 1, 0, 0, 0)), json.dumps(manifest, indent=2))
        for p, d in sorted(files.items()):
            info = zipfile.ZipInfo(p, (2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, d)
    return buf.getvalue()
