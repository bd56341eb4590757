package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/s3queue/s3queue/internal/config"
	"github.com/s3queue/s3queue/internal/dashboard"
)

// dashboardFlags are the monitor's dashboard flags.
type dashboardFlags struct {
	addr, tokenFile *string
}

// tokenEnv names the environment variable that may hold the dashboard's
// action token (the alternative to --token-file). There is no --token flag:
// a flag's value shows in ps and in shell histories.
const tokenEnv = config.EnvDashboardToken

// deadListSize is how many of the most recent dead tasks a monitor serving
// the dashboard keeps (one GET each, once).
const deadListSize = 500

func defineDashboardFlags(fs *flag.FlagSet) dashboardFlags {
	return dashboardFlags{
		addr: fs.String("http", "", "serve the dashboard on `ADDR` (host:port, e.g. 127.0.0.1:8080; docs/dashboard.md)"),
		tokenFile: fs.String("token-file", "", "read the dashboard's action token from `FILE` (or set "+tokenEnv+
			"); without a token the dashboard is read-only"),
	}
}

// dashboardToken reads the action token: from --token-file, else from
// S3QUEUE_DASHBOARD_TOKEN, else none. Errors never quote the token.
func (a *app) dashboardToken(f dashboardFlags) (string, error) {
	env := ""
	for _, kv := range a.environ() {
		if v, ok := strings.CutPrefix(kv, tokenEnv+"="); ok {
			env = v
		}
	}
	if *f.addr == "" {
		if *f.tokenFile != "" {
			return "", usageError("monitor: --token-file needs --http (the token is the dashboard's)")
		}
		return "", nil
	}
	if *f.tokenFile == "" {
		return strings.TrimSpace(env), nil
	}
	b, err := os.ReadFile(*f.tokenFile)
	if err != nil {
		return "", usageError("monitor: --token-file: %v", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", usageError("monitor: --token-file %s is empty", *f.tokenFile)
	}
	if strings.ContainsAny(token, "\r\n") {
		return "", usageError("monitor: --token-file %s holds more than one line", *f.tokenFile)
	}
	return token, nil
}

// listenDashboard listens on --http's address, before anything else is
// opened: an address that is malformed or in use is a usage error at once.
func listenDashboard(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageError("monitor: --http %s: %v", addr, err)
	}
	return ln, nil
}

// serveDashboard serves the dashboard over state and tasks on ln until
// ctx ends; the returned wait function blocks until the server has shut
// down.
func (a *app) serveDashboard(ctx context.Context, ln net.Listener, token string, state dashboard.StateSource, tasks dashboard.Tasks) (wait func(), err error) {
	d, err := dashboard.New(dashboard.Config{State: state, Tasks: tasks, Token: token, Logger: a.log})
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}
	a.log.Info("dashboard listening", "url", "http://"+ln.Addr().String()+"/", "actions", token != "")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("dashboard stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
	}()
	return func() { <-done }, nil
}
