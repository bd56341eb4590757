#!/usr/bin/env bash
# sim-teeth.sh shows that the simulator has teeth: for each known defect (the
# races and crash windows 1-10 of issue 8, the resharding defects 11-12 and
# the leased-membership defects 13-17 of issue 10, 18 of issue 11 (a release
# that uses an attempt), and 19-22 of issue 12 (a dependent released by its
# first parent; a worker that does not pass a task's end on; a replace that
# takes the slot from its holder; a requeue that ignores the slot), and 23-26
# of direct dispatch (issue 13: dead workers' inboxes never moved to the
# overflow; a worker that keeps running after losing its lease; a scavenger
# that never claims from the overflow; a lease taken over a TTL before
# it expires)), and 27 of pause (issue 14: a worker that reads the pause
# object at start-up only), and 29 of periodic tasks (issue 15: a scheduler
# that decides ticks by its local clock), it puts the defect back into a
# scratch copy of the tree with internal/sim/testdata/defects/N.patch (the
# smallest change that undoes the fix), and runs the simulator's seeds in
# order until one breaks an invariant.
#
#   scripts/sim-teeth.sh            # every defect, up to 300 seeds each
#   scripts/sim-teeth.sh 1 7        # only defects 1 and 7
#   SEEDS=1000 scripts/sim-teeth.sh # a larger budget
#
# It prints one line per defect: how many seeds it took and which invariant
# broke first, or that none did within the budget (a gap in the simulator).
# A patch that no longer applies says so: the code it undoes has moved, and
# the patch must be written again against it.
set -euo pipefail
cd "$(dirname "$0")/.."

SEEDS=${SEEDS:-300}
patches=internal/sim/testdata/defects
defects=("$@")
if ((${#defects[@]} == 0)); then
	defects=(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 29)
fi

work=$(mktemp -d)
trap 'git worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

for d in "${defects[@]}"; do
	git worktree remove --force "$work/tree" >/dev/null 2>&1 || true
	git worktree add --detach "$work/tree" HEAD >/dev/null 2>&1
	# The simulator as it is in this checkout, committed or not.
	cp internal/sim/*.go "$work/tree/internal/sim/"
	if ! git -C "$work/tree" apply "$PWD/$patches/$d.patch" >"$work/apply.log" 2>&1; then
		printf 'defect %-3s the patch no longer applies: %s\n' "$d" "$(head -1 "$work/apply.log")"
		continue
	fi
	out=$(cd "$work/tree" && S3QUEUE_SIM_HUNT=$SEEDS go test -v -count=1 -run '^TestHunt$' ./internal/sim 2>&1 |
		grep -E '^HUNT|^FAIL|cannot|undefined|panic' | head -3 || true)
	printf 'defect %-3s %s\n' "$d" "${out//$'\n'/ }"
done
