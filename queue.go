package s3queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/config"
	"github.com/s3queue/s3queue/internal/rnd"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storeurl"
	"github.com/s3queue/s3queue/shards"
)

// Config configures a Queue. Zero fields take the defaults; LoadConfig fills
// it from queue.toml and the environment.
type Config struct {
	// Store is the URL of the store Open opens:
	// s3://BUCKET[/PREFIX]?endpoint=URL&region=REGION&path_style=true,
	// file:///ABSOLUTE/DIR, or mem://NAME (one process only). S3 credentials
	// come from the standard AWS environment and profiles, never from the
	// URL. OpenStore ignores it.
	Store string
	// Shards is the queue's shard count; 0 accepts the queue's count (16 for
	// a new queue). It applies to the producer, the workers and the
	// monitors: leave the Shards of Producer, Worker and Monitor 0 (a
	// value other than this one is an error from Open, NewWorker or
	// NewMonitor).
	Shards int
	// DispatchMode is DispatchShared or DispatchDirect: how new tasks reach
	// workers ([queue] dispatch_mode, docs/direct-dispatch.md). It is
	// recorded when the queue is created; a Queue configured with the other
	// mode fails to open it. Set, it applies to the producer, the workers
	// and the monitors, and their own DispatchMode must be empty or the
	// same (another is an error); "" leaves theirs (shared unless set).
	DispatchMode DispatchMode
	// Logger receives the logs of the queue and its services (default
	// slog.Default()); the Logger of Producer, Worker or Monitor, if set,
	// wins for that service.
	Logger *slog.Logger
	// Local is this machine's monotonic clock (default clock.System()): the
	// queue's S3 clock carries time forward between responses with it, and
	// the producer, workers and monitors pace their polls, renewals and
	// back-offs by it, unless their own Local is set. Tests drive time with
	// a clock.Manual.
	Local clock.Local
	// Events, if set, is the bus the queue's producer, workers and monitors
	// publish their events on (docs/events.md); the Events of Producer,
	// Worker or Monitor, if set, wins for that service. The Queue never
	// closes it: close it after the services have stopped, to flush its
	// subscribers.
	Events *Bus
	// TracerProvider makes the spans of the queue's producer and workers
	// (docs/tracing.md); the TracerProvider of Producer or Worker, if set,
	// wins for that service. Nil is otel.GetTracerProvider(), a no-op
	// unless the program installs one.
	TracerProvider trace.TracerProvider
	// Rand is the random source of the queue's services (default
	// crypto/rand): ids, jitter and sampling. The producer, the workers and
	// the monitors draw from it under one lock, so a seeded reader replays
	// and need not be safe for concurrent use. The Rand of Producer,
	// Worker or Monitor, if set, wins for that service, under a lock of its
	// own shared by every service of that kind: a reader given to two of
	// them must be safe for concurrent use, so give a shared one here.
	Rand io.Reader
	// Submit holds the defaults of Submit and SubmitBatch.
	Submit SubmitDefaults
	// Producer tunes submission and task management. Its LeaseMargin, when
	// zero, is Worker.LeaseMargin: the producer judges which workers are
	// live by the workers' margin.
	Producer ProducerConfig
	// Worker configures the workers of NewWorker.
	Worker WorkerConfig
	// Monitor configures the monitors of NewMonitor.
	Monitor MonitorConfig
	// Schedules are periodic tasks (queue.toml's [[schedule]] tables):
	// NewMonitor writes those missing from the bucket, or different there,
	// before it returns (ApplySchedules). The bucket stays their truth:
	// monitors should share one file. See docs/scheduling.md.
	Schedules []ScheduleDefinition
	// MustExist makes Open and OpenStore fail with an error wrapping
	// ErrNoQueue when the store holds no queue, where they would create
	// one: a tool that only inspects or manages tasks should not create a
	// queue by mistake. It costs one HEAD request more.
	MustExist bool
	// Metrics, if set, collects the Prometheus metrics of the queue and
	// of its services (see Metrics): serve them with Metrics.Handler.
	Metrics *Metrics
	// OnSkip, if set, is told of each object under tasks/ that List or
	// Stats passes over because it is not a readable task, in key order, on
	// the goroutine that called them. Nil logs each as a warning.
	OnSkip func(key string, err error)
}

