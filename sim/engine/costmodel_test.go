package engine

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The cost model times work with the server's own step functions: a lone request's time to
// its first token on an idle unified server is PrefillTime (its host path and chunked prefill
// steps), and its next tokens come one DecodeStepTime apart.
func TestCostModelMatchesTheServer(t *testing.T) {
	t.Parallel()
	p, err := LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	cfg := Config{Role: RoleUnified, Profile: p, ChunkedPrefillSize: 2048, DisableOverlap: true}
	m, err := NewCostModel(cfg)
	require.NoError(t, err)
	s, err := New(cfg)
	require.NoError(t, err)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prompt := make([]uint32, 5000) // three chunks
	for i := range prompt {
		prompt[i] = uint32(i + 1)
	}
	s.Submit(t0, Req{Room: 1, Rank: -1, Prompt: prompt, MaxNew: 3})
	var tokens []time.Time
	for range 1000 {
		at, ok := s.NextEvent()
		if !ok {
			break
		}
		for _, o := range s.Advance(at) {
			if o.Kind == KindToken {
				tokens = append(tokens, o.At)
			}
		}
	}
	require.Len(t, tokens, 3)
	assert.Equal(t, m.PrefillTime(5000, 0), tokens[0].Sub(t0))
	step := tokens[2].Sub(tokens[1])
	assert.InDelta(t, float64(m.DecodeStepTime(1, 5002)), float64(step), float64(step)/50, "one decode step of one request")
	assert.Equal(t, time.Duration(0), m.QueueTime(0, 0))
	full := m.PrefillTime(2048, 0) - m.PrefillTime(0, 0)
	assert.InDelta(t, float64(full+full/2), float64(m.QueueTime(2048, 0)), float64(time.Microsecond), "a queued full chunk, after half the one in flight")
	assert.Equal(t, s.Config().MaxTotalTokens, m.MaxTotalTokens())
}

// Prompts arriving at a busy rank wait for the step in flight besides the queue's chunks
// (under the overlap scheduler for the batch formed at its start too): under Poisson arrivals
// at 30, 60 and 85 % of a llama3-8b-h100 rank's prefill capacity, the requests that found a
// queue (num_waiting_uncached_tokens > 0 at arrival) are predicted with a smaller mean error by
// QueueTime than by the queue's chunks alone, within a quarter of their mean TTFT.
func TestCostModelQueueTimeUnderLoad(t *testing.T) {
	t.Parallel()
	p, err := LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	cfg := Config{Role: RoleUnified, Profile: p}
	m, err := NewCostModel(cfg)
	require.NoError(t, err)
	chunk := m.Config().ChunkedPrefillSize
	chunks := func(q int) time.Duration { // the queue as full chunks, no step in flight
		return time.Duration(float64(m.prefillStep(chunk, 0)) * float64(q) / float64(chunk))
	}
	for _, load := range []float64{0.3, 0.6, 0.85} {
		s, err := New(cfg)
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(1, 2))
		gap := time.Duration(float64(m.PrefillTime(2500, 0)-m.PrefillTime(0, 0)) / load) // prompts of 500–4,500 tokens
		type sent struct {
			at       time.Time
			with, no time.Duration // predicted TTFT with QueueTime, with the chunks alone
		}
		live := map[uint64]sent{}
		var errWith, errNo, obs float64
		n, next, arrive := 0, uint32(1), epoch
		for room := uint64(1); room <= 3000; {
			at, ok := s.NextEvent()
			if !ok || arrive.Before(at) {
				at = arrive
			}
			for _, o := range s.Advance(at) {
				if r, ok := live[o.Room]; ok && o.Kind == KindToken {
					d := o.At.Sub(r.at)
					errWith, errNo, obs = errWith+float64(r.with-d), errNo+float64(r.no-d), obs+float64(d)
					n++
					delete(live, o.Room)
				}
			}
			if !at.Equal(arrive) {
				continue
			}
			prompt := make([]uint32, 500+rng.IntN(4000))
			for i := range prompt {
				prompt[i], next = next, next+1
			}
			if q := s.Loads(at)[0].WaitingUncachedTokens; q > 0 {
				own := m.PrefillTime(len(prompt), 0)
				live[room] = sent{at, m.QueueTime(q, 0) + own, chunks(q) + own}
			}
			s.Submit(at, Req{Room: room, Rank: -1, Prompt: prompt, MaxNew: 1})
			room++
			arrive = at.Add(time.Duration(rng.ExpFloat64() * float64(gap)))
		}
		require.Greater(t, n, 100, "load %.2f: arrivals that found a queue", load)
		with, no, mean := errWith/float64(n), errNo/float64(n), obs/float64(n)
		t.Logf("load %.2f: %d queued arrivals, TTFT mean %.0f ms, mean error %.0f ms (chunks alone %.0f ms)", load, n, mean/1e6, with/1e6, no/1e6)
		assert.Less(t, math.Abs(with), math.Abs(no), "load %.2f", load)
		assert.Less(t, math.Abs(with), mean/4, "load %.2f", load)
	}
}

