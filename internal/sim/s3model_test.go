package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// load is a steady stream of requests of one type to keys under prefix.
type load struct {
	prefix string
	op     s3store.Op
	rate   int // requests a second
}

// tally is what a stream saw.
type tally struct{ served, refused int }

// drive offers loads to m for d of virtual time: every step it sleeps one
// step, then sends each load's requests for that step at the bubble's
// time, the loads interleaved. It returns the tally of each load.
func drive(m *S3Model, d, step time.Duration, loads ...load) []tally {
	out := make([]tally, len(loads))
	next := make([]int, len(loads))
	per := make([]int, len(loads))
	most := 0
	for i, l := range loads {
		per[i] = int(float64(l.rate) * step.Seconds())
		most = max(most, per[i])
	}
	for range int(d / step) {
		time.Sleep(step)
		now := time.Now()
		for k := range most {
			for i, l := range loads {
				if k >= per[i] {
					continue
				}
				next[i]++
				if m.Serve(now, l.op, fmt.Sprintf("%s%08d.json", l.prefix, next[i])).SlowDown {
					out[i].refused++
				} else {
					out[i].served++
				}
			}
		}
	}
	return out
}

func newModel(t *testing.T, cfg S3ModelConfig, seed uint64) *S3Model {
	t.Helper()
	m, err := NewS3Model(cfg, rand.New(rand.NewPCG(seed, 0x53)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func describe(st S3ModelStats) string {
	var b strings.Builder
	for _, p := range st.Partitions {
		fmt.Fprintf(&b, "[%q, %q) since %s: %+v\n", p.Lo, p.Hi, p.Since.Format(time.TimeOnly), p.ClassCounts)
	}
	return b.String()
}

// A partition serves its documented rate and refuses the rest of a burst
// with SlowDown: 10,000 requests in one second see about 10,000 - rate -
// burst refused (the token bucket starts full, with 50 ms of the rate; the
// refill of the first millisecond, while it is full, is lost).
func TestS3ModelRefusesABurstOverThePartitionRate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		op      s3store.Op
		refused int // 10,000 - rate - rate*50ms
	}{
		{"PUT", s3store.OpPut, 10_000 - 3_500 - 175},
		{"DELETE", s3store.OpDelete, 10_000 - 3_500 - 175},
		{"GET", s3store.OpGet, 10_000 - 5_500 - 275},
		{"HEAD", s3store.OpHead, 10_000 - 5_500 - 275},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newModel(t, S3ModelConfig{}, 1)
				got := drive(m, time.Second, time.Millisecond, load{"tasks/000/", tc.op, 10_000})[0]
				if got.refused < tc.refused-10 || got.refused > tc.refused+10 {
					t.Errorf("%d %ss in one second to one prefix: %d refused, want %d", got.served+got.refused, tc.name, got.refused, tc.refused)
				}
				st := m.Stats(time.Now())
				if len(st.Partitions) != 1 || len(st.Splits) != 0 {
					t.Errorf("a one-second burst split the bucket:\n%s", describe(st))
				}
				if n := st.Total.PutSlowDowns + st.Total.GetSlowDowns; n != int64(got.refused) {
					t.Errorf("counters say %d SlowDowns, the requests saw %d", n, got.refused)
				}
			})
		})
	}
}

// Below the rate nothing is refused, and the GET rate is separate from the
// PUT rate: 3,000 PUTs and 5,000 GETs a second to one prefix all pass.
func TestS3ModelServesEverythingBelowTheRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newModel(t, S3ModelConfig{SplitAfter: time.Hour}, 1)
		got := drive(m, 10*time.Second, 10*time.Millisecond,
			load{"tasks/000/", s3store.OpPut, 3_000}, load{"tasks/000/", s3store.OpGet, 5_000})
		if got[0].refused != 0 || got[1].refused != 0 {
			t.Errorf("under the rates: PUT %+v, GET %+v, want nothing refused", got[0], got[1])
		}
	})
}

