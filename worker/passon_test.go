package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
)

// bumpBeforeEnd makes the first write that ends task id lose a race: just
// before it, the task object is written again (one version more), as a
// renewal whose response was late would.
type bumpBeforeEnd struct {
	s3store.Store
	id   string
	once sync.Once
	// hide: the first read of this task after the bump finds nothing, as
	// if its PUT had not landed yet: the end's pass-on leaves its edge to
	// the monitor's repair, which goes by the marker.
	hide   string
	hidden atomic.Bool
	bumped atomic.Bool
}

func (b *bumpBeforeEnd) Get(ctx context.Context, key string) (s3store.Object, error) {
	if b.hide != "" && strings.HasSuffix(key, b.hide+".json") && b.bumped.Load() && b.hidden.CompareAndSwap(false, true) {
		return s3store.Object{}, fmt.Errorf("get %s: %w", key, s3store.ErrNotFound)
	}
	return b.Store.Get(ctx, key)
}

func (b *bumpBeforeEnd) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if strings.HasSuffix(key, b.id+".json") && opts.IfMatch != "" && strings.Contains(string(body), `"status":"succeeded"`) {
		b.once.Do(func() {
			obj, err := b.Store.Get(ctx, key)
			if err != nil {
				return
			}
			t, err := task.Decode(obj.Body)
			if err != nil {
				return
			}
			t.Version++
			t.UpdatedAt = t.UpdatedAt.Add(-time.Millisecond) // another write than the worker's
			if again, err := task.Marshal(t); err == nil {
				b.Store.Put(ctx, key, again, s3store.PutOptions{IfMatch: obj.ETag})
			}
			b.bumped.Store(true)
		})
	}
	return b.Store.Put(ctx, key, body, opts)
}

// A parent whose ending write loses a race and is made again, one version
// later, marks that version's end too, so the monitor's repair passes the
// end on when the worker could not (here, the child's object was not
// there yet): the simulator's seed 170222 left a child blocked for ever,
// the only marker naming the write that lost, which the repair dropped.
func TestAnEndWrittenAgainPassesItsEndOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &bumpBeforeEnd{Store: mem.New()}
		f := newFleet(t, st, 1)
		p := f.producer(st)
		parent := f.submit(p)
		st.id = parent
		child, err := p.Submit(f.ctx, "job", nil, producer.Options{DependsOn: []string{parent}})
		if err != nil {
			t.Fatal(err)
		}
		st.hide = child
		f.start(f.fast("a"), nil, nil)
		waitStatus(t, p, parent, task.Succeeded)
		f.runMonitor(st, monitor.Config{Shards: 1})
		waitStatus(t, p, child, task.Succeeded)
		if !st.hidden.Load() {
			t.Fatal("the child was never hidden: the test did not make the pass-on leave it")
		}
	})
}
