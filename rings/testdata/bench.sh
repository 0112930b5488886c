#!/bin/sh
# Ring vs channel throughput, side by side in one run (these machines drift by
# 2x between runs, so only a same-run ratio means anything). Prints every run,
# then the median ns/op of each benchmark, the channel/ring ratios, and the
# median core-to-core handoff latency that the ring figures depend on. The bar
# in docs/rings.md is ratio >= 3.
#
# usage: sh rings/testdata/bench.sh [count]   (from the module root)
# The same without this script:
#   go test -run '^$' -bench 'Channel64B|RingBatched' -count 5 ./rings/
set -eu
count=${1:-5}
go test -run '^$' -bench 'CoreToCore|Channel64B|RingBatched' -count "$count" ./rings/ | tee /dev/stderr |
awk '
/^BenchmarkCoreToCore-/        { cc[ncc++] = $5 }
/^BenchmarkChannel64B-/        { ch[nc++] = $3 }
/^BenchmarkRingBatched-/       { rb[nr++] = $3 }
/^BenchmarkRingBatchedInPlace-/ { ri[ni++] = $3 }
function median(a, n,   i, j, t) {
	for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n - 1) / 2] : (a[n / 2 - 1] + a[n / 2]) / 2
}
END {
	if (nc == 0 || nr == 0) { print "no results"; exit 1 }
	c = median(ch, nc); r = median(rb, nr)
	printf "median Channel64B %.2f ns/op, RingBatched %.2f ns/op, ratio %.2fx\n", c, r, c / r
	if (ni > 0) { i = median(ri, ni); printf "median RingBatchedInPlace %.2f ns/op, ratio %.2fx\n", i, c / i }
	if (ncc > 0) printf "median core-to-core handoff %.1f ns\n", median(cc, ncc)
}'
