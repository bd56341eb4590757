#!/usr/bin/env bash
# try-fleet.sh tries the elastic fleet as a user would: several `s3queue
# worker` processes on a file store, started, stopped and killed the way an
# operator does it, and prints what a user would time. The figures in
# docs/shards.md and docs/performance.md come from these runs.
#
#   scripts/try-fleet.sh backlog    # 8 workers (concurrency 1) started together on 160 waiting tasks of 0.3 s
#   scripts/try-fleet.sh burst      # 8 workers, 160 tasks of 0.5 s; 90 s of quiet; a burst of 80
#   scripts/try-fleet.sh idle       # 3 workers; after the fleet sleeps, submit --wait a 0.5 s task, 5 times
#   scripts/try-fleet.sh failover   # 3 dedicated workers; kill -9 one; a task every 200 ms
#
# Environment: W (workers), N (tasks), D (task seconds), TRIES and QUIET
# (idle), LOGLEVEL (the workers' log level), KEEP=1 keeps the store
# directory. It builds the binary from this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-}
tmp=$(mktemp -d /tmp/try-fleet.XXXXXX)
trap '[[ -n "${KEEP:-}" ]] || rm -rf "$tmp"' EXIT
go build -o "$tmp/s3queue" ./cmd/s3queue
bin=$tmp/s3queue
export S3QUEUE_STORE=file://$tmp/store
pids=()
stop() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null || true; pids=(); }
trap 'stop; [[ -n "${KEEP:-}" ]] || rm -rf "$tmp"' EXIT

now() { date +%s.%N; }
# start_workers N ARGS...: starts N workers w1..wN, events in $tmp/evI.jsonl.
start_workers() {
	local n=$1
	shift
	for i in $(seq "$n"); do
		S3QUEUE_WORKER_ID=w$i "$bin" worker "$@" --events "$tmp/ev$i.jsonl" --log-level "${LOGLEVEL:-warn}" 2>"$tmp/log$i" &
		pids+=($!)
	done
}
count() { cat "$tmp"/ev*.jsonl 2>/dev/null | grep -c "\"kind\":\"$1\"" || true; }
# wait_count KIND N: until the workers have published N events of KIND.
wait_count() { until (($(count "$1") >= $2)); do sleep 0.1; done; }
epoch() { date -u -d "$1" +%s.%N; }
# per_worker START: each worker's tasks and first start, relative to START.
per_worker() {
	for f in "$tmp"/ev*.jsonl; do
		local n first
		n=$(grep -c '"kind":"succeeded"' "$f" || true)
		first=$(grep -m1 '"kind":"started"' "$f" | sed 's/.*"time":"\([^"]*\)".*/\1/' || true)
		if [[ -n "$first" ]]; then
			printf '  %s: %3d tasks, first started at +%.2f s\n' "$(basename "$f" .jsonl | sed 's/ev/w/')" "$n" "$(echo "$(epoch "$first") - $1" | bc)"
		else
			printf '  %s: %3d tasks\n' "$(basename "$f" .jsonl | sed 's/ev/w/')" "$n"
		fi
	done
}
submit_n() { for _ in $(seq "$1"); do echo '{"type":"job","input":{}}'; done | "$bin" submit --batch - >/dev/null; }

case "$what" in
backlog | burst)
	W=${W:-8}
	if [[ $what == burst ]]; then D=${D:-0.5}; else D=${D:-0.3}; fi
	N=${N:-160}
	submit_n "$N"
	start=$(now)
	start_workers "$W" --concurrency 1 --exec "job=sleep $D"
	wait_count succeeded "$N"
	printf '%d workers started together on %d waiting tasks of %s s: last ended at +%.1f s (ideal %.1f s)\n' \
		"$W" "$N" "$D" "$(echo "$(now) - $start" | bc)" "$(echo "$N * $D / $W" | bc -l)"
	per_worker "$start"
	if [[ $what == burst ]]; then
		sleep 90
		: >"$tmp/mark"
		for f in "$tmp"/ev*.jsonl; do wc -l <"$f" >>"$tmp/mark"; done
		B=$((N / 2))
		start=$(now)
		submit_n "$B"
		wait_count succeeded $((N + B))
		printf 'after 90 s of quiet, a burst of %d: last ended at +%.1f s (ideal %.1f s)\n' \
			"$B" "$(echo "$(now) - $start" | bc)" "$(echo "$B * $D / $W" | bc -l)"
		i=0
		for f in "$tmp"/ev*.jsonl; do
			i=$((i + 1))
			skip=$(sed -n "${i}p" "$tmp/mark")
			printf '  %s: %d tasks of the burst\n' "$(basename "$f" .jsonl | sed 's/ev/w/')" "$(tail -n +$((skip + 1)) "$f" | grep -c '"kind":"succeeded"' || true)"
		done
	fi
	;;
idle)
	W=${W:-3}
	TRIES=${TRIES:-5}
	QUIET=${QUIET:-60}
	"$bin" submit --type job --input '{}' >/dev/null
	start_workers "$W" --exec "job=sleep 0.5"
	sleep 5
	for t in $(seq "$TRIES"); do
		sleep "$QUIET"
		asleep=no
		grep -q '"asleep":true' "$tmp"/store/fleet.json* 2>/dev/null && asleep=yes
		s=$(now)
		"$bin" submit --type job --input '{}' --wait >/dev/null
		printf 'try %d: fleet asleep: %s; submit --wait of a 0.5 s task took %.2f s\n' "$t" "$asleep" "$(echo "$(now) - $s" | bc)"
	done
	;;
failover)
	export S3QUEUE_WORKER_DEDICATED=true
	"$bin" submit --type job --input '{}' >/dev/null
	start_workers 3 --concurrency 3 --exec "job=sleep 0.1"
	sleep 8
	kill -9 "${pids[0]}"
	killed=$(now)
	for _ in $(seq 200); do
		"$bin" submit --type job --input '{}' >>"$tmp/ids"
		sleep 0.2
	done
	sleep 20
	# Each task's wait from its submit (created_at) to its claim (the
	# claimed event), and the worst, by when after the kill it came.
	cat "$tmp"/ev2.jsonl "$tmp"/ev3.jsonl | grep '"kind":"claimed"' |
		sed 's/.*"time":"\([^"]*\)".*"task_id":"\([^"]*\)".*/\2 \1/' | sort -u -k1,1 >"$tmp/claims"
	worst=0
	worst_at=0
	late=0
	while read -r id; do
		claimed=$(grep -m1 "^$id " "$tmp/claims" | cut -d' ' -f2)
		[[ -n "$claimed" ]] || { echo "  task $id never claimed"; continue; }
		created=$("$bin" get "$id" --json | sed -n 's/^  "created_at": "\(.*\)",$/\1/p')
		wait=$(echo "$(epoch "$claimed") - $(epoch "$created")" | bc)
		(($(echo "$wait > 2" | bc))) && late=$((late + 1))
		if (($(echo "$wait > $worst" | bc))); then
			worst=$wait
			worst_at=$(echo "$(epoch "$created") - $killed" | bc)
		fi
	done <"$tmp/ids"
	printf 'killed w1 (kill -9); of 200 tasks submitted after it, %d waited over 2 s for a claim;\n' "$late"
	printf 'the worst waited %.1f s (submitted %.1f s after the kill, so claimed %.1f s after it)\n' \
		"$worst" "$worst_at" "$(echo "$worst + $worst_at" | bc)"

	;;
*)
	echo "usage: $0 backlog|burst|idle|failover" >&2
	exit 2
	;;
esac
