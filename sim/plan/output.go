package plan

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the plan: the workload as the bounds saw it, the ranked table (at most
// rows rows; ≤ 0: all), what the bounds pruned (every candidate with showPruned, counts by
// reason otherwise), the verification runs and the winner. Same plan, same bytes.
func (p *Plan) WriteTable(w io.Writer, rows int, showPruned bool) error {
	s, wl := p.Spec, p.Workload
	fmt.Fprintf(w, "workload: %d requests; prompt mean %.0f tokens (%s %d), uncached at least %.0f on average; output mean %.0f",
		wl.Requests, Mean(wl.Input), s.SLO.Percentile, Quantile(wl.Input, s.SLO.q()), Mean(wl.UncachedMin), Mean(wl.Output))
	if wl.Rate > 0 {
		fmt.Fprintf(w, "; offered %.4g req/s", wl.Rate)
	} else {
		fmt.Fprint(w, "; closed loop (no capacity bounds)")
	}
	fmt.Fprintf(w, "\nbudget: %d GPUs, %d per node; SLO at every level: %s; objective %s\n\n", s.GPUs, s.GPUsPerNode, s.SLO, s.Objective)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	pc := s.SLO.Percentile
	head := []string{"rank", "GPUs", "prefill", "decode", "router", "goodput/GPU", "TTFT " + pc + " ms", "TPOT " + pc + " ms", "TTFT room", "TPOT room", "good", "errs", "SLO"}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for i, c := range p.Ranked {
		if rows > 0 && i >= rows {
			break
		}
		ok := "miss"
		if c.Meets {
			ok = "meets"
		}
		row := []string{strconv.Itoa(i + 1), strconv.Itoa(c.GPUs()), fmt.Sprintf("%d×%s", c.Prefill, c.P), fmt.Sprintf("%d×%s", c.Decode, c.D),
			p.routerLabel(c), fmt.Sprintf("%.3f", c.GoodputPerGPU()), fmt.Sprintf("%.1f", c.TTFTMs), fmt.Sprintf("%.2f", c.TPOTMs),
			room(c.TTFTMs, s.SLO.TTFTMs), room(c.TPOTMs, s.SLO.TPOTMs), fmt.Sprintf("%.1f%%", 100*c.Share), strconv.Itoa(c.Errors), ok}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rows > 0 && len(p.Ranked) > rows {
		fmt.Fprintf(w, "(%d more simulated candidates; --rows 0 shows all)\n", len(p.Ranked)-rows)
	}
	fmt.Fprintf(w, "(goodput: requests/s meeting the TTFT and TPOT objectives, at the worst level; room: headroom to the objective; router base: the router flags as given)\n")
	p.writePruned(w, showPruned)
	p.writeVerification(w)
	return nil
}

// routerLabel names c's router settings: the Spec.Router values, or "base".
func (p *Plan) routerLabel(c *Candidate) string {
	if c.Router == nil {
		return "base"
	}
	parts := make([]string, len(c.Router))
	for i, v := range c.Router {
		parts[i] = p.Spec.Router[i].Key + "=" + v
	}
	return strings.Join(parts, " ")
}

func room(v, slo float64) string {
	if slo <= 0 {
		return "-"
	}
	return fmt.Sprintf("%+.0f%%", Headroom(v, slo))
}

// String is the SLO as the table's header says it.
func (s SLO) String() string {
	var parts []string
	if s.TTFTMs > 0 {
		parts = append(parts, fmt.Sprintf("%s TTFT ≤ %g ms", s.Percentile, s.TTFTMs))
	}
	if s.TPOTMs > 0 {
		parts = append(parts, fmt.Sprintf("%s TPOT ≤ %g ms", s.Percentile, s.TPOTMs))
	}
	if s.Goodput > 0 {
		parts = append(parts, fmt.Sprintf("goodput ≥ %g%%", 100*s.Goodput))
	}
	return strings.Join(parts, ", ")
}

func (p *Plan) writePruned(w io.Writer, all bool) {
	var pruned []*Candidate
	kinds := map[string]int{}
	for _, c := range p.Candidates {
		if c.Pruned != "" {
			pruned = append(pruned, c)
			kind, _, _ := strings.Cut(c.Pruned, ":")
			kinds[kind]++
		}
	}
	clusters := len(p.Candidates)
	for _, c := range p.Candidates {
		if c.Router != nil {
			clusters--
		}
	}
	fmt.Fprintf(w, "\npruned by the bounds before simulating: %d of %d clusters", len(pruned), clusters)
	if len(pruned) == 0 {
		fmt.Fprintln(w)
		return
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, kinds[k]))
	}
	fmt.Fprintf(w, " (%s)\n", strings.Join(parts, ", "))
	if !all {
		return
	}
	for _, c := range pruned {
		fmt.Fprintf(w, "  %d GPUs %s: %s\n", c.GPUs(), c.Shape(), c.Pruned)
	}
}

func (p *Plan) writeVerification(w io.Writer) {
	if p.Spec.VerifySeeds > 0 {
		for _, v := range p.Verified {
			ok := "meets"
			if !v.Meets {
				ok = "misses"
			}
			fmt.Fprintf(w, "verify %s (%s) at seed %d: TTFT %s %.1f ms, TPOT %s %.2f ms, goodput %.1f%%, %d errors: %s the SLO\n",
				v.Candidate.Shape(), p.routerLabel(v.Candidate), v.Seed, p.Spec.SLO.Percentile, v.TTFTMs, p.Spec.SLO.Percentile, v.TPOTMs, 100*v.Share, v.Errors, ok)
		}
	}
	if p.Winner == nil {
		note := ""
		if p.Spec.VerifySeeds > 0 {
			note = fmt.Sprintf(" at the search's seed and %d other seeds", p.Spec.VerifySeeds)
		}
		fmt.Fprintln(w, "\nno candidate within the budget meets the SLO"+note)
		return
	}
	c := p.Winner
	fmt.Fprintf(w, "\nwinner: %s (%s), %d GPUs, %.3f goodput req/s per GPU%s\n", c.Shape(), p.routerLabel(c), c.GPUs(), c.GoodputPerGPU(), p.verifyNote())
}

func (p *Plan) verifyNote() string {
	if p.Spec.VerifySeeds == 0 {
		return ""
	}
	return fmt.Sprintf(" (meeting it at %d other seeds)", p.Spec.VerifySeeds)
}
