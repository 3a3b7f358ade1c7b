#!/usr/bin/env bash
# Regenerates the acceptance table of docs/predicted-latency.md: predicted_latency against the
# best swept cache_aware (engine load reports on, serve's default 500 ms) on PD clusters 2P+4D
# and 4P+4D, workloads multiturn, hotspot and cache-pressure at ~50 % and ~85 % of capacity, 1
# and 4 router replicas. For each cluster, workload and replica count, cache_aware's thresholds
# are swept first at the 85 % point (objective: P99 TTFT) and the winner runs both loads. Every
# cell is the mean over SEEDS. Markdown on stdout, each command on stderr; both sections took 14
# minutes on 2 cores shared with a load average of 19.
# The defaults section compares predicted_latency with cache_aware at sgl-router's default
# thresholds (engine load on) at the 85 % points.
#   scripts/predicted-latency-tables.sh [SECTION...]   SECTION: best defaults (default: both)
#   SEEDS="1 2 3" GO=go SLO=ttft=1000,tpot=25     the defaults
# shellcheck disable=SC2086 # flag lists are word-split on purpose: no flag holds a space
set -euo pipefail
sections=${*:-best defaults}
cd "$(dirname "$0")/.."
GO=${GO:-go}
SEEDS=${SEEDS:-1 2 3}
SLO=${SLO:-ttft=1000,tpot=25}
TPOT_SLO=${SLO##*tpot=}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
$GO build -o "$work/router" ./cmd/router

# Workloads, and per cluster the offered rates at ~50 % and ~85 % of capacity: the hot-spot
# and cache-pressure capacities are the completed requests/s at --rate 400 (the better of
# cache_aware and round_robin: hotspot 66 and 122, cache-pressure 6.3 and 6.5); multiturn's
# --rate starts conversations, whose turns follow their replies, and both clusters (4 decode
# servers) turn decode-bound past about 45 conversations/s (TTFT mean 108 ms at 40, 457 ms at
# 50, cache_aware, seed 1).
declare -A WL=(
	[multiturn]="--workload multiturn --conversations 1024"
	[hotspot]="--workload hotspot --hs-requests 6000"
	[cache-pressure]="--workload cache-pressure"
)
declare -A RATES=(
	["--prefill 2 --decode 4/multiturn"]="22 38"
	["--prefill 4 --decode 4/multiturn"]="22 38"
	["--prefill 2 --decode 4/hotspot"]="33 56"
	["--prefill 4 --decode 4/hotspot"]="61 104"
	["--prefill 2 --decode 4/cache-pressure"]="3.1 5.4"
	["--prefill 4 --decode 4/cache-pressure"]="3.2 5.5"
)
CLUSTERS=("--prefill 2 --decode 4" "--prefill 4 --decode 4")

# cell FLAGS: the mean over the seeds of one run's summary.
cell() {
	local s
	for s in $SEEDS; do
		echo "router sim $1 --slo $SLO --seed $s" >&2
		"$work/router" sim --format json $1 --slo "$SLO" --seed "$s" 2>/dev/null | jq -c '.levels[0] | {
			mean: .ttft_ms.mean, p99: .ttft_ms.p99, tpot99: .tpot_ms.p99, good: .goodput, req_s: .throughput.req_s, out: .throughput.output_tok_s}'
	done | jq -s 'reduce .[] as $r ({}; reduce ($r | keys[]) as $k (.; .[$k] += $r[$k] / $n))' --argjson n "$(wc -w <<<"$SEEDS")"
}

# best FLAGS: the sweep of cache_aware's thresholds at FLAGS; prints the winner's flags.
best() {
	echo "router sim sweep $1 --objective p99-ttft --vary cache_threshold=0.1,0.3,0.5,0.7 --vary balance_abs_threshold=2,8,32,64 --vary balance_rel_threshold=1.1,1.5 --seed 1" >&2
	"$work/router" sim sweep $1 --objective p99-ttft --vary cache_threshold=0.1,0.3,0.5,0.7 \
		--vary balance_abs_threshold=2,8,32,64 --vary balance_rel_threshold=1.1,1.5 --seed 1 \
		--write-config "$work/best.yaml" >/dev/null 2>&1
	awk -F': ' '$1=="cache_threshold"||$1=="balance_abs_threshold"||$1=="balance_rel_threshold" {gsub(/_/,"-",$1); printf "--%s %s ", $1, $2}' "$work/best.yaml"
}

# row LABEL POLICY SUMMARY [BASE]: one row; with BASE, the mean and P99 change against it.
row() {
	jq -rn --arg l "$1" --arg f "$2" --argjson r "$3" --argjson a "${4:-null}" '
		def r1: . * 10 | round / 10;
		def pct(x; y): ((x / y - 1) * 100 | round | tostring) + " %";
		"| \($l) | \($f) | \($r.mean|r1) | \($r.p99|r1) | \($r.tpot99|r1) | \($r.good*100|r1) % | \($r.req_s|r1) | \($r.out|round) | " +
		(if $a == null then "|" else "\(pct($r.mean; $a.mean)) / \(pct($r.p99; $a.p99)) |" end)'
}

header() {
	echo
	echo "| cluster, workload, rate, replicas | policy | TTFT mean ms | TTFT P99 ms | TPOT P99 ms | goodput ($SLO) | req/s | output tok/s | mean / P99 vs cache_aware |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
}

# compare LABEL CACHE_AWARE_FLAGS BASE CLUSTER_WORKLOAD REPLICAS RATE...: cache_aware with its
# flags against predicted_latency at BASE and each rate, two rows each.
compare() {
	local f=$1 ca=$2 base=$3 cw=$4 rep=$5 rate a p label
	shift 5
	for rate in "$@"; do
		a=$(cell "$base --rate $rate $ca")
		p=$(cell "$base --rate $rate --policy predicted_latency --tpot-slo-ms $TPOT_SLO")
		label="$cw, --rate $rate, --router-replicas $rep"
		row "$label" "$f" "$a"
		row "$label" "predicted_latency" "$p" "$a"
	done
}

# each_point SECTION: SECTION's rows at every cluster, workload and replica count.
each_point() {
	header
	local c w lo hi rep base ca
	for c in "${CLUSTERS[@]}"; do
		for w in multiturn hotspot cache-pressure; do
			read -r lo hi <<<"${RATES[$c/$w]}"
			for rep in 1 4; do
				base="${WL[$w]} $c --router-replicas $rep"
				case $1 in
				best)
					ca=$(best "$base --rate $hi")
					compare "cache_aware $ca" "$ca" "$base" "$c, $w" "$rep" "$lo" "$hi"
					;;
				defaults) compare "cache_aware (defaults)" "" "$base" "$c, $w" "$rep" "$hi" ;;
				esac
			done
		done
	done
}

for section in $sections; do
	case $section in
	best | defaults) each_point "$section" ;;
	*)
		echo "predicted-latency-tables.sh: unknown section $section (best defaults)" >&2
		exit 2
		;;
	esac
done
