package awss3

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/s3queue/s3queue/s3store"
)

// Configuration errors, beside the s3store sentinels. Both come from a store
// that cannot work at all; callers report them and stop rather than retry:
// both also wrap s3store.ErrUnusable, except an AccessDenied on a read of one
// object (see translate).
var (
	// ErrNoSuchBucket: the bucket does not exist on the server (404
	// NoSuchBucket, or 404 to CheckBucket's HeadBucket).
	ErrNoSuchBucket = errors.New("no such bucket")
	// ErrAccessDenied: the server rejected the credentials or refused them
	// this request (403 InvalidAccessKeyId, SignatureDoesNotMatch,
	// AccessDenied). It is s3store.ErrAccessDenied.
	ErrAccessDenied = s3store.ErrAccessDenied
)

// translatedError prints a short description of a provider error while
// keeping both the sentinel and the provider's error in the chain.
type translatedError struct {
	msg  string
	errs []error
}

func (e *translatedError) Error() string   { return e.msg }
func (e *translatedError) Unwrap() []error { return e.errs }

// request is what a failed request addressed, which decides what some
// answers mean.
type request int

const (
	// bucketRequest: HeadBucket, LIST. A 404 without an error code can
	// only mean a missing bucket.
	bucketRequest request = iota
	// objectRead: GET or HEAD of an object that may be anyone's (a LIST
	// found it). An AccessDenied may be that object's own (an ACL of
	// another account, an SSE-KMS key we may not use): one foreign object
	// must not stop a process (invariant 7), so it is not ErrUnusable.
	objectRead
	// ownRequest: PUT, DELETE, and the HEAD of our own time-probe key: an
	// AccessDenied is the policy's answer for the queue's prefix.
	ownRequest
)

// translate is the one place provider errors become s3store sentinels (and
// ErrNoSuchBucket / ErrAccessDenied, with s3store.ErrUnusable: a missing
// bucket or refused credentials will not heal by retrying). A HEAD of an
// object in a missing bucket is indistinguishable from a missing key. The
// message never contains the secret key.
func (s *Store) translate(err error, req request) error {
	bucketOp := req == bucketRequest
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return s.scrubbed(err)
	}

	var status int
	var withStatus interface{ HTTPStatusCode() int }
	if errors.As(err, &withStatus) {
		status = withStatus.HTTPStatusCode()
	}
	var code, message string
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code, message = apiErr.ErrorCode(), apiErr.ErrorMessage()
	}
	said := s.describe(status, code, message)

	wrap := func(sentinel error, format string, args ...any) error {
		return &translatedError{msg: s.scrub(fmt.Sprintf(format, args...)), errs: []error{sentinel, err}}
	}
	unusable := func(sentinel error, format string, args ...any) error {
		return &translatedError{msg: s.scrub(fmt.Sprintf(format, args...)), errs: []error{sentinel, s3store.ErrUnusable, err}}
	}
	// Only codes known to mean "no such key" or "lost race" become the
	// sentinels: callers act on them (create the key, re-read and retry), so
	// a 404 or 409 that means something else must not pass for one.
	// versitygw, for one, answers an unknown access key with 404
	// XAdminUserNotFound, and a key under another key's name (posix
	// backend) with 409 ObjectParentIsFile.
	switch {
	case code == "NoSuchBucket" || (bucketOp && status == 404 && isBodiless(code)):
		return unusable(ErrNoSuchBucket, "no such bucket %q at %s (%s)", s.bucket, s.endpointName(err), said)
	case code == "InvalidAccessKeyId" || code == "XAdminUserNotFound":
		return unusable(ErrAccessDenied, "access denied: the server does not know the access key (%s); check AWS_ACCESS_KEY_ID or the configured access key", said)
	case code == "SignatureDoesNotMatch":
		return unusable(ErrAccessDenied, "access denied: the secret key does not match the access key (%s); check AWS_SECRET_ACCESS_KEY or the configured secret key", said)
	case (code == "AccessDenied" || status == 403) && req == objectRead:
		return wrap(ErrAccessDenied, "access denied to this object in bucket %q (%s); check the credentials and their permissions", s.bucket, said)
	case code == "AccessDenied" || status == 403:
		return unusable(ErrAccessDenied, "access denied to bucket %q (%s); check the credentials and their permissions", s.bucket, said)
	case code == "NoSuchKey" || (status == 404 && isBodiless(code)):
		return wrap(s3store.ErrNotFound, "%s (%s)", s3store.ErrNotFound, said)
	case code == "PreconditionFailed" || status == 412:
		return wrap(s3store.ErrPreconditionFailed, "%s (%s)", s3store.ErrPreconditionFailed, said)
	case code == "ConditionalRequestConflict" || code == "OperationAborted" || (status == 409 && isBodiless(code)):
		return wrap(s3store.ErrConflict, "%s (%s)", s3store.ErrConflict, said)
	case code == "AuthorizationHeaderMalformed" || code == "PermanentRedirect" || status == 301:
		return &translatedError{
			msg:  s.scrub(fmt.Sprintf("wrong region %q for bucket %q (%s); set the bucket's region", s.region, s.bucket, said)),
			errs: []error{err},
		}
	}

	var sendErr *smithyhttp.RequestSendError
	if errors.As(err, &sendErr) {
		cause := sendErr.Err
		var urlErr *url.Error
		if errors.As(cause, &urlErr) {
			cause = urlErr.Err // urlErr repeats method and URL
		}
		return &translatedError{
			msg:  s.scrub(fmt.Sprintf("cannot reach S3 endpoint %s: %v%s", s.endpointName(err), cause, attempts(err))),
			errs: []error{err},
		}
	}
	if status >= 500 {
		return &translatedError{msg: s.scrub(fmt.Sprintf("server error (%s)%s", said, attempts(err))), errs: []error{err}}
	}
	if status >= 400 {
		return &translatedError{msg: s.scrub(fmt.Sprintf("request refused (%s)", said)), errs: []error{err}}
	}
	return s.scrubbed(err)
}

