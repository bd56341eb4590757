package httpguard

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
)

// Token is the bearer token of a listener: when set, the requests it
// guards must carry it (Authorization: Bearer TOKEN).
type Token struct {
	sum [sha256.Size]byte // the token's hash, compared in constant time
	set bool
	log *slog.Logger
}

// NewToken returns token ("" for none) as a Token that logs its refusals
// through log.
func NewToken(token string, log *slog.Logger) *Token {
	t := &Token{set: token != "", log: log}
	if t.set {
		t.sum = sha256.Sum256([]byte(token))
	}
	return t
}

// Set reports whether a token is configured.
func (t *Token) Set() bool { return t.set }

// Admit reports whether r carries the token. When it does not (or no
// token is configured), Admit has answered 401 with a JSON error that
// says why and repeats nothing sent, and logged the attempt at warn with
// the client's address.
func (t *Token) Admit(w http.ResponseWriter, r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	scheme, got, _ := strings.Cut(auth, " ")
	// Hashes, so that neither the comparison's time nor an early exit
	// says how much of the token, or its length, was right.
	sum := sha256.Sum256([]byte(got))
	if t.set && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
		return true
	}
	t.log.Warn("http request refused: no token or a wrong one", "remote_addr", r.RemoteAddr,
		"method", r.Method, "path", r.URL.Path, "token_given", auth != "")
	w.Header().Set("WWW-Authenticate", `Bearer realm="s3queue"`)
	WriteError(w, http.StatusUnauthorized, "this request needs the dashboard token (Authorization: Bearer <token>); none was given, or it is wrong")
	return false
}

// Require returns h behind the token: with a token configured, a request
// without it is answered 401 (Admit); without one, h serves everyone.
func (t *Token) Require(h http.Handler) http.Handler {
	if !t.set {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t.Admit(w, r) {
			h.ServeHTTP(w, r)
		}
	})
}

// Hosts returns h behind a check of the Host header. A request is served
// if its Host (port aside) is empty, localhost, an IP address, this
// machine's host name (os.Hostname), the host of listen, or one of allowed
// (case-insensitive); any other is refused with 403 and logged at warn.
// None of these can be an attacker's: DNS rebinding needs a name the
// attacker controls, and a page whose origin is an address or a name of
// this machine can only be this server's own.
func Hosts(listen string, allowed []string, log *slog.Logger, h http.Handler) http.Handler {
	names := map[string]bool{"localhost": true}
	if host, _, err := net.SplitHostPort(listen); err == nil && host != "" {
		names[canonical(host)] = true
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		names[canonical(host)] = true
	}
	for _, a := range allowed {
		names[canonical(a)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hst, _, err := net.SplitHostPort(host); err == nil {
			host = hst
		}
		host = canonical(host)
		if _, err := netip.ParseAddr(host); err == nil || host == "" || names[host] {
			h.ServeHTTP(w, r)
			return
		}
		log.Warn("http request refused: Host names another server", "remote_addr", r.RemoteAddr,
			"method", r.Method, "path", r.URL.Path, "host", host)
		WriteError(w, http.StatusForbidden, fmt.Sprintf("host %q is not a name of this server: a name other than localhost, this machine's or an IP address must be listed in [http] allowed_hosts (--allowed-hosts)", host))
	})
}

// canonical is a host name as Hosts compares it: lower case, without
// brackets or a trailing dot.
func canonical(host string) string {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// ErrorResponse is the body of every refusal, and of the dashboard's API
// errors: one line saying what went wrong.
type ErrorResponse struct {
	Error string `json:"error"`
}

// WriteError answers code with ErrorResponse{msg}.
func WriteError(w http.ResponseWriter, code int, msg string) {
	WriteJSON(w, code, ErrorResponse{Error: msg})
}

// WriteJSON answers code with v as indented JSON, never cached.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	_ = enc.Encode(v)
}
