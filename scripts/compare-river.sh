#!/usr/bin/env bash
# compare-river.sh — River and Baton side by side on one PostgreSQL server.
#
#   scripts/compare-river.sh RIVER_BIN [TASKS]
#
# RIVER_BIN is a `river` CLI binary; River is not a dependency of Baton, so build it yourself:
#   git clone https://github.com/riverqueue/river && cd river/cmd/river &&
#   GOWORK=off GOFLAGS=-mod=mod go build -o /tmp/river .
# TASKS (default 100000) is the number of no-op jobs River works (`river bench -n TASKS`) and
# of no-op tasks Baton works (`baton bench --tasks TASKS`, work-only phase: everything
# submitted first, then worked through the Go worker SDK).
#
# The script creates two fresh databases on the server of BATON_COMPARE_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable; the user must be allowed to
# create databases), runs River's migrations and bench on one and `baton bench` on the other,
# one after the other, prints both figures and their ratio, and drops the databases.
# BATON_BENCH_FLAGS (default "--via sdk --workers 512 --batch 1") sets how Baton is driven.
set -euo pipefail

usage() {
	echo "usage: $0 RIVER_BIN [TASKS]" >&2
	exit 2
}
[ $# -ge 1 ] && [ $# -le 2 ] || usage
river=$1
tasks=${2:-100000}
[ -x "$river" ] || { echo "$0: $river is not an executable river binary" >&2; exit 2; }
[[ $tasks =~ ^[1-9][0-9]*$ ]] || { echo "$0: TASKS must be a positive integer, got $tasks" >&2; exit 2; }
command -v psql >/dev/null || { echo "$0: psql is needed to create the databases" >&2; exit 1; }

admin=${BATON_COMPARE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
bench_flags=${BATON_BENCH_FLAGS:---via sdk --workers 512 --batch 1}
cd "$(dirname "$0")/.."

# url_for DB: the admin URL with its database replaced by DB.
url_for() {
	local base=${admin%%\?*} query=
	[[ $admin == *\?* ]] && query="?${admin#*\?}"
	echo "${base%/*}/$1$query"
}

suffix=$$
river_db=compare_river_$suffix
baton_db=compare_baton_$suffix
work=$(mktemp -d)
cleanup() {
	psql -q "$admin" -c "DROP DATABASE IF EXISTS $river_db" -c "DROP DATABASE IF EXISTS $baton_db" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
psql -q -v ON_ERROR_STOP=1 "$admin" -c "CREATE DATABASE $river_db" -c "CREATE DATABASE $baton_db"

echo "building baton..." >&2
go build -o "$work/baton" ./cmd/baton

echo "river: migrate-up, bench -n $tasks" >&2
"$river" migrate-up --database-url "$(url_for "$river_db")" >/dev/null
"$river" bench --database-url "$(url_for "$river_db")" -n "$tasks" 2>&1 | tee "$work/river.out" >&2
river_rate=$(sed -n 's/.*overall job\/sec \[ *\([0-9.]*\) *\].*/\1/p' "$work/river.out" | tail -1)
[ -n "$river_rate" ] || { echo "$0: no 'overall job/sec' in river's output" >&2; exit 1; }

echo "baton: bench --tasks $tasks $bench_flags" >&2
# shellcheck disable=SC2086 # bench_flags is a list of flags
"$work/baton" bench --tasks "$tasks" $bench_flags --database-url "$(url_for "$baton_db")" --json >"$work/baton.json"
baton_rate=$(tr -d ' \n' <"$work/baton.json" | sed -n 's/.*"work_only":{[^}]*"tasks_per_second":\([0-9.]*\).*/\1/p')
baton_std=$(tr -d ' \n' <"$work/baton.json" | sed -n 's/.*"submit_to_done":{[^}]*"tasks_per_second":\([0-9.]*\).*/\1/p')
[ -n "$baton_rate" ] || { echo "$0: no work-only tasks_per_second in baton's output: $(cat "$work/baton.json")" >&2; exit 1; }

pg=$(psql -qAt "$admin" -c "SHOW server_version")
printf '\n%-40s %s\n' "PostgreSQL" "$pg"
printf '%-40s %s\n' "machine" "$(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
printf '%-40s %.0f jobs/s\n' "river bench -n $tasks (work-only)" "$river_rate"
printf '%-40s %.0f tasks/s\n' "baton bench work-only" "$baton_rate"
printf '%-40s %.0f tasks/s\n' "baton bench submit-to-done" "${baton_std:-0}"
awk -v b="$baton_rate" -v r="$river_rate" 'BEGIN { printf "%-40s %.2fx\n", "ratio (baton work-only / river)", b / r }'
