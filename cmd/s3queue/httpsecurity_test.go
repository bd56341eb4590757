package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/dashboard"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storeurl"
)

// testToken is the token the tests start servers with.
const testToken = "tok-5e1f0c9a2b7d4e83"

// tokenFile writes testToken to a file of its own.
func tokenFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startMonitor runs `s3queue monitor --http 127.0.0.1:0 ARGS` on store and
// returns the base URL of its dashboard and its log.
func startMonitor(t *testing.T, store string, args ...string) (string, *syncBuffer) {
	t.Helper()
	stderr, _ := background(t, append([]string{"monitor", "--store", store, "--http", "127.0.0.1:0"}, args...)...)
	return "http://" + listeningAt(t, stderr), stderr
}

// reply is an HTTP answer as a test reads it.
type reply struct {
	code   int
	header http.Header
	body   string
}

// call makes one request: with "Authorization: Bearer token" unless token
// is "", and with Host host unless it is "". It fails the test if the
// request cannot be made.
func call(t *testing.T, method, url, token, host string) reply {
	t.Helper()
	r, err := callErr(method, url, token, host)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return r
}

func callErr(method, url, token, host string) (reply, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return reply{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == "application/x-ndjson" {
		return reply{resp.StatusCode, resp.Header, ""}, nil // a stream: its headers are the answer
	}
	b, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}, err
}

// With a token configured, the dashboard's reads need it as its actions
// do: a task's input, the state (which lists dead tasks' ids) and the
// event stream (every id) answer 401 without it, and each refusal is
// logged with the client's address. The page itself (no data), /metrics
// and /healthz stay open.
func TestDashboardReadsNeedTheToken(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "charge", "--input", `{"card":"4111-1111"}`))
	base, log := startMonitor(t, store, "--token-file", tokenFile(t))

	for _, path := range []string{"/api/tasks/" + id, "/api/state", "/events"} {
		for _, token := range []string{"", "wrong-token-0123456789"} {
			r := call(t, "GET", base+path, token, "")
			if r.code != http.StatusUnauthorized || !strings.Contains(r.body, "needs the dashboard token") || strings.Contains(r.body, "4111") {
				t.Errorf("GET %s with token %q: %d %s, want 401 saying why", path, token, r.code, r.body)
			}
		}
		if r := call(t, "GET", base+path, testToken, ""); r.code != http.StatusOK {
			t.Errorf("GET %s with the token: %d %s", path, r.code, r.body)
		}
	}
	if r := call(t, "GET", base+"/api/tasks/"+id, testToken, ""); !strings.Contains(r.body, "4111-1111") {
		t.Errorf("the task with the token: %s", r.body)
	}
	for _, path := range []string{"/", "/app.js", "/style.css", "/healthz", "/metrics"} {
		if r := call(t, "GET", base+path, "", ""); r.code != http.StatusOK {
			t.Errorf("GET %s without the token: %d, want 200 (it holds no task data)", path, r.code)
		}
	}
	waitFor(t, "the refusals in the log", func() bool {
		return regexp.MustCompile(`msg="http request refused: no token or a wrong one" dashboard.remote_addr=127\.0\.0\.1:\d+ dashboard.method=GET dashboard.path=/api/tasks/`+id).MatchString(log.String()) &&
			strings.Contains(log.String(), "http.path=/events http.token_given=true")
	})

	// An action is logged with the client's address.
	if r := call(t, "POST", base+"/api/tasks/"+id+"/cancel", testToken, ""); r.code != http.StatusOK {
		t.Fatalf("cancel with the token: %d %s", r.code, r.body)
	}
	waitFor(t, "the action in the log", func() bool {
		return regexp.MustCompile(`msg=action dashboard.path=/api/tasks/` + id + `/cancel dashboard.remote_addr=127\.0\.0\.1:\d+`).MatchString(log.String())
	})
	if strings.Contains(log.String(), testToken) {
		t.Fatalf("the token shows in the log:\n%s", log)
	}
}

