package s3queue_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/s3queue/s3queue"
)

// A service mounts the queue's Prometheus metrics and the monitor's
// dashboard on a mux of its own.
func ExampleMetrics() {
	ctx := context.Background()
	m := s3queue.NewMetrics()
	q, err := s3queue.Open(ctx, s3queue.Config{Store: "mem://example-metrics", Metrics: m})
	if err != nil {
		log.Fatal(err)
	}
	mon, err := q.NewMonitor(ctx)
	if err != nil {
		log.Fatal(err)
	}
	dash, err := q.Dashboard(mon, s3queue.DashboardConfig{}) // read-only: no token
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.Handle("/s3queue/", http.StripPrefix("/s3queue", dash))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	if _, err := q.Submit(ctx, "resize", nil, s3queue.SubmitOptions{}); err != nil {
		log.Fatal(err)
	}
	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	lines := bufio.NewScanner(res.Body)
	for lines.Scan() {
		if l := lines.Text(); strings.HasPrefix(l, `s3queue_s3_requests_total{op="PUT",outcome="ok"}`) {
			fmt.Println("counted:", l != `s3queue_s3_requests_total{op="PUT",outcome="ok"} 0`)
		}
	}
	for _, path := range []string{"/s3queue/", "/s3queue/api/state", "/s3queue/api/tasks/x/requeue"} {
		method := http.MethodGet
		if strings.HasSuffix(path, "requeue") {
			method = http.MethodPost
		}
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		fmt.Println(method, path, res.StatusCode)
	}
	// Output:
	// counted: true
	// GET /s3queue/ 200
	// GET /s3queue/api/state 200
	// POST /s3queue/api/tasks/x/requeue 403
}
