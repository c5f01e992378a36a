#!/usr/bin/env python3
"""Untrusted task code speaking the task-scoped dialect (/v1/task/*), run by `baton worker --exec`.

Follows docs/contracts/task-scoped.md ("How untrusted code gets its token", "Writing a client").
The trusted wrapper `baton worker --task NAME --exec 'python3 task_scoped.py'` claims a task and
runs this program once for it, as a child with a scrubbed environment: the attempt's capability
token in TRACE_TASK_CAPABILITY_TOKEN, the public URL in BATON_URL, the fence in BATON_TASK_ID,
BATON_ATTEMPT, BATON_LEASE_TOKEN, and the payload (input, dependency_outputs, ...) in the file
BATON_TASK_PAYLOAD. With only that token (no client certificate, no API key) the program:

  1. heartbeats its own attempt   POST $BATON_URL/v1/task/heartbeat
  2. a pipeline task reads the rows of each of its input datasets that are buffered
                                  GET  $BATON_URL/v1/task/datasets/{dataset_uuid}/rows
     (the rows the event that started it brought, filtered by the input's where; page by page)
     and counts them by SQL       POST $BATON_URL/v1/task/query
     (the Query Service: read-only SQL over the datasets its token lists; 501 from a server
     built without cgo, which the program notes and goes on)
  3. reports a dataset event      POST $BATON_URL/v1/task/events  (with PY_EVENT_DATASET)
  4. completes the attempt        POST $BATON_URL/v1/task/complete  (status Completed, outputs)

each with the header X-Trace-Task-Capability (and the POSTs with {task_id, attempt, lease_token}
in the body). A pipeline task's output has the dedupe_key (else the whole row) of each row it read,
by dataset name, under "rows", and the same keys as the Query Service answered them under
"queried" (null when the server has no Query Service). The
wrapper reports the outcome again when the child exits; the server answers that as a duplicate of
the completion already made, so the stored output is this program's. One run is one task (the
wrapper starts a new child per task). 401/403/409/410/404 stop it (exit 3).

    baton worker --task py-scoped --exec 'python3 examples/python/wire/task_scoped.py'

Environment (set by the wrapper): the variables above; optional PY_EVENT_DATASET, the uuid of a
dataset of the task's tenant to report the event on (an event may name no other; without it no
event is reported), e.g. `--child-env PY_EVENT_DATASET=<uuid>`. Python 3.9+, standard library only.
"""
import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request


def log(*args):
    print("task-scoped:", *args, file=sys.stderr, flush=True)


def claims(token):
    """The token's claims are readable (not encrypted); docs allow reading the fence from them."""
    part = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


TOKEN = os.environ["TRACE_TASK_CAPABILITY_TOKEN"]
BASE = os.environ.get("BATON_URL", "http://127.0.0.1:8080").rstrip("/")
_c = {} if "BATON_TASK_ID" in os.environ else claims(TOKEN)
FENCE = {"task_id": os.environ.get("BATON_TASK_ID") or _c["task_id"],
         "attempt": int(os.environ.get("BATON_ATTEMPT") or _c["attempt"]),
         "lease_token": os.environ.get("BATON_LEASE_TOKEN") or _c["lease_token"]}


