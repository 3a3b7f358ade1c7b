package fakeworker

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/workloads"
)

// BenchmarkRender measures writing one streamed reply (all token events and the end).
func BenchmarkRender(b *testing.B) {
	for _, route := range wire.Routes {
		for _, n := range []int{16, 256} {
			b.Run("route="+string(apiOf(route))+"/tokens="+strconv.Itoa(n), func(b *testing.B) {
				b.ReportAllocs()
				ids := workloads.Tokenize("a prompt of a few words for the benchmark")
				rd := render{route: route, id: appendString(nil, "rid"), model: appendString(nil, "m"), created: 1,
					text: workloads.ReplyText(ids, n), prompt: ids, includeUsage: true}
				rd.ends = tokenEnds(rd.text, nil)
				u := usage{prompt: len(ids), completion: n}
				var buf []byte
				for b.Loop() {
					buf = rd.appendTokenEvents(buf[:0], 0, n, len(ids), nil)
					buf = rd.appendStreamEnd(buf, n, u, finishLength, "", false)
				}
				b.SetBytes(int64(len(buf)))
			})
		}
	}
}

// BenchmarkStreamLoopback is one streaming chat request of 16 tokens at a time against an
// instant-profile worker over loopback, client in the same process (the separate-process
// throughput figure comes from wrk, see testdata/wrk/stream.lua).
func BenchmarkStreamLoopback(b *testing.B) {
	for _, mode := range []string{"regular"} {
		b.Run("mode="+mode+"/tokens=16", func(b *testing.B) {
			b.ReportAllocs()
			w := startWorker(b, Config{})
			body := []byte(`{"model":"m","messages":[{"role":"user","content":"benchmark me"}],"max_tokens":16,"stream":true}`)
			url := w.URL() + "/v1/chat/completions"
			for b.Loop() {
				resp, err := testClient.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatal(resp.Status)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}
