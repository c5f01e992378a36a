#!/usr/bin/env bash
# pg-profile.sh — where a command's time goes inside PostgreSQL: wait events and statements.
#
#   scripts/pg-profile.sh DATABASE_URL COMMAND [ARGS...]
#
# Runs COMMAND (e.g. `baton bench --database-url DATABASE_URL ...`) while one psql session samples
# pg_stat_activity every 20 ms (`\watch`: one connection, one query per sample), then prints:
#   - the busy backends' states and wait events, as a share of all samples of active backends
#     ("CPU" where an active backend waits on nothing: it runs or waits for the CPU);
#   - the CPU seconds the postgres processes used while COMMAND ran (from /proc; root or the
#     postgres user may read them), beside the machine's;
#   - with the pg_stat_statements extension loaded (shared_preload_libraries), the statements by
#     total execution time over the run (reset first), with their calls and rows.
# Only backends of DATABASE_URL's database are sampled. The sampler costs a few percent of a
# core. PostgreSQL's own wait-event sampling of this kind is what pg_wait_sampling does; this
# needs nothing installed.
set -euo pipefail

usage() {
	echo "usage: $0 DATABASE_URL COMMAND [ARGS...]" >&2
	exit 2
}
[ $# -ge 2 ] || usage
url=$1
shift
command -v psql >/dev/null || { echo "$0: psql is needed" >&2; exit 1; }
db=$(psql -qAt "$url" -c "SELECT current_database()") || { echo "$0: cannot connect to $url" >&2; exit 1; }

work=$(mktemp -d)
sampler=
cleanup() {
	[ -n "$sampler" ] && kill "$sampler" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

statements=false
if psql -qAt "$url" -c "SELECT pg_stat_statements_reset()" >/dev/null 2>&1; then
	statements=true
elif psql -qAt "$url" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null 2>&1; then
	statements=true
fi

# postgres_ticks: the CPU ticks (user + system) of every postgres process alive now.
postgres_ticks() {
	local sum=0 pid stat
	for pid in $(pgrep -x postgres 2>/dev/null; pgrep -f '^postgres: ' 2>/dev/null); do
		stat=$(cut -d' ' -f14,15 "/proc/$pid/stat" 2>/dev/null) || continue
		sum=$((sum + ${stat% *} + ${stat#* }))
	done
	echo "$sum"
}
machine_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }

psql -qAtX "$url" -v db="$db" >"$work/samples" 2>/dev/null <<'SQL' &
SELECT coalesce(wait_event_type, 'CPU') || '|' || coalesce(wait_event, 'CPU') || '|' || state
FROM pg_stat_activity
WHERE datname = :'db' AND state <> 'idle' AND pid <> pg_backend_pid() AND backend_type = 'client backend'
\watch 0.02
SQL
sampler=$!

pg0=$(postgres_ticks)
m0=$(machine_ticks)
start=$(date +%s.%N)
status=0
"$@" || status=$?
end=$(date +%s.%N)
pg1=$(postgres_ticks)
m1=$(machine_ticks)
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
sampler=

hz=$(getconf CLK_TCK)
echo
echo "== PostgreSQL while the command ran ($(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", e - s }') s)"
awk -v p=$((pg1 - pg0)) -v m=$((m1 - m0)) -v hz="$hz" -v n="$(nproc)" 'BEGIN {
	printf "CPU of the postgres processes: %.1f s (backends that ended during the run are not counted); of the machine: %.1f s of %d CPUs\n", p / hz, m / hz, n }'
total=$(grep -c . "$work/samples" || true)
if [ "$total" -gt 0 ]; then
	echo
	echo "wait events of the active backends (share of $total samples of an active backend):"
	grep . "$work/samples" | sort | uniq -c | sort -rn | head -15 |
		while read -r n sample; do
			IFS='|' read -r type event state <<<"$sample"
			awk -v n="$n" -v t="$total" -v type="$type" -v event="$event" -v state="$state" \
				'BEGIN { printf "  %5.1f%%  %-8s %-24s %s\n", n * 100 / t, type, event, state }'
		done
fi
if $statements; then
	echo
	echo "statements by total execution time (pg_stat_statements, reset before the run):"
	psql -qX "$url" -P pager=off <<'SQL'
SELECT round(total_exec_time::numeric, 0) AS total_ms, calls, rows,
       round((total_exec_time / greatest(calls, 1))::numeric, 3) AS mean_ms,
       left(regexp_replace(query, '\s+', ' ', 'g'), 110) AS statement
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time DESC LIMIT 15;
SQL
else
	echo
	echo "(no pg_stat_statements: add it to shared_preload_libraries and restart PostgreSQL for the statements)"
fi
exit "$status"
