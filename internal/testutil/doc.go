// Package testutil holds the test helpers several of the module's packages share: ending a
// test that needs a tool a make target installs (NeedTool, Python, TokenizerOracle),
// polling for a condition on the test's own goroutine (Eventually), and a clock that moves only
// when told to (ManualClock).
//
// It is imported by _test.go files only, and imports the standard library and testify alone
// (cmd/router's import-boundary test), so any package's tests may use it.
package testutil
