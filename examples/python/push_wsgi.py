#!/usr/bin/env python3
"""A push target written with the Python SDK, served as a WSGI application (here by the standard
library's wsgiref; any WSGI server does): Baton POSTs each task of a `runtime: push` name to it.

    baton dev --push-target py-add=http://127.0.0.1:18306/ --push-secret py-add=s3cret
    BATON_PUSH_SECRET=s3cret python3 push_wsgi.py --listen 127.0.0.1:18306

`baton.push.PushTarget` checks Baton's signature (401 otherwise), answers 202 at once, runs the
handler on a thread while another heartbeats, and reports the outcome through the callback
dialect. For another WSGI app, `baton.push.wsgi_middleware(app, secret)` adds only the check.
"""
import argparse
import logging
import os
import socketserver
import threading
import time
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import baton
from baton import push


class Quiet(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002
        logging.debug(format, *args)


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:18306")
    ap.add_argument("--task", default="py-add")
    ap.add_argument("--max-tasks", type=int, default=0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="push-wsgi: %(levelname)s %(message)s")
    target = push.PushTarget(os.environ.get("BATON_PUSH_SECRET"))

    @target.task(args.task)
    def add(task: baton.TaskScope) -> dict:
        data = task.input or {}
        time.sleep(data.get("sleep", 0))
        total = data.get("n", 0) + sum((p or {}).get("total", 0) for p in task.parents.values())
        return {"by": "sdk-push", "task": task.key, "total": total, "parents": sorted(task.parents)}

    host, port = args.listen.rsplit(":", 1)
    server = make_server(host, int(port), target.wsgi, server_class=ThreadingWSGIServer, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    logging.info("listening on http://%s", args.listen)
    ran = 0
    while not args.max_tasks or ran < args.max_tasks:
        target.done.acquire()
        ran += 1
    server.shutdown()


if __name__ == "__main__":
    main()
