package server

import (
	"fmt"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router"
)

// rendezvous pairs each room's two legs, as a prefill's bootstrap server does: one worker
// registers the room (saying whether it will ever do its part), the other waits for that and
// fails as SGLang does when its peer never shows up.
type rendezvous struct {
	mu    sync.Mutex
	rooms map[uint64]chan bool // room → receives once whether the registering worker hangs
}

func newRendezvous() *rendezvous { return &rendezvous{rooms: map[uint64]chan bool{}} }

func (rv *rendezvous) room(c call) (uint64, chan bool, bool) {
	f, ok := c.body["bootstrap_room"].(float64)
	if !ok {
		return 0, nil, false
	}
	room := uint64(f)
	rv.mu.Lock()
	defer rv.mu.Unlock()
	ch, ok := rv.rooms[room]
	if !ok {
		ch = make(chan bool, 1)
		rv.rooms[room] = ch
	}
	return room, ch, true
}

// register registers the room; a hanging worker then answers nothing until the router gives
// up on it.
func (rv *rendezvous) register(hangs bool) func(http.ResponseWriter, *http.Request, call) {
	return func(w http.ResponseWriter, r *http.Request, c call) {
		_, ch, ok := rv.room(c)
		if !ok {
			http.Error(w, "no bootstrap_room", http.StatusBadRequest)
			return
		}
		ch <- hangs
		if hangs {
			<-r.Context().Done()
			return
		}
		jsonReply(genReply)(w, r, c)
	}
}

// wait waits for the room's other worker and answers 500 with failure (given the room) when
// that worker hangs.
func (rv *rendezvous) wait(failure func(room uint64) string) func(http.ResponseWriter, *http.Request, call) {
	return func(w http.ResponseWriter, r *http.Request, c call) {
		room, ch, ok := rv.room(c)
		if !ok {
			http.Error(w, "no bootstrap_room", http.StatusBadRequest)
			return
		}
		select {
		case <-r.Context().Done():
			return
		case hangs := <-ch:
			if hangs {
				http.Error(w, failure(room), http.StatusInternalServerError)
				return
			}
		}
		jsonReply(genReply)(w, r, c)
	}
}

// sglangPrefillBootstrapTimeout is SGLang's prefill answer when the decode side never sent its
// KV indices (disaggregation/prefill.py, PrefillBootstrapQueue.pop_bootstrapped, with
// common/conn.py's CommonKVSender._check_bootstrap_timeout as the cause).
func sglangPrefillBootstrapTimeout(room uint64) string {
	return fmt.Sprintf(`{"error":{"message":"Prefill bootstrap failed for request rank=0 req.rid='x' req.bootstrap_room=%d with exception KVTransferError(bootstrap_room=%d): Request %d timed out after 3.0s in KVPoll.Bootstrapping","code":500}}`, room, room, room)
}

// sglangDecodeWaitTimeout is SGLang's decode answer when the prefill's KV never arrived
// (mooncake/conn.py, MooncakeKVReceiver's _check_waiting_timeout).
func sglangDecodeWaitTimeout(room uint64) string {
	return fmt.Sprintf(`{"error":{"message":"Decode transfer failed for request rank=0 decode_req.req.rid='x' decode_req.req.bootstrap_room=%d with exception KVTransferError(bootstrap_room=%d): Request %d timed out after 3.0s in KVPoll.WaitingForInput","code":500}}`, room, room, room)
}

// loadAndWatchBreakers sends clients×each requests at once-ish (each client sequential), fails
// the test on any non-200, and returns the workers whose breaker opened meanwhile.
func loadAndWatchBreakers(t *testing.T, tr *testRouter, clients, each int) map[string]bool {
	t.Helper()
	var mu sync.Mutex
	opened := map[string]bool{}
	tr.s.r.OnWorkerEvent(func(ev router.WorkerEvent) {
		if ev.To == router.WorkerBreakerOpen {
			mu.Lock()
			opened[ev.URL] = true
			mu.Unlock()
		}
		tr.s.workerEvent(ev)
	})
	var answered atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				status, _, body := tr.post(t, "/generate", fmt.Sprintf(`{"text":"client %d request %d"}`, c, i), nil)
				if status != http.StatusOK {
					t.Errorf("status %d: %s", status, body)
				}
				answered.Add(1)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(clients*each), answered.Load())
	tr.requireLoadsZero(t)
	mu.Lock()
	defer mu.Unlock()
	return maps.Clone(opened)
}