// A monitor without a token serves a read-only dashboard: its reads are
// open, the state says actions are off (the page then shows no token box
// and no action button), and a file:// store shows no S3 spend, but says
// why.
func TestReadOnlyDashboardOnAFileStore(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "charge"))
	base, _ := startMonitor(t, store)
	if r := call(t, "GET", base+"/api/tasks/"+id, "", ""); r.code != http.StatusOK {
		t.Fatalf("a read without a token configured: %d %s", r.code, r.body)
	}
	var s dashboard.StateResponse
	waitFor(t, "a sweep with requests", func() bool {
		r := call(t, "GET", base+"/api/state", "", "")
		if err := json.Unmarshal([]byte(r.body), &s); err != nil {
			t.Fatalf("state %q: %v", r.body, err)
		}
		return s.Requests != nil && s.Requests.WindowSecs > 0
	})
	if s.Actions || s.Spend.Available || s.Spend.PerMonth != 0 || !strings.Contains(s.Spend.Why, "a file:// store: its requests cost nothing") {
		t.Errorf("state: actions %v, spend %+v; want no actions and no spend, saying why", s.Actions, s.Spend)
	}
	r := call(t, "POST", base+"/api/tasks/"+id+"/cancel", "", "")
	if r.code != http.StatusForbidden || !strings.Contains(r.body, "actions are disabled") {
		t.Errorf("an action on a read-only dashboard: %d %s", r.code, r.body)
	}
}

// A request whose Host names another server (a browser led there by DNS
// rebinding) is refused before it reads anything; localhost, IP addresses
// and the hosts allowed by --allowed-hosts or [http] allowed_hosts are
// served.
func TestDashboardRefusesOtherHosts(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "charge", "--input", `{"card":"4111-1111"}`))
	cfg := writeConfig(t, "[http]\nallowed_hosts = [\"queue.example\"]\n")
	base, log := startMonitor(t, store, "--config", cfg)
	port := base[strings.LastIndexByte(base, ':')+1:]

	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example:" + port, "localhost.evil.example:" + port} {
		for _, path := range []string{"/api/tasks/" + id, "/api/state", "/events", "/", "/app.js"} {
			r := call(t, "GET", base+path, "", host)
			if r.code != http.StatusForbidden || strings.Contains(r.body, "4111") || !strings.Contains(r.body, "allowed_hosts") {
				t.Errorf("GET %s, Host %s: %d %.200s; want 403 saying why", path, host, r.code, r.body)
			}
		}
	}
	for _, host := range []string{"", "localhost:" + port, "LocalHost", "127.0.0.1:" + port, "[::1]:" + port, "10.1.2.3:" + port, "queue.example:" + port} {
		if r := call(t, "GET", base+"/api/tasks/"+id, "", host); r.code != http.StatusOK {
			t.Errorf("Host %q: %d %s, want 200", host, r.code, r.body)
		}
	}
	// Prometheus and probes name their targets as they like: /metrics and
	// /healthz, open to whoever reaches the port, check no Host.
	for _, path := range []string{"/metrics", "/healthz"} {
		if r := call(t, "GET", base+path, "", "worker-1.example:"+port); r.code != http.StatusOK {
			t.Errorf("GET %s, Host worker-1.example: %d, want 200", path, r.code)
		}
	}
	// The machine's own name is this server's.
	if hostname, err := os.Hostname(); err == nil {
		if r := call(t, "GET", base+"/api/state", "", hostname+":"+port); r.code != http.StatusOK {
			t.Errorf("Host %s (this machine's name): %d, want 200", hostname, r.code)
		}
	}
	waitFor(t, "the refusal in the log", func() bool {
		return regexp.MustCompile(`msg="http request refused: Host names another server" http.remote_addr=127\.0\.0\.1:\d+ http.method=GET http.path=/api/tasks/` + id + ` http.host=evil.example`).MatchString(log.String())
	})

	// The flag wins over queue.toml.
	base, _ = startMonitor(t, store, "--config", cfg, "--allowed-hosts", "q2.example, q3.example")
	if r := call(t, "GET", base+"/api/state", "", "q3.example"); r.code != http.StatusOK {
		t.Errorf("a host of --allowed-hosts: %d %s", r.code, r.body)
	}
	if r := call(t, "GET", base+"/api/state", "", "queue.example"); r.code != http.StatusForbidden {
		t.Errorf("a host of queue.toml that --allowed-hosts replaced: %d, want 403", r.code)
	}
	// The name --http listens on is this server's.
	stderr, _ := background(t, "monitor", "--store", store, "--http", "localhost:0")
	addr := listeningAt(t, stderr)
	if r := call(t, "GET", "http://"+addr+"/api/state", "", "localhost"); r.code != http.StatusOK {
		t.Errorf("Host localhost: %d", r.code)
	}
}

