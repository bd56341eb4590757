package cost

// The measured rate sets `s3queue cost` prices by default. Each comes from
// one run of `make bench` (scripts/bench.sh) on this project's 2-core
// machine against MinIO; docs/performance.md has the runs and their caveats.
var (
	// DefaultProfile: BenchmarkSeedWorkload/default — 50 elastic workers,
	// 1.16 tasks/s, 100 ms handler, default settings with poll_batch = 2
	// (run of 2026-11-26 01:10 UTC; the default is now 3).
	DefaultProfile = Profile{Name: "default",
		About: "BenchmarkSeedWorkload/default, 2026-11-26 (poll_batch 2; now 3)",
		Rates: Rates{
			PerTask:       Requests{PUT: 3.00, GET: 1.29, HEAD: 0.004, LIST: 0.924},
			PerWorkerHour: Requests{GET: 140},
			PerFleetHour:  Requests{PUT: 359, GET: 259, HEAD: 59.85, LIST: 998},
		}}
	// EconomyProfile: BenchmarkSeedWorkload/economy-c64 — profile = economy
	// and worker.concurrency = 64 (run of 2026-11-26 00:50 UTC).
	EconomyProfile = Profile{Name: "economy",
		About: "BenchmarkSeedWorkload/economy-c64, 2026-11-26",
		Rates: Rates{
			PerTask:       Requests{PUT: 3.02, GET: 1.29, HEAD: 0.004, LIST: 0.223},
			PerWorkerHour: Requests{GET: 31.89, HEAD: 31.89},
			PerFleetHour:  Requests{PUT: 223, GET: 63.77, HEAD: 15.94, LIST: 542},
		}}
	// HeavyProfile: BenchmarkHeavyLoad burst — 4 dedicated workers x 32
	// slots, MinIO as fast as it goes (run of 2026-11-26 01:10 UTC).
	HeavyProfile = Profile{Name: "heavy",
		About: "BenchmarkHeavyLoad (burst), 2026-11-26",
		Rates: Rates{
			PerTask: Requests{PUT: 3.007, GET: 1.008, LIST: 0.057},
		}}
)
