package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/internal/schedule"
	"github.com/s3queue/s3queue/task"
)

// The schedule command manages periodic tasks (docs/scheduling.md): the
// schedule objects under schedules/ that the monitors' schedulers read.

var scheduleCommand = &command{
	name: "schedule", args: "add|list|remove|pause|resume [NAME]", nargs: -1, json: true,
	summary: "add, list, remove, pause or resume periodic tasks",
	details: "add NAME --cron EXPR|--every DUR --type T [--input JSON] [--timezone ZONE] [--catch-up one|none]\n" +
		"    [--max-attempts N] [--timeout DUR]: adds the schedule, or changes its definition (its last\n" +
		"    tick stays). Its first task is for the first tick after now. --cron is a standard 5-field\n" +
		"    expression (minute hour day-of-month month day-of-week) or @hourly, @daily, @weekly,\n" +
		"    @monthly, @yearly, read in --timezone (an IANA name; default UTC); --every ticks at the\n" +
		"    multiples of DUR since the Unix epoch. --catch-up: after ticks missed while no scheduler\n" +
		"    ran, \"one\" (default) submits one task for the latest, \"none\" skips them.\n" +
		"list: every schedule, its next tick (in its zone) and its last one.\n" +
		"remove NAME: no tick after it is submitted (submitted tasks stay).\n" +
		"pause NAME / resume NAME: stop and restart its ticks; a resume does not catch up.\n" +
		"The monitors (scheduler = true, the default) submit one task per tick fleet-wide, with the\n" +
		"idempotency key schedule:NAME:TICK, and see changes within monitor.schedule_refresh (1m).",
	examples: []string{
		`s3queue schedule add cleanup --cron "*/5 * * * *" --type cleanup --input '{"older_than":"1h"}'`,
		`s3queue schedule add report --cron "0 9 * * 1-5" --timezone Europe/Paris --type report --catch-up none`,
		"s3queue schedule list --json",
	},
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		cronExpr := fs.String("cron", "", "add: cron `expression` (5 fields, or @hourly, @daily...)")
		every := fs.Duration("every", 0, "add: fixed `interval` (e.g. 90s)")
		zone := fs.String("timezone", "", "add: IANA time `zone` the cron expression is read in (default UTC)")
		typ := fs.String("type", "", "add: the task `type` each tick submits")
		input := fs.String("input", "", "add: the task's input, `JSON`")
		catchUp := fs.String("catch-up", "", "add: after missed ticks, \"one\" (default: one task for the latest) or \"none\"")
		maxAttempts := fs.Int("max-attempts", 0, "add: attempts of each task (default: [submit] max_attempts)")
		timeout := fs.Duration("timeout", 0, "add: lease of one attempt (default: [submit] timeout)")
		return func(ctx context.Context, args []string) error {
			if len(args) == 0 {
				return usageError("schedule: want a subcommand: add, list, remove, pause or resume (run 's3queue help schedule')")
			}
			sub, rest := args[0], args[1:]
			addFlags := map[string]bool{"cron": true, "every": true, "timezone": true, "type": true, "input": true,
				"catch-up": true, "max-attempts": true, "timeout": true}
			var misplaced error
			fs.Visit(func(f *flag.Flag) {
				if addFlags[f.Name] && sub != "add" && misplaced == nil {
					misplaced = usageError("schedule %s: --%s is a flag of 'schedule add'", sub, f.Name)
				}
			})
			if misplaced != nil {
				return misplaced
			}
			want := 1
			switch sub {
			case "list":
				want = 0
			case "add", "remove", "pause", "resume":
			default:
				return usageError("schedule: unknown subcommand %q (want add, list, remove, pause or resume)", sub)
			}
			if len(rest) != want {
				if want == 0 {
					return usageError("schedule list: unexpected argument %q", rest[0])
				}
				return usageError("schedule %s: want NAME, got %d arguments", sub, len(rest))
			}
			if sub != "add" && sub != "list" {
				if err := schedule.CheckName(rest[0]); err != nil {
					return usageError("schedule %s: %v", sub, err)
				}
			}
			if sub == "add" {
				everySet := false
				fs.Visit(func(f *flag.Flag) { everySet = everySet || f.Name == "every" })
				if everySet {
					if err := schedule.CheckEvery(*every); err != nil {
						return usageError("schedule add: schedule %q: --%v", rest[0], err)
					}
				}
				d := s3queue.ScheduleDefinition{Name: rest[0], Cron: *cronExpr, Every: task.Duration(*every), Timezone: *zone,
					Type: *typ, MaxAttempts: *maxAttempts, Timeout: task.Duration(*timeout), CatchUp: *catchUp}
				if *input != "" {
					d.Input = json.RawMessage(*input)
				}
				if err := d.Validate(); err != nil {
					return usageError("schedule add: %v", err)
				}
			}
			// A new schedule creates the queue, as a submit does; the other
			// subcommands are about schedules a store without a queue
			// cannot hold.
			var q *s3queue.Queue
			var err error
			if sub == "add" {
				_, q, err = a.queue(ctx)
			} else {
				q, err = a.existingQueue(ctx)
			}
			if err != nil {
				return err
			}
			var s s3queue.Schedule
			switch sub {
			case "list":
				all, err := q.Schedules(ctx)
				if err != nil {
					return cause(err)
				}
				return a.printSchedules(ctx, q, all)
			case "add":
				d := s3queue.ScheduleDefinition{Name: rest[0], Cron: *cronExpr, Every: task.Duration(*every), Timezone: *zone,
					Type: *typ, MaxAttempts: *maxAttempts, Timeout: task.Duration(*timeout), CatchUp: *catchUp}
				if *input != "" {
					d.Input = json.RawMessage(*input)
				}
				s, err = q.AddSchedule(ctx, d)
			case "remove":
				err = q.RemoveSchedule(ctx, rest[0])
				if err == nil && !a.jsonOut {
					fmt.Fprintf(a.stdout, "removed schedule %s\n", rest[0])
					return nil
				}
				if err == nil {
					return writeJSON(a.stdout, map[string]any{"removed": rest[0]})
				}
			case "pause":
				s, err = q.PauseSchedule(ctx, rest[0])
			case "resume":
				s, err = q.ResumeSchedule(ctx, rest[0])
			}
			if errors.Is(err, s3queue.ErrNoSchedule) {
				return withCode(exitNotFound, cause(err))
			}
			if err != nil {
				return cause(err)
			}
			return a.printSchedules(ctx, q, []s3queue.Schedule{s})
		}
	},
}

