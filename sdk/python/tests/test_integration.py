"""Integration tests against a real Baton server, named by the environment:

    BATON_URL           the public listener       BATON_INTERNAL_URL  the internal listener
    BATON_API_KEY       a producer API key        BATON_BLOB_URL      the object storage (file://...)

Each test skips, saying which variable is unset, when one is missing. Every test uses queues,
task names, pipelines and datasets of its own (a uuid in their names), so that several runs can
share one server.
"""
from __future__ import annotations

import io
import json
import os
import threading
import time
import unittest
import uuid
import zipfile
from typing import Any, Callable, Dict, List, Optional, cast

import baton

VARS = ("BATON_URL", "BATON_INTERNAL_URL", "BATON_API_KEY", "BATON_BLOB_URL")


def need(*names: str) -> None:
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        raise unittest.SkipTest(f"integration test: {', '.join(missing)} not set (needs a running Baton server)")


def uid() -> str:
    return uuid.uuid4().hex[:10]


class Running:
    """A worker running on a thread for the length of a test."""

    def __init__(self, w: baton.worker._BaseWorker) -> None:
        self.w = w
        self.error: Optional[BaseException] = None
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.w.run()
        except BaseException as e:  # noqa: BLE001
            self.error = e

    def __enter__(self) -> baton.worker._BaseWorker:
        self.t.start()
        return self.w

    def __exit__(self, *exc: object) -> None:
        self.w.stop()
        self.t.join(60)


