package reports

import (
	"bytes"
	"html/template"
	"io"
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
// against concurrency (or rate, for open-loop-only runs) with one line per run, a TTFT CDF per
// run that has Records (one line per level, every CDF on the same x axis), and each run's
// level table. With a CompareMode and two runs it starts with their comparison and the
// settings that differ. The page fits a 1,280-px window: wide tables scroll inside their own
// box with the level column pinned.
func RenderHTML(w io.Writer, runs []Run, mode CompareMode) error {
	page := htmlPage{Title: "pdrouter report"}
	names := make([]string, len(runs))
	for i, run := range runs {
		names[i] = run.Name
	}
	if len(runs) > 0 {
		page.Title += ": " + strings.Join(names, " vs ")
	}
	if mode != NoCompare && len(runs) == 2 {
		page.Compare, page.Settings = compareTables(Compare(runs[0], runs[1]), mode)
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
	for _, run := range runs {
		cols, rows := levelTable(run.Results)
		hr := htmlRun{Name: run.Name, Title: titleLine(run.Results), Table: htmlTable{Cols: cols, Rows: rows}}
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

// compareTables builds the comparison table (its third column per metric "impr" or "error",
// per mode, with the rule in the caption) and the table of settings that differ (nil when
// none do).
func compareTables(c Comparison, mode CompareMode) (cmp, settings *htmlTable) {
	rule, col := ImprovementRule, "impr"
	if mode == CompareError {
		rule, col = ErrorRule, "error"
	}
	_, rows := c.rows(mdCompareKeys, mode == CompareError)
	na, nb := c.names()
	cmp = &htmlTable{Caption: "compare " + c.title() + " (" + rule + ")",
		Groups: []htmlGroup{{Span: 1}}, Cols: []string{"level"}, Rows: rows}
	for _, k := range mdCompareKeys {
		cmp.Groups = append(cmp.Groups, htmlGroup{Name: metricByKey(k).Name, Span: 3})
		cmp.Cols = append(cmp.Cols, na, nb, col)
	}
	if d := c.Settings(); len(d) > 0 {
		settings = &htmlTable{Caption: "settings that differ", Cols: []string{"setting", na, nb}}
		for _, x := range d {
			settings.Rows = append(settings.Rows, []string{x.Key, x.A, x.B})
		}
	}
	return cmp, settings
}

func itoa(i int) string { return strconv.Itoa(i) }

type htmlPage struct {
	Title    string
	Compare  *htmlTable
	Settings *htmlTable
	Charts   []htmlChart
	Runs     []htmlRun
}

type htmlChart struct {
	ID, Caption string
	SVG         template.HTML
}

type htmlTable struct {
	Caption string
	Groups  []htmlGroup // optional header row above Cols
	Cols    []string
	Rows    [][]string
}

type htmlGroup struct {
	Name string
	Span int
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
caption { text-align: left; font-weight: 600; padding-bottom: 0.3rem; position: sticky; left: 0; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; position: sticky; left: 0; background: #fff; }
th { background: #f3f3f3; } th:first-child { background: #f3f3f3; }
.charts { display: flex; flex-wrap: wrap; gap: 1rem; }
figure { margin: 0; } figcaption { font-size: 0.9rem; color: #555; }
svg { max-width: 100%; height: auto; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{with .Compare}}{{template "table" .}}{{end}}
{{with .Settings}}{{template "table" .}}{{end}}
<div class="charts">
{{range .Charts}}<figure id="{{.ID}}">
{{.SVG}}
<figcaption>{{.Caption}}</figcaption>
</figure>
{{end}}</div>
{{range .Runs}}<h2>{{.Name}}</h2>
<p>{{.Title}}</p>
{{template "table" .Table}}
{{range .Errors}}<p>errors {{.}}</p>
{{end}}{{end}}</body>
</html>
{{define "table"}}<div class="scroll"><table>
{{with .Caption}}<caption>{{.}}</caption>
{{end}}<thead>{{with .Groups}}<tr>{{range .}}<th colspan="{{.Span}}">{{.Name}}</th>{{end}}</tr>{{end}}<tr>{{range .Cols}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody>
</table></div>
{{end}}`))
