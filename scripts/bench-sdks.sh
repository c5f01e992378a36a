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
root=$PWD

fail() {
	echo "$0: $*" >&2
	exit 1
}
command -v go >/dev/null || fail "go is needed to build baton"
command -v python3 >/dev/null || fail "python3 is needed for the Python SDK's worker"
command -v node >/dev/null || fail "node is needed for the TypeScript SDK's worker"
[ -f sdk/python/benchmarks/bench_worker.py ] || fail "no sdk/python/benchmarks/bench_worker.py in $root"
[ -f sdk/typescript/benchmarks/bench_worker.mjs ] || fail "no sdk/typescript/benchmarks/bench_worker.mjs in $root"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "building baton..." >&2
go build -o "$work/baton" ./cmd/baton

# The TypeScript SDK's worker imports its build (dist/): build it when it is missing or older than
# any of its sources.
ts=sdk/typescript
if [ ! -f $ts/dist/index.js ] || [ -n "$(find $ts/src $ts/package.json $ts/tsconfig.json -newer $ts/dist/index.js -print -quit)" ]; then
	if [ ! -d $ts/node_modules ]; then
		echo "installing the TypeScript SDK's build tools (npm ci)..." >&2
		npm --prefix $ts ci --no-audit --no-fund >&2
	fi
	echo "building the TypeScript SDK..." >&2
	npm --prefix $ts run build >&2
fi

# The Python SDK's worker imports the package from the tree.
export PYTHONPATH="$root/sdk/python${PYTHONPATH:+:$PYTHONPATH}"

"$work/baton" bench --tasks 20000 --workers 64 \
	--worker-command go="$work/baton bench worker" \
	--worker-command python="python3 sdk/python/benchmarks/bench_worker.py" \
	--worker-command typescript="node sdk/typescript/benchmarks/bench_worker.mjs" \
	"$@"
