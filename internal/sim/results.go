package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// ResultsPlan is a third of the seeds' results: the workers store results
// over InlineMax apart (worker.result_inline_max), and the handler's
// successful results, each naming the claim that produced it, are large
// for a third of the tasks; the monitors drop results TTL after their task
// finished (monitor.result_ttl), shorter than the retention, and collect
// orphaned result objects every minute (OrphanCheck), once 30 s old.
type ResultsPlan struct {
	InlineMax int
	TTL       time.Duration
}

func (p ResultsPlan) String() string {
	return fmt.Sprintf("results apart over %d bytes, result TTL %v", p.InlineMax, p.TTL.Round(time.Second))
}

// planResults draws a third of the seeds' results, from a source of its
// own (the other seeds' plans stay as they were).
func planResults(plan *Plan, opts Options) {
	rng := rand.New(rand.NewPCG(plan.Seed, 0x7e5417))
	if rng.IntN(3) != 0 {
		return
	}
	ttl := 20*time.Second + time.Duration(rng.Int64N(int64(opts.Retention/2)))
	plan.Results = &ResultsPlan{InlineMax: 1024, TTL: ttl}
}

// simResult is a successful handler's result under a results plan: it
// names the attempt's claim, and is padded past the inline limit for a
// third of the draws x.
func (w *world) simResult(workerName, claim string, x uint64) json.RawMessage {
	pad := ""
	if (x>>40)%3 == 0 {
		pad = strings.Repeat("r", w.plan.Results.InlineMax+int((x>>44)%2000))
	}
	b, _ := json.Marshal(map[string]string{"by": workerName, "claim": claim, "pad": pad})
	return b
}

// resultClaim is the claim a result under a results plan names, or "".
func resultClaim(res []byte) string {
	var r struct {
		Claim string `json:"claim"`
	}
	if json.Unmarshal(res, &r) != nil {
		return ""
	}
	return r.Claim
}

// checkResults proves that a succeeded task's result, inline or stored
// apart, is the one its committing attempt produced (fencing: the object
// a reference names is that claim's, written before the commit, and holds
// that claim's result); that a referenced object is neither rewritten nor
// deleted while its task references it, but by retention once the task
// is past it; and that no result is dropped before its TTL.
func (w *world) checkResults(log []Entry, res *Result, add func(inv, id, format string, args ...any)) {
	rp := w.plan.Results
	objects := make(map[string][]byte)     // result objects now, by key
	tasks := make(map[string]*task.Task)   // the last write of each task, by key
	referenced := make(map[string]string)  // result object key -> the task id referencing it
	finished := make(map[string]time.Time) // task id -> UpdatedAt of its success
	ever := make(map[string]bool)          // result object keys ever referenced
	for _, e := range log {
		at := e.At.Format("15:04:05.000")
		if strings.HasPrefix(e.Key, task.ResultsPrefix) {
			if _, _, _, err := task.ParseResultKey(e.Key); err != nil {
				add(InvResult, "", "%s wrote %s at %s, not a result key", e.Proc, e.Key, at)
				continue
			}
			if owner, ok := referenced[e.Key]; ok {
				switch {
				case e.New != nil:
					add(InvResult, owner, "%s rewrote its result object %s at %s", e.Proc, e.Key, at)
				case !e.At.After(finished[owner].Add(w.opts.Retention - retentionMargin)):
					add(InvResult, owner, "%s deleted its result object %s at %s while the task references it, %v after it succeeded",
						e.Proc, e.Key, at, e.At.Sub(finished[owner]).Round(time.Second))
				}
			}
			if e.New == nil {
				if _, ok := objects[e.Key]; ok && !ever[e.Key] && strings.HasPrefix(e.Proc, "m") {
					res.OrphansCollected++
				}
				delete(objects, e.Key)
			} else {
				objects[e.Key] = e.New
			}
			continue
		}
		if !strings.HasPrefix(e.Key, "tasks/") || shards.IsPointer(e.Key) {
			continue
		}
		prev := tasks[e.Key]
		var next *task.Task
		if e.New != nil {
			t, err := task.Decode(e.New)
			if err != nil {
				continue // reported by the main checker
			}
			next = t
		}
		tasks[e.Key] = next
		if prev != nil && prev.ResultRef != nil && (next == nil || next.ResultRef == nil || next.ResultRef.Key != prev.ResultRef.Key) {
			delete(referenced, prev.ResultRef.Key)
		}
		if next == nil {
			continue
		}
		id := next.ID
		if prev != nil && prev.Status == task.Running && prev.Claim != nil && next.Status == task.Succeeded {
			// A commit: its result is its claim's.
			claim := prev.Claim.ID
			finished[id] = next.UpdatedAt
			switch ref := next.ResultRef; {
			case ref != nil:
				if want := task.ResultKey(next.Shard, id, claim); ref.Key != want {
					add(InvResult, id, "%s committed it at %s under claim %s referencing %s, not its claim's object %s", e.Proc, at, claim, ref.Key, want)
				}
				body, ok := objects[ref.Key]
				switch {
				case !ok:
					add(InvResult, id, "%s committed it at %s referencing %s, which does not exist", e.Proc, at, ref.Key)
				case ref.Check(body) != nil:
					add(InvResult, id, "%s committed it at %s referencing %s: %v", e.Proc, at, ref.Key, ref.Check(body))
				case resultClaim(body) != claim:
					add(InvResult, id, "%s committed it at %s under claim %s with the result of claim %s (object %s)", e.Proc, at, claim, resultClaim(body), ref.Key)
				}
				referenced[ref.Key] = id
				ever[ref.Key] = true
				res.ResultsApart++
				if len(body) <= rp.InlineMax {
					add(InvResult, id, "%s stored a result of %d bytes apart at %s, within the inline limit", e.Proc, len(body), at)
				}
			case len(next.Result) > 0:
				if c := resultClaim(next.Result); c != claim {
					add(InvResult, id, "%s committed it at %s under claim %s with the result of claim %s", e.Proc, at, claim, c)
				}
			}
		}
		if prev != nil && prev.Status == task.Succeeded && next.Status == task.Succeeded {
			switch {
			case !bytes.Equal(prev.Result, next.Result) && len(next.Result) > 0,
				next.ResultRef != nil && (prev.ResultRef == nil || *next.ResultRef != *prev.ResultRef):
				add(InvResult, id, "%s changed its result at %s", e.Proc, at)
			case prev.HoldsResult() && !next.HoldsResult() && !next.Retired:
				res.ResultsExpired++
				if e.At.Before(prev.UpdatedAt.Add(rp.TTL - retentionMargin)) {
					add(InvResult, id, "%s dropped its result at %s, %v after it succeeded, before the result TTL of %v",
						e.Proc, at, e.At.Sub(prev.UpdatedAt).Round(time.Second), rp.TTL)
				}
			}
		}
	}
	// At the end, every result a task references exists.
	for key, t := range tasks {
		if t != nil && t.ResultRef != nil {
			if _, ok := objects[t.ResultRef.Key]; !ok {
				add(InvResult, t.ID, "%s references result object %s at the end, which does not exist", key, t.ResultRef.Key)
			}
		}
	}
}
