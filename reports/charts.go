package reports

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// series is one line of a chart. colour and dash index palette and dashes when the chart is
// styled (chartOpts.styled); otherwise the series' position picks both.
type series struct {
	name         string
	xys          plotter.XYs
	colour, dash int
	noLegend     bool // drawn without a legend entry (another series' entry names its colour)
}

// palette colours the series of a chart in order (Okabe-Ito, readable by colour-blind people).
var palette = []color.RGBA{
	{0x00, 0x72, 0xb2, 0xff}, {0xd5, 0x5e, 0x00, 0xff}, {0x00, 0x9e, 0x73, 0xff}, {0xcc, 0x79, 0xa7, 0xff},
	{0xe6, 0x9f, 0x00, 0xff}, {0x56, 0xb4, 0xe9, 0xff}, {0xf0, 0xe4, 0x42, 0xff}, {0x00, 0x00, 0x00, 0xff},
}

// chartAxis returns the x axis of the "vs load" charts: concurrency when any run has a
// closed-loop level, else the open-loop rate; ok is false when no level has either.
func chartAxis(runs []Run) (label string, x func(*Level) (float64, bool), ok bool) {
	for _, run := range runs {
		for i := range run.Results.Levels {
			if run.Results.Levels[i].Concurrency != nil {
				return "concurrency (clients)", func(l *Level) (float64, bool) {
					if l.Concurrency == nil {
						return 0, false
					}
					return float64(*l.Concurrency), true
				}, true
			}
		}
	}
	for _, run := range runs {
		for i := range run.Results.Levels {
			if run.Results.Levels[i].Rate != nil {
				return "rate (requests/s)", func(l *Level) (float64, bool) {
					if l.Rate == nil {
						return 0, false
					}
					return *l.Rate, true
				}, true
			}
		}
	}
	return "", nil, false
}

// loadSeries returns one series per run: metric against the chart axis, sorted by x.
func loadSeries(runs []Run, x func(*Level) (float64, bool), metric func(*Level) float64) []series {
	out := make([]series, 0, len(runs))
	for _, run := range runs {
		s := series{name: run.Name}
		for i := range run.Results.Levels {
			l := &run.Results.Levels[i]
			if xv, ok := x(l); ok {
				s.xys = append(s.xys, plotter.XY{X: xv, Y: metric(l)})
			}
		}
		slices.SortStableFunc(s.xys, func(a, b plotter.XY) int {
			switch {
			case a.X < b.X:
				return -1
			case a.X > b.X:
				return 1
			}
			return 0
		})
		out = append(out, s)
	}
	return out
}

// cdfSeries returns the empirical CDF of the TTFT of a run's successful records, one series
// per level in the run's level order (levels without TTFTs are skipped).
func cdfSeries(run Run) []series {
	byLevel := map[string][]float64{}
	for i := range run.Records {
		r := &run.Records[i]
		if !r.Failed() && r.TTFTMs != nil {
			byLevel[r.Level] = append(byLevel[r.Level], *r.TTFTMs)
		}
	}
	var out []series
	for _, l := range run.Results.Levels {
		v := byLevel[l.Label]
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		s := series{name: l.Label, xys: make(plotter.XYs, 0, len(v)+1)}
		s.xys = append(s.xys, plotter.XY{X: v[0], Y: 0})
		for i, x := range v {
			s.xys = append(s.xys, plotter.XY{X: x, Y: float64(i+1) / float64(len(v))})
		}
		out = append(out, s)
	}
	return out
}

// chartOpts shapes a chart: a load chart (load) marks every point, puts its legend top left
// (latency grows with load) and, with log2X, spaces x by powers of two (concurrency 1, 2,
// 4, …); a CDF keeps its legend bottom right, under the curves' plateau. XMax > 0 fixes the
// x range to [0, XMax], so the charts of a comparison share their axis. styled takes each
// series' colour and dash from the series (overlaid runs: a colour per level, a dash per run);
// legendTopLeft moves a CDF's legend where the curves, which start right of 0, leave room.
type chartOpts struct {
	load, log2X, styled, legendTopLeft bool
	xMax                               float64
}

// dashes tell series apart where they coincide (one hides the other otherwise): solid,
// dashed, dotted, dash-dot, in series order, beside the colours and glyph shapes.
var dashes = [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(1.5), vg.Points(2.5)},
	{vg.Points(6), vg.Points(2.5), vg.Points(1.5), vg.Points(2.5)}}

// glyphShapes mark the points of load charts, one shape per series.
var glyphShapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{},
	draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}, draw.PlusGlyph{}}

