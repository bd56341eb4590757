package cost

// Measured rates: the defaults of `s3queue cost`. Each comes from one run
// of a benchmark in integration/bench_*_test.go against MinIO (make bench) on
// 2026-11-26; docs/performance.md has the runs, the windows and the
// arithmetic. The workload windows open after 2 minutes under load, so the
// back-offs of quiet sweeps are past their first steps; what a 3-minute
// window still misses at steady state (inactive shards' sweeps at their
// ceiling, the monitor's walk of retained tasks) is itemized there.

// DefaultProfile: BenchmarkSeedWorkload/default — 50 elastic workers,
// default settings, 100K tasks/day (1.16 tasks/s), 100 ms handler (run at
// commit bc355c8). PUT per task is 3 by construction (submit, claim,
// commit); the window measured 3.02, its edge.
var DefaultProfile = Profile{
	Name:  "default",
	About: "default settings at 100K tasks/day, 50 workers (BenchmarkSeedWorkload/default)",
	Rates: Rates{
		PerTask:       Requests{PUT: 3.00, GET: 1.31, LIST: 0.553},
		PerWorkerHour: Requests{GET: 146},
		PerFleetHour:  Requests{PUT: 362, GET: 398, LIST: 402},
	},
}

// EconomyProfile: BenchmarkSeedWorkload/economy — profile = "economy",
// same workload, over a 10-minute window (S3QUEUE_BENCH_WINDOW=10m, commit
// a316631).
var EconomyProfile = Profile{
	Name:  "economy",
	About: "profile = economy at 100K tasks/day, 50 workers (BenchmarkSeedWorkload/economy)",
	Rates: Rates{
		PerTask:       Requests{PUT: 3.00, GET: 1.30, LIST: 0.075},
		PerWorkerHour: Requests{GET: 30},
		PerFleetHour:  Requests{PUT: 120, GET: 72.4, HEAD: 6.02, LIST: 199},
	},
}

// HeavyProfile: BenchmarkHeavyLoad's burst (3000 tasks, 4 dedicated
// workers x 32 slots: discovery amortized over full polls; commit a316631)
// for the tasks,
// and BenchmarkSeedWorkload/default's liveness.
var HeavyProfile = Profile{
	Name:  "heavy",
	About: "per task under heavy load (BenchmarkHeavyLoad burst), liveness of the default settings",
	Rates: Rates{
		PerTask:       Requests{PUT: 3.007, GET: 1.008, LIST: 0.045},
		PerWorkerHour: DefaultProfile.Rates.PerWorkerHour,
		PerFleetHour:  DefaultProfile.Rates.PerFleetHour,
	},
}
