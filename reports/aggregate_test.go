package reports

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// assertStats compares stats field by field within 1e-9 ms.
func assertStats(t *testing.T, want, got Stats, name string) {
	t.Helper()
	assert.InDelta(t, want.Mean, got.Mean, 1e-9, name+".mean")
	assert.InDelta(t, want.P50, got.P50, 1e-9, name+".p50")
	assert.InDelta(t, want.P90, got.P90, 1e-9, name+".p90")
	assert.InDelta(t, want.P95, got.P95, 1e-9, name+".p95")
	assert.InDelta(t, want.P99, got.P99, 1e-9, name+".p99")
	assert.InDelta(t, want.Max, got.Max, 1e-9, name+".max")
}

// aggRecords: three successes (one with a single output token whose bogus TPOT must be
// ignored) and three errors (one with timings that must not leak into the stats).
func aggRecords(label string) []Record {
	return []Record{
		{Level: label, ID: "a", TTFTMs: new(100.0), TPOTMs: TPOT(100, 1000, 10), E2EMs: 1000,
			ITLMs: []float64{80, 120}, InputTokens: 1000, OutputTokens: 10, CachedTokens: 500},
		{Level: label, ID: "b", TTFTMs: new(200.0), TPOTMs: new(999.0), E2EMs: 200,
			InputTokens: 1000, OutputTokens: 1, CachedTokens: 1000},
		{Level: label, ID: "c", TTFTMs: new(50.0), TPOTMs: TPOT(50, 550, 6), E2EMs: 550,
			ITLMs: []float64{10, 20, 30}, InputTokens: 2000, OutputTokens: 6},
		{Level: label, ID: "d", TTFTMs: new(70.0), TPOTMs: new(1.0), E2EMs: 5000, ITLMs: []float64{1000, 2000},
			InputTokens: 500, OutputTokens: 3, CachedTokens: 500, Error: FormatError(ErrKindTimeout, "after 5s")},
		{Level: label, ID: "e", E2EMs: 5, Error: FormatError(HTTPErrorKind(503), "down")},
		{Level: label, ID: "f", E2EMs: 7, Error: str("http_503")},
	}
}

func TestAggregateHandComputed(t *testing.T) {
	t.Parallel()
	info := ClosedLoop(3)
	info.Duration = 2 * time.Second
	info.SLO = &SLO{TTFTMs: 150, TPOTMs: 100}
	l, err := Aggregate(info, aggRecords("c3"))
	require.NoError(t, err)

	assert.Equal(t, "c3", l.Label)
	assert.Equal(t, new(3), l.Concurrency)
	assert.Nil(t, l.Rate)
	assert.Nil(t, l.Arrival)
	assert.Equal(t, 6, l.Requests)
	assert.Equal(t, 3, l.Errors)
	assert.Equal(t, map[string]int{"http_503": 2, "timeout": 1}, l.ErrorsByKind)
	assert.Equal(t, 2.0, l.DurationS)
	// TTFT of successes a, b, c: 50 100 200. numpy: mean 116.667, p90 h=1.8 → 100+0.8·100.
	assertStats(t, Stats{Mean: 350.0 / 3, P50: 100, P90: 180, P95: 190, P99: 198, Max: 200}, l.TTFTMs, "ttft")
	// TPOT of a and c only (b has one output token): (1000−100)/9 = (550−50)/5 = 100.
	assertStats(t, Stats{Mean: 100, P50: 100, P90: 100, P95: 100, P99: 100, Max: 100}, l.TPOTMs, "tpot")
	// ITL: every gap of a and c: 10 20 30 80 120; p90 h=3.6 → 80+0.6·40.
	assertStats(t, Stats{Mean: 52, P50: 30, P90: 104, P95: 112, P99: 118.4, Max: 120}, l.ITLMs, "itl")
	// E2E: 200 550 1000; p90 h=1.8 → 550+0.8·450.
	assertStats(t, Stats{Mean: 1750.0 / 3, P50: 550, P90: 910, P95: 955, P99: 991, Max: 1000}, l.E2EMs, "e2e")
	assert.Nil(t, l.QueueMs, "closed loop has no client queue")
	// 3 successes, 4000 input and 17 output tokens over 2 s.
	assert.Equal(t, Throughput{ReqS: 1.5, InputTokS: 2000, OutputTokS: 8.5}, l.Throughput)
	// (500 + 1000 + 0) / 4000.
	require.NotNil(t, l.CacheHitRate)
	assert.Equal(t, 0.375, *l.CacheHitRate)
	// a and c meet TTFT ≤ 150 and TPOT ≤ 100 (equal counts as met); b misses TTFT; errors miss.
	require.NotNil(t, l.Goodput)
	assert.InDelta(t, 2.0/6, *l.Goodput, 1e-15)
	assert.Nil(t, l.Sim)
	require.NoError(t, l.Validate())
}

