// Package dashboard serves the monitor's web dashboard: one page (HTML, CSS
// and vanilla JavaScript embedded in the binary, charts drawn as inline SVG,
// nothing fetched from elsewhere) and a small JSON API over the monitor's
// State and the producer's task operations.
//
// A page view costs the bucket nothing: GET /api/state returns what the
// monitor's sweeps already learnt (monitor.State, taken from memory). A task
// detail costs one GET of the task object. Actions (requeue, cancel,
// requeue the dead of a type) are refused unless the dashboard was given a
// token at start-up and the request carries it (Authorization: Bearer);
// with a token, the API's reads need it too (the page's HTML, script and
// style, which hold no data, do not). The token never appears in a
// response, a log line or the page.
//
// It must not scan the bucket, nor hold any state of its own beyond its
// configuration.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/s3queue/s3queue/internal/cost"
	"github.com/s3queue/s3queue/internal/httpguard"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

//go:embed static
var static embed.FS

// StateSource is what the dashboard shows: the monitor (monitor.Monitor).
type StateSource interface {
	// State returns a snapshot without a request.
	State() monitor.State
}

// Tasks are the task operations the dashboard calls: the producer
// (producer.Producer).
type Tasks interface {
	// Get reads one task (one GET).
	Get(ctx context.Context, id string) (*task.Task, error)
	// Requeue takes a dead or canceled task back to pending.
	Requeue(ctx context.Context, id string) error
	// Cancel cancels a task (or asks its running handler to stop).
	Cancel(ctx context.Context, id string) (requested bool, err error)
}

// Config configures a dashboard.
type Config struct {
	State StateSource
	Tasks Tasks
	// Token, if set, enables the actions for requests that carry it
	// (Authorization: Bearer TOKEN), and the API's reads need it too.
	// Empty: the dashboard is read-only, and its reads are open.
	Token string
	// Prices turn the monitor's request counts into spend (default
	// cost.S3Standard).
	Prices cost.Prices
	// NoSpend, if set, says why the monitor's requests cost nothing (its
	// store is a directory or memory, not S3): the dashboard then shows no
	// spend, and says why.
	NoSpend string
	// Logger logs each action and each refused token, with the client's
	// address (never the token); default slog.Default().
	Logger *slog.Logger
	// Timeout bounds the requests of one API call (default 30s); in a
	// bulk requeue, those of each task.
	Timeout time.Duration
}

// Dashboard is the http.Handler of the page and its API.
type Dashboard struct {
	cfg   Config
	token *httpguard.Token
	mux   *http.ServeMux
	log   *slog.Logger
}

// New returns the dashboard. It needs State and Tasks.
func New(cfg Config) (*Dashboard, error) {
	if cfg.State == nil || cfg.Tasks == nil {
		return nil, errors.New("dashboard: State and Tasks are required")
	}
	if cfg.Prices == (cost.Prices{}) {
		cfg.Prices = cost.S3Standard
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	d := &Dashboard{cfg: cfg, mux: http.NewServeMux(), log: cfg.Logger.WithGroup("dashboard")}
	d.token = httpguard.NewToken(cfg.Token, d.log)
	sub, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	files := http.FileServerFS(sub)
	d.mux.Handle("GET /", files)
	d.mux.Handle("GET /api/state", d.token.Require(http.HandlerFunc(d.state)))
	d.mux.Handle("GET /api/tasks/{id}", d.token.Require(http.HandlerFunc(d.getTask)))
	d.mux.HandleFunc("POST /api/tasks/{id}/requeue", d.action(d.requeue))
	d.mux.HandleFunc("POST /api/tasks/{id}/cancel", d.action(d.cancel))
	d.mux.HandleFunc("POST /api/dead/requeue", d.bulkAction(d.requeueDead))
	return d, nil
}

// ServeHTTP serves the page and the API. No other site may frame them
// (clickjacking: a page that lays its own buttons over the dashboard's).
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	d.mux.ServeHTTP(w, r)
}

// StateResponse is GET /api/state: the monitor's State, what it spends,
// and whether actions are enabled.
type StateResponse struct {
	monitor.State
	Spend   Spend `json:"spend"`
	Actions bool  `json:"actions"` // a token was configured
}

// Spend is the monitor's S3 spend, from its own request counts and the
// price model of internal/cost.
type Spend struct {
	// Available is false when there is no spend to show: the store does
	// not count its requests, or bills none (Why says which).
	Available bool `json:"available"`
	// Why there is no spend to show, when Available is false.
	Why string `json:"why,omitempty"`
	// PerHour is dollars per hour at the rate of the last WindowSecs.
	PerHour    float64 `json:"per_hour"`
	PerMonth   float64 `json:"per_month"`
	WindowSecs float64 `json:"window_secs"`
	// PerMinute: the dollars of each of State.Minutes.
	PerMinute []float64 `json:"per_minute,omitempty"`
}

