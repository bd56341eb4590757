package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/awss3"
	"github.com/s3queue/s3queue/s3store/local"
	"github.com/s3queue/s3queue/s3store/mem"
)

// Forms lists the accepted URL forms; every parse error ends with it.
const Forms = "s3://BUCKET[/PREFIX][?endpoint=URL&region=REGION&path_style=true], file:///ABSOLUTE/DIR, or mem://[NAME]"

// Schemes of Spec.Scheme.
const (
	SchemeS3   = "s3"
	SchemeFile = "file"
	SchemeMem  = "mem"
)

// Spec is a parsed store URL. Parsing opens nothing and reads no credentials.
type Spec struct {
	// Scheme is SchemeS3, SchemeFile or SchemeMem.
	Scheme string
	// S3 is the awss3 configuration of an s3:// URL: bucket, prefix,
	// endpoint, region, path style. Its credentials are always empty: they
	// come from the standard AWS chain (AWS_ACCESS_KEY_ID /
	// AWS_SECRET_ACCESS_KEY, AWS_PROFILE...), never from a URL.
	S3 awss3.Config
	// Dir is the absolute directory of a file:// URL.
	Dir string
	// Name is the name of a mem:// URL; empty means a fresh, unshared store.
	Name string
}

// Open parses rawURL and opens the store it names:
//
//   - s3://BUCKET/PREFIX?endpoint=http://127.0.0.1:9000&region=us-east-1&path_style=true
//     opens an awss3 store (no request is sent; call CheckBucket on the
//     *awss3.Store to verify the bucket and credentials at startup).
//   - file:///ABSOLUTE/DIR opens a local store in that directory.
//   - mem:// returns a fresh in-memory store; mem://NAME returns the same
//     in-memory store for the same NAME within this process.
//
// Errors never contain secrets.
func Open(ctx context.Context, rawURL string) (s3store.Store, error) {
	spec, err := Parse(rawURL)
	if err != nil {
		return nil, err
	}
	switch spec.Scheme {
	case SchemeS3:
		s, err := awss3.New(ctx, spec.S3)
		if err != nil {
			return nil, fmt.Errorf("storeurl: open %s: %w", Redact(rawURL), err)
		}
		return s, nil
	case SchemeFile:
		s, err := local.Open(spec.Dir)
		if err != nil {
			return nil, fmt.Errorf("storeurl: open %s: %w", Redact(rawURL), err)
		}
		return s, nil
	default:
		return openMem(spec.Name), nil
	}
}

// memStores is the process-wide registry of named mem:// stores, so that
// components of one process (a CLI demo's producer and workers) share one.
var memStores = struct {
	sync.Mutex
	byName map[string]*mem.Store
}{byName: make(map[string]*mem.Store)}

func openMem(name string) *mem.Store {
	if name == "" {
		return mem.New()
	}
	memStores.Lock()
	defer memStores.Unlock()
	s, ok := memStores.byName[name]
	if !ok {
		s = mem.New()
		memStores.byName[name] = s
	}
	return s
}

// Parse checks rawURL and returns what it names, without opening anything.
// For s3:// with an endpoint and no region parameter, the region is
// "us-east-1" unless AWS_REGION is set.
func Parse(rawURL string) (Spec, error) {
	if strings.TrimSpace(rawURL) == "" {
		return Spec{}, parseError("empty store URL")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse quotes pieces of the URL; with userinfo present a piece
		// may be a password, so say less.
		var urlErr *url.Error
		if strings.Contains(rawURL, "@") || !errors.As(err, &urlErr) {
			return Spec{}, parseError("malformed store URL")
		}
		return Spec{}, parseError(fmt.Sprintf("malformed store URL: %v", urlErr.Err))
	}
	if u.Scheme == "" {
		if filepath.IsAbs(u.Path) {
			return Spec{}, parseError(fmt.Sprintf("store URL %q has no scheme (for a directory write file://%s)", Redact(rawURL), u.Path))
		}
		return Spec{}, parseError(fmt.Sprintf("store URL %q has no scheme", Redact(rawURL)))
	}
	if u.User != nil {
		return Spec{}, parseError("credentials in the store URL are not accepted (use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)")
	}
	if u.Fragment != "" || u.RawFragment != "" {
		return Spec{}, parseError(fmt.Sprintf("store URL %q has a #fragment", Redact(rawURL)))
	}
	if u.Opaque != "" {
		return Spec{}, parseError(fmt.Sprintf("store URL %q lacks // after %q", Redact(rawURL), u.Scheme+":"))
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Spec{}, parseError("malformed query in store URL")
	}
	switch u.Scheme {
	case SchemeS3:
		return parseS3(u, query)
	case SchemeFile:
		return parseFile(u, query)
	case SchemeMem:
		return parseMem(u, query)
	default:
		return Spec{}, parseError(fmt.Sprintf("unknown scheme %q", u.Scheme))
	}
}

