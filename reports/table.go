package reports

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// RenderTable writes r as plain text for a terminal: a line naming the run, then one row per
// level with requests, errors, TTFT mean/P50/P95/P99, TPOT mean/P50/P95, ITL P95, E2E
// mean/P50/P95 (all ms; the ITL mean, close to the TPOT mean, is in the other formats),
// request and output-token throughput (req/s, tok/s), cache hit rate and, when an SLO was given, goodput.
// Columns are aligned and fit 120 columns for realistic values. Below it: error kinds per
// level with errors, client-side queueing for open-loop levels, and the simulator's metrics
// when present. Null values print as "-".
func RenderTable(w io.Writer, r *Results) error {
	var b strings.Builder
	b.WriteString(titleLine(r))
	b.WriteString("\n\n")

	withGoodput := slices.ContainsFunc(r.Levels, func(l Level) bool { return l.Goodput != nil })
	main := table{cols: []column{
		{name: "level", left: true},
		{name: "reqs"}, {name: "errs"},
		{group: "TTFT ms", name: "mean"}, {group: "TTFT ms", name: "p50"}, {group: "TTFT ms", name: "p95"}, {group: "TTFT ms", name: "p99"},
		{group: "TPOT ms", name: "mean"}, {group: "TPOT ms", name: "p50"}, {group: "TPOT ms", name: "p95"},
		{group: "ITL ms", name: "p95"},
		{group: "E2E ms", name: "mean"}, {group: "E2E ms", name: "p50"}, {group: "E2E ms", name: "p95"},
		{group: "throughput", name: "req/s"}, {group: "throughput", name: "tok/s"},
		{name: "cache"},
	}}
	if withGoodput {
		main.cols = append(main.cols, column{name: "good"})
	}
	for i := range r.Levels {
		l := &r.Levels[i]
		row := []string{
			l.Label, strconv.Itoa(l.Requests), strconv.Itoa(l.Errors),
			num(l.TTFTMs.Mean), num(l.TTFTMs.P50), num(l.TTFTMs.P95), num(l.TTFTMs.P99),
			num(l.TPOTMs.Mean), num(l.TPOTMs.P50), num(l.TPOTMs.P95),
			num(l.ITLMs.P95),
			num(l.E2EMs.Mean), num(l.E2EMs.P50), num(l.E2EMs.P95),
			num(l.Throughput.ReqS), num(l.Throughput.OutputTokS),
			pct(l.CacheHitRate),
		}
		if withGoodput {
			row = append(row, pct(l.Goodput))
		}
		main.rows = append(main.rows, row)
	}
	main.write(&b)

	for i := range r.Levels {
		l := &r.Levels[i]
		if l.Errors == 0 {
			continue
		}
		kinds := make([]string, 0, len(l.ErrorsByKind))
		for k := range l.ErrorsByKind {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		fmt.Fprintf(&b, "\nerrors %s:", l.Label)
		for _, k := range kinds {
			fmt.Fprintf(&b, " %s=%d", k, l.ErrorsByKind[k])
		}
	}
	if slices.ContainsFunc(r.Levels, func(l Level) bool { return l.Errors > 0 }) {
		b.WriteString("\n")
	}

	if slices.ContainsFunc(r.Levels, func(l Level) bool { return l.QueueMs != nil }) {
		b.WriteString("\nclient-side queueing (open loop; not included in TTFT/E2E)\n")
		q := table{cols: []column{{name: "level", left: true},
			{group: "queue ms", name: "mean"}, {group: "queue ms", name: "p50"},
			{group: "queue ms", name: "p95"}, {group: "queue ms", name: "p99"},
			{group: "queue ms", name: "max"}}}
		for _, l := range r.Levels {
			if s := l.QueueMs; s != nil {
				q.rows = append(q.rows, []string{l.Label, num(s.Mean), num(s.P50), num(s.P95), num(s.P99), num(s.Max)})
			}
		}
		q.write(&b)
	}

	if slices.ContainsFunc(r.Levels, func(l Level) bool { return l.Sim != nil }) {
		b.WriteString("\nsimulator\n")
		s := table{cols: []column{{name: "level", left: true},
			{group: "prefix match", name: "predicted"}, {group: "prefix match", name: "cache hit"},
			{group: "prefix match", name: "sglang hit"},
			{name: "load spread"},
			{group: "engine queue ms", name: "p50"}, {group: "engine queue ms", name: "p95"},
			{group: "engine queue ms", name: "p99"}}}
		// With a host KV tier (HiCache) the cache hits split into GPU and host.
		tiers := slices.ContainsFunc(r.Levels, func(l Level) bool { return l.Sim != nil && l.Sim.HostCacheHitRate != nil })
		if tiers {
			s.cols = slices.Insert(s.cols, 3, column{group: "prefix match", name: "gpu hit"}, column{group: "prefix match", name: "host hit"})
		}
		for _, l := range r.Levels {
			if m := l.Sim; m != nil {
				p := m.PredictedMatchRate
				row := []string{l.Label, pct(&p), pct(l.CacheHitRate), pct(l.SGLangCacheHitRate),
					strconv.FormatFloat(m.LoadSpread, 'f', 2, 64),
					num(m.QueueDelayMs.P50), num(m.QueueDelayMs.P95), num(m.QueueDelayMs.P99)}
				if tiers {
					row = slices.Insert(row, 3, pct(m.GPUCacheHitRate), pct(m.HostCacheHitRate))
				}
				s.rows = append(s.rows, row)
			}
		}
		s.write(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// titleLine names the run: tool, workload, seed, version, then target or start time.
func titleLine(r *Results) string {
	m := &r.Meta
	parts := []string{m.Tool, "workload=" + m.Workload.Name, "seed=" + strconv.FormatInt(m.Seed, 10)}
	if m.Version != "" {
		parts = append(parts, "version="+m.Version)
	}
	if m.Target != nil {
		parts = append(parts, "target="+*m.Target)
	}
	if m.Started != nil {
		parts = append(parts, "started="+m.Started.UTC().Format("2006-01-02T15:04:05Z07:00"))
	}
	return strings.Join(parts, "  ")
}

// num formats a non-negative value with about four significant digits: 2 decimals below 10,
// 1 below 1000, none above.
func num(v float64) string {
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 1000:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

// pct formats a fraction as a percentage with one decimal (100% without); nil prints "-".
func pct(v *float64) string {
	if v == nil {
		return "-"
	}
	s := strconv.FormatFloat(*v*100, 'f', 1, 64)
	if s == "100.0" {
		s = "100" // keeps the column one character narrower
	}
	return s + "%"
}

// column is one column of a text table. Adjacent columns with the same non-empty group share
// a header above their names and are separated by one space instead of two.
type column struct {
	group string
	name  string
	left  bool // left-align (default right)
}

// table is a plain text table; later renderers (md, csv) reuse its columns and rows.
type table struct {
	cols []column
	rows [][]string
}

func (t *table) sep(i int) string { // separator before column i > 0
	if g := t.cols[i].group; g != "" && g == t.cols[i-1].group {
		return " "
	}
	return "  "
}

func (t *table) write(b *strings.Builder) {
	width := make([]int, len(t.cols))
	hasGroups := false
	for i, c := range t.cols {
		width[i] = utf8.RuneCountInString(c.name)
		hasGroups = hasGroups || c.group != ""
		for _, row := range t.rows {
			width[i] = max(width[i], utf8.RuneCountInString(row[i]))
		}
	}
	// Widen the first column of a group whose header is wider than its columns.
	type span struct{ from, to, w int } // columns [from,to), width incl. inner separators
	var spans []span
	for i := 0; i < len(t.cols); {
		j := i + 1
		for j < len(t.cols) && t.cols[i].group != "" && t.cols[j].group == t.cols[i].group {
			j++
		}
		w := 0
		for k := i; k < j; k++ {
			if k > i {
				w += len(t.sep(k))
			}
			w += width[k]
		}
		if gw := utf8.RuneCountInString(t.cols[i].group); gw > w {
			width[i] += gw - w
			w = gw
		}
		spans = append(spans, span{i, j, w})
		i = j
	}

	line := func(cells func(i int) string, left func(i int) bool) {
		var l strings.Builder
		for i := range t.cols {
			if i > 0 {
				l.WriteString(t.sep(i))
			}
			l.WriteString(pad(cells(i), width[i], left(i)))
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteByte('\n')
	}
	if hasGroups {
		var l strings.Builder
		for n, s := range spans {
			if n > 0 {
				l.WriteString(t.sep(s.from))
			}
			g := t.cols[s.from].group
			gw := utf8.RuneCountInString(g)
			left := (s.w - gw) / 2
			l.WriteString(strings.Repeat(" ", left) + g + strings.Repeat(" ", s.w-gw-left))
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteByte('\n')
	}
	line(func(i int) string { return t.cols[i].name }, func(i int) bool { return t.cols[i].left })
	for _, row := range t.rows {
		line(func(i int) string { return row[i] }, func(i int) bool { return t.cols[i].left })
	}
}

func pad(s string, w int, left bool) string {
	n := w - utf8.RuneCountInString(s)
	if n <= 0 {
		return s
	}
	if left {
		return s + strings.Repeat(" ", n)
	}
	return strings.Repeat(" ", n) + s
}
