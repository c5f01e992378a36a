#!/usr/bin/env python3
"""A pipeline task that adds rows to a buffered dataset: writes JSONL batches and buffer-publishes them.

Follows docs/contracts/buffer.md ("Where a batch may live", "The batch file", "The buffer-publish
request") over the internal dialect of docs/contracts/internal.md (task-claim, buffer-publish,
task-complete). The internal dialect is the one that fits a trusted worker writing straight into a
file:// object store: the task-scoped child of `baton worker --exec` may run as another user, who
cannot write under the server's data directory.

One run is one task, given by its id (`--task-id`, e.g. the `task_id` that
`POST /pipelines/{name}/jobs/{job}/run` answers; a real worker gets it from a wake-up):

  1. claims it                           POST $BATON_INTERNAL_URL/internal/task-claim
  2. for its first buffered output (task.outputs[].write_mode == "buffered"), writes each batch
     to <store root>/buffers/{dataset_uuid}/{task_id}/{attempt}/batch-NNNN.jsonl
  3. publishes each batch                POST $BATON_INTERNAL_URL/internal/buffer-publish
     (and, with --republish, the first one again: the server answers duplicate: true)
  4. completes                           POST $BATON_INTERNAL_URL/internal/task-complete

The rows come from the run's input (`task.trigger.input`, else `task.config`):
`{"batches": [[row, ...], ...]}`, each row an object of the dataset's columns. Without input it
writes one batch of three rows keyed by the task id.

The store root is BATON_BLOB_URL (the server's --blob-url; for `baton dev` that is
file://<data-dir>/blobs/). Only file:// stores are written here; an s3:// one needs the
credentials of /internal/task-credentials and a SigV4 client, out of scope for the standard library.

    python3 examples/python/wire/buffer_publisher.py --task-id 01a20fce-d7d2-765a-bd77-a7734fbeb277

Environment: BATON_INTERNAL_URL (default http://127.0.0.1:8081), BATON_BLOB_URL (required),
PY_WORKER_ID (default py-buffer-publisher). Prints the completion answer's `status`, and one JSON
line per publish ({"batch_uri", "answer"}) on stdout. Exit 0 when the task completed; 3 when the
claim or a fenced call was refused. Python 3.9+, standard library only.
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

BASE = os.environ.get("BATON_INTERNAL_URL", "http://127.0.0.1:8081").rstrip("/")


def log(*args):
    print("buffer-publisher:", *args, file=sys.stderr, flush=True)


def post(path, body):
    """POST to the internal listener; retries 408/5xx/network errors (honouring Retry-After).
    A 4xx is returned as (status, body) for the caller to judge."""
    delay = 0.1
    for _ in range(20):
        req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as res:
                return res.status, json.load(res)
        except urllib.error.HTTPError as err:
            raw = err.read()
            if err.code != 408 and err.code < 500:
                try:
                    return err.code, json.loads(raw)
                except ValueError:
                    return err.code, {"error": raw.decode(errors="replace")}
            wait = float(err.headers.get("Retry-After") or delay)
        except (urllib.error.URLError, OSError):
            wait = delay
        time.sleep(wait)
        delay = min(delay * 2, 5.0)
    raise SystemExit(f"{path}: no answer after 20 tries")


def fenced(path, fence, **body):
    """A fenced report; 404/409/410 mean the attempt is no longer ours (exit 3), 400 is a bug."""
    status, answer = post(path, {**fence, **body})
    if status != 200:
        log(f"{path} refused: {status} {json.dumps(answer)}; stopping")
        sys.exit(3)
    return answer


def store_dir(blob_url):
    """The local directory of a file:// store root."""
    u = urllib.parse.urlparse(blob_url)
    if u.scheme != "file":
        raise SystemExit(f"BATON_BLOB_URL {blob_url!r}: this example writes file:// stores only")
    return urllib.parse.unquote(u.path).rstrip("/")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task-id", required=True, help="the task's global id (UUID)")
    ap.add_argument("--republish", action="store_true", help="publish the first batch twice (idempotent)")
    args = ap.parse_args()
    blob_url = os.environ.get("BATON_BLOB_URL")
    if not blob_url:
        raise SystemExit("BATON_BLOB_URL is required (the server's --blob-url, file://<data-dir>/blobs/ for baton dev)")
    root = store_dir(blob_url)

    status, claim = post("/internal/task-claim", {"task_id": args.task_id,
                                                  "worker_id": os.environ.get("PY_WORKER_ID", "py-buffer-publisher")})
    if status != 200 or claim.get("status") != "Claimed":
        log(f"not claimed: {status} {json.dumps(claim)}")
        sys.exit(3)
    task = claim["task"]
    fence = {"task_id": claim["task_id"], "attempt": claim["attempt"], "lease_token": claim["lease_token"]}
    buffered = [o for o in task.get("outputs") or [] if o.get("write_mode") == "buffered"]
    if not buffered:
        fenced("/internal/task-complete", fence, status="Failed",
               error={"category": "CONFIGURATION", "message": "the task has no buffered output"})
        sys.exit(1)
    out = buffered[0]
    trigger = task.get("trigger") or {}
    spec = trigger.get("input") if isinstance(trigger.get("input"), dict) else task.get("config") or {}
    batches = spec.get("batches") or [[{"dedupe_key": f"{task['task_id']}-{i}"} for i in range(3)]]

    # The attempt's own prefix: buffers/{dataset_uuid}/{task_id}/{attempt}/ under the store root.
    # A retried attempt writes under its own prefix; rows keep their keys, so a batch published by
    # two attempts still loads its rows once.
    prefix = f"buffers/{out['dataset_uuid']}/{fence['task_id']}/{fence['attempt']}"
    os.makedirs(os.path.join(root, prefix), exist_ok=True)
    published = []
    for n, rows in enumerate(batches, 1):
        name = f"batch-{n:04d}.jsonl"
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode()
        path = os.path.join(root, prefix, name)
        with open(path + ".tmp", "wb") as f:  # write, then rename: a sink never sees half a batch
            f.write(data)
        os.replace(path + ".tmp", path)
        uri = "file://" + urllib.parse.quote(os.path.join(root, prefix, name))
        body = {"dataset_uuid": out["dataset_uuid"], "dataset_version": out["dataset_version"],
                "batch_uri": uri, "record_count": len(rows), "content_type": "application/jsonl",
                "batch_size_bytes": len(data)}
        answer = fenced("/internal/buffer-publish", fence, **body)
        print(json.dumps({"batch_uri": uri, "answer": answer}), flush=True)
        published.append(body)
    if args.republish and published:
        answer = fenced("/internal/buffer-publish", fence, **published[0])
        print(json.dumps({"batch_uri": published[0]["batch_uri"], "answer": answer}), flush=True)

    result = {"output_index": out["output_index"], "dataset_uuid": out["dataset_uuid"],
              "dataset_version": out["dataset_version"], "batches": len(published),
              "row_count": sum(b["record_count"] for b in published)}
    answer = fenced("/internal/task-complete", fence, status="Completed", outputs=[result])
    log(f"complete: {json.dumps(answer)}")
    print(json.dumps({"status": answer.get("status")}), flush=True)


if __name__ == "__main__":
    main()
