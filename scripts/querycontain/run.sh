#!/usr/bin/env bash
# run.sh BATON PHASE [server flags...]: runs one phase of querycontain (memory, gone or fair; see
# main.go) against a fresh `BATON dev` on ports 18080-18081, with keys of two tenants.
# QUERYCONTAIN names the measuring program (default /tmp/querycontain).
set -euo pipefail
bin=$1; phase=$2; shift 2
dir=$(mktemp -d)
export BATON_API_KEY=qm-tenant-a-key-0123456789
$bin dev --data-dir "$dir" --listen 127.0.0.1:18080 --internal-listen 127.0.0.1:18081 "$@" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -fs http://127.0.0.1:18080/healthz >/dev/null 2>&1 && break; sleep 0.2; done
keyb=$($bin apikey create --name b --tenant other --data-dir "$dir" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
"${QUERYCONTAIN:-/tmp/querycontain}" -url http://127.0.0.1:18080 -a $BATON_API_KEY -b "$keyb" -pid $pid "$phase" || true
kill $pid; wait $pid 2>/dev/null || true
grep -i "containment\|warn\|error" "$dir/log" | head -5 || true
rm -rf "$dir"
