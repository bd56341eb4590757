package integration

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/task"
)

// chromium returns the path of the headless browser the dashboard test
// drives: $S3QUEUE_TEST_CHROMIUM, else chromium on the PATH. Without one the
// test skips, unless S3QUEUE_TEST_REQUIRE_BROWSER is set (scripts/test.sh sets
// it, so CI cannot skip it silently): then it fails.
func chromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("S3QUEUE_TEST_CHROMIUM")
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path != "" {
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
	if os.Getenv("S3QUEUE_TEST_REQUIRE_BROWSER") != "" {
		t.Fatalf("no chromium (S3QUEUE_TEST_CHROMIUM=%q, none on the PATH) and S3QUEUE_TEST_REQUIRE_BROWSER is set: install it (apt-get install -y chromium; scripts/test.sh does)", path)
	}
	t.Skip("no chromium found (set S3QUEUE_TEST_CHROMIUM or install Debian's chromium); the dashboard's browser test needs it")
	return ""
}

// lockedLog collects a process's output lines.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) add(line string) {
	l.mu.Lock()
	l.b.WriteString(line + "\n")
	l.mu.Unlock()
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDashboardInChromiumMinIO runs the real `s3queue monitor --http` with
// a token and a real `s3queue worker` on MinIO, and drives the dashboard in
// headless Chromium as an operator would: the page shows no data and asks
// for the token; with it, it shows the shards and the fleet, a submitted
// task found by id reaches succeeded on the page, a dead task shows in the
// dead-letter list and is requeued from there. The token shows nowhere.
// With S3QUEUE_TEST_SCREENSHOTS=DIR (relative to the repository) it saves
// the screenshots of docs/dashboard.md there.
func TestDashboardInChromiumMinIO(t *testing.T) {
	browser := chromium(t)
	q := newMinIOQueue(t, 2, 4*time.Minute)
	ctx, url, prod := q.ctx, q.url, q.prod

	dir := t.TempDir()
	bin := filepath.Join(dir, "s3queue")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/s3queue").CombinedOutput(); err != nil {
		t.Fatalf("build s3queue: %v\n%s", err, out)
	}
	const token = "dash-Token-9f3b1c27e4"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "S3QUEUE_STORE="+url, "S3QUEUE_MONITOR_INTERVAL=1s", "S3QUEUE_WORKER_POLL_MAX=1s")

	start := func(name string, args ...string) (*exec.Cmd, *lockedLog, chan string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout = io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		log, lines := &lockedLog{}, make(chan string, 1000)
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				log.add(sc.Text())
				select {
				case lines <- sc.Text():
				default:
				}
			}
		}()
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			<-done
			cmd.Wait()
			if t.Failed() {
				t.Logf("%s's log:\n%s", name, log.String())
			}
		})
		return cmd, log, lines
	}
	_, monLog, monLines := start("monitor", "monitor", "--http", "127.0.0.1:0", "--token-file", tokenFile)
	var page string
	for page == "" {
		select {
		case line := <-monLines:
			if m := regexp.MustCompile(`msg="http listening" addr=(\S+)`).FindStringSubmatch(line); m != nil {
				page = "http://" + m[1] + "/"
			}
		case <-ctx.Done():
			t.Fatal("the monitor never logged its dashboard's address")
		}
	}
	start("worker", "worker", "--exec", "ok=cat", "--exec", "fail=echo 'smtp: 550 no such user' >&2; exit 3")

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1400, 1100), chromedp.Flag("headless", "new"))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// waitFor polls a JavaScript condition on the page until it holds.
	waitFor := func(what, js string, within time.Duration) {
		t.Helper()
		ok, err := chromedp.Run(bctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(within), chromedp.WithPollingInterval(200*time.Millisecond)))
		if err != nil || !ok {
			msg, _ := chromedp.Run(bctx, chromedp.TextContent(chromedp.CSS("#message")))
			html, _ := chromedp.Run(bctx, chromedp.OuterHTML(chromedp.CSS("main")))
			t.Fatalf("waiting for %s (%s): %v; message %q; page:\n%.3000s", what, js, err, msg, html)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return s
	}
	shots := os.Getenv("S3QUEUE_TEST_SCREENSHOTS")
	if shots != "" && !filepath.IsAbs(shots) {
		shots = filepath.Join("..", shots)
	}
	screenshot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100) /* 100: PNG; less is JPEG */)
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(filepath.Join(shots, "dashboard-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Without the token the page shows nothing of the queue, and asks.
	run("load the page", chromedp.Navigate(page))
	waitFor("the page to ask for the token", `document.querySelector("#summary").textContent.includes("needs its token") && !document.querySelector("#token-form").hidden`, time.Minute)
	if n := text("#shards tbody"); strings.TrimSpace(n) != "" {
		t.Fatalf("without the token the page shows shards: %q", n)
	}
	screenshot("refused")
	run("type the token", chromedp.SendKeys(chromedp.CSS("#token"), token+"\r"))
	waitFor("the first sweep and the worker in the fleet", `document.querySelector("#summary").textContent.includes("leading") && document.querySelectorAll("#shards tbody tr").length === 2 && document.querySelector("#members tbody code") !== null`, time.Minute)
	if s := text("#summary"); !strings.Contains(s, "2 shard(s)") {
		t.Fatalf("summary %q", s)
	}

	// A submitted task, found by id, reaches succeeded on the page.
	id, err := prod.Submit(ctx, "ok", map[string]string{"to": "ada@example.com"}, producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	run("search the task", chromedp.SendKeys(chromedp.CSS("#search-id"), id), chromedp.Click(chromedp.CSS("#search-go")))
	waitFor("the task to show", `document.querySelector("#task-id").textContent === `+jsString(id), 30*time.Second)
	waitFor("the task to succeed on the page", `document.querySelector("#task-status").textContent === "succeeded"`, time.Minute)
	if h := text("#task-history"); !strings.Contains(h, "running") || !strings.Contains(h, "succeeded") {
		t.Fatalf("the task's history on the page: %q", h)
	}
	waitFor("the throughput chart to count it", `Number(document.querySelector("#chart-throughput").dataset.ended) >= 1`, time.Minute)

	// A dead task shows in the dead-letter list, with its error.
	dead, err := prod.Submit(ctx, "fail", nil, producer.Options{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	row := `#dead tr[data-id="` + dead + `"]`
	waitFor("the dead task in the dead-letter list", `document.querySelector(`+jsString(row)+`) !== null`, time.Minute)
	if s := text(row); !strings.Contains(s, "smtp: 550 no such user") || !strings.Contains(s, "fail") {
		t.Fatalf("the dead task's row: %q", s)
	}
	waitFor("the dead count", `Number(document.querySelector("#total-dead").textContent) >= 1`, 30*time.Second)
	screenshot("overview")

	// It is requeued (and, failing again, dies again: its history shows
	// the requeue).
	run("requeue it", chromedp.Click(chromedp.CSS(row+" button.requeue")))
	waitFor("the requeue", `document.querySelector("#message").textContent.startsWith("requeued")`, 30*time.Second)
	got, err := prod.Get(ctx, dead)
	if err != nil {
		t.Fatal(err)
	}
	requeued := false
	for _, h := range got.History {
		requeued = requeued || h.From == task.Dead && h.To == task.Pending
	}
	if !requeued {
		t.Fatalf("the task's history shows no requeue: %+v", got.History)
	}
	run("search it", chromedp.SetValue(chromedp.CSS("#search-id"), dead), chromedp.Click(chromedp.CSS("#search-go")))
	waitFor("the task detail", `document.querySelector("#task-id").textContent === `+jsString(dead), 30*time.Second)
	screenshot("task")

	// The token shows nowhere: not in the page, the API or the log.
	html, err := chromedp.Run(bctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("GET", page+"api/state", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	state, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the state with the token: %d %s", resp.StatusCode, state)
	}
	// The same server exports the queue-level gauges, read from the
	// monitor's state at each scrape.
	var scraped string
	succeeded := regexp.MustCompile(`(?m)^s3queue_tasks\{shard="\d+",status="succeeded"\} [1-9]`)
	for deadline := time.Now().Add(time.Minute); ; {
		resp, err := http.Get(page + "metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		scraped = string(b)
		if succeeded.MatchString(scraped) && strings.Contains(scraped, "s3queue_s3_requests_total{") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the monitor's /metrics never counted the succeeded task:\n%.4000s", scraped)
		}
		time.Sleep(200 * time.Millisecond)
	}
	secret := os.Getenv("AWS_SECRET_ACCESS_KEY")
	for what, s := range map[string]string{"page": html, "state": string(state), "monitor log": monLog.String(), "metrics": scraped} {
		if strings.Contains(s, token) {
			t.Fatalf("the token shows in the %s", what)
		}
		if secret != "" && strings.Contains(s, secret) {
			t.Fatalf("the store's secret key shows in the %s", what)
		}
	}
	if !strings.Contains(monLog.String(), "actions=true") {
		t.Fatalf("the monitor's log does not say actions are enabled:\n%s", monLog.String())
	}
}

func jsString(s string) string { return fmt.Sprintf("%q", s) }
