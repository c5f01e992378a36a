# sdk-workers.sh — sourced by bench-sdks.sh and soak-sdks.sh: builds what the SDKs' bench workers
# need and names them.
#
# After `. scripts/sdk-workers.sh` (from the repository root, with fail() defined):
#   $work           a temporary directory, removed on exit, holding the baton binary
#   sdk_labels      go python typescript
#   sdk_commands    each label's worker program, for `baton bench --worker-command LABEL=CMD`
# and PYTHONPATH includes sdk/python. The TypeScript SDK is built (npm ci first, when its build
# tools are missing) when its build is missing or older than any of its sources.

command -v go >/dev/null || fail "go is needed to build baton"
command -v python3 >/dev/null || fail "python3 is needed for the Python SDK's worker"
command -v node >/dev/null || fail "node is needed for the TypeScript SDK's worker"
[ -f sdk/python/benchmarks/bench_worker.py ] || fail "no sdk/python/benchmarks/bench_worker.py in $PWD"
[ -f sdk/typescript/benchmarks/bench_worker.mjs ] || fail "no sdk/typescript/benchmarks/bench_worker.mjs in $PWD"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "building baton..." >&2
go build -o "$work/baton" ./cmd/baton

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
export PYTHONPATH="$PWD/sdk/python${PYTHONPATH:+:$PYTHONPATH}"

sdk_labels=(go python typescript)
sdk_commands=("$work/baton bench worker" "python3 sdk/python/benchmarks/bench_worker.py" "node sdk/typescript/benchmarks/bench_worker.mjs")
