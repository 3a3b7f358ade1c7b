package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func kinds(outs []Output) []Kind {
	k := make([]Kind, len(outs))
	for i, o := range outs {
		k[i] = o.Kind
	}
	return k
}

func TestUnifiedRequestLifecycle(t *testing.T) {
	t.Parallel()
	p := testProfile()
	s := newServer(t, Config{Role: RoleUnified, Profile: p})
	c := &cluster{t: t, single: s, check: true}
	s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 1000), MaxNew: 3})
	st, q, ok := s.roomState(1)
	require.True(t, ok)
	assert.Equal(t, StateWaitingForInput, st)
	assert.Equal(t, QueueWaiting, q)
	c.runUntil(at(0))
	_, q, _ = s.roomState(1)
	assert.Equal(t, QueueRunning, q, "prefill step started at once")

	c.runAll()
	outs := c.of(1, 0)
	require.Equal(t, []Kind{KindToken, KindToken, KindToken, KindFinished}, kinds(outs))
	prefill := p.PrefillTime(1000, 1000*500)
	assert.Equal(t, at(prefill), outs[0].At, "first token at the end of the prefill step")
	assert.Equal(t, at(prefill+p.DecodeTime(1, 1001)), outs[1].At)
	assert.Equal(t, at(prefill+p.DecodeTime(1, 1001)+p.DecodeTime(1, 1002)), outs[2].At)
	for i := range 3 {
		assert.Equal(t, i, outs[i].Index)
	}
	assert.Equal(t, Usage{PromptTokens: 1000, CompletionTokens: 3, CachedTokens: 0}, outs[3].Usage)
	_, _, ok = s.roomState(1)
	assert.False(t, ok, "finished rooms are forgotten")

	// The same prompt again: all but the last token hit the cache.
	s.Submit(c.now, Req{Room: 2, Rank: -1, Prompt: prompt(0, 1000), MaxNew: 1})
	c.runAll()
	fin := c.of(2, KindFinished)
	require.Len(t, fin, 1)
	assert.Equal(t, 999, fin[0].Usage.CachedTokens)
	assert.InDelta(t, 999.0/2000, s.Loads(time.Time{})[0].CacheHitRate, 1e-9)
}

func TestChunkedPrefill(t *testing.T) {
	t.Parallel()
	p := testProfile()
	s := newServer(t, Config{Role: RoleUnified, Profile: p, ChunkedPrefillSize: 8192})
	c := &cluster{t: t, single: s, check: true}
	s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 20000), MaxNew: 1})
	c.runAll()
	fin := c.of(1, KindFinished)
	require.Len(t, fin, 1)
	// Three chunks: 8192, 8192, 3616; each chunk's attention term uses its mean position.
	want := p.PrefillTime(8192, 8192*4096) + p.PrefillTime(8192, 8192*(8192+4096)) + p.PrefillTime(3616, 3616*(16384+1808))
	assert.Equal(t, at(want), fin[0].At)
	// A later chunk of the same size costs more: attention grows with context.
	assert.Greater(t, p.PrefillTime(8192, 8192*(8192+4096)), p.PrefillTime(8192, 8192*4096))
}

