package demo

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// Decision is the comparable part of one --decision-log line (SPEC §2): what `router serve`
// and `router sim` must agree on although their URLs, ids and rids differ.
type Decision struct {
	Seq     uint64
	Prefill Pick // zero (Set false) when the line has no prefill target
	Decode  Pick
	Regular Pick
	Reason  string
	Room    uint64 // bootstrap_room, drawn from the seeded rid/room source
}

// Pick is one role's target in a decision: the worker's index within its role and its DP
// rank (-1 without --dp-aware).
type Pick struct {
	Set   bool
	Index int
	Rank  int
}

// String formats the pick as index@rank ("-" when unset).
func (p Pick) String() string {
	if !p.Set {
		return "-"
	}
	if p.Rank < 0 {
		return strconv.Itoa(p.Index)
	}
	return strconv.Itoa(p.Index) + "@" + strconv.Itoa(p.Rank)
}

// String formats the decision for test failures and logs.
func (d Decision) String() string {
	return fmt.Sprintf("seq %d prefill %s decode %s regular %s reason %s", d.Seq, d.Prefill, d.Decode, d.Regular, d.Reason)
}

// ReadDecisions parses a decision log, one JSON line per routed request.
func ReadDecisions(r io.Reader) ([]Decision, error) {
	type target struct {
		Index int  `json:"index"`
		Rank  *int `json:"rank"`
	}
	type line struct {
		Seq     uint64  `json:"seq"`
		Room    uint64  `json:"room"`
		Prefill *target `json:"prefill"`
		Decode  *target `json:"decode"`
		Regular *target `json:"regular"`
		Reason  string  `json:"reason"`
	}
	pick := func(t *target) Pick {
		if t == nil {
			return Pick{}
		}
		p := Pick{Set: true, Index: t.Index, Rank: -1}
		if t.Rank != nil {
			p.Rank = *t.Rank
		}
		return p
	}
	var out []Decision
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("demo: decision log line %d: %w", n, err)
		}
		out = append(out, Decision{Seq: l.Seq, Prefill: pick(l.Prefill), Decode: pick(l.Decode),
			Regular: pick(l.Regular), Reason: l.Reason, Room: l.Room})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("demo: decision log: %w", err)
	}
	return out, nil
}

// SameDecision reports whether a and b agree on (seq, role, worker index, rank, reason).
func SameDecision(a, b Decision) bool {
	return a.Seq == b.Seq && a.Prefill == b.Prefill && a.Decode == b.Decode && a.Regular == b.Regular && a.Reason == b.Reason
}

// CommonPrefix returns how many decisions, from the first, live and simulated agree on
// (SameDecision).
func CommonPrefix(live, simulated []Decision) int {
	n := 0
	for n < len(live) && n < len(simulated) && SameDecision(live[n], simulated[n]) {
		n++
	}
	return n
}
