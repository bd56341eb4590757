package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// Defaults of Config.OrphanCheck (FullSweep) and Config.OrphanAge.
const defaultOrphanAge = time.Hour

// orphanCollector deletes, every OrphanCheck (the first time OrphanAge
// after the monitor started), the result objects nothing
// references: left by a worker that crashed (or could not learn its
// commit's fate) between its result PUT and the commit, or by a monitor
// that crashed between a result's expiry and its DELETE. It lists
// results/ (a LIST per 1,000 objects) and reads the task of each object
// written more than OrphanAge ago that it has not examined yet (one GET
// per object, once in the monitor's life): an object at
// results/{shard}/{id}/{claim} that the task does not reference, while the
// task is not running under {claim}, can never be referenced (only the
// commit under {claim} may reference it, and that claim is over), and is
// deleted. One whose task still runs under its claim, or could not be
// read, is left undecided and examined again at each check until one
// decides (again): the watermark passed it for good, and an orphan
// whose task GET failed once was kept until the monitor restarted.
type orphanCollector struct {
	st    s3store.Store
	local clock.Local
	log   *slog.Logger
	// every is OrphanCheck (FullSweep if 0), age OrphanAge (an hour if 0).
	every, age time.Duration

	// next is when (local time) the result objects are next checked for
	// orphans; from the S3 time up to which objects were examined (zero:
	// none yet).
	next, from time.Time
	// again are the result objects a check left undecided (their task
	// could not be read, or ran under the claim that wrote them):
	// examined again at each check, below the watermark too, until one
	// decides.
	again map[string]bool
}

func newOrphanCollector(st s3store.Store, local clock.Local, log *slog.Logger, cfg Config) orphanCollector {
	every := cfg.OrphanCheck
	if every <= 0 {
		every = cfg.FullSweep
	}
	age := cfg.OrphanAge
	if age <= 0 {
		age = defaultOrphanAge
	}
	return orphanCollector{st: st, local: local, log: log, every: every, age: age}
}

// step runs a check if one is due; iv is the tick's S3 time.
func (c *orphanCollector) step(ctx context.Context, iv clock.Interval, st *TickStats) error {
	now := c.local.Now()
	every, age := c.every, c.age
	if c.next.IsZero() {
		// The first check comes OrphanAge after the monitor started.
		c.next = now.Add(min(age, every))
	}
	if now.Before(c.next) {
		return nil
	}
	c.next = now.Add(every)
	upTo := iv.Earliest.Add(-age) // S3 time: written no later than this
	from := c.from
	if c.again == nil {
		c.again = make(map[string]bool)
	}
	listed := make(map[string]bool, len(c.again))
	after := ""
	for {
		page, err := c.st.List(ctx, task.ResultsPrefix, s3store.ListOptions{StartAfter: after})
		if err != nil {
			return fmt.Errorf("collect orphaned results: %w", err)
		}
		for _, o := range page.Objects {
			again := c.again[o.Key]
			listed[o.Key] = again
			if o.LastModified.After(upTo) || !again && !from.IsZero() && !o.LastModified.After(from) {
				continue
			}
			decided, err := c.collectOrphan(ctx, o.Key, st)
			if err != nil {
				return err
			}
			if decided {
				delete(c.again, o.Key)
			} else {
				c.again[o.Key] = true
			}
		}
		if !page.Truncated || len(page.Objects) == 0 {
			break
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
	for key := range c.again {
		if _, ok := listed[key]; !ok {
			delete(c.again, key) // gone
		}
	}
	c.from = upTo
	return nil
}

// collectOrphan deletes the result object at key if its task does not
// reference it and is not running under the claim that wrote it, and
// reports whether that is decided for good (false: the task could not be
// read, or runs under that claim; the next check looks again).
func (c *orphanCollector) collectOrphan(ctx context.Context, key string, st *TickStats) (decided bool, err error) {
	shard, id, claim, err := task.ParseResultKey(key)
	if err != nil {
		c.log.Warn("foreign object under results/; left alone", "key", key)
		return true, nil
	}
	v, err := taskio.Load(ctx, c.st, task.Key(shard, id))
	st.Loaded++
	switch {
	case errors.Is(err, s3store.ErrNotFound):
		// Its task is gone (retention): nothing references it.
	case errors.Is(err, task.ErrCorrupt), errors.Is(err, task.ErrUnsupportedFormat):
		return true, nil // reported by the sweeps; its object is left alone
	case err != nil:
		return false, nil // unreadable now: the next check reads it again
	case v.Task.ResultRef != nil && v.Task.ResultRef.Key == key:
		return true, nil
	case v.Task.Status == task.Running && v.Task.Claim != nil && v.Task.Claim.ID == claim:
		return false, nil // its commit may still land
	}
	if err := c.st.Delete(ctx, key, s3store.DeleteOptions{}); err != nil {
		return false, fmt.Errorf("delete orphaned result %s: %w", key, err)
	}
	st.OrphansDeleted++
	return true, nil
}
