#!/usr/bin/env bash
# soak-sdks.sh — each worker SDK under a steady load for a while: does its memory stay flat?
#
#   scripts/soak-sdks.sh [MINUTES]
#
# For the Go SDK's (baton bench worker), the Python SDK's and the TypeScript SDK's bench worker
# in turn, runs `baton bench --soak MINUTES` (default 10) on a `baton dev` of its own: jobs of
# BATON_SOAK_JOB_SIZE (default 10) no-op tasks submitted at a steady BATON_SOAK_RATE (default 200)
# tasks per second, the worker's resident memory sampled every 2 s. Each prints its RSS after the
# first minute, at the end and their ratio, and fails when the end is more than
# BATON_SOAK_MAX_GROWTH (default 10) percent above the first minute. The script goes on with the
# next language after a failure, prints a summary, and exits 1 if any failed. BATON_SOAK_FLAGS
# adds flags to every `baton bench` (e.g. --workers 16); BATON_SOAK_SDKS names the workers to soak
# (default "go python typescript"; e.g. two runs of the script side by side, one per SDK). A soak of a few minutes or more is run by
# hand, never in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
	echo "usage: $0 [MINUTES]" >&2
	exit 2
}
[ $# -le 1 ] || usage
minutes=${1:-10}
[[ $minutes =~ ^[1-9][0-9]*$ ]] || { echo "$0: MINUTES must be a positive integer, got $minutes" >&2; exit 2; }
[ "$minutes" -ge 2 ] || { echo "$0: MINUTES must be at least 2: the soak compares the end with the first minute" >&2; exit 2; }
rate=${BATON_SOAK_RATE:-200}
job_size=${BATON_SOAK_JOB_SIZE:-10}
max_growth=${BATON_SOAK_MAX_GROWTH:-10}
read -r -a extra <<<"${BATON_SOAK_FLAGS:-}"

fail() {
	echo "$0: $*" >&2
	exit 1
}
. scripts/sdk-workers.sh
labels=("${sdk_labels[@]}")
commands=("${sdk_commands[@]}")
wanted=" ${BATON_SOAK_SDKS:-${labels[*]}} "
for w in $wanted; do
	[[ " ${labels[*]} " == *" $w "* ]] || fail "BATON_SOAK_SDKS: unknown worker $w (known: ${labels[*]})"
done
summary=()
failed=0
for i in "${!labels[@]}"; do
	label=${labels[$i]}
	[[ $wanted == *" $label "* ]] || continue
	echo "== $label: ${minutes}m at $rate tasks/s" >&2
	if "$work/baton" bench --soak "${minutes}m" --rate "$rate" --job-size "$job_size" --soak-max-growth "$max_growth" \
		--worker-command "$label=${commands[$i]}" "${extra[@]}" | tee "$work/$label.out"; then
		verdict=ok
	else
		verdict=FAILED
		failed=1
	fi
	ratio=$(sed -n 's/^end \/ baseline *//p' "$work/$label.out")
	summary+=("$(printf '%-12s %-7s %s' "$label" "$verdict" "${ratio:-no result}")")
	echo
done
echo "soak ${minutes}m at $rate tasks/s, end / first minute:"
printf '%s\n' "${summary[@]}"
exit $failed
