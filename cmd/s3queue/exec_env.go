package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// A handler is the task's code, often fed input from outside. With the
// worker's S3 credentials it could rewrite any task of the queue, and one
// that prints its environment on failure would put them in its task's
// error, which `get`, the events, the logs and the dashboard show and the
// bucket keeps. So a handler never inherits a variable that holds a
// credential (credentialEnv), whatever --handler-env says; and the values
// of those variables are cut out of a failed command's stderr before it
// becomes the task's error (redactTail), in case the handler found them
// some other way (a credentials file holding the same keys).

// credentialNamespaces are the prefixes of the variables the worker (the
// AWS SDK), the S3 servers it is deployed with (MinIO) and s3queue itself
// read. In them, a name with one of credentialWords holds a credential,
// unless it ends in _FILE (a path: AWS_WEB_IDENTITY_TOKEN_FILE,
// AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE, MINIO_ROOT_PASSWORD_FILE).
//
// The AWS SDK for Go v2 (config/env_config.go, resolve_credentials.go)
// reads its credentials from AWS_ACCESS_KEY_ID or AWS_ACCESS_KEY,
// AWS_SECRET_ACCESS_KEY or AWS_SECRET_KEY, AWS_SESSION_TOKEN, and for the
// ECS and EKS Pod Identity endpoint AWS_CONTAINER_AUTHORIZATION_TOKEN;
// older SDKs and boto also AWS_SECURITY_TOKEN. A word rather than a list of
// names also covers names the SDKs add later (AWS_BEARER_TOKEN_BEDROCK).
var (
	credentialNamespaces = []string{"AWS_", "MINIO_", "S3QUEUE_"}
	credentialWords      = []string{"SECRET", "PASSWORD", "TOKEN", "ACCESS_KEY", "ROOT_USER"}
)

// credentialEnv says whether the variable name holds a credential the
// worker has no business passing on (see credentialNamespaces).
// AWS_PROFILE, AWS_REGION, AWS_ROLE_ARN, AWS_SHARED_CREDENTIALS_FILE,
// AWS_CONTAINER_CREDENTIALS_FULL_URI and the like name a place, not a
// secret, and are not credentials here.
func credentialEnv(name string) bool {
	n := strings.ToUpper(name)
	for _, ns := range credentialNamespaces {
		rest, ok := strings.CutPrefix(n, ns)
		if !ok {
			continue
		}
		if strings.HasSuffix(rest, "_FILE") {
			return false
		}
		for _, w := range credentialWords {
			if strings.Contains(rest, w) {
				return true
			}
		}
	}
	return false
}

// minSecretLen is the shortest credential value redacted: a shorter one
// (a MinIO user "admin") would cut ordinary words out of errors, and no
// secret key or token is that short.
const minSecretLen = 8

// handlerEnv is what handlers inherit of the worker's environment, and the
// secret values their stderr must not carry into a task's error.
type handlerEnv struct {
	// vars are NAME=value pairs.
	vars []string
	// secrets are the values of the worker's credential variables,
	// longest first, so that one containing another is cut whole.
	secrets []string
}

// newHandlerEnv builds the handlers' environment from environ (as
// os.Environ returns it): all of it but the credentials when allow is nil,
// else only the variables allow names (NAME, or PREFIX* for every variable
// starting with PREFIX), credentials never.
func newHandlerEnv(environ, allow []string) handlerEnv {
	var e handlerEnv
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if credentialEnv(k) {
			if len(v) >= minSecretLen && !slices.Contains(e.secrets, v) {
				e.secrets = append(e.secrets, v)
			}
			continue
		}
		if allow == nil || allowedEnv(k, allow) {
			e.vars = append(e.vars, kv)
		}
	}
	slices.SortFunc(e.secrets, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return e
}

func allowedEnv(name string, allow []string) bool {
	for _, a := range allow {
		if p, ok := strings.CutSuffix(a, "*"); ok && strings.HasPrefix(name, p) || name == a {
			return true
		}
	}
	return false
}

// parseHandlerEnv parses the value of --handler-env: names and PREFIX*
// patterns separated by commas. Naming a credential is an error rather
// than a silent no-op, since the user expects the handler to get it.
func parseHandlerEnv(v string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		name := strings.TrimSuffix(f, "*")
		if strings.ContainsAny(name, "=* ") {
			return nil, fmt.Errorf("want NAME or PREFIX* separated by commas, got %q", f)
		}
		if name == f && credentialEnv(name) {
			return nil, fmt.Errorf("%s holds a credential, which handlers never inherit (docs/security.md)", name)
		}
		out = append(out, f)
	}
	return out, nil
}

// redacted replaces a secret in a command's stderr.
const redacted = "[REDACTED]"

// redactTail returns the last n bytes of raw, a command's stderr, with
// every secret replaced by [REDACTED] and "..." in front when anything is
// left out (cut: raw is itself the tail of a longer output). Secrets are
// found in all of raw, so that one starting before the last n bytes is
// still cut whole; raw must hold n bytes plus the longest secret for that,
// and a secret's fragment at the very start of a cut raw falls outside
// the n bytes kept.
func redactTail(raw []byte, n int, cut bool, secrets []string) string {
	secret := make([]bool, len(raw))
	for _, s := range secrets {
		for i := 0; ; {
			j := strings.Index(string(raw[i:]), s)
			if j < 0 {
				break
			}
			for k := i + j; k < i+j+len(s); k++ {
				secret[k] = true
			}
			i += j + 1
		}
	}
	start := 0
	if len(raw) > n {
		start, cut = len(raw)-n, true
	}
	var b strings.Builder
	for i := start; i < len(raw); i++ {
		if !secret[i] {
			b.WriteByte(raw[i])
			continue
		}
		b.WriteString(redacted)
		for i+1 < len(raw) && secret[i+1] {
			i++
		}
	}
	s := strings.ToValidUTF8(b.String(), "")
	if cut {
		return "..." + s
	}
	return s
}
