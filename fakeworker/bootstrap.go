package fakeworker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// The fake KV bootstrap transport, over real HTTP. A prefill worker serves it on its bootstrap
// port:
//
//	POST /bootstrap/register {"room": N, "decode": "http://decode:port"}
//
// A decode worker sends it once its engine has preallocated the room's KV (KindPreallocated).
// The prefill worker hands the engine a Handshake for the room and holds the request open (a
// long poll) until the engine reports the room's TransferDone — 200 {"room", "cached_tokens",
// "dp_rank"} — or its failure — an OpenAI-style error with the engine's reason. The decode
// worker then calls KVArrived (or Abort) on its own engine. Room states and timeouts live in the
// engines alone; this transport only carries the two messages. When the decode side gives up
// (its engine's bootstrap timeout, its client going away) it cancels the long poll, and the
// prefill worker aborts the room.
//
//	GET /health → 200: the bootstrap server is up.

// registerPath is the bootstrap server's registration route.
const registerPath = "/bootstrap/register"

type registration struct {
	Room   uint64 `json:"room"`
	Decode string `json:"decode"`
	// DecodeCached is the prompt tokens the decode worker's radix cache already holds
	// (--disaggregation-decode-enable-radix-cache): the prefill worker transfers only the rest.
	DecodeCached int `json:"decode_cached_tokens,omitempty"`
}

type registered struct {
	Room         uint64 `json:"room"`
	CachedTokens int    `json:"cached_tokens"`
	Rank         int    `json:"dp_rank"`
}

func (w *Worker) bootstrapRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+registerPath, w.serveRegister)
	mux.HandleFunc("GET /health", func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(http.StatusOK) })
	return mux
}

// serveRegister is the prefill side of a room registration.
func (w *Worker) serveRegister(rw http.ResponseWriter, r *http.Request) {
	raw, err := readBody(rw, r, 1<<16)
	var reg registration
	if err == nil {
		err = json.Unmarshal(raw, &reg)
	}
	if err != nil {
		writeError(rw, http.StatusBadRequest, "fakeworker: bootstrap registration body: "+err.Error())
		return
	}
	s := newSub()
	room := reg.Room
	decodeCached := reg.DecodeCached
	if !w.loop.do(r.Context(), func(l *loop, now time.Time) { l.watch(s, room, decodeCached, now) }) {
		writeError(rw, http.StatusServiceUnavailable, "fakeworker: prefill worker is stopping")
		return
	}
	defer w.loop.do(context.Background(), func(l *loop, now time.Time) { l.unwatch(s, room, reg.Decode, now) })
	w.log.Debug("bootstrap: room registered", "room", room, "decode", reg.Decode)
	for {
		select {
		case <-s.notify:
		case <-r.Context().Done():
			return
		case <-w.loop.stopped:
			s.fail(http.StatusServiceUnavailable, "fakeworker: prefill worker stopped")
		}
		st := s.snapshot()
		switch {
		case st.transferred:
			body, _ := json.Marshal(registered{Room: room, CachedTokens: st.cached, Rank: st.rank})
			writeJSON(rw, http.StatusOK, body)
			return
		case st.done:
			status := st.status
			if status == 0 {
				status = http.StatusInternalServerError
			}
			writeError(rw, status, fmt.Sprintf("fakeworker: prefill %s room %d: %s", w.URL(), room, st.failed))
			return
		}
	}
}

// register is the decode side: it registers room at the prefill bootstrap server addr and
// forwards the outcome to the decode engine as KVArrived or Abort. Transport errors (the prefill
// worker still starting, a refused connection) are retried with backoff until ctx ends; the
// decode engine's bootstrap timeout bounds the whole wait.
func (w *Worker) register(ctx context.Context, room uint64, addr string, s *sub, decodeCached int) {
	url := "http://" + addr + registerPath
	body, _ := json.Marshal(registration{Room: room, Decode: w.URL(), DecodeCached: decodeCached})
	backoff := 10 * time.Millisecond
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			w.abortRoom(room, s, "bad bootstrap address "+addr+": "+err.Error())
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := w.client.Do(req)
		if ctx.Err() != nil {
			if resp != nil {
				resp.Body.Close()
			}
			return
		}
		if err != nil {
			w.log.Debug("bootstrap: registration failed, retrying", "room", room, "addr", addr, "err", err)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, 500*time.Millisecond)
			continue
		}
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if ctx.Err() != nil {
			return
		}
		var ok registered
		if err == nil && resp.StatusCode == http.StatusOK {
			err = json.Unmarshal(raw, &ok)
		}
		if err != nil || resp.StatusCode != http.StatusOK {
			msg := string(bytes.TrimSpace(raw))
			if err != nil {
				msg = err.Error()
			}
			w.abortRoom(room, s, "prefill bootstrap server "+addr+" answered "+strconv.Itoa(resp.StatusCode)+": "+msg)
			return
		}
		cached := ok.CachedTokens
		w.loop.do(ctx, func(l *loop, now time.Time) {
			if rs, live := l.subs[room]; live && rs.leg == s {
				l.srv.KVArrived(now, room, cached)
			}
		})
		return
	}
}

// abortRoom aborts room on this worker's engine if s still owns it.
func (w *Worker) abortRoom(room uint64, s *sub, why string) {
	w.loop.do(context.Background(), func(l *loop, now time.Time) {
		if rs, live := l.subs[room]; live && rs.leg == s {
			l.srv.Abort(now, room, why)
		}
	})
}
