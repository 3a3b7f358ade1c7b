package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkUpstream compares the hand-written HTTP/1.1 transport with net/http's on the
// router's hot path: one POST with a JSON body and a streamed SSE reply of 16 events, read to
// the end, on a kept-alive loopback connection; serially and from parallel clients. Compare
// the transports with benchstat -col /transport.
func BenchmarkUpstream(b *testing.B) {
	var events []byte
	for range 16 {
		events = append(events, "data: {\"text\":\"token\",\"meta_info\":{\"completion_tokens\":1}}\n\n"...)
	}
	events = append(events, "data: [DONE]\n\n"...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(events)
	}))
	defer srv.Close()
	body := []byte(`{"text":"a prompt of a few words","stream":true,"sampling_params":{"max_new_tokens":16}}`)
	url := srv.URL + "/generate"
	buf := make([]byte, 32<<10)
	transports := []struct {
		name string
		d    doer
	}{
		{"h1", h1Doer{newH1Transport(3 * time.Second)}},
		{"net_http", clientDoer{&http.Client{Transport: newTransport(3 * time.Second)}}},
	}
	for _, tc := range transports {
		one := func(buf []byte) {
			resp, _, err := tc.d.roundTrip(context.Background(), &upstreamRequest{method: http.MethodPost, worker: url, body: body})
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					break
				}
			}
			resp.Body.Close()
		}
		b.Run("transport="+tc.name+"/clients=1", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				one(buf)
			}
		})
		b.Run("transport="+tc.name+"/clients=parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 32<<10)
				for pb.Next() {
					one(buf)
				}
			})
		})
	}
}
