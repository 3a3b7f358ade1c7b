package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// DirectLoad is traffic that reaches a regular server without passing any simulated router:
// clients that call a worker directly, or a router the simulated ones do not know. Requests
// requests of PromptTokens tokens (prompts of their own, sharing nothing), each asking
// OutputTokens, are submitted at once to DP rank Rank of server Worker at virtual time At. The
// routers learn of them only through the server's load reports (Routing.LoadReportInterval):
// what a router routing on its in-flight counts cannot see.
type DirectLoad struct {
	Worker                     string // a simulated worker's URL, e.g. http://sim-regular-0:30000
	Rank                       int    // its DP rank (0 without DP)
	At                         time.Duration
	Requests                   int
	PromptTokens, OutputTokens int
}

// ParseDirectLoad parses --direct-load's form, comma-separated key=value pairs:
// "worker=URL,rank=R,requests=N,prompt=P,output=O,at=T" (rank, at: 0 when absent; T a Go
// duration).
func ParseDirectLoad(s string) (DirectLoad, error) {
	bad := func(why string) (DirectLoad, error) {
		return DirectLoad{}, fmt.Errorf("sim: --direct-load %q: %s (want worker=URL,rank=R,requests=N,prompt=TOKENS,output=TOKENS,at=T)", s, why)
	}
	var d DirectLoad
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return bad("no key=value in " + strconv.Quote(kv))
		}
		var err error
		switch k {
		case "worker":
			d.Worker = v
		case "rank":
			d.Rank, err = strconv.Atoi(v)
		case "requests":
			d.Requests, err = strconv.Atoi(v)
		case "prompt":
			d.PromptTokens, err = strconv.Atoi(v)
		case "output":
			d.OutputTokens, err = strconv.Atoi(v)
		case "at":
			d.At, err = time.ParseDuration(v)
		default:
			return bad("unknown key " + strconv.Quote(k))
		}
		if err != nil {
			return bad(k + ": " + err.Error())
		}
	}
	switch {
	case d.Worker == "":
		return bad("no worker")
	case d.Requests < 1 || d.PromptTokens < 1 || d.OutputTokens < 1:
		return bad("requests, prompt and output must be ≥ 1")
	case d.Rank < 0 || d.At < 0:
		return bad("rank and at must be ≥ 0")
	}
	return d, nil
}

// directRoom numbers direct requests' rooms above every routed request's.
const directRoom = 1 << 62

// checkDirect checks the direct loads against the servers.
func (x *sim) checkDirect() error {
	for _, d := range x.cfg.Direct {
		sv := x.byURL[d.Worker]
		switch {
		case sv == nil:
			return fmt.Errorf("sim: --direct-load worker %s: no simulated worker of that name (names look like %s)", d.Worker, x.servers[0].url)
		case sv.role != router.Regular:
			return fmt.Errorf("sim: --direct-load worker %s: only regular workers take direct requests (a %s server needs its peer's bootstrap)", d.Worker, sv.role)
		case d.Rank >= sv.cfg.DPSize:
			return fmt.Errorf("sim: --direct-load worker %s: rank %d, but it has %d DP ranks", d.Worker, d.Rank, sv.cfg.DPSize)
		}
	}
	return nil
}

// submitDirect submits direct load i to its server now.
func (x *sim) submitDirect(i int) {
	d := x.cfg.Direct[i]
	sv := x.byURL[d.Worker]
	now := x.t()
	for r := range d.Requests {
		room := directRoom + uint64(i)<<32 + uint64(r)
		prompt := make([]uint32, d.PromptTokens)
		for k := range prompt {
			prompt[k] = uint32(room*7919+uint64(k)) | 1<<31 // no prefix shared with routed prompts or each other
		}
		sv.eng.Submit(now, engine.Req{Room: room, Rank: d.Rank, Prompt: prompt, MaxNew: d.OutputTokens, Gaps: discardGaps{}})
	}
	x.touch(sv)
}
