#!/usr/bin/env bash
# Runs the benchmarks behind docs/benchmarks.md and prints the medians and
# the ratios each bar is judged by. Each round runs every variant once, so
# the variants being compared are measured side by side (these machines are
# noisy: compare only within one run).
#
#   scripts/bench.sh [rounds]        (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

for ((i = 1; i <= rounds; i++)); do
	echo "round $i/$rounds" >&2
	go test ./rings/ -run '^$' -bench 'CoreToCore|Channel64B|RingBatched|RingBurst|CommandRoundTrip' -count 1 | grep '^Benchmark' >>"$out" || true
	go test ./rings/ -run '^$' -bench 'RingVsChannel' -benchtime 62914560x -count 1 | grep '^Benchmark' >>"$out" || true
	go test ./tests/ -run '^$' -bench 'TCPStream' -benchtime 300x -count 1 | grep '^Benchmark' >>"$out"
	go test ./tests/ -run '^$' -bench 'Offload' -benchtime 2000x -count 1 | grep '^Benchmark' >>"$out"
	go test ./tests/ -run '^$' -bench 'RDMA' -count 1 | grep '^Benchmark' >>"$out"
done

echo
echo "raw results:"
cat "$out"
echo
# median of a metric (the value before the unit) per benchmark name
awk -v rounds="$rounds" '
function median(arr, n,    i, j, t) {
	for (i = 2; i <= n; i++) { t = arr[i]; for (j = i - 1; j >= 1 && arr[j] > t; j--) arr[j+1] = arr[j]; arr[j+1] = t }
	return (n % 2) ? arr[(n+1)/2] : (arr[n/2] + arr[n/2+1]) / 2
}
{
	name = $1; sub(/-[0-9]+$/, "", name)
	for (f = 3; f < NF; f++) {
		unit = $(f+1)
		if (unit ~ /^(ns\/op|ns\/handoff|MB\/s|Gbit\/s|host-cpu-s\/GiB|dev-cpu-s\/GiB|cpu-s\/GiB|host-copy-B\/op|chan-ns\/entry|ring-ns\/entry|burst-ns\/entry|ratio.*|.*-chunks)$/) {
			key = name " " unit
			n[key]++; v[key, n[key]] = $f
			keys[key] = 1
		}
	}
}
END {
	for (k in keys) {
		delete a; for (i = 1; i <= n[k]; i++) a[i] = v[k, i]
		med[k] = median(a, n[k])
		printf "median %-55s %12.4g  (%d runs)\n", k, med[k], n[k]
	}
	print ""
	k = "BenchmarkRingVsChannel"
	if ((k " ratio-burst") in med) printf "ring: batched ring (burst calls, every field encoded and decoded) is %.2fx the buffered channel, interleaved chunks (bar >= 3x)\n", med[k " ratio-burst"]
	if ((k " ratio") in med) printf "      one entry at a time %.2fx, fields in place %.2fx\n", med[k " ratio"], med[k " ratio-inplace"]
	if ((k " near-chunks") in med) printf "      in chunks with a near (< 100 ns) core-to-core handoff %.2fx, far %.2fx (0: no such chunk in most runs)\n", med[k " ratio-burst-near"], med[k " ratio-burst-far"]
	r = "BenchmarkChannel64B ns/op"; b = "BenchmarkRingBurst ns/op"
	if ((r in med) && (b in med)) printf "ring: separate benchmarks, channel / batched ring (burst calls) %.2fx (core-to-core handoff %g ns)\n", med[r] / med[b], med["BenchmarkCoreToCore ns/handoff"]
	r = "BenchmarkTCPStream/link-channel MB/s"; b = "BenchmarkTCPStream/nic-rings MB/s"
	if ((r in med) && (b in med)) printf "legacy TCP through the rings: %.2fx gVisor link/channel (bar >= 0.9x)\n", med[b] / med[r]
	r = "BenchmarkOffload/netstack Gbit/s"; b = "BenchmarkOffload/delegated Gbit/s"
	if ((r in med) && (b in med)) printf "delegated throughput: %.2fx the netstack pair (bar >= 2x)\n", med[b] / med[r]
	r = "BenchmarkOffload/netstack cpu-s/GiB"; b = "BenchmarkOffload/delegated host-cpu-s/GiB"
	if ((r in med) && (b in med)) printf "delegated host CPU per GiB: %.0f%% of the netstack pair total (bar <= 25%%)\n", 100 * med[b] / med[r]
	r = "BenchmarkRDMA/tcp-delegated MB/s"; b = "BenchmarkRDMA/write/64KiB MB/s"
	if ((r in med) && (b in med)) printf "64 KiB RDMA Write: %.2fx the delegated TCP stream (bar >= 0.9x)\n", med[b] / med[r]
	for (k in med) if (k ~ /^BenchmarkRDMA\/(write|read).* host-copy-B\/op$/ && med[k] != 0) printf "host copies on %s: %g (bar: 0)\n", k, med[k]
}' "$out"
