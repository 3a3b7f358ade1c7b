//go:build !race

package validate

// skipUnderRace does nothing without the race detector (see race_on_test.go).
func skipUnderRace(interface{ Skip(...any) }) {}