// SubmitDefaults are the settings a task gets when its SubmitOptions leave
// them zero (queue.toml's [submit]).
type SubmitDefaults struct {
	// MaxAttempts before a task is dead (0: task.DefaultMaxAttempts).
	MaxAttempts int
	// Timeout is the lease of one attempt, and how long its handler may
	// run (0: task.DefaultTimeout).
	Timeout time.Duration
	// Retry is the backoff between attempts (nil: task.DefaultRetryPolicy).
	Retry *RetryPolicy
}

// LoadConfig reads the queue.toml at path (none when path is ""), applies
// the S3QUEUE_* overrides of environ ("NAME=value" strings: os.Environ() in
// production; nil reads none), and returns the Config they describe, with
// a Logger writing to os.Stderr at [log]'s level and format. The file's
// [handlers] table is for the s3queue command: Go code registers Go
// handlers with Worker.Handle. Errors name the file or variable and the
// key; an S3QUEUE_* variable that names no key is an error, as an unknown
// key in the file is.
func LoadConfig(path string, environ []string) (Config, error) {
	c, err := config.Load(path, environ)
	if err != nil {
		return Config{}, fmt.Errorf("s3queue: load config: %w", err)
	}
	p, so := c.Producer(), c.SubmitOptions()
	return Config{
		Store:        c.Store,
		Shards:       p.Shards,
		DispatchMode: p.DispatchMode,
		Logger:       c.NewLogger(os.Stderr),
		Submit:       SubmitDefaults{MaxAttempts: so.MaxAttempts, Timeout: so.Timeout, Retry: so.Retry},
		Producer:     p,
		Worker:       c.Worker(),
		Monitor:      c.Monitor(),
		Schedules:    c.Schedules,
	}, nil
}

// Queue is one queue in one store: it submits and manages tasks, and makes
// the workers and monitors that run and tend them. Every service made from
// it shares its store and its authoritative clock. It is safe for
// concurrent use.
type Queue struct {
	cfg      Config
	store    s3store.Store
	clock    *clock.Authoritative
	producer *producer.Producer
	log      *slog.Logger
	// workerIDs are the Config.Worker.IDs NewWorker has handed out.
	mu        sync.Mutex
	workerIDs map[string]bool
	// where names the store in errors, with its secrets redacted.
	where string
}

// ErrNoQueue: the store holds no queue, and Config.MustExist kept Open from
// creating one.
var ErrNoQueue = errors.New("no queue (no " + shards.ManifestKey + ")")

// Open opens the store at cfg.Store and the queue in it, creating the queue
// if the store has none, unless cfg.MustExist (the first queue created in a
// bucket checks that the provider honours conditional writes). It sends a
// request or two (the queue's manifest).
func Open(ctx context.Context, cfg Config) (*Queue, error) {
	if cfg.Store == "" {
		return nil, errors.New("s3queue: open: no store URL: set Config.Store to " + storeurl.Forms)
	}
	st, err := storeurl.Open(ctx, cfg.Store)
	if err != nil {
		// storeurl's errors never carry secrets.
		return nil, fmt.Errorf("s3queue: open: %w", err)
	}
	return open(ctx, st, storeurl.Redact(cfg.Store), cfg)
}

// OpenStore opens the queue in st, as Open does, for a store built in code
// (an awss3.Store with credentials of its own, a wrapped store, a test
// double). cfg.Store is ignored but for naming the store in errors.
func OpenStore(ctx context.Context, st s3store.Store, cfg Config) (*Queue, error) {
	if st == nil {
		return nil, errors.New("s3queue: open: nil store")
	}
	where := "the store"
	if cfg.Store != "" {
		where = storeurl.Redact(cfg.Store)
	}
	return open(ctx, st, where, cfg)
}

// billed reports whether the store's requests cost money: every store but
// a file:// or mem:// one, and one built in code (OpenStore without
// Config.Store) is taken to be S3.
func billed(url string) bool {
	spec, err := storeurl.Parse(url)
	return url == "" || err != nil || spec.Scheme == storeurl.SchemeS3
}