// The dashboard may not be framed by another site (clickjacking), and an
// id that is no task id (a path trick) is a bad request, not "not found".
func TestDashboardHeadersAndBadIDs(t *testing.T) {
	store, _ := newStore(t)
	base, _ := startMonitor(t, store, "--token-file", tokenFile(t))
	for _, path := range []string{"/", "/api/state"} {
		r := call(t, "GET", base+path, testToken, "")
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if xfo := r.header.Get("X-Frame-Options"); xfo != "DENY" {
			t.Errorf("GET %s: X-Frame-Options %q, want DENY", path, xfo)
		}
	}
	for _, tc := range []struct{ method, path string }{
		{"GET", "/api/tasks/..%2F..%2Fqueue.json"},
		{"GET", "/api/tasks/01arz3ndektsv4rrffq69g5fav"},
		{"GET", "/api/tasks/not-an-id"},
		{"POST", "/api/tasks/..%2F..%2Fqueue.json/requeue"},
		{"POST", "/api/tasks/not-an-id/cancel"},
	} {
		r := call(t, tc.method, base+tc.path, testToken, "")
		if r.code != http.StatusBadRequest || !strings.Contains(r.body, "is not a task id") {
			t.Errorf("%s %s: %d %s, want 400", tc.method, tc.path, r.code, r.body)
		}
	}
}

// An error of the dashboard's API says the operation and the task once:
// not "s3queue: requeue: task X: requeue task X: ...".
func TestDashboardErrorsSayTheTaskOnce(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "charge"))
	unknown := strings.TrimSpace(must(t, "submit", "--store", "file://"+t.TempDir(), "--type", "charge"))
	base, _ := startMonitor(t, store, "--token-file", tokenFile(t))
	if r := call(t, "POST", base+"/api/tasks/"+id+"/cancel", testToken, ""); r.code != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.code, r.body)
	}
	if r := call(t, "POST", base+"/api/tasks/"+id+"/requeue", testToken, ""); r.code != http.StatusOK {
		t.Fatalf("requeue: %d %s", r.code, r.body)
	}
	for _, tc := range []struct {
		method, path string
		code         int
		want         string
	}{
		{"POST", "/api/tasks/" + id + "/requeue", http.StatusConflict, "requeue task " + id + ": only dead or canceled tasks can be requeued (status pending)"},
		{"POST", "/api/tasks/" + unknown + "/cancel", http.StatusNotFound, "task " + unknown + ": task not found"},
		{"GET", "/api/tasks/" + unknown, http.StatusNotFound, "task " + unknown + ": task not found"},
	} {
		r := call(t, tc.method, base+tc.path, testToken, "")
		var e struct{ Error string }
		if err := json.Unmarshal([]byte(r.body), &e); err != nil || r.code != tc.code || e.Error != tc.want {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, r.code, e.Error, tc.code, tc.want)
		}
	}
}

// /events serves MaxStreamClientsPerAddr streams to one address: a host
// that opens more is refused, and cannot lock out another (s3queue tail).
// With a token, clients without it are refused before they take a place.
func TestEventsClientsAreBoundedPerAddress(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker)
	stderr, _ := background(t, "worker", "--store", store, "--config", cfg, "--exec", "x=cat", "--http", "127.0.0.1:0", "--token-file", tokenFile(t))
	url := "http://" + listeningAt(t, stderr) + "/events"

	// open opens a stream from the local address from (127.0.0.1 or
	// 127.0.0.2: Linux routes all of 127/8 to the loopback).
	open := func(from, token string) (int, string) {
		t.Helper()
		client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext}}
		req, _ := http.NewRequest("GET", url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET /events from %s: %v", from, err)
		}
		if resp.StatusCode == http.StatusOK {
			t.Cleanup(func() { resp.Body.Close() })
			return resp.StatusCode, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Without the token, as many as events.MaxStreamClients take nothing.
	for range events.MaxStreamClients + 1 {
		if code, body := open("127.0.0.1", ""); code != http.StatusUnauthorized {
			t.Fatalf("a stream without the token: %d %s", code, body)
		}
	}
	for range events.MaxStreamClientsPerAddr {
		if code, body := open("127.0.0.1", testToken); code != http.StatusOK {
			t.Fatalf("a stream with the token: %d %s", code, body)
		}
	}
	code, body := open("127.0.0.1", testToken)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "too many /events clients from 127.0.0.1") {
		t.Errorf("one stream more from one address: %d %s, want 503 saying why", code, body)
	}
	if code, body := open("127.0.0.2", testToken); code != http.StatusOK {
		t.Errorf("a stream from another address: %d %s", code, body)
	}
}

