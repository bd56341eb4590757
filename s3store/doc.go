// Package s3store is the storage contract every other package of s3queue is
// built on: a small, strict view of an S3 bucket (get, head, conditional put,
// delete, list by prefix, and the server's time).
//
// Backends live in their own packages (s3store/awss3, s3store/local,
// s3store/mem) and all pass the conformance suite in s3store/storetest.
// Cross-cutting concerns (request counting, fault injection) are wrappers in
// this package; JSON encoding lives with the callers, never inside a backend.
//
// The package must not know about tasks, leases or shards.
package s3store
