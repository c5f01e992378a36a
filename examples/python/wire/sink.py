#!/usr/bin/env python3
"""A third-party sink for buffered datasets: claims batches, loads them into SQLite, commits or fails.

Follows docs/contracts/buffer.md ("POST /internal/sink/claim", "/commit", "/fail", "The batch
file", "What a sink must do"). Run the server with `--sink=false` so that its own sink leaves the
batches to this one. The loop:

  1. claim           POST $BATON_INTERNAL_URL/internal/sink/claim
                     {"max", "visibility_seconds", "wait_seconds"} (a long poll)
  2. check the URI:  only objects of the store (BATON_BLOB_URL) under buffers/ are read
  3. read the JSONL batch and validate every row against the claim's dataset.schema
     (the first bad row fails the whole batch: "row N: ...")
  4. load it in one SQLite transaction: the rows with org_id = the claim's org_id, skipping rows
     whose (org_id, unique key...) exists, and a ledger row keyed "{dataset_uuid}:{id}" holding the
     load's result (cursor, inserted, facets) — a second load of the same message (a redelivery
     after a crash, two sinks racing) changes nothing and returns the first load's result;
     the cursor is a per-dataset counter, bumped by every load that inserted rows
  5. commit          POST /internal/sink/commit {"id", "cursor", "inserted", "facets"}
     or fail         POST /internal/sink/fail {"id", "receive_count", "error"} a batch that cannot
                     be loaded as it is (bad row, missing object, a schema the table cannot serve);
                     never on our own outages (a locked database): the message is left to come back
                     when its visibility runs out.

--max-batches N stops once N distinct messages were settled (a failed batch that comes back and
is failed again counts once). A fail that answers 409 (another receive owns the message now) or 404 is dropped. Each settled
message prints one JSON line on stdout: {"id", "receive_count", "outcome": "committed" | "failed" |
"dead" | "dropped", "cursor", "inserted", "reloaded", "error"}; `reloaded` is true when the ledger
already had the load (a redelivery).

The database (--db) holds, per dataset, a table "ds_<dataset uuid without dashes>" with org_id,
the dataset's columns, _cursor and _batch_id, UNIQUE (org_id, unique key...); the ledger "loads";
the counters "cursors".

    python3 examples/python/wire/sink.py --db sink.db --max-batches 3

Environment: BATON_INTERNAL_URL (default http://127.0.0.1:8081), BATON_BLOB_URL (the server's
--blob-url, file://<data-dir>/blobs/ for `baton dev`; only file:// stores are read here).
--crash-after-load exits (status 4) right after the first load, before its commit: the message
comes back after its visibility, and the next run must commit it without loading it twice.
Python 3.9+, standard library only.
"""
import argparse
import datetime
import json
import math
import os
import re
import sqlite3
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

BASE = os.environ.get("BATON_INTERNAL_URL", "http://127.0.0.1:8081").rstrip("/")
MAX_BATCH_BYTES = 64 << 20  # Baton's own sink's limit
MAX_FACET_VALUES = 64
SQL_TYPES = {"string": "TEXT", "integer": "INTEGER", "number": "REAL", "boolean": "INTEGER",
             "timestamp": "TEXT", "json": "TEXT"}


def log(*args):
    print("sink:", *args, file=sys.stderr, flush=True)


class BadBatch(Exception):
    """The batch cannot be loaded as it is: fail it (the message's last_error)."""


def post(path, body, timeout=60):
    """POST to the internal listener. 503/5xx/408/network errors are retried with backoff,
    honouring Retry-After (commit is idempotent; a retried fail may answer 409, which is fine)."""
    delay = 0.2
    while True:
        req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as res:
                return res.status, json.load(res)
        except urllib.error.HTTPError as err:
            raw = err.read()
            if err.code != 408 and err.code < 500:
                try:
                    return err.code, json.loads(raw)
                except ValueError:
                    return err.code, {"error": raw.decode(errors="replace")}
            wait = float(err.headers.get("Retry-After") or delay)
        except (urllib.error.URLError, OSError) as err:
            log(f"{path}: {err}; retrying")
            wait = delay
        time.sleep(wait)
        delay = min(delay * 2, 10.0)


# ---- reading the batch ----------------------------------------------------------------------

def store_root(blob_url):
    u = urllib.parse.urlparse(blob_url)
    if u.scheme != "file":
        raise SystemExit(f"BATON_BLOB_URL {blob_url!r}: this example reads file:// stores only")
    return urllib.parse.unquote(u.path).rstrip("/") + "/"


