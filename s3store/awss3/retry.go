package awss3

import (
	"crypto/tls"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"

	"github.com/s3queue/s3queue/internal/backoff"
)

// Backoff parameters; variables so tests can shrink them.
var (
	// retryBaseDelay is the first retry's maximum delay; it doubles with each
	// attempt up to retryMaxDelay. Full jitter: the delay is uniform in
	// [0, cap), which spreads a fleet's retries after a shared hiccup.
	retryBaseDelay = 100 * time.Millisecond
	// slowDownBaseDelay replaces retryBaseDelay after a 503 SlowDown, which
	// is S3 asking for less load, not a glitch.
	slowDownBaseDelay = 500 * time.Millisecond
	retryMaxDelay     = 10 * time.Second
)

// newRetryer returns the SDK's standard retry loop with our own policy:
//
//   - retried: HTTP 500, 502, 503 (SlowDown), 504, the RequestTimeout code
//     (S3's 400 for an idle upload socket), and network errors (refused or
//     reset connections, timeouts, temporary DNS failures);
//   - never retried: any other 4xx, in particular 403, 404, 409 and 412,
//     which are answers, not failures; and canceled contexts.
//
// The SDK's retry token bucket is disabled: under a burst of 503s it fails
// requests with "retry quota exceeded" instead of backing off, and the
// jittered backoff already limits the load.
func newRetryer(maxRetries int) aws.Retryer {
	switch {
	case maxRetries == 0:
		maxRetries = DefaultMaxRetries
	case maxRetries < 0:
		maxRetries = 0
	}
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = maxRetries + 1
		o.MaxBackoff = retryMaxDelay
		o.Backoff = retry.BackoffDelayerFunc(backoffDelay)
		o.Retryables = []retry.IsErrorRetryable{retry.IsErrorRetryableFunc(isRetryable)}
		o.RateLimiter = ratelimit.None
	})
}

// backoffDelay returns the delay before retrying after failed attempt
// number attempt (1-based): uniform in [0, cap), the cap doubling from the
// base delay per attempt up to retryMaxDelay (the queue's backoff with full
// jitter about half the cap). The draw is the global source's: the SDK's
// retries are no part of a seeded run.
func backoffDelay(attempt int, err error) (time.Duration, error) {
	base := retryBaseDelay
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == "SlowDown" {
		base = slowDownBaseDelay
	}
	p := backoff.Policy{Initial: base / 2, Max: retryMaxDelay / 2, Multiplier: 2, Jitter: 1, Spread: backoff.Around}
	return p.Delay(attempt, rand.Float64), nil
}

// isRetryable is the retry policy described at newRetryer.
func isRetryable(err error) aws.Ternary {
	if v := (retry.NoRetryCanceledError{}).IsErrorRetryable(err); v != aws.UnknownTernary {
		return v
	}
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) && status.HTTPStatusCode() >= 400 {
		switch status.HTTPStatusCode() {
		case 500, 502, 503, 504:
			return aws.TrueTernary
		}
		var apiErr smithy.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode() == "RequestTimeout" {
			return aws.TrueTernary
		}
		return aws.FalseTernary
	}
	// No HTTP error status: the request never got an answer, or the
	// connection broke while reading a 2xx body. A certificate the client
	// rejects will not change on retry.
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return aws.FalseTernary
	}
	if v := (retry.RetryableConnectionError{}).IsErrorRetryable(err); v != aws.UnknownTernary {
		return v
	}
	var timeout interface{ Timeout() bool }
	if errors.As(err, &timeout) && timeout.Timeout() {
		return aws.TrueTernary
	}
	return aws.FalseTernary
}
