package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/httpguard"
	"github.com/s3queue/s3queue/internal/metrics"
)

// httpShutdownGrace is how long stop waits for requests in progress (a
// scrape) before it closes their connections.
const httpShutdownGrace = 5 * time.Second

// httpTimeouts are the servers' timeouts: a client that sends its headers
// slowly, reads a response slowly or keeps an idle connection open holds
// a connection and a goroutine no longer than these. The /events streams
// are exempt from write (each of their writes has a deadline of its own,
// events.Stream), and so is a bulk requeue (bounded by its own timeouts).
// Tests shorten them.
var httpTimeouts = struct{ readHeader, write, idle time.Duration }{
	readHeader: 10 * time.Second,
	write:      time.Minute,
	idle:       2 * time.Minute,
}

// httpFlags are the HTTP flags of worker and monitor.
type httpFlags struct {
	addr, metricsAddr, tokenFile *string
}

// defineHTTPFlags defines --http (whose usage says what cmd serves there),
// --metrics-http, --token-file and --allowed-hosts on fs.
func (a *app) defineHTTPFlags(fs *flag.FlagSet, cmd, serves string) httpFlags {
	f := httpFlags{
		addr: fs.String("http", "", "serve "+serves+" on `ADDR` (host:port, e.g. 127.0.0.1:9090; port 0 picks a free one)"),
		metricsAddr: fs.String("metrics-http", "", "serve /metrics and /healthz on `ADDR` instead of on --http's address: they need no token and\n"+
			"check no Host, and hold no task data, so this port can be opened to Prometheus and probes alone"),
	}
	if cmd == "monitor" {
		f.tokenFile = fs.String("token-file", "", "read the dashboard token from `FILE` (or set "+tokenEnv+"): it enables the dashboard's actions,\n"+
			"and the dashboard's reads and /events then need it too; without a token the dashboard is read-only and open")
	} else {
		f.tokenFile = fs.String("token-file", "", "read the token /events then needs from `FILE` (or set "+tokenEnv+")")
	}
	a.keyFlag(fs, "allowed-hosts", "http.allowed_hosts", "accept the host `NAMES` (comma-separated) in the Host header of requests to --http, besides\n"+
		"localhost, IP addresses, this machine's name and --http's own host (wins over [http] allowed_hosts)")
	return f
}

// httpListeners are the listeners of --http and --metrics-http, opened
// at start, and the token read for --http.
type httpListeners struct {
	main, metrics net.Listener
	addr          string // --http as given: its host is accepted in Host
	token         string
}

// any reports whether the command serves HTTP at all.
func (l *httpListeners) any() bool { return l.main != nil || l.metrics != nil }

// close closes the listeners (the servers closed them already, if any ran).
func (l *httpListeners) close() {
	for _, ln := range []net.Listener{l.main, l.metrics} {
		if ln != nil {
			ln.Close()
		}
	}
}

// listenHTTP reads the token and listens on --http's and --metrics-http's
// addresses before the store is opened: a bad token, a malformed address
// or a port in use is a usage error (exit 2) at once, before the process
// joins anything.
func (a *app) listenHTTP(cmd string, f httpFlags) (*httpListeners, error) {
	token, err := a.httpToken(cmd, f)
	if err != nil {
		return nil, err
	}
	l := &httpListeners{addr: *f.addr, token: token}
	for _, x := range []struct {
		flag, addr string
		ln         *net.Listener
	}{{"--http", *f.addr, &l.main}, {"--metrics-http", *f.metricsAddr, &l.metrics}} {
		if x.addr == "" {
			continue
		}
		if *x.ln, err = net.Listen("tcp", x.addr); err != nil {
			l.close()
			return nil, usageError("%s: %s %s: %v", cmd, x.flag, x.addr, err)
		}
	}
	return l, nil
}

// serve serves the command's HTTP interface until stop is called:
//
//   - on --http: GET /events (the command's events as they happen, JSON
//     lines; docs/events.md), behind the token when there is one, and
//     dash, if not nil, on every other path, each for requests that name
//     this server in their Host header (httpguard.Hosts); and GET
//     /metrics and GET /healthz unless --metrics-http moved them.
//   - on --metrics-http: GET /metrics (Prometheus text format) and GET
//     /healthz (200 "ok" while the process runs), open to whoever reaches
//     the port: they hold no task data.
//
// refresh, if set, runs before each scrape: the monitor sets its
// queue-level gauges from its state then.
func (a *app) serve(ctx context.Context, l *httpListeners, reg *metrics.Registry, bus *events.Bus, refresh func(), dash http.Handler) (stop func()) {
	health := http.NewServeMux()
	scrape := reg.Handler()
	health.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refresh != nil {
			refresh()
		}
		scrape.ServeHTTP(w, r)
	}))
	health.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	var stops []func()
	if l.main != nil {
		data := http.NewServeMux()
		token := httpguard.NewToken(l.token, a.log.WithGroup("http"))
		data.Handle("GET /events", token.Require(events.Stream(bus, reg.StreamDropped)))
		paths := "/events"
		if dash != nil {
			data.Handle("/", dash)
			paths = "dashboard " + paths
		}
		mux := http.NewServeMux()
		mux.Handle("/", httpguard.Hosts(l.addr, a.cfg.HTTPSection.AllowedHosts, a.log.WithGroup("http"), data))
		if l.metrics == nil {
			// Checked by neither token nor Host, as on --metrics-http:
			// Prometheus and probes name targets as they like, and what
			// these say is open to whoever reaches the port anyway.
			mux.Handle("GET /metrics", health)
			mux.Handle("GET /healthz", health)
			paths += " /metrics /healthz"
		}
		stops = append(stops, serveHTTP(ctx, a.log, l.main, mux, paths))
	}
	if l.metrics != nil {
		stops = append(stops, serveHTTP(ctx, a.log, l.metrics, health, "/metrics /healthz"))
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

// serveHTTP serves h on ln until stop is called. It logs the address it
// listens on at info ("http listening", addr=HOST:PORT, the one to read
// when --http asked for port 0, and the paths it serves).
//
// The server outlives ctx, whose values alone it uses: a worker that was
// told to stop is still scraped while it drains. stop ends the requests'
// contexts (the /events streams end), waits up to httpShutdownGrace for
// the others, and returns once the server is down; calling it again does
// nothing.
func serveHTTP(ctx context.Context, log *slog.Logger, ln net.Listener, h http.Handler, paths string) (stop func()) {
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	srv := &http.Server{
		Handler:           h,
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: httpTimeouts.readHeader,
		WriteTimeout:      httpTimeouts.write,
		IdleTimeout:       httpTimeouts.idle,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	log.Info("http listening", "addr", ln.Addr().String(), "serves", paths)
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			sctx, scancel := context.WithTimeout(context.Background(), httpShutdownGrace)
			defer scancel()
			if err := srv.Shutdown(sctx); err != nil {
				srv.Close()
			}
			<-done
		})
	}
}
