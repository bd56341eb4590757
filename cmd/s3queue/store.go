package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/s3queue/s3queue/producer"
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

// openExisting opens the queue in st without creating it: read commands
// must not write a manifest into a bucket that has none. It returns
// errNoQueue when there is no queue.
func (a *app) openExisting(ctx context.Context, st s3store.Store) (shards.Manifest, error) {
	if _, err := st.Head(ctx, shards.ManifestKey); err != nil {
		if errors.Is(err, s3store.ErrNotFound) {
			return shards.Manifest{}, errNoQueue
		}
		return shards.Manifest{}, fmt.Errorf("read queue manifest: %w", err)
	}
	return shards.Open(ctx, st, a.cfg.Shards)
}

// existingProducer opens a producer on an existing queue. A missing queue
// means every task id is unknown.
func (a *app) existingProducer(ctx context.Context, id string) (*producer.Producer, error) {
	st, _, err := a.openStore(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := a.openExisting(ctx, st); err != nil {
		if errors.Is(err, errNoQueue) {
			return nil, notFound(id)
		}
		return nil, err
	}
	cfg := a.cfg.Producer()
	cfg.Logger = a.log
	return producer.New(ctx, st, cfg)
}

func notFound(id string) error {
	return withCode(exitNotFound, fmt.Errorf("task %s not found", id))
}

// taskError turns a producer error about id into the CLI's message.
func taskError(id string, err error) error {
	if errors.Is(err, producer.ErrNotFound) {
		return notFound(id)
	}
	return err
}
