#!/usr/bin/env bash
# bench.sh runs the benchmarks of integration/bench_*_test.go against MinIO
# started the way the tests start it (`make bench`): it builds the servers
# like scripts/test.sh (scripts/servers.sh, cached), then runs every
# benchmark once and keeps the output in .cache/bench/bench-TIMESTAMP.txt
# (and on stdout). docs/performance.md explains the figures.
#
#   scripts/bench.sh                   every benchmark (about 100 minutes)
#   scripts/bench.sh 'HeavyLoad|Raw'   those matching a -bench regexp
#
# Environment (see integration/bench_*_test.go):
#   S3QUEUE_BENCH_WINDOW=3m        measurement window of the workload and idle benchmarks
#   S3QUEUE_BENCH_WARMUP=2m        load before a workload benchmark's window opens
#   S3QUEUE_BENCH_SEGMENT=5m       also report the window in segments (default off)
#   S3QUEUE_BENCH_IDLE_WARMUP=10m  idle time before the idle benchmark's window (which is at least 10m)
#   S3QUEUE_BENCH_HEAVY_TASKS=3000 tasks of the heavy-load burst
#   S3QUEUE_BENCH_MEMBER_TASKS=3000 tasks of each phase of the one-member benchmark
#   S3QUEUE_BENCH_LOG=error        log level of the queue's components
set -euo pipefail

cd "$(dirname "$0")/.."

pattern=${1:-.}
step() { printf '== %s (%ds)\n' "$*" "$SECONDS" >&2; }

step "servers"
server_env=$(scripts/servers.sh)
eval "$server_env"

mkdir -p .cache/bench
out=".cache/bench/bench-$(date -u +%Y%m%dT%H%M%SZ).txt"
step "benchmarks matching '$pattern' -> $out"
{
	printf 'commit: %s%s\n' "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
		"$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
	printf 'date:   %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	printf 'host:   %s cores, %s\n' "$(nproc)" "$(uname -sr)"
} | tee "$out"
# -run '^$' skips the tests; -benchtime 1x: each benchmark runs its
# workload once (they are minutes long and ignore b.N).
status=0
go test ./integration -run '^$' -bench "$pattern" -benchtime 1x -timeout 90m 2>&1 | tee -a "$out" || status=$?
step "done: $out"
exit "$status"