func open(ctx context.Context, st s3store.Store, where string, cfg Config) (*Queue, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Local == nil {
		cfg.Local = clock.System()
	}
	// Each reader is wrapped once, here: every worker and monitor made
	// from the Queue copies its config, and shares the one lock.
	for _, r := range []*io.Reader{&cfg.Rand, &cfg.Producer.Rand, &cfg.Worker.Rand, &cfg.Monitor.Rand} {
		if *r != nil {
			*r = rnd.New(*r)
		}
	}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.take(); err != nil {
			return nil, fmt.Errorf("s3queue: open queue in %s: %w", where, err)
		}
		// Every request of the queue's services is counted and priced,
		// as the command's --http does.
		counter := s3store.NewCounter(st)
		cfg.Metrics.reg.CountStore(counter, billed(cfg.Store))
		st = counter
		if cfg.Events == nil {
			cfg.Events = NewBus(WithBusLogger(cfg.Logger))
		}
		cfg.Metrics.reg.Subscribe(cfg.Events)
	}
	// The clock exists before the first request, so every response syncs it.
	q := &Queue{cfg: cfg, store: st, clock: clock.New(st, clock.Config{Local: cfg.Local}),
		log: cfg.Logger.WithGroup("queue"), where: where, workerIDs: make(map[string]bool)}
	if err := q.openProducer(ctx); err != nil {
		return nil, fmt.Errorf("s3queue: open queue in %s: %w", where, err)
	}
	return q, nil
}

// openProducer opens the queue's producer, which reads the queue's manifest
// (and creates it, unless MustExist).
func (q *Queue) openProducer(ctx context.Context) error {
	cfg := q.cfg
	if cfg.MustExist {
		// HEAD first: the producer would create a missing manifest.
		_, err := q.store.Head(ctx, shards.ManifestKey)
		switch {
		case errors.Is(err, s3store.ErrNotFound):
			return ErrNoQueue
		case err != nil:
			return fmt.Errorf("read queue manifest: %w", err)
		}
	}
	pc := cfg.Producer
	if err := q.applyShared(shared{service: "Producer", shards: &pc.Shards, dispatchMode: &pc.DispatchMode,
		clock: &pc.Clock, logger: &pc.Logger, local: &pc.Local, events: &pc.Events, tracer: &pc.TracerProvider, rand: &pc.Rand}); err != nil {
		return err
	}
	if pc.LeaseMargin == 0 {
		pc.LeaseMargin = cfg.Worker.LeaseMargin
	}
	p, err := producer.New(ctx, q.store, pc)
	if err != nil {
		return err
	}
	q.producer = p
	return nil
}

// shared points at the fields of a service's config that the Queue owns
// (Shards, DispatchMode, Clock) or defaults (Logger, Local, Events,
// TracerProvider, Rand), for applyShared.
type shared struct {
	service      string // "Producer", "Worker" or "Monitor", for errors
	shards       *int
	dispatchMode *DispatchMode
	clock        **clock.Authoritative
	logger       **slog.Logger
	local        *clock.Local
	events       **Bus
	tracer       *trace.TracerProvider // nil: the service makes no spans
	rand         *io.Reader
}

// applyShared gives a service config the queue's settings: the one place
// the producer, the workers and the monitors made from q take them. A field
// the Queue owns that the service config sets to another value is an error,
// never overwritten; the defaulted ones keep the service's own when set.
func (q *Queue) applyShared(s shared) error {
	cfg := q.cfg
	if *s.shards != 0 && *s.shards != cfg.Shards {
		return fmt.Errorf("Config.%s.Shards is %d, Config.Shards %d: the queue sets it, leave it 0", s.service, *s.shards, cfg.Shards)
	}
	*s.shards = cfg.Shards
	if cfg.DispatchMode != "" {
		if *s.dispatchMode != "" && *s.dispatchMode != cfg.DispatchMode {
			return fmt.Errorf("Config.%s.DispatchMode is %q, Config.DispatchMode %q: the queue sets it, leave it empty", s.service, *s.dispatchMode, cfg.DispatchMode)
		}
		*s.dispatchMode = cfg.DispatchMode
	}
	if *s.clock != nil && *s.clock != q.clock {
		return fmt.Errorf("Config.%s.Clock is set: every service of a Queue shares the queue's clock, leave it nil", s.service)
	}
	*s.clock = q.clock
	if *s.logger == nil {
		*s.logger = cfg.Logger
	}
	if *s.local == nil {
		*s.local = cfg.Local
	}
	if *s.events == nil {
		*s.events = cfg.Events
	}
	if s.tracer != nil && *s.tracer == nil {
		*s.tracer = cfg.TracerProvider
	}
	if *s.rand == nil {
		*s.rand = cfg.Rand
	}
	return nil
}

// Manifest is a queue's layout, recorded in the store when the queue was
// created: shard count, layout format, creation time, and what the
// provider does with a conditional DELETE.
type Manifest = shards.Manifest

// Manifest returns the queue's layout as Open read it.
func (q *Queue) Manifest() Manifest { return q.producer.Manifest() }