// tail sends the token of --token-file or S3QUEUE_DASHBOARD_TOKEN to a
// worker started with one, and says what is missing when it has none.
func TestTailPassesTheToken(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker+"[handlers]\necho = \"cat\"\n")
	tf := tokenFile(t)
	stderr, _ := background(t, "worker", "--store", store, "--config", cfg, "--http", "127.0.0.1:0", "--token-file", tf)
	addr := listeningAt(t, stderr)

	r := cli(t, "", "tail", "--from", addr)
	wantExit(t, r, exitRuntime, "tail: no events endpoint reachable: http://"+addr+"/events: 401 Unauthorized: the endpoint wants a token: give it with --token-file FILE or S3QUEUE_DASHBOARD_TOKEN")
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("not-the-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "", "tail", "--from", addr, "--token-file", wrong)
	wantExit(t, r, exitRuntime, "401 Unauthorized: the endpoint refused the token given")

	follows := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		var out, errb syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, append([]string{"tail", "--from", addr, "--kind", "succeeded"}, args...), strings.NewReader(""), &out, &errb)
		}()
		var ids []string
		waitFor(t, "tail to print a task's success", func() bool {
			ids = append(ids, strings.TrimSpace(must(t, "submit", "--store", store, "--type", "echo")))
			for _, id := range ids {
				if strings.Contains(out.String(), id) {
					return true
				}
			}
			return false
		})
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("tail %v: exit %d\n%s", args, code, errb.String())
		}
	}
	follows("--token-file", tf)
	t.Setenv(tokenEnv, testToken)
	follows()
}

// slowGets delays the GETs of task objects by delay while slow is set,
// as an S3 under load would.
type slowGets struct {
	s3store.Store
	slow  atomic.Bool
	delay time.Duration
}

func (s *slowGets) Get(ctx context.Context, key string) (s3store.Object, error) {
	if s.slow.Load() && strings.HasPrefix(key, "tasks/") {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return s3store.Object{}, ctx.Err()
		}
	}
	return s.Store.Get(ctx, key)
}

// The servers bound how long a response may take to write (a client that
// reads nothing holds a connection no longer) and how long a connection
// may stay idle; the /events streams are exempt from the first.
func TestHTTPServersTimeOut(t *testing.T) {
	saved := httpTimeouts
	t.Cleanup(func() { httpTimeouts = saved })
	httpTimeouts.write, httpTimeouts.idle = 300*time.Millisecond, 300*time.Millisecond

	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "charge"))

	// A worker's stream, opened now, outlives the write timeout (below).
	cfg := writeConfig(t, fastWorker+"[handlers]\necho = \"cat\"\n")
	wlog, _ := background(t, "worker", "--store", store, "--config", cfg, "--http", "127.0.0.1:0")
	resp, err := http.Get("http://" + listeningAt(t, wlog) + "/events")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/events: %v %v", resp, err)
	}
	defer resp.Body.Close()
	opened := time.Now()

	st, err := storeurl.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	slow := &slowGets{Store: st, delay: 3 * httpTimeouts.write}
	ctx, cancel := context.WithCancel(context.Background())
	var out, stderr syncBuffer
	a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &stderr, environ: func() []string { return nil },
		open: func(context.Context, string) (s3store.Store, error) { return slow, nil }}
	done := make(chan int, 1)
	go func() {
		done <- a.report(a.dispatch(ctx, []string{"monitor", "--store", store, "--http", "127.0.0.1:0"}))
	}()
	t.Cleanup(func() { cancel(); <-done })
	addr := listeningAt(t, &stderr)

	// A task read that takes longer than the write timeout is cut off.
	slow.slow.Store(true)
	if r, err := callErr("GET", "http://"+addr+"/api/tasks/"+id, "", ""); err == nil {
		t.Errorf("a response written after the write timeout reached the client: %d %s", r.code, r.body)
	}
	slow.slow.Store(false)

	// An idle connection is closed by the server.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	hr, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, hr.Body)
	hr.Body.Close()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("an idle connection: read %v, want EOF (closed by the server)", err)
	}

	// The worker's stream, older than the write timeout, still carries
	// the events of a task submitted now.
	if time.Since(opened) < 2*httpTimeouts.write {
		t.Fatalf("the test did not outlast the write timeout")
	}
	echo := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "echo"))
	stuck := time.AfterFunc(20*time.Second, func() { resp.Body.Close() })
	defer stuck.Stop()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		var e events.Event
		if json.Unmarshal(lines.Bytes(), &e) == nil && e.Kind == events.Claimed && e.TaskID == echo {
			return
		}
	}
	t.Fatalf("/events ended before the claim of task %s: %v", echo, lines.Err())
}