// scheduleJSON is the --json form of a schedule: stable snake_case keys.
type scheduleJSON struct {
	Name        string          `json:"name"`
	Cron        string          `json:"cron,omitempty"`
	Every       string          `json:"every,omitempty"`
	Timezone    string          `json:"timezone"`
	Type        string          `json:"type"`
	Input       json.RawMessage `json:"input,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Timeout     string          `json:"timeout,omitempty"`
	CatchUp     string          `json:"catch_up"`
	Paused      bool            `json:"paused"`
	NextTick    string          `json:"next_tick,omitempty"`
	LastTick    string          `json:"last_tick,omitempty"`
	LastTask    string          `json:"last_task,omitempty"`
	Skipped     int64           `json:"skipped"`
	Version     int64           `json:"version"`
	UpdatedAt   time.Time       `json:"updated_at"`
	UpdatedBy   string          `json:"updated_by,omitempty"`
}

func (a *app) printSchedules(ctx context.Context, q *s3queue.Queue, all []s3queue.Schedule) error {
	now, err := q.Now(ctx)
	if err != nil {
		return cause(err)
	}
	rows := make([]scheduleJSON, 0, len(all))
	for _, s := range all {
		r := scheduleJSON{Name: s.Name, Cron: s.Cron, Timezone: s.Timezone, Type: s.Type, Input: s.Input, MaxAttempts: s.MaxAttempts,
			CatchUp: s.CatchUpMode(), Paused: s.Paused, LastTask: s.LastTask, Skipped: s.Skipped, Version: s.Version,
			UpdatedAt: s.UpdatedAt, UpdatedBy: s.UpdatedBy}
		if r.Timezone == "" {
			r.Timezone = "UTC"
		}
		if s.Every != 0 {
			r.Every = s.Every.String()
		}
		if s.Timeout != 0 {
			r.Timeout = s.Timeout.String()
		}
		if n := s3queue.NextTick(s, now); !n.IsZero() {
			r.NextTick = n.Format(time.RFC3339)
		}
		if !s.LastTick.IsZero() {
			loc := time.UTC
			if l, err := time.LoadLocation(s.Timezone); err == nil && s.Cron != "" {
				loc = l
			}
			r.LastTick = s.LastTick.In(loc).Format(time.RFC3339)
		}
		rows = append(rows, r)
	}
	if a.jsonOut {
		return writeJSON(a.stdout, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(a.stdout, "no schedules")
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tWHEN\tTYPE\tSTATE\tNEXT TICK\tLAST TICK\tLAST TASK")
	for _, r := range rows {
		when := r.Cron + " " + r.Timezone
		if r.Every != "" {
			when = "every " + r.Every
		}
		state := "active"
		if r.Paused {
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, when, r.Type, state, dash(r.NextTick), dash(r.LastTick), dash(r.LastTask))
	}
	return tw.Flush()
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
