#!/usr/bin/env bash
# servers.sh builds the S3 servers the integration tests run against and
# prints, on stdout, the environment the test harness (integration/harness)
# needs to find them. Progress goes to stderr. scripts/test.sh evals it:
#
#   eval "$(scripts/servers.sh)"
#
# Both servers are built from the Go module proxy as static binaries
# (CGO_ENABLED=0) into .cache/bin, pinned by version; a stamp file per binary
# records what was built, so a warm run skips the build. With a reachable
# Docker engine each binary is also wrapped in a local FROM-scratch image
# (nothing is pulled); without one the harness runs the binaries as local
# processes on 127.0.0.1. With Docker it also builds the s3queue image of
# the current source (scripts/image.sh) and exports S3QUEUE_TEST_IMAGE.
set -euo pipefail

cd "$(dirname "$0")/.."

# Pinned versions. Changing one rebuilds the binary and tags a new image.
MINIO_PKG=github.com/minio/minio
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
VERSITYGW_PKG=github.com/versity/versitygw/cmd/versitygw
VERSITYGW_VERSION=v1.8.0

CACHE="$PWD/.cache"
BIN="$CACHE/bin"
LOGS="$CACHE/logs"
mkdir -p "$BIN" "$LOGS"

log() { printf 'servers: %s\n' "$*" >&2; }

# build_binary NAME PKG VERSION: go install PKG@VERSION into $BIN/NAME unless
# the stamp says that exact version is already there.
build_binary() {
	local name=$1 pkg=$2 version=$3
	local stamp="$BIN/$name.version" want="$pkg@$version"
	if [[ -x "$BIN/$name" && -f "$stamp" && "$(<"$stamp")" == "$want" ]]; then
		return 0
	fi
	log "building $name $version from the Go module proxy (minutes on a cold cache; log: .cache/logs/$name-build.log)"
	# A private GOBIN and a rename: a concurrent run never sees half a binary.
	local tmp
	tmp=$(mktemp -d "$BIN/.build-$name.XXXXXX")
	rm -f "$stamp"
	local start=$SECONDS
	# pkg@version builds outside this module: the project's go.mod plays no part.
	if ! CGO_ENABLED=0 GOBIN="$tmp" go install "$want" >"$LOGS/$name-build.log" 2>&1; then
		log "building $name failed; last lines of .cache/logs/$name-build.log:"
		tail -n 30 "$LOGS/$name-build.log" >&2
		rm -rf "$tmp"
		return 1
	fi
	mv -f "$tmp/$name" "$BIN/$name"
	rm -rf "$tmp"
	printf '%s\n' "$want" >"$stamp"
	log "built $name in $((SECONDS - start))s"
}

# build_image NAME TAG: a FROM-scratch image holding only $BIN/NAME, an empty
# /data (the server's data dir) and a world-writable /tmp; HOME=/tmp keeps
# MinIO's ~/.minio out of /data. Skipped when TAG exists. Nothing is pulled,
# so it works without any registry.
build_image() {
	local name=$1 tag=$2
	if docker image inspect "$tag" >/dev/null 2>&1; then
		return 0
	fi
	log "building image $tag"
	mkdir -p "$CACHE/docker"
	local ctx
	ctx=$(mktemp -d "$CACHE/docker/$name.XXXXXX")
	mkdir -p "$ctx/data" "$ctx/tmp"
	chmod 1777 "$ctx/tmp"
	cp "$BIN/$name" "$ctx/$name"
	cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY $name /$name
COPY data /data
COPY tmp /tmp
ENV HOME=/tmp
ENTRYPOINT ["/$name"]
DOCKERFILE
	# -q and the captured stderr hide the legacy builder's deprecation
	# banner; the log is shown only when the build fails.
	if ! docker build -q -t "$tag" "$ctx" >"$LOGS/$name-image.log" 2>&1; then
		log "docker build of $tag failed:"
		cat "$LOGS/$name-image.log" >&2
		rm -rf "$ctx"
		return 1
	fi
	rm -rf "$ctx"
}

# The two builds overlap: downloads of one run while the other compiles.
build_binary minio "$MINIO_PKG" "$MINIO_VERSION" &
minio_pid=$!
build_binary versitygw "$VERSITYGW_PKG" "$VERSITYGW_VERSION" &
vgw_pid=$!
failed=0
wait "$minio_pid" || failed=1
wait "$vgw_pid" || failed=1
if ((failed)); then
	exit 1
fi

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
	MINIO_IMAGE="s3queue-test/minio:$MINIO_VERSION"
	VERSITYGW_IMAGE="s3queue-test/versitygw:$VERSITYGW_VERSION"
	build_image minio "$MINIO_IMAGE"
	build_image versitygw "$VERSITYGW_IMAGE"
	log "Docker engine found: servers run as containers ($MINIO_IMAGE, $VERSITYGW_IMAGE)"
	printf 'export S3QUEUE_MINIO_IMAGE=%q\n' "$MINIO_IMAGE"
	printf 'export S3QUEUE_VERSITYGW_IMAGE=%q\n' "$VERSITYGW_IMAGE"
	# The s3queue image of the code under test (integration/deploy_test.go
	# runs it as a worker and a monitor): rebuilt from source every run,
	# seconds when the Go build cache is warm.
	scripts/image.sh
	# Ryuk (the reaper container) would have to be pulled; the harness
	# terminates its containers itself.
	printf 'export TESTCONTAINERS_RYUK_DISABLED=true\n'
	printf 'unset S3QUEUE_TEST_BINDIR\n'
else
	log "no Docker engine: servers run as local processes from .cache/bin"
	printf 'export S3QUEUE_TEST_BINDIR=%q\n' "$BIN"
fi
