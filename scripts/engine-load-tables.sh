#!/usr/bin/env bash
# Regenerates the simulated tables of docs/engine-load.md: engine load reports against the
# router's in-flight counts on the hotspot workload, overload protection, and report age.
# Every cell is `router sim --workload hotspot --hs-requests REQUESTS` with the flags its table
# and row name, averaged over SEEDS: where in-flight-only routing piles up, one run's P99 moves
# by a factor of up to 5 from seed to seed. Markdown on stdout, each command on stderr; about
# 2 minutes on 2 cores (seeds and bound, about 1.5 and 3 minutes more).
#   scripts/engine-load-tables.sh [SECTION...]   SECTION: capacity matrix policies overload age seeds bound
#                                                (default all but seeds and bound)
#   SEEDS="1 2 3 4 5" REQUESTS=8000 GO=go        the defaults
#   MANY_SEEDS="$(seq 1 20)"                      the seeds and bound sections' many seeds
#   ENGINE_FLAGS=                                 more flags for the seeds section's engine-load runs
#                                                (e.g. --balance-uncached-token-threshold 0)
# shellcheck disable=SC2086 # flag lists are word-split on purpose: no flag holds a space
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
SEEDS=${SEEDS:-1 2 3 4 5}
REQUESTS=${REQUESTS:-8000}
MANY_SEEDS=${MANY_SEEDS:-$(seq 1 20)}
ENGINE_FLAGS=${ENGINE_FLAGS:-}
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

# The workload: hotspot, unless a section sets WL for a call.
WL="--workload hotspot --hs-requests $REQUESTS"

# sim FLAGS: one run per seed, one JSON summary each.
sim() {
	local s
	for s in $SEEDS; do
		echo "router sim $WL $1 --seed $s" >&2
		"$work/router" sim --format json $WL $1 --seed "$s" 2>/dev/null | jq -c '.levels[0] | {
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
			eng=$(SEEDS=$s sim "$c --router-replicas 4 $ENGINE_FLAGS")
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

# bound: cache_aware with 4 replicas on engine load, by --balance-uncached-token-threshold (0:
# request counts alone, sgl-router's rule): the PD cluster on the hotspot workload over
# MANY_SEEDS (P99 gain over all, over the seeds that pile up as the seeds section says and the
# smallest of theirs, mean TTFT over the others), the regular one over SEEDS (P99 gain), and
# the cache-pressure workload over SEEDS, where cache affinity is worth a lot (TTFT, output).
bound() {
	local pd=${AT80[1]} reg=${AT80[0]} s b one inf regbase
	local cp="--workload cache-pressure --regular 8 --max-total-tokens 321429 --cp-requests 1500 --rate 16 --requests 1200 --warmup 300"
	for s in $MANY_SEEDS; do
		one=$(SEEDS=$s sim "$pd --router-replicas 1 --load-report-interval 0")
		inf=$(SEEDS=$s sim "$pd --router-replicas 4 --load-report-interval 0")
		jq -n -c --argjson one "$one" --argjson inf "$inf" '{inf: $inf, piles: ($inf.p99 > 1.5 * $one.p99)}'
	done >"$work/bound-base.jsonl"
	regbase=$(cell "$reg --router-replicas 4 --load-report-interval 0")
	echo
	echo "| --balance-uncached-token-threshold | $pd --router-replicas 4, $(wc -w <<<"$MANY_SEEDS") seeds: P99 gain, all | on those that pile up (smallest) | others: mean TTFT ms | $reg --router-replicas 4: P99 gain | cache-pressure --regular 8 --rate 16 --router-replicas 4: TTFT mean, P99 ms | its output tok/s | same, 1 replica: TTFT mean, P99 ms |"
	echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
	for b in 0 16384 32768 65536 131072; do
		for s in $MANY_SEEDS; do SEEDS=$s sim "$pd --router-replicas 4 --balance-uncached-token-threshold $b"; done >"$work/bound-$b.jsonl"
		jq -r -s -j --slurpfile base "$work/bound-base.jsonl" --arg b "$b" '
			def r0: round; def r2: . * 100 | round / 100;
			def mean(f): (map(f) | add) / length;
			[range(0; length) as $i | {inf: $base[$i].inf, piles: $base[$i].piles, eng: .[$i]}] |
			(map(select(.piles))) as $p | (map(select(.piles | not))) as $o |
			"| \($b) | \(mean(.inf.p99) / mean(.eng.p99) | r2)× | \(if $p == [] then "—" else "\($p | mean(.inf.p99) / mean(.eng.p99) | r2)× (\($p | map(.inf.p99 / .eng.p99) | min | r2)×)" end) | \(if $o == [] then "—" else $o | mean(.eng.mean) | r0 end) |"' "$work/bound-$b.jsonl"
		cell "$reg --router-replicas 4 --balance-uncached-token-threshold $b" | jq -r -j --argjson base "$regbase" '" \($base.p99 / .p99 * 100 | round / 100)× |"'
		WL=$cp cell "--router-replicas 4 --balance-uncached-token-threshold $b" | jq -r -j '" \(.mean | round), \(.p99 | round) | \(.out | round) |"'
		WL=$cp cell "--router-replicas 1 --balance-uncached-token-threshold $b" | jq -r '" \(.mean | round), \(.p99 | round) |"'
	done
}

for section in $sections; do
	case $section in
	capacity | matrix | policies | overload | age | seeds | bound) $section ;;
	*)
		echo "engine-load-tables.sh: unknown section $section (capacity matrix policies overload age seeds bound)" >&2
		exit 2
		;;
	esac
done
