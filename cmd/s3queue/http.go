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
	"github.com/s3queue/s3queue/internal/metrics"
)

// httpShutdownGrace is how long stop waits for requests in progress (a
// scrape) before it closes their connections.
const httpShutdownGrace = 5 * time.Second

// httpFlag defines --http on fs.
func httpFlag(fs *flag.FlagSet) *string {
	return fs.String("http", "", "serve /metrics, /healthz and /events on `ADDR` (host:port; port 0 picks a free one)")
}

// listenHTTP listens on --http's address before the store is opened: a
// malformed address, or a port in use, is a usage error (exit 2) at once,
// before the process joins anything.
func listenHTTP(cmd, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageError("%s: --http %s: %v", cmd, addr, err)
	}
	return ln, nil
}

// serveHTTP serves h on ln until stop is called. It logs the address it
// listens on at info ("http listening", addr=HOST:PORT), the one to read
// when --http asked for port 0.
//
// The server outlives ctx, whose values alone it uses: a worker that was
// told to stop is still scraped while it drains. stop ends the requests'
// contexts (the /events streams end), waits up to httpShutdownGrace for
// the others, and returns once the server is down; calling it again does
// nothing.
func serveHTTP(ctx context.Context, log *slog.Logger, ln net.Listener, h http.Handler) (stop func()) {
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	srv := &http.Server{
		Handler:           h,
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	log.Info("http listening", "addr", ln.Addr().String())
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

// processMux is the HTTP interface of a long-running process: its
// metrics (GET /metrics, Prometheus text format), a liveness check (GET
// /healthz: 200 "ok" while the process runs), and its events as they
// happen (GET /events, JSON lines; see docs/events.md).
//
// refresh, if set, runs before each scrape: the monitor sets its
// queue-level gauges from its state then.
func processMux(reg *metrics.Registry, bus *events.Bus, refresh func()) *http.ServeMux {
	mux := http.NewServeMux()
	scrape := reg.Handler()
	mux.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refresh != nil {
			refresh()
		}
		scrape.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /events", events.Stream(bus, reg.StreamDropped))
	return mux
}
