package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/task"
)

// The pace of tail's reconnections to an endpoint that dropped or could
// not be reached: the first after tailRetryFirst, each one twice the one
// before, up to tailRetryMax.
const (
	tailRetryFirst = 250 * time.Millisecond
	tailRetryMax   = 5 * time.Second
	// tailMaxLine bounds one event line (an event's error is the longest
	// part, and a few KiB at most).
	tailMaxLine = 1 << 20
)

var tailCommand = &command{
	name: "tail", nargs: 0, json: true, noStore: true,
	summary: "follow the events of running workers live (their --http /events streams)",
	examples: []string{
		"s3queue tail --from http://worker-1:9464 --from http://worker-2:9464",
		"s3queue tail --from 127.0.0.1:9464 --kind failed,dead --type resize",
		`s3queue tail --from 127.0.0.1:9464 --json | jq -c 'select(.kind == "dead")'`,
	},
	details: "Connects to the /events endpoint of each --from (a worker started with --http ADDR, or any\n" +
		"process serving that stream; a URL without a path gets /events), merges their events as they\n" +
		"come, and prints one line per event (--json: each event's JSON line as received, the format\n" +
		"of --events). An endpoint that drops is reconnected with backoff (250ms doubling to 5s), with\n" +
		"a note on stderr; events sent while it was away are not replayed. An endpoint started with a\n" +
		"token wants it: --token-file FILE or " + tokenEnv + " (sent to every --from as\n" +
		"Authorization: Bearer). It makes no request to the store. It runs until Ctrl-C (exit 0);\n" +
		"exit 1 if no endpoint could be reached at the start.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var from urlList
		fs.Var(&from, "from", "`URL` of a worker's events endpoint, its --http address (repeatable, or comma-separated)")
		typ := fs.String("type", "", "only events of tasks of these `types` (comma-separated)")
		kind := fs.String("kind", "", "only events of these `kinds` (comma-separated), e.g. succeeded,failed,dead")
		tokenFile := fs.String("token-file", "", "send the token in `FILE` (or "+tokenEnv+") to endpoints started with one")
		return func(ctx context.Context, _ []string) error {
			if len(from) == 0 {
				return usageError("tail: want at least one --from URL (a worker's --http address)")
			}
			token, _, err := a.readToken("tail", *tokenFile)
			if err != nil {
				return err
			}
			var f tailFilter
			if *typ != "" {
				for t := range strings.SplitSeq(*typ, ",") {
					t = strings.TrimSpace(t)
					if err := task.ValidType(t); err != nil {
						return usageError("tail: --type %q: %v", t, err)
					}
					f.types = append(f.types, t)
				}
			}
			if *kind != "" {
				for k := range strings.SplitSeq(*kind, ",") {
					k := events.Kind(strings.TrimSpace(k))
					if !k.Known() {
						return usageError("tail: --kind %q: not an event kind (see docs/events.md): %s", k, kindNames())
					}
					f.kinds = append(f.kinds, k)
				}
			}
			return a.tail(ctx, from, f, token)
		}
	},
}

func kindNames() string {
	kinds := events.Kinds()
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// urlList is tail's repeatable --from; each value may list several URLs,
// comma-separated.
type urlList []string

func (l *urlList) String() string { return strings.Join(*l, ",") }

func (l *urlList) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		u, err := eventsURL(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		*l = append(*l, u)
	}
	return nil
}

// eventsURL is the events endpoint s names: http:// is assumed, and a URL
// without a path gets /events.
func eventsURL(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty URL")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("%q is not an http(s) URL like http://127.0.0.1:9090", s)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/events"
	}
	return u.String(), nil
}

// tailFilter keeps the events tail prints.
type tailFilter struct {
	types []string
	kinds []events.Kind
}

func (f tailFilter) keep(e events.Event) bool {
	return (f.types == nil || slices.Contains(f.types, e.Type)) && (f.kinds == nil || slices.Contains(f.kinds, e.Kind))
}

// tailLine is one event line from an endpoint.
type tailLine struct {
	from string
	raw  []byte
}