func TestAggregateGoodput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		slo  *SLO
		want *float64
	}{
		{"no SLO: null", nil, nil},
		{"zero SLO: every success is good", &SLO{}, new(0.5)},
		{"TTFT only", &SLO{TTFTMs: 100}, new(2.0 / 6)},
		{"TPOT 99.9: a and c miss, b has no TPOT and meets", &SLO{TPOTMs: 99.9}, new(1.0 / 6)},
		{"E2E 600: b and c", &SLO{E2EMs: 600}, new(2.0 / 6)},
		{"all three", &SLO{TTFTMs: 150, TPOTMs: 100, E2EMs: 600}, new(1.0 / 6)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			info := ClosedLoop(3)
			info.SLO = tc.slo
			l, err := Aggregate(info, aggRecords("c3"))
			require.NoError(t, err)
			if tc.want == nil {
				assert.Nil(t, l.Goodput)
				return
			}
			require.NotNil(t, l.Goodput)
			assert.InDelta(t, *tc.want, *l.Goodput, 1e-15)
		})
	}
}

func TestAggregateOpenLoopQueue(t *testing.T) {
	t.Parallel()
	recs := []Record{
		{Level: "r2", ID: "a", QueueMs: new(3.0), TTFTMs: new(10.0), E2EMs: 20},
		{Level: "r2", ID: "b", QueueMs: new(1.0), TTFTMs: new(10.0), E2EMs: 20},
		{Level: "r2", ID: "c", QueueMs: new(2.0), E2EMs: 1, Error: str("connection: refused")},
		{Level: "r2", ID: "d", TTFTMs: new(10.0), E2EMs: 20}, // no queue_ms: not counted
	}
	info := OpenLoop(2, ArrivalPoisson)
	info.CacheUnknown = true
	l, err := Aggregate(info, recs)
	require.NoError(t, err)
	assert.Equal(t, new(2.0), l.Rate)
	assert.Equal(t, str(ArrivalPoisson), l.Arrival)
	require.NotNil(t, l.QueueMs)
	// 1 2 3, the errored request's queueing included.
	assertStats(t, Stats{Mean: 2, P50: 2, P90: 2.8, P95: 2.9, P99: 2.98, Max: 3}, *l.QueueMs, "queue")
	assert.Nil(t, l.CacheHitRate, "target does not report cached tokens")
	assert.Equal(t, Throughput{}, l.Throughput, "zero duration gives zero throughput")
	assert.Equal(t, map[string]int{"connection": 1}, l.ErrorsByKind)
}

func TestAggregateEmptyLevel(t *testing.T) {
	t.Parallel()
	for _, info := range []LevelInfo{ClosedLoop(1), OpenLoop(0.5, ArrivalConstant), Burst(), Trace()} {
		t.Run(info.Label, func(t *testing.T) {
			t.Parallel()
			info.Duration = time.Second
			info.SLO = &SLO{TTFTMs: 1}
			l, err := Aggregate(info, nil)
			require.NoError(t, err)
			assert.Zero(t, l.Requests)
			assert.Zero(t, l.Errors)
			assert.Nil(t, l.ErrorsByKind)
			for _, s := range []Stats{l.TTFTMs, l.TPOTMs, l.ITLMs, l.E2EMs} {
				assert.Equal(t, Stats{}, s)
			}
			if info.Concurrency == nil {
				assert.Equal(t, &Stats{}, l.QueueMs)
			} else {
				assert.Nil(t, l.QueueMs)
			}
			assert.Equal(t, Throughput{}, l.Throughput)
			assert.Equal(t, new(0.0), l.CacheHitRate)
			assert.Equal(t, new(0.0), l.Goodput)
			require.NoError(t, l.Validate())
		})
	}
}

func TestAggregateOnlyErrors(t *testing.T) {
	t.Parallel()
	recs := aggRecords("c3")[3:]
	l, err := Aggregate(ClosedLoop(3), recs)
	require.NoError(t, err)
	assert.Equal(t, 3, l.Requests)
	assert.Equal(t, 3, l.Errors)
	assert.Equal(t, Stats{}, l.TTFTMs)
	assert.Equal(t, Stats{}, l.ITLMs)
	assert.Equal(t, new(0.0), l.CacheHitRate)
}