func TestPrefillQueues(t *testing.T) {
	t.Parallel()
	p := testProfile()
	s := newServer(t, Config{Role: RolePrefill, Profile: p, LinkBandwidth: 1e9})
	s.Submit(at(0), Req{Room: 7, Rank: -1, Prompt: prompt(0, 1000), MaxNew: 10})
	st, q, _ := s.roomState(7)
	assert.Equal(t, StateBootstrapping, st)
	assert.Equal(t, QueueBootstrap, q)
	assert.Empty(t, s.Advance(at(time.Second)), "no compute before Handshake")
	_, q, _ = s.roomState(7)
	assert.Equal(t, QueueBootstrap, q)

	s.Handshake(at(time.Second), 7)
	st, q, _ = s.roomState(7)
	assert.Equal(t, StateWaitingForInput, st)
	assert.Equal(t, QueueWaiting, q)
	s.Advance(at(time.Second))
	_, q, _ = s.roomState(7)
	assert.Equal(t, QueueRunning, q)

	prefillEnd := at(time.Second + p.PrefillTime(1000, 1000*500))
	next, ok := s.NextEvent()
	require.True(t, ok)
	assert.Equal(t, prefillEnd, next)
	assert.Empty(t, s.Advance(next))
	st, q, _ = s.roomState(7)
	assert.Equal(t, StateTransferring, st)
	assert.Equal(t, QueueInflight, q)
	assert.Equal(t, 1, s.Loads(time.Time{})[0].Inflight)

	transfer := p.transferTime(1000, 1e9) // 1 ms + 1000·1e5 B / 1 GB/s = 101 ms
	assert.Equal(t, 101*time.Millisecond, transfer)
	next, _ = s.NextEvent() // the last byte leaves; T0 later the transfer is done
	assert.Equal(t, prefillEnd.Add(transfer-time.Millisecond), next)
	assert.Empty(t, s.Advance(next))
	outs := s.Advance(prefillEnd.Add(transfer))
	require.Equal(t, []Kind{KindTransferDone, KindFinished}, kinds(outs))
	assert.Equal(t, prefillEnd.Add(transfer), outs[0].At)
	assert.Equal(t, prefillEnd, outs[0].FirstToken)
	assert.Equal(t, Usage{PromptTokens: 1000, CompletionTokens: 1}, outs[1].Usage)
	assert.Equal(t, 0, s.Live())
}

func TestDecodeQueues(t *testing.T) {
	t.Parallel()
	p := testProfile()
	s := newServer(t, Config{Role: RoleDecode, Profile: p})
	s.Submit(at(0), Req{Room: 5, Rank: -1, Prompt: prompt(0, 100), MaxNew: 3})
	st, q, _ := s.roomState(5)
	assert.Equal(t, StateBootstrapping, st)
	assert.Equal(t, QueuePrealloc, q)
	outs := s.Advance(at(0))
	require.Equal(t, []Kind{KindPreallocated}, kinds(outs))
	st, q, _ = s.roomState(5)
	assert.Equal(t, StateWaitingForInput, st)
	assert.Equal(t, QueueTransfer, q)
	assert.Equal(t, 100, s.Loads(time.Time{})[0].KVTokens, "the prompt's KV is allocated; outputs are only reserved (SGLang _pre_alloc)")

	s.KVArrived(at(time.Millisecond), 5, 42)
	st, q, _ = s.roomState(5)
	assert.Equal(t, StateSuccess, st)
	assert.Equal(t, QueueWaiting, q)
	outs = s.Advance(at(time.Millisecond))
	require.Equal(t, []Kind{KindToken}, kinds(outs), "the prefill's token is emitted as the room joins the batch")
	_, q, _ = s.roomState(5)
	assert.Equal(t, QueueRunning, q)

	c := &cluster{t: t, decode: s, now: at(time.Millisecond), check: true}
	c.runAll()
	outs = c.of(5, 0)
	require.Equal(t, []Kind{KindToken, KindToken, KindFinished}, kinds(outs))
	assert.Equal(t, at(time.Millisecond+p.DecodeTime(1, 101)), outs[0].At)
	assert.Equal(t, Usage{PromptTokens: 100, CompletionTokens: 3, CachedTokens: 42}, outs[2].Usage, "decode reports the prefill's hit")
	assert.Equal(t, 0, s.Loads(time.Time{})[0].KVTokens)
}