class IntegrationTest(unittest.TestCase):
    client: baton.Client

    @classmethod
    def setUpClass(cls) -> None:
        need(*VARS)
        cls.client = baton.Client(os.environ["BATON_URL"], os.environ["BATON_API_KEY"])

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.close()

    def worker(self, cls: Any = baton.Worker, **kw: Any) -> Any:
        kw.setdefault("poll_wait", 2.0)
        kw.setdefault("heartbeat_interval", 0.5)
        kw.setdefault("shutdown_grace", 5.0)
        return cls(os.environ["BATON_INTERNAL_URL"], blob_url=os.environ["BATON_BLOB_URL"], **kw)

    def task_of(self, job: Any, key: str) -> Dict[str, Any]:
        return next(t for t in job["tasks"] if t["taskId"] == key)

    def wait_for(self, cond: Callable[[], bool], timeout: float = 90.0) -> None:
        end = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > end:
                self.fail("condition not met in time")
            time.sleep(0.05)

    # --- producer and thread worker -------------------------------------------------------

    def test_dag_outputs_watch_list_and_idempotency(self) -> None:
        q = "py-dag-" + uid()
        w = self.worker(queues=[q], concurrency=3)

        @w.task(q)
        def add(task: baton.Task) -> Dict[str, Any]:
            return {"sum": task.input["n"] + sum(p["sum"] for p in task.parents.values()), "key": task.key,
                    "job": task.job_id, "queue": task.queue}
        job = {"name": q, "tasks": [{"taskId": "a", "name": q, "input": {"n": 1}},
                                    {"taskId": "b", "name": q, "input": {"n": 10}, "dependsOn": ["a"]},
                                    {"taskId": "c", "name": q, "input": {"n": 100}, "dependsOn": ["a", "b"]}]}
        key = "py-" + uid()
        created = self.client.submit(job, idempotency_key=key)
        again = self.client.submit(job, idempotency_key=key)
        self.assertEqual(created["jobId"], again["jobId"])
        with Running(w):
            events = list(self.client.watch(created["jobId"], timeout=90))
        self.assertEqual(events[-1]["type"], "end")
        self.assertEqual(events[-1]["data"]["status"], "completed")
        self.assertIn("Task Completed", [e["type"] for e in events])
        final = self.client.get_job(created["jobId"])
        c = self.task_of(final, "c")
        self.assertEqual(c["output"], {"sum": 112, "key": "c", "job": created["jobId"], "queue": q})
        # Resuming from an event id leaves out what came before it.
        later = list(self.client.watch(created["jobId"], last_event_id=events[1]["id"], timeout=10))
        self.assertEqual([e["id"] for e in later[:-1]], [e["id"] for e in events[2:-1]])
        self.assertEqual([e["id"] for e in self.client.job_events(created["jobId"], limit=2)], [e["id"] for e in events[:-1]])
        ids = [j["jobId"] for j, _ in zip(self.client.list_jobs(page_size=2), range(200))]
        self.assertIn(created["jobId"], ids)
        self.assertEqual(self.client.get_task(created["jobId"], "a")["taskId"], "a")
        with self.assertRaises(baton.NotFound):
            self.client.get_job("job-" + str(uuid.uuid4()))
        with self.assertRaises(baton.BadRequest) as cm:
            self.client.submit({"tasks": [{"taskId": "x"}]})
        self.assertEqual(cm.exception.status, 400)

    def test_error_categories_retries_and_blocked_handler_keeps_its_lease(self) -> None:
        q = "py-err-" + uid()
        w = self.worker(queues=[q], concurrency=4)

        @w.task(q)
        def h(task: baton.Task) -> Any:
            kind = task.input["kind"]
            if kind == "flaky" and task.attempt == 1:
                raise ConnectionError("upstream reset")
            if kind == "fatal":
                raise baton.TaskError(baton.DATA_QUALITY, "bad row", retryable=False)
            if kind == "nonretryable":
                raise baton.NonRetryable("give up")
            if kind == "block":
                time.sleep(3)  # blocks the thread; the lease is 2 s
            if kind == "busy":
                end = time.monotonic() + 3
                while time.monotonic() < end:  # a busy loop holding the GIL between switches
                    pass
            return {"attempt": task.attempt}
        spec = lambda k, **kw: {"taskId": k, "name": q, "input": {"kind": k}, **kw}  # noqa: E731
        created = self.client.submit({"tasks": [spec("flaky", maxAttempts=3, backoffBaseMs=0),
                                                spec("fatal", maxAttempts=3), spec("nonretryable", maxAttempts=3),
                                                spec("block", heartbeatTimeoutSeconds=2, maxAttempts=1),
                                                spec("busy", heartbeatTimeoutSeconds=2, maxAttempts=1)]})
        with Running(w):
            final = self.client.wait(created["jobId"], timeout=60)
        self.assertEqual(self.task_of(final, "flaky")["output"], {"attempt": 2})
        fatal = self.task_of(final, "fatal")
        self.assertEqual((fatal["status"], fatal["error"]["category"], fatal["error"]["message"]), ("failed", "DATA_QUALITY", "bad row"))
        self.assertEqual(len(self.client.get_task(created["jobId"], "fatal")["attempts"]), 1)
        self.assertEqual(self.task_of(final, "nonretryable")["status"], "failed")
        self.assertEqual(self.task_of(final, "block")["output"], {"attempt": 1})
        self.assertEqual(self.task_of(final, "busy")["output"], {"attempt": 1})
        flaky_attempts: Any = self.client.get_task(created["jobId"], "flaky")["attempts"]
        self.assertEqual(flaky_attempts[0]["error"]["category"], "USER_CODE")
        self.assertIn("ConnectionError", flaky_attempts[0]["error"]["message"])

    def test_cancel_is_cooperative_then_resume_and_add_tasks(self) -> None:
        q = "py-cancel-" + uid()
        w = self.worker(queues=[q], concurrency=2)
        started = threading.Event()
        saw: List[str] = []

        @w.task(q)
        def h(task: baton.Task) -> Any:
            if task.input.get("wait"):
                started.set()
                if task.cancelled.wait(20):
                    saw.append(str(task.cancel_reason))
                return {"late": True}
            return {"ok": True}
        created = self.client.submit({"tasks": [{"taskId": "w", "name": q, "input": {"wait": True}},
                                                {"taskId": "after", "name": q, "input": {}, "dependsOn": ["w"]}]})
        with Running(w):
            self.assertTrue(started.wait(20))
            self.client.cancel(created["jobId"])
            final = self.client.wait(created["jobId"], timeout=90)
            self.assertEqual(final["status"], "canceled")
            self.assertEqual(self.task_of(final, "w")["status"], "canceled")
            self.assertEqual(saw, ["cancel_requested"])
            resumed = self.client.resume(created["jobId"])
            self.assertIn("w", json.dumps(resumed))
            added = self.client.add_tasks(created["jobId"], [{"taskId": "extra", "name": q, "input": {}}])
            self.assertIn("extra", json.dumps(added))
            final = self.client.wait(created["jobId"], timeout=90)
        self.assertEqual(self.task_of(final, "extra")["output"], {"ok": True})
        self.assertEqual(self.task_of(final, "w")["output"], {"late": True})

    def test_shutdown_hands_back_what_does_not_finish_and_aborts_it(self) -> None:
        q = "py-shut-" + uid()
        w = self.worker(queues=[q], concurrency=2, shutdown_grace=0.5)
        started = threading.Event()
        aborted = threading.Event()

        @w.task(q)
        def h(task: baton.Task) -> Any:
            started.set()
            try:
                while True:
                    time.sleep(0.01)
            except baton.Aborted:
                aborted.set()
                raise
        created = self.client.submit({"tasks": [{"taskId": "long", "name": q, "maxAttempts": 1}]})
        r = Running(w)
        with r:
            self.assertTrue(started.wait(20))
        self.assertFalse(r.t.is_alive())
        self.assertIsNone(r.error)
        self.assertTrue(aborted.wait(5), "the handler was not aborted")
        final = self.client.wait(created["jobId"], timeout=20)
        t = self.task_of(final, "long")
        self.assertEqual((t["status"], t["error"]["category"]), ("failed", "INFRASTRUCTURE"))
        self.assertIn("shut down", t["error"]["message"])

    def test_async_worker(self) -> None:
        import asyncio
        q = "py-async-" + uid()
        w = self.worker(baton.AsyncWorker, queues=[q], concurrency=4)

        @w.task(q)
        async def h(task: baton.Task) -> Any:
            if task.input.get("block"):
                time.sleep(3)  # blocks the event loop; heartbeats run on their own thread
            if task.input.get("wait"):
                await asyncio.wait_for(task.cancelled.wait_async(), 20)
                return {"never": "reported"}
            await asyncio.sleep(0.01)
            if task.input.get("fail"):
                raise baton.TaskError(baton.CONFIGURATION, "no config")
            return {"n": task.input["n"] * 2}
        created = self.client.submit({"tasks": [
            {"taskId": "a", "name": q, "input": {"n": 2}},
            {"taskId": "b", "name": q, "input": {"n": 3, "block": True}, "heartbeatTimeoutSeconds": 2, "maxAttempts": 1},
            {"taskId": "f", "name": q, "input": {"fail": True}, "maxAttempts": 2}]})
        with Running(w):
            final = self.client.wait(created["jobId"], timeout=40)
            self.assertEqual(self.task_of(final, "a")["output"], {"n": 4})
            self.assertEqual(self.task_of(final, "b")["output"], {"n": 6})
            self.assertEqual(self.task_of(final, "f")["error"]["category"], "CONFIGURATION")
            c = self.client.submit({"tasks": [{"taskId": "w", "name": q, "input": {"wait": True}}]})
            self.wait_for(lambda: self.task_of(self.client.get_job(c["jobId"]), "w")["status"] == "processing")
            self.client.cancel(c["jobId"])
            final = self.client.wait(c["jobId"], timeout=90)
        self.assertEqual(self.task_of(final, "w")["status"], "canceled")

    def test_health_probe(self) -> None:
        import urllib.request
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        q = "py-health-" + uid()
        w = self.worker(queues=[q], health_port=port, health_host="127.0.0.1")
        w.register(q, lambda t: None)
        with Running(w):
            def status() -> int:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as res:
                        return int(res.status)
                except urllib.error.HTTPError as e:
                    return int(e.code)
                except OSError:
                    return 0
            self.wait_for(lambda: status() == 200)
            self.assertTrue(w.healthy())
        bad = baton.Worker("http://127.0.0.1:9", queues=["x"], poll_wait=0.1, health_failures=2)
        bad.register("x", lambda t: None)
        with Running(bad):
            self.wait_for(lambda: not bad.healthy(), timeout=10)

    # --- pipelines, datasets, buffered publish, task queries, task scope ------------------

    def test_pipeline_publish_read_query_and_task_scope(self) -> None:
        u = uid()
        name, ds, pub, read = f"py_pipe_{u}", f"py_kv_{u}", f"py-pub-{u}", f"py-read-{u}"
        doc = f"""name: {name}
jobs:
  - name: publish
    activation: source
    runtime: ecs_platform
    operator: {pub}
    outputs: 1
    source: {{kind: manual}}
  - name: read
    activation: reactive
    runtime: ecs_platform
    operator: {read}
    outputs: 0
    inputs:
      - from: {{dataset: {ds}}}
publish:
  {ds}:
    from: {{job: publish, output: 0}}
    write_mode: buffered
    schema:
      columns:
        - {{name: k, type: integer, required: true}}
        - {{name: v, type: string, required: true}}
      unique: [k]
"""
        deployed = self.client.deploy_pipeline(doc)
        self.assertEqual(deployed["name"], name)
        self.assertEqual(self.client.get_pipeline(name)["name"], name)
        w = self.worker(queues=[pub, read], concurrency=2)
        scoped: Dict[str, Any] = {}

        @w.task(pub)
        def publish(task: baton.Task) -> Any:
            assert task.pipeline is not None
            b = task.publish_batch(ds, [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}, {"k": 3, "v": "c"}])
            with self.assertRaises(baton.TaskError):
                task.publish_batch("not_an_output", [{"k": 1}])
            return {"published": b.rows}

        @w.task(read)
        def reader(task: baton.Task) -> Any:
            assert task.pipeline is not None
            inp = task.pipeline.input(ds)
            rows = list(task.rows(inp))
            try:
                res = task.query(f'SELECT count(*) AS n, sum(k) AS s FROM "{ds}"')
                n, s = res["rows"][0]
            except baton.NotImplementedByServer:
                n, s = None, None
            # The same attempt through the task-scoped dialect, with its token alone.
            scope = baton.TaskScope(os.environ["BATON_URL"], task.capability_token)
            scoped["beat"] = scope.heartbeat()
            scoped["rows"] = len(list(scope.rows(inp["dataset_uuid"])))
            return {"rows": len(rows), "n": n, "s": s}
        with Running(w):
            run = self.client.run_pipeline_job(name, "publish")
            final = self.client.wait(run["job_id"], timeout=90)
            self.assertEqual(final["status"], "completed")
            self.assertEqual(final["tasks"][0]["output"], {"published": 3})
            end = time.monotonic() + 90
            while len(list(self.client.dataset_rows(ds))) != 3:
                if time.monotonic() > end:
                    self.skipTest("the batch was published but no sink loaded it within 90 s: "
                                  "this server runs no sink (baton server without --sink?)")
                time.sleep(0.1)
            self.wait_for(lambda: bool([j for j in self.client.list_jobs(page_size=50) if j.get("name") == f"{name}.read"]), 90)
            jobs = [j for j in self.client.list_jobs(page_size=50) if j.get("name") == f"{name}.read"]
            final = self.client.wait(jobs[0]["jobId"], timeout=90)
        out = final["tasks"][0]["output"]
        self.assertEqual(out["rows"], 3)
        if out["n"] is not None:
            self.assertEqual((int(out["n"]), int(out["s"])), (3, 6))  # sum() is a HUGEINT: a string
        self.assertTrue(scoped["beat"]["ok"])
        self.assertEqual(scoped["rows"], 3)
        rows = sorted(int(cast(Any, r)["k"]) for r in self.client.dataset_rows(ds, where={"k": [1, 3]}))
        self.assertEqual(rows, [1, 3])
        dataset = self.client.get_dataset(ds)
        self.assertEqual(dataset["name"], ds)
        versions = self.client.pipeline_versions(name)
        self.assertTrue(versions)
        try:
            res = self.client.query(f'SELECT sum(k) AS s FROM "{ds}"')
            self.assertEqual(int(res["rows"][0][0]), 6)
        except baton.NotImplementedByServer:
            pass
        # A second version, then a rollback to the first.
        self.client.deploy_pipeline(doc.replace("outputs: 0", "outputs: 0\n    priority: high"))
        rb = self.client.rollback_pipeline(name)
        self.assertIn(name, json.dumps(rb))

    # --- bundles --------------------------------------------------------------------------

    def test_bundles_upload_list_get_disable(self) -> None:
        zipped = baton.build_bundle({"main.py": f"# {uid()}\nimport json\nprint(json.dumps({{'ok': True}}))\n".encode()})
        with zipfile.ZipFile(io.BytesIO(zipped)) as z:
            self.assertEqual(json.loads(z.read("bundle_manifest.json"))["entrypoint"], "main.py")
        b = self.client.upload_bundle(zipped)
        self.assertEqual(b["state"], "ready")
        self.assertEqual(self.client.get_bundle(b["bundle_id"])["bundle_id"], b["bundle_id"])
        self.assertIn(b["bundle_id"], [x["bundle_id"] for x, _ in zip(self.client.list_bundles(page_size=5), range(500))])
        d = self.client.disable_bundle(b["bundle_id"])
        self.assertIsNotNone(d["disabled_at"])
        with self.assertRaises(ValueError):
            self.client.upload_bundle(b"not a zip")


if __name__ == "__main__":
    unittest.main()