func parseS3(u *url.URL, query url.Values) (Spec, error) {
	bucket := u.Host
	if bucket == "" {
		return Spec{}, parseError("missing bucket name in s3:// URL")
	}
	if strings.Contains(bucket, ":") {
		return Spec{}, parseError(fmt.Sprintf("bucket name %q contains ':' (put the server in ?endpoint=)", bucket))
	}
	cfg := awss3.Config{Bucket: bucket, Prefix: strings.Trim(u.Path, "/")}
	for name, values := range query {
		if len(values) != 1 {
			return Spec{}, parseError(fmt.Sprintf("parameter %q given %d times", name, len(values)))
		}
		v := values[0]
		switch name {
		case "endpoint":
			e, err := url.Parse(v)
			if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.User != nil {
				return Spec{}, parseError("parameter endpoint must be an http:// or https:// URL with a host, like http://127.0.0.1:9000")
			}
			cfg.Endpoint = v
		case "region":
			if v == "" {
				return Spec{}, parseError("parameter region is empty")
			}
			cfg.Region = v
		case "path_style":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Spec{}, parseError(fmt.Sprintf("parameter path_style=%q is not a boolean (use true or false)", v))
			}
			cfg.PathStyle = b
		default:
			if isSecretName(name) {
				return Spec{}, parseError(fmt.Sprintf("parameter %q: credentials are not accepted in the store URL (use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)", name))
			}
			return Spec{}, parseError(fmt.Sprintf("unknown parameter %q in s3:// URL (known: endpoint, region, path_style)", name))
		}
	}
	if cfg.Region == "" && cfg.Endpoint != "" && os.Getenv("AWS_REGION") == "" {
		cfg.Region = "us-east-1"
	}
	return Spec{Scheme: SchemeS3, S3: cfg}, nil
}

func parseFile(u *url.URL, query url.Values) (Spec, error) {
	if err := noParameters(SchemeFile, query); err != nil {
		return Spec{}, err
	}
	if u.Host != "" && u.Host != "localhost" {
		return Spec{}, parseError(fmt.Sprintf("file URL names host %q: a relative path is not accepted; write an absolute path after three slashes, like file:///var/lib/s3queue", u.Host))
	}
	if u.Path == "" || !filepath.IsAbs(u.Path) {
		return Spec{}, parseError("file URL has no absolute path; write it after three slashes, like file:///var/lib/s3queue")
	}
	return Spec{Scheme: SchemeFile, Dir: filepath.Clean(u.Path)}, nil
}

func parseMem(u *url.URL, query url.Values) (Spec, error) {
	if err := noParameters(SchemeMem, query); err != nil {
		return Spec{}, err
	}
	if u.Path != "" && u.Path != "/" {
		return Spec{}, parseError(fmt.Sprintf("mem URL has a path %q; a mem store has only a name, like mem://demo", u.Path))
	}
	return Spec{Scheme: SchemeMem, Name: u.Host}, nil
}

func noParameters(scheme string, query url.Values) error {
	for name := range query {
		return parseError(fmt.Sprintf("unknown parameter %q in %s:// URL (it takes none)", name, scheme))
	}
	return nil
}

func parseError(problem string) error {
	return fmt.Errorf("storeurl: %s; expected %s", problem, Forms)
}

// Redact returns rawURL safe for logs: without userinfo, and without any
// query parameter whose name contains "secret", "key", "token" or
// "password". The other parameters keep their order.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(malformed URL)"
	}
	u.User = nil
	if u.RawQuery != "" {
		var kept []string
		for _, part := range strings.Split(u.RawQuery, "&") {
			name, _, _ := strings.Cut(part, "=")
			if unescaped, err := url.QueryUnescape(name); err == nil {
				name = unescaped
			}
			if !isSecretName(name) {
				kept = append(kept, part)
			}
		}
		u.RawQuery = strings.Join(kept, "&")
	}
	return u.String()
}

func isSecretName(name string) bool {
	name = strings.ToLower(name)
	for _, w := range []string{"secret", "key", "token", "password"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}