func TestEarlyMessages(t *testing.T) {
	t.Parallel()
	t.Run("handshake before submit", func(t *testing.T) {
		s := newServer(t, Config{Role: RolePrefill, Profile: testProfile()})
		s.Handshake(at(0), 3)
		s.Submit(at(time.Millisecond), Req{Room: 3, Rank: -1, Prompt: prompt(0, 10), MaxNew: 1})
		_, q, _ := s.roomState(3)
		assert.Equal(t, QueueWaiting, q)
	})
	t.Run("early handshake expires", func(t *testing.T) {
		s := newServer(t, Config{Role: RolePrefill, Profile: testProfile(), BootstrapTimeout: time.Second})
		s.Handshake(at(0), 3)
		s.Advance(at(2 * time.Second))
		s.Submit(at(2*time.Second), Req{Room: 3, Rank: -1, Prompt: prompt(0, 10), MaxNew: 1})
		_, q, _ := s.roomState(3)
		assert.Equal(t, QueueBootstrap, q)
	})
	t.Run("kv before prealloc", func(t *testing.T) {
		s := newServer(t, Config{Role: RoleDecode, Profile: testProfile(), MaxTotalTokens: 100})
		s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 90), MaxNew: 1})
		s.Submit(at(0), Req{Room: 2, Rank: -1, Prompt: prompt(0, 50), MaxNew: 1})
		s.Advance(at(0))
		_, q, _ := s.roomState(2)
		require.Equal(t, QueuePrealloc, q, "back-pressure: no room for 2")
		s.KVArrived(at(0), 2, 7)
		s.KVArrived(at(0), 1, 0)
		c := &cluster{t: t, decode: s, check: true}
		c.runAll()
		fin := c.of(2, KindFinished)
		require.Len(t, fin, 1)
		assert.Equal(t, 7, fin[0].Usage.CachedTokens)
	})
}

func TestTimeouts(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	tests := []struct {
		name   string
		role   Role
		setup  func(s *Server)
		reason string
	}{
		{"prefill without handshake", RolePrefill, func(*Server) {}, "timed out after 2.0s in KVPoll.Bootstrapping"},
		{"decode without kv", RoleDecode, func(*Server) {}, "timed out after 2.0s in KVPoll.WaitingForInput"},
		{"prefill never signals kv", RolePrefill, func(s *Server) {
			s.setNeverSignalKV(true)
			s.Handshake(at(0), 1)
		}, "kv transfer did not complete"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, Config{Role: tc.role, Profile: testProfile(), BootstrapTimeout: timeout})
			s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 100), MaxNew: 4})
			tc.setup(s)
			c := &cluster{t: t, single: s, check: true}
			c.runAll()
			failed := c.of(1, KindFailed)
			require.Len(t, failed, 1)
			assert.Contains(t, failed[0].Reason, tc.reason)
			assert.Contains(t, failed[0].Reason, "room 1")
			assert.Empty(t, c.of(1, KindFinished))
			assert.Equal(t, 0, s.Live())
			assert.Equal(t, 0, s.Loads(time.Time{})[0].KVTokens-s.ranksCacheSize(0))
		})
	}
}

func (s *Server) ranksCacheSize(i int) int {
	if s.ranks[i].cache == nil {
		return 0
	}
	return s.ranks[i].cache.size
}