func (d *Dashboard) state(w http.ResponseWriter, r *http.Request) {
	s := d.cfg.State.State()
	resp := StateResponse{State: s, Actions: d.token.Set()}
	switch {
	case d.cfg.NoSpend != "":
		resp.Spend.Why = d.cfg.NoSpend
	case s.Requests == nil || s.Requests.WindowSecs <= 0:
		resp.Spend.Why = "the monitor's store does not count its requests"
	default:
		last := requestsOf(s.Requests.LastHour)
		resp.Spend = Spend{Available: true, WindowSecs: s.Requests.WindowSecs,
			PerHour: last.Dollars(d.cfg.Prices) * 3600 / s.Requests.WindowSecs}
		resp.Spend.PerMonth = resp.Spend.PerHour * cost.HoursPerMonth
		for _, mn := range s.Minutes {
			resp.Spend.PerMinute = append(resp.Spend.PerMinute, requestsOf(mn.Requests).Dollars(d.cfg.Prices))
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

func requestsOf(m map[string]int64) cost.Requests {
	var c s3store.Counts
	for _, op := range s3store.Ops() {
		c[op][s3store.OutcomeOK] = m[op.String()]
	}
	return cost.FromCounts(c)
}

// TaskResponse is GET /api/tasks/{id}: the task object as stored (its
// history, dependencies and slot included).
type TaskResponse struct {
	Task *task.Task `json:"task"`
}

func (d *Dashboard) getTask(w http.ResponseWriter, r *http.Request) {
	id, err := taskID(r)
	if err != nil {
		writeError(w, statusOf(err), err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.cfg.Timeout)
	defer cancel()
	t, err := d.cfg.Tasks.Get(ctx, id)
	if err != nil {
		writeError(w, statusOf(err), message("get", id, err))
		return
	}
	writeJSON(w, http.StatusOK, TaskResponse{Task: t})
}

// taskID is the request's {id}, if it is a task id (task.ValidID): the
// operations would answer anything else "not found", which is no answer to
// a path like ..%2Fqueue.json.
func taskID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !task.ValidID(id) {
		return "", errBadRequest{fmt.Errorf("%q is not a task id: want 26 upper-case Crockford base32 characters", id)}
	}
	return id, nil
}

// message is err, an error of operation op on task id, as the API says
// it: once. Each layer of the operations says what it did ("s3queue:
// requeue: task X: requeue task X: only dead or canceled ..."), and the
// innermost that names the task says the operation and the task once;
// when none names it, the operation and the task are said before the
// cause.
func message(op, id string, err error) string {
	msg := ""
	for e := err; e != nil; e = errors.Unwrap(e) {
		if s := e.Error(); strings.Contains(s, id) {
			msg = s
		}
	}
	if msg == "" {
		msg = op + " task " + id + ": " + strings.TrimPrefix(err.Error(), "s3queue: "+op+": ")
	}
	return msg
}

// action wraps an action's handler with the token check: without a
// configured token every action is refused (403), and a request without
// the token, or with another, is refused (401, logged with the client's
// address). Both answers say why, and neither repeats what was sent.
func (d *Dashboard) action(h func(ctx context.Context, r *http.Request) (any, error)) http.HandlerFunc {
	return d.guard(h, true)
}

// bulkAction is action for a handler that bounds each of its requests
// itself (Timeout per task): one Timeout for hundreds of tasks would fail
// the later ones on a real S3.
func (d *Dashboard) bulkAction(h func(ctx context.Context, r *http.Request) (any, error)) http.HandlerFunc {
	return d.guard(h, false)
}

// guard is action and bulkAction: the token check, then h, under one
// Timeout when timed. Each action is logged with its outcome and the
// client's address.
func (d *Dashboard) guard(h func(ctx context.Context, r *http.Request) (any, error), timed bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !d.token.Set() {
			writeError(w, http.StatusForbidden, "actions are disabled: the monitor was started without a dashboard token (--token-file or S3QUEUE_DASHBOARD_TOKEN)")
			return
		}
		if !d.token.Admit(w, r) {
			return
		}
		ctx := r.Context()
		if timed {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d.cfg.Timeout)
			defer cancel()
		} else {
			// The server's write timeout bounds one request's time; a bulk
			// requeue takes a Timeout per round of bulkParallel tasks.
			rounds := len(d.cfg.State.State().Dead)/bulkParallel + 2
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Duration(rounds) * d.cfg.Timeout))
		}
		out, err := h(ctx, r)
		if err != nil {
			msg := err.Error()
			if id := r.PathValue("id"); id != "" && !errors.As(err, new(errBadRequest)) {
				msg = message(opOf(r), id, err)
			}
			d.log.Info("action refused", "path", r.URL.Path, "remote_addr", r.RemoteAddr, "err", msg)
			writeError(w, statusOf(err), msg)
			return
		}
		d.log.Info("action", "path", r.URL.Path, "remote_addr", r.RemoteAddr)
		writeJSON(w, http.StatusOK, out)
	}
}

// withoutTask is msg, a message of an operation on task id, without the
// operation and the task: for an answer that names the task apart.
func withoutTask(id, msg string) string {
	if _, rest, ok := strings.Cut(msg, id+": "); ok {
		return rest
	}
	return msg
}

