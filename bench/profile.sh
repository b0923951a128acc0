#!/usr/bin/env bash
# profile.sh prints CPU and allocation profiles of dogpile's hot paths, and of the closest peer
# rows, as text (issue 26, item 3; summarized in README.md, "Where the time goes").
#
# Usage: ./profile.sh > profiles.txt          (about 5 minutes; needs redis-server in $PATH)
#        ONLY=mutex ./profile.sh              (only the paths whose name matches)
#        KEEP=/tmp/prof ./profile.sh          (keep the binary and the profiles there)
#        REUSE=1 KEEP=/tmp/prof ./profile.sh  (print the summaries of the profiles kept there again)
#        REV=abc1234 ./profile.sh             (the commit to print, in a `git archive` export)
#
# Each path is one existing sub-benchmark, run from one test binary three times: with -cpuprofile;
# with -memprofile at -memprofilerate 1 (recording every allocation slows a run several times, so
# the CPU profile is taken without it); and for 2 ops, as the allocation profile's -diff_base, which
# takes the setup (keys filled, warm-up) out of the allocations. For each profile it prints pprof's
# top 25 frames (CPU by cumulative and by flat time, allocations by objects and by bytes), dogpile's
# frames alone (-show), and every sample grouped by owner: the innermost frame that is dogpile's,
# go-redis's, msgpack's, a peer library's or the harness's, with the runtime work it called
# (allocation, channels, timers). CPU in the GC's workers and assists, in the scheduler (a parked
# goroutine's thread looking for work, an idle thread woken) and in system calls is grouped apart,
# in that order, whoever called it. "per op" divides by the run's ops (a hit, a miss, a
# Lock+Unlock); the CPU profile includes the setup (a few % of its samples). A memory profile counts
# a tiny allocation (under 16 B, no pointers) only when it starts a new 16 B block, so its
# allocations per op can be below the benchmark's allocs/op.
set -euo pipefail
cd "$(dirname "$0")"
only=${ONLY:-.}
dir=${KEEP:-$(mktemp -d)}
mkdir -p "$dir"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$dir"' EXIT

# name               -test.bench pattern (one sub-benchmark)                                  CPU ops mem ops
paths='
hit-1000keys         ^BenchmarkFetchHit$/^keys=1000-G16$/^dogpile$                             200000   50000
hit-1000keys-peer    ^BenchmarkFetchHit$/^keys=1000-G16$/^go-redis$/^get\+msgpack$             200000   50000
hit-hotkey           ^BenchmarkFetchHit$/^hot-key-G16$/^dogpile$                               500000  100000
hit-hotkey-peer      ^BenchmarkFetchHit$/^hot-key-G16$/^go-redis$/^get\+msgpack$               200000   50000
hit-stale            ^BenchmarkFreshRead$/^dogpile\+stale$                                     200000   50000
miss-to-compute      ^BenchmarkMissToCompute$/^warm$/^dogpile$                                  30000    5000
mutex-G1             ^BenchmarkMutex$/^uncontended-G1-as-users-call$/^dogpile$/^lock$          100000   10000
mutex-G1-bsm         ^BenchmarkMutex$/^uncontended-G1-as-users-call$/^bsm$/^redislock$         100000   10000
mutex-G1-redsync     ^BenchmarkMutex$/^uncontended-G1-as-users-call$/^go-redsync$/^redsync$    100000   10000
mutex-G16            ^BenchmarkMutex$/^uncontended-G16-as-users-call$/^dogpile$/^lock$         200000   20000
mutex-G16-bsm        ^BenchmarkMutex$/^uncontended-G16-as-users-call$/^bsm$/^redislock$        200000   20000
mutex-G16-redsync    ^BenchmarkMutex$/^uncontended-G16-as-users-call$/^go-redsync$/^redsync$   200000   20000
near-hit-hotkey-G1   ^BenchmarkNearHit$/^hot-key-G1$/^dogpile\+near$                          5000000 1000000
near-hit-1000keys    ^BenchmarkNearHit$/^keys=1000-G16$/^dogpile\+near$                       5000000 1000000
'

# short shortens frame names: generic shapes and module paths.
short() {
	sed -E 's/go\.shape\.struct \{[^}]*\}/T/g; s#github\.com/dogpile-go/dogpile#dogpile#g;
		s#github\.com/redis/go-redis/v9#go-redis#g; s#github\.com/vmihailenco/msgpack/v5#msgpack#g;
		s#github\.com/go-redsync/redsync/v4#redsync#g; s#github\.com/bsm/redislock#redislock#g'
}

