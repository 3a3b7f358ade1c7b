package demo

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/pdrouter/pdrouter/reports"
)

// Metric names one compared figure of a level.
type Metric struct {
	Name  string                         // column title, e.g. "TTFT p50"
	Value func(l *reports.Level) float64 // the figure in ms
}

// Metrics are the figures the demo compares: P50 and P95 of TTFT and TPOT.
var Metrics = []Metric{
	{"TTFT p50", func(l *reports.Level) float64 { return l.TTFTMs.P50 }},
	{"TTFT p95", func(l *reports.Level) float64 { return l.TTFTMs.P95 }},
	{"TPOT p50", func(l *reports.Level) float64 { return l.TPOTMs.P50 }},
	{"TPOT p95", func(l *reports.Level) float64 { return l.TPOTMs.P95 }},
}

// Figure is one metric of one level, measured live and simulated.
type Figure struct {
	Live, Sim float64 // ms
}

// DiffPct is the simulator's error relative to the live measurement, in %: (sim − live) /
// live × 100. NaN when live is 0.
func (f Figure) DiffPct() float64 {
	if f.Live == 0 {
		return math.NaN()
	}
	return (f.Sim - f.Live) / f.Live * 100
}

// Row is one level of the comparison.
type Row struct {
	Label                  string   // level label (c1, c4, …)
	LiveRequests, LiveErrs int      // live requests recorded and failed
	SimRequests, SimErrs   int      // simulated requests recorded and failed
	Figures                []Figure // one per Metrics entry
}

// Compare pairs the levels of a live and a simulated run by label, in the live run's order;
// levels missing from either side are left out.
func Compare(live, simulated *reports.Results) []Row {
	var rows []Row
	for i := range live.Levels {
		l := &live.Levels[i]
		s := simulated.Level(l.Label)
		if s == nil {
			continue
		}
		r := Row{Label: l.Label, LiveRequests: l.Requests, LiveErrs: l.Errors, SimRequests: s.Requests, SimErrs: s.Errors}
		for _, m := range Metrics {
			r.Figures = append(r.Figures, Figure{Live: m.Value(l), Sim: m.Value(s)})
		}
		rows = append(rows, r)
	}
	return rows
}

// RenderComparison writes rows as a table: per level the requests (and errors) of both runs,
// then for each metric the live and simulated figures and the simulator's error in %.
func RenderComparison(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head1 := []string{"", "requests", ""}
	head2 := []string{"level", "live", "sim"}
	for _, m := range Metrics {
		head1 = append(head1, m.Name+" ms", "", "")
		head2 = append(head2, "live", "sim", "diff")
	}
	fmt.Fprintln(tw, strings.Join(head1, "\t")+"\t")
	fmt.Fprintln(tw, strings.Join(head2, "\t")+"\t")
	count := func(n, errs int) string {
		if errs == 0 {
			return strconv.Itoa(n)
		}
		return fmt.Sprintf("%d (%d errs)", n, errs)
	}
	for _, r := range rows {
		cells := []string{r.Label, count(r.LiveRequests, r.LiveErrs), count(r.SimRequests, r.SimErrs)}
		for _, f := range r.Figures {
			cells = append(cells, ms(f.Live), ms(f.Sim), pct(f.DiffPct()))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	return tw.Flush()
}

// ms formats milliseconds with three significant figures.
func ms(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// pct formats a signed percentage; "-" for NaN.
func pct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", v)
}
