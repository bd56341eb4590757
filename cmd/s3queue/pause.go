package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/s3queue/s3queue"
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
			if err := checkTypes(args); err != nil {
				return err
			}
			_, q, err := a.queue(ctx)
			if err != nil {
				return err
			}
			s, err := q.PauseWithReason(ctx, *reason, args...)
			if err != nil {
				return cause(err)
			}
			return a.printPause(s)
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
			if err := checkTypes(args); err != nil {
				return err
			}
			q, err := a.existingQueue(ctx)
			if err != nil {
				return err
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

// checkTypes refuses an empty type name (a shell variable that was unset).
func checkTypes(types []string) error {
	for _, t := range types {
		if strings.TrimSpace(t) == "" {
			return usageError("empty task type")
		}
	}
	return nil
}

// pauseJSON is the --json form of a pause state: stable snake_case fields.
type pauseJSON struct {
	QueuePaused bool      `json:"queue_paused"`
	PausedTypes []string  `json:"paused_types"`
	Version     int64     `json:"version"`
	UpdatedAt   time.Time `json:"updated_at,omitzero"`
	UpdatedBy   string    `json:"updated_by,omitempty"`
	Reason      string    `json:"reason,omitempty"`
}

func (a *app) printPause(s s3queue.PauseState) error {
	if a.jsonOut {
		types := s.Types
		if types == nil {
			types = []string{}
		}
		return writeJSON(a.stdout, pauseJSON{QueuePaused: s.All, PausedTypes: types, Version: s.Version,
			UpdatedAt: s.UpdatedAt, UpdatedBy: s.UpdatedBy, Reason: s.Reason})
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
