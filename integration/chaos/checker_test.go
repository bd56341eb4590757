package chaos

// The checker: it reads the record a run leaves (the handlers' runs files,
// `s3queue history --json` of every task, the objects in the bucket, the
// processes' exits and logs) and proves the run's properties over it.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
)

// execution is one run of the handler, from its runs file.
type execution struct {
	task    string
	attempt int
	worker  string
	pid     string
	start   time.Time
	end     time.Time // zero: no end line (killed, or still running)
	endKind string    // ok, fail, stop (stopped by SIGTERM), or ""
	killEnd bool      // it killed its worker after its work (kill=end)
}

// readRuns parses every runs file in dir: the executions, and the kills a
// handler did as it started (task ids, by worker).
func readRuns(dir string) (execs []*execution, killStarts map[string][]string) {
	killStarts = map[string][]string{}
	files, _ := filepath.Glob(filepath.Join(dir, "runs-*.log"))
	byKey := map[string]*execution{}
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 6 {
				continue // a line a kill cut short
			}
			ns, err := strconv.ParseInt(fields[5], 10, 64)
			if err != nil {
				continue
			}
			at := time.Unix(0, ns)
			attempt, _ := strconv.Atoi(fields[2])
			key := fields[3] + "/" + fields[4]
			switch fields[0] {
			case "kill-start":
				killStarts[fields[3]] = append(killStarts[fields[3]], fields[1])
			case "start":
				e := &execution{task: fields[1], attempt: attempt, worker: fields[3], pid: fields[4], start: at}
				byKey[key] = e
				execs = append(execs, e)
			case "end", "stop":
				e := byKey[key]
				if e == nil {
					continue
				}
				e.end, e.endKind = at, fields[0]
				if fields[0] == "end" && len(fields) > 6 {
					e.endKind = fields[6]
				}
			case "kill-end":
				if e := byKey[key]; e != nil {
					e.killEnd = true
				}
			}
		}
		f.Close()
	}
	return execs, killStarts
}

// inFlight returns the executions that have started and not ended, by
// worker, from one read of the runs files.
func inFlight(dir string) map[string][]*execution {
	execs, _ := readRuns(dir)
	out := map[string][]*execution{}
	for _, e := range execs {
		if e.end.IsZero() {
			out[e.worker] = append(out[e.worker], e)
		}
	}
	return out
}

// taskObject is what the checker reads of a task object.
type taskObject struct {
	ID      string          `json:"id"`
	Status  string          `json:"status"`
	Attempt int             `json:"attempt"`
	Result  json.RawMessage `json:"result"`
	Slot    string          `json:"slot"`
	key     string
}

// readTasks reads every task object of the queue with minio-go, by id. A
// key whose ETag is the one read before is not read again (a soak has
// thousands of finished tasks).
func (r *run) readTasks() (map[string]*taskObject, error) {
	skip := map[string]bool{}
	for _, pl := range r.planted {
		skip[pl.key] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	type listed struct{ key, etag string }
	var keys []listed
	for o := range r.mc.ListObjects(ctx, r.bucket, minio.ListObjectsOptions{Prefix: queuePrefix + "/tasks/", Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		if strings.HasSuffix(o.Key, ".json") && !skip[o.Key] {
			keys = append(keys, listed{o.Key, o.ETag})
		}
	}
	r.mu.Lock()
	if r.read == nil {
		r.read = map[string]readObject{}
	}
	r.mu.Unlock()
	out := map[string]*taskObject{}
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, k := range keys {
		r.mu.Lock()
		prev, ok := r.read[k.key]
		r.mu.Unlock()
		if ok && prev.etag == k.etag {
			mu.Lock()
			out[prev.obj.ID] = prev.obj
			mu.Unlock()
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			getCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			obj, err := r.mc.GetObject(getCtx, r.bucket, k.key, minio.GetObjectOptions{})
			var body []byte
			if err == nil {
				body, err = io.ReadAll(obj)
				obj.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("get %s: %w", k.key, err)
				}
				return
			}
			var o taskObject
			if json.Unmarshal(body, &o) != nil || o.ID == "" {
				return
			}
			o.key = k.key
			out[o.ID] = &o
			r.mu.Lock()
			// Cached under the listed ETag: a write between the LIST
			// and the GET makes the next LIST read it again.
			r.read[k.key] = readObject{etag: k.etag, obj: &o}
			r.mu.Unlock()
		})
	}
	wg.Wait()
	return out, firstErr
}