// A prompt reaching a rank that decodes a batch waits for the rest of the decode step in flight
// and, under the overlap scheduler, the step formed at its start (1.5 steps on average; half a
// step without the overlap scheduler): probes of 500 fresh tokens, one at a time at random
// phases, on a llama3-8b-h100 rank decoding 1, 8 and 32 long requests, are predicted by
// PrefillTime + QueueTime(0, the running batch's step) within a tenth of the step on average,
// where PrefillTime alone misses by more than a step.
func TestCostModelQueueTimeDecoding(t *testing.T) {
	t.Parallel()
	p, err := LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	for _, overlap := range []bool{true, false} {
		cfg := Config{Role: RoleUnified, Profile: p, DisableOverlap: !overlap}
		m, err := NewCostModel(cfg)
		require.NoError(t, err)
		for _, batch := range []int{1, 8, 32} {
			s, err := New(cfg)
			require.NoError(t, err)
			next := uint32(1)
			prompt := func(n int) []uint32 {
				q := make([]uint32, n)
				for i := range q {
					q[i], next = next, next+1
				}
				return q
			}
			now := epoch
			for room := range uint64(batch) {
				s.Submit(now, Req{Room: room + 1, Rank: -1, Prompt: prompt(100), MaxNew: 100000})
			}
			rng := rand.New(rand.NewPCG(3, uint64(batch)))
			// advance runs the server up to until and returns the first token of room, if seen.
			advance := func(until time.Time, room uint64) (time.Time, bool) {
				for range 100000 {
					at, ok := s.NextEvent()
					if !ok || at.After(until) {
						return time.Time{}, false
					}
					for _, o := range s.Advance(at) {
						if o.Room == room && o.Kind == KindToken {
							return o.At, true
						}
					}
				}
				t.Fatalf("batch %d: the server never reached %s", batch, until)
				return time.Time{}, false
			}
			advance(now.Add(time.Second), 0) // the batch is decoding
			now = now.Add(time.Second)
			var errWith, errWithout, steps float64
			const probes = 200
			for i := range uint64(probes) {
				now = now.Add(time.Duration(rng.Float64() * float64(50*time.Millisecond)))
				advance(now, 0)
				l := s.Loads(now)[0]
				require.Equal(t, batch, l.RunningReqs)
				step := m.DecodeStepTime(l.RunningReqs, l.UsedTokens)
				room := uint64(batch) + 1 + i
				s.Submit(now, Req{Room: room, Rank: -1, Prompt: prompt(500), MaxNew: 1})
				first, ok := advance(now.Add(time.Second), room)
				require.True(t, ok, "batch %d: probe %d got its first token", batch, i)
				obs := first.Sub(now)
				own := m.PrefillTime(500, 0)
				errWith += float64(own + m.QueueTime(0, step) - obs)
				errWithout += float64(own - obs)
				steps += float64(step)
				now = first
			}
			with, without, step := errWith/probes, errWithout/probes, steps/probes
			t.Logf("overlap %v, batch %d: step %.1f ms, mean error %.2f ms (PrefillTime alone %.2f ms)", overlap, batch, step/1e6, with/1e6, without/1e6)
			assert.Less(t, math.Abs(with), step/10, "overlap %v, batch %d", overlap, batch)
			if overlap {
				assert.Less(t, without, -step, "overlap %v, batch %d", overlap, batch)
			}
		}
	}
}
