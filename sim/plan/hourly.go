package plan

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pdrouter/pdrouter/workloads"
)

// Cheapest plans for the fewest GPUs alone: it simulates the clusters the bounds leave in
// groups of equal GPU count, fewest first, and stops at the first group holding one that meets
// the SLO (and, with Spec.VerifySeeds, meets it at the other seeds too): the Winner. The
// router grid (Spec.Router) is not run.
func Cheapest(spec Spec, progress Progress) (*Plan, error) {
	spec.Shard, spec.Shards = 0, 1
	p, err := Prepare(spec)
	if err != nil {
		return nil, err
	}
	todo := p.Todo()
	for i := 0; i < len(todo); {
		j := i
		for j < len(todo) && todo[j].GPUs() == todo[i].GPUs() {
			j++
		}
		p.simulate(fmt.Sprintf("%d GPUs", todo[i].GPUs()), todo[i:j], progress)
		p.rank()
		if err := p.verify(progress); err != nil {
			return nil, err
		}
		if p.Winner != nil {
			return p, nil
		}
		i = j
	}
	return p, nil
}

// Hour is one hour of a plan over time: its rate and the cheapest cluster meeting the SLO at
// it (Plan.Winner; nil when none within the budget does).
type Hour struct {
	Rate float64
	Plan *Plan
}

// Schedule is a plan over time: an hour per rate.
type Schedule struct {
	Spec  Spec
	Hours []Hour
}

// Hourly plans each hour of rates (req/s) alone: Spec.Base's workload at that open-loop rate
// (Poisson arrivals), the Cheapest cluster meeting the SLO. Equal rates share one plan.
func Hourly(spec Spec, rates []float64, progress Progress) (*Schedule, error) {
	s := &Schedule{Spec: spec}
	done := map[float64]*Plan{}
	for h, r := range rates {
		p, ok := done[r]
		if !ok {
			hs := spec
			hs.Base.Load.Rates, hs.Base.Load.Concurrency = []float64{r}, nil
			var err error
			stage := fmt.Sprintf("hour %d (%g req/s)", h, r)
			p, err = Cheapest(hs, func(st string, d, t int, c *Candidate) {
				if progress != nil {
					progress(stage+" "+st, d, t, c)
				}
			})
			if err != nil {
				return nil, err
			}
			done[r] = p
		}
		s.Hours = append(s.Hours, Hour{Rate: r, Plan: p})
	}
	return s, nil
}

// WriteTable prints the servers per role per hour.
func (s *Schedule) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "budget: %d GPUs, %d per node; SLO at each hour's rate: %s\n\n", s.Spec.GPUs, s.Spec.GPUsPerNode, s.Spec.SLO)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	pc := s.Spec.SLO.Percentile
	fmt.Fprintln(tw, strings.Join([]string{"hour", "req/s", "GPUs", "prefill", "decode", "TTFT " + pc + " ms", "TPOT " + pc + " ms", "simulated", "pruned"}, "\t")+"\t")
	var pre, dec []string
	for h, hr := range s.Hours {
		p := hr.Plan
		sims, pruned := 0, 0
		for _, c := range p.Candidates {
			if c.Simulated {
				sims++
			} else if c.Pruned != "" {
				pruned++
			}
		}
		row := []string{strconv.Itoa(h), strconv.FormatFloat(hr.Rate, 'g', -1, 64)}
		if c := p.Winner; c != nil {
			row = append(row, strconv.Itoa(c.GPUs()), fmt.Sprintf("%d×%s", c.Prefill, c.P), fmt.Sprintf("%d×%s", c.Decode, c.D),
				fmt.Sprintf("%.1f", c.TTFTMs), fmt.Sprintf("%.2f", c.TPOTMs))
			pre, dec = append(pre, strconv.Itoa(c.Prefill)), append(dec, strconv.Itoa(c.Decode))
		} else {
			row = append(row, "-", "none fits", "-", "-", "-")
			pre, dec = append(pre, "-"), append(dec, "-")
		}
		row = append(row, strconv.Itoa(sims), strconv.Itoa(pruned))
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nprefill servers by hour: %s\ndecode servers by hour:  %s\n", strings.Join(pre, ","), strings.Join(dec, ","))
	return err
}

// TraceRates reads the arrival timestamps of the trace workload p (mooncake, azure; scaled by
// --time-scale) and returns its rate in each window of length hour from the first arrival:
// the requests arriving in it per second. A window without arrivals has rate 0, which Hourly
// cannot plan: it is an error naming the window.
func TraceRates(p workloads.Params, hour time.Duration) ([]float64, error) {
	if !p.IsTrace() {
		return nil, fmt.Errorf("plan: --hourly-from-trace needs a trace workload (--workload mooncake or azure with --trace-file)")
	}
	if hour <= 0 {
		return nil, fmt.Errorf("plan: --hour %v must be > 0", hour)
	}
	src, err := workloads.NewSource(p)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	var counts []int
	var first time.Duration
	n := 0
	for {
		s, err := src.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if !s.HasArrival {
			continue
		}
		if n == 0 {
			first = s.Arrival
		}
		n++
		h := int(max(s.Arrival-first, 0) / hour)
		for len(counts) <= h {
			counts = append(counts, 0)
		}
		counts[h] += s.Turns()
	}
	if n == 0 {
		return nil, fmt.Errorf("plan: --hourly-from-trace: the trace %s has no timestamped requests", p.TraceFile)
	}
	rates := make([]float64, len(counts))
	for h, c := range counts {
		if c == 0 {
			return nil, fmt.Errorf("plan: --hourly-from-trace: no request arrives in window %d (from %v): choose a longer --hour", h, time.Duration(h)*hour)
		}
		rates[h] = float64(c) / hour.Seconds()
	}
	return rates, nil
}
