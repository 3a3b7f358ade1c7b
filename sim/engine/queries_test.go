package engine

import (
	"fmt"
	"time"
)

// What only the tests call: the roofline for a TP group, the parts of a step's or a
// transfer's time, a room's state, and the failure hooks no driver uses (a restart after Kill,
// never-signalled KV switched at run time; Config.NeverSignalKV is the driver's).

// roofline is Build for one tensor-parallel group of tp GPUs (--tp-size tp, one DP rank).
func roofline(name string, m ModelCard, g GPU, tp int) (Profile, error) {
	if tp < 1 {
		return Profile{}, fmt.Errorf("engine: roofline %s: tensor-parallel size %d < 1 (--tp-size)", name, tp)
	}
	return Build(name, m, g, Parallelism{TP: tp})
}

// memoryTime and computeTime are the two bounds of a decode step's roofline part (M and C):
// DecodeTime = B0 + B1·batch + B2·context + max(memoryTime, computeTime).
func (p Profile) memoryTime(batch, context int) time.Duration {
	return seconds(p.M0 + p.expertRead(p.ExpertM0, batch) + p.M2*float64(context))
}

// computeTime: see memoryTime.
func (p Profile) computeTime(batch, context int) time.Duration {
	return seconds(p.C1*float64(batch) + p.C2*float64(context))
}

// transferTime is the duration of moving the KV of tokens tokens over a link of bandwidth
// bytes/s (≤ 0: instantaneous apart from T0 and PDOverhead), without speedup.
func (p Profile) transferTime(tokens int, bandwidth float64) time.Duration {
	s := p.T0 + p.PDOverhead
	if bandwidth > 0 {
		s += float64(tokens) * p.KVBytesPerToken / bandwidth
	}
	return seconds(s)
}

// restart brings a killed server back, empty. No-op on a live server. With KVEvents, each
// rank publishes its AllBlocksCleared at once (a new SGLang process's first idle publish).
func (s *Server) restart(now time.Time) {
	now = s.sync(now)
	if !s.dead {
		return
	}
	s.dead = false
	for _, rk := range s.ranks {
		s.publishKV(rk, now)
	}
}

// setNeverSignalKV turns the "transfer never completes" failure hook on or off (prefill): rooms
// whose prefill completes while it is on stay Transferring, and the decode side times out; the
// prefill side fails them after BootstrapTimeout.
func (s *Server) setNeverSignalKV(on bool) { s.neverKV = on }

// roomState reports a live room's state and queue; ok is false for unknown or ended rooms.
func (s *Server) roomState(room uint64) (state State, queue Queue, ok bool) {
	r := s.rooms[room]
	if r == nil {
		return 0, 0, false
	}
	return r.state, r.queue, true
}
