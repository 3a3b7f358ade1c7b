package sim

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/workloads"
)

// The scripted PD failures of testutil.PDScripts, played through the simulator's driver: the
// router sees each leg answer or fail as the script says (the engines are left out: the
// attempt's rooms are never submitted), and charges, answers and names the worker at fault as
// serve does (router/server's TestPDScriptsParity plays the same scripts over HTTP).
func TestPDScriptsParity(t *testing.T) {
	t.Parallel()
	for _, sc := range testutil.PDScripts {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			cfg := baseConfig()
			cfg.Cluster.Prefill, cfg.Cluster.Decode = 1, 1
			cfg.Router.DisableRetries = true
			cfg.Router.CBFailureThreshold = 1
			x, err := newSim(cfg)
			require.NoError(t, err)
			r := &request{id: "script/0", firstTok: -1, retrier: x.reps[0].rt.NewRetrier(),
				turn: workloads.Turn{RouteText: "hello", Model: "m", PromptIDs: []uint32{1, 2, 3}, MaxTokens: 4}}
			x.route(r)
			a := r.att
			require.NotNil(t, a)
			for _, st := range sc.Steps {
				x.clock.now += 1000
				role := router.Prefill
				if st.Leg == "decode" {
					role = router.Decode
				}
				switch {
				case st.Answers && role == router.Prefill:
					x.legEnd(&event{kind: evLegEnd, ok: true, role: uint8(role), p: unsafe.Pointer(a)})
				case st.Answers:
					a.started, a.startedAt = true, x.clock.now // its first token reaches the router
				case st.Status == 0:
					x.legFailed(a, role, router.Attempt{Transport: true}, "connection closed")
				default:
					x.legFailed(a, role, router.Attempt{Status: st.Status, Body: []byte(st.Body)}, st.Body)
				}
			}
			if !a.over && a.started { // decode's stream goes on to its end
				x.clock.now += 1000
				x.legEnd(&event{kind: evLegEnd, ok: true, role: uint8(router.Decode), p: unsafe.Pointer(a)})
			}
			require.True(t, a.over, "the attempt ended")

			charged := map[string]bool{}
			for _, w := range x.reps[0].rt.Workers() {
				charged[w.Role.String()] = w.Breaker == router.BreakerOpen
			}
			assert.Equal(t, sc.Want.PrefillCharged, charged["prefill"], "prefill charged")
			assert.Equal(t, sc.Want.DecodeCharged, charged["decode"], "decode charged")
			if sc.Want.Status == 200 {
				assert.Nil(t, r.errMsg)
				return
			}
			require.NotNil(t, r.errMsg)
			assert.Equal(t, reports.HTTPErrorKind(sc.Want.Status), reports.ErrorKind(*r.errMsg), *r.errMsg)
			named := *r.errMsg
			named = named[strings.Index(named, ": ")+2:]
			assert.True(t, strings.HasPrefix(named, sc.Want.Names+" "+WorkerURL(roleOf(sc.Want.Names), 0)), "the error names the %s: %s", sc.Want.Names, *r.errMsg)
		})
	}
}

func roleOf(leg string) router.Role {
	if leg == "decode" {
		return router.Decode
	}
	return router.Prefill
}