// A decode worker that hangs under load: every prefill leg paired with it ends in a
// bootstrap timeout, which is charged to the decode worker — its breaker opens, the prefill
// breakers never do — and every request is answered 200 by a retry on the other decode worker.
func TestPDHangingDecodeChargesDecodeNotPrefill(t *testing.T) {
	t.Parallel()
	rv := newRendezvous()
	prefills := []*testWorker{newWorker(t, rv.wait(sglangPrefillBootstrapTimeout)), newWorker(t, rv.wait(sglangPrefillBootstrapTimeout))}
	hung := newWorker(t, rv.register(true))
	good := newWorker(t, rv.register(false))
	cfg := pdConfig(prefills, []*testWorker{hung, good}, nil)
	cfg.CBFailureThreshold = 3 // low, so a wrongly charged prefill breaker would open at once
	cfg.Policy = "random"
	tr := startRouter(t, cfg)

	opened := loadAndWatchBreakers(t, tr, 16, 12)
	assert.True(t, opened[hung.URL()], "the hanging decode worker's breaker opened: its bootstrap timeouts were charged to it")
	for _, p := range prefills {
		assert.False(t, opened[p.URL()], "prefill %s's breaker opened", p.URL())
	}
	for _, w := range tr.s.r.Workers() {
		if w.Role == router.Prefill {
			assert.Equal(t, router.BreakerClosed, w.Breaker, w.URL)
			assert.Equal(t, router.WorkerHealthy, w.State, w.URL)
		}
	}
	assert.False(t, opened[good.URL()], "the good decode worker's breaker stayed closed")
}

// The mirror case: a prefill worker that hangs (never sends the KV) under load. The decode
// legs' KV-wait timeouts are charged to it, not to the decode workers.
func TestPDHangingPrefillChargesPrefillNotDecode(t *testing.T) {
	t.Parallel()
	rv := newRendezvous()
	hung := newWorker(t, rv.register(true))
	good := newWorker(t, rv.register(false))
	decodes := []*testWorker{newWorker(t, rv.wait(sglangDecodeWaitTimeout)), newWorker(t, rv.wait(sglangDecodeWaitTimeout))}
	cfg := pdConfig([]*testWorker{hung, good}, decodes, nil)
	cfg.CBFailureThreshold = 3
	cfg.Policy = "random"
	tr := startRouter(t, cfg)

	opened := loadAndWatchBreakers(t, tr, 16, 12)
	assert.True(t, opened[hung.URL()], "the hanging prefill worker's breaker opened")
	for _, d := range decodes {
		assert.False(t, opened[d.URL()], "decode %s's breaker opened", d.URL())
	}
	assert.False(t, opened[good.URL()])
}

// A prefill failure that says nothing of the decode side stays the prefill's, and the client
// hears which worker failed; a bootstrap timeout caused by a hanging decode names the decode
// worker and keeps prefill's explanation.
func TestPDBlameInTheAnswer(t *testing.T) {
	t.Parallel()
	rv := newRendezvous()
	pw := newWorker(t, rv.wait(sglangPrefillBootstrapTimeout))
	dw := newWorker(t, rv.register(true))
	tr := startRouter(t, noRetries(pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)))
	status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	require.Equal(t, http.StatusBadGateway, status, body)
	assert.Contains(t, body, "decode worker "+dw.URL()+": never completed the bootstrap with its prefill: prefill worker "+pw.URL()+" answered 500")
	assert.Contains(t, body, "KVPoll.Bootstrapping")
	m := tr.metricsText()
	assert.Contains(t, m, `pdrouter_errors_total{kind="prefill_status"} 1`, "the failing answer was the prefill's 500")
	assert.NotContains(t, m, `kind="decode_transport"`, "charged to the decode, but no decode transport failed")
	tr.requireLoadsZero(t)
	for _, w := range tr.s.r.Workers() {
		assert.Equal(t, router.WorkerHealthy, w.State, "one failure opens nothing: %s", w.URL)
	}
}

// A decode stream whose first event is an error (fakeworker and SGLang answer a room that failed
// before its first token with 200 and an error event) fails the attempt before anything reaches
// the client: it is retried, and a KV wait on a silent prefill is charged to the prefill.
func TestPDStreamFirstEventErrorIsRetriedAndBlamed(t *testing.T) {
	t.Parallel()
	// Decode's error event waits until the prefill leg has reached its worker (as a real
	// decode's KV wait starts after it): otherwise decode may fail before the prefill leg is
	// sent, and there is no prefill request to see cancelled.
	arrived := make(chan struct{})
	var once sync.Once
	hung := newWorker(t, func(w http.ResponseWriter, r *http.Request, c call) {
		once.Do(func() { close(arrived) })
		hangReply(nil)(w, r, c)
	})
	dw := newWorker(t, sseReply([]string{`data: {"error":{"message":"fakeworker: decode room 1 failed: Request 1 timed out after 3.0s in KVPoll.WaitingForInput","code":500}}`},
		map[int]<-chan struct{}{0: arrived}))
	tr := startRouter(t, noRetries(pdConfig([]*testWorker{hung}, []*testWorker{dw}, nil)))
	status, hdr, body := tr.post(t, "/generate", `{"text":"x","stream":true}`, nil)
	require.Equal(t, http.StatusBadGateway, status, body)
	assert.Contains(t, hdr.Get("Content-Type"), "application/json", "answered as an error, not a committed stream")
	assert.Contains(t, body, "prefill worker "+hung.URL()+": never delivered the KV: decode worker "+dw.URL()+" answered 500")
	waitFor(t, func() bool { return hung.cancelledCount() == 1 })
	tr.requireLoadsZero(t)
}
