from __future__ import annotations

import base64
import json
import os
import tempfile
import unittest

import baton


def token(claims: dict) -> str:  # type: ignore[type-arg]
    part = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"eyJhbGciOiJIUzI1NiJ9.{part}.sig"


class TaskScopeTest(unittest.TestCase):
    def test_fence_from_the_token_claims(self) -> None:
        t = token({"task_id": "01a2-t", "attempt": 2, "lease_token": "lease-1"})
        self.assertEqual(baton.token_claims(t)["attempt"], 2)
        s = baton.TaskScope("http://127.0.0.1:1", t)
        self.assertEqual((s.task_id, s.attempt, s.lease_token), ("01a2-t", 2, "lease-1"))
        self.assertEqual(s.capability_token, t)
        with self.assertRaises(ValueError):
            baton.token_claims("not-a-jwt")
        with self.assertRaises(ValueError):
            baton.TaskScope("http://127.0.0.1:1", token({"task_id": "x"}))
        with self.assertRaises(ValueError):
            baton.TaskScope("", t)

    def test_from_env_reads_the_wrappers_environment_and_payload(self) -> None:
        payload = {"task_id": "tid", "job_id": "job-1", "task_key": "c", "name": "py-add", "attempt": 1,
                   "lease_token": "l", "input": {"n": 100}, "dependency_outputs": {"a": {"total": 1}},
                   "job": {"dag_name": "p", "name": "read", "pipeline_version": "v1"}, "operator": "py-add",
                   "config": {"n": 100}, "inputs": [{"dataset_name": "kv", "dataset_uuid": "u-1"}], "outputs": []}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "payload.json")
            with open(path, "w") as f:
                json.dump(payload, f)
            env = {"TRACE_TASK_CAPABILITY_TOKEN": "a.b.c", "BATON_URL": "http://127.0.0.1:1", "BATON_TASK_ID": "tid",
                   "BATON_ATTEMPT": "1", "BATON_LEASE_TOKEN": "l", "BATON_TASK_PAYLOAD": path, "BATON_BUFFER_DIR": d}
            s = baton.TaskScope.from_env(env)
        self.assertEqual((s.task_id, s.attempt, s.key, s.name, s.job_id), ("tid", 1, "c", "py-add", "job-1"))
        self.assertEqual(s.input, {"n": 100})
        self.assertEqual(s.parents, {"a": {"total": 1}})
        assert s.pipeline is not None
        self.assertEqual(s.pipeline.input("kv")["dataset_uuid"], "u-1")
        self.assertFalse(s.should_cancel())
        with self.assertRaises(ValueError):
            s.fail("x", "NOT_A_CATEGORY")

    def test_from_push_envelope(self) -> None:
        env = {"taskId": "t", "runId": "job-1", "taskKey": "thumb", "taskName": "resize", "attempt": 1,
               "attemptId": "l", "leaseToken": "l", "input": {"w": 1}, "dependencyOutputs": {},
               "callbackBaseUrl": "http://127.0.0.1:1", "taskToken": "a.b.c"}
        s = baton.TaskScope.from_push(env)
        self.assertEqual((s.task_id, s.lease_token, s.key, s.input), ("t", "l", "thumb", {"w": 1}))


if __name__ == "__main__":
    unittest.main()