func TestAbortInEveryQueue(t *testing.T) {
	t.Parallel()
	p := testProfile()
	tests := []struct {
		name  string
		role  Role
		queue Queue
		drive func(s *Server) // bring room 1 into queue
	}{
		{"prefill bootstrap", RolePrefill, QueueBootstrap, func(*Server) {}},
		{"prefill waiting", RolePrefill, QueueWaiting, func(s *Server) { s.Handshake(at(0), 1) }},
		{"prefill running", RolePrefill, QueueRunning, func(s *Server) { s.Handshake(at(0), 1); s.Advance(at(0)) }},
		{"prefill inflight", RolePrefill, QueueInflight, func(s *Server) {
			s.Handshake(at(0), 1)
			s.Advance(at(time.Second))
		}},
		{"decode prealloc", RoleDecode, QueuePrealloc, func(*Server) {}},
		{"decode transfer", RoleDecode, QueueTransfer, func(s *Server) { s.Advance(at(0)) }},
		{"decode waiting", RoleDecode, QueueWaiting, func(s *Server) { s.Advance(at(0)); s.KVArrived(at(0), 1, 0) }},
		{"decode running", RoleDecode, QueueRunning, func(s *Server) { s.Advance(at(0)); s.KVArrived(at(0), 1, 0); s.Advance(at(0)) }},
		{"unified waiting", RoleUnified, QueueWaiting, func(*Server) {}},
		{"unified running", RoleUnified, QueueRunning, func(s *Server) { s.Advance(at(0)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, Config{Role: tc.role, Profile: p, LinkBandwidth: 1e6})
			s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 1000), MaxNew: 100})
			tc.drive(s)
			_, q, ok := s.roomState(1)
			require.True(t, ok)
			require.Equal(t, tc.queue, q)
			s.Abort(s.last, 1, "client went away")
			_, _, ok = s.roomState(1)
			assert.False(t, ok)
			require.NoError(t, s.checkInvariants())
			c := &cluster{t: t, single: s, check: true, now: s.last}
			c.runAll()
			assert.Equal(t, []Kind{KindFailed}, kinds(c.of(1, KindFinished|KindFailed)))
			failed := c.of(1, KindFailed)
			require.Len(t, failed, 1)
			assert.Contains(t, failed[0].Reason, "aborted: client went away")
			assert.Empty(t, c.of(1, KindFinished))
			assert.Equal(t, 0, s.ranks[0].private, "KV freed")
			if c := s.ranks[0].cache; c != nil {
				assert.Equal(t, c.size, c.evictable, "nothing left locked")
			}
		})
	}
}

func TestKillAndRestart(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), DPSize: 2})
	c := &cluster{t: t, single: s, check: true}
	for i := range 6 {
		s.Submit(at(0), Req{Room: uint64(i), Rank: -1, Prompt: prompt(uint32(i)*10000, 500), MaxNew: 50})
	}
	c.runUntil(at(10 * time.Millisecond))
	s.Kill(at(10 * time.Millisecond))
	assert.True(t, s.Dead())
	s.Submit(at(11*time.Millisecond), Req{Room: 99, Rank: -1, Prompt: prompt(0, 5), MaxNew: 1})
	c.runAll()
	for i := range 6 {
		f := c.of(uint64(i), KindFailed)
		require.Len(t, f, 1, "room %d", i)
		assert.Contains(t, f[0].Reason, "server killed")
	}
	f := c.of(99, KindFailed)
	require.Len(t, f, 1)
	assert.Contains(t, f[0].Reason, "server is dead")
	for _, l := range s.Loads(time.Time{}) {
		assert.Zero(t, l.KVTokens, "a dead server lost its KV")
	}
	s.restart(at(time.Second))
	s.Submit(at(time.Second), Req{Room: 100, Rank: -1, Prompt: prompt(0, 5), MaxNew: 1})
	c.runAll()
	assert.Len(t, c.of(100, KindFinished), 1)
}

func TestInvalidSubmissions(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), DPSize: 2, MaxTotalTokens: 1000})
	s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: nil})
	s.Submit(at(0), Req{Room: 2, Rank: 2, Prompt: prompt(0, 5)})
	s.Submit(at(0), Req{Room: 3, Rank: 0, Prompt: prompt(0, 5), MaxNew: 1})
	s.Submit(at(0), Req{Room: 3, Rank: 1, Prompt: prompt(0, 5), MaxNew: 1})
	s.Submit(at(0), Req{Room: 4, Rank: 1, Prompt: prompt(0, 5000), MaxNew: 1})
	c := &cluster{t: t, single: s, check: true}
	c.runAll()
	reasons := map[uint64][]string{}
	for _, o := range c.outs {
		if o.Kind == KindFailed {
			reasons[o.Room] = append(reasons[o.Room], o.Reason)
		}
	}
	assert.Contains(t, reasons[1][0], "empty prompt")
	assert.Contains(t, reasons[2][0], "dp rank 2 out of range")
	assert.Contains(t, reasons[3][0], "duplicate room")
	assert.Contains(t, reasons[4][0], "more than the rank's capacity of 1000")
	assert.Len(t, c.of(3, KindFinished), 1, "the first room 3 still finishes")
}

