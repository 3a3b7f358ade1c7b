package sim

import (
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"
)

func TestZZHeap(t *testing.T) {
	if os.Getenv("ZZHEAP") == "" {
		t.Skip()
	}
	cfg := scaleConfig(100000)
	done := false
	cfg.Progress = func(level string, n int, v time.Duration) {
		if n >= 60000 && !done {
			done = true
			runtime.GC()
			f, _ := os.Create("/tmp/heap.prof")
			pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	_, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
}
