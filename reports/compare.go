package reports

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Metric is one quantity a comparison reports for each level.
type Metric struct {
	// Key names the metric in csv and json output, e.g. "ttft_ms_p95".
	Key string
	// Name labels it for people, e.g. "TTFT p95 ms".
	Name string
	// LowerIsBetter is true for latencies, false for throughput, cache hit rate and goodput.
	LowerIsBetter bool
	// Value returns the metric of a level, or nil when the level has none.
	Value func(*Level) *float64
}

func statOf(f func(*Level) float64) func(*Level) *float64 {
	return func(l *Level) *float64 { v := f(l); return &v }
}

// CompareMetrics lists the metrics of a comparison in output order.
var CompareMetrics = []Metric{
	{"ttft_ms_p50", "TTFT p50 ms", true, statOf(func(l *Level) float64 { return l.TTFTMs.P50 })},
	{"ttft_ms_p95", "TTFT p95 ms", true, statOf(func(l *Level) float64 { return l.TTFTMs.P95 })},
	{"ttft_ms_p99", "TTFT p99 ms", true, statOf(func(l *Level) float64 { return l.TTFTMs.P99 })},
	{"tpot_ms_p50", "TPOT p50 ms", true, statOf(func(l *Level) float64 { return l.TPOTMs.P50 })},
	{"tpot_ms_p95", "TPOT p95 ms", true, statOf(func(l *Level) float64 { return l.TPOTMs.P95 })},
	{"itl_ms_p95", "ITL p95 ms", true, statOf(func(l *Level) float64 { return l.ITLMs.P95 })},
	{"e2e_ms_p50", "E2E p50 ms", true, statOf(func(l *Level) float64 { return l.E2EMs.P50 })},
	{"e2e_ms_p95", "E2E p95 ms", true, statOf(func(l *Level) float64 { return l.E2EMs.P95 })},
	{"req_s", "req/s", false, statOf(func(l *Level) float64 { return l.Throughput.ReqS })},
	{"output_tok_s", "out tok/s", false, statOf(func(l *Level) float64 { return l.Throughput.OutputTokS })},
	{"cache_hit_rate", "cache hit", false, func(l *Level) *float64 { return l.CacheHitRate }},
	{"goodput", "goodput", false, func(l *Level) *float64 { return l.Goodput }},
}

// tableCompareKeys are the metrics the text table shows (it must fit 100 columns).
var tableCompareKeys = []string{"ttft_ms_p50", "ttft_ms_p95", "tpot_ms_p95", "output_tok_s"}

// mdCompareKeys are the metrics the Markdown and HTML comparisons show.
var mdCompareKeys = []string{"ttft_ms_p50", "ttft_ms_p95", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p95",
	"e2e_ms_p95", "req_s", "output_tok_s", "goodput"}

func metricByKey(key string) Metric {
	for _, m := range CompareMetrics {
		if m.Key == key {
			return m
		}
	}
	panic("reports: unknown metric " + key)
}

// ImprovementRule is the one sign rule of every comparison, printed beside it.
const ImprovementRule = "impr: B over A in %; positive = B better (lower latency, higher throughput)"

// ErrorRule is the sign rule of a comparison of a prediction B against a measurement A (live
// vs sim), which reports B's error, not an improvement.
const ErrorRule = "error: B relative to A in %, (B − A) / A; positive = B higher"

// Improvement returns how much better b is than a, in percent of a: (a−b)/a·100 when lower is
// better, (b−a)/a·100 otherwise; positive means b is better. Nil when a is 0.
func Improvement(a, b float64, lowerIsBetter bool) *float64 {
	if a == 0 {
		return nil
	}
	v := (b - a) / a * 100
	if lowerIsBetter {
		v = -v
	}
	return &v
}

// ErrorPct returns b's error relative to a in percent, (b − a) / a · 100 (ErrorRule); nil
// when a is 0.
func ErrorPct(a, b float64) *float64 {
	if a == 0 {
		return nil
	}
	v := (b - a) / a * 100
	return &v
}

// ComparedLevel pairs the levels of two runs that share a label; A or B is nil when only one
// run has the level.
type ComparedLevel struct {
	Label string
	A, B  *Level
}

// Comparison pairs two runs level by level (SPEC §6: by label), in A's level order, then the
// levels only B has.
type Comparison struct {
	A, B   Run
	Levels []ComparedLevel
}

// Compare pairs the levels of a and b by label.
func Compare(a, b Run) Comparison {
	c := Comparison{A: a, B: b}
	for i := range a.Results.Levels {
		la := &a.Results.Levels[i]
		c.Levels = append(c.Levels, ComparedLevel{Label: la.Label, A: la, B: b.Results.Level(la.Label)})
	}
	for i := range b.Results.Levels {
		lb := &b.Results.Levels[i]
		if a.Results.Level(lb.Label) == nil {
			c.Levels = append(c.Levels, ComparedLevel{Label: lb.Label, B: lb})
		}
	}
	return c
}

