package engine_test

import (
	"fmt"
	"time"

	"github.com/pdrouter/pdrouter/sim/engine"
)

// A PD pair driven in virtual time with zero network latency: the driver forwards Preallocated
// (decode) as Handshake to the prefill server and TransferDone (prefill) as KVArrived to the
// decode server, and always advances the server whose next event comes first.
func Example_pdPair() {
	prof := engine.ConstantProfile(100*time.Millisecond, 20*time.Millisecond)
	pre, _ := engine.New(engine.Config{Role: engine.RolePrefill, Profile: prof})
	dec, _ := engine.New(engine.Config{Role: engine.RoleDecode, Profile: prof})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	req := engine.Req{Room: 42, Rank: -1, Prompt: []uint32{1, 2, 3, 4}, MaxNew: 3}
	pre.Submit(t0, req)
	dec.Submit(t0, req)
	for {
		var next time.Time
		var srv *engine.Server
		for _, s := range []*engine.Server{pre, dec} {
			if t, ok := s.NextEvent(); ok && (srv == nil || t.Before(next)) {
				next, srv = t, s
			}
		}
		if srv == nil {
			break
		}
		for _, o := range srv.Advance(next) {
			fmt.Printf("%-7s +%-5s %s\n", srv.Config().Role, o.At.Sub(t0), o.Kind)
			switch o.Kind {
			case engine.KindPreallocated:
				pre.Handshake(o.At, o.Room)
			case engine.KindTransferDone:
				dec.KVArrived(o.At, o.Room, o.CachedTokens)
			}
		}
	}
	// Output:
	// decode  +0s    preallocated
	// prefill +100ms transfer_done
	// prefill +100ms finished
	// decode  +100ms token
	// decode  +120ms token
	// decode  +140ms token
	// decode  +140ms finished
}
