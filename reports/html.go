package reports

import (
	"bytes"
	"html/template"
	"io"
	"slices"
	"strconv"
	"strings"
)

// CompareMode says whether and how an HTML page compares its first two runs.
type CompareMode int

const (
	// NoCompare shows the runs side by side only.
	NoCompare CompareMode = iota
	// CompareImprovement starts the page with B's improvement over A (ImprovementRule):
	// two configurations, the better one wanted.
	CompareImprovement
	// CompareError starts it with B's error relative to A (ErrorRule): a prediction (sim)
	// against a measurement (live), where a sign of "better" would mislead.
	CompareError
)

// RenderHTML writes runs as one self-contained HTML page that loads nothing from the network
// (no scripts, styles inline, charts as inline SVG made with gonum/plot): TTFT P95 and TPOT P95
// against concurrency (or rate, for open-loop-only runs) with one line per run, the TTFT CDFs
// of the runs that have Records (one line per level, every CDF on the same x axis), and each
// run's level table. With a CompareMode and two runs it starts with a summary — per level, the
// headline metrics of both runs and B's difference — then the charts (both runs' CDFs on one:
// a level's colour, solid for A, dashed for B), then, folded, every compared metric, the
// settings both runs record with different values, and the settings only one run records.
// The page fits a 1,280-px window without scrolling sideways, and a phone's: tables wrap their
// headers and long values, and a table wider than the window scrolls inside its own box.
func RenderHTML(w io.Writer, runs []Run, mode CompareMode) error {
	page := htmlPage{Title: "pdrouter report"}
	names := make([]string, len(runs))
	for i, run := range runs {
		names[i] = run.Name
	}
	if len(runs) > 0 {
		page.Title += ": " + strings.Join(names, " vs ")
	}
	comparing := mode != NoCompare && len(runs) == 2
	if comparing {
		page.Summary, page.Compare, page.Settings, page.OneSided = compareTables(Compare(runs[0], runs[1]), mode)
	}
	if xLabel, x, ok := chartAxis(runs); ok {
		for _, ch := range []struct {
			id, title string
			metric    func(*Level) float64
		}{
			{"ttft-p95", "TTFT P95", func(l *Level) float64 { return l.TTFTMs.P95 }},
			{"tpot-p95", "TPOT P95", func(l *Level) float64 { return l.TPOTMs.P95 }},
		} {
			ss := loadSeries(runs, x, ch.metric)
			log2X := strings.HasPrefix(xLabel, "concurrency") && allPositive(ss)
			svg, err := lineChart(ch.title+" vs "+strings.Fields(xLabel)[0], xLabel, ch.title+" (ms)", ss,
				chartOpts{load: true, log2X: log2X})
			if err != nil {
				return err
			}
			page.Charts = append(page.Charts, htmlChart{ID: ch.id, Caption: ch.title + " (ms) per run", SVG: template.HTML(svg)})
		}
	}
	cdfs := make([][]series, len(runs))
	for i, run := range runs {
		cdfs[i] = cdfSeries(run)
	}
	shared := maxX(cdfs...) // one x axis for every CDF, so two runs' curves compare by eye
	if comparing && len(cdfs[0]) > 0 && len(cdfs[1]) > 0 {
		ss, na, nb := overlaidCDFs(runs, cdfs)
		svg, err := lineChart("TTFT CDF: "+na+" vs "+nb, "TTFT (ms)", "fraction of requests", ss,
			chartOpts{xMax: shared, styled: true, legendTopLeft: true})
		if err != nil {
			return err
		}
		page.Charts = append(page.Charts, htmlChart{ID: "ttft-cdf",
			Caption: "TTFT CDF, one colour per level: A = " + runs[0].Name + " solid, B = " + runs[1].Name + " dashed",
			SVG:     template.HTML(svg)})
	} else {
		for i, run := range runs {
			if len(cdfs[i]) == 0 {
				continue
			}
			svg, err := lineChart("TTFT CDF: "+run.Name, "TTFT (ms)", "fraction of requests", cdfs[i], chartOpts{xMax: shared})
			if err != nil {
				return err
			}
			page.Charts = append(page.Charts, htmlChart{ID: "ttft-cdf-" + itoa(i),
				Caption: "TTFT CDF of " + run.Name + ", one line per level", SVG: template.HTML(svg)})
		}
	}
	for i, run := range runs {
		hr := htmlRun{Name: run.Name, Title: titleLine(run.Results), Table: htmlLevelTable(run.Results)}
		hr.Table.ID = "levels-" + itoa(i)
		for i := range run.Results.Levels {
			l := &run.Results.Levels[i]
			if l.Errors > 0 {
				hr.Errors = append(hr.Errors, l.Label+": "+errorKinds(l))
			}
		}
		page.Runs = append(page.Runs, hr)
	}
	var buf bytes.Buffer
	if err := htmlTmpl.Execute(&buf, page); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// overlaidCDFs merges two runs' CDF series into one chart's: a level keeps its colour in both
// runs (the colour of its position in A's levels, then B's own levels), A solid, B dashed.
// The legend names each level once, in its colour; the caption says which dash is which run.
func overlaidCDFs(runs []Run, cdfs [][]series) (ss []series, na, nb string) {
	na, nb = "A", "B"
	if runs[0].Name != "" && runs[0].Name != runs[1].Name {
		na, nb = runs[0].Name, runs[1].Name
	}
	colour := map[string]int{}
	for _, set := range cdfs[:2] {
		for _, s := range set {
			if _, ok := colour[s.name]; !ok {
				colour[s.name] = len(colour)
			}
		}
	}
	named := map[string]bool{}
	for r := range 2 {
		for _, s := range cdfs[r] {
			ss = append(ss, series{name: s.name, xys: s.xys, colour: colour[s.name], dash: r, noLegend: named[s.name]})
			named[s.name] = true
		}
	}
	return ss, na, nb
}

// summaryKeys are the headline metrics of the summary table.
var summaryKeys = []string{"ttft_ms_p50", "ttft_ms_p95", "tpot_ms_p50", "tpot_ms_p95"}

// compareTables builds the summary (one row per level: each headline metric as "A → B" and
// B's difference), the comparison of every metric, the table of settings both runs record with
// different values, and that of settings only one run records (nil when there are none). The
// comparison is long rather than wide, one row per level and metric (level, metric, A, B, and
// "impr" or "error" per mode, with the rule in the caption), so it fits a 1,280-px window
// whatever the runs' names and however many metrics.
func compareTables(c Comparison, mode CompareMode) (summary, cmp, settings, oneSided *htmlTable) {
	rule, col := ImprovementRule, "impr"
	if mode == CompareError {
		rule, col = ErrorRule, "error"
	}
	na, nb := c.names()
	_, heads := c.rows(summaryKeys, mode == CompareError)
	// Its caption is a paragraph above its box, so that it wraps to the window on a phone
	// while the table scrolls inside the box.
	summary = &htmlTable{ID: "summary", Class: "summary", Above: "summary: " + c.title() + ", each cell " + na + " → " + nb + " (" + rule + ")"}
	top := []htmlHead{{Name: "level"}}
	for _, k := range summaryKeys {
		top = append(top, htmlHead{Name: metricByKey(k).Name})
	}
	summary.Head = [][]htmlHead{top}
	for _, row := range heads {
		cells := []string{row[0]}
		for j := range summaryKeys {
			cells = append(cells, row[1+3*j]+" → "+row[2+3*j]+" ("+row[3+3*j]+")")
		}
		summary.Rows = append(summary.Rows, htmlRow{Cells: cells})
	}
	_, wide := c.rows(mdCompareKeys, mode == CompareError)
	cmp = &htmlTable{ID: "compare", Class: "long", Caption: "compare " + c.title() + " (" + rule + ")",
		Head: [][]htmlHead{{{Name: "level"}, {Name: "metric"}, {Name: na}, {Name: nb}, {Name: col}}}}
	for _, row := range wide {
		for j, k := range mdCompareKeys {
			level := ""
			if j == 0 {
				level = row[0]
			}
			cmp.Rows = append(cmp.Rows, htmlRow{First: j == 0,
				Cells: []string{level, metricByKey(k).Name, row[1+3*j], row[2+3*j], row[3+3*j]}})
		}
	}
	both, one := c.splitSettings()
	settingsTable := func(id, caption string, d []SettingDiff) *htmlTable {
		if len(d) == 0 {
			return nil
		}
		t := &htmlTable{ID: id, Class: "fit", Caption: caption, Head: [][]htmlHead{{{Name: "setting"}, {Name: na}, {Name: nb}}}}
		for _, x := range d {
			t.Rows = append(t.Rows, htmlRow{Cells: []string{x.Key, x.A, x.B}})
		}
		return t
	}
	return summary, cmp, settingsTable("settings", "settings both runs record, with different values", both),
		settingsTable("settings-one", "settings only one run records", one)
}

// htmlLevelTable is a run's level table for the page: the columns of the Markdown table plus
// the means, under two header rows (metric, then statistic), so every header is a word or two
// and the table fits a 1,280-px window.
func htmlLevelTable(r *Results) htmlTable {
	withGoodput := slices.ContainsFunc(r.Levels, func(l Level) bool { return l.Goodput != nil })
	withSGLang := slices.ContainsFunc(r.Levels, func(l Level) bool { return l.SGLangCacheHitRate != nil })
	single := func(name string) htmlHead { return htmlHead{Name: name, Rowspan: 2} }
	top := []htmlHead{single("level"), single("reqs"), single("errs"),
		{Name: "TTFT ms", Colspan: 4}, {Name: "TPOT ms", Colspan: 3}, {Name: "ITL ms", Colspan: 2},
		{Name: "E2E ms", Colspan: 3}, {Name: "throughput", Colspan: 2}, single("cache hit")}
	sub := []htmlHead{{Name: "p50"}, {Name: "p95"}, {Name: "p99"}, {Name: "mean"},
		{Name: "p50"}, {Name: "p95"}, {Name: "mean"}, {Name: "p95"}, {Name: "mean"},
		{Name: "p50"}, {Name: "p95"}, {Name: "mean"}, {Name: "req/s"}, {Name: "out tok/s"}}
	if withSGLang {
		top = append(top, single("sglang hit"))
	}
	if withGoodput {
		top = append(top, single("goodput"))
	}
	t := htmlTable{Class: "levels", Head: [][]htmlHead{top, sub}}
	for i := range r.Levels {
		l := &r.Levels[i]
		row := []string{l.Label, strconv.Itoa(l.Requests), strconv.Itoa(l.Errors),
			num(l.TTFTMs.P50), num(l.TTFTMs.P95), num(l.TTFTMs.P99), num(l.TTFTMs.Mean),
			num(l.TPOTMs.P50), num(l.TPOTMs.P95), num(l.TPOTMs.Mean),
			num(l.ITLMs.P95), num(l.ITLMs.Mean),
			num(l.E2EMs.P50), num(l.E2EMs.P95), num(l.E2EMs.Mean),
			num(l.Throughput.ReqS), num(l.Throughput.OutputTokS), pct(l.CacheHitRate)}
		if withSGLang {
			row = append(row, pct(l.SGLangCacheHitRate))
		}
		if withGoodput {
			row = append(row, pct(l.Goodput))
		}
		t.Rows = append(t.Rows, htmlRow{Cells: row})
	}
	return t
}

func itoa(i int) string { return strconv.Itoa(i) }

type htmlPage struct {
	Title    string
	Summary  *htmlTable
	Compare  *htmlTable
	Settings *htmlTable
	OneSided *htmlTable
	Charts   []htmlChart
	Runs     []htmlRun
}

type htmlChart struct {
	ID, Caption string
	SVG         template.HTML
}

// htmlTable is one table of the page: ID names its box (the browser test measures it), Class
// picks its layout (fit: fixed columns that wrap long values; long: the comparison; levels).
type htmlTable struct {
	ID, Class string
	Caption   string
	Above     string       // a caption set above the table's box rather than in it
	Head      [][]htmlHead // header rows
	Rows      []htmlRow
}

type htmlHead struct {
	Name             string
	Colspan, Rowspan int // 0 means 1
}

type htmlRow struct {
	First bool // starts a group of rows (the comparison's levels)
	Cells []string
}

type htmlRun struct {
	Name, Title string
	Table       htmlTable
	Errors      []string
}

var htmlTmpl = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; overflow-wrap: anywhere; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.scroll { max-width: 100%; overflow-x: auto; margin: 0.5rem 0 1rem; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: 600; padding-bottom: 0.3rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.45rem; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; white-space: normal; text-align: center; }
th:first-child, td:first-child { text-align: left; }
table.fit { width: 100%; table-layout: fixed; }
table.fit col.key { width: 30%; }
table.fit td { white-space: normal; text-align: left; overflow-wrap: anywhere; }
table.long td:nth-child(2) { text-align: left; }
table.long tr.first td { border-top: 2px solid #999; }
table.summary td, table.summary th { white-space: normal; overflow-wrap: normal; }
table.summary td:first-child { white-space: nowrap; }
details { margin: 0.5rem 0; } summary { cursor: pointer; font-weight: 600; }
p.above { font-weight: 600; margin: 0.5rem 0 0.3rem; }
.charts { display: flex; flex-wrap: wrap; gap: 1rem; }
figure { margin: 0; } figcaption { font-size: 0.9rem; color: #555; max-width: 36rem; }
svg { max-width: 100%; height: auto; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{with .Summary}}{{template "table" .}}{{end}}
<div class="charts">
{{range .Charts}}<figure id="{{.ID}}">
{{.SVG}}
<figcaption>{{.Caption}}</figcaption>
</figure>
{{end}}</div>
{{with .Compare}}<details><summary>every compared metric, per level</summary>
{{template "table" .}}</details>
{{end}}{{with .Settings}}<details><summary>{{len .Rows}} settings both runs record, with different values</summary>
{{template "table" .}}</details>
{{end}}{{with .OneSided}}<details><summary>{{len .Rows}} settings only one run records</summary>
{{template "table" .}}</details>
{{end}}{{range .Runs}}<h2>{{.Name}}</h2>
<p>{{.Title}}</p>
{{template "table" .Table}}
{{range .Errors}}<p>errors {{.}}</p>
{{end}}{{end}}</body>
</html>
{{define "table"}}{{with .Above}}<p class="above">{{.}}</p>
{{end}}<div class="scroll"{{with .ID}} id="{{.}}"{{end}}><table{{with .Class}} class="{{.}}"{{end}}>
{{with .Caption}}<caption>{{.}}</caption>
{{end}}{{if eq .Class "fit"}}<colgroup><col class="key"><col><col></colgroup>
{{end}}<thead>{{range .Head}}<tr>{{range .}}<th{{with .Colspan}} colspan="{{.}}"{{end}}{{with .Rowspan}} rowspan="{{.}}"{{end}}>{{.Name}}</th>{{end}}</tr>{{end}}</thead>
<tbody>
{{range .Rows}}<tr{{if .First}} class="first"{{end}}>{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody>
</table></div>
{{end}}`))