func TestRankSelection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		role Role
		room uint64
		rank int
		want int
	}{
		{"pd room mod dp", RoleDecode, 10, -1, 2},
		{"pd explicit", RolePrefill, 10, 1, 1},
		{"unified explicit", RoleUnified, 10, 3, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, Config{Role: tc.role, Profile: testProfile(), DPSize: 4})
			s.Submit(at(0), Req{Room: tc.room, Rank: tc.rank, Prompt: prompt(0, 5), MaxNew: 1})
			assert.Equal(t, tc.want, s.rooms[tc.room].rk.id)
		})
	}
	t.Run("unified round robin", func(t *testing.T) {
		s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), DPSize: 3})
		var got []int
		for i := range 7 {
			s.Submit(at(0), Req{Room: uint64(100 + i*3), Rank: -1, Prompt: prompt(0, 5), MaxNew: 1})
			got = append(got, s.rooms[uint64(100+i*3)].rk.id)
		}
		assert.Equal(t, []int{0, 1, 2, 0, 1, 2, 0}, got)
	})
}

func TestDecodeRetraction(t *testing.T) {
	t.Parallel()
	// 4 rooms of 100 prompt tokens; each reserves 100+8 at prealloc but wants 100+50 tokens.
	s := newServer(t, Config{Role: RoleDecode, Profile: testProfile(), MaxTotalTokens: 500, ReservedDecodeTokens: 8})
	c := &cluster{t: t, decode: s, check: true}
	for i := range 4 {
		s.Submit(at(0), Req{Room: uint64(i), Rank: -1, Prompt: prompt(0, 100), MaxNew: 50})
	}
	retracted := false
	for i := 0; ; i++ {
		require.Less(t, i, 100000)
		next, ok := c.next()
		if !ok {
			break
		}
		c.step(next)
		for _, o := range c.outs {
			if o.Kind == KindPreallocated {
				s.KVArrived(c.now, o.Room, 0)
			}
		}
		c.outs = c.outs[:0:0]
		if s.ranks[0].n[QueueWaiting] > 0 && s.ranks[0].n[QueueRunning] > 0 {
			retracted = true
		}
		if s.Live() == 0 {
			break
		}
	}
	assert.True(t, retracted, "KV ran out mid-decode and a room was retracted")
	assert.Equal(t, 0, s.Live())
}

func TestDecodeRetractionFinishes(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleDecode, Profile: testProfile(), MaxTotalTokens: 500, ReservedDecodeTokens: 8})
	var outs []Output
	now := at(0)
	for i := range 4 {
		s.Submit(now, Req{Room: uint64(i), Rank: -1, Prompt: prompt(0, 100), MaxNew: 50})
	}
	for i := 0; i < 100000 && s.Live() > 0; i++ {
		next, ok := s.NextEvent()
		require.True(t, ok)
		now = next
		o := s.Advance(now)
		require.NoError(t, s.checkInvariants())
		for _, x := range o {
			if x.Kind == KindPreallocated {
				s.KVArrived(now, x.Room, 0)
			}
		}
		outs = append(outs, o...)
	}
	assert.Positive(t, s.Loads(time.Time{})[0].Retractions)
	fin := 0
	tokens := map[uint64]int{}
	for _, o := range outs {
		switch o.Kind {
		case KindFinished:
			fin++
			assert.Equal(t, 50, o.Usage.CompletionTokens)
		case KindToken:
			assert.Equal(t, tokens[o.Room], o.Index, "tokens in order, none repeated after retraction")
			tokens[o.Room]++
		}
	}
	assert.Equal(t, 4, fin)
}

