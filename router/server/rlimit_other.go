//go:build !unix

package server

// openFileLimit is unknown on this platform.
func openFileLimit() (uint64, bool) { return 0, false }
