#!/usr/bin/env bash
# Regenerates the simulated tables of docs/engine-load.md: engine load reports against the
# router's in-flight counts on the hotspot workload, overload protection, and report age.
# Every cell is `router sim --workload hotspot --hs-requests REQUESTS` with the flags its table
# and row name, averaged over SEEDS: where in-flight-only routing piles up, one run's P99 moves
# by a factor of up to 5 from seed to seed. Markdown on stdout, each command on stderr; about
# 2 minutes on 2 cores.
#   scripts/engine-load-tables.sh [SECTION...]   SECTION: capacity matrix policies overload age seeds
#                                                (default all but seeds)
#   SEEDS="1 2 3 4 5" REQUESTS=8000 GO=go        the defaults
#   MANY_SEEDS="$(seq 1 20)"                      the seeds section's seeds (one row each)
# shellcheck disable=SC2086 # flag lists are word-split on purpose: no flag holds a space
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
SEEDS=${SEEDS:-1 2 3 4 5}
REQUESTS=${REQUESTS:-8000}
MANY_SEEDS=${MANY_SEEDS:-$(seq 1 20)}
sections=${*:-capacity matrix policies overload age}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
$GO build -o "$work/router" ./cmd/router

# The clusters, and the rates at ~80 % of their capacity on the workload (the capacity table)
# and above it (the overload table).
REGULAR="--regular 8"
PD="--prefill 2 --decode 4"
AT80=("$REGULAR --rate 125" "$PD --rate 53")
OVER=("$PD --rate 85" "$REGULAR --rate 250")

