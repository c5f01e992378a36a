#!/usr/bin/env python3
"""A Baton worker in the stream-worker dialect (/internal/worker/*).

Follows docs/contracts/stream-worker.md ("Writing a client"): long-poll POST
/internal/worker/claim over the queues in priority order, heartbeat in a thread every
heartbeat_interval_seconds the claim gives, run the handler on `payload` and
`dependency_outputs`, then report /internal/worker/complete with `result`, or /internal/worker/fail
with an error category when the handler raises. A 409 or 410 on a heartbeat aborts the work (the
task is no longer ours); 429, 503, other 5xx, 408 and network errors are retried, honouring
Retry-After. The internal listener needs mTLS in production (see docs/security.md); `baton dev`
serves it on loopback without TLS, which is what this example expects.

    python3 stream_worker.py --queue jobs:stream:high --queue jobs:stream:low --max-tasks 3

Environment: BATON_INTERNAL_URL (default http://127.0.0.1:8081), BATON_QUEUES (comma-separated,
instead of --queue), BATON_WORKER_ID. Python 3.9+, standard library only.
"""
import argparse
import json
import os
import random
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request

BASE = os.environ.get("BATON_INTERNAL_URL", "http://127.0.0.1:8081").rstrip("/")
CATEGORIES = {"USER_CODE", "DATA_QUALITY", "INFRASTRUCTURE", "CONFIGURATION", "TIMEOUT", "CANCELLED"}


class TaskError(Exception):
    """Raise to fail the task with one of the six error categories."""

    def __init__(self, category, message, retryable=None):
        super().__init__(message)
        self.category, self.retryable = category, retryable


def handle(name, payload, deps):
    """The work: add the input's `n` to the parents' totals. `{"fail": CATEGORY}` fails;
    `{"sleep": seconds}` makes the work last long enough to heartbeat."""
    if not isinstance(payload, dict):
        payload = {}
    time.sleep(payload.get("sleep", 0))
    if payload.get("fail"):
        raise TaskError(payload["fail"], f"{name}: asked to fail")
    total = payload.get("n", 0) + sum(d.get("total", 0) for d in deps.values() if isinstance(d, dict))
    return {"by": "stream-worker", "task": name, "total": total, "parents": sorted(deps)}


def log(*args):
    print("stream-worker:", *args, file=sys.stderr, flush=True)


def post(path, body, timeout):
    """One POST; returns (status, answer). Retries only what the page says to retry."""
    delay = 0.1
    while True:
        req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as res:
                return res.status, json.load(res)
        except urllib.error.HTTPError as err:
            raw = err.read()
            if err.code not in (408, 429) and err.code < 500:
                return err.code, json.loads(raw or b"{}")
            wait = float(err.headers.get("Retry-After") or delay * random.uniform(0.5, 1.5))
            log(f"{path}: {err.code} {raw[:200]!r}; retrying in {wait:.2f}s")
        except (urllib.error.URLError, OSError) as err:
            wait = delay * random.uniform(0.5, 1.5)
            log(f"{path}: {err}; retrying in {wait:.2f}s")
        time.sleep(wait)
        delay = min(delay * 2, 10.0)


def heartbeat(claim, fence, stop, lost, cancel):
    """Heartbeat every heartbeat_interval_seconds until `stop`; flag `lost` on 404/409/410."""
    interval = float(claim["heartbeat_interval_seconds"])
    while not stop.wait(interval):
        status, answer = post("/internal/worker/heartbeat", fence, timeout=interval)
        if status != 200:
            log(f"heartbeat refused: {status} {answer}; aborting {claim['job_id']}")
            lost.set()
            return
        if answer.get("should_cancel"):
            cancel.set()


def run_one(claim, worker_id):
    fence = {"worker_id": worker_id, "job_id": claim["job_id"], "attempt_id": claim["attempt_id"],
             "lease_token": claim["lease_token"]}
    stop, lost, cancel = threading.Event(), threading.Event(), threading.Event()
    beat = threading.Thread(target=heartbeat, args=(claim, fence, stop, lost, cancel), daemon=True)
    beat.start()
    report = dict(fence, stream=claim["stream"], message_id=claim["message_id"])
    try:
        result = handle(claim["task_key"], claim["payload"], claim["dependency_outputs"])
        path, report["result"] = "/internal/worker/complete", result
    except Exception as exc:  # the handler failed: report it with a category
        category = exc.category if isinstance(exc, TaskError) else "USER_CODE"
        error = {"code": category if category in CATEGORIES else "USER_CODE", "message": str(exc),
                 "stack": traceback.format_exc()}
        if isinstance(exc, TaskError) and exc.retryable is not None:
            error["retryable"] = exc.retryable
        path, report["error"] = "/internal/worker/fail", error
    finally:
        stop.set()
        beat.join()
    if lost.is_set():
        return False  # the attempt is no longer ours: report nothing
    if cancel.is_set() and path.endswith("complete"):
        log(f"{claim['job_id']}: cancellation was requested, but the work had finished; completing")
    status, answer = post(path, report, timeout=30)
    log(f"{claim['task_name']} ({claim['task_key']}, attempt {claim['attempt_id']}):"
        f" {path.rsplit('/', 1)[1]} -> {status} {json.dumps(answer)}")
    return status == 200 and path.endswith("complete")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queue", action="append", default=None, help="queue, in priority order (repeatable)")
    ap.add_argument("--worker-id", default=os.environ.get("BATON_WORKER_ID", f"py-stream-{os.getpid()}"))
    ap.add_argument("--max-wait-ms", type=int, default=5000)
    ap.add_argument("--max-tasks", type=int, default=0, help="stop after N claimed tasks (0: never)")
    args = ap.parse_args()
    queues = args.queue or [q for q in os.environ.get("BATON_QUEUES", "").split(",") if q]
    if not queues:
        sys.exit("stream-worker: give --queue NAME (or BATON_QUEUES)")
    claims = 0
    while args.max_tasks == 0 or claims < args.max_tasks:
        status, answer = post("/internal/worker/claim", {"worker_id": args.worker_id, "streams": queues,
                              "max_wait_ms": args.max_wait_ms}, timeout=args.max_wait_ms / 1000 + 30)
        if status != 200:
            sys.exit(f"stream-worker: claim refused: {status} {answer}")  # a client bug: do not loop
        if not answer.get("claimed"):
            continue
        claims += 1
        run_one(answer, args.worker_id)
    log(f"stopping after {claims} tasks")


if __name__ == "__main__":
    main()
