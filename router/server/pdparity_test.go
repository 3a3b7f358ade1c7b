package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router"
)

// The scripted PD failures of testutil.PDScripts, played over HTTP: each leg's worker answers,
// fails or stays silent as the script says, in the script's order (a step waits until the
// router has seen the step before it), and serve charges, answers and names the worker at
// fault as the simulator does (sim's TestPDScriptsParity plays the same scripts).
func TestPDScriptsParity(t *testing.T) {
	t.Parallel()
	for _, sc := range testutil.PDScripts {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			var arrived sync.WaitGroup // both legs reached their workers
			arrived.Add(2)
			steps := map[string]chan testutil.PDStep{"prefill": make(chan testutil.PDStep, 1), "decode": make(chan testutil.PDStep, 1)}
			leg := func(name string) func(http.ResponseWriter, *http.Request, call) {
				return func(w http.ResponseWriter, r *http.Request, _ call) {
					arrived.Done()
					select {
					case st := <-steps[name]:
						playStep(w, r, st, name)
					case <-r.Context().Done(): // silent: until the router cancels it
					}
				}
			}
			pw, dw := newWorker(t, leg("prefill")), newWorker(t, leg("decode"))
			cfg := noRetries(pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil))
			cfg.CBFailureThreshold = 1
			tr := startRouter(t, cfg)
			type answer struct {
				status int
				body   string
			}
			got := make(chan answer, 1)
			go func() {
				status, _, body := tr.post(t, "/generate", `{"text":"hello","stream":true}`, nil)
				got <- answer{status, body}
			}()
			arrived.Wait()
			for _, st := range sc.Steps {
				steps[st.Leg] <- st
				role := router.Prefill
				if st.Leg == "decode" {
					role = router.Decode
				}
				// The router has seen the step once the leg reported its Done.
				testutil.Eventually(t, 10*time.Second, func() bool { return roleLoad(tr, role) == 0 }, st.Leg+"'s Done")
			}
			res := <-got
			tr.requireLoadsZero(t) // every leg reported its Done
			assert.Equal(t, sc.Want.Status, res.status, res.body)
			charged := map[string]bool{}
			for _, w := range tr.s.r.Workers() {
				charged[w.Role.String()] = w.Breaker == router.BreakerOpen
			}
			assert.Equal(t, sc.Want.PrefillCharged, charged["prefill"], "prefill charged")
			assert.Equal(t, sc.Want.DecodeCharged, charged["decode"], "decode charged")
			if sc.Want.Status == http.StatusOK {
				return
			}
			var e struct {
				Error struct{ Message string } `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.body), &e), res.body)
			named := map[string]string{"prefill": pw.URL(), "decode": dw.URL()}[sc.Want.Names]
			assert.True(t, strings.HasPrefix(e.Error.Message, sc.Want.Names+" worker "+named), "the error names the %s: %s", sc.Want.Names, e.Error.Message)
		})
	}
}

// playStep has the test worker of leg do st.
func playStep(w http.ResponseWriter, r *http.Request, st testutil.PDStep, leg string) {
	switch {
	case st.Answers && leg == "prefill":
		jsonReply(genReply)(w, r, call{})
	case st.Answers:
		sseReply([]string{`data: {"text":"a","meta_info":{}}`, "data: [DONE]"}, nil)(w, r, call{})
	case st.Status == 0: // the worker closes the connection without an answer
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	default:
		http.Error(w, st.Body, st.Status)
	}
}

// roleLoad is the sum of role's targets' loads.
func roleLoad(tr *testRouter, role router.Role) int64 {
	var n int64
	for _, ti := range tr.s.r.Targets() {
		if ti.Role == role {
			n += ti.Load
		}
	}
	return n
}