def batch_path(root, uri):
    """The local path of a batch URI, only when it is an object of the store under buffers/."""
    u = urllib.parse.urlparse(uri)
    path = urllib.parse.unquote(u.path)
    if u.scheme != "file" or u.netloc not in ("", "localhost") or not path.startswith(root + "buffers/"):
        raise BadBatch(f"batch_uri {uri!r} is not an object of the store {root!r} under buffers/")
    segments = path[len(root):].split("/")
    if any(s in ("", ".", "..") for s in segments):
        raise BadBatch(f"batch_uri {uri!r} has an empty, . or .. segment")
    return path


def read_batch(path, uri):
    try:
        size = os.path.getsize(path)
        if size > MAX_BATCH_BYTES:
            raise BadBatch(f"the batch artifact is {size} bytes, over {MAX_BATCH_BYTES}: {uri}")
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise BadBatch(f"the batch artifact does not exist: {uri}")
    except IsADirectoryError:
        raise BadBatch(f"the batch artifact is a directory: {uri}")


# ---- validating rows ------------------------------------------------------------------------

RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def timestamp(v):
    """An RFC 3339 string, kept in UTC to the microsecond (as 2026-11-24T23:01:02.000000Z)."""
    m = RFC3339.match(v) if isinstance(v, str) else None
    if not m:
        return None
    y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
    micro = int(((m.group(7) or ".0")[1:] + "000000")[:6])
    z = m.group(8)
    off = datetime.timedelta(0) if z in "Zz" else \
        (1 if z[0] == "+" else -1) * datetime.timedelta(hours=int(z[1:3]), minutes=int(z[4:6]))
    try:
        t = datetime.datetime(y, mo, d, h, mi, 60 if s == 60 else s, micro, datetime.timezone(off))
    except ValueError:
        return None
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def convert(col, v):
    """The column's value for SQLite, or raise ValueError with what it must be."""
    t = col["type"]
    if t == "string":
        if not isinstance(v, str) or "\x00" in v:
            raise ValueError("must be a string")
        return v
    if t == "integer":
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
            raise ValueError("must be an integer")
        if not -(1 << 63) <= v < (1 << 63):
            raise ValueError("is out of range for a 64-bit integer")
        return int(v)
    if t == "number":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError("must be a number")
        return float(v)
    if t == "boolean":
        if not isinstance(v, bool):
            raise ValueError("must be a boolean")
        return int(v)
    if t == "timestamp":
        ts = timestamp(v)
        if ts is None:
            raise ValueError("must be an RFC 3339 timestamp")
        return ts
    if t == "json":
        return json.dumps(v, separators=(",", ":"), sort_keys=True)
    raise BadBatch(f'column "{col["name"]}" has type {t!r}, which this sink cannot store')


def no_constants(name):
    raise ValueError(f"{name} is not JSON")