// opOf is the operation an action's path names: its last segment
// (requeue, cancel).
func opOf(r *http.Request) string {
	return r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
}

// ActionResponse is what an action returns.
type ActionResponse struct {
	ID string `json:"id,omitempty"`
	// Requested: a cancel of a running task was requested (its handler is
	// told at its next renewal) rather than done at once.
	Requested bool `json:"requested,omitempty"`
	// Requeued and Failed: the dead tasks of a type requeued, and those
	// that could not be (with why); RequeuedCount and FailedCount count
	// them (a bulk requeue always sets both, zero included).
	Requeued      []string        `json:"requeued,omitempty"`
	Failed        []FailedRequeue `json:"failed,omitempty"`
	RequeuedCount *int            `json:"requeued_count,omitempty"`
	FailedCount   *int            `json:"failed_count,omitempty"`
	// Status is what happened: requeued, canceled or cancel requested;
	// for a bulk requeue requeued (all of them), partly requeued, not
	// requeued (none could be) or nothing to requeue.
	Status string `json:"status"`
}

// FailedRequeue is one task a bulk requeue could not requeue: its id,
// and why (which does not repeat the id).
type FailedRequeue struct {
	ID    string `json:"id"`
	Error string `json:"error"`
}

func (d *Dashboard) requeue(ctx context.Context, r *http.Request) (any, error) {
	id, err := taskID(r)
	if err != nil {
		return nil, err
	}
	if err := d.cfg.Tasks.Requeue(ctx, id); err != nil {
		return nil, err
	}
	return ActionResponse{ID: id, Status: "requeued"}, nil
}

func (d *Dashboard) cancel(ctx context.Context, r *http.Request) (any, error) {
	id, err := taskID(r)
	if err != nil {
		return nil, err
	}
	requested, err := d.cfg.Tasks.Cancel(ctx, id)
	if err != nil {
		return nil, err
	}
	status := "canceled"
	if requested {
		status = "cancel requested"
	}
	return ActionResponse{ID: id, Requested: requested, Status: status}, nil
}

// bulkParallel bounds the requeues a bulk requeue makes at once: enough
// that 500 tasks take seconds on S3, few enough not to crowd the monitor's
// own requests.
const bulkParallel = 16

// requeueDead requeues every task of the dead-letter list of type
// ?type=T: one GET and one PUT (and an announcement) per task, bulkParallel
// at a time, each under its own Timeout. The answer says truthfully how
// many were requeued and which failed, with why.
func (d *Dashboard) requeueDead(ctx context.Context, r *http.Request) (any, error) {
	typ := r.URL.Query().Get("type")
	if typ == "" {
		return nil, errBadRequest{errors.New("requeue the dead: give the task type (?type=T)")}
	}
	var ids []string
	for _, dt := range d.cfg.State.State().Dead {
		if dt.Type == typ {
			ids = append(ids, dt.ID)
		}
	}
	errs := make([]error, len(ids))
	sem := make(chan struct{}, bulkParallel)
	var wg sync.WaitGroup
	for i, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			tctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
			defer cancel()
			errs[i] = d.cfg.Tasks.Requeue(tctx, id)
		}()
	}
	wg.Wait()
	out := ActionResponse{Requeued: []string{}}
	for i, id := range ids {
		if errs[i] != nil {
			out.Failed = append(out.Failed, FailedRequeue{ID: id, Error: withoutTask(id, message("requeue", id, errs[i]))})
			continue
		}
		out.Requeued = append(out.Requeued, id)
	}
	nr, nf := len(out.Requeued), len(out.Failed)
	out.RequeuedCount, out.FailedCount = &nr, &nf
	switch {
	case nr+nf == 0:
		out.Status = "nothing to requeue"
	case nf == 0:
		out.Status = "requeued"
	case nr == 0:
		out.Status = "not requeued"
	default:
		out.Status = "partly requeued"
	}
	if nf > 0 {
		d.log.Warn("bulk requeue: some tasks could not be requeued", "type", typ, "requeued", nr, "failed", nf)
	}
	return out, nil
}

type errBadRequest struct{ error }

func (e errBadRequest) Unwrap() error { return e.error }

// statusOf maps an error of the task operations to an HTTP status.
func statusOf(err error) int {
	var bad errBadRequest
	switch {
	case errors.As(err, &bad), errors.Is(err, taskio.ErrBadID):
		return http.StatusBadRequest
	case errors.Is(err, producer.ErrNotFound), errors.Is(err, s3store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, task.ErrTerminal), errors.Is(err, task.ErrNotRequeueable), errors.Is(err, task.ErrRetired),
		s3store.LostRace(err):
		return http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

func writeJSON(w http.ResponseWriter, code int, v any) { httpguard.WriteJSON(w, code, v) }

// ErrorResponse is every API error: one line saying what went wrong.
type ErrorResponse = httpguard.ErrorResponse

func writeError(w http.ResponseWriter, code int, msg string) { httpguard.WriteError(w, code, msg) }
