package events

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// StreamBuffer is the buffer of each client of Stream: a burst this long
// waits for a slow client instead of being lost to it.
const StreamBuffer = 1024

// streamWriteTimeout bounds one write to a client: a client that reads
// nothing for this long is dropped, so that it never holds a subscriber
// (and its buffer) for ever.
const streamWriteTimeout = 30 * time.Second

// MaxStreamClients bounds the clients a Stream serves at once: each holds
// a subscriber, a buffer of StreamBuffer events and a goroutine, and every
// publish reaches each of them, so clients without a bound (a script that
// reconnects in a loop and never closes) would cost the process memory and
// its publishers time. A client beyond it is answered 503 at once.
const MaxStreamClients = 32

// MaxStreamClientsPerAddr bounds the clients of one remote address (IP)
// a Stream serves at once, so that one host cannot take all
// MaxStreamClients and lock out the others (s3queue tail). A client
// beyond it is answered 503 at once.
const MaxStreamClientsPerAddr = 4

// Stream returns a handler (GET /events) that sends each client the
// events of bus published after it connected, as JSON lines
// (application/x-ndjson) in exactly the form JSONLines writes, one event a
// line, each line flushed as it is written. It ends when the client goes
// away, when the request's context ends (the server stops), or when the
// bus closes.
//
// Each client is a subscriber of its own with a buffer of StreamBuffer:
// a client that reads too slowly loses events, never the publishers'
// time. dropped, if not nil, is told how many it lost, as it goes (at
// the next line written after a loss) and when it ends.
//
// It serves at most MaxStreamClients at once, and MaxStreamClientsPerAddr
// from one address; one more is refused with 503 Service Unavailable and a
// body that says why.
//
// A stream is exempt from the server's write timeout (http.Server's
// WriteTimeout bounds a whole response): each of its writes has a
// deadline of its own instead.
func Stream(bus *Bus, dropped func(n int64)) http.Handler {
	var (
		mu      sync.Mutex
		clients int
		perAddr = map[string]int{}
	)
	// join counts a client from addr in, unless that would break a bound;
	// leave counts it out.
	join := func(addr string) (refused string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case clients >= MaxStreamClients:
			return fmt.Sprintf("too many /events clients: %d are connected, the most this process serves; retry later, or close a stream you do not read", MaxStreamClients)
		case perAddr[addr] >= MaxStreamClientsPerAddr:
			return fmt.Sprintf("too many /events clients from %s: %d are connected from it, the most this process serves one address; retry later, or close a stream you do not read", addr, MaxStreamClientsPerAddr)
		}
		clients++
		perAddr[addr]++
		return ""
	}
	leave := func(addr string) {
		mu.Lock()
		defer mu.Unlock()
		clients--
		if perAddr[addr]--; perAddr[addr] == 0 {
			delete(perAddr, addr)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		addr := r.RemoteAddr
		if host, _, err := net.SplitHostPort(addr); err == nil {
			addr = host
		}
		if why := join(addr); why != "" {
			w.Header().Set("Retry-After", "30")
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		defer leave(addr)
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Time{}) // each write sets its own, below
		var (
			sub      atomic.Pointer[Subscription]
			ready    = make(chan struct{}) // closed once the headers are out
			ended    atomic.Bool           // the handler is returning: write nothing more
			reported int64                 // drops told to dropped; the subscriber's alone
			once     sync.Once
			failed   = make(chan struct{})
		)
		report := func() {
			if s := sub.Load(); s != nil && dropped != nil {
				if n := s.Dropped(); n > reported {
					dropped(n - reported)
					reported = n
				}
			}
		}
		send := func(e Event) {
			<-ready
			if ended.Load() {
				return
			}
			b, ok := line(e)
			if !ok {
				return
			}
			_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)) // not every writer has one
			_, err := w.Write(b)
			if err == nil {
				err = rc.Flush()
			}
			if err != nil {
				ended.Store(true)
				once.Do(func() { close(failed) })
				return
			}
			report()
		}
		// Subscribed before the headers go out: a client that has them
		// gets every event published after.
		s := bus.Subscribe("stream "+r.RemoteAddr, StreamBuffer, send)
		sub.Store(s)
		h := w.Header()
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		if err := rc.Flush(); err != nil {
			ended.Store(true) // the writer cannot stream
		}
		close(ready)
		if !ended.Load() {
			select {
			case <-r.Context().Done():
			case <-failed:
			case <-s.Done():
			}
		}
		ended.Store(true)
		s.Close()
		report() // after Close: the subscriber is done with reported
	})
}
