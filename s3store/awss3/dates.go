package awss3

import (
	"context"
	"net/http"
	"time"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/s3queue/s3queue/s3store"
)

// dateProbe receives the DateSample of the request whose context carries it
// (the last attempt's, when retried). Now uses it to read its own response.
type dateProbe struct {
	sample s3store.DateSample
	ok     bool
}

type dateProbeKey struct{}

func withDateProbe(ctx context.Context, p *dateProbe) context.Context {
	return context.WithValue(ctx, dateProbeKey{}, p)
}

// addDateMiddleware installs, innermost in the deserialize step (below the
// retry loop, so once per attempt, and next to the transport, so the
// timestamps bracket the round trip closely), a middleware that publishes
// the Date header of every response, error responses included: a 404 or a
// 412 tells the time as well as a 200, and the clock syncs for free.
func (s *Store) addDateMiddleware(stack *middleware.Stack) error {
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("S3QueueResponseDate",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
			middleware.DeserializeOutput, middleware.Metadata, error,
		) {
			sent := time.Now()
			out, md, err := next.HandleDeserialize(ctx, in)
			received := time.Now()
			// On a transport error the SDK substitutes an empty response,
			// which has no Date and is skipped.
			resp, ok := out.RawResponse.(*smithyhttp.Response)
			if !ok || resp == nil || resp.Response == nil {
				return out, md, err
			}
			date, perr := http.ParseTime(resp.Header.Get("Date"))
			if perr != nil {
				return out, md, err
			}
			sample := s3store.DateSample{Date: date, Sent: sent, Received: received}
			if p, ok := ctx.Value(dateProbeKey{}).(*dateProbe); ok {
				p.sample, p.ok = sample, true
			}
			s.Publish(sample)
			return out, md, err
		}), middleware.After)
}
