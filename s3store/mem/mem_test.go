package mem_test

import (
	"testing"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/s3store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) s3store.Store { return mem.New() })
}
