package tree

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bytes estimates the Go heap a tree holds within 30 %, on prompt-shaped text (8 shared system
// prompts, distinct questions, 4 tenants) and on short distinct strings (node-heavy). Not
// parallel: it reads the process's heap.
func TestBytesEstimatesTheHeap(t *testing.T) {
	for _, tc := range []struct {
		name string
		text func(i int) string
	}{
		{"prompts", func(i int) string {
			return fmt.Sprintf("%s question %d: %s", strings.Repeat(fmt.Sprintf("system prompt %d. ", i%8), 40), i, strings.Repeat("words ", 30))
		}},
		{"short keys", func(i int) string { return fmt.Sprintf("k%07d", i*7919%1000003) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			heap := func() uint64 {
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				return m.HeapAlloc
			}
			texts := make([]string, 20000)
			for i := range texts {
				texts[i] = tc.text(i)
			}
			before := heap()
			tr := New()
			for i, s := range texts {
				tr.Insert(s, fmt.Sprintf("w%d", i%4))
			}
			held := float64(heap() - before)
			require.NoError(t, tr.Check())
			est := float64(tr.Bytes())
			t.Logf("%d nodes, %d runes: heap %.0f B, estimate %.0f B (%.2f)", tr.Nodes(), tr.TotalChars(), held, est, est/held)
			assert.InEpsilon(t, held, est, 0.3)
			runtime.KeepAlive(texts)
			runtime.KeepAlive(tr)
		})
	}
}
