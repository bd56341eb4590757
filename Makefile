# The project's test command is `make test` (CI runs it through .ci/run).

.PHONY: test servers bench

# Build the S3 servers if needed, vet, check gofmt, run all tests with -race.
test:
	scripts/test.sh

# Only build the test servers (.cache/bin and, with Docker, local images).
servers:
	scripts/servers.sh >/dev/null

# Run the benchmarks against MinIO (minutes; see docs/performance.md).
bench:
	scripts/bench.sh
