package events

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestStream(t *testing.T) {
	bus := NewBus()
	defer bus.Close()
	srv := httptest.NewServer(Stream(bus, nil))
	defer srv.Close()

	before := Event{Kind: Claimed, TaskID: "before", Shard: -1}
	bus.Publish(before) // before any client: nobody gets it
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/x-ndjson" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sent := []Event{
		{Time: at, Source: SourceWorker, Origin: "w1", Kind: Succeeded, TaskID: "t1", Type: "resize", Attempt: 1, Shard: 3, Duration: time.Second},
		{Time: at, Kind: FleetAsleep, Shard: -1},
	}
	// The stream's lines are exactly what JSONLines writes.
	var want bytes.Buffer
	write := JSONLines(&want)
	for _, e := range sent {
		bus.Publish(e)
		write(e)
	}
	r := bufio.NewReader(resp.Body)
	var got bytes.Buffer
	for range sent {
		l, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read a line: %v (so far %q)", err, got.String())
		}
		got.Write(l)
	}
	if got.String() != want.String() {
		t.Errorf("stream:\n%s\nwant:\n%s", got.String(), want.String())
	}

	t.Run("ends when the bus closes", func(t *testing.T) {
		bus.Close()
		rest, err := io.ReadAll(r)
		if err != nil || len(rest) != 0 {
			t.Errorf("after the bus closed: %q, %v; want the end of the stream", rest, err)
		}
	})
	t.Run("a client that goes away unsubscribes", func(t *testing.T) {
		bus := NewBus()
		defer bus.Close()
		srv := httptest.NewServer(Stream(bus, nil))
		defer srv.Close()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(bus.Stats()); n != 1 {
			t.Fatalf("%d subscribers with a client connected, want 1", n)
		}
		cancel()
		resp.Body.Close()
		deadline := time.Now().Add(10 * time.Second)
		for len(bus.Stats()) != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the subscriber of a client that went away is still there after 10s")
			}
			bus.Publish(Event{Kind: Claimed}) // a write to the gone client fails, if the request's end did not show yet
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// blockingWriter is a ResponseWriter whose body writes wait until release
// is closed; entered is signalled at the first.
type blockingWriter struct {
	*httptest.ResponseRecorder
	mu      sync.Mutex
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.once.Do(func() { close(b.entered) })
	<-b.release
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ResponseRecorder.Write(p)
}

func (b *blockingWriter) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ResponseRecorder.Flush()
}

// A client that stops reading loses the events past its buffer, and the
// loss is counted; the publisher never waits.
func TestStreamDropsForASlowClient(t *testing.T) {
	bus := NewBus()
	defer bus.Close()
	var lost atomic.Int64
	h := Stream(bus, func(n int64) { lost.Add(n) })
	w := &blockingWriter{ResponseRecorder: httptest.NewRecorder(), entered: make(chan struct{}), release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodGet, "/events", nil).WithContext(ctx)
	done := make(chan struct{})
	go func() { defer close(done); h.ServeHTTP(w, req) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(bus.Stats()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no subscriber after 10s")
		}
		time.Sleep(time.Millisecond)
	}
	bus.Publish(Event{Kind: Claimed, TaskID: "first"})
	<-w.entered // the subscriber holds the first event, its buffer is empty
	for range StreamBuffer + 5 {
		bus.Publish(Event{Kind: Claimed})
	}
	close(w.release)
	cancel()
	<-done
	if n := lost.Load(); n != 5 {
		t.Errorf("%d events reported lost, want 5 (a buffer of %d, %d published while the client was stuck)", n, StreamBuffer, StreamBuffer+5)
	}
	if len(bus.Stats()) != 0 {
		t.Errorf("the handler returned and left its subscriber")
	}
}

// A Stream serves MaxStreamClients at once: one more is refused with 503
// and a body saying why, and a place freed is taken again.
func TestStreamRefusesClientsBeyondItsCap(t *testing.T) {
	bus := NewBus()
	defer bus.Close()
	h := Stream(bus, nil)
	type client struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	// from is a request from a client at address i (of its own).
	from := func(ctx context.Context, i int) *http.Request {
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/events", nil)
		r.RemoteAddr = fmt.Sprintf("192.0.2.%d:4000", i)
		return r
	}
	var clients []client
	for i := range MaxStreamClients {
		ctx, cancel := context.WithCancel(context.Background())
		c := client{cancel, make(chan struct{})}
		go func() {
			defer close(c.done)
			h.ServeHTTP(httptest.NewRecorder(), from(ctx, i))
		}()
		clients = append(clients, c)
	}
	defer func() {
		for _, c := range clients {
			c.cancel()
			<-c.done
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(bus.Stats()) < MaxStreamClients {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d clients subscribed", len(bus.Stats()), MaxStreamClients)
		}
		time.Sleep(time.Millisecond)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, from(context.Background(), 200))
	if w.Code != http.StatusServiceUnavailable || !bytes.Contains(w.Body.Bytes(), []byte("too many /events clients: 32")) {
		t.Fatalf("client %d: %d %q, want 503 saying why", MaxStreamClients+1, w.Code, w.Body.String())
	}
	if n := len(bus.Stats()); n != MaxStreamClients {
		t.Errorf("the refused client subscribed: %d subscribers", n)
	}
	clients[0].cancel()
	<-clients[0].done
	ctx, cancel := context.WithCancel(context.Background())
	c := client{cancel, make(chan struct{})}
	rec := httptest.NewRecorder()
	go func() {
		defer close(c.done)
		h.ServeHTTP(rec, from(ctx, 200))
	}()
	clients[0] = c
	for len(bus.Stats()) < MaxStreamClients {
		if time.Now().After(deadline) {
			t.Fatalf("a client in the freed place was not served: %d subscribers", len(bus.Stats()))
		}
		time.Sleep(time.Millisecond)
	}
}

// One address gets MaxStreamClientsPerAddr streams at most: one more from
// it is refused with 503 saying why, while another address is served.
func TestStreamBoundsTheClientsOfOneAddress(t *testing.T) {
	bus := NewBus()
	defer bus.Close()
	h := Stream(bus, nil)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()
	serve := func(addr string) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/events", nil)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		wg.Go(func() { h.ServeHTTP(w, r) })
		return w
	}
	waitSubscribers := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for len(bus.Stats()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d clients subscribed", len(bus.Stats()), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := range MaxStreamClientsPerAddr {
		serve(fmt.Sprintf("198.51.100.7:%d", 4000+i))
	}
	waitSubscribers(MaxStreamClientsPerAddr)
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/events", nil)
	r.RemoteAddr = "198.51.100.7:5000"
	h.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "too many /events clients from 198.51.100.7: 4 are connected from it") {
		t.Fatalf("client %d of one address: %d %q, want 503 saying why", MaxStreamClientsPerAddr+1, w.Code, w.Body.String())
	}
	serve("198.51.100.8:4000")
	waitSubscribers(MaxStreamClientsPerAddr + 1)
}
