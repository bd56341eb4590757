package producer

import (
	"context"
	"fmt"
	"iter"
)

// SubmitEach submits a task for each item of items, with at most n
// submissions under way at once (n <= 0: Config.BatchParallelism), and
// yields each item with its Result as its submission finishes: in the
// order they finish, not the order of items.
//
// Reserve, then build: SubmitEach takes the next item from items only
// once a slot is free, and calls build for it inside that slot. Whatever
// build allocates (the task input read from a file, an image decoded and
// encoded) therefore exists for at most n items at once, however long
// items is: a batch of a million submissions holds at most n payloads.
// Build heavy inputs in build, not before. An error from build is that
// item's Result.Err, and nothing is submitted for it.
//
// Breaking out of the loop cancels the submissions under way and waits
// for them; their Results are not yielded (a canceled submission may still
// have created its task: resubmit with an idempotency key to be sure).
// When ctx ends, SubmitEach takes no more items, yields the Results of
// those it took, and ends: the items not taken are left in items.
//
// Each item costs the requests of one Submit; SubmitEach adds none.
func SubmitEach[T any](ctx context.Context, p *Producer, n int, items iter.Seq[T], build func(context.Context, T) (Request, error)) iter.Seq2[T, Result] {
	if n <= 0 {
		n = p.cfg.BatchParallelism
	}
	return func(yield func(T, Result) bool) {
		ctx, cancel := context.WithCancel(ctx)
		type finished struct {
			item T
			res  Result
		}
		// Buffered: a submission that finishes never waits for the
		// consumer, so breaking out is never blocked by one.
		done := make(chan finished, n)
		running := 0
		defer func() {
			cancel()
			for ; running > 0; running-- {
				<-done
			}
		}()
		// next waits for one submission to finish and yields it.
		next := func() bool {
			f := <-done
			running--
			return yield(f.item, f.res)
		}
		for item := range items {
			running++
			go func() { done <- finished{item, buildAndSubmit(ctx, p, item, build)} }()
			if running == n && !next() {
				return
			}
			if ctx.Err() != nil {
				break
			}
		}
		for running > 0 {
			if !next() {
				return
			}
		}
	}
}

func buildAndSubmit[T any](ctx context.Context, p *Producer, item T, build func(context.Context, T) (Request, error)) Result {
	if err := ctx.Err(); err != nil {
		return Result{Err: fmt.Errorf("submit: %w", err)}
	}
	req, err := build(ctx, item)
	if err != nil {
		return Result{Err: fmt.Errorf("build request: %w", err)}
	}
	id, err := p.Submit(ctx, req.Type, req.Input, req.Options)
	return Result{ID: id, Err: err}
}