// readObject is a task object as read, with the ETag it had.
type readObject struct {
	etag string
	obj  *taskObject
}

// transition is one entry of `s3queue history --json`.
type transition struct {
	At      time.Time `json:"at"`
	From    string    `json:"from"`
	To      string    `json:"to"`
	Worker  string    `json:"worker"`
	Reason  string    `json:"reason"`
	Attempt int       `json:"attempt"`
}

// histories runs `s3queue history --json` for every id, directly against
// MinIO.
func (r *run) histories(ids []string) (map[string][]transition, error) {
	out := map[string][]transition{}
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	env := r.f.envAt("http://" + r.f.minio.addr)
	for _, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cmd := exec.Command(r.f.bin, "history", "--config", r.f.cfg, "--json", id)
			cmd.Env = env
			var stderr strings.Builder
			cmd.Stderr = &stderr
			b, err := cmd.Output()
			var h []transition
			if err == nil {
				err = json.Unmarshal(b, &h)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("s3queue history --json %s: %v: %s", id, err, stderr.String())
				}
				return
			}
			out[id] = h
		})
	}
	wg.Wait()
	return out, firstErr
}

// report is what a run proved, and its figures.
type report struct {
	tasks      int
	byStatus   map[string]int
	executions int
	faults     map[string]int
	skewed     []string
	lost       []string // not found, or not in a terminal state
	wrongEnd   []string // terminal, but not the state the plan calls for
	doubles    []string // more than one terminal transition
	stale      []string // an outcome by another claim than the last
	unmatched  []string // a result no execution of the claim produced
	slotClash  []string
	early      []string // a dependent that started before its parent's run ended
	dupCauses  map[string]int
	dupTasks   int
	retries    int // planned failures run again
	crashes    []string
	maxCPU     float64
	maxCPUName string
	maxLogRate float64
	maxLogName string
	processes  int
	planted    []string
	wall       time.Duration
}