// Admission charges the running requests only ratio × their remaining outputs (0.21 here), so
// a third request arriving while two decode is admitted although all three cannot finish in
// 400 tokens of KV; decode then runs out and retracts. (All three at once would not be: each
// newly admitted request is charged its whole max new.)
func TestUnifiedRetraction(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), MaxTotalTokens: 400, ScheduleConservativeness: 0.3})
	c := &cluster{t: t, single: s, check: true}
	for i := range 3 {
		s.Submit(at(time.Duration(i/2)*5*time.Millisecond), Req{Room: uint64(i), Rank: -1, Prompt: prompt(uint32(i)*1000, 100), MaxNew: 60})
	}
	c.runAll()
	assert.Positive(t, s.Loads(time.Time{})[0].Retractions)
	for i := range 3 {
		fin := c.of(uint64(i), KindFinished)
		require.Len(t, fin, 1, "room %d", i)
		assert.Equal(t, 60, fin[0].Usage.CompletionTokens)
		assert.Len(t, c.of(uint64(i), KindToken), 60)
	}
}

func TestFlushCache(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile()})
	s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 100), MaxNew: 2})
	assert.False(t, s.FlushCache(), "refused while a request is live")
	c := &cluster{t: t, single: s}
	c.runAll()
	require.Equal(t, 100, s.Loads(time.Time{})[0].KVTokens)
	assert.True(t, s.FlushCache())
	assert.Equal(t, 0, s.Loads(time.Time{})[0].KVTokens)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no capacity", Config{Profile: Profile{Name: "x"}}, "max total tokens"},
		{"negative dp", Config{Profile: testProfile(), DPSize: -1}, "dp size"},
		{"bad speedup", Config{Profile: testProfile(), Speedup: -2}, "speedup"},
		{"bad role", Config{Profile: testProfile(), Role: 9}, "role"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	s := newServer(t, Config{Profile: testProfile()})
	cfg := s.Config()
	assert.Equal(t, 1, cfg.PageSize)
	assert.Equal(t, 100_000, cfg.MaxTotalTokens)
	assert.Equal(t, DefaultChunkedPrefillSize, cfg.ChunkedPrefillSize)
	assert.Equal(t, DefaultBootstrapTimeout, cfg.BootstrapTimeout)
}

func TestSpeedup(t *testing.T) {
	t.Parallel()
	run := func(speedup float64) []Output {
		s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), Speedup: speedup})
		s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 1000), MaxNew: 5})
		c := &cluster{t: t, single: s}
		c.runAll()
		return c.outs
	}
	slow, fast := run(1), run(4)
	require.Equal(t, len(slow), len(fast))
	for i := range slow {
		assert.InDelta(t, float64(slow[i].At.Sub(epoch))/4, float64(fast[i].At.Sub(epoch)), 4, "output %d", i)
	}
}

func TestFinishedSequenceIsCached(t *testing.T) {
	t.Parallel()
	for _, prof := range []Profile{testProfile(), Instant()} {
		t.Run(prof.Name, func(t *testing.T) {
			s := newServer(t, Config{Role: RoleUnified, Profile: prof, PageSize: 4})
			c := &cluster{t: t, single: s, check: true}
			turn1, reply := prompt(0, 1002), prompt(50000, 10)
			s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: turn1, MaxNew: 10, Output: reply})
			c.runAll()
			// Turn 2 = turn 1 + reply + a new question: the prompt and 9 of the 10 reply tokens
			// (the last one's KV was never computed) are cached, in whole pages of 4.
			turn2 := append(append(append([]uint32(nil), turn1...), reply...), prompt(90000, 50)...)
			s.Submit(c.now, Req{Room: 2, Rank: -1, Prompt: turn2, MaxNew: 1})
			c.runAll()
			fin := c.of(2, KindFinished)
			require.Len(t, fin, 1)
			assert.Equal(t, 1008, fin[0].Usage.CachedTokens, "(1002+9) rounded down to pages of 4")
		})
	}
}