// Two prefixes in one partition share its limit until S3 splits it, at
// the boundary between them, SplitAfter + SplitDelay after the load began;
// then each has a limit of its own.
func TestS3ModelSplitGivesEachPrefixItsOwnLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := S3ModelConfig{SplitAfter: 10 * time.Second, SplitDelay: 20 * time.Second}
		start := time.Now()
		m := newModel(t, cfg, 1)
		a, b := load{"tasks/000/", s3store.OpPut, 3_000}, load{"tasks/001/", s3store.OpPut, 3_000}

		before := drive(m, 30*time.Second, 10*time.Millisecond, a, b)
		if r := before[0].refused + before[1].refused; r < 30*2_000 {
			t.Errorf("6,000 PUTs a second to one partition for 30 s: %d refused, want about 2,500 a second", r)
		}
		drive(m, time.Second, 10*time.Millisecond, a, b) // the split lands in this second
		st := m.Stats(time.Now())
		if len(st.Splits) != 1 || st.Splits[0].Boundary != "tasks/001" || len(st.Partitions) != 2 {
			t.Fatalf("want one split at tasks/001, got %+v\n%s", st.Splits, describe(st))
		}
		if at := st.Splits[0].At.Sub(start); at < 30*time.Second || at > 32*time.Second {
			t.Errorf("the split took effect %v after the load began, want SplitAfter + SplitDelay = 30 s (+1 s of windows)", at)
		}

		after := drive(m, 5*time.Second, 10*time.Millisecond, a, b)
		if after[0].refused != 0 || after[1].refused != 0 {
			t.Errorf("3,000 PUTs a second to each half: %+v refused, want none", after)
		}
		time.Sleep(time.Second) // both token buckets fill up
		a.rate, b.rate = 10_000, 10_000
		burst := drive(m, time.Second, time.Millisecond, a, b)
		for i, got := range burst {
			if want := 10_000 - 3_500 - 175; got.refused < want-10 || got.refused > want+10 {
				t.Errorf("10,000 PUTs in one second to %s after the split: %d refused, want %d (its own limit)", []string{a.prefix, b.prefix}[i], got.refused, want)
			}
		}
	})
}

// Under a load no two shards' prefixes can share a partition (each shard
// alone is under SplitLoad, any two are over it), the bucket splits, round
// after round, until every shard's prefix tasks/000/ … tasks/015/ has a
// partition of its own, and no boundary falls inside a shard.
func TestS3ModelSplitsShardPrefixesApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const shardCount = 16
		cfg := S3ModelConfig{PutRate: 350, SplitAfter: 10 * time.Second, SplitDelay: 20 * time.Second}
		m := newModel(t, cfg, 1)
		var loads []load
		for s := range shardCount {
			loads = append(loads, load{fmt.Sprintf("tasks/%03d/", s), s3store.OpPut, 100}) // SplitLoad*PutRate = 175
		}
		drive(m, 5*time.Minute, 10*time.Millisecond, loads...)
		st := m.Stats(time.Now())
		t.Logf("%d splits, the last at %s\n%s", len(st.Splits), st.Splits[len(st.Splits)-1].At.Format(time.TimeOnly), describe(st))
		seen := make(map[int]bool)
		for s := range shardCount {
			first, last := m.find(fmt.Sprintf("tasks/%03d/", s)), m.find(fmt.Sprintf("tasks/%03d/\xff", s))
			if first != last {
				t.Errorf("shard %03d is cut by a boundary: partitions %d to %d", s, first, last)
			}
			if seen[first] {
				t.Errorf("shard %03d shares partition %d", s, first)
			}
			seen[first] = true
		}
		if len(st.Partitions) != shardCount {
			t.Errorf("%d partitions, want one per shard (%d)", len(st.Partitions), shardCount)
		}
	})
}

// One hot key cannot be split: S3's limit then holds for it alone, while
// the same load on two keys splits them apart.
func TestS3ModelCannotSplitOneKey(t *testing.T) {
	for _, tc := range []struct {
		keys   []string
		splits int
	}{
		{[]string{"fleet.json"}, 0},
		{[]string{"fleet.json", "queue.json"}, 1},
	} {
		synctest.Test(t, func(t *testing.T) {
			m := newModel(t, S3ModelConfig{SplitAfter: 5 * time.Second, SplitDelay: 5 * time.Second}, 1)
			for i := range 75_000 { // 5,000 PUTs a second for 15 s
				if i%5 == 0 {
					time.Sleep(time.Millisecond)
				}
				m.Serve(time.Now(), s3store.OpPut, tc.keys[i%len(tc.keys)])
			}
			if st := m.Stats(time.Now()); len(st.Splits) != tc.splits {
				t.Errorf("5,000 PUTs a second on %q for 15 s: splits %+v, want %d", tc.keys, st.Splits, tc.splits)
			}
		})
	}
}