func (rep *report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tasks: %d (", rep.tasks)
	var st []string
	for k, v := range rep.byStatus {
		st = append(st, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(st)
	fmt.Fprintf(&b, "%s); handler executions: %d; processes: %d\n", strings.Join(st, ", "), rep.executions, rep.processes)
	fmt.Fprintf(&b, "faults:\n")
	var fk []string
	for k := range rep.faults {
		fk = append(fk, k)
	}
	sort.Strings(fk)
	for _, k := range fk {
		fmt.Fprintf(&b, "  %-55s %d\n", k, rep.faults[k])
	}
	fmt.Fprintf(&b, "  %-55s %s\n", "processes with skewed clocks", strings.Join(rep.skewed, ", "))
	fmt.Fprintf(&b, "lost: %d; wrong terminal state: %d; outcomes written twice: %d; outcomes by a stale claim: %d; results of no execution: %d\n",
		len(rep.lost), len(rep.wrongEnd), len(rep.doubles), len(rep.stale), len(rep.unmatched))
	fmt.Fprintf(&b, "slot overlaps: %d; dependents started early: %d; crashes: %d\n", len(rep.slotClash), len(rep.early), len(rep.crashes))
	fmt.Fprintf(&b, "duplicate executions: %d (of %d tasks), by cause:\n", sumValues(rep.dupCauses), rep.dupTasks)
	var dk []string
	for k := range rep.dupCauses {
		dk = append(dk, k)
	}
	sort.Strings(dk)
	for _, k := range dk {
		fmt.Fprintf(&b, "  %-55s %d\n", k, rep.dupCauses[k])
	}
	fmt.Fprintf(&b, "planned failures run again: %d\n", rep.retries)
	fmt.Fprintf(&b, "busiest process: %s at %.1f%% of a core over its life; most log output: %s at %.0f B/s\n",
		rep.maxCPUName, 100*rep.maxCPU, rep.maxLogName, rep.maxLogRate)
	fmt.Fprintf(&b, "planted objects: %s\n", strings.Join(rep.planted, "; "))
	fmt.Fprintf(&b, "wall time: %v\n", rep.wall.Round(time.Second))
	return b.String()
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Bounds on a process that does not spin: its CPU over its life, and how
// fast it writes logs.
const (
	maxCPUShare = 0.5
	maxLogRate  = 20 << 10 // bytes per second
)

// check proves the run's properties; each failure is a test error.
func (r *run) check() *report {
	t := r.t
	rep := &report{byStatus: map[string]int{}, faults: map[string]int{}, dupCauses: map[string]int{}}
	r.mu.Lock()
	for k, v := range r.faults {
		rep.faults[k] = v
	}
	specs := append([]*spec(nil), r.specs...)
	r.mu.Unlock()
	rep.tasks = len(specs)
	byID := map[string]*spec{}
	var ids []string
	for _, s := range specs {
		byID[s.id] = s
		ids = append(ids, s.id)
	}

	execs, killStarts := readRuns(r.f.dir)
	rep.executions = len(execs)
	for _, tasks := range killStarts {
		rep.faults["kill -9 of a worker by its handler after the claim, before the work"] += len(tasks)
	}
	for _, e := range execs {
		if e.killEnd {
			rep.faults["kill -9 of a worker by its handler after the work, before the commit"]++
		}
	}
	execsOf := map[string][]*execution{}
	for _, e := range execs {
		execsOf[e.task] = append(execsOf[e.task], e)
		if byID[e.task] == nil {
			t.Errorf("an execution of %s, a task no producer submitted (%s attempt %d)", e.task, e.worker, e.attempt)
		}
	}
	procs := r.f.all()
	procOf := map[string]*proc{}
	for _, p := range procs {
		procOf[p.name] = p
	}

	objs, err := r.readTasks()
	if err != nil {
		t.Errorf("read the task objects: %v", err)
	}
	for id := range objs {
		if byID[id] == nil {
			t.Errorf("task %s exists that no producer submitted", id)
		}
	}
	hist, err := r.histories(ids)
	if err != nil {
		t.Errorf("%v", err)
	}

	// committed[id] is the execution whose result the task records.
	committed := map[string]*execution{}
	for _, s := range specs {
		o := objs[s.id]
		if o == nil || !terminal(o.Status) {
			rep.lost = append(rep.lost, s.id)
			st := "missing"
			if o != nil {
				st = o.Status
			}
			t.Errorf("task %s (%s) lost: %s", s.id, s.kind, st)
			continue
		}
		rep.byStatus[o.Status]++
		if o.Status != s.want {
			rep.wrongEnd = append(rep.wrongEnd, s.id)
			t.Errorf("task %s (%s) ended %s; its plan calls for %s", s.id, s.kind, o.Status, s.want)
		}
		h := hist[s.id]
		// Exactly one terminal transition, the last; every outcome a
		// worker wrote is fenced on the claim before it.
		terminals := 0
		var claimW string
		var claimA int
		for _, tr := range h {
			if terminal(tr.To) {
				terminals++
			}
			if tr.To == "running" {
				claimW, claimA = tr.Worker, tr.Attempt
				continue
			}
			if tr.From == "running" && strings.HasPrefix(tr.Worker, "w") && (tr.Worker != claimW || tr.Attempt != claimA) {
				rep.stale = append(rep.stale, s.id)
				t.Errorf("task %s: %s → %s (%s) written by %s attempt %d while the claim was %s attempt %d", s.id, tr.From, tr.To, tr.Reason, tr.Worker, tr.Attempt, claimW, claimA)
			}
		}
		if terminals != 1 || len(h) == 0 || !terminal(h[len(h)-1].To) {
			rep.doubles = append(rep.doubles, s.id)
			t.Errorf("task %s: %d terminal transitions in its history %+v", s.id, terminals, h)
		}
		if o.Status == "succeeded" {
			var res struct {
				Worker  string `json:"worker"`
				Attempt int    `json:"attempt"`
				PID     int    `json:"pid"`
			}
			_ = json.Unmarshal(o.Result, &res)
			var match *execution
			for _, e := range execsOf[s.id] {
				if e.worker == res.Worker && e.pid == strconv.Itoa(res.PID) && e.attempt == res.Attempt && e.endKind == "ok" {
					match = e
				}
			}
			switch {
			case match == nil:
				rep.unmatched = append(rep.unmatched, s.id)
				t.Errorf("task %s: its result %s matches no execution that ended well", s.id, o.Result)
			case match.worker != claimW || match.attempt != claimA:
				rep.stale = append(rep.stale, s.id)
				t.Errorf("task %s: result of %s attempt %d, but the last claim was %s attempt %d", s.id, match.worker, match.attempt, claimW, claimA)
			default:
				committed[s.id] = match
			}
		}
	}

	// Slots: no two executions of one slot's tasks overlap. An execution
	// with no end line ended when its worker died.
	endOf := func(e *execution) time.Time {
		if !e.end.IsZero() {
			return e.end
		}
		if p := procOf[e.worker]; p != nil && !p.ended.IsZero() {
			return p.ended
		}
		return time.Now()
	}
	bySlot := map[string][]*execution{}
	for _, s := range specs {
		if s.slot != "" {
			bySlot[s.slot] = append(bySlot[s.slot], execsOf[s.id]...)
		}
	}
	for _, clash := range slotOverlaps(bySlot, endOf) {
		rep.slotClash = append(rep.slotClash, clash)
		t.Error(clash)
	}

	// Dependencies: a dependent runs only after the run of each parent
	// that the parent's outcome records has ended; the dependent of a task
	// that died never runs.
	for _, s := range specs {
		var parents []string
		for _, p := range s.after {
			parents = append(parents, p.id)
		}
		for _, early := range earlyStarts(s.id, parents, execsOf[s.id], committed) {
			rep.early = append(rep.early, s.id)
			t.Error(early)
		}
	}

	// Duplicate executions: every execution beyond the committed one and
	// the planned failures, each with the fault that caused it.
	r.f.mu.Lock()
	outages := append([]window(nil), r.f.outages...)
	r.f.mu.Unlock()
	during := func(ws []window, from, to time.Time) bool {
		for _, w := range ws {
			wto := w.to
			if wto.IsZero() {
				wto = time.Now()
			}
			if !from.After(wto) && !to.Before(w.from) {
				return true
			}
		}
		return false
	}
	for _, s := range specs {
		dups := 0
		for _, e := range execsOf[s.id] {
			if e == committed[s.id] {
				continue
			}
			if e.endKind == "fail" {
				rep.retries++
				continue
			}
			dups++
			p := procOf[e.worker]
			p.mu.Lock()
			cuts := append([]window(nil), p.cut...)
			fate, ended := p.fate, p.ended
			p.mu.Unlock()
			// The window in which a fault can have cost this execution
			// its commit: from its start to a lease (8s) and the
			// monitor's takeover after its end.
			to := endOf(e).Add(15 * time.Second)
			var cause string
			switch {
			case e.killEnd:
				cause = "its handler killed its worker after the work, before the commit"
			case (fate == fateKill || fate == fateHandler) && !ended.IsZero() && (e.end.IsZero() || ended.Before(e.end)):
				// The handler's shell dies with its worker; the script
				// it runs may finish its work as an orphan, with nobody
				// left to commit.
				cause = "its worker was killed (kill -9) while it ran"
			case e.endKind == "ok" && (fate == fateKill || fate == fateHandler) && !ended.IsZero() && ended.Sub(e.end) < 10*time.Second:
				cause = "its worker was killed (kill -9) after the work, before the commit"
			case during(cuts, e.start, to):
				cause = "its worker was cut off from MinIO (lease lost)"
			case during(outages, e.start, to):
				cause = "MinIO was killed and restarted meanwhile"
				// A lease outlasts an outage this short (renewals and
				// commits ride it out): the handler may run again only
				// after a lease was lost (invariant 5).
				if w := longest(outages); w < taskTimeout-3*time.Second {
					t.Errorf("task %s: execution by %s attempt %d (%s) was not committed, though its lease (%v) outlasts the MinIO outage (%v)",
						s.id, e.worker, e.attempt, e.endKind, taskTimeout, w.Round(100*time.Millisecond))
				}
			case fate == fateTerm && e.endKind == "stop":
				cause = "drain: stopped at shutdown_grace"
			default:
				cause = "unexplained"
				t.Errorf("task %s: execution by %s attempt %d (%s, %v–%v) was not committed and no fault explains it",
					s.id, e.worker, e.attempt, e.endKind, e.start.Format("15:04:05.000"), endOf(e).Format("15:04:05.000"))
			}
			rep.dupCauses[cause]++
		}
		if dups > 0 {
			rep.dupTasks++
		}
	}

	// Drains: the handlers a SIGTERM found running ended and were
	// committed by that worker.
	for _, d := range r.drained {
		for _, id := range d.running {
			if c := committed[id]; c == nil || c.worker != d.worker {
				if byID[id] != nil && byID[id].want == "succeeded" && (byID[id].fail == 0) {
					t.Errorf("%s drained on SIGTERM, but task %s it was running was not committed by it (committed: %+v)", d.worker, id, c)
				}
			}
		}
	}

	// Processes: none crashed, none spun.
	rep.processes = len(procs)
	for _, p := range procs {
		if p.skew != "" && !slices.Contains(rep.skewed, p.name+" "+p.skew) {
			rep.skewed = append(rep.skewed, p.name+" "+p.skew)
		}
		<-p.done
		st := p.cmd.ProcessState
		ws, _ := st.Sys().(syscall.WaitStatus)
		switch p.fate {
		case fateKill:
		case fateHandler:
			log, _ := os.ReadFile(p.logPath)
			if st.ExitCode() == 1 && strings.Contains(string(log), "cannot reach S3 endpoint") && during(outages, p.started, p.started.Add(time.Second)) {
				// Started while MinIO was down: it exits 1 (store
				// unreachable, docs/cli.md) and its supervisor starts it
				// again, as systemd's Restart=on-failure does.
				rep.faults["processes started during the MinIO outage: exit 1, restarted"]++
				break
			}
			if !(ws.Signaled() && ws.Signal() == syscall.SIGKILL && len(killStarts[p.name])+countKillEnds(execs, p.name) > 0) {
				rep.crashes = append(rep.crashes, p.name)
				t.Errorf("%s exited on its own (%v):\n%s", p.name, st, p.logTail())
			}
		case fateTerm, fateFinal:
			if st.ExitCode() != 0 {
				rep.crashes = append(rep.crashes, p.name)
				t.Errorf("%s exited %v after SIGTERM:\n%s", p.name, st, p.logTail())
			}
			if d := p.ended.Sub(p.signaled); d > shutdownGrace+10*time.Second {
				t.Errorf("%s took %v to exit after SIGTERM (shutdown_grace %v)", p.name, d, shutdownGrace)
			}
		}
		life := p.ended.Sub(p.started).Seconds()
		cpu := (st.UserTime() + st.SystemTime()).Seconds() / life
		if cpu > rep.maxCPU {
			rep.maxCPU, rep.maxCPUName = cpu, p.name
		}
		if life > 5 && cpu > maxCPUShare {
			t.Errorf("%s used %.0f%% of a core over its %0.fs: a hot loop?", p.name, 100*cpu, life)
		}
		log, _ := os.ReadFile(p.logPath)
		rate := float64(len(log)) / life
		if rate > rep.maxLogRate {
			rep.maxLogRate, rep.maxLogName = rate, p.name
		}
		if life > 5 && rate > maxLogRate {
			t.Errorf("%s logged %.0f bytes/s: a hot loop?\n%s", p.name, rate, tail(string(log), 2000))
		}
		for _, bad := range []string{"panic:", "fatal error:", "goroutine "} {
			if strings.Contains(string(log), bad) {
				rep.crashes = append(rep.crashes, p.name)
				t.Errorf("%s logged %q:\n%s", p.name, bad, tail(string(log), 4000))
				break
			}
		}
	}

	// Planted objects: still there (nobody deleted what it could not
	// read), and each unreadable task object reported by some process.
	var reports strings.Builder
	for _, p := range procs {
		b, _ := os.ReadFile(p.events)
		reports.Write(b)
		b, _ = os.ReadFile(p.logPath)
		reports.Write(b)
	}
	for _, pl := range r.planted {
		_, err := r.mc.StatObject(context.Background(), r.bucket, pl.key, minio.StatObjectOptions{})
		state := "kept"
		if err != nil {
			state = "gone"
			if pl.corrupt {
				t.Errorf("planted %s: %v (deleted by a process that could not read it?)", pl.key, err)
			}
		}
		if pl.corrupt {
			rel := strings.TrimPrefix(pl.key, queuePrefix+"/")
			if strings.Contains(reports.String(), rel) {
				state += ", reported"
			} else {
				t.Errorf("planted %s: no process reported it", pl.key)
			}
		}
		rep.planted = append(rep.planted, path.Base(path.Dir(pl.key))+"/"+path.Base(pl.key)+" "+state)
	}
	return rep
}

func countKillEnds(execs []*execution, worker string) int {
	n := 0
	for _, e := range execs {
		if e.worker == worker && e.killEnd {
			n++
		}
	}
	return n
}

// longest is the length of the longest window.
func longest(ws []window) time.Duration {
	var d time.Duration
	for _, w := range ws {
		d = max(d, w.to.Sub(w.from))
	}
	return d
}

// slotOverlaps returns, for each slot, every execution that started before
// an earlier execution of the slot's tasks had ended (by endOf).
func slotOverlaps(bySlot map[string][]*execution, endOf func(*execution) time.Time) []string {
	var out []string
	for slot, list := range bySlot {
		list = slices.Clone(list)
		sort.Slice(list, func(i, j int) bool { return list[i].start.Before(list[j].start) })
		var last *execution // the execution that ends last so far
		for _, cur := range list {
			if last != nil && cur.start.Before(endOf(last)) {
				out = append(out, fmt.Sprintf("slot %s: %s (%s attempt %d) started %v before %s (%s attempt %d) ended", slot, cur.task, cur.worker, cur.attempt,
					endOf(last).Sub(cur.start), last.task, last.worker, last.attempt))
			}
			if last == nil || endOf(cur).After(endOf(last)) {
				last = cur
			}
		}
	}
	return out
}

// earlyStarts returns each execution of task id that started before the
// committed run of one of its parents had ended, or although a parent has
// no committed run (it never succeeded).
func earlyStarts(id string, parents []string, execs []*execution, committed map[string]*execution) []string {
	var out []string
	for _, parent := range parents {
		pe := committed[parent]
		for _, e := range execs {
			switch {
			case pe == nil:
				out = append(out, fmt.Sprintf("task %s ran (%s attempt %d) although its parent %s never succeeded", id, e.worker, e.attempt, parent))
			case e.start.Before(pe.end):
				out = append(out, fmt.Sprintf("task %s started %v before its parent %s's run ended", id, pe.end.Sub(e.start), parent))
			}
		}
	}
	return out
}
