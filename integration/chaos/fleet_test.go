package chaos

// The processes of a run: `s3queue worker`, `s3queue monitor` and
// `s3queue submit --batch -`, each talking to MinIO through a proxy of its
// own, and a supervisor that replaces a worker or monitor that dies, as an
// orchestrator would.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// queuePrefix is where the queue lives in the run's bucket.
const queuePrefix = "q"

// queueConfig: short leases and ticks, so that a dead worker's tasks come
// back within seconds; finished tasks are kept for the checker.
const queueConfig = `shards = 4

[worker]
concurrency = 3
poll_min = "50ms"
poll_max = "500ms"
lease_margin = "1s"
shutdown_grace = "10s"
member_ttl = "6s"
standby_poll = "500ms"
drain_max = "2s"
sleep_after = "10s"
idle_leave = "10s"
pause_check_interval = "5s"

[monitor]
interval = "500ms"
stale_after = "1s"
repair_after = "3s"
lease_margin = "1s"
leader = true
retention = "0"
`

// shutdownGrace is [worker] shutdown_grace above.
const shutdownGrace = 10 * time.Second

// handlerScript is the task type chaos's command. Its input is a JSON
// string of words: ms=N (how long it works), fail=N (its attempts up to N
// fail), kill=start|end (once per task, it kills its worker with SIGKILL:
// as the handler starts, before any work, or after the work is done and
// before the worker commits). Every execution appends lines to its
// worker's runs file with O_APPEND (>>), one write each, so that the
// checker sees every execution, those a kill interrupted included:
//
//	start|end|stop|kill-start|kill-end TASK ATTEMPT WORKER PID UNIX_NS [ok|fail]
//
// Its result names the execution: {"worker":..., "attempt":..., "pid":...}.
const handlerScript = `#!/bin/sh
in=$(tr -d '"')
ms=100 fail=0 kill=
for kv in $in; do
	case $kv in
	ms=*) ms=${kv#ms=} ;;
	fail=*) fail=${kv#fail=} ;;
	kill=*) kill=${kv#kill=} ;;
	esac
done
runs="$CHAOS_DIR/runs-$CHAOS_WORKER.log"
run="$S3QUEUE_TASK_ID $S3QUEUE_ATTEMPT $CHAOS_WORKER $$"
worker_pid() {
	p=$PPID
	while [ "$p" -gt 1 ]; do
		if [ "$(cat /proc/$p/comm 2>/dev/null)" = s3queue ]; then echo "$p"; return; fi
		p=$(cut -d' ' -f4 /proc/$p/stat)
	done
}
killed_once() { mkdir "$CHAOS_DIR/kills/$S3QUEUE_TASK_ID" 2>/dev/null; }
if [ "$kill" = start ] && killed_once; then
	echo "kill-start $run $(date +%s%N)" >>"$runs"
	kill -9 "$(worker_pid)"
	exit 0
fi
echo "start $run $(date +%s%N)" >>"$runs"
trap 'echo "stop $run $(date +%s%N)" >>"$runs"; exit 143' TERM
sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))" &
wait $!
if [ "$S3QUEUE_ATTEMPT" -le "$fail" ]; then
	echo "end $run $(date +%s%N) fail" >>"$runs"
	echo "planned failure of attempt $S3QUEUE_ATTEMPT" >&2
	exit 1
fi
echo "end $run $(date +%s%N) ok" >>"$runs"
if [ "$kill" = end ] && killed_once; then
	echo "kill-end $run $(date +%s%N)" >>"$runs"
	kill -9 "$(worker_pid)"
	exit 0
fi
printf '{"worker":"%s","attempt":%s,"pid":%s}\n' "$CHAOS_WORKER" "$S3QUEUE_ATTEMPT" "$$"
`

// Why a process ended, as the suite caused it.
const (
	fateKill    = "kill-9"  // SIGKILL from the suite
	fateTerm    = "sigterm" // SIGTERM from the suite, mid-run (drain)
	fateFinal   = "final"   // SIGTERM at the end of the run
	fateHandler = ""        // nothing the suite sent: a handler's kill, or a crash
)

// proc is one s3queue process of a run.
type proc struct {
	name, role string // role: worker or monitor
	skew       string
	proxy      *proxy
	cmd        *exec.Cmd
	logPath    string
	events     string
	started    time.Time
	done       chan struct{}

	mu       sync.Mutex
	fate     string
	signaled time.Time // when the suite signaled it
	ended    time.Time
	cut      []window // when it was cut off from MinIO
}

type window struct{ from, to time.Time }

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig, recording why.
func (p *proc) signal(sig syscall.Signal, fate string) {
	p.mu.Lock()
	if p.fate == fateHandler {
		p.fate, p.signaled = fate, time.Now()
	}
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(sig)
}

// fleet is every process of a run and the MinIO they share.
type fleet struct {
	t      *testing.T
	bin    string
	dir    string
	bucket string
	minio  *minioServer
	cfg    string
	script string

	mu       sync.Mutex
	procs    []*proc
	workers  int
	stopping bool
	outages  []window // MinIO down
	wg       sync.WaitGroup
}

func newFleet(t *testing.T, bin, dir string, srv *minioServer, bucket string) *fleet {
	t.Helper()
	f := &fleet{t: t, bin: bin, dir: dir, bucket: bucket, minio: srv,
		cfg: filepath.Join(dir, "queue.toml"), script: filepath.Join(dir, "handler.sh")}
	if err := os.WriteFile(f.cfg, []byte(queueConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.script, []byte(handlerScript), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "kills"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.mu.Lock()
		f.stopping = true
		procs := append([]*proc(nil), f.procs...)
		f.mu.Unlock()
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		f.wg.Wait()
	})
	return f
}

