#!/usr/bin/env python3
"""Submit a job and follow it to its end with the Python SDK's producer client.

    BATON_URL=http://127.0.0.1:8080 BATON_API_KEY=... python3 producer.py job.json   # or - for stdin

Submits with an Idempotency-Key (--idempotency-key, default a fresh UUID: a retried submission
can never create a second job), follows the job over Server-Sent Events (reconnecting with
Last-Event-ID), prints the final job view as JSON and exits 0 iff the job completed.
Needs the SDK on the path: PYTHONPATH=sdk/python (or pip install ./sdk/python).
"""
import argparse
import json
import sys

import baton


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("job", help="job document (JSON file, or - for stdin)")
    ap.add_argument("--idempotency-key", default=None)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    doc = json.load(sys.stdin if args.job == "-" else open(args.job))
    with baton.Client() as client:  # BATON_URL, BATON_API_KEY
        created = client.submit(doc, idempotency_key=args.idempotency_key)
        print(f"producer: submitted {created['jobId']}: {created['totalTasks']} tasks", file=sys.stderr)
        for event in client.watch(created["jobId"], timeout=args.timeout):
            print(f"producer: {event['type']} {event.get('taskId') or ''}", file=sys.stderr)
        job = client.get_job(created["jobId"])
    print(json.dumps(job, indent=2, sort_keys=True))
    return 0 if job["status"] == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