func TestAggregateRejects(t *testing.T) {
	t.Parallel()
	neg := ClosedLoop(1)
	neg.Duration = -time.Second
	tests := []struct {
		name string
		info LevelInfo
		recs []Record
		want string
	}{
		{"record of another level", ClosedLoop(1), []Record{{Level: "c2", ID: "x"}}, `record "x" is in level "c2", aggregating level "c1"`},
		{"invalid record", ClosedLoop(1), []Record{{Level: "c1", ID: "x", E2EMs: -1}}, `record "x": e2e_ms = -1`},
		{"bad label", LevelInfo{Label: "c1.5"}, nil, `level label "c1.5"`},
		{"label without concurrency", LevelInfo{Label: "c2"}, nil, "concurrency does not match"},
		{"rate without arrival", LevelInfo{Label: "r1", Rate: new(1.0)}, nil, `arrival ""`},
		{"negative duration", neg, nil, "negative duration"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Aggregate(tc.info, tc.recs)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestAggregateDoesNotModifyRecords(t *testing.T) {
	t.Parallel()
	recs := aggRecords("c3")
	recs[0].ITLMs = []float64{120, 80} // unsorted on purpose
	_, err := Aggregate(ClosedLoop(3), recs)
	require.NoError(t, err)
	assert.Equal(t, []float64{120, 80}, recs[0].ITLMs)
}

func TestTPOT(t *testing.T) {
	t.Parallel()
	assert.Equal(t, new(100.0), TPOT(100, 1000, 10))
	assert.Equal(t, new(900.0), TPOT(100, 1000, 2))
	assert.Nil(t, TPOT(100, 1000, 1))
	assert.Nil(t, TPOT(100, 1000, 0))
	assert.Equal(t, new(0.0), TPOT(100, 90, 3), "clock skew clamps to 0")
}

func TestErrorKind(t *testing.T) {
	t.Parallel()
	tests := []struct{ err, kind string }{
		{"http_503: prefill down", "http_503"},
		{"timeout", "timeout"},
		{"stream_cut:after 3 tokens: x", "stream_cut"},
		{" connection : refused", "connection"},
		{": nothing", "unknown"},
		{"", "unknown"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.kind, ErrorKind(tc.err), tc.err)
	}
	assert.Equal(t, "http_429: slow down", *FormatError(HTTPErrorKind(429), "slow down"))
	assert.Equal(t, "canceled", *FormatError(ErrKindCanceled, ""))
}

// benchRecords builds n records of one closed-loop level with 16 ITL gaps each, a tenth of
// them errors, from a fixed seed.
func benchRecords(n int) []Record {
	rng := rand.New(rand.NewPCG(1, 2))
	recs := make([]Record, n)
	for i := range recs {
		ttft := 50 + rng.ExpFloat64()*100
		itl := make([]float64, 16)
		e2e := ttft
		for j := range itl {
			itl[j] = 5 + rng.ExpFloat64()*10
			e2e += itl[j]
		}
		recs[i] = Record{Level: "c64", ID: fmt.Sprintf("r%d", i), StartMs: float64(i), TTFTMs: &ttft,
			TPOTMs: TPOT(ttft, e2e, 17), E2EMs: e2e, ITLMs: itl, InputTokens: 2048, OutputTokens: 17,
			CachedTokens: rng.IntN(2048)}
		if i%10 == 9 {
			recs[i].Error = FormatError(HTTPErrorKind(503), "")
		}
	}
	return recs
}

func BenchmarkAggregate(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			recs := benchRecords(n)
			info := ClosedLoop(64)
			info.Duration = time.Minute
			info.SLO = &SLO{TTFTMs: 200, TPOTMs: 15}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Aggregate(info, recs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/record")
		})
	}
}

func ExampleAggregate() {
	info := ClosedLoop(2)
	info.Duration = 2 * time.Second
	info.SLO = &SLO{TTFTMs: 100}
	recs := []Record{
		{Level: "c2", ID: "a", TTFTMs: new(80.0), TPOTMs: TPOT(80, 480, 5), E2EMs: 480,
			ITLMs: []float64{90, 110, 100, 100}, InputTokens: 1000, OutputTokens: 5, CachedTokens: 600},
		{Level: "c2", ID: "b", TTFTMs: new(120.0), TPOTMs: TPOT(120, 420, 4), E2EMs: 420,
			ITLMs: []float64{100, 100, 100}, InputTokens: 1000, OutputTokens: 4},
		{Level: "c2", ID: "c", E2EMs: 30, Error: FormatError(HTTPErrorKind(503), "overloaded")},
	}
	l, err := Aggregate(info, recs)
	if err != nil {
		panic(err)
	}
	fmt.Println(l.Label, l.Requests, l.Errors, l.ErrorsByKind)
	fmt.Println("TTFT p50", l.TTFTMs.P50, "TPOT p50", l.TPOTMs.P50, "ITL max", l.ITLMs.Max)
	fmt.Println("req/s", l.Throughput.ReqS, "cache", *l.CacheHitRate, "goodput", *l.Goodput)
	// Output:
	// c2 3 1 map[http_503:1]
	// TTFT p50 100 TPOT p50 100 ITL max 110
	// req/s 1 cache 0.3 goodput 0.3333333333333333
}