// Service times stay within 20-80 ms, with the medians and 99th
// percentiles the defaults state.
func TestS3ModelServiceTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := S3ModelConfig{}
		cfg.fill()
		m := newModel(t, S3ModelConfig{PutRate: 1e9, GetRate: 1e9}, 7)
		for _, tc := range []struct {
			op   s3store.Op
			want ServiceTime
		}{
			{s3store.OpGet, cfg.GetLatency},
			{s3store.OpHead, cfg.GetLatency},
			{s3store.OpPut, cfg.PutLatency},
			{s3store.OpDelete, cfg.PutLatency},
			{s3store.OpList, cfg.ListLatency},
		} {
			const n = 20_000
			ds := make([]time.Duration, n)
			for i := range ds {
				ds[i] = m.Serve(time.Now(), tc.op, fmt.Sprintf("tasks/000/%08d.json", i)).Latency
			}
			slices.Sort(ds)
			p50, p99 := ds[n/2], ds[n*99/100]
			t.Logf("%-6v min %v p50 %v p99 %v max %v", tc.op, ds[0], p50, p99, ds[n-1])
			if ds[0] < 20*time.Millisecond || ds[n-1] > 80*time.Millisecond {
				t.Errorf("%v: service times %v to %v, want within 20-80 ms", tc.op, ds[0], ds[n-1])
			}
			if d := p50 - tc.want.Median; d < -time.Millisecond || d > time.Millisecond {
				t.Errorf("%v: p50 %v, want %v ± 1 ms", tc.op, p50, tc.want.Median)
			}
			if d := p99 - tc.want.P99; d < -3*time.Millisecond || d > 3*time.Millisecond {
				t.Errorf("%v: p99 %v, want %v ± 3 ms", tc.op, p99, tc.want.P99)
			}
		}
	})
}

// The model replays exactly from its seed: the same requests at the same
// virtual times get the same service times, refusals and splits.
func TestS3ModelReplaysFromASeed(t *testing.T) {
	run := func(seed uint64) (verdicts []Verdict, st S3ModelStats) {
		synctest.Test(t, func(t *testing.T) {
			m := newModel(t, S3ModelConfig{PutRate: 350, GetRate: 550, SplitAfter: 5 * time.Second, SplitDelay: 10 * time.Second}, seed)
			ops := []s3store.Op{s3store.OpPut, s3store.OpGet, s3store.OpHead, s3store.OpList, s3store.OpDelete}
			for i := range 60_000 {
				if i%20 == 0 {
					time.Sleep(10 * time.Millisecond) // 2,000 requests a second
				}
				key := fmt.Sprintf("tasks/%03d/%08d.json", i%8, i)
				verdicts = append(verdicts, m.Serve(time.Now(), ops[i%len(ops)], key))
			}
			st = m.Stats(time.Now())
		})
		return verdicts, st
	}
	a, sa := run(1)
	b, sb := run(1)
	if !slices.Equal(a, b) {
		i := 0
		for a[i] == b[i] {
			i++
		}
		t.Errorf("one seed, two runs: request %d got %+v, then %+v", i, a[i], b[i])
	}
	if fmt.Sprint(sa) != fmt.Sprint(sb) {
		t.Errorf("one seed, two runs, different counters:\n%+v\n%+v", sa, sb)
	}
	if len(sa.Splits) == 0 || sa.Total.PutSlowDowns == 0 {
		t.Errorf("the workload should exercise splits and refusals: %+v", sa)
	}
	c, _ := run(2)
	if slices.Equal(a, c) {
		t.Error("two seeds drew the same service times")
	}
}

// A server configured with the model serves a producer and a worker of a
// real queue: every task runs and succeeds, each request takes the
// model's 20-80 ms, and the model counts what they asked of it.
func TestServerWithS3ModelServesAWorkload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := NewServer(Providers[0], rand.New(rand.NewPCG(1, 2)), 0)
		model := newModel(t, S3ModelConfig{}, 1)
		srv.SetModel(model)
		manifest, _ := json.Marshal(map[string]any{"format": shards.FormatVersion, "shards": 4, "created_at": time.Now().UTC(), "conditional_delete": s3store.DeleteHonoured})
		srv.Put(shards.ManifestKey, manifest)
		srv.Start()
		ctx, cancel := context.WithCancel(context.Background())

		const tasks = 40
		ran := make(chan string, 2*tasks)
		wh := srv.Handle("w1")
		wk, err := worker.New(ctx, wh, worker.Config{ID: "w1", Concurrency: 4, Dedicated: true,
			Rand: rand.NewChaCha8([32]byte{1}), Clock: clock.New(wh, clock.Config{}), Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		wk.Handle(taskType, func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			ran <- tk.ID
			return json.RawMessage(`{}`), nil
		})
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			wk.Run(ctx)
		}()

		ph := srv.Handle("p1")
		prod, err := producer.New(ctx, ph, producer.Config{Rand: rand.NewChaCha8([32]byte{2}), Clock: clock.New(ph, clock.Config{}), Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		for i := range tasks {
			began := time.Now()
			if _, err := prod.Submit(ctx, taskType, json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), producer.Options{}); err != nil {
				t.Fatalf("submit %d: %v", i, err)
			}
			if d := time.Since(began); d < 20*time.Millisecond {
				t.Errorf("submit %d took %v: a PUT to the modelled S3 takes at least 20 ms", i, d)
			}
		}
		for range tasks {
			select {
			case <-ran:
			case <-time.After(10 * time.Minute):
				t.Fatal("the worker did not run every task within 10 minutes")
			}
		}
		time.Sleep(time.Minute) // the last commits land
		cancel()
		<-stopped
		srv.Close()

		succeeded := 0
		for key, body := range srv.Objects("tasks/") {
			if strings.HasSuffix(key, ".json") && field(body, "status") == string(task.Succeeded) {
				succeeded++
			}
		}
		if succeeded != tasks {
			t.Errorf("%d of %d tasks succeeded", succeeded, tasks)
		}
		st := model.Stats(time.Now())
		counts := srv.Counts()
		t.Logf("server counts %v\nmodel %+v", counts, st.Total)
		if st.Total.Put < 3*tasks || st.Total.PutSlowDowns+st.Total.GetSlowDowns != 0 || len(st.Partitions) != 1 {
			t.Errorf("model counters %+v over %d partitions: want at least 3 PUTs a task, no SlowDown, one partition", st.Total, len(st.Partitions))
		}
		served := int64(0)
		for _, op := range s3store.Ops() {
			served += int64(counts[op.String()])
		}
		if served != st.Total.Put+st.Total.Get {
			t.Errorf("the server served %d requests, the model counted %d", served, st.Total.Put+st.Total.Get)
		}
	})
}

