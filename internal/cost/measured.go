package cost

// Measured rates: the defaults of `s3queue cost`. Each comes from one run
// of a benchmark in integration/bench_test.go against MinIO (make bench),
// at commit 2d799a8; docs/performance.md has the runs, the windows and the
// arithmetic. The liveness rates of a 3-minute window still carry the
// start-up back-offs of drain sweeps and monitor sweeps, so they are
// somewhat above a long-running fleet's (performance.md shows by how much).

// DefaultProfile: BenchmarkSeedWorkload/default — 50 elastic workers,
// default settings, 100K tasks/day (1.16 tasks/s), 100 ms handler.
var DefaultProfile = Profile{
	Name:  "default",
	About: "default settings at 100K tasks/day, 50 workers (BenchmarkSeedWorkload/default)",
	Rates: Rates{
		PerTask:       Requests{PUT: 3.00, GET: 1.29, HEAD: 0.004, LIST: 0.924},
		PerWorkerHour: Requests{GET: 140},
		PerFleetHour:  Requests{PUT: 359, GET: 259, HEAD: 60, LIST: 998},
	},
}

// EconomyProfile: BenchmarkSeedWorkload/economy-c64 — profile = "economy"
// with worker.concurrency = 64 (a poll's worth of tasks), same workload.
var EconomyProfile = Profile{
	Name:  "economy",
	About: "profile = economy, concurrency 64, at 100K tasks/day, 50 workers (BenchmarkSeedWorkload/economy-c64)",
	Rates: Rates{
		PerTask:       Requests{PUT: 3.02, GET: 1.29, HEAD: 0.004, LIST: 0.223},
		PerWorkerHour: Requests{GET: 31.9, HEAD: 31.9},
		PerFleetHour:  Requests{PUT: 223, GET: 64, HEAD: 16, LIST: 542},
	},
}

// HeavyProfile: BenchmarkHeavyLoad's burst (3000 tasks, 4 dedicated
// workers x 32 slots: discovery amortized over full polls) for the tasks,
// and BenchmarkSeedWorkload/default's liveness.
var HeavyProfile = Profile{
	Name:  "heavy",
	About: "per task under heavy load (BenchmarkHeavyLoad burst), liveness of the default settings",
	Rates: Rates{
		PerTask:       Requests{PUT: 3.007, GET: 1.008, LIST: 0.057},
		PerWorkerHour: DefaultProfile.Rates.PerWorkerHour,
		PerFleetHour:  DefaultProfile.Rates.PerFleetHour,
	},
}
