#!/usr/bin/env python3
"""A Baton worker in the internal dialect (/internal/task-*), woken by Redis Streams wake-ups.

Follows docs/contracts/wakeup.md ("Consuming wake-ups from another language") and
docs/contracts/internal.md ("Writing a client"). The server must run with `--transport redis`
and the same `--transport-namespace` N. For each queue Q the worker reads the stream N:wake:Q in
the consumer group baton-workers (XREADGROUP; the group is created with XGROUP CREATE ... 0
MKSTREAM when missing), takes `task_id` from the entry, claims it by id (POST
/internal/task-claim), heartbeats in a thread (POST /internal/heartbeat, plus XCLAIM ... JUSTID to
keep the entry from being reclaimed), reports POST /internal/task-complete, and then settles the
wake-up: XACK and XDEL in MULTI/EXEC (Baton does not settle the internal dialect's wake-ups). A
NotClaimed answer is settled at once and nothing runs. The Redis client is a minimal RESP one.

    python3 internal_worker.py --queue py-internal --max-tasks 3

Environment: BATON_INTERNAL_URL (default http://127.0.0.1:8081), BATON_REDIS_URL (default
redis://127.0.0.1:6379/0), BATON_TRANSPORT_NAMESPACE (default baton), BATON_QUEUES
(comma-separated, instead of --queue). Python 3.9+, standard library only.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request

BASE = os.environ.get("BATON_INTERNAL_URL", "http://127.0.0.1:8081").rstrip("/")
GROUP = "baton-workers"


class Redis:
    """Just enough RESP2 for XREADGROUP, XACK, XDEL, XCLAIM, XGROUP, MULTI/EXEC and HGET/HDEL."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379))
        self.file = self.sock.makefile("rb")
        self.lock = threading.Lock()
        if u.password:
            self.call(*(["AUTH", u.username, u.password] if u.username else ["AUTH", u.password]))
        if u.path.strip("/"):
            self.call("SELECT", u.path.strip("/"))

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        with self.lock:
            self.sock.sendall(out)
            return self._read()

    def _read(self):
        line = self.file.readline()[:-2]
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2].decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")


class TaskError(Exception):
    def __init__(self, category, message):
        super().__init__(message)
        self.category = category


def handle(key, config, deps):
    """The work: add config's `n` to the parents' totals. A parent's output, through this dialect,
    is {"outputs": [...]} (docs/contracts/internal.md, "Dependency outputs")."""
    time.sleep(config.get("sleep", 0))
    if config.get("fail"):
        raise TaskError(config["fail"], f"{key}: asked to fail")
    totals = [o.get("total", 0) for d in deps.values() for o in (d or {}).get("outputs", [])]
    return {"by": "internal", "task": key, "total": config.get("n", 0) + sum(totals), "parents": sorted(deps)}


def log(*args):
    print("internal-worker:", *args, file=sys.stderr, flush=True)


def post(path, body, timeout=30.0):
    """POST with the page's retry rule (503/5xx/408/network: retry, honouring Retry-After)."""
    delay = 0.1
    while True:
        req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as res:
                return res.status, json.load(res)
        except urllib.error.HTTPError as err:
            raw = err.read()
            if err.code != 408 and err.code < 500:
                return err.code, json.loads(raw or b"{}")
            wait = float(err.headers.get("Retry-After") or delay)
        except (urllib.error.URLError, OSError):
            wait = delay
        time.sleep(wait)
        delay = min(delay * 2, 10.0)


def heartbeat(redis, stream, entry, consumer, fence, interval, stop, lost):
    while not stop.wait(interval):
        status, answer = post("/internal/heartbeat", fence, timeout=interval)
        if status != 200:
            log(f"heartbeat refused: {status} {answer}; aborting")
            lost.set()
            return
        redis.call("XCLAIM", stream, GROUP, consumer, 0, entry, "JUSTID")  # still ours: reset idle
        if answer.get("should_cancel"):
            log("cancellation requested (this example finishes its short work and reports it)")


def settle(redis, stream, entry, hash_key, task_id):
    redis.call("MULTI")
    redis.call("XACK", stream, GROUP, entry)
    redis.call("XDEL", stream, entry)
    redis.call("EXEC")
    if redis.call("HGET", hash_key, task_id) == entry:
        redis.call("HDEL", hash_key, task_id)


def run_one(redis, consumer, worker_id, stream, entry, task_id):
    status, claim = post("/internal/task-claim", {"task_id": task_id, "worker_id": worker_id})
    if status != 200 or claim.get("status") != "Claimed":
        log(f"wake-up {entry} for {task_id}: {status} {claim}; dropping it")
        return False
    task = claim["task"]
    fence = {"task_id": task_id, "attempt": claim["attempt"], "lease_token": claim["lease_token"]}
    stop, lost = threading.Event(), threading.Event()
    beat = threading.Thread(target=heartbeat, daemon=True, args=(redis, stream, entry, consumer, fence,
                            float(claim["heartbeat_interval_seconds"]), stop, lost))
    beat.start()
    try:
        result = handle(task["task_key"], task["config"], task["dependency_outputs"])
        report = dict(fence, status="Completed", outputs=[result])
    except Exception as exc:
        report = dict(fence, status="Failed", error={
            "category": getattr(exc, "category", "USER_CODE"), "message": str(exc),
            "stack_trace": traceback.format_exc()})
    finally:
        stop.set()
        beat.join()
    if lost.is_set():
        return False
    status, answer = post("/internal/task-complete", report)
    log(f"{task['operator']} ({task['task_key']}, attempt {claim['attempt']}): {status} {json.dumps(answer)}")
    return status == 200


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queue", action="append", default=None, help="queue, in priority order (repeatable)")
    ap.add_argument("--worker-id", default=os.environ.get("BATON_WORKER_ID", f"py-internal-{os.getpid()}"))
    ap.add_argument("--max-tasks", type=int, default=0, help="stop after N claimed tasks (0: never)")
    args = ap.parse_args()
    queues = args.queue or [q for q in os.environ.get("BATON_QUEUES", "").split(",") if q]
    if not queues:
        sys.exit("internal-worker: give --queue NAME (or BATON_QUEUES)")
    ns = os.environ.get("BATON_TRANSPORT_NAMESPACE", "baton")
    redis = Redis(os.environ.get("BATON_REDIS_URL", "redis://127.0.0.1:6379/0"))
    streams = [f"{ns}:wake:{q}" for q in queues]
    for s in streams:
        try:
            redis.call("XGROUP", "CREATE", s, GROUP, "0", "MKSTREAM")
        except RuntimeError as err:
            if not str(err).startswith("BUSYGROUP"):
                raise
    consumer, done = args.worker_id, 0
    while args.max_tasks == 0 or done < args.max_tasks:
        reply = redis.call("XREADGROUP", "GROUP", GROUP, consumer, "COUNT", 1, "BLOCK", 5000,
                           "STREAMS", *streams, *([">"] * len(streams)))
        for stream, entries in reply or []:
            for entry, fields in entries:
                values = dict(zip(fields[::2], fields[1::2]))
                task_id = values["task_id"]
                if run_one(redis, consumer, args.worker_id, stream, entry, task_id):
                    done += 1
                # Claimed and reported, NotClaimed, or lost: the outcome is settled either way.
                settle(redis, stream, entry, f"{ns}:wakeid:{values.get('queue', stream[len(ns) + 6:])}", task_id)
    log(f"stopping after {done} tasks")


if __name__ == "__main__":
    main()
