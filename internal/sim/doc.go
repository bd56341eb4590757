// Package sim is the deterministic simulator: producers, workers and
// monitors of one queue run in one test process against a simulated S3
// server, in virtual time (testing/synctest), with every request served in
// an order, and with a fault, chosen by a seeded random source. After each
// run a checker proves the invariants of docs/architecture.md over the
// server's log of applied writes. A failing seed replays exactly.
//
// The package owns the simulated server (Server, Handle), the fault model,
// the world that drives the processes (Run) and the checker. It must not be
// imported by the queue's own packages: it drives them from outside, through
// their public Go API, as a user would embed them.
//
// See docs/reliability.md for what it checks and how to run it.
package sim