// tail follows the endpoints until ctx ends, sending them token if it is
// not "".
func (a *app) tail(ctx context.Context, from []string, f tailFilter, token string) error {
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel, below
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := make(chan tailLine, 256)
	first := make(chan error, len(from))
	var notes sync.Mutex // stderr notes come from several goroutines
	note := func(format string, args ...any) {
		notes.Lock()
		defer notes.Unlock()
		fmt.Fprintf(a.stderr, "s3queue: tail: "+format+"\n", args...)
	}
	client := &http.Client{Transport: tailTransport()}
	for _, u := range from {
		wg.Go(func() { follow(ctx, client, u, token, lines, first, note) })
	}
	var failures []string
	reached := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-first:
			if err == nil {
				reached = true
				continue
			}
			failures = append(failures, err.Error())
			if !reached && len(failures) == len(from) {
				return fmt.Errorf("tail: no events endpoint reachable: %s", strings.Join(failures, "; "))
			}
		case l := <-lines:
			var e events.Event
			if err := json.Unmarshal(l.raw, &e); err != nil {
				note("%s: skipping a line that is not an event: %v", l.from, err)
				continue
			}
			if !f.keep(e) {
				continue
			}
			if a.jsonOut {
				fmt.Fprintf(a.stdout, "%s\n", l.raw)
			} else {
				fmt.Fprintln(a.stdout, eventLine(e))
			}
		}
	}
}

// tailTransport is an HTTP transport that gives up on an endpoint that
// does not answer in seconds, but lets a stream run for ever.
func tailTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	t.ResponseHeaderTimeout = 10 * time.Second
	return t
}

// follow streams the event lines of the endpoint at u into lines,
// reconnecting with backoff, until ctx ends. The outcome of its first
// connection goes to first.
func follow(ctx context.Context, client *http.Client, u, token string, lines chan<- tailLine, first chan<- error, note func(string, ...any)) {
	wait := tailRetryFirst
	connected, down := false, false
	for attempt := 0; ; attempt++ {
		body, err := connect(ctx, client, u, token)
		if ctx.Err() != nil {
			if body != nil {
				body.Close()
			}
			return
		}
		if attempt == 0 {
			first <- err
		}
		if err == nil {
			if down {
				note("%s: reconnected", u)
			}
			connected, down, wait = true, false, tailRetryFirst
			err = stream(ctx, u, body, lines)
			body.Close()
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				err = errors.New("stream ended")
			}
		}
		if !down && (connected || attempt > 0) {
			note("%s: %v; reconnecting", u, err)
		}
		down = true
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, tailRetryMax)
	}
}

// connect opens the event stream at u.
func connect(ctx context.Context, client *http.Client, u, token string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	req.Header.Set("Accept", "application/x-ndjson")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is said once, below
		}
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return resp.Body, nil
	case http.StatusUnauthorized:
		resp.Body.Close()
		if token == "" {
			return nil, fmt.Errorf("%s: %s: the endpoint wants a token: give it with --token-file FILE or %s", u, resp.Status, tokenEnv)
		}
		return nil, fmt.Errorf("%s: %s: the endpoint refused the token given (--token-file or %s)", u, resp.Status, tokenEnv)
	default:
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s (is it a worker started with --http?)", u, resp.Status)
	}
}

// stream copies the lines of body into lines until it ends.
func stream(ctx context.Context, u string, body io.Reader, lines chan<- tailLine) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), tailMaxLine)
	for sc.Scan() {
		raw := sc.Bytes()
		if len(strings.TrimSpace(string(raw))) == 0 {
			continue
		}
		select {
		case lines <- tailLine{from: u, raw: slices.Clone(raw)}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return sc.Err()
}

// eventLine is an event as tail prints it for people: time, source and
// origin, kind, task and type, then the fields the event has.
func eventLine(e events.Event) string {
	src := e.Source
	if e.Origin != "" {
		src += "/" + e.Origin
	}
	if src == "" {
		src = "-"
	}
	id, typ := e.TaskID, e.Type
	if id == "" {
		id = "-"
	}
	if typ == "" {
		typ = "-"
	}
	s := fmt.Sprintf("%s  %-20s  %-16s  %-26s  %s", fmtTime(e.Time), src, e.Kind, id, typ)
	if e.Attempt > 0 {
		s += fmt.Sprintf("  attempt=%d", e.Attempt)
	}
	if e.Shard >= 0 {
		s += fmt.Sprintf("  shard=%d", e.Shard)
	}
	if e.Pool != "" {
		s += "  pool=" + e.Pool
	}
	if e.Phase != "" {
		s += "  phase=" + e.Phase
	}
	if e.Key != "" {
		s += "  key=" + e.Key
	}
	if e.Err != nil {
		s += fmt.Sprintf("  err=%q", oneLine(e.Err.Error()))
	}
	return s
}
