"""Pieces of the worker that need no server: the abort of a handler thread, the cancel event,
the failure a handler's exception becomes."""
from __future__ import annotations

import asyncio
import threading
import time
import unittest

import baton
from baton.worker import Worker, _async_raise


class AbortTest(unittest.TestCase):
    def test_aborted_is_raised_in_a_busy_handler_thread(self) -> None:
        caught = threading.Event()
        started = threading.Event()

        def handler() -> None:
            started.set()
            try:
                while True:
                    try:
                        time.sleep(0.01)
                    except Exception:  # noqa: BLE001 - user code that swallows exceptions
                        pass
            except baton.Aborted:
                caught.set()
        t = threading.Thread(target=handler, daemon=True)
        t.start()
        started.wait(5)
        assert t.ident is not None
        self.assertTrue(_async_raise(t.ident, baton.Aborted))
        self.assertTrue(caught.wait(5))
        t.join(5)
        self.assertFalse(t.is_alive())

    def test_cancel_event_wakes_threads_and_coroutines(self) -> None:
        ev = baton.CancelEvent()
        self.assertFalse(ev.is_set())
        self.assertFalse(ev.wait(0.01))

        async def waiter() -> str:
            await ev
            return str(ev.reason)
        threading.Timer(0.05, lambda: ev._set("cancel_requested")).start()
        self.assertEqual(asyncio.run(asyncio.wait_for(waiter(), 5)), "cancel_requested")
        self.assertTrue(ev.wait(0))
        ev._set("shutdown")  # the first reason stays
        self.assertEqual(ev.reason, "cancel_requested")


class FailureTest(unittest.TestCase):
    def test_failure_bodies(self) -> None:
        f = Worker._failure(baton.TaskError(baton.DATA_QUALITY, "bad row", retryable=False), "")
        self.assertEqual(f, {"code": "DATA_QUALITY", "message": "bad row", "retryable": False})
        f = Worker._failure(baton.TaskError(baton.USER_CODE, "x", retryable=True, code="TRANSIENT"), "")
        self.assertEqual(f["code"], "TRANSIENT")
        f = Worker._failure(ValueError("nope"), "Traceback...")
        self.assertEqual(f, {"code": "ValueError", "message": "ValueError: nope", "retryable": True, "stack": "Traceback..."})
        self.assertEqual(Worker._failure(baton.TaskError(baton.TIMEOUT, "slow"), "")["code"], "TIMEOUT")

    def test_options_are_checked(self) -> None:
        for kw in ({"concurrency": 0}, {"poll_wait": 61}, {"shutdown_grace": -1}, {"queues": [""]},
                   {"heartbeat_interval": 0}):
            with self.subTest(kw=kw), self.assertRaises(ValueError):
                Worker("http://127.0.0.1:1", **kw)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            Worker("ftp://x")
        w = Worker("http://127.0.0.1:1")
        with self.assertRaises(TypeError):
            async def h(task: baton.Task) -> None:
                pass
            w.register("x", h)
        with self.assertRaises(TypeError):
            baton.AsyncWorker("http://127.0.0.1:1").register("x", lambda t: None)
        with self.assertRaises(RuntimeError):
            Worker("http://127.0.0.1:1").run()  # no handlers, no queues


if __name__ == "__main__":
    unittest.main()