def call(what, **body):
    """POST /v1/task/<what>; retries 408/5xx/network errors (honouring Retry-After); a refusal
    (401, 403, 404, 409, 410) means this attempt is not ours to report on: stop."""
    global TOKEN
    delay = 0.1
    while True:
        req = urllib.request.Request(f"{BASE}/v1/task/{what}", data=json.dumps({**FENCE, **body}).encode(),
                                     method="POST", headers={"X-Trace-Task-Capability": TOKEN,
                                                             "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as res:
                answer = json.load(res)
                if answer.get("capability_token"):
                    TOKEN = answer["capability_token"]  # renewed past half its life
                return answer
        except urllib.error.HTTPError as err:
            raw = err.read()
            if err.code != 408 and err.code < 500:
                log(f"/v1/task/{what} refused: {err.code} {raw.decode(errors='replace')}; stopping")
                sys.exit(3)
            wait = float(err.headers.get("Retry-After") or delay)
        except (urllib.error.URLError, OSError):
            wait = delay
        time.sleep(wait)
        delay = min(delay * 2, 10.0)


def read_rows(dataset_uuid):
    """Every row of one input dataset that this task may read, oldest first: GET
    /v1/task/datasets/{dataset}/rows with the token, following next_after. A dataset that is not
    buffered keeps no rows in Baton (400): None."""
    rows, after, delay = [], None, 0.1
    while True:
        query = "?limit=100" + (f"&after={after}" if after is not None else "")
        req = urllib.request.Request(f"{BASE}/v1/task/datasets/{dataset_uuid}/rows{query}",
                                     headers={"X-Trace-Task-Capability": TOKEN})
        try:
            with urllib.request.urlopen(req, timeout=30) as res:
                page = json.load(res)
        except urllib.error.HTTPError as err:
            raw = err.read().decode(errors="replace")
            if err.code == 400:
                log(f"rows of {dataset_uuid}: {raw}")
                return None
            if err.code != 408 and err.code < 500:
                log(f"rows of {dataset_uuid} refused: {err.code} {raw}; stopping")
                sys.exit(3)
            time.sleep(float(err.headers.get("Retry-After") or delay))
            delay = min(delay * 2, 10.0)
            continue
        except (urllib.error.URLError, OSError):
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
            continue
        rows += page["rows"]
        if page["next_after"] is None:
            return rows
        after = page["next_after"]


def query_keys(dataset_uuid):
    """The dedupe keys of a buffered input's rows through the Query Service: POST /v1/task/query
    with the fence and the token. The server applies the input's where, as for the rows. None
    when the server was built without the Query Service (501 query_unavailable)."""
    sql = f'SELECT dedupe_key FROM "{dataset_uuid}" ORDER BY dedupe_key'
    req = urllib.request.Request(f"{BASE}/v1/task/query", data=json.dumps({**FENCE, "sql": sql}).encode(),
                                 method="POST", headers={"X-Trace-Task-Capability": TOKEN,
                                                         "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as res:
            return [row[0] for row in json.load(res)["rows"]]
    except urllib.error.HTTPError as err:
        raw = err.read().decode(errors="replace")
        if err.code == 501:
            log(f"no Query Service on this server: {raw}")
            return None
        log(f"/v1/task/query refused: {err.code} {raw}; stopping")
        sys.exit(3)


def handle(key, data, deps):
    """The work: add the input's `n` to the parents' totals. A parent completed through this
    dialect (or the internal one) has the output {"outputs": [...]}."""
    data = data if isinstance(data, dict) else {}
    time.sleep(data.get("sleep", 0))
    totals = [o.get("total", 0) for d in deps.values() for o in (d or {}).get("outputs", [])]
    return {"by": "task-scoped", "task": key, "total": data.get("n", 0) + sum(totals), "parents": sorted(deps)}


def main():
    with open(os.environ["BATON_TASK_PAYLOAD"]) as f:
        payload = json.load(f)
    answer = call("heartbeat")
    log(f"heartbeat: {json.dumps(answer)}")
    if answer.get("should_cancel"):
        call("complete", status="Canceled")
        return
    result = handle(payload["task_key"], payload.get("input"), payload.get("dependency_outputs") or {})
    if (payload.get("job") or {}).get("pipeline_version"):
        # A pipeline task: its inputs are the datasets it reads.
        result["rows"], result["queried"] = {}, {}
        for inp in payload.get("inputs") or []:
            rows = read_rows(inp["dataset_uuid"])
            if rows is not None:
                name = inp.get("dataset_name") or inp["dataset_uuid"]
                result["rows"][name] = [r.get("dedupe_key", r) for r in rows]
                log(f"read {len(rows)} rows of {name}")
                result["queried"][name] = query_keys(inp["dataset_uuid"])
    dataset = os.environ.get("PY_EVENT_DATASET")
    if dataset:
        answer = call("events", events=[{"dataset_uuid": dataset, "dataset_version": "v1", "cursor": result["total"]}])
        log(f"events: {json.dumps(answer)}")
    else:
        log("no PY_EVENT_DATASET: no event reported")
    answer = call("complete", status="Completed", outputs=[result])
    log(f"complete: {json.dumps(answer)}")
    # Nothing is printed on stdout: the wrapper's own report after the exit is then a duplicate
    # of this completion, and the stored output is the one completed here.


if __name__ == "__main__":
    main()
