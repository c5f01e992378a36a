#!/usr/bin/env python3
"""A thread worker written with the Python SDK: runs tasks named --task (default py-add) from
--queue (default: the task name), adding the input's `n` to its parents' totals.

    BATON_INTERNAL_URL=http://127.0.0.1:8081 python3 worker.py --task py-add --concurrency 4

A task's input {"n": 1, "sleep": 1.5} sleeps (the heartbeat thread keeps its lease meanwhile);
{"fail": "DATA_QUALITY"} fails it with that category. Stops on SIGTERM/SIGINT (a graceful
shutdown), or after --max-tasks outcomes were reported.
"""
import argparse
import logging
import threading
import time

import baton


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="py-add")
    ap.add_argument("--queue", action="append", help="queues in priority order (default: the task name)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tasks", type=int, default=0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="worker: %(levelname)s %(message)s")
    worker = baton.Worker(queues=args.queue or [args.task], concurrency=args.concurrency)

    @worker.task(args.task)
    def add(task: baton.Task) -> dict:
        data = task.input or {}
        time.sleep(data.get("sleep", 0))
        if data.get("fail"):
            raise baton.TaskError(data["fail"], f"{task.key}: asked to fail")
        total = data.get("n", 0) + sum((p or {}).get("total", 0) for p in task.parents.values())
        return {"by": "sdk-worker", "task": task.key, "total": total, "parents": sorted(task.parents)}

    if args.max_tasks:
        def stop_after() -> None:
            while worker.completed < args.max_tasks:
                time.sleep(0.05)
            worker.stop()
        threading.Thread(target=stop_after, daemon=True).start()
    worker.run()


if __name__ == "__main__":
    main()
