//go:build race

package sim

// skipUnderRace skips a test that runs long simulations on one goroutine: the race detector
// finds nothing there and slows them ×10–15. `make test-unit` runs these tests again without
// -race (NORACE_TESTS in the Makefile), so they still run in make test.
func skipUnderRace(t interface{ Skip(...any) }) {
	t.Skip("single-goroutine simulation: run without -race by make test-unit (NORACE_TESTS)")
}
