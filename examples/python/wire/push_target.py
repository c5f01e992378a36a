#!/usr/bin/env python3
"""A Baton push target: receives task envelopes over HTTP and reports through the callback dialect.

Follows docs/contracts/push.md (the envelope, "How the target answers", "Authenticating Baton")
and docs/contracts/callback.md ("Writing a client"). Baton runs tasks submitted with
"runtime": "push" by POSTing an envelope to the target configured for the task's name:

    BATON_API_KEY=... baton dev --push-target py-push=http://127.0.0.1:18305/run \
        --push-secret py-push=s3cret-for-examples
    BATON_PUSH_SECRET=s3cret-for-examples python3 push_target.py --listen 127.0.0.1:18305

The target checks the bearer secret, the Baton-Timestamp and the HMAC-SHA256 Baton-Signature over
the raw body (401 otherwise), deduplicates deliveries on Idempotency-Key, answers 202 at once, and
then runs the task in a thread: POST {callbackBaseUrl}/v1/tasks/{taskId}/started, heartbeats every
heartbeatIntervalMs, and /completed with SUCCEEDED and the output (or FAILED with a category),
each with Authorization: Bearer <taskToken>. 409/410 from a callback abort the task.

Environment: BATON_PUSH_SECRET (no secret: deliveries are not authenticated; use one).
Python 3.9+, standard library only.
"""
import argparse
import hashlib
import hmac
import http.server
import json
import os
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request

SECRET = os.environ.get("BATON_PUSH_SECRET", "")
WORKER_ID = f"py-push-{os.getpid()}"
seen, seen_lock = set(), threading.Lock()
done = threading.Semaphore(0)


def log(*args):
    print("push-target:", *args, file=sys.stderr, flush=True)


def verify(headers, body, secret, tolerance=300):
    """docs/contracts/push.md#authenticating-baton: bearer secret, fresh timestamp, v1= HMAC."""
    auth = headers.get("Authorization", "")
    ts = headers.get("Baton-Timestamp", "")
    sig = headers.get("Baton-Signature", "")
    if not hmac.compare_digest(auth.encode(), b"Bearer " + secret.encode()):
        return False
    if not ts.isdigit() or abs(time.time() - int(ts)) > tolerance:
        return False
    mac = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(sig.encode(), ("v1=" + mac).encode())


class TaskError(Exception):
    def __init__(self, category, message):
        super().__init__(message)
        self.category = category


def handle(key, data, deps):
    """The work: add the input's `n` to the parents' totals (a parent's output may be null)."""
    data = data or {}
    time.sleep(data.get("sleep", 0))
    if data.get("fail"):
        raise TaskError(data["fail"], f"{key}: asked to fail")
    total = data.get("n", 0) + sum((d or {}).get("total", 0) for d in deps.values())
    return {"by": "push", "task": key, "total": total, "parents": sorted(deps)}


def callback(env, token, what, body):
    """POST {callbackBaseUrl}/v1/tasks/{taskId}/{what}; retries 408/429/5xx/network errors."""
    url = f"{env['callbackBaseUrl']}/v1/tasks/{env['taskId']}/{what}"
    payload = json.dumps({"attempt": env["attempt"], "attemptId": env["attemptId"],
                          "workerId": WORKER_ID, **body}).encode()
    delay = 0.1
    while True:
        req = urllib.request.Request(url, data=payload, method="POST", headers={
            "Authorization": "Bearer " + token["value"], "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as res:
                return res.status, json.load(res)
        except urllib.error.HTTPError as err:
            raw = err.read()
            if err.code not in (408, 429) and err.code < 500:
                return err.code, json.loads(raw or b"{}")
            wait = float(err.headers.get("Retry-After") or delay)
        except (urllib.error.URLError, OSError):
            wait = delay
        time.sleep(wait)
        delay = min(delay * 2, 10.0)


def heartbeat(env, token, stop, lost):
    while not stop.wait(env["heartbeatIntervalMs"] / 1000):
        status, answer = callback(env, token, "heartbeat", {})
        if status != 200:
            log(f"heartbeat refused: {status} {answer}; aborting {env['taskKey']}")
            lost.set()
            return
        if answer.get("taskToken"):
            token["value"] = answer["taskToken"]  # refreshed past half its life
        if answer.get("shouldCancel"):
            log(f"{env['taskKey']}: cancellation requested; this short example finishes and reports")


def run(env):
    token = {"value": env["taskToken"]}
    status, answer = callback(env, token, "started", {})
    if status != 200:
        log(f"{env['taskKey']}: started refused: {status} {answer}; not running it")
        return
    stop, lost = threading.Event(), threading.Event()
    beat = threading.Thread(target=heartbeat, args=(env, token, stop, lost), daemon=True)
    beat.start()
    try:
        body = {"outcome": "SUCCEEDED", "output": handle(env["taskKey"], env["input"], env["dependencyOutputs"])}
    except Exception as exc:
        body = {"outcome": "FAILED", "error": {"category": getattr(exc, "category", "USER_CODE"),
                                               "message": str(exc), "stackTrace": traceback.format_exc()}}
    finally:
        stop.set()
        beat.join()
    if not lost.is_set():
        status, answer = callback(env, token, "completed", body)
        log(f"{env['taskName']} ({env['taskKey']}, attempt {env['attempt']}): {status} {json.dumps(answer)}")
    done.release()


class Target(http.server.BaseHTTPRequestHandler):
    def answer(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="baton-push"')
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if SECRET and not verify(self.headers, body, SECRET):
            return self.answer(401, {"error": "not a delivery signed by Baton"})
        key = self.headers.get("Idempotency-Key", "")
        with seen_lock:
            duplicate = key in seen
            seen.add(key)
        self.answer(202, {"accepted": True, "duplicate": duplicate})
        if not duplicate:
            threading.Thread(target=run, args=(json.loads(body),), daemon=True).start()

    def log_message(self, fmt, *args):
        log(fmt % args)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", default=os.environ.get("PUSH_LISTEN", "127.0.0.1:18305"), help="HOST:PORT")
    ap.add_argument("--max-tasks", type=int, default=0, help="stop after N tasks ran (0: never)")
    args = ap.parse_args()
    if not SECRET:
        log("warning: BATON_PUSH_SECRET is not set; accepting unauthenticated deliveries")
    host, port = args.listen.rsplit(":", 1)
    server = http.server.ThreadingHTTPServer((host, int(port)), Target)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log(f"listening on http://{args.listen}")
    ran = 0
    while args.max_tasks == 0 or ran < args.max_tasks:
        done.acquire()
        ran += 1
    server.shutdown()
    log(f"stopping after {ran} tasks")


if __name__ == "__main__":
    main()
