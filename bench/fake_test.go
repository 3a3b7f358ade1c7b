package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
)

// fakeSSE is an in-test SGLang/OpenAI-compatible streaming server with exact timings: the
// first text event at TTFT after the request arrived, then one event every ITL, each carrying
// one token " wN", then a usage event and [DONE]. Its fields are set before the server starts.
type fakeSSE struct {
	TTFT, ITL  time.Duration
	Status     int    // non-zero: answer every request with this status and an OpenAI error body
	CutAfter   int    // > 0: close the connection after this many text events
	NoDone     bool   // end the stream cleanly without [DONE]
	Hang       bool   // never answer
	NoCached   bool   // omit cached_tokens
	Model      string // non-empty: GET /v1/models lists this model
	hits       atomic.Int64
	flushes    atomic.Int64
	mu         sync.Mutex // protects bodies, firsts and tpots
	bodies     [][]byte
	firsts     []time.Duration // per streamed request: arrival → its first text event flushed
	tpots      []time.Duration // per streamed request of 2+ tokens: (last flush − first flush)/(n−1)
	hangCancel chan struct{}
}

func startFake(t testing.TB, f *fakeSSE) *httptest.Server {
	f.hangCancel = make(chan struct{})
	srv := httptest.NewServer(f)
	t.Cleanup(func() {
		close(f.hangCancel)
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

func (f *fakeSSE) requests() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.bodies...)
}

func (f *fakeSSE) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	arrived := time.Now()
	if req.URL.Path == "/flush_cache" {
		f.flushes.Add(1)
		return
	}
	if req.Method == http.MethodGet { // the run's description of its target (describe)
		if req.URL.Path == "/get_server_info" {
			fmt.Fprint(w, `{"dp_size":2,"model_path":"fake"}`)
			return
		}
		if req.URL.Path == "/v1/models" && f.Model != "" {
			fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":"sglang"}]}`, f.Model)
			return
		}
		http.NotFound(w, req)
		return
	}
	body, _ := io.ReadAll(req.Body)
	f.hits.Add(1)
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	if f.Hang {
		select {
		case <-req.Context().Done():
		case <-f.hangCancel:
		}
		return
	}
	if f.Status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.Status)
		fmt.Fprintf(w, `{"error":{"message":"fake failure %d","type":"server_error","code":%d}}`, f.Status, f.Status)
		return
	}
	var b struct {
		MaxTokens      int `json:"max_tokens"`
		SamplingParams struct {
			MaxNewTokens int `json:"max_new_tokens"`
		} `json:"sampling_params"`
	}
	_ = json.Unmarshal(body, &b)
	n := max(b.MaxTokens, b.SamplingParams.MaxNewTokens, 1)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fl.Flush()
	generate := req.URL.Path == "/generate"
	completions := req.URL.Path == "/v1/completions"
	var text strings.Builder
	var firstFlush time.Time
	for i := range n {
		time.Sleep(time.Until(arrived.Add(f.TTFT + time.Duration(i)*f.ITL)))
		tok := fmt.Sprintf(" w%d", i)
		text.WriteString(tok)
		switch {
		case generate:
			fmt.Fprintf(w, "data: {\"text\":%q,\"meta_info\":{\"prompt_tokens\":10,\"completion_tokens\":%d,\"cached_tokens\":4}}\n\n", text.String(), i+1)
		case completions:
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":%q}]}\n\n", tok)
		default:
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", tok)
		}
		fl.Flush()
		if i == 0 {
			firstFlush = time.Now()
			f.mu.Lock()
			f.firsts = append(f.firsts, firstFlush.Sub(arrived))
			f.mu.Unlock()
		} else if i == n-1 {
			f.mu.Lock()
			f.tpots = append(f.tpots, time.Since(firstFlush)/time.Duration(n-1))
			f.mu.Unlock()
		}
		if f.CutAfter > 0 && i+1 == f.CutAfter {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
	}
	if !generate {
		cached := `,"prompt_tokens_details":{"cached_tokens":4}`
		if f.NoCached {
			cached = ""
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":%d%s}}\n\n", n, cached)
	}
	if !f.NoDone {
		io.WriteString(w, "data: [DONE]\n\n")
	}
	fl.Flush()
}

// runOK runs cfg and requires success.
func runOK(t testing.TB, cfg Config) *reports.Results {
	t.Helper()
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	return res
}

func inf() float64 { return math.Inf(1) }
