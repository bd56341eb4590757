package main

import (
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/s3queue/s3queue/internal/config"
	"github.com/s3queue/s3queue/internal/dashboard"
	"github.com/s3queue/s3queue/monitor"
)

// tokenEnv names the environment variable that may hold the token of
// --http (the alternative to --token-file): the monitor's dashboard token,
// which the worker's /events and tail use too. There is no --token flag: a
// flag's value shows in ps and in shell histories.
const tokenEnv = config.EnvDashboardToken

// deadListSize is how many of the most recent dead tasks a monitor serving
// the dashboard keeps (one GET each, once).
const deadListSize = 500

// minTokenBytes is the shortest token --http accepts: the token is all
// that stands between the network and requeue, cancel and purge, and the
// inputs and results of every task, and a short one is guessed (the
// server does not rate-limit). 16 bytes of hex or base64 is 64 bits or
// more of a random token.
const minTokenBytes = 16

// httpToken reads the token of cmd's --http: from --token-file, else
// from S3QUEUE_DASHBOARD_TOKEN, else none. A token shorter than
// minTokenBytes is refused. Errors never quote the token, nor say its
// length.
func (a *app) httpToken(cmd string, f httpFlags) (string, error) {
	if *f.addr == "" {
		if *f.tokenFile != "" {
			return "", usageError("%s: --token-file needs --http (the token guards what --http serves)", cmd)
		}
		return "", nil
	}
	token, from, err := a.readToken(cmd, *f.tokenFile)
	if err != nil || token == "" {
		return token, err
	}
	if len(token) < minTokenBytes {
		return "", usageError("%s: the dashboard token (%s) is too short: it must be at least %d bytes; make one with `openssl rand -hex 32`", cmd, from, minTokenBytes)
	}
	return token, nil
}

// readToken is the token in file, if one is named, else in
// S3QUEUE_DASHBOARD_TOKEN (or none), as given, and where it came from
// (for errors).
func (a *app) readToken(cmd, file string) (token, from string, err error) {
	if file == "" {
		env := ""
		for _, kv := range a.environ() {
			if v, ok := strings.CutPrefix(kv, tokenEnv+"="); ok {
				env = v
			}
		}
		return strings.TrimSpace(env), tokenEnv, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", "", usageError("%s: --token-file: %v", cmd, err)
	}
	token = strings.TrimSpace(string(b))
	if token == "" {
		return "", "", usageError("%s: --token-file %s is empty", cmd, file)
	}
	if strings.ContainsAny(token, "\r\n") {
		return "", "", usageError("%s: --token-file %s holds more than one line", cmd, file)
	}
	return token, "--token-file " + file, nil
}

// monitorDashboard is the monitor's dashboard (docs/dashboard.md), served
// by serve on every path of --http but /events (and /metrics and /healthz
// unless --metrics-http).
func (a *app) monitorDashboard(m *monitor.Monitor, tasks dashboard.Tasks, token, noSpend string) (http.Handler, error) {
	d, err := dashboard.New(dashboard.Config{State: m, Tasks: tasks, Token: token, NoSpend: noSpend, Logger: a.log})
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	a.log.Info("dashboard", "actions", token != "", "reads_need_token", token != "")
	return d, nil
}
