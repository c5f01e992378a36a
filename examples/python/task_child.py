#!/usr/bin/env python3
"""Untrusted task code with the Python SDK's task-scoped client: the child of
`baton worker --exec`, or a user-code bundle's entrypoint. It holds only its attempt's
capability token (TRACE_TASK_CAPABILITY_TOKEN) and the public URL (BATON_URL); the payload is in
the file BATON_TASK_PAYLOAD.

The child's environment is scrubbed, so the SDK travels with it: vendor it next to this file
(`pip install --target DIR ./sdk/python`, then copy this file into DIR), as a bundle would.

    baton worker --task py-add --exec 'python3 DIR/task_child.py'

It heartbeats on a thread of its own while it works, then completes the attempt with its output
(the wrapper's own report afterwards is a duplicate of it).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the vendored SDK

import baton  # noqa: E402


def work(scope: baton.TaskScope) -> dict:
    data = scope.input or {}
    time.sleep(data.get("sleep", 0))
    total = data.get("n", 0) + sum((p or {}).get("total", 0) for p in scope.parents.values())
    return {"by": "sdk-task-scoped", "task": scope.key, "total": total, "parents": sorted(scope.parents)}


if __name__ == "__main__":
    scope = baton.task_scoped()  # TaskScope.from_env()
    scope.heartbeat()
    # run(): heartbeats on its own thread, then complete (or fail with the exception).
    scope.run(work)
