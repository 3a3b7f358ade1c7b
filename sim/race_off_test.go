//go:build !race

package sim

// skipUnderRace does nothing without the race detector (see race_on_test.go).
func skipUnderRace(interface{ Skip(...any) }) {}
