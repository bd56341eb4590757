// Package harness starts the real S3 servers the integration tests run
// against (MinIO and versitygw) and hands each test a fresh bucket on them.
//
// A test package starts its servers once, in TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(harness.Main(m, harness.MinIOName, harness.VersityGWName)) }
//
// and each test asks for one with harness.MinIO(t) or harness.Versity(t),
// then srv.NewBucket(t) for a bucket of its own.
//
// Where a server comes from, in order of preference:
//
//  1. S3QUEUE_TEST_ENDPOINT (with S3QUEUE_TEST_PROVIDER naming the server,
//     S3QUEUE_TEST_ACCESS_KEY and S3QUEUE_TEST_SECRET_KEY): a server that is
//     already running; used for the server it names.
//  2. A reachable Docker engine: a container (testcontainers-go) from
//     S3QUEUE_MINIO_IMAGE / S3QUEUE_VERSITYGW_IMAGE, default the official
//     images; `make test` builds small local images and sets these.
//  3. S3QUEUE_TEST_BINDIR: the static binaries in that folder (`make test`
//     builds them into .cache/bin) run as local processes on 127.0.0.1.
//
// When none applies the harness fails with the reason; it never skips.
// Servers listen on loopback only. The harness sets AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY for the process to the servers' credentials (all
// servers of a run share them), so an s3:// store URL from Server.StoreURL
// opens without further configuration.
//
// A test that runs containers of its own next to a server (the s3queue
// image as a worker, say) creates a Docker network with NewNetwork and
// starts a server of its own on it with Network.StartOn: the containers
// reach it by name (Server.InNetwork, Server.NetworkStoreURL), the test
// process through its published port as usual.
//
// The package must not import s3queue's own packages: it provides servers,
// nothing about queues.
package harness
