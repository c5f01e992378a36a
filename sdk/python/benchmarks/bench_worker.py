#!/usr/bin/env python3
"""A no-op worker for `baton bench`: claims the tasks named $BATON_BENCH_TASK from the queue of
the same name and completes each at once with {"ok": true}, until SIGTERM.

Environment: BATON_INTERNAL_URL (the internal listener), BATON_URL and BATON_API_KEY (unused by
the worker itself; accepted so that every SDK's bench worker takes the same environment),
BATON_BENCH_TASK (the task name and queue), BATON_BENCH_CONCURRENCY (slots, default 256).
With `--profile FILE`, writes a cProfile of the run (every thread) to FILE at exit.
"""
from __future__ import annotations

import argparse
import cProfile
import logging
import os
import pstats
import sys
import threading
from typing import Any, Dict, List

import baton


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", help="write a cProfile of every thread to this file at exit")
    args = ap.parse_args()
    task = os.environ.get("BATON_BENCH_TASK", "")
    if not task:
        sys.exit("bench_worker: set BATON_BENCH_TASK")
    concurrency = int(os.environ.get("BATON_BENCH_CONCURRENCY") or 256)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    w = baton.Worker(os.environ.get("BATON_INTERNAL_URL") or None, queues=[task], concurrency=concurrency,
                     poll_wait=5.0, shutdown_grace=10.0)

    @w.task(task)
    def noop(t: baton.Task) -> Dict[str, Any]:
        return {"ok": True}

    profiles: List[cProfile.Profile] = []
    if args.profile:
        lock = threading.Lock()
        threading.setprofile(lambda *a: _start_thread_profile(profiles, lock))
        main_prof = cProfile.Profile()
        profiles.append(main_prof)
        main_prof.enable()
    w.run()
    if args.profile:
        for p in profiles:
            p.disable()
        stats = pstats.Stats(profiles[0])
        for p in profiles[1:]:
            try:
                stats.add(p)
            except TypeError:
                pass
        stats.dump_stats(args.profile)
    print(f"bench_worker: {w.completed} tasks completed", file=sys.stderr)
    return 0


def _start_thread_profile(profiles: List[cProfile.Profile], lock: threading.Lock) -> None:
    """Turns a cProfile on in the thread that just started (threading.setprofile's hook)."""
    sys.setprofile(None)
    p = cProfile.Profile()
    with lock:
        profiles.append(p)
    p.enable()


if __name__ == "__main__":
    sys.exit(main())
