package events

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// Log returns a subscriber that logs each event through logger: outcomes
// (Kind.IsOutcome) at info, everything else at debug. The message is the
// kind in words ("task succeeded", "shard acquired"); the attributes are
// the event's non-empty fields under snake_case keys (source, origin,
// task_id, type, attempt, shard, pool, phase, key, err, duration), and the record carries
// the event's time.
//
//	bus.Subscribe("log", 0, events.Log(logger))
func Log(logger *slog.Logger) func(Event) {
	h := logger.Handler()
	return func(e Event) {
		level := slog.LevelDebug
		switch {
		case e.Kind == LeaseLost || e.Kind == OutcomeRejected:
			level = slog.LevelWarn // a handler ran, or runs, without its lease
		case e.Kind.IsOutcome():
			level = slog.LevelInfo
		}
		if !h.Enabled(background, level) {
			return
		}
		r := slog.NewRecord(e.Time, level, message(e.Kind), 0)
		if e.Source != "" {
			r.AddAttrs(slog.String("source", e.Source))
		}
		if e.Origin != "" {
			r.AddAttrs(slog.String("origin", e.Origin))
		}
		if e.TaskID != "" {
			r.AddAttrs(slog.String("task_id", e.TaskID))
		}
		if e.Type != "" {
			r.AddAttrs(slog.String("type", e.Type))
		}
		if e.Attempt != 0 {
			r.AddAttrs(slog.Int("attempt", e.Attempt))
		}
		if e.Shard >= 0 {
			r.AddAttrs(slog.Int("shard", e.Shard))
		}
		if e.Pool != "" {
			r.AddAttrs(slog.String("pool", e.Pool))
		}
		if e.Phase != "" {
			r.AddAttrs(slog.String("phase", e.Phase))
		}
		if e.Key != "" {
			r.AddAttrs(slog.String("key", e.Key))
		}
		if e.Err != nil {
			r.AddAttrs(slog.String("err", e.Err.Error()))
		}
		if e.Duration > 0 {
			r.AddAttrs(slog.Duration("duration", e.Duration))
		}
		_ = h.Handle(background, r) // a handler's write error has nowhere better to go
	}
}

// message is the log message of kind k: the kind in words, "task ..." for
// the kinds about a task.
func message(k Kind) string {
	words := strings.ReplaceAll(string(k), "_", " ")
	switch k {
	case ShardAcquired, ShardReleased, FleetAsleep, FleetWoken:
		return words
	case OutcomeRejected:
		return "task outcome rejected: the task was re-dispatched while this attempt ran"
	}
	return "task " + words
}

// JSONLines returns a subscriber that writes each event to w as one JSON
// object per line (Event.MarshalJSON), with one Write call per line: lines
// from several writers appending to one file do not interleave. A write
// that fails is warned about through slog.Default once, until a write
// succeeds again; the events it carried are lost.
//
//	bus.Subscribe("json", 0, events.JSONLines(f))
func JSONLines(w io.Writer) func(Event) {
	var mu sync.Mutex // a subscriber runs on one goroutine, but the function may be shared
	failing := false
	return func(e Event) {
		b, ok := line(e)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		_, err := w.Write(b)
		switch {
		case err != nil && !failing:
			failing = true
			slog.Default().Warn("events: write JSON lines; events are lost until a write succeeds", "err", err)
		case err == nil:
			failing = false
		}
	}
}

// line is e as one line of JSON, newline included; false (and a warning)
// for an event no JSON can hold, which none of the kinds here is.
func line(e Event) ([]byte, bool) {
	b, err := json.Marshal(e)
	if err != nil {
		slog.Default().Warn("events: encode event", "kind", string(e.Kind), "err", err)
		return nil, false
	}
	return append(b, '\n'), true
}
