#!/usr/bin/env bash
# bench-sdks.sh — the worker SDKs side by side on one baton dev.
#
#   scripts/bench-sdks.sh [BATON BENCH FLAGS...]
#
# Builds baton (and the TypeScript SDK, when its sources are newer than its build), then runs
# `baton bench` on a `baton dev` it starts, with the work-only phase run once per worker: the Go
# SDK in process (the bench's own workers), then as programs of their own, each a no-op worker
# of $BATON_BENCH_TASK with $BATON_BENCH_CONCURRENCY slots:
#   go          baton bench worker
#   python      python3 sdk/python/benchmarks/bench_worker.py
#   typescript  node sdk/typescript/benchmarks/bench_worker.mjs
# and prints the table, one row per worker. Flags are passed to `baton bench` after the defaults
# (--tasks 20000 --workers 64), so that they can be overridden: e.g. --dag chain --job-size 10,
# --database-url URL for PostgreSQL, --json.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
	echo "$0: $*" >&2
	exit 1
}
. scripts/sdk-workers.sh

"$work/baton" bench --tasks 20000 --workers 64 \
	--worker-command "go=${sdk_commands[0]}" \
	--worker-command "python=${sdk_commands[1]}" \
	--worker-command "typescript=${sdk_commands[2]}" \
	"$@"
