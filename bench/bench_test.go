package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/workloads"
)

// BenchmarkEvent measures the per-event cost of the SSE timing path: one content event of each
// API parsed and timestamped.
func BenchmarkEvent(b *testing.B) {
	for _, tc := range []struct {
		api  workloads.API
		data string
	}{
		{workloads.APIChat, `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" hello"},"finish_reason":null}]}`},
		{workloads.APICompletions, `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" hello","finish_reason":null}]}`},
		{workloads.APIGenerate, `{"text":" a b c d e f g hello","meta_info":{"id":"x","prompt_tokens":100,"completion_tokens":8,"cached_tokens":0}}`},
	} {
		b.Run(fmt.Sprintf("api=%s", tc.api), func(b *testing.B) {
			b.ReportAllocs()
			data := []byte(tc.data)
			at := time.Now()
			r := &request{turn: workloads.Turn{API: tc.api}}
			n := 0
			for b.Loop() {
				if n%256 == 0 { // keep the reply and ITL list bounded
					r = &request{turn: workloads.Turn{API: tc.api}}
				}
				n++
				at = at.Add(time.Millisecond)
				r.event(at, data)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/event")
		})
	}
}
