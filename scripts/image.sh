#!/usr/bin/env bash
# image.sh builds the s3queue container image from the current source,
# without a registry, and prints on stdout the environment that names it:
#
#   export S3QUEUE_TEST_IMAGE=s3queue-test/s3queue:<hash>
#
# scripts/servers.sh calls it when a Docker engine answers, so every
# `make test` runs the integration tests against an image of the code under
# test. Progress goes to stderr.
#
# The image is deploy/Dockerfile.scratch: a static s3queue (CGO_ENABLED=0,
# built here, so the Go build cache makes a warm run take seconds), a static
# POSIX shell as /bin/sh (mvdan.cc/sh's gosh, pinned, cached in .cache/bin,
# for `worker --exec`), the host's CA bundle and an empty /tmp. The tag is a
# hash of those files: an unchanged binary reuses the image, a changed one
# gets a new tag, and the tests never run a stale image.
#
# Also usable alone: `scripts/image.sh` builds and tags the image, and
# S3QUEUE_IMAGE_TAG=s3queue:local adds a second tag (deploy/compose-up.sh).
set -euo pipefail

cd "$(dirname "$0")/.."

GOSH_PKG=mvdan.cc/sh/v3/cmd/gosh
GOSH_VERSION=v3.14.1
CA_BUNDLE=${S3QUEUE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

CACHE="$PWD/.cache"
BIN="$CACHE/bin"
LOGS="$CACHE/logs"
mkdir -p "$BIN" "$LOGS" "$CACHE/docker"

log() { printf 'image: %s\n' "$*" >&2; }

if [[ ! -r "$CA_BUNDLE" ]]; then
	log "no CA bundle at $CA_BUNDLE (set S3QUEUE_CA_BUNDLE): HTTPS endpoints need one"
	exit 1
fi

# The shell, once per version, as servers.sh builds the servers.
stamp="$BIN/gosh.version" want="$GOSH_PKG@$GOSH_VERSION"
if [[ ! -x "$BIN/gosh" || ! -f "$stamp" || "$(<"$stamp")" != "$want" ]]; then
	log "building gosh $GOSH_VERSION (static /bin/sh of the image)"
	tmp=$(mktemp -d "$BIN/.build-gosh.XXXXXX")
	if ! CGO_ENABLED=0 GOBIN="$tmp" go install "$want" >"$LOGS/gosh-build.log" 2>&1; then
		log "building gosh failed:"
		tail -n 30 "$LOGS/gosh-build.log" >&2
		rm -rf "$tmp"
		exit 1
	fi
	mv -f "$tmp/gosh" "$BIN/gosh"
	rm -rf "$tmp"
	printf '%s\n' "$want" >"$stamp"
fi

ctx=$(mktemp -d "$CACHE/docker/s3queue.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
# -trimpath and no VCS stamp: the same source gives the same bytes, so the
# same tag, wherever the work tree lives.
version=dev
if rev=$(git rev-parse --short HEAD 2>/dev/null); then
	version="dev-$rev"
	if [[ -n "$(git status --porcelain -- . ':!.cache' 2>/dev/null)" ]]; then
		version+="-dirty"
	fi
fi
if ! CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=$version" \
	-o "$ctx/s3queue" ./cmd/s3queue 2>"$LOGS/s3queue-build.log"; then
	log "building s3queue failed:"
	cat "$LOGS/s3queue-build.log" >&2
	exit 1
fi
cp "$BIN/gosh" "$ctx/sh"
cp "$CA_BUNDLE" "$ctx/ca-certificates.crt"
cp deploy/Dockerfile.scratch "$ctx/Dockerfile"
mkdir -p "$ctx/tmp"
chmod 1777 "$ctx/tmp"

hash=$(cd "$ctx" && cat Dockerfile s3queue sh ca-certificates.crt | sha256sum | cut -c1-12)
tag="s3queue-test/s3queue:$hash"
if ! docker image inspect "$tag" >/dev/null 2>&1; then
	log "building image $tag ($version)"
	if ! docker build -q -t "$tag" "$ctx" >"$LOGS/s3queue-image.log" 2>&1; then
		log "docker build of $tag failed:"
		cat "$LOGS/s3queue-image.log" >&2
		exit 1
	fi
fi
if [[ -n "${S3QUEUE_IMAGE_TAG:-}" ]]; then
	docker tag "$tag" "$S3QUEUE_IMAGE_TAG"
fi
log "s3queue image: $tag"
printf 'export S3QUEUE_TEST_IMAGE=%q\n' "$tag"
