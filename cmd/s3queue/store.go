package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/config"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storeurl"
	"github.com/s3queue/s3queue/shards"
)

// storeURL is the store to use: --store, else S3QUEUE_STORE, else the
// config file's store (config.Load already applied the environment).
func (a *app) storeURL() (string, error) {
	url := a.storeFlag
	if url == "" {
		url = a.cfg.Store
	}
	if url == "" {
		return "", usageError("no store: pass --store URL, set S3QUEUE_STORE, or set store in queue.toml (for example --store file:///var/lib/s3queue)")
	}
	spec, err := storeurl.Parse(url)
	if err != nil {
		return "", withCode(exitUsage, err)
	}
	if spec.Scheme == storeurl.SchemeMem {
		// A mem:// store lives in this process only: a task submitted
		// there (or a worker waiting there) vanishes when the command
		// exits, and no other process can ever reach it.
		return "", usageError("%s: a mem:// store lives only in the memory of this process, so its queue would vanish when 's3queue %s' exits; use a file:///DIR or s3:// store (mem:// is for 's3queue demo --store' and for tests)", a.cmd.name, a.cmd.name)
	}
	return url, nil
}

// openStore opens the configured store and returns it with its URL
// redacted for printing.
func (a *app) openStore(ctx context.Context) (s3store.Store, string, error) {
	url, err := a.storeURL()
	if err != nil {
		return nil, "", err
	}
	st, err := a.open(ctx, url)
	if err != nil {
		return nil, "", err
	}
	return st, storeurl.Redact(url), nil
}

// openQueue opens the queue in st, the store at url (redacted). With
// mustExist it creates none, since read commands must not write a manifest
// into a store that has none, and a store without a queue is an error
// wrapping s3queue.ErrNoQueue.
func (a *app) openQueue(ctx context.Context, st s3store.Store, url string, mustExist bool) (*s3queue.Queue, error) {
	so := a.cfg.SubmitOptions()
	local, err := a.localClock()
	if err != nil {
		return nil, err
	}
	q, err := s3queue.OpenStore(ctx, st, s3queue.Config{
		Local:        local,
		Store:        url,
		Shards:       a.cfg.Shards,
		DispatchMode: a.cfg.QueueSection.Mode(),
		Logger:       a.log,
		Submit:       s3queue.SubmitDefaults{MaxAttempts: so.MaxAttempts, Timeout: so.Timeout, Retry: so.Retry},
		Producer:     a.cfg.Producer(),
		MustExist:    mustExist,
		OnSkip:       a.skipped,
	})
	return q, cause(err)
}

// queue opens the configured store and the queue in it, creating the queue
// when the store has none, after the provider check (exit 4 on a store that
// does not honour conditional writes): the one path of every command that
// puts something new into the queue (submit, schedule add, pause), as
// workers and monitors create it too.
func (a *app) queue(ctx context.Context) (s3store.Store, *s3queue.Queue, error) {
	st, url, err := a.openStore(ctx)
	if err != nil {
		return nil, nil, err
	}
	q, err := a.openQueue(ctx, st, url, false)
	if err != nil {
		return nil, nil, unsupported(url, err)
	}
	return st, q, nil
}

// existingQueue opens the configured store and the queue in it, creating
// nothing: the path of every command that reads the queue or changes what
// is in it. A store without a queue is noQueue's error.
func (a *app) existingQueue(ctx context.Context) (*s3queue.Queue, error) {
	_, q, err := a.existingStoreQueue(ctx)
	return q, err
}

// existingStoreQueue is existingQueue that also returns the store, for
// the commands that list it themselves.
func (a *app) existingStoreQueue(ctx context.Context) (s3store.Store, *s3queue.Queue, error) {
	st, url, err := a.openStore(ctx)
	if err != nil {
		return nil, nil, err
	}
	q, err := a.openQueue(ctx, st, url, true)
	if errors.Is(err, s3queue.ErrNoQueue) {
		return nil, nil, noQueue(url)
	}
	return st, q, err
}

// noQueue is the answer of every command that needs a queue, on a store
// that has none (a mistyped --store, most often): one message and exit 3,
// the code of a task id or schedule name the store does not hold. Nothing
// was created. It wraps s3queue.ErrNoQueue.
func noQueue(url string) error {
	return withCode(exitNotFound, noQueueError(fmt.Sprintf(
		"no queue in %s (no %s): check --store; submit, schedule add, pause, a worker or a monitor creates the queue",
		url, shards.ManifestKey)))
}

// noQueueError prints its own message and is s3queue.ErrNoQueue.
type noQueueError string

func (e noQueueError) Error() string      { return string(e) }
func (noQueueError) Is(target error) bool { return target == s3queue.ErrNoQueue }

// cause is an error of the s3queue package as the command reports it. That
// package wraps each of its errors once, as "s3queue: OP: cause"; the
// command prints its own "s3queue: " before the cause alone, as it did
// before the package existed.
func cause(err error) error {
	if inner := errors.Unwrap(err); inner != nil {
		return inner
	}
	return err
}

func notFound(id string) error {
	return withCode(exitNotFound, fmt.Errorf("task %s not found", id))
}

// taskError turns a Queue's error about task id into the command's.
func taskError(id string, err error) error {
	if errors.Is(err, s3queue.ErrNotFound) {
		return notFound(id)
	}
	return cause(err)
}

// envClockSkew is a test hook: a Go duration ("7m", "-5m") by which the
// command's services read this machine's wall clock off. The chaos suite
// (integration/chaos) starts workers and monitors with it to prove that a
// host clock minutes off decides nothing (invariant 4): the services use
// only differences between its readings, through the monotonic clock, which
// the offset leaves alone, and take every decision on S3 time.
const envClockSkew = config.EnvPrefix + "TEST_CLOCK_SKEW"

// localClock is the local clock the command's services pace their work by:
// nil (the default, the host's) unless envClockSkew is set.
func (a *app) localClock() (clock.Local, error) {
	var v string
	for _, kv := range a.environ() {
		if rest, ok := strings.CutPrefix(kv, envClockSkew+"="); ok {
			v = rest
		}
	}
	if v == "" {
		return nil, nil
	}
	skew, err := time.ParseDuration(v)
	if err != nil {
		return nil, usageError("%s=%q: want a duration such as 7m or -5m", envClockSkew, v)
	}
	// Add keeps time.Now's monotonic reading: elapsed time stays true.
	return clock.LocalFunc(func() time.Time { return time.Now().Add(skew) }), nil
}
