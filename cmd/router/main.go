// Command router is pdrouter's single binary: a cache-aware, DP-aware router for SGLang
// prefill/decode clusters (serve), a discrete-event simulator of such a cluster (sim), a load
// generator (bench) and an SGLang-compatible fake worker (fakeworker).
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		os.Exit(1)
	}
}
