package sim_test

import (
	"fmt"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/workloads"
)

// A PD cluster of 2 prefill + 2 decode servers under cache-aware routing, 8 multiturn
// conversations at concurrency 4.
func ExampleRun() {
	rc := router.DefaultConfig()
	rc.PDDisaggregation = true
	p := workloads.DefaultParams()
	p.Conversations, p.Turns, p.OutputLen = 8, 2, 16
	l := workloads.DefaultLoadParams()
	l.Concurrency = []int{4}
	res, err := sim.Run(sim.Config{Router: rc, Workload: p, Load: l})
	if err != nil {
		fmt.Println(err)
		return
	}
	lv := res.Results.Levels[0]
	fmt.Printf("level %s: %d requests, %d errors, cache hit %.0f%%\n", lv.Label, lv.Requests, lv.Errors, 100**lv.CacheHitRate)
	fmt.Println("first request served by", *res.Records[0].Targets.Prefill, "and", *res.Records[0].Targets.Decode)
	// Output:
	// level c4: 16 requests, 0 errors, cache hit 47%
	// first request served by http://sim-prefill-0:30000 and http://sim-decode-0:30000
}