// listening waits for the "http listening" lines of a command that
// serves n listeners and returns each one's address by what it serves.
func listening(t *testing.T, stderr *syncBuffer, n int) map[string]string {
	t.Helper()
	re := regexp.MustCompile(`msg="http listening" addr=(\S+) serves="?([^"\n]+)"?`)
	var got map[string]string
	waitFor(t, "the http listening lines", func() bool {
		got = map[string]string{}
		for _, m := range re.FindAllStringSubmatch(stderr.String(), -1) {
			got[m[2]] = m[1]
		}
		return len(got) == n
	})
	return got
}

// --metrics-http serves /metrics and /healthz apart from --http, to
// whoever reaches it (Prometheus and probes need no token, and they hold
// no task data); --http then serves neither.
func TestMetricsOnAListenerOfTheirOwn(t *testing.T) {
	store, _ := newStore(t)
	stderr, _ := background(t, "worker", "--store", store, "--exec", "x=cat", "--http", "127.0.0.1:0",
		"--metrics-http", "127.0.0.1:0", "--token-file", tokenFile(t))
	addrs := listening(t, stderr, 2)
	main, metrics := "http://"+addrs["/events"], "http://"+addrs["/metrics /healthz"]
	for _, path := range []string{"/metrics", "/healthz"} {
		if r := call(t, "GET", metrics+path, "", "prometheus.monitoring.svc"); r.code != http.StatusOK {
			t.Errorf("GET %s on --metrics-http: %d %s", path, r.code, r.body)
		}
		if r := call(t, "GET", main+path, testToken, ""); r.code != http.StatusNotFound {
			t.Errorf("GET %s on --http: %d, want 404 (served apart)", path, r.code)
		}
	}
	if r := call(t, "GET", metrics+"/events", testToken, ""); r.code != http.StatusNotFound {
		t.Errorf("GET /events on --metrics-http: %d, want 404", r.code)
	}
	if r := call(t, "GET", main+"/events", testToken, ""); r.code != http.StatusOK {
		t.Errorf("GET /events on --http: %d", r.code)
	}

	// A monitor with --metrics-http alone serves its metrics, and no
	// dashboard.
	stderr, _ = background(t, "monitor", "--store", store, "--metrics-http", "127.0.0.1:0")
	metrics = "http://" + listening(t, stderr, 1)["/metrics /healthz"]
	waitFor(t, "the queue gauges", func() bool {
		r := call(t, "GET", metrics+"/metrics", "", "")
		return r.code == http.StatusOK && strings.Contains(r.body, "s3queue_tasks{")
	})
	if r := call(t, "GET", metrics+"/api/state", "", ""); r.code != http.StatusNotFound {
		t.Errorf("the dashboard on --metrics-http: %d, want 404", r.code)
	}
	wantExit(t, cli(t, "", "worker", "--store", store, "--exec", "x=cat", "--metrics-http", "nonsense"), exitUsage,
		"worker: --metrics-http nonsense: listen tcp: address nonsense: missing port in address")
}
