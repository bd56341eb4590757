// Package metrics exports what one s3queue process does as Prometheus
// metrics: tasks submitted, attempts ended by outcome, events by kind,
// handler durations, the dispatch queues, task lease renewals and losses,
// fleet membership and sleep, S3 requests by operation and outcome with
// their latency and estimated cost (an s3:// store's only), the build,
// and, in the monitor, the tasks stored by status.
//
// Names and labels follow Prometheus practice: a counter has one meaning,
// so its sum over its labels counts something (tasks, attempts, events);
// rates are left to PromQL; a label name means one thing everywhere; and
// nothing is exported as a sentinel value (what does not exist has no
// series).
//
// Each process has its own Registry (never Prometheus's global one), fed
// from three places: an events.Bus subscriber (task outcomes, the fleet's
// sleep), an s3store.Counter's request hook (S3 requests and spend), and
// collectors that read a worker's gauges at scrape time. The monitor sets
// the queue-level gauges from its sweeps (SetQueue).
//
// It sends no request of its own and must never block the queue: the
// subscriber is bounded (a scrape that falls behind loses counts, never
// the worker's time), and the request hook does a few atomic adds.
// docs/operations.md lists every metric; a test checks that the Grafana
// dashboard and the alert rules in deploy/ name only metrics exported here.
package metrics
