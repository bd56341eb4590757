#!/usr/bin/env bash
# sim-teeth.sh shows that the simulator has teeth: for each known defect
# (internal/sim/testdata/defects/N.patch; docs/reliability.md lists each one,
# the issue it belongs to and the invariant that catches it), it puts the
# defect back into a
# scratch copy of the tree with internal/sim/testdata/defects/N.patch (the
# smallest change that undoes the fix), and runs the simulator's seeds in
# order until one breaks an invariant.
#
#   scripts/sim-teeth.sh            # every defect, up to 300 seeds each
#   scripts/sim-teeth.sh 1 7        # only defects 1 and 7
#   SEEDS=1000 scripts/sim-teeth.sh # a larger budget
#   PATCHES=internal/sim/testdata/defects-blind scripts/sim-teeth.sh B1 B2
#                                   # the defects written blind (their README)
#
# It prints one line per defect: how many seeds it took and which invariant
# broke first, or that none did within the budget (a gap in the simulator).
# A patch that no longer applies says so: the code it undoes has moved, and
# the patch must be written again against it.
set -euo pipefail
cd "$(dirname "$0")/.."

SEEDS=${SEEDS:-300}
patches=${PATCHES:-internal/sim/testdata/defects}
defects=("$@")
if ((${#defects[@]} == 0)); then
	mapfile -t defects < <(ls "$patches" | sed -n 's/\.patch$//p' | sort -V)
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
	# TestHunt fails when no seed catches the defect; its HUNT line says so.
	out=$(cd "$work/tree" && S3QUEUE_SIM_HUNT=$SEEDS go test -v -count=1 -run '^TestHunt$' ./internal/sim 2>&1 |
		grep -E '^HUNT|cannot|undefined|panic|build failed' | head -3 || true)
	printf 'defect %-3s %s\n' "$d" "${out//$'\n'/ }"
done
