#!/usr/bin/env python3
"""The Python SDK's conformance program (sdk/conformance/README.md), written only with the public
API of the `baton` package.

    PYTHONPATH=sdk/python python3 sdk/python/conformance/conformance.py worker
    PYTHONPATH=sdk/python python3 sdk/python/conformance/conformance.py producer JOB_JSON_FILE

Environment: BATON_URL, BATON_INTERNAL_URL, BATON_API_KEY, BATON_BLOB_URL, BATON_CONFORMANCE_QUEUE,
BATON_CONFORMANCE_DIR, BATON_WORKER_ID, and BATON_CONFORMANCE_ASYNC=1 for the asyncio worker.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from typing import Any, Callable, Dict, Union

import baton

Worker = Union[baton.Worker, baton.AsyncWorker]
Handler = Callable[[baton.Task], Dict[str, Any]]


def env(name: str) -> str:
    v = os.environ.get(name, "")
    if not v:
        sys.exit(f"conformance: set {name}")
    return v


def marker(kind: str, task: baton.Task) -> None:
    path = os.path.join(env("BATON_CONFORMANCE_DIR"), f"{kind}-{task.key}-{task.attempt}")
    with open(path, "w"):
        pass


def add(task: baton.Task) -> Dict[str, Any]:
    return {"sum": int(task.input["n"]) + sum(int(p["sum"]) for p in task.parents.values())}


def flaky(task: baton.Task) -> Dict[str, Any]:
    if task.attempt == 1:
        # TRANSIENT is no category of the contracts: it travels as the error's code, under the
        # category USER_CODE, retryable.
        raise baton.TaskError(baton.USER_CODE, "flaky attempt 1", retryable=True, code="TRANSIENT")
    return {"attempt": task.attempt}


def fatal(task: baton.Task) -> Dict[str, Any]:
    raise baton.TaskError(baton.DATA_QUALITY, "bad row", retryable=False)


def publish(task: baton.Task) -> Dict[str, Any]:
    assert task.pipeline is not None, "conf.publish runs as a pipeline job"
    out = next(o for o in task.pipeline.outputs if o.get("write_mode") == "buffered")
    rows = [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}, {"k": 3, "v": "c"}]
    task.publish_batch(out.get("dataset_name") or out["dataset_uuid"], rows)
    return {"published": len(rows)}


def read(task: baton.Task) -> Dict[str, Any]:
    assert task.pipeline is not None and task.pipeline.inputs, "conf.read reads its pipeline input"
    inp = task.pipeline.inputs[0]
    rows = list(task.rows(inp))
    name = inp.get("dataset_name") or inp["dataset_uuid"]
    res = task.query(f'SELECT count(*) AS n, sum(k) AS s FROM "{name}"')
    cols = [c["name"] for c in res["columns"]]
    row = dict(zip(cols, res["rows"][0]))
    return {"rows": len(rows), "n": int(row["n"]), "s": int(row["s"])}


def thread_worker(w: baton.Worker) -> None:
    def task(name: str) -> Callable[[Handler], Handler]:
        def deco(fn: Handler) -> Handler:
            w.register(name, _started(fn))
            return fn
        return deco
    for name, fn in (("conf.add", add), ("conf.flaky", flaky), ("conf.fatal", fatal), ("conf.publish", publish),
                     ("conf.read", read)):
        task(name)(fn)

    @task("conf.block")
    def block(task: baton.Task) -> Dict[str, Any]:
        s = task.input["seconds"]
        time.sleep(s)
        return {"blocked": s}

    @task("conf.cancel")
    def cancel(task: baton.Task) -> Dict[str, Any]:
        if task.cancelled.wait(30):
            marker("aborted", task)
            return {"cancelled": True}
        return {"cancelled": False}

    @task("conf.kill")
    def kill(task: baton.Task) -> Dict[str, Any]:
        if task.attempt == 1:
            time.sleep(60)
        return {"attempt": task.attempt}

    @task("conf.refused")
    def refused(task: baton.Task) -> Dict[str, Any]:
        if task.attempt == 1:
            task.cancelled.wait(30)
            marker("aborted", task)
            return {"attempt": task.attempt}
        return {"attempt": task.attempt}

    @task("conf.term")
    def term(task: baton.Task) -> Dict[str, Any]:
        time.sleep(1.5)
        return {"done": True}


def async_worker(w: baton.AsyncWorker) -> None:
    def wrap(fn: Any) -> Any:
        async def h(task: baton.Task) -> Any:
            marker("started", task)
            return fn(task)
        return h
    for name, fn in (("conf.add", add), ("conf.flaky", flaky), ("conf.fatal", fatal), ("conf.publish", publish),
                     ("conf.read", read)):
        w.register(name, wrap(fn))

    @w.task("conf.block")
    async def block(task: baton.Task) -> Dict[str, Any]:
        marker("started", task)
        s = task.input["seconds"]
        time.sleep(s)  # blocks the event loop on purpose: heartbeats run on their own thread
        return {"blocked": s}

    @w.task("conf.cancel")
    async def cancel(task: baton.Task) -> Dict[str, Any]:
        marker("started", task)
        try:
            await asyncio.wait_for(task.cancelled.wait_async(), 30)
        except asyncio.TimeoutError:
            return {"cancelled": False}
        marker("aborted", task)
        return {"cancelled": True}

    @w.task("conf.kill")
    async def kill(task: baton.Task) -> Dict[str, Any]:
        marker("started", task)
        if task.attempt == 1:
            await asyncio.sleep(60)
        return {"attempt": task.attempt}

    @w.task("conf.refused")
    async def refused(task: baton.Task) -> Dict[str, Any]:
        marker("started", task)
        if task.attempt == 1:
            try:
                await asyncio.wait_for(task.cancelled.wait_async(), 30)
            finally:
                marker("aborted", task)
        return {"attempt": task.attempt}

    @w.task("conf.term")
    async def term(task: baton.Task) -> Dict[str, Any]:
        marker("started", task)
        await asyncio.sleep(1.5)
        return {"done": True}


def worker() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    opts: Dict[str, Any] = dict(queues=[env("BATON_CONFORMANCE_QUEUE")], concurrency=4, heartbeat_interval=0.5,
                                shutdown_grace=10.0, worker_id=os.environ.get("BATON_WORKER_ID") or None,
                                blob_url=os.environ.get("BATON_BLOB_URL") or None)
    env("BATON_CONFORMANCE_DIR")
    w: Worker
    if os.environ.get("BATON_CONFORMANCE_ASYNC") == "1":
        aw = baton.AsyncWorker(env("BATON_INTERNAL_URL"), **opts)
        async_worker(aw)
        w = aw
    else:
        tw = baton.Worker(env("BATON_INTERNAL_URL"), **opts)
        thread_worker(tw)
        w = tw
    w.run()
    return 0


def _started(fn: Any) -> Any:
    def h(task: baton.Task) -> Any:
        marker("started", task)
        return fn(task)
    return h


def producer(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        job = json.load(f)
    with baton.Client(env("BATON_URL"), env("BATON_API_KEY")) as client:
        created = client.submit(job)
        final = client.wait(created["jobId"], timeout=300)
    print(json.dumps(final, sort_keys=True))
    return 0 if final.get("status") == "completed" else 1


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "worker":
        return worker()
    if len(sys.argv) == 3 and sys.argv[1] == "producer":
        return producer(sys.argv[2])
    sys.exit("usage: conformance.py worker | producer JOB_JSON_FILE")


if __name__ == "__main__":
    sys.exit(main())
