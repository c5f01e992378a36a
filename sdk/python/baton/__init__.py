"""Baton's Python SDK: a producer client, workers (threads and asyncio), the task-scoped
client of untrusted code, push targets and a local test runner. Standard library only.

    import baton

    client = baton.Client("http://127.0.0.1:8080", api_key="...")
    job = client.submit({"tasks": [{"taskId": "a", "name": "add", "input": {"n": 1}}]})
    print(client.wait(job["jobId"])["status"])

    worker = baton.Worker("http://127.0.0.1:8081", concurrency=4)

    @worker.task("add")
    def add(task: baton.Task) -> dict:
        return {"sum": task.input["n"] + sum(p["sum"] for p in task.parents.values())}

    worker.run()
"""
from __future__ import annotations

from . import push
from ._ops import PublishedBatch
from .client import Client, JobEvent, build_bundle
from .errors import (CANCELLED, CATEGORIES, CONFIGURATION, DATA_QUALITY, INFRASTRUCTURE, RETRYABLE_BY_DEFAULT, TIMEOUT,
                     USER_CODE, APIError, Aborted, BadRequest, BatonError, Conflict, Forbidden, Gone, NonRetryable,
                     NotFound, NotImplementedByServer, PayloadTooLarge, RateLimited, RetryAfter, ServerError, TaskError,
                     TransportError, Unauthorized, Unavailable, Unprocessable)
from .scoped import TaskScope, token_claims
from .testing import LocalTask, run_local
from .task import CancelEvent, PipelineInfo, Task
from .worker import AsyncWorker, Worker

__version__ = "0.1.0"

__all__ = [
    "Client", "JobEvent", "build_bundle", "Worker", "AsyncWorker", "Task", "PipelineInfo", "CancelEvent", "TaskScope", "token_claims",
    "PublishedBatch", "run_local", "LocalTask", "push",
    "BatonError", "APIError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "Conflict", "Gone",
    "PayloadTooLarge", "Unprocessable", "RateLimited", "ServerError", "NotImplementedByServer", "Unavailable",
    "TransportError", "TaskError", "NonRetryable", "RetryAfter", "Aborted",
    "CATEGORIES", "RETRYABLE_BY_DEFAULT", "USER_CODE", "DATA_QUALITY", "INFRASTRUCTURE", "CONFIGURATION", "TIMEOUT",
    "CANCELLED", "task_scoped", "__version__",
]


def task_scoped() -> TaskScope:
    """The task-scoped client of this process's attempt, from its environment (see
    :meth:`TaskScope.from_env`)."""
    return TaskScope.from_env()
