//go:build integration

package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fail-fast, timed (SPEC §1.4 step 6): prefill answers 500 while decode would wait 30 s for a
// bootstrap that never comes → the client gets prefill's error within 1 s and the decode worker
// sees its leg cancelled. And the other way round.
func TestIntegrationPDFailFastTimed(t *testing.T) {
	decodeWait := func(w http.ResponseWriter, r *http.Request, _ call) {
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
			http.Error(w, "bootstrap timeout", http.StatusInternalServerError)
		}
	}
	for _, tc := range []struct {
		name            string
		prefill, decode func(http.ResponseWriter, *http.Request, call)
		want            int
		cancelledSide   string
	}{
		{"prefill 500", statusReply(http.StatusInternalServerError, "prefill failed"), decodeWait, 500, "decode"},
		{"decode 503", decodeWait, statusReply(http.StatusServiceUnavailable, "decode full"), 503, "prefill"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The failing leg answers only once the other leg is waiting (per request).
			waiting := make(chan chan struct{}, 2)
			wait := func(next func(http.ResponseWriter, *http.Request, call)) func(http.ResponseWriter, *http.Request, call) {
				return func(w http.ResponseWriter, r *http.Request, c call) {
					ch := make(chan struct{})
					waiting <- ch
					close(ch)
					next(w, r, c)
				}
			}
			fail := func(next func(http.ResponseWriter, *http.Request, call)) func(http.ResponseWriter, *http.Request, call) {
				return func(w http.ResponseWriter, r *http.Request, c call) {
					<-<-waiting
					next(w, r, c)
				}
			}
			prefill, decode := wait(tc.prefill), fail(tc.decode)
			if tc.cancelledSide == "decode" {
				prefill, decode = fail(tc.prefill), wait(tc.decode)
			}
			pw, dw := newWorker(t, prefill), newWorker(t, decode)
			tr := startRouter(t, noRetries(pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)))
			for _, stream := range []string{"false", "true"} {
				start := time.Now()
				status, _, body := tr.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":`+stream+`}`, nil)
				elapsed := time.Since(start)
				require.Equal(t, tc.want, status, body)
				assert.Less(t, elapsed, time.Second, "answered within 1 s (took %s)", elapsed)
				t.Logf("stream=%s: %d in %s", stream, status, elapsed)
			}
			other := dw
			if tc.cancelledSide == "prefill" {
				other = pw
			}
			waitFor(t, func() bool { return other.cancelledCount() == 2 })
			tr.requireLoadsZero(t)
		})
	}
}
