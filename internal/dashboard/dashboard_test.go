package dashboard_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/dashboard"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
)

const secret = "s3cr3t-token-value"

type fixedState struct{ s monitor.State }

func (f fixedState) State() monitor.State { return f.s }

// setup returns a dashboard over a real producer on a counted in-memory
// store, with one dead task on the dead list, and the log it writes.
func setup(t *testing.T, token string) (http.Handler, *s3store.Counter, *producer.Producer, string, *strings.Builder) {
	t.Helper()
	ctx := context.Background()
	st := s3store.NewCounter(mem.New())
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Submit(ctx, "mail", nil, producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	state := monitor.State{At: time.Now(), Monitor: "m1", Leading: true,
		Minutes: []monitor.Minute{{Start: time.Now(), Succeeded: 3, Requests: map[string]int64{"LIST": 1000}}},
		Dead:    []monitor.DeadTask{{ID: id, Type: "mail", LastError: "boom"}},
		Requests: &monitor.Requests{Total: map[string]int64{"LIST": 1000}, LastHour: map[string]int64{"LIST": 1000, "GET": 1000},
			WindowSecs: 1800}}
	var log strings.Builder
	d, err := dashboard.New(dashboard.Config{State: fixedState{state}, Tasks: p, Token: token,
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	return d, st, p, id, &log
}

func do(t *testing.T, h http.Handler, method, path, auth string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(b)
}

// The page and the state cost no request; a task detail costs one GET;
// spend is the monitor's last hour priced by the S3 Standard model.
func TestAPageViewCostsNoRequest(t *testing.T) {
	h, st, _, id, _ := setup(t, "")
	before := st.Counts()
	for _, path := range []string{"/", "/app.js", "/style.css", "/api/state"} {
		code, body := do(t, h, "GET", path, "")
		if code != http.StatusOK || body == "" {
			t.Fatalf("GET %s: %d", path, code)
		}
	}
	if d := st.Counts().Sub(before); d.Total() != 0 {
		t.Fatalf("the page and its state made requests: %v", d)
	}
	_, body := do(t, h, "GET", "/api/state", "")
	var s dashboard.StateResponse
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	// 1,000 LISTs ($0.005) and 1,000 GETs ($0.0004) in half an hour.
	if !s.Spend.Available || s.Spend.PerHour < 0.0107 || s.Spend.PerHour > 0.0109 || s.Actions {
		t.Fatalf("spend %+v, actions %v: want $0.0108/h from the last half hour, actions off", s.Spend, s.Actions)
	}
	before = st.Counts()
	code, body := do(t, h, "GET", "/api/tasks/"+id, "")
	if code != http.StatusOK || !strings.Contains(body, `"status": "canceled"`) || !strings.Contains(body, `"history"`) {
		t.Fatalf("task detail: %d %s", code, body)
	}
	if d := st.Counts().Sub(before); d.Of(s3store.OpGet) != 1 || d.Total() != 1 {
		t.Fatalf("a task detail made %v, want one GET", d)
	}
	unknown, err := task.NewID(time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := do(t, h, "GET", "/api/tasks/"+unknown, ""); code != http.StatusNotFound || !strings.Contains(body, `"error": "task `+unknown+`: task not found"`) {
		t.Fatalf("an unknown id: %d %s", code, body)
	}
}

// Actions are refused without a configured token (403) and without the
// right one (401), say why in JSON, and go through with it; the token
// never shows in a response or the log.
func TestActionsNeedTheToken(t *testing.T) {
	ctx := context.Background()
	h, _, p, id, _ := setup(t, "")
	code, body := do(t, h, "POST", "/api/tasks/"+id+"/requeue", "Bearer "+secret)
	if code != http.StatusForbidden || !strings.Contains(body, "actions are disabled") {
		t.Fatalf("no token configured: %d %s", code, body)
	}

	h, _, p, id, log := setup(t, secret)
	for _, auth := range []string{"", "Bearer wrong", secret, "Bearer " + secret + "x", "Basic " + secret} {
		code, body := do(t, h, "POST", "/api/tasks/"+id+"/requeue", auth)
		if code != http.StatusUnauthorized || !strings.Contains(body, "needs the dashboard token") {
			t.Fatalf("auth %q: %d %s, want 401", auth, code, body)
		}
		if got, _ := p.Get(ctx, id); got.Status != task.Canceled {
			t.Fatalf("auth %q: the task was requeued anyway", auth)
		}
	}
	code, body = do(t, h, "POST", "/api/dead/requeue?type=mail", "Bearer "+secret)
	if code != http.StatusOK || !strings.Contains(body, id) {
		t.Fatalf("requeue the dead of a type: %d %s", code, body)
	}
	if got, _ := p.Get(ctx, id); got.Status != task.Pending {
		t.Fatalf("after the requeue: %s, want pending", got.Status)
	}
	code, body = do(t, h, "POST", "/api/tasks/"+id+"/requeue", "Bearer "+secret)
	if code != http.StatusConflict || !strings.Contains(body, "only dead or canceled") {
		t.Fatalf("requeue of a pending task: %d %s, want 409", code, body)
	}
	code, body = do(t, h, "POST", "/api/tasks/"+id+"/cancel", "Bearer "+secret)
	if code != http.StatusOK || !strings.Contains(body, `"canceled"`) {
		t.Fatalf("cancel: %d %s", code, body)
	}
	code, state := do(t, h, "GET", "/api/state", "Bearer "+secret)
	if code != http.StatusOK || !strings.Contains(state, `"actions": true`) {
		t.Fatalf("state with the token: %d %s", code, state)
	}
	for what, text := range map[string]string{"state": state, "log": log.String(), "error": body} {
		if strings.Contains(text, secret) {
			t.Fatalf("the token shows in the %s: %s", what, text)
		}
	}
	if !strings.Contains(log.String(), "action") {
		t.Fatalf("actions are not logged: %s", log.String())
	}
}