# sim FLAGS: one run per seed, one JSON summary each.
sim() {
	local s
	for s in $SEEDS; do
		echo "router sim --workload hotspot --hs-requests $REQUESTS $1 --seed $s" >&2
		"$work/router" sim --format json --workload hotspot --hs-requests "$REQUESTS" $1 --seed "$s" 2>/dev/null | jq -c '.levels[0] | {
			mean: .ttft_ms.mean, p50: .ttft_ms.p50, p99: .ttft_ms.p99, max: .ttft_ms.max,
			tpot: .tpot_ms.mean, out: .throughput.output_tok_s, req_s: .throughput.req_s, reqs: .requests,
			shed: (.errors_by_kind.http_503 // 0)}'
	done
}

# cell FLAGS: the runs' summaries averaged field by field.
cell() {
	sim "$1" | jq -s 'reduce .[] as $r ({}; reduce ($r | keys[]) as $k (.; .[$k] += $r[$k] / $n))' --argjson n "$(wc -w <<<"$SEEDS")"
}

# row LABEL BASE: the latency row of the summary on stdin; BASE, the in-flight-only summary
# its P99 is compared with ("": none).
row() {
	jq -r --arg l "$1" --argjson b "${2:-null}" '
		def r1: . * 10 | round / 10;
		"| \($l) | \(.mean|r1) | \(.p50|r1) | \(.p99|r1) | \(.tpot|r1) | \(.out|round) | " +
		(if $b == null then "— |" else "\(($b.p99 / .p99) * 100 | round / 100)× |" end)'
}

header() {
	echo
	echo "| $1 | TTFT mean ms | TTFT P50 ms | TTFT P99 ms | TPOT mean ms | output tok/s | P99 gain vs in-flight |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
}

capacity() {
	echo
	echo "| cluster, --rate 400 | cache_aware, engine load | cache_aware, in-flight only | round_robin |"
	echo "|---|---:|---:|---:|"
	local c line args
	for c in "$REGULAR" "$PD"; do
		line="| $c |"
		for args in "" "--load-report-interval 0" "--policy round_robin"; do
			line+=" $(cell "$c --rate 400 $args" | jq -r '.req_s * 10 | round / 10') req/s |"
		done
		echo "$line"
	done
}

matrix() {
	local c rep base
	for c in "${AT80[@]}"; do
		header "$c"
		for rep in 1 4; do
			base=$(cell "$c --router-replicas $rep --load-report-interval 0")
			row "--router-replicas $rep --load-report-interval 0 (in-flight only)" <<<"$base"
			cell "$c --router-replicas $rep" | row "--router-replicas $rep (engine load every 500ms, the default)" "$base"
		done
	done
}

policies() {
	local c pol base
	for c in "${AT80[@]}"; do
		header "$c --router-replicas 4"
		base=$(cell "$c --router-replicas 4 --load-report-interval 0")
		row "--policy cache_aware --load-report-interval 0" "$base" <<<"$base"
		cell "$c --router-replicas 4" | row "--policy cache_aware" "$base"
		for pol in least_load power_of_two round_robin; do
			cell "$c --router-replicas 4 --policy $pol --load-report-interval 0" | row "--policy $pol --load-report-interval 0" "$base"
			[[ $pol == round_robin ]] || cell "$c --router-replicas 4 --policy $pol" | row "--policy $pol" "$base"
		done
	done
}

overload() {
	echo
	echo "| cluster, offered rate, bound | requests | shed (503) | TTFT mean ms | TTFT P99 ms | TTFT max ms | output tok/s |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	local c bound
	for c in "${OVER[@]}"; do
		for bound in "" "--worker-overload-waiting-requests 32" "--worker-overload-waiting-requests 16" \
			"--worker-overload-waiting-requests 8" "--worker-overload-token-usage 0.8 --worker-overload-waiting-requests 8"; do
			cell "$c --load-report-interval 100ms $bound" | jq -r --arg l "$c ${bound:-(no bound)}" '
				"| \($l) | \(.reqs|round) | \(.shed|round) (\(.shed / .reqs * 1000 | round / 10) %) | \(.mean|round) | \(.p99|round) | \(.max|round) | \(.out|round) |"'
		done
	done
}

age() {
	local c a base
	for c in "${AT80[@]}"; do
		header "$c --router-replicas 4"
		base=$(cell "$c --router-replicas 4 --load-report-interval 0")
		row "--load-report-interval 0 (in-flight only)" <<<"$base"
		for a in 10ms 50ms 100ms 500ms 1s 2s; do
			cell "$c --router-replicas 4 --load-report-interval $a" | row "--load-report-interval $a" "$base"
		done
		cell "$c --router-replicas 4 --load-report-interval 2s --load-report-max-age-ms 5000" |
			row "--load-report-interval 2s --load-report-max-age-ms 5000" "$base"
		for a in 10ms 50ms 100ms 500ms 1s 2s; do
			cell "$c --router-replicas 4 --load-report-delay $a" | row "--load-report-delay $a" "$base"
		done
		cell "$c --router-replicas 4 --load-report-delay 2s --load-report-max-age-ms 5000" |
			row "--load-report-delay 2s --load-report-max-age-ms 5000" "$base"
	done
}

# seeds: cache_aware with 4 replicas, in-flight only against engine load, one row per seed of
# MANY_SEEDS, beside one router's in-flight-only run of the same seed. A seed "piles up" when
# the 4 replicas' in-flight-only P99 exceeds 1.5x one router's: what the replicas' blindness
# adds. Then the totals: P99 gain over every seed and over those that pile up (ratio of the
# mean P99s), mean TTFT over the others, output throughput over all.
seeds() {
	local c s one inf eng
	for c in "${AT80[@]}"; do
		echo
		echo "| $c, seed | 1 router in-flight: P99 ms | 4 replicas in-flight: mean, P99 ms | 4 replicas engine load: mean, P99 ms | P99 gain | piles up |"
		echo "|---|---:|---:|---:|---:|---|"
		for s in $MANY_SEEDS; do
			one=$(SEEDS=$s sim "$c --router-replicas 1 --load-report-interval 0")
			inf=$(SEEDS=$s sim "$c --router-replicas 4 --load-report-interval 0")
			eng=$(SEEDS=$s sim "$c --router-replicas 4")
			jq -n -c --arg s "$s" --argjson one "$one" --argjson inf "$inf" --argjson eng "$eng" \
				'{seed: $s, one: $one, inf: $inf, eng: $eng, piles: ($inf.p99 > 1.5 * $one.p99)}'
		done | jq -r -s '
			def r0: round; def r2: . * 100 | round / 100;
			def mean(f): (map(f) | add) / length;
			(.[] | "| \(.seed) | \(.one.p99|r0) | \(.inf.mean|r0), \(.inf.p99|r0) | \(.eng.mean|r0), \(.eng.p99|r0) | \(.inf.p99 / .eng.p99 | r2)× | \(if .piles then "yes" else "" end) |"),
			"",
			"All \(length) seeds: P99 gain \(mean(.inf.p99) / mean(.eng.p99) | r2)× (mean P99 \(mean(.inf.p99)|r0) → \(mean(.eng.p99)|r0) ms), output tok/s \(mean(.inf.out)|r0) → \(mean(.eng.out)|r0).",
			(map(select(.piles)) | if length > 0 then "The \(length) that pile up: P99 gain \(mean(.inf.p99) / mean(.eng.p99) | r2)× (per seed \(map(.inf.p99 / .eng.p99) | min | r2)–\(map(.inf.p99 / .eng.p99) | max | r2)×)." else "None piles up." end),
			(map(select(.piles | not)) | if length > 0 then "The \(length) others: mean TTFT \(mean(.inf.mean)|r0) → \(mean(.eng.mean)|r0) ms, P99 \(mean(.inf.p99)|r0) → \(mean(.eng.p99)|r0) ms." else "" end)'
	done
}

for section in $sections; do
	case $section in
	capacity | matrix | policies | overload | age | seeds) $section ;;
	*)
		echo "engine-load-tables.sh: unknown section $section (capacity matrix policies overload age seeds)" >&2
		exit 2
		;;
	esac
done