# owners reads `pprof -traces` (names shortened) and sums the samples by owner (see above), then
# by dogpile's innermost frame. -v n: ops in the run; -v cpu=1 for a CPU profile.
owners='
function val(s,  x, u) {
	x = s + 0; u = s; sub(/^-?[0-9.e+]+/, "", u)
	if (u == "ns") x /= 1e9; else if (u == "us" || u == "µs") x /= 1e6; else if (u == "ms") x /= 1e3
	else if (u == "mins") x *= 60; else if (u == "kB") x *= 1024; else if (u == "MB") x *= 1048576
	else if (u == "GB") x *= 1073741824
	return x
}
function owner(  i, f) {
	own = ""
	if (cpu) {
		for (i = 1; i <= k; i++)
			if (fr[i] ~ /^runtime\.(gcBgMarkWorker|bgsweep|bgscavenge|gcAssistAlloc)/) return "runtime: GC"
		for (i = 1; i <= k; i++)
			if (fr[i] ~ /^runtime\.(mcall|park_m|schedule|findRunnable|wakep)$/) return "runtime: scheduler"
		for (i = 1; i <= k; i++) if (fr[i] ~ /^syscall\./) return "system calls: network I/O"
	}
	for (i = 1; i <= k; i++) {
		f = fr[i]
		if (f ~ /^dogpile\/(bench|internal\/redistest)\./) return "bench harness"
		if (f ~ /^dogpile[.\/]/) { own = f; return "dogpile" }
		if (f ~ /^go-redis[.\/]/) return "go-redis"
		if (f ~ /^msgpack[.\/]/) return "msgpack"
		if (f ~ /^(redislock|redsync)[.\/]/) return "peer library"
	}
	if (fr[1] ~ /^runtime\./) return "runtime: other"
	return "other: standard library"
}
function flush(  o) {
	if (!k) return
	o = owner(); tot += v; by[o] += v
	if (own != "") { sub(/ \(inline\)$/, "", own); mine[own] += v }
	k = 0
}
function tiny(x) { x = cpu ? x * 1e6 / n * 10 : x / n; return x < 0.05 && x > -0.05 }
function show(x) { return cpu ? sprintf("%9.2f µs", x * 1e6 / n) : sprintf("%9.1f%s", x / n, unit) }
/^-+\+-+$/ { flush(); go = 1; next }
!go || /^ *[A-Za-z_:]+:  / || !NF { next }
k == 0 { v = val($1); sub(/^ *[^ ]+ +/, ""); fr[++k] = $0; next }
{ sub(/^ +/, ""); fr[++k] = $0 }
END {
	flush()
	printf "  %-32s %s per op  (share)\n", "by owner", cpu ? "CPU" : "     "
	for (o in by) if (!tiny(by[o]))
		printf "  %-32s %s  (%4.1f%%)\n", o, show(by[o]), 100 * by[o] / tot | "sort -t\\( -k2 -rn"
	close("sort -t\\( -k2 -rn")
	printf "  %-32s %s\n", "all", show(tot)
	print "  dogpile, by innermost dogpile frame:"
	for (f in mine) if (!tiny(mine[f])) printf "    %s  %s\n", show(mine[f]), f | "sort -rn | head -12"
	close("sort -rn | head -12")
}'

bin=$dir/bench.test
[ -n "${REUSE:-}" ] || go test -c -o "$bin" .
rev=$(git rev-parse --short HEAD 2>/dev/null || echo "${REV:-not a git checkout}")
dirty=$(git diff --name-only HEAD -- .. 2>/dev/null | tr '\n' ' ' || true)
[ -n "${REUSE:-}" ] || {
	echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  commit: $rev${dirty:+ + uncommitted changes to: $dirty}"
	echo "go: $(go env GOVERSION)  $(redis-server --version | cut -d' ' -f1-3)  nproc: $(nproc)" \
		" load: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$dir/header"
cat "$dir/header"
pp() { go tool pprof "$@" 2>/dev/null | sed -E '/^(File|Build ID|Type|Time):/d' | short; }
# cum keeps pprof's cumulative columns: under -show a frame's flat time includes its hidden callees.
cum() {
	awk '/^ *flat  flat%/ { print "       cum    cum%"; next }
	NF >= 6 && $2 ~ /%$/ && $5 ~ /%$/ { c = $4; p = $5; $1 = $2 = $3 = $4 = $5 = ""; sub(/^ +/, "")
		printf "%10s %7s  %s\n", c, p, $0; next }
	{ print }'
}
echo "$paths" | while read -r name re ncpu nmem; do
	[ -n "$name" ] && echo "$name" | grep -Eq -- "$only" || continue
	echo; echo "=================== $name ($re)"
	run() { "$bin" -test.run '^$' -test.bench "$re" -test.count 1 -test.benchmem "$@" | grep '^Benchmark'; }
	if [ -z "${REUSE:-}" ]; then
		run -test.benchtime "${ncpu}x" -test.cpuprofile "$dir/$name.cpu" >"$dir/$name.out"
		run -test.benchtime "${nmem}x" -test.memprofile "$dir/$name.mem" -test.memprofilerate 1 >>"$dir/$name.out"
		run -test.benchtime 2x -test.memprofile "$dir/$name.base.mem" -test.memprofilerate 1 >/dev/null
	fi
	cat "$dir/$name.out"
	echo "--- CPU, top by cumulative time";    pp -top -cum -nodecount=25 "$bin" "$dir/$name.cpu"
	echo "--- CPU, top by flat time";          pp -top -nodecount=25 "$bin" "$dir/$name.cpu"
	echo "--- CPU, dogpile's frames only, cumulative"
	mine='^github.com/dogpile-go/dogpile(/lock|/internal/(wake|near|breaker|hold|redisutil))?\.'
	pp -top -cum -nodecount=15 -show="$mine" "$bin" "$dir/$name.cpu" | cum
	echo "--- CPU, grouped"
	pp -traces "$bin" "$dir/$name.cpu" | awk -v n="$ncpu" -v cpu=1 "$owners"
	for idx in alloc_objects alloc_space; do
		mem=(-sample_index=$idx -diff_base "$dir/$name.base.mem" "$bin" "$dir/$name.mem")
		echo "--- allocations ($idx, less the 2-op base; pprof's % column is not meaningful here), top by flat"
		pp -top -nodecount=25 "${mem[@]}"
		echo "--- allocations ($idx, less the 2-op base), grouped"
		u=; [ $idx = alloc_space ] && u=B
		pp -traces "${mem[@]}" | awk -v n=$((nmem - 2)) -v unit="$u" "$owners"
	done
done
