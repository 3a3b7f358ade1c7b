package plan

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/pdrouter/pdrouter/workloads"
)

// Workload is what the bounds need to know of the requests a plan simulates: their prompt and
// output lengths, how much of each prompt no cache can hold (UncachedMin), and the offered
// rate. Analyze measures it from the very turns the simulator sends (level 0's).
type Workload struct {
	Requests int
	// Input, Output and UncachedMin are per request, in the order the workload yields them:
	// prompt tokens, output tokens (max_tokens), and a lower bound on the prompt tokens a
	// prefill server must compute — the prompt less its longest prefix that any earlier prompt
	// shares, rounded up to whole pages of PageTokens (a cache can skip no more than that, at
	// any cluster size).
	Input, Output, UncachedMin []int
	// Rate is the offered requests/s of the highest open-loop level (--rate), or of a trace's
	// own timestamps (requests over their span); 0 when the load is closed loop.
	Rate float64
}

// PageTokens is the granularity of Analyze's shared-prefix index: a prompt's shared prefix is
// found to the page, so UncachedMin may undercount by up to a page (it stays a lower bound).
const PageTokens = 64

// Analyze reads the workload of p and l as the simulator's first level does — the same
// sessions, turns and replies — up to l.Warmup + l.Requests requests when --requests is set.
func Analyze(p workloads.Params, l workloads.LoadParams) (Workload, error) {
	src, err := workloads.NewSource(p)
	if err != nil {
		return Workload{}, err
	}
	defer src.Close()
	limit := 0
	if l.Requests > 0 {
		limit = l.Warmup + l.Requests
	}
	var w Workload
	seen := map[uint64]struct{}{} // hashes of every page-aligned prefix of earlier prompts
	var first, last time.Duration
	arrivals := 0
	for limit == 0 || w.Requests < limit {
		s, err := src.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Workload{}, err
		}
		if s.HasArrival {
			if arrivals == 0 || s.Arrival < first {
				first = s.Arrival
			}
			last = max(last, s.Arrival)
			arrivals++
		}
		s.ForSimulator()
		var reply []byte // reused for every turn: NextReply copies it
		var replyIDs []uint32
		for limit == 0 || w.Requests < limit {
			t, ok := s.NextReply(reply, replyIDs)
			if !ok {
				break
			}
			w.add(t.PromptIDs, t.InputTokens, t.MaxTokens, seen)
			reply, replyIDs = workloads.AppendReply(reply[:0], replyIDs[:0], t.PromptIDs, t.MaxTokens)
		}
	}
	if w.Requests == 0 {
		return w, fmt.Errorf("plan: the %s workload holds no requests", p.Workload)
	}
	for _, lv := range l.Levels(p.IsTrace()) {
		if lv.Rate > 0 && !math.IsInf(lv.Rate, 1) {
			w.Rate = max(w.Rate, lv.Rate)
		}
		if lv.Arrival == workloads.ArrivalTrace && arrivals > 1 && last > first {
			w.Rate = max(w.Rate, float64(arrivals)/(last-first).Seconds())
		}
	}
	return w, nil
}

// add records one request: its lengths and the pages of its prompt no earlier prompt shares.
func (w *Workload) add(ids []uint32, input, output int, seen map[uint64]struct{}) {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	shared := 0      // whole pages matched so far
	matching := true // every page so far was seen
	for i, id := range ids {
		h = (h ^ uint64(id)) * prime
		if (i+1)%PageTokens != 0 {
			continue
		}
		if _, ok := seen[h]; ok && matching {
			shared = i + 1
		} else {
			matching = false
			seen[h] = struct{}{}
		}
	}
	// A cache may hold up to a page more than the whole pages matched (SGLang matches to the
	// token), and never the prompt's last token.
	cachedMax := max(min(shared+PageTokens-1, len(ids)-1), 0)
	w.Requests++
	w.Input = append(w.Input, input)
	w.Output = append(w.Output, output)
	w.UncachedMin = append(w.UncachedMin, max(input-cachedMax, 1))
}

// Quantile returns the q-quantile (0 < q ≤ 1) of xs by the nearest-rank rule.
func Quantile(xs []int, q float64) int {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Mean returns the mean of xs (0 for none).
func Mean(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0
	for _, x := range xs {
		sum += x
	}
	return float64(sum) / float64(len(xs))
}

// Longest is the most tokens any request holds at its end (prompt + output): what one
// rank's KV pool must hold for it to run at all.
func (w Workload) Longest() int {
	n := 0
	for i := range w.Input {
		n = max(n, w.Input[i]+w.Output[i])
	}
	return n
}
