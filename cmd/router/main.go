// Command router is pdrouter's single binary: a cache-aware, DP-aware router for SGLang
// prefill/decode clusters (serve), a discrete-event simulator of such a cluster (sim), a load
// generator (bench) and an SGLang-compatible fake worker (fakeworker).
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

func main() { os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr)) }

// commandLine is the arguments the binary was started with, recorded in results.json.
var commandLine []string

// execute runs the command line args and returns the process exit status: 0 on success, 1
// with the error on stderr after "router: " (once: an error that already starts with it is
// not prefixed again).
func execute(args []string, stdout, stderr io.Writer) int {
	commandLine = append([]string(nil), args...)
	cmd := newRootCmd()
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(stderr, "router: "+strings.TrimPrefix(err.Error(), "router: "))
		return 1
	}
	return 0
}
