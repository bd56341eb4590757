#!/usr/bin/env bash
# test.sh is the project's test command (`make test`, run by CI through
# .ci/run): build the S3 servers (cached), then vet, check formatting and run
# every test with the race detector, integration tests included.
#
# Extra arguments replace the package list: scripts/test.sh ./integration/...
set -euo pipefail

cd "$(dirname "$0")/.."

step() { printf '== %s (%ds)\n' "$*" "$SECONDS" >&2; }

step "servers"
server_env=$(scripts/servers.sh)
eval "$server_env"

step "go mod tidy"
if ! tidy=$(go mod tidy -diff 2>&1); then
	printf 'go.mod/go.sum are not tidy; run `go mod tidy`:\n%s\n' "$tidy" >&2
	exit 1
fi

step "go vet"
go vet ./...

step "gofmt"
unformatted=$(find . -name '*.go' -not -path './.cache/*' -not -path './.git/*' -print0 | xargs -0 -r gofmt -l)
if [[ -n "$unformatted" ]]; then
	printf 'gofmt: these files need `gofmt -w`:\n%s\n' "$unformatted" >&2
	exit 1
fi

step "go test"
if (($# == 0)); then
	set -- ./...
fi
go test -race -count=1 "$@"
step "passed"
