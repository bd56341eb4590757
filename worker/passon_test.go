package worker_test

import (
	"context"
	"encoding/json"
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

// A commit rides out a failed PUT of the end's marker as it rides out a
// failed write of the task: the marker goes first, and a request that
// fails there (an outage of a few seconds: MinIO killed and started
// again, in the chaos suite) must not make the worker give up an outcome
// it holds the lease for. Giving up left the task running until its lease
// expired, and the monitor then had the handler run a second time,
// though no lease was ever lost.
func TestACommitRidesOutAFailedMarkerPut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := s3store.NewFaults(mem.New())
		f := newFleet(t, st, 1)
		p := f.producer(st)
		parent := f.submit(p)
		child, err := p.Submit(f.ctx, "job", nil, producer.Options{DependsOn: []string{parent}})
		if err != nil {
			t.Fatal(err)
		}
		// Two failures in a row: the store's own retries gave up twice.
		st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "ended/" + parent, Err: s3store.ErrInjected503, Times: 2})
		var runs sync.Map
		f.start(f.fast("a"), nil, func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			n, _ := runs.LoadOrStore(tk.ID, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			return nil, nil
		})
		waitStatus(t, p, parent, task.Succeeded)
		waitStatus(t, p, child, task.Succeeded)
		if n, _ := runs.Load(parent); n.(*atomic.Int32).Load() != 1 {
			t.Fatalf("the parent's handler ran %d times; want once", n.(*atomic.Int32).Load())
		}
		tk, err := p.Get(f.ctx, parent)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Attempt != 1 {
			t.Fatalf("the parent succeeded on attempt %d; want 1 (its first commit)", tk.Attempt)
		}
	})
}
