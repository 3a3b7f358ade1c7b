package engine

import (
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gapCounts is a GapSink keeping each gap's count, and how many calls brought them.
type gapCounts struct {
	m     map[int64]int64
	calls int
}

func (g *gapCounts) AddN(ns, n int64) {
	if g.m == nil {
		g.m = map[int64]int64{}
	}
	g.m[ns] += n
	g.calls++
}

// TestGapsEqualPerTokenOutputs runs the same rooms twice, once reporting every token and once
// with Req.Gaps, in each role and profile kind, with retraction: the sinks receive exactly the
// gaps between consecutive KindToken outputs of each room (as a multiset, per sink), only the
// first token is reported, everything else is unchanged, and a step's gaps arrive in runs.
func TestGapsEqualPerTokenOutputs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"unified", Config{Role: RoleUnified, DPSize: 2, Profile: testProfile(), MaxTotalTokens: 500, ScheduleConservativeness: 0.3}},
		{"decode-dp-attention", Config{Role: RoleDecode, DPSize: 2, DPAttention: true, Profile: testProfile(), MaxTotalTokens: 700, ReservedDecodeTokens: 8}},
		{"constant", Config{Role: RoleUnified, Profile: ConstantProfile(20*time.Millisecond, 3*time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Two sinks (rooms alternate between them), as warm-up and recorded requests do.
			retractions := 0
			run := func(withGaps bool) ([]Output, [2]*gapCounts) {
				s := newServer(t, tc.cfg)
				sinks := [2]*gapCounts{{}, {}}
				c := &cluster{t: t, check: true}
				if tc.cfg.Role == RoleDecode {
					c.decode = s
				} else {
					c.single = s
				}
				for i := range 12 {
					req := Req{Room: uint64(i), Rank: -1, Prompt: prompt(uint32(i%3)*1000, 100+10*i), MaxNew: 20 + 7*i}
					if withGaps {
						req.Gaps = sinks[i%2]
					}
					s.Submit(at(time.Duration(i)*3*time.Millisecond), req)
				}
				seen := 0
				for i := 0; s.Live() > 0; i++ {
					require.Less(t, i, 100_000)
					next, ok := s.NextEvent()
					require.True(t, ok)
					c.step(next)
					for _, o := range c.outs[seen:] {
						if o.Kind == KindPreallocated { // decode alone: the KV arrives at once
							s.KVArrived(c.now, o.Room, 0)
						}
					}
					seen = len(c.outs)
				}
				for _, l := range s.Loads(time.Time{}) {
					retractions += l.Retractions
				}
				return c.outs, sinks
			}
			all, _ := run(false)
			quiet, sinks := run(true)

			want := [2]map[int64]int64{{}, {}}
			last := map[uint64]time.Time{}
			var rest []Output
			for _, o := range all {
				if o.Kind == KindToken {
					if o.Index > 0 {
						want[o.Room%2][int64(o.At.Sub(last[o.Room]))]++
					}
					last[o.Room] = o.At
					if o.Index > 0 {
						continue
					}
				}
				rest = append(rest, o)
			}
			require.NotEmpty(t, want[0])
			assert.Equal(t, fmt.Sprint(rest), fmt.Sprint(quiet), "with Gaps only tokens after the first are left out")
			for i := range 2 {
				assert.Equal(t, want[i], sinks[i].m, "sink %d", i)
			}
			if !tc.cfg.Profile.Constant {
				assert.Positive(t, retractions, "KV runs out and rooms are retracted")
				tokens := 0
				for i := range 2 {
					for _, c := range sinks[i].m {
						tokens += int(c)
					}
				}
				assert.Less(t, sinks[0].calls+sinks[1].calls, tokens, "a step's gaps arrive in runs")
			}
		})
	}
}

// TestRequestRecordIsLineAligned: the room record's size is a multiple of a cache line (and so
// its own allocation size class), and what a decode step reads of it lies in its first line.
func TestRequestRecordIsLineAligned(t *testing.T) {
	var r request
	assert.Zero(t, unsafe.Sizeof(r)%64, "size %d", unsafe.Sizeof(r))
	for name, end := range map[string]uintptr{
		"generated": unsafe.Offsetof(r.generated) + unsafe.Sizeof(r.generated),
		"maxNew":    unsafe.Offsetof(r.maxNew) + unsafe.Sizeof(r.maxNew),
		"gaps":      unsafe.Offsetof(r.gaps) + unsafe.Sizeof(r.gaps),
		"lastTok":   unsafe.Offsetof(r.lastTok) + unsafe.Sizeof(r.lastTok),
		"rk":        unsafe.Offsetof(r.rk) + unsafe.Sizeof(r.rk),
		"done":      unsafe.Offsetof(r.done) + unsafe.Sizeof(r.done),
	} {
		assert.LessOrEqual(t, end, uintptr(64), "%s ends at byte %d", name, end)
	}
}

// nopSink is a value GapSink (no pointer in the interface's data word).
type nopSink struct{}

func (nopSink) AddN(int64, int64) {}

// sameSink says two sinks are the same exactly when == does, for the sinks in use: pointers
// (one object or two) and an empty value.
func TestSameSink(t *testing.T) {
	t.Parallel()
	a, b := &gapCounts{}, &gapCounts{}
	for _, tc := range []struct {
		name string
		x, y GapSink
	}{
		{"one pointer", a, a},
		{"two pointers", a, b},
		{"pointer and nil", a, nil},
		{"nil and nil", nil, nil},
		{"empty values", nopSink{}, nopSink{}},
		{"value and pointer", nopSink{}, a},
	} {
		assert.Equal(t, tc.x == tc.y, sameSink(&tc.x, &tc.y), tc.name)
	}
}
