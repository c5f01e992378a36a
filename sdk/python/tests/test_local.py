from __future__ import annotations

import asyncio
import threading
import time
import unittest
from typing import Any, Dict

import baton


class RunLocalTest(unittest.TestCase):
    def test_output_inputs_and_parents(self) -> None:
        def add(task: baton.Task) -> Dict[str, Any]:
            task.heartbeat({"step": 1})
            return {"sum": task.input["n"] + sum(p["sum"] for p in task.parents.values())}
        t = baton.LocalTask({"n": 100}, {"a": {"sum": 1}, "b": {"sum": 11}}, name="conf.add", key="c")
        self.assertEqual(baton.run_local(add, task=t), {"sum": 112})
        self.assertEqual(t.heartbeats, [{"step": 1}])
        self.assertEqual((t.key, t.name, t.attempt), ("c", "conf.add", 1))

    def test_errors_as_the_worker_reports_them(self) -> None:
        def fatal(task: baton.Task) -> None:
            raise baton.TaskError(baton.DATA_QUALITY, "bad row", retryable=False)
        with self.assertRaises(baton.TaskError) as cm:
            baton.run_local(fatal)
        self.assertEqual((cm.exception.category, cm.exception.will_retry), ("DATA_QUALITY", False))

        def boom(task: baton.Task) -> None:
            raise KeyError("x")
        with self.assertRaises(baton.TaskError) as cm:
            baton.run_local(boom)
        self.assertEqual((cm.exception.category, cm.exception.will_retry), ("USER_CODE", True))
        self.assertIsInstance(cm.exception.__cause__, KeyError)
        self.assertIn("Traceback", getattr(cm.exception, "stack"))

        with self.assertRaises(baton.TaskError) as cm:
            baton.run_local(lambda task: {"not json": object()})
        self.assertEqual((cm.exception.category, cm.exception.will_retry), ("USER_CODE", False))

    def test_cancellation(self) -> None:
        def wait(task: baton.Task) -> Dict[str, bool]:
            return {"cancelled": task.cancelled.wait(60)}
        t0 = time.monotonic()
        with self.assertRaises(baton.TaskError) as cm:
            baton.run_local(wait, cancel_after=0.05)
        self.assertEqual(cm.exception.category, baton.CANCELLED)
        self.assertLess(time.monotonic() - t0, 30)  # woken by the cancel, not by the 60 s wait

    def test_async_handler_and_awaitable_cancel(self) -> None:
        async def wait(task: baton.Task) -> Dict[str, Any]:
            await asyncio.wait_for(task.cancelled.wait_async(), 5)
            return {"reason": task.cancel_reason}
        t = baton.LocalTask()
        threading.Timer(0.05, t.cancel).start()
        with self.assertRaises(baton.TaskError):
            baton.run_local(wait, task=t)
        self.assertEqual(t.cancel_reason, "cancel_requested")

        async def double(task: baton.Task) -> int:
            await asyncio.sleep(0)
            return int(task.input) * 2
        self.assertEqual(baton.run_local(double, 21), 42)

    def test_publish_rows_query_secrets_recorded(self) -> None:
        pipeline = {"job": {"dag_name": "p", "name": "publish", "pipeline_version": "v1"},
                    "outputs": [{"dataset_name": "kv", "dataset_uuid": "u-1", "write_mode": "buffered", "output_index": 0}],
                    "inputs": [{"dataset_name": "src", "dataset_uuid": "u-0"}]}

        def handler(task: baton.Task) -> Dict[str, Any]:
            assert task.pipeline is not None
            task.publish_batch("kv", [{"k": 1}, {"k": 2}])
            rows = list(task.rows(task.pipeline.inputs[0], where={"k": [1, 3]}))
            q = task.query("SELECT 1")
            return {"rows": len(rows), "q": q["rows"][0][0], "secret": task.secret("token")}
        t = baton.LocalTask(pipeline=pipeline, datasets={"src": [{"k": 1}, {"k": 2}, {"k": 3}]},
                            query_results={"SELECT 1": {"columns": [], "rows": [[1]], "truncated": False}},
                            secrets={"token": "s3"})
        self.assertEqual(baton.run_local(handler, task=t), {"rows": 2, "q": 1, "secret": "s3"})
        self.assertEqual(t.published, {"kv": [{"k": 1}, {"k": 2}]})
        with self.assertRaises(baton.TaskError):
            t.publish_batch("elsewhere", [{"k": 1}])
        with self.assertRaises(baton.NotImplementedByServer):
            t.credentials()


if __name__ == "__main__":
    unittest.main()