// values returns metric m of both sides and the improvement; nil where unknown.
func (cl *ComparedLevel) values(m Metric) (a, b, impr *float64) {
	if cl.A != nil {
		a = m.Value(cl.A)
	}
	if cl.B != nil {
		b = m.Value(cl.B)
	}
	if a != nil && b != nil {
		impr = Improvement(*a, *b, m.LowerIsBetter)
	}
	return a, b, impr
}

// names returns the column names of the two runs (A and B when they are equal or empty).
func (c *Comparison) names() (string, string) {
	if c.A.Name == "" || c.A.Name == c.B.Name {
		return "A", "B"
	}
	return c.A.Name, c.B.Name
}

// RenderCompare writes the comparison of runs a (baseline) and b in format f: per level, each
// metric of A and B side by side with B's improvement over A in % (positive = B better).
// table shows TTFT p50/p95, TPOT p95 and output tok/s; md one metric table per level with
// more metrics; csv one row per level and metric; json every metric; html a page with the
// comparison, both runs' tables and charts.
func RenderCompare(w io.Writer, f Format, a, b Run) error {
	if _, err := ParseFormat(string(f)); err != nil {
		return err
	}
	c := Compare(a, b)
	switch f {
	case FormatHTML:
		return RenderHTML(w, []Run{a, b}, CompareImprovement)
	case FormatCSV:
		return c.writeCSV(w)
	case FormatJSON:
		return c.writeJSON(w)
	case FormatMarkdown:
		var s strings.Builder
		fmt.Fprintf(&s, "### compare: %s\n\n%s\n", mdEscape(c.title()), ImprovementRule)
		na, nb := c.names()
		if both, one := c.splitSettings(); len(both)+len(one) > 0 {
			s.WriteString("\nsettings that differ:\n\n")
			rows := make([][]string, len(both))
			for i, x := range both {
				rows[i] = []string{x.Key, x.A, x.B}
			}
			if len(rows) > 0 {
				writeMDTable(&s, []string{"setting", na, nb}, rows)
			}
			if len(one) > 0 {
				s.WriteString("\n" + oneSidedNote(len(one)) + "\n")
			}
		}
		for i := range c.Levels {
			cl := &c.Levels[i]
			fmt.Fprintf(&s, "\n**%s**\n\n", mdEscape(cl.Label))
			var rows [][]string
			for _, k := range mdCompareKeys {
				m := metricByKey(k)
				a, b, impr := cl.values(m)
				if k == "goodput" || k == "cache_hit_rate" {
					rows = append(rows, []string{m.Name, pct(a), pct(b), signedPct(impr)})
					continue
				}
				rows = append(rows, []string{m.Name, optNum(a), optNum(b), signedPct(impr)})
			}
			writeMDTable(&s, []string{"metric", na, nb, "impr"}, rows)
		}
		_, err := io.WriteString(w, s.String())
		return err
	}
	var s strings.Builder
	s.WriteString(c.title())
	s.WriteString("\n\n")
	c.writeSettingsText(&s)
	na, nb := c.names()
	t := table{cols: []column{{name: "level", left: true}}}
	for _, k := range tableCompareKeys {
		m := metricByKey(k)
		t.cols = append(t.cols, column{group: m.Name, name: na}, column{group: m.Name, name: nb},
			column{group: m.Name, name: "impr"})
	}
	for i := range c.Levels {
		cl := &c.Levels[i]
		row := []string{cl.Label}
		for _, k := range tableCompareKeys {
			a, b, impr := cl.values(metricByKey(k))
			row = append(row, optNum(a), optNum(b), signedPct(impr))
		}
		t.rows = append(t.rows, row)
	}
	t.write(&s)
	s.WriteString("\n" + ImprovementRule + "\n")
	_, err := io.WriteString(w, s.String())
	return err
}

// Settings lists the settings the two runs differ in (DiffSettings).
func (c *Comparison) Settings() []SettingDiff { return DiffSettings(c.A.Results, c.B.Results) }

// splitSettings splits the settings that differ into those both runs record (with different
// values) and those only one run records: a live run records router.* and server_info.*, a
// simulated one cluster.*, and most of those have no counterpart (serve's listener and TLS,
// the simulator's engine model), so they are listed apart, after the ones that matter.
func (c *Comparison) splitSettings() (both, one []SettingDiff) {
	for _, x := range c.Settings() {
		if x.A == "-" || x.B == "-" {
			one = append(one, x)
		} else {
			both = append(both, x)
		}
	}
	return both, one
}

// oneSidedNote is the line that stands for the settings only one run records, in the text and
// markdown comparisons (the HTML report folds them; JSON lists them).
func oneSidedNote(n int) string {
	return fmt.Sprintf("%d more settings only one run records (--format html folds them, --format json lists them)", n)
}

