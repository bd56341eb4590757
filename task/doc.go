// Package task owns the task model of s3queue: the canonical task object
// stored at tasks/{shard}/{id}.json, its JSON encoding and the status its
// size tells a listing, its state machine (claim, renew, succeed, fail,
// snooze, expire, cancel, requeue), the decision of a worker's commit
// (Settle), retry delays, task ids, the mapping from keys to shards, and the
// idempotency record at idempotency/{hash}.json that binds an idempotency
// key to the one task it created.
//
// It is pure code and must not do I/O: it never imports s3store, never reads
// the local clock and never uses global randomness. Every function that needs
// the time takes now (which callers take from S3 server time, invariant 4),
// and randomness is injected. Callers read a task, apply one transition and
// write it back with If-Match; every successful transition bumps Version so
// the written bytes always change (invariant 2), and outcome transitions are
// fenced by the claim id (invariant 3).
package task
