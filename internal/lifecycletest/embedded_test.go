package lifecycletest_test

import (
	"testing"

	"github.com/s3queue/s3queue/internal/lifecycletest"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/local"
	"github.com/s3queue/s3queue/s3store/mem"
)

func TestLifecycleMem(t *testing.T) {
	lifecycletest.Run(t, func(t *testing.T) s3store.Store { return mem.New() })
}

func TestLifecycleLocal(t *testing.T) {
	lifecycletest.Run(t, func(t *testing.T) s3store.Store {
		st, err := local.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}
