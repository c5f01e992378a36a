#!/usr/bin/env python3
"""An asyncio worker written with the Python SDK: `async def` handlers on one event loop, up to
--concurrency at once; the same arithmetic as worker.py. Its heartbeats run on a thread of their
own, so even a handler that blocks the loop keeps its lease; a cancelled task's handler sees
`await task.cancelled` complete.

    BATON_INTERNAL_URL=http://127.0.0.1:8081 python3 async_worker.py --task py-add
"""
import argparse
import asyncio
import logging
import threading
import time

import baton


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="py-add")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tasks", type=int, default=0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="async-worker: %(levelname)s %(message)s")
    worker = baton.AsyncWorker(queues=[args.task], concurrency=args.concurrency)

    @worker.task(args.task)
    async def add(task: baton.Task) -> dict:
        data = task.input or {}
        try:
            # Sleep, unless the task is cancelled meanwhile.
            await asyncio.wait_for(task.cancelled.wait_async(), data.get("sleep", 0))
            raise baton.TaskError(baton.CANCELLED, "cancelled while sleeping")
        except asyncio.TimeoutError:
            pass
        total = data.get("n", 0) + sum((p or {}).get("total", 0) for p in task.parents.values())
        return {"by": "sdk-async", "task": task.key, "total": total, "parents": sorted(task.parents)}

    if args.max_tasks:
        def stop_after() -> None:
            while worker.completed < args.max_tasks:
                time.sleep(0.05)
            worker.stop()
        threading.Thread(target=stop_after, daemon=True).start()
    worker.run()


if __name__ == "__main__":
    main()
