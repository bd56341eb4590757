package monitor

import "context"

// Tick runs one tick, as Run does every Interval: the tests drive the
// monitor tick by tick.
func (m *Monitor) Tick(ctx context.Context) (TickStats, error) { return m.tick(ctx) }
