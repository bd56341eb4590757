package integration

import (
	"os"
	"testing"

	"github.com/s3queue/s3queue/integration/harness"
)

// TestMain starts MinIO and versitygw once for the whole package; every test
// takes its own bucket on them.
func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, harness.MinIOName, harness.VersityGWName))
}
