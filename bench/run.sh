#!/bin/sh
# run.sh runs the peer benchmarks in several rounds and prints dogpile's
# ratios to each peer, computed within each round (same server, same
# minute), then summarized as the median over rounds with min–max.
#
# Usage: ./run.sh [rounds]          (default 5; ROUNDS=... works too)
#        ONLY='Mutex' ./run.sh 3    (only the groups whose regexp matches)
#
# Each round builds nothing: the test binary is compiled once, then every
# group below runs with its fixed -benchtime, libraries rotated per round so
# none always runs first. Raw output goes to $OUT (default bench.out).
set -eu
cd "$(dirname "$0")"
rounds=${1:-${ROUNDS:-5}}
out=${OUT:-bench.out}
only=${ONLY:-.}
bin=$(mktemp -d)/bench.test
trap 'rm -rf "$(dirname "$bin")"' EXIT

# group regexp (a -test.bench pattern)     fixed -benchtime
groups='
^BenchmarkMutex$/^uncontended-          5000x
^BenchmarkMutex$/^contended-            1000x
^BenchmarkMutexProcs$                   1000x
^BenchmarkSemaphore$                    1000x
^BenchmarkRWMutex$                      1000x
^BenchmarkFetchHit$                     200000x
^BenchmarkStampede$                     10x
^BenchmarkHerd$                         300x
^BenchmarkRollingExpiry$                1x
^BenchmarkMissToCompute$                2000x
^BenchmarkStoreLag$                     3x
^BenchmarkFetchCommands$                5x
^BenchmarkNearHit$                      20000x
^BenchmarkNearInvalidation$             2000x
^BenchmarkFetchMany$/^hits-             1000x
^BenchmarkFetchMany$/^misses-           10x
^BenchmarkOutage$                       1x
^BenchmarkInvalidateTag$                1x
^BenchmarkCompressedHit$                2000x
^BenchmarkFreshRead$                    20000x
'

go test -c -o "$bin" .
{
	echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "redis: $(redis-server --version)"
	echo "nproc: $(nproc)"
	echo "load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo ?)"
} | tee "$out"
i=1
while [ "$i" -le "$rounds" ]; do
	echo "round: $i" | tee -a "$out"
	echo "$groups" | while read -r re bt; do
		[ -n "$re" ] || continue
		echo "$re" | grep -Eq -- "$only" || continue
		"$bin" -test.run '^$' -test.bench "$re" -test.benchtime "$bt" \
			-test.benchmem -rotate "$i" | grep '^Benchmark' | tee -a "$out"
	done
	i=$((i + 1))
done
echo
go run ./cmd/benchratio < "$out"
