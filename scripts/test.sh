#!/usr/bin/env bash
# test.sh is the project's test command (`make test`, run by CI through
# .ci/run): build the S3 servers (cached), then vet, check formatting and run
# every test with the race detector, integration tests included.
#
# Extra arguments replace the package list: scripts/test.sh ./integration/...
set -euo pipefail

cd "$(dirname "$0")/.."

step() { printf '== %s (%ds)\n' "$*" "$SECONDS" >&2; }

step "packages"
# Debian packages the tests need, installed when missing (idempotent):
# chromium for the dashboard's browser tests (integration/dashboard_test.go
# and cmd/s3queue/browser_test.go, which then fail rather than skip without
# a browser), zsh and fish for the completion scripts' tests
# (cmd/s3queue/completion_test.go).
mkdir -p .cache
missing=()
for pkg in chromium zsh fish; do
	command -v "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
	printf 'packages: installing Debian'"'"'s %s\n' "${missing[*]}" >&2
	if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >.cache/packages-install.log 2>&1; then
		printf 'packages: apt-get install %s failed (log: .cache/packages-install.log):\n' "${missing[*]}" >&2
		tail -n 20 .cache/packages-install.log >&2
		exit 1
	fi
fi
S3QUEUE_TEST_CHROMIUM=$(command -v chromium)
export S3QUEUE_TEST_CHROMIUM S3QUEUE_TEST_REQUIRE_BROWSER=1

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
go test -race -count=1 -timeout 30m "$@"
step "passed"
