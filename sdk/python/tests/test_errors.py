from __future__ import annotations

import unittest
from typing import List

import baton
from baton._http import Backoff, parse_retry_after, retrying


class APIErrorTest(unittest.TestCase):
    def test_dialect_refusal_carries_code_and_message(self) -> None:
        e = baton.APIError.from_answer(409, b'{"ok":false,"ack":true,"error":"lease_mismatch","message":"not yours"}',
                                       method="POST", path="/internal/worker/heartbeat")
        self.assertIsInstance(e, baton.Conflict)
        self.assertEqual((e.status, e.code, e.message), (409, "lease_mismatch", "not yours"))
        self.assertFalse(e.transient)

    def test_producer_error_text_is_the_message(self) -> None:
        e = baton.APIError.from_answer(404, b'{"error":"Job not found"}')
        self.assertIsInstance(e, baton.NotFound)
        self.assertEqual((e.code, e.message), ("not_found", "Job not found"))

    def test_validation_errors_are_joined(self) -> None:
        e = baton.APIError.from_answer(400, b'{"errors":[{"message":"tasks[0].name is required"},{"message":"x"}]}')
        self.assertIsInstance(e, baton.BadRequest)
        self.assertIn("tasks[0].name is required; x", e.message)

    def test_unavailable_and_rate_limited_are_transient_with_retry_after(self) -> None:
        e = baton.APIError.from_answer(503, b'{"error":"unavailable","message":"db down"}', retry_after=2.0)
        self.assertIsInstance(e, baton.Unavailable)
        self.assertTrue(e.transient)
        self.assertEqual(e.retry_after, 2.0)
        self.assertIsInstance(baton.APIError.from_answer(429, b"{}"), baton.RateLimited)
        self.assertIsInstance(baton.APIError.from_answer(502, b"<html>bad gateway</html>"), baton.ServerError)

    def test_retry_after_header(self) -> None:
        self.assertEqual(parse_retry_after("3"), 3.0)
        self.assertIsNone(parse_retry_after(""))
        self.assertIsNone(parse_retry_after("soon"))
        self.assertGreaterEqual(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") or 0, 0.0)

    def test_backoff_honours_retry_after_and_jitters(self) -> None:
        b = Backoff()
        self.assertLess(b.next(), 0.16)
        e = baton.APIError(429, "rate_limited", "slow down", retry_after=5.0)
        self.assertEqual(Backoff().after(e), 5.0)
        delays = {round(Backoff().next(), 6) for _ in range(20)}
        self.assertGreater(len(delays), 1, "backoff is not jittered")

    def test_retrying_retries_transient_errors_only(self) -> None:
        calls = []
        slept: List[float] = []

        def flaky() -> str:
            calls.append(1)
            if len(calls) < 3:
                raise baton.APIError(503, "unavailable", "down", retry_after=0.01)
            return "ok"
        self.assertEqual(retrying(flaky, attempts=5, sleep=slept.append), "ok")
        self.assertEqual(len(calls), 3)
        self.assertEqual(len(slept), 2)

        def refused() -> str:
            calls.append(1)
            raise baton.BadRequest(400, "invalid_request", "bad")
        calls.clear()
        with self.assertRaises(baton.BadRequest):
            retrying(refused, attempts=5, sleep=slept.append)
        self.assertEqual(len(calls), 1)


class TaskErrorTest(unittest.TestCase):
    def test_categories_and_defaults(self) -> None:
        self.assertEqual(set(baton.CATEGORIES), {"USER_CODE", "DATA_QUALITY", "INFRASTRUCTURE", "CONFIGURATION", "TIMEOUT",
                                                 "CANCELLED"})
        self.assertTrue(baton.TaskError(baton.USER_CODE, "x").will_retry)
        self.assertFalse(baton.TaskError(baton.DATA_QUALITY, "x").will_retry)
        self.assertTrue(baton.TaskError(baton.DATA_QUALITY, "x", retryable=True).will_retry)
        self.assertFalse(baton.NonRetryable("x").will_retry)
        self.assertEqual(baton.NonRetryable("x").category, baton.USER_CODE)
        r = baton.RetryAfter(2.5, "later")
        self.assertTrue(r.will_retry)
        self.assertEqual(r.seconds, 2.5)
        with self.assertRaises(ValueError):
            baton.TaskError("TRANSIENT", "no such category")
        with self.assertRaises(ValueError):
            baton.RetryAfter(-1)

    def test_aborted_is_not_an_exception(self) -> None:
        # `except Exception` in user code must not swallow the abort.
        self.assertFalse(issubclass(baton.Aborted, Exception))


if __name__ == "__main__":
    unittest.main()
