package producer_test

import (
	"context"
	"fmt"
	"log"
	"slices"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store/mem"
)

// Reserve, then build: each input is read inside its slot, so no more than
// four inputs are in memory at once, however many files there are.
func ExampleSubmitEach() {
	ctx := context.Background()
	p, err := producer.New(ctx, mem.New(), producer.Config{})
	if err != nil {
		log.Fatal(err)
	}
	files := []string{"a.png", "b.png", "c.png", "d.png", "e.png", "f.png"}
	read := func(ctx context.Context, name string) (producer.Request, error) {
		image := []byte("the bytes of " + name) // os.ReadFile(name), say
		return producer.Request{Type: "resize", Input: map[string]any{"name": name, "size": len(image)}}, nil
	}
	var done []string
	for name, res := range producer.SubmitEach(ctx, p, 4, slices.Values(files), read) {
		if res.Err != nil {
			log.Printf("%s: %v", name, res.Err)
			continue
		}
		done = append(done, name)
	}
	slices.Sort(done) // results come as submissions finish
	fmt.Println(done)
	// Output: [a.png b.png c.png d.png e.png f.png]
}

// A submitter for work that arrives faster than the store takes it: under
// drop-oldest the newest work wins, and every submission Add accepted is
// reported once, submitted or dropped.
func ExampleSubmitter() {
	ctx := context.Background()
	p, err := producer.New(ctx, mem.New(), producer.Config{})
	if err != nil {
		log.Fatal(err)
	}
	results := make(chan producer.Outcome, 100)
	s, err := p.NewSubmitter(producer.SubmitterConfig{
		Parallel: 2, MaxQueueDepth: 10, Policy: producer.DropOldest,
		OnResult: func(o producer.Outcome) { results <- o },
	})
	if err != nil {
		log.Fatal(err)
	}
	for i := range 50 {
		if err := s.Add(ctx, producer.Request{Type: "reading", Input: i}, i); err != nil {
			log.Fatal(err) // drop-oldest never refuses; ErrClosed after Close
		}
	}
	if err := s.Close(ctx); err != nil {
		log.Fatal(err)
	}
	close(results)
	reported := 0
	for range results {
		reported++
	}
	st := s.State()
	fmt.Println(reported, "reported;", st.Submitted+st.Dropped == 50)
	// Output: 50 reported; true
}