// lineChart draws the series as an inline SVG element (no XML prolog, no namespace URLs).
func lineChart(title, xLabel, yLabel string, ss []series, o chartOpts) (string, error) {
	load, log2X, glyphs := o.load, o.log2X, o.load
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Y.Tick.Marker = niceTicks{}
	p.X.Tick.Marker = niceTicks{}
	p.Legend.Top, p.Legend.Left = load || o.legendTopLeft, load || o.legendTopLeft
	if load {
		// Headroom for the top-left legend (about a tenth of the height per entry), so flat
		// series near the top of their range (TPOT across levels) stay clear of it.
		maxY := 0.0
		for _, s := range ss {
			for _, xy := range s.xys {
				maxY = max(maxY, xy.Y)
			}
		}
		if maxY > 0 {
			p.Y.Max = maxY * (1.15 + 0.1*float64(len(ss)))
		}
	}
	if log2X {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = pow2Ticks{}
	}
	if o.xMax > 0 {
		p.X.Min, p.X.Max = 0, o.xMax
	}
	for i, s := range ss {
		if len(s.xys) == 0 {
			continue
		}
		ci, di := i, i
		if o.styled {
			ci, di = s.colour, s.dash
		}
		col := palette[ci%len(palette)]
		line, err := plotter.NewLine(s.xys)
		if err != nil {
			return "", fmt.Errorf("reports: chart %q, series %q: %w", title, s.name, err)
		}
		line.Color = col
		line.Width = vg.Points(1.5)
		line.Dashes = dashes[di%len(dashes)]
		p.Add(line)
		if glyphs {
			pts, err := plotter.NewScatter(s.xys)
			if err != nil {
				return "", fmt.Errorf("reports: chart %q, series %q: %w", title, s.name, err)
			}
			pts.Color = col
			pts.Shape = glyphShapes[i%len(glyphShapes)]
			pts.Radius = vg.Points(2.5)
			p.Add(pts)
			p.Legend.Add(s.name, line, pts)
		} else if !s.noLegend {
			p.Legend.Add(s.name, line)
		}
	}
	c := vgsvg.New(6*vg.Inch, 3.6*vg.Inch)
	p.Draw(draw.Crop(draw.New(c), 0, -8, 0, 0)) // room for the rightmost glyph
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", fmt.Errorf("reports: chart %q: %w", title, err)
	}
	return inlineSVG(buf.Bytes()), nil
}

// pow2Ticks labels the powers of two within an axis' range (concurrency levels).
type pow2Ticks struct{}

// Ticks implements plot.Ticker.
func (pow2Ticks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for v := 1.0; v <= hi*1.0001; v *= 2 {
		if v >= lo*0.9999 {
			ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		}
	}
	return ts
}

// niceTicks labels an axis at round steps (1, 2, 2.5 or 5 × 10^k) so that it carries
// between 4 and 7 labelled ticks, with minor ticks halfway: gonum's default ticker labels as
// few as two on a 0-based axis (0 and one round number), which says little about the scale.
type niceTicks struct{}

// Ticks implements plot.Ticker.
func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	step := niceStep((hi - lo) / 6)
	prec := max(0, -int(math.Floor(math.Log10(step)))+1) // enough decimals for 2.5 × 10^k
	var ts []plot.Tick
	first := math.Ceil(lo/step-1e-9) * step
	for k := 0; ; k++ {
		v := first + float64(k)*step
		if v > hi+step*1e-9 || k > 100 {
			break
		}
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		label := strconv.FormatFloat(v, 'f', prec, 64)
		if strings.Contains(label, ".") {
			label = strings.TrimRight(strings.TrimRight(label, "0"), ".")
		}
		ts = append(ts, plot.Tick{Value: v, Label: label})
		if mid := v + step/2; mid <= hi {
			ts = append(ts, plot.Tick{Value: mid})
		}
	}
	return ts
}

// niceStep rounds raw up to the nearest 1, 2, 2.5 or 5 × 10^k.
func niceStep(raw float64) float64 {
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw*(1-1e-9) {
			return m * mag
		}
	}
	return 10 * mag
}

// maxX is the largest x of any series (0 when there is none).
func maxX(sss ...[]series) float64 {
	m := 0.0
	for _, ss := range sss {
		for _, s := range ss {
			for _, xy := range s.xys {
				m = max(m, xy.X)
			}
		}
	}
	return m
}

// allPositive reports whether every x of every series is > 0 (a log axis needs it).
func allPositive(ss []series) bool {
	for _, s := range ss {
		for _, xy := range s.xys {
			if !(xy.X > 0) {
				return false
			}
		}
	}
	return true
}

var (
	svgProlog  = regexp.MustCompile(`(?s)^.*?(<svg\b)`)
	svgComment = regexp.MustCompile(`(?s)<!--.*?-->`)
	svgXMLNS   = regexp.MustCompile(`\s+xmlns(:\w+)?="[^"]*"`)
)

// inlineSVG turns a standalone SVG document into an element for an HTML page: the HTML parser
// puts <svg> in the SVG namespace by itself, so the prolog, comments and namespace
// declarations (URLs) go.
func inlineSVG(doc []byte) string {
	s := svgProlog.ReplaceAll(doc, []byte("$1"))
	s = svgComment.ReplaceAll(s, nil)
	s = svgXMLNS.ReplaceAll(s, nil)
	return string(bytes.TrimSpace(s))
}
