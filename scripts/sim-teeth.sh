#!/usr/bin/env bash
# sim-teeth.sh shows that the simulator has teeth: for each known defect of
# issue 8 (the races and crash windows 1-10), it puts the defect back into a
# scratch copy of the tree, by reverse-applying the non-test part of the
# commits that fixed it (their subjects start with "fix #8.N"), and runs the
# simulator's seeds in order until one breaks an invariant.
#
#   scripts/sim-teeth.sh            # every defect, up to 300 seeds each
#   scripts/sim-teeth.sh 1 7        # only defects 1 and 7
#   SEEDS=1000 scripts/sim-teeth.sh # a larger budget
#
# It prints one line per defect: how many seeds it took and which invariant
# broke first, or that none did within the budget (a gap in the simulator).
set -euo pipefail
cd "$(dirname "$0")/.."

SEEDS=${SEEDS:-300}
defects=("$@")
if ((${#defects[@]} == 0)); then
	defects=(1 2 3 4 5 6 7 8 9 10)
fi

# Fixes that later commits built on: reintroducing the defect takes them out too.
declare -A also=([3]="10b")

work=$(mktemp -d)
trap 'git worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

commits_of() { # the commits whose subject starts with "fix #8.$1:" or "fix #8.$1 (", newest first
	git log --format='%H %s' | awk -v n="$1" '$2 == "fix" && ($3 == "#8." n ":" || ($3 == "#8." n && $4 ~ /^\(/)) { print $1 }'
}

for d in "${defects[@]}"; do
	git worktree remove --force "$work/tree" >/dev/null 2>&1 || true
	git worktree add --detach "$work/tree" HEAD >/dev/null 2>&1
	ids=""
	for n in $d ${also[$d]:-}; do
		ids="$ids $(commits_of "$n")"
	done
	if [[ -z "${ids// /}" ]]; then
		printf 'defect %-3s no commit found\n' "$d"
		continue
	fi
	ok=1
	for c in $ids; do
		git -C "$work/tree" show --format= "$c" -- . ':(exclude)*_test.go' ':(exclude)docs/*' ':(exclude)*.md' >"$work/fix.patch"
		[[ -s "$work/fix.patch" ]] || continue # a commit of tests alone
		if ! git -C "$work/tree" apply -R --3way "$work/fix.patch" >"$work/apply.log" 2>&1; then
			ok=0
			printf 'defect %-3s could not be put back (commit %s no longer reverses cleanly)\n' "$d" "${c:0:8}"
			break
		fi
	done
	((ok)) || continue
	out=$(cd "$work/tree" && S3QUEUE_SIM_HUNT=$SEEDS go test -count=1 -run '^TestHunt$' ./internal/sim 2>&1 | grep -E '^HUNT|FAIL|cannot|undefined' | head -3 || true)
	printf 'defect %-3s %s\n' "$d" "${out//$'\n'/ }"
done