// env is the environment of an s3queue process talking through px.
func (f *fleet) env(px *proxy, extra ...string) []string {
	return f.envAt(px.Endpoint(), extra...)
}

// envAt is the environment of an s3queue process reaching MinIO at
// endpoint.
func (f *fleet) envAt(endpoint string, extra ...string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + f.dir,
		"AWS_ACCESS_KEY_ID=" + accessKey,
		"AWS_SECRET_ACCESS_KEY=" + secretKey,
		"AWS_REGION=" + region,
		"AWS_EC2_METADATA_DISABLED=true",
		"S3QUEUE_STORE=" + storeURL(endpoint, f.bucket),
	}, extra...)
}

// startWorker starts the next worker, wN, with its local clock skew by
// skew ("" for none).
func (f *fleet) startWorker(skew string) *proc {
	f.mu.Lock()
	f.workers++
	name := fmt.Sprintf("w%d", f.workers)
	f.mu.Unlock()
	return f.start(name, "worker", skew, "worker", "--config", f.cfg, "--exec", "chaos="+f.script)
}

func (f *fleet) startMonitor(name, skew string) *proc {
	return f.start(name, "monitor", skew, "monitor", "--config", f.cfg)
}

func (f *fleet) start(name, role, skew string, args ...string) *proc {
	t := f.t
	px := newProxy(t, f.minio.addr)
	// A monitor started again keeps its name: each process has files
	// of its own all the same, so that its log rate is its own.
	f.mu.Lock()
	file := name
	for n := 1; ; n++ {
		if _, err := os.Stat(filepath.Join(f.dir, file+".log")); err != nil {
			break
		}
		file = fmt.Sprintf("%s.%d", name, n)
	}
	f.mu.Unlock()
	p := &proc{name: name, role: role, skew: skew, proxy: px, done: make(chan struct{}),
		logPath: filepath.Join(f.dir, file+".log"), events: filepath.Join(f.dir, file+".events.jsonl")}
	extra := []string{"S3QUEUE_WORKER_ID=" + name, "CHAOS_DIR=" + f.dir, "CHAOS_WORKER=" + name}
	if skew != "" {
		extra = append(extra, "S3QUEUE_TEST_CLOCK_SKEW="+skew)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(f.bin, append(args, "--events", p.events)...)
	p.cmd.Env = f.env(px, extra...)
	p.cmd.Dir = f.dir
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	f.mu.Lock()
	if f.stopping {
		f.mu.Unlock()
		logf.Close()
		return nil
	}
	p.started = time.Now()
	if err := startChild(p.cmd); err != nil {
		f.mu.Unlock()
		t.Fatalf("start %s: %v", name, err)
	}
	f.procs = append(f.procs, p)
	f.wg.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.wg.Done()
		_ = p.cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.ended = time.Now()
		fate := p.fate
		p.mu.Unlock()
		close(p.done)
		f.mu.Lock()
		replace := !f.stopping && fate != fateFinal
		f.mu.Unlock()
		if !replace {
			return
		}
		// An orchestrator starts another in its place: a worker under
		// a new id, a monitor under its own name.
		if role == "worker" {
			f.startWorker(skew)
		} else {
			f.startMonitor(name, skew)
		}
	}()
	return p
}

// live returns the live processes of role.
func (f *fleet) live(role string) []*proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*proc
	for _, p := range f.procs {
		if p.role == role && p.alive() {
			out = append(out, p)
		}
	}
	return out
}

func (f *fleet) all() []*proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*proc(nil), f.procs...)
}

// stopAll sends every process SIGTERM, as the end of a deployment does,
// and waits for them to exit.
func (f *fleet) stopAll(within time.Duration) {
	f.t.Helper()
	f.mu.Lock()
	f.stopping = true
	procs := append([]*proc(nil), f.procs...)
	f.mu.Unlock()
	for _, p := range procs {
		if p.alive() {
			p.signal(syscall.SIGTERM, fateFinal)
		}
	}
	deadline := time.After(within)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline:
			f.t.Errorf("%s did not exit within %v of SIGTERM at the end of the run:\n%s", p.name, within, p.logTail())
			return
		}
	}
}

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	return tail(string(b), 3000)
}

// submitBatch runs `s3queue submit --batch -` through px with lines and
// returns, per line (0-based), the id printed, or the error.
func (f *fleet) submitBatch(px *proxy, lines []string) (ids []string, errs []string, runErr error) {
	cmd := exec.Command(f.bin, "submit", "--config", f.cfg, "--batch", "-")
	cmd.Env = f.env(px)
	cmd.Dir = f.dir
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	ids, errs = make([]string, len(lines)), make([]string, len(lines))
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var n int
		var rest string
		if _, serr := fmt.Sscanf(l, "%d", &n); serr != nil || n < 1 || n > len(lines) {
			continue
		}
		rest = strings.TrimSpace(strings.TrimPrefix(l, fmt.Sprint(n)))
		if msg, ok := strings.CutPrefix(rest, "error: "); ok {
			errs[n-1] = msg
		} else {
			ids[n-1] = rest
		}
	}
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return ids, errs, fmt.Errorf("s3queue submit --batch: %v: %s", err, stderr.String())
		}
	}
	return ids, errs, nil
}
