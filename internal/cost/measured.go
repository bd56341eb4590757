package cost

// Measured rate sets (placeholders until the benchmarks run).
var (
	DefaultProfile = Profile{Name: "default"}
	EconomyProfile = Profile{Name: "economy"}
	HeavyProfile   = Profile{Name: "heavy"}
)
