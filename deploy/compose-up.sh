#!/usr/bin/env bash
# compose-up.sh brings deploy/docker-compose.yml up with images built on
# this machine, no registry needed: MinIO and the s3queue image of the
# current source (scripts/servers.sh, scripts/image.sh), tagged s3queue:local.
# Arguments go to `compose up` (for example -d, or --scale worker=8).
set -euo pipefail

cd "$(dirname "$0")/.."

env=$(S3QUEUE_IMAGE_TAG=s3queue:local scripts/servers.sh)
eval "$env"
export S3QUEUE_IMAGE=s3queue:local MINIO_IMAGE="$S3QUEUE_MINIO_IMAGE"

# MinIO serves each directory of its data directory as a bucket.
mkdir -p deploy/data/minio/queue

if docker compose version >/dev/null 2>&1; then
	compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
	compose=(docker-compose)
else
	echo "compose-up: neither 'docker compose' nor 'docker-compose' is installed" >&2
	exit 1
fi
exec "${compose[@]}" -f deploy/docker-compose.yml up "$@"