// writeSettingsText writes "settings that differ" as aligned lines "key  A → B" (those both
// runs record), then how many only one run records, or that none differ.
func (c *Comparison) writeSettingsText(s *strings.Builder) {
	both, one := c.splitSettings()
	if len(both)+len(one) == 0 {
		s.WriteString("settings: no recorded setting differs\n\n")
		return
	}
	if len(both) == 0 {
		s.WriteString("settings: none both runs record differs\n")
	} else {
		width := 0
		for _, x := range both {
			width = max(width, len(x.Key))
		}
		s.WriteString("settings that differ (A → B):\n")
		for _, x := range both {
			fmt.Fprintf(s, "  %-*s  %s → %s\n", width, x.Key, x.A, x.B)
		}
	}
	if len(one) > 0 {
		s.WriteString("  " + oneSidedNote(len(one)) + "\n")
	}
	s.WriteString("\n")
}

// title names both runs.
func (c *Comparison) title() string {
	na, nb := c.names()
	return fmt.Sprintf("A=%s (%s)  B=%s (%s)", na, runSummary(c.A.Results), nb, runSummary(c.B.Results))
}

// runSummary is a short description of a run: tool, workload and seed.
func runSummary(r *Results) string {
	return fmt.Sprintf("%s workload=%s seed=%d", r.Meta.Tool, r.Meta.Workload.Name, r.Meta.Seed)
}

// rows returns the comparison as columns "level, <metric> A, <metric> B, <metric> impr, …";
// with errMode the third column of each metric is B's error relative to A (ErrorPct).
func (c *Comparison) rows(keys []string, errMode bool) ([]string, [][]string) {
	na, nb := c.names()
	cols := []string{"level"}
	for _, k := range keys {
		m := metricByKey(k)
		cols = append(cols, m.Name+" "+na, m.Name+" "+nb, m.Name+" impr")
	}
	var rows [][]string
	for i := range c.Levels {
		cl := &c.Levels[i]
		row := []string{cl.Label}
		for _, k := range keys {
			m := metricByKey(k)
			a, b, impr := cl.values(m)
			if errMode {
				impr = nil
				if a != nil && b != nil {
					impr = ErrorPct(*a, *b)
				}
			}
			if k == "cache_hit_rate" || k == "goodput" {
				row = append(row, pct(a), pct(b), signedPct(impr))
				continue
			}
			row = append(row, optNum(a), optNum(b), signedPct(impr))
		}
		rows = append(rows, row)
	}
	return cols, rows
}

func (c *Comparison) writeCSV(w io.Writer) error {
	var buf bytes.Buffer
	cw := csv.NewWriter(&buf)
	na, nb := c.names()
	if err := cw.Write([]string{"level", "metric", na, nb, "improvement_pct"}); err != nil {
		return err
	}
	for i := range c.Levels {
		cl := &c.Levels[i]
		for _, m := range CompareMetrics {
			a, b, impr := cl.values(m)
			if err := cw.Write([]string{cl.Label, m.Key, optFloat(a), optFloat(b), optFloat(impr)}); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// compareJSON is the json form of a comparison.
type compareJSON struct {
	A        string             `json:"a"`
	B        string             `json:"b"`
	Settings []SettingDiff      `json:"settings"`
	Levels   []compareLevelJSON `json:"levels"`
}

type compareLevelJSON struct {
	Label   string              `json:"label"`
	Metrics []compareMetricJSON `json:"metrics"`
}

type compareMetricJSON struct {
	Metric         string   `json:"metric"`
	A              *float64 `json:"a"`
	B              *float64 `json:"b"`
	ImprovementPct *float64 `json:"improvement_pct"`
}

func (c *Comparison) writeJSON(w io.Writer) error {
	out := compareJSON{A: c.A.Name, B: c.B.Name, Settings: c.Settings(), Levels: []compareLevelJSON{}}
	if out.Settings == nil {
		out.Settings = []SettingDiff{}
	}
	for i := range c.Levels {
		cl := &c.Levels[i]
		lj := compareLevelJSON{Label: cl.Label}
		for _, m := range CompareMetrics {
			a, b, impr := cl.values(m)
			lj.Metrics = append(lj.Metrics, compareMetricJSON{Metric: m.Key, A: a, B: b, ImprovementPct: impr})
		}
		out.Levels = append(out.Levels, lj)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func optNum(v *float64) string {
	if v == nil {
		return "-"
	}
	return num(*v)
}

// signedPct formats an improvement in percent with a sign and one decimal; nil prints "-".
func signedPct(v *float64) string {
	if v == nil {
		return "-"
	}
	s := strconv.FormatFloat(*v, 'f', 1, 64)
	if s == "-0.0" {
		s = "0.0"
	}
	if !strings.HasPrefix(s, "-") && s != "0.0" {
		s = "+" + s
	}
	return s + "%"
}
