package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
)

var reshardCommand = &command{
	name: "reshard", nargs: 0,
	summary: "grow the queue's shard count while producers, workers and monitors run",
	examples: []string{
		"s3queue reshard --shards 64",
	},
	details: "--shards N (required) is the new count, from the current one up to 1000; shrinking is refused.\n" +
		"Tasks stay where they are: a task placed before the reshard is found by one more GET per\n" +
		"earlier count. Running workers, producers and monitors learn the new count from the fleet\n" +
		"object within a few seconds; the manifest becomes layout format 2, which s3queue binaries\n" +
		"older than this one refuse to open. Four requests (manifest and fleet object, read and written).",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		n := fs.Int("shards", 0, "the new shard `count` (1..1000, at least the current count)")
		return func(ctx context.Context, _ []string) error {
			if *n < 1 || *n > shards.MaxShards {
				return usageError("reshard: --shards N is required, from the queue's current count up to %d (got %d)", shards.MaxShards, *n)
			}
			st, url, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			before, after, err := shards.Grow(ctx, st, *n)
			switch {
			case errors.Is(err, shards.ErrShrink):
				return withCode(exitUsage, err) // the queue has more shards than n
			case errors.Is(err, s3store.ErrNotFound):
				return noQueue(url) // no manifest: Grow wrote nothing
			}
			if err != nil {
				return err
			}
			if after.Shards == before.Shards {
				fmt.Fprintf(a.stdout, "the queue already has %d shards: nothing to do\n", after.Shards)
			} else {
				fmt.Fprintf(a.stdout, "resharded: %d -> %d shards\n", before.Shards, after.Shards)
			}
			if a.cfg.Shards != 0 && a.cfg.Shards != after.Shards {
				fmt.Fprintf(a.stderr, "s3queue: note: the configuration says shards = %d; set shards = %d (or remove the setting), or processes started with it refuse to open the queue\n", a.cfg.Shards, after.Shards)
			}
			return nil
		}
	},
}
