#!/usr/bin/env python3
"""Submit a job to Baton and follow it until it finishes: the producer dialect.

Follows docs/contracts/producer.md ("Writing a client"): POST /jobs with the x-api-key header and
an Idempotency-Key (a retried submission sends the same bytes with the same key, so it can never
create a second job), then follows the job through the Server-Sent Events stream
GET /jobs/{jobId}/events (reconnecting with Last-Event-ID until `event: end`), or by polling
GET /jobs/{jobId} with --poll. Prints the final job view (GET /jobs/{jobId}) as JSON on stdout and
exits 0 iff the job completed (1 otherwise).

    BATON_API_KEY=dev-key python3 producer.py job.json        # or '-' to read the job from stdin

Environment: BATON_URL (default http://127.0.0.1:8080), BATON_API_KEY (required).
Python 3.9+, standard library only.
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid

BASE = os.environ.get("BATON_URL", "http://127.0.0.1:8080").rstrip("/")
KEY = os.environ.get("BATON_API_KEY", "")


def log(*args):
    print("producer:", *args, file=sys.stderr, flush=True)


def request(method, path, body=None, headers=None, timeout=30.0):
    """One call with the producer's retry policy: 429/503 wait Retry-After, 5xx/408/network back
    off; any other answer is returned as (status, headers, parsed JSON)."""
    delay = 0.2
    while True:
        req = urllib.request.Request(BASE + path, data=body, method=method,
                                     headers={"x-api-key": KEY, **(headers or {})})
        if body is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as res:
                return res.status, res.headers, json.load(res)
        except urllib.error.HTTPError as err:
            status, hdrs, raw = err.code, err.headers, err.read()
            if status not in (408, 429) and status < 500:
                return status, hdrs, json.loads(raw or b"{}")
            wait = float(hdrs.get("Retry-After") or delay)
            log(f"{method} {path}: {status} {raw[:200]!r}; retrying in {wait}s")
        except (urllib.error.URLError, OSError) as err:
            wait = delay
            log(f"{method} {path}: {err}; retrying in {wait}s")
        time.sleep(wait)
        delay = min(delay * 2, 10.0)


def submit(doc_bytes, idem_key):
    status, headers, answer = request("POST", "/jobs", doc_bytes, {"Idempotency-Key": idem_key})
    if status != 201:
        # 400: a DAG validation error (answer["errors"] lists them all); 422: key reused.
        sys.exit(f"producer: POST /jobs answered {status}: {json.dumps(answer)}")
    replay = " (replayed)" if headers.get("Idempotent-Replayed") == "true" else ""
    log(f"submitted {answer['jobId']}{replay}: {answer['totalTasks']} tasks, roots {answer['rootTasks']}")
    return answer["jobId"]


def follow_sse(job_id, deadline):
    """Read the job's event stream until `event: end`; reconnect with Last-Event-ID if it drops."""
    last_id = None
    while time.time() < deadline:
        headers = {"x-api-key": KEY, "Accept": "text/event-stream"}
        if last_id is not None:
            headers["Last-Event-ID"] = last_id
        req = urllib.request.Request(f"{BASE}/jobs/{job_id}/events", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as res:
                event, data = {}, []
                for raw in res:
                    line = raw.decode("utf-8").rstrip("\r\n")
                    if line.startswith(":"):          # ": keep-alive" comment
                        continue
                    if line:
                        name, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if name == "data":
                            data.append(value)
                        else:
                            event[name] = value
                        continue
                    # A blank line ends one event.
                    if event.get("event") == "end":
                        log("end:", "\n".join(data))
                        return
                    if data:
                        ev = json.loads("\n".join(data))
                        log(f"event {ev['id']}: {ev['type']} {ev.get('taskId') or ''}")
                    last_id = event.get("id", last_id)
                    event, data = {}, []
        except urllib.error.HTTPError as err:
            if err.code not in (408, 429) and err.code < 500:
                sys.exit(f"producer: event stream answered {err.code}: {err.read()!r}")
            time.sleep(float(err.headers.get("Retry-After") or 1))
        except (urllib.error.URLError, OSError) as err:
            log(f"event stream dropped ({err}); reconnecting after event {last_id}")
            time.sleep(0.5)


def follow_poll(job_id, deadline, every=0.5):
    while time.time() < deadline:
        _, _, job = request("GET", f"/jobs/{job_id}")
        if job.get("status") != "processing":
            return
        time.sleep(every)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("job", help="job document (JSON file, or - for stdin)")
    ap.add_argument("--idempotency-key", default=None, help="default: a fresh UUID")
    ap.add_argument("--poll", action="store_true", help="poll GET /jobs/{id} instead of SSE")
    ap.add_argument("--timeout", type=float, default=120, help="give up after this many seconds")
    args = ap.parse_args()
    if not KEY:
        sys.exit("producer: set BATON_API_KEY")
    doc = sys.stdin.buffer.read() if args.job == "-" else open(args.job, "rb").read()
    job_id = submit(doc, args.idempotency_key or str(uuid.uuid4()))
    deadline = time.time() + args.timeout
    (follow_poll if args.poll else follow_sse)(job_id, deadline)
    _, _, job = request("GET", f"/jobs/{job_id}")
    print(json.dumps(job, indent=2, sort_keys=True))
    sys.exit(0 if job.get("status") == "completed" else 1)


if __name__ == "__main__":
    main()
