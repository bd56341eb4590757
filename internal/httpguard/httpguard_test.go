package httpguard_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/internal/httpguard"
)

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Hosts serves the names of this server in any of the forms a Host header
// takes, and refuses every other name.
func TestHostsAcceptsTheNamesOfThisServerOnly(t *testing.T) {
	h := httpguard.Hosts("queue.internal:8080", []string{"Dash.Example"}, discard(), ok)
	hostname, _ := os.Hostname()
	for host, want := range map[string]int{
		"":                       http.StatusOK, // HTTP/1.0: no browser sends none
		"localhost":              http.StatusOK,
		"LOCALHOST.:9090":        http.StatusOK,
		"127.0.0.1:9090":         http.StatusOK,
		"[::1]:9090":             http.StatusOK,
		"[fe80::1%25eth0]:9090":  http.StatusOK, // an address with a zone
		"10.0.0.7":               http.StatusOK,
		"queue.internal:8080":    http.StatusOK,
		"dash.example:443":       http.StatusOK,
		hostname + ":9090":       http.StatusOK,
		"evil.example:9090":      http.StatusForbidden,
		"localhost.evil.example": http.StatusForbidden,
		"127.0.0.1.nip.io":       http.StatusForbidden,
		"dash.example.evil":      http.StatusForbidden,
	} {
		r := httptest.NewRequest("GET", "/api/state", nil)
		r.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("Host %q: %d, want %d", host, w.Code, want)
		}
	}
}

// A token is taken only as "Bearer TOKEN" (the scheme in any case), and
// a refusal says why without repeating what was sent.
func TestTokenAdmitsTheBearerOnly(t *testing.T) {
	const secret = "0123456789abcdef-secret"
	var log strings.Builder
	h := httpguard.NewToken(secret, slog.New(slog.NewTextHandler(&log, nil))).Require(ok)
	for auth, want := range map[string]int{
		"Bearer " + secret:       http.StatusOK,
		"bearer " + secret:       http.StatusOK,
		"":                       http.StatusUnauthorized,
		secret:                   http.StatusUnauthorized,
		"Basic " + secret:        http.StatusUnauthorized,
		"Bearer " + secret + "x": http.StatusUnauthorized,
		"Bearer " + secret[:10]:  http.StatusUnauthorized,
	} {
		r := httptest.NewRequest("GET", "/events", nil)
		r.Header.Set("Authorization", auth)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want || want == http.StatusUnauthorized && (strings.Contains(w.Body.String(), secret[:10]) || w.Header().Get("WWW-Authenticate") == "") {
			t.Errorf("Authorization %q: %d %s, want %d", auth, w.Code, w.Body.String(), want)
		}
	}
	if strings.Contains(log.String(), secret[:10]) || strings.Count(log.String(), "http request refused") != 5 {
		t.Errorf("the log of the refusals:\n%s", log.String())
	}
	if h := httpguard.NewToken("", discard()).Require(ok); func() int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/events", nil))
		return w.Code
	}() != http.StatusOK {
		t.Error("without a token configured, Require refused a request")
	}
}
