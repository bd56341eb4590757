package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserEnv is where the headless browser of the page's tests is:
// S3QUEUE_TEST_CHROMIUM, and whether S3QUEUE_TEST_REQUIRE_BROWSER makes a
// missing one a failure (scripts/test.sh sets both), read by TestMain.
type browserEnv struct {
	chromium string
	require  bool
}

var browser browserEnv

// chromium returns the path of the headless browser: browser.chromium,
// else chromium on the PATH. Without one the test skips, or fails when
// browser.require is set.
func chromium(t *testing.T) string {
	t.Helper()
	path := browser.chromium
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
	if browser.require {
		t.Fatalf("no chromium (S3QUEUE_TEST_CHROMIUM=%q, none on the PATH) and S3QUEUE_TEST_REQUIRE_BROWSER is set: install it (apt-get install -y chromium; scripts/test.sh does)", path)
	}
	t.Skip("no chromium found (set S3QUEUE_TEST_CHROMIUM or install Debian's chromium)")
	return ""
}

// page drives one headless Chromium tab.
type page struct {
	t   *testing.T
	ctx context.Context
}

func newPage(t *testing.T) *page {
	t.Helper()
	path := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("headless", "new"))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	return &page{t, bctx}
}

func (p *page) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// waitFor polls a JavaScript condition on the page until it holds.
func (p *page) waitFor(what, js string) {
	p.t.Helper()
	ok, err := chromedp.Run(p.ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(time.Minute), chromedp.WithPollingInterval(100*time.Millisecond)))
	if err != nil || !ok {
		summary, _ := chromedp.Run(p.ctx, chromedp.TextContent(chromedp.CSS("#summary")))
		msg, _ := chromedp.Run(p.ctx, chromedp.TextContent(chromedp.CSS("#message")))
		p.t.Fatalf("waiting for %s (%s): %v; summary %q, message %q", what, js, err, summary, msg)
	}
}

// is evaluates a JavaScript condition on the page once.
func (p *page) is(js string) bool {
	p.t.Helper()
	ok, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](js))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", js, err)
	}
	return ok
}

func (p *page) text(sel string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		p.t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

// The page as an operator meets it, in headless Chromium, from a real
// monitor on a file:// store. Read-only (no token): it shows the queue,
// no token box, no action button that would only answer 403, and no S3
// spend for a store that bills none. With a token: it shows nothing until
// the token is typed, then everything, and its actions work.
func TestDashboardPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	p := newPage(t)
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker+"[monitor]\ninterval = \"200ms\"\n")
	dead := strings.TrimSpace(must(t, "submit", "--store", store, "--config", cfg, "--type", "fail", "--max-attempts", "1"))
	_, stopWorker := background(t, "worker", "--store", store, "--config", cfg, "--exec", "fail=echo 'smtp: 550' >&2; exit 3")
	waitFor(t, "the task to die", func() bool { return getTask(t, store, dead).Status == "dead" })
	stopWorker()
	row := fmt.Sprintf("#dead tr[data-id=%q]", dead)

	base, _ := startMonitor(t, store, "--config", cfg)
	p.run("load the read-only page", chromedp.Navigate(base+"/"))
	p.waitFor("the dead task in the list", `document.querySelector(`+jsString(row)+`) !== null`)
	if !p.is(`document.querySelector("#token-form").hidden && getComputedStyle(document.querySelector("#token-form")).display === "none"`) {
		t.Error("a read-only dashboard shows the token box")
	}
	if p.is(`document.querySelector(` + jsString(row+" button") + `) !== null`) {
		t.Error("a read-only dashboard shows a requeue button on the dead task")
	}
	if !p.is(`document.querySelector("#dead-types").hidden`) {
		t.Error("a read-only dashboard shows the requeue-all buttons")
	}
	if s, note := p.text("#spend"), p.text("#spend-note"); s != "none" || !strings.Contains(note, "a file:// store: its requests cost nothing") {
		t.Errorf("spend on a file:// store: %q, %q; want none, saying why", s, note)
	}
	p.run("show the task", chromedp.SendKeys(chromedp.CSS("#search-id"), dead), chromedp.Click(chromedp.CSS("#search-go")))
	p.waitFor("the task", `document.querySelector("#task-id").textContent === `+jsString(dead))
	if !p.is(`document.querySelector("#task-requeue").hidden && document.querySelector("#task-cancel").hidden`) {
		t.Error("a read-only dashboard shows the task's requeue and cancel buttons")
	}

	base, _ = startMonitor(t, store, "--config", cfg, "--token-file", tokenFile(t))
	p.run("load the page of a monitor with a token", chromedp.Navigate(base+"/"))
	p.waitFor("the page to ask for the token", `document.querySelector("#summary").textContent.includes("needs its token")`)
	if !p.is(`!document.querySelector("#token-form").hidden && document.querySelectorAll("#shards tbody tr").length === 0 && document.querySelector(` + jsString(row) + `) === null`) {
		t.Fatal("without the token the page shows data, or no token box")
	}
	p.run("type the token", chromedp.SendKeys(chromedp.CSS("#token"), testToken+"\r"))
	p.waitFor("the dead task's requeue button", `document.querySelector(`+jsString(row+" button.requeue")+`) !== null`)
	p.run("requeue it", chromedp.Click(chromedp.CSS(row+" button.requeue")))
	p.waitFor("the requeue", `document.querySelector("#message").textContent === "requeued `+dead+`"`)
	if got := getTask(t, store, dead); got.Status != "pending" {
		t.Errorf("after the requeue the task is %s, want pending", got.Status)
	}
}

func jsString(s string) string { return fmt.Sprintf("%q", s) }
