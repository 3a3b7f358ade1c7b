//go:build !race

package validate

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = false

// skipUnderRace does nothing without the race detector (see race_on_test.go).
func skipUnderRace(interface{ Skip(...any) }) {}
