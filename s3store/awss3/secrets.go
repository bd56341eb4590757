package awss3

import (
	"context"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// secretSet holds the secret values this store has used; no error it
// returns may quote one.
type secretSet struct {
	mu   sync.Mutex
	vals []string
}

func (s *secretSet) add(vals ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
next:
	for _, v := range vals {
		if v == "" {
			continue
		}
		for _, have := range s.vals {
			if have == v {
				continue next
			}
		}
		s.vals = append(s.vals, v)
	}
}

// scrub replaces every known secret in msg.
func (s *secretSet) scrub(msg string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.vals {
		msg = strings.ReplaceAll(msg, v, "[REDACTED]")
	}
	return msg
}

// recordingProvider passes the SDK's credentials through and remembers
// their secret parts, so a session token read from a profile, a role or a
// container endpoint is scrubbed like a static key. The SDK's cache sits
// inside it: Retrieve is called per request and returns the cached value.
type recordingProvider struct {
	aws.CredentialsProvider
	secrets *secretSet
}

func (p recordingProvider) Retrieve(ctx context.Context) (aws.Credentials, error) {
	c, err := p.CredentialsProvider.Retrieve(ctx)
	if err == nil {
		p.secrets.add(c.SecretAccessKey, c.SessionToken)
	}
	return c, err
}
