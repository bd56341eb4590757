package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
)

var doctorCommand = &command{
	name: "doctor", nargs: 0, json: true,
	summary: "check that the store honours conditional writes; show server time and the queue's layout",
	examples: []string{
		`s3queue doctor --store "s3://my-bucket/queue?endpoint=http://127.0.0.1:9000&path_style=true"`,
		"s3queue doctor --json | jq .checks",
	},
	details: "Writes and deletes a few scratch objects under doctor/ (about ten requests). Exit 4 if the\n" +
		"provider does not honour a conditional PUT s3queue relies on: it cannot claim tasks safely\n" +
		"there. The command that creates a queue (submit, schedule add, pause, worker, monitor) runs the\n" +
		"same check and records the result in the queue's manifest; later commands trust it.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(ctx context.Context, _ []string) error {
			st, url, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			rep, err := s3store.CheckProvider(ctx, st, shards.ProviderCheckPrefix)
			if err != nil {
				return err
			}
			d := doctorReport{Store: url, Report: rep, Checks: checksOf(rep), Skew: rep.Skew.String()}
			if err := rep.Supported(); err != nil {
				d.Problem = err.Error()
			} else {
				d.Supported = true
			}
			q, merr := a.openQueue(ctx, st, url, true)
			switch {
			case merr == nil:
				m := q.Manifest()
				d.Queue = &m
			case errors.Is(merr, s3queue.ErrNoQueue):
			default:
				d.QueueError = merr.Error()
			}
			if a.jsonOut {
				if err := writeJSON(a.stdout, d); err != nil {
					return err
				}
			} else {
				printDoctor(a.stdout, d)
			}
			if !d.Supported {
				return withCode(exitUnsupported, errors.New(d.Problem))
			}
			if merr != nil && !errors.Is(merr, s3queue.ErrNoQueue) {
				return merr
			}
			return nil
		}
	},
}

// doctorReport is what doctor found; its JSON is doctor --json's.
type doctorReport struct {
	Store      string                 `json:"store"`
	Supported  bool                   `json:"supported"`
	Problem    string                 `json:"problem,omitempty"`
	Report     s3store.ProviderReport `json:"-"`
	Checks     doctorChecks           `json:"checks"`
	Skew       string                 `json:"skew"`
	Queue      *s3queue.Manifest      `json:"queue,omitempty"`
	QueueError string                 `json:"queue_error,omitempty"`
}

// doctorChecks is the provider report in doctor --json, with the
// snake_case keys of every --json output (s3store.ProviderReport has no
// JSON form of its own).
type doctorChecks struct {
	CreateIfAbsent    bool      `json:"create_if_absent"`
	StaleIfMatch      bool      `json:"stale_if_match"`
	IfMatchMissingKey bool      `json:"if_match_missing_key"`
	IfMatchMissing    string    `json:"if_match_missing"`
	ConditionalDelete string    `json:"conditional_delete"`
	ServerTime        time.Time `json:"server_time"`
	SkewSeconds       float64   `json:"skew_seconds"`
	Requests          int       `json:"requests"`
}

func checksOf(r s3store.ProviderReport) doctorChecks {
	return doctorChecks{
		CreateIfAbsent: r.CreateIfAbsent, StaleIfMatch: r.StaleIfMatch,
		IfMatchMissingKey: r.IfMatchMissingKey, IfMatchMissing: r.IfMatchMissing,
		ConditionalDelete: r.ConditionalDelete, ServerTime: r.ServerTime,
		SkewSeconds: r.Skew.Seconds(), Requests: r.Requests,
	}
}

func printDoctor(w io.Writer, d doctorReport) {
	r := d.Report
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	check := func(name string, ok bool, good, bad string) {
		if ok {
			fmt.Fprintf(tw, "%s\tok\t%s\n", name, good)
		} else {
			fmt.Fprintf(tw, "%s\tFAIL\t%s\n", name, bad)
		}
	}
	fmt.Fprintf(tw, "store\t\t%s\n", d.Store)
	check("create-if-absent", r.CreateIfAbsent,
		"a second PUT with If-None-Match: * was refused (412)",
		"a second PUT with If-None-Match: * overwrote the object")
	check("stale If-Match", r.StaleIfMatch,
		"a PUT with a stale If-Match was refused (412)",
		"a PUT with a stale If-Match overwrote the object")
	missingGood := "refused with 404, nothing created"
	if r.IfMatchMissing == s3store.MissingPrecondition {
		missingGood = "refused with 412, nothing created (as gofakes3 does; s3queue takes it as a 404)"
	}
	check("If-Match on missing key", r.IfMatchMissingKey, missingGood, r.IfMatchMissing+" (want 404 or 412, and nothing created)")
	switch r.ConditionalDelete {
	case s3store.DeleteHonoured:
		fmt.Fprintf(tw, "conditional DELETE\thonoured\ta stale If-Match DELETE was refused (retention deletes a finished task in one request)\n")
	default:
		fmt.Fprintf(tw, "conditional DELETE\tignored\tthe object was deleted anyway, as MinIO does (retention tombstones a finished task first)\n")
	}
	fmt.Fprintf(tw, "server time\t\t%s\n", r.ServerTime.UTC().Format(time.RFC3339))
	skew := fmt.Sprintf("%+v against this machine's clock (informational: s3queue decides by S3 time)", r.Skew)
	fmt.Fprintf(tw, "clock skew\t\t%s\n", skew)
	fmt.Fprintf(tw, "requests\t\t%d\n", r.Requests)
	switch {
	case d.Queue != nil:
		fmt.Fprintf(tw, "queue\t\t%d shards, layout format %d, created %s\n", d.Queue.Shards, d.Queue.Format, fmtTime(d.Queue.CreatedAt))
	case d.QueueError != "":
		fmt.Fprintf(tw, "queue\tFAIL\t%s\n", oneLine(d.QueueError))
	default:
		fmt.Fprintf(tw, "queue\t\tnone yet (the first submit or worker creates it)\n")
	}
	if d.Supported {
		fmt.Fprintf(tw, "result\tok\ts3queue can run on this store\n")
	} else {
		fmt.Fprintf(tw, "result\tUNSUPPORTED\ts3queue refuses to run on this store\n")
	}
	tw.Flush()
}
