package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// The pause commands change or show the queue's pause object
// (docs/pause.md): workers read it every pause_check_interval and claim no
// task of a paused type, nor any while the whole queue is paused.

var pauseCommand = &command{
	name: "pause", args: "[TYPE...]", nargs: -1, json: true,
	summary: "stop workers claiming tasks of some types, or of the whole queue",
	details: "With types, workers stop claiming tasks of those types; with none, the whole queue is paused.\n" +
		"Every worker reads the pause object (" + s3queue.PauseKey + ") every worker.pause_check_interval\n" +
		"(10s by default), so the pause holds fleet-wide within that interval. Running tasks finish;\n" +
		"paused tasks stay pending, no attempt used, until 's3queue resume'.",
	examples: []string{
		"s3queue pause email --reason 'SMTP provider down'",
		"s3queue pause",
	},
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		reason := fs.String("reason", "", "why, recorded in the pause object")
		return func(ctx context.Context, args []string) error {
			if err := checkTypes("pause", args); err != nil {
				return err
			}
			st, q, err := a.queue(ctx)
			if err != nil {
				return err
			}
			s, err := q.PauseWithReason(ctx, *reason, args...)
			if err != nil {
				return cause(err)
			}
			if err := a.printPause(s); err != nil {
				return err
			}
			a.warnUnknownTypes(ctx, st, args)
			return nil
		}
	},
}

var resumeCommand = &command{
	name: "resume", args: "[TYPE...]", nargs: -1, json: true,
	summary: "let workers claim paused types again, or everything",
	details: "With types, those types are resumed; with none, everything is: the whole-queue pause and\n" +
		"every paused type. Workers claim the paused tasks again within worker.pause_check_interval.\n" +
		"A type resumed while the whole queue stays paused runs once the queue is resumed.",
	examples: []string{
		"s3queue resume email",
		"s3queue resume",
	},
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(ctx context.Context, args []string) error {
			badType := checkTypes("resume", args)
			q, err := a.existingQueue(ctx)
			if err != nil {
				return cmp.Or(badType, err)
			}
			if badType != nil {
				// A name an older s3queue paused without checking it
				// can still be resumed: it is the way to clear it.
				s, err := q.Paused(ctx)
				if err != nil || !allPaused(s, args) {
					return badType
				}
			}
			s, err := q.Resume(ctx, args...)
			if err != nil {
				return cause(err)
			}
			return a.printPause(s)
		}
	},
}

var pausedCommand = &command{
	name: "paused", nargs: 0, json: true,
	summary:  "show what is paused",
	details:  "Prints whether the whole queue is paused, the paused types, and who last changed it (one GET).",
	examples: []string{"s3queue paused", "s3queue paused --json"},
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(ctx context.Context, args []string) error {
			q, err := a.existingQueue(ctx)
			if err != nil {
				return err
			}
			s, err := q.Paused(ctx)
			if err != nil {
				return cause(err)
			}
			return a.printPause(s)
		}
	},
}

// checkTypes checks the types of cmd's arguments as submit checks a
// task's type (task.ValidType): a name no task can have is refused before
// any request.
func checkTypes(cmd string, types []string) error {
	for _, t := range types {
		if err := task.ValidType(t); err != nil {
			return usageError("%s: %v", cmd, err)
		}
	}
	return nil
}

// allPaused reports whether every one of types is paused in s.
func allPaused(s s3queue.PauseState, types []string) bool {
	for _, t := range types {
		if !slices.Contains(s.Types, t) {
			return false
		}
	}
	return true
}

// warnUnknownTypes warns about each of types that nothing cheaply known
// runs: no [handlers] entry, [pools] type or [[schedule]] of the
// configuration, and no type of the fleet object (one GET): the handler
// types of its members, live or lately gone, and the types of the pending
// tasks a sleeping fleet could not run. A misspelt type ("emial") is
// paused without effect, and nothing else would say so. Listing the tasks
// to find the type would cost a GET per task; the warning does without.
func (a *app) warnUnknownTypes(ctx context.Context, st s3store.Store, types []string) {
	known := map[string]bool{}
	for t := range a.cfg.Handlers {
		known[t] = true
	}
	for _, p := range a.cfg.WorkerSection.Pools {
		for _, t := range p.Types {
			known[t] = true
		}
	}
	for _, d := range a.cfg.Schedules {
		known[d.Type] = true
	}
	var unknown []string
	for _, t := range types {
		if !known[t] {
			unknown = append(unknown, t)
		}
	}
	if len(unknown) == 0 {
		return
	}
	fleet, _, err := shards.ReadFleet(ctx, st)
	if err != nil {
		return // no warning is better than a wrong one
	}
	for _, m := range fleet.Members {
		for _, t := range m.Types {
			known[t] = true
		}
	}
	for _, t := range fleet.Waiting {
		known[t] = true
	}
	for _, t := range unknown {
		if !known[t] {
			a.warnf("pause: no worker of the fleet nor the configuration runs type %q: check its spelling (the pause is recorded, and holds for any worker that runs it later)", t)
		}
	}
}

// pauseJSON is the --json form of a pause state: stable snake_case fields,
// every one of them always present (docs/cli.md lists them), empty when
// the state has none: a script reads .reason without testing for it.
type pauseJSON struct {
	QueuePaused bool     `json:"queue_paused"`
	PausedTypes []string `json:"paused_types"`
	Version     int64    `json:"version"`
	// UpdatedAt is null until the pause object is first written.
	UpdatedAt *time.Time `json:"updated_at"`
	UpdatedBy string     `json:"updated_by"`
	Reason    string     `json:"reason"`
}

func (a *app) printPause(s s3queue.PauseState) error {
	if a.jsonOut {
		types := s.Types
		if types == nil {
			types = []string{}
		}
		out := pauseJSON{QueuePaused: s.All, PausedTypes: types, Version: s.Version, UpdatedBy: s.UpdatedBy, Reason: s.Reason}
		if !s.UpdatedAt.IsZero() {
			out.UpdatedAt = &s.UpdatedAt
		}
		return writeJSON(a.stdout, out)
	}
	queue := "running"
	if s.All {
		queue = "paused (no task of any type is claimed)"
	}
	types := "none"
	if len(s.Types) > 0 {
		types = strings.Join(s.Types, ", ")
	}
	fmt.Fprintf(a.stdout, "queue:         %s\n", queue)
	fmt.Fprintf(a.stdout, "paused types:  %s\n", types)
	if s.Version > 0 {
		line := fmtTime(s.UpdatedAt) + " by " + s.UpdatedBy
		if s.Reason != "" {
			line += " (" + s.Reason + ")"
		}
		fmt.Fprintf(a.stdout, "last change:   %s\n", line)
	}
	return nil
}