// isBodiless reports whether code is what the SDK makes up for an error
// response without an S3 error document (every HEAD error): the status text
// without spaces, or UnknownError.
func isBodiless(code string) bool {
	switch code {
	case "", "UnknownError", "NotFound", "Conflict":
		return true
	}
	return false
}

// describe renders what the server said: "404 NoSuchKey: The specified key
// does not exist."
func (s *Store) describe(status int, code, message string) string {
	var b strings.Builder
	if status != 0 {
		fmt.Fprintf(&b, "HTTP %d", status)
	}
	if code != "" && code != fmt.Sprint(status) {
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		b.WriteString(code)
	}
	if message != "" && message != code {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(message)
	}
	if b.Len() == 0 {
		return "no details"
	}
	return b.String()
}

// attempts reports how many attempts were made when the retryer gave up.
func attempts(err error) string {
	var maxErr *retry.MaxAttemptsError
	if errors.As(err, &maxErr) {
		return fmt.Sprintf(" (gave up after %d attempts)", maxErr.Attempt)
	}
	return ""
}

// endpointName names the server for error messages.
func (s *Store) endpointName(err error) string {
	if s.endpoint != "" {
		return s.endpoint
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		if u, perr := url.Parse(urlErr.URL); perr == nil {
			return u.Scheme + "://" + u.Host
		}
	}
	return fmt.Sprintf("AWS S3 (region %s)", s.region)
}

// scrub removes every known secret from msg.
func (s *Store) scrub(msg string) string {
	return s.secrets.scrub(msg)
}

// scrubbed returns err unchanged unless its message contains a secret.
func (s *Store) scrubbed(err error) error {
	msg := err.Error()
	if clean := s.scrub(msg); clean != msg {
		return &translatedError{msg: clean, errs: []error{err}}
	}
	return err
}
