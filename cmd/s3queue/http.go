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

// serveHTTP listens on addr and serves h there until stop is called. A
// listen failure (a bad address, a port in use) is the error, before
// anything is served. It logs the address it listens on at info
// ("http listening", addr=HOST:PORT), the one to read when addr asked for
// port 0.
//
// The server outlives ctx, whose values alone it uses: a worker that was
// told to stop is still scraped while it drains. stop ends the requests'
// contexts (the /events streams end), waits up to httpShutdownGrace for
// the others, and returns once the server is down; calling it again does
// nothing.
func serveHTTP(ctx context.Context, log *slog.Logger, addr string, h http.Handler) (net.Addr, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--http %s: %w", addr, err)
	}
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
	stop := func() {
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
	return ln.Addr(), stop, nil
}

// processMux is the HTTP interface of a long-running process: its
// metrics (GET /metrics, Prometheus text format), a liveness check (GET
// /healthz: 200 "ok" while the process runs), and its events as they
// happen (GET /events, JSON lines; see docs/events.md).
func processMux(reg *metrics.Registry, bus *events.Bus) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", reg.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /events", events.Stream(bus, reg.StreamDropped))
	return mux
}