// A request over its partition's rate is refused with the server's 503
// SlowDown, the same error as an injected 503, and changes nothing.
func TestServerWithS3ModelRefusesWithSlowDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := NewServer(Providers[0], rand.New(rand.NewPCG(1, 2)), 0)
		srv.SetModel(newModel(t, S3ModelConfig{PutRate: 1, Burst: time.Second}, 1)) // one PUT a second, one in the bucket
		srv.Start()
		h := srv.Handle("p1")
		ctx := context.Background()
		if _, err := h.Put(ctx, "tasks/000/a.json", []byte("a"), s3store.PutOptions{}); err != nil {
			t.Fatalf("the first PUT: %v", err)
		}
		_, err := h.Put(ctx, "tasks/000/b.json", []byte("b"), s3store.PutOptions{})
		if !errors.Is(err, s3store.ErrInjected503) {
			t.Errorf("a second PUT within the second: %v, want 503 SlowDown (%v)", err, s3store.ErrInjected503)
		}
		time.Sleep(time.Second)
		if _, err := h.Put(ctx, "tasks/000/c.json", []byte("c"), s3store.PutOptions{}); err != nil {
			t.Errorf("a PUT a second later: %v", err)
		}
		srv.Close()
		if got := srv.Objects("tasks/"); len(got) != 2 || got["tasks/000/b.json"] != nil {
			t.Errorf("objects %v: the refused PUT must change nothing", got)
		}
		if n := srv.Counts()["slowdown"]; n != 1 {
			t.Errorf("server counts %d SlowDowns, want 1", n)
		}
	})
}

// A pre-partitioned bucket (as AWS support can set one up) starts with a
// partition per boundary, each with its own limit.
func TestS3ModelStartsPrePartitioned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newModel(t, S3ModelConfig{Boundaries: []string{"tasks/002", "tasks/001", "tasks/001"}}, 1)
		st := m.Stats(time.Now())
		var bounds []string
		for _, p := range st.Partitions {
			bounds = append(bounds, p.Lo+".."+p.Hi)
		}
		if want := []string{"..tasks/001", "tasks/001..tasks/002", "tasks/002.."}; !slices.Equal(bounds, want) {
			t.Fatalf("partitions %q, want %q", bounds, want)
		}
		got := drive(m, time.Second, time.Millisecond,
			load{"tasks/000/", s3store.OpPut, 3_000}, load{"tasks/001/", s3store.OpPut, 3_000}, load{"tasks/002/", s3store.OpPut, 3_000})
		for i, g := range got {
			if g.refused != 0 {
				t.Errorf("3,000 PUTs a second to shard %d of a pre-partitioned bucket: %d refused, want none", i, g.refused)
			}
		}
	})
}

// A configuration that cannot describe S3 is refused.
func TestS3ModelConfigIsChecked(t *testing.T) {
	ms := time.Millisecond
	for name, cfg := range map[string]S3ModelConfig{
		"median below the floor": {GetLatency: ServiceTime{Min: 20 * ms, Median: 10 * ms, P99: 60 * ms, Max: 80 * ms}},
		"p99 above the ceiling":  {PutLatency: ServiceTime{Min: 20 * ms, Median: 30 * ms, P99: 90 * ms, Max: 80 * ms}},
		"negative rate":          {PutRate: -1},
		"burst of no request":    {PutRate: 10, Burst: 10 * ms},
		"negative split delay":   {SplitDelay: -time.Second},
	} {
		if _, err := NewS3Model(cfg, rand.New(rand.NewPCG(1, 1)), time.Time{}); err == nil {
			t.Errorf("%s: accepted %+v", name, cfg)
		}
	}
}