def parse_rows(data, schema):
    """Every non-empty line is a row; the first bad one rejects the batch ("row N: ...", N being
    the line number in the file: blank lines are skipped but counted)."""
    cols = {c["name"]: c for c in schema["columns"]}
    needed = {c["name"] for c in schema["columns"] if c.get("required")} | set(schema["unique"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadBatch(f"the batch is not UTF-8: {err}")
    rows = []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line, parse_constant=no_constants)
        except ValueError as err:
            raise BadBatch(f"row {n}: not JSON: {err}")
        if not isinstance(obj, dict):
            raise BadBatch(f"row {n}: must be a JSON object")
        obj.pop("org_id", None)  # the tenant comes from the claim, never from the rows
        row = {}
        for name, v in obj.items():
            if name not in cols:
                raise BadBatch(f'row {n}: unknown column "{name}"')
            if v is not None:
                try:
                    row[name] = convert(cols[name], v)
                except ValueError as err:
                    raise BadBatch(f'row {n}: column "{name}" {err}')
        for name in sorted(needed):
            if row.get(name) is None:
                raise BadBatch(f'row {n}: column "{name}" is required')
        rows.append((row, obj))
    return rows


# ---- loading ----------------------------------------------------------------------------------

def open_db(path):
    db = sqlite3.connect(path, timeout=10, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("""CREATE TABLE IF NOT EXISTS loads (key TEXT PRIMARY KEY, dataset_uuid TEXT NOT NULL,
                  batch_id INTEGER NOT NULL, batch_uri TEXT NOT NULL, org_id TEXT NOT NULL, cursor INTEGER NOT NULL,
                  inserted INTEGER NOT NULL, facets TEXT NOT NULL, loaded_at TEXT NOT NULL)""")
    db.execute("CREATE TABLE IF NOT EXISTS cursors (dataset_uuid TEXT PRIMARY KEY, last_cursor INTEGER NOT NULL)")
    db.execute("CREATE TABLE IF NOT EXISTS tables (dataset_uuid TEXT PRIMARY KEY, name TEXT NOT NULL, uniq TEXT NOT NULL)")
    return db


def q(name):
    return '"' + name.replace('"', '""') + '"'


def ensure_table(db, ds):
    """The dataset's table; new columns are added, a changed unique key cannot be served."""
    schema = ds["schema"]
    table = "ds_" + ds["dataset_uuid"].replace("-", "")
    uniq = json.dumps(schema["unique"])
    got = db.execute("SELECT uniq FROM tables WHERE dataset_uuid = ?", (ds["dataset_uuid"],)).fetchone()
    if got is None:
        cols = ", ".join(f"{q(c['name'])} {SQL_TYPES.get(c['type'], 'TEXT')}" for c in schema["columns"])
        key = ", ".join(q(c) for c in ["org_id"] + schema["unique"])
        db.execute(f"CREATE TABLE IF NOT EXISTS {q(table)} (org_id TEXT NOT NULL, {cols}, "
                   f"_cursor INTEGER NOT NULL, _batch_id INTEGER NOT NULL, UNIQUE ({key}))")
        db.execute("INSERT INTO tables VALUES (?, ?, ?)", (ds["dataset_uuid"], ds.get("name") or "", uniq))
    elif got[0] != uniq:
        raise BadBatch(f"the dataset's unique key is now {uniq}, the table's is {got[0]}: this sink cannot serve it")
    have = {r[1] for r in db.execute(f"PRAGMA table_info({q(table)})")}
    for c in schema["columns"]:
        if c["name"] not in have:
            db.execute(f"ALTER TABLE {q(table)} ADD COLUMN {q(c['name'])} {SQL_TYPES.get(c['type'], 'TEXT')}")
    return table


def load(db, claim, rows):
    """One transaction: the ledger first (a message already loaded returns its first result),
    then the new rows, the cursor and the ledger row. Returns (cursor, inserted, facets, reloaded)."""
    ds = claim["dataset"]
    key = f"{ds['dataset_uuid']}:{claim['id']}"
    db.execute("BEGIN IMMEDIATE")
    try:
        got = db.execute("SELECT cursor, inserted, facets FROM loads WHERE key = ?", (key,)).fetchone()
        if got:
            db.execute("COMMIT")
            return got[0], got[1], json.loads(got[2]), True
        table = ensure_table(db, ds)
        last = db.execute("SELECT last_cursor FROM cursors WHERE dataset_uuid = ?", (ds["dataset_uuid"],)).fetchone()
        cursor = (last[0] if last else 0) + 1
        fields = set(ds.get("filter_fields") or []) & {c["name"] for c in ds["schema"]["columns"]}
        facets = {f: set() for f in fields}
        inserted = 0
        for row, raw in rows:
            names = ["org_id"] + list(row) + ["_cursor", "_batch_id"]
            values = [claim["org_id"]] + list(row.values()) + [cursor, claim["id"]]
            cur = db.execute(f"INSERT OR IGNORE INTO {q(table)} ({', '.join(q(n) for n in names)}) "
                             f"VALUES ({', '.join('?' * len(values))})", values)
            if cur.rowcount == 1:
                inserted += 1
                for f in fields:
                    if raw.get(f) is not None:
                        facets[f].add(json.dumps(raw[f], sort_keys=True))
        if inserted == 0:
            cursor, facets = 0, {}
        else:
            db.execute("INSERT INTO cursors VALUES (?, ?) ON CONFLICT (dataset_uuid) DO UPDATE SET last_cursor = ?",
                       (ds["dataset_uuid"], cursor, cursor))
            # A field with too many distinct values is left out: it may then have any value.
            facets = {f: sorted((json.loads(v) for v in vs), key=json.dumps)
                      for f, vs in sorted(facets.items()) if 0 < len(vs) <= MAX_FACET_VALUES}
        db.execute("INSERT INTO loads VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (key, ds["dataset_uuid"], claim["id"], claim["batch_uri"], claim["org_id"], cursor, inserted,
                    json.dumps(facets), datetime.datetime.now(datetime.timezone.utc).isoformat()))
        db.execute("COMMIT")
        return cursor, inserted, facets, False
    except BaseException:
        db.execute("ROLLBACK")
        raise


# ---- the loop ---------------------------------------------------------------------------------

def settle(claim, outcome, **extra):
    print(json.dumps({"id": claim["id"], "receive_count": claim["receive_count"], "outcome": outcome, **extra}),
          flush=True)


def handle(db, root, claim, crash_after_load):
    """Load one claimed message and report it. Returns True when it was settled (commit or fail
    reported), False when it was left for its visibility to run out."""
    msg = claim.get("message") or {}
    if claim["receive_count"] > 1:
        log(f"message {claim['id']}: receive {claim['receive_count']} (a redelivery)")
    try:
        if msg.get("kind") != "buffer_batch":
            raise BadBatch(f"unknown message kind {msg.get('kind')!r}")
        schema = (claim.get("dataset") or {}).get("schema") or {}
        if not schema.get("columns") or not schema.get("unique"):
            raise BadBatch("the dataset has no schema with a unique key: this sink cannot serve it")
        path = batch_path(root, claim["batch_uri"])
        rows = parse_rows(read_batch(path, claim["batch_uri"]), schema)
        cursor, inserted, facets, reloaded = load(db, claim, rows)
    except BadBatch as err:
        status, answer = post("/internal/sink/fail", {"id": claim["id"], "receive_count": claim["receive_count"],
                                                      "error": str(err)[:4000]})
        if status == 200:
            settle(claim, "dead" if answer.get("dead") else "failed", error=str(err))
        elif status in (404, 409):
            log(f"fail of message {claim['id']}: {status} {json.dumps(answer)}; dropping it")
            settle(claim, "dropped", error=str(err))
        else:
            log(f"fail of message {claim['id']}: {status} {json.dumps(answer)}")
            return False
        return True
    except sqlite3.Error as err:
        # Our own outage, not the batch's fault: do not fail it; it comes back after its visibility.
        log(f"message {claim['id']}: database error {err}; leaving it to come back")
        return False
    if crash_after_load:
        log(f"message {claim['id']}: loaded (inserted {inserted}); crashing before the commit as asked")
        os._exit(4)
    until = datetime.datetime.strptime(claim["visible_until"], "%Y-%m-%dT%H:%M:%S.%fZ")
    if datetime.datetime.now(datetime.timezone.utc) > until.replace(tzinfo=datetime.timezone.utc):
        log(f"message {claim['id']}: its visibility ran out during the load; committing anyway (any receive may)")
    body = {"id": claim["id"], "cursor": cursor, "inserted": inserted}
    if facets:
        body["facets"] = facets
    status, answer = post("/internal/sink/commit", body)
    if status == 200:
        settle(claim, "committed", cursor=cursor, inserted=inserted, reloaded=reloaded)
    elif status == 404:
        settle(claim, "dropped", error="Buffer batch not found")
    else:
        log(f"commit of message {claim['id']}: {status} {json.dumps(answer)}")
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", default="sink.db", help="the SQLite database file")
    ap.add_argument("--max-batches", type=int, default=0,
                    help="stop once this many distinct messages were settled (0: never)")
    ap.add_argument("--max", type=int, default=10, help="messages per claim (1-100)")
    ap.add_argument("--visibility", type=int, default=60, help="visibility_seconds of a claim (longer than a load)")
    ap.add_argument("--wait", type=int, default=20, help="wait_seconds of a claim (long poll, at most 30)")
    ap.add_argument("--crash-after-load", action="store_true", help="exit 4 after the first load, before its commit")
    args = ap.parse_args()
    blob_url = os.environ.get("BATON_BLOB_URL")
    if not blob_url:
        raise SystemExit("BATON_BLOB_URL is required (the server's --blob-url, file://<data-dir>/blobs/ for baton dev)")
    root = store_root(blob_url)
    db = open_db(args.db)
    settled = set()  # ids settled by this run; a failed batch that comes back counts once
    try:
        while not args.max_batches or len(settled) < args.max_batches:
            want = min(args.max, args.max_batches - len(settled)) if args.max_batches else args.max
            status, answer = post("/internal/sink/claim", {"max": want, "visibility_seconds": args.visibility,
                                                           "wait_seconds": args.wait}, timeout=args.wait + 30)
            if status != 200:
                raise SystemExit(f"claim: {status} {json.dumps(answer)}")
            for claim in answer["messages"]:
                if handle(db, root, claim, args.crash_after_load):
                    settled.add(claim["id"])
    except KeyboardInterrupt:
        pass
    log(f"settled {len(settled)} message(s)")


if __name__ == "__main__":
    main()
