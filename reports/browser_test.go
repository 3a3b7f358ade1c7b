//go:build browser

package reports

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chromiumFlags keep headless Chromium off the network and out of the user's profile.
var chromiumFlags = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
	"--no-first-run", "--disable-background-networking", "--disable-component-update",
	"--disable-sync", "--disable-extensions", "--hide-scrollbars"}

// chromium runs headless Chromium with args and a fresh profile and returns its stdout. A
// missing browser fails the test: `make test-browser` installs Debian's chromium.
func chromium(t *testing.T, args ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		bin, err = exec.LookPath("chromium-browser")
	}
	require.NoError(t, err, "headless Chromium is required (make test-browser installs Debian's chromium)")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	all := append(slices.Clone(chromiumFlags), "--user-data-dir="+t.TempDir())
	cmd := exec.CommandContext(ctx, bin, append(all, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "chromium: %s", stderr.String())
	return out
}

// pathRE matches the data lines gonum/plot draws (1.5 pt strokes) in Chromium's DOM dump.
// (the series after the first are dashed: a stroke-dasharray may follow).
var pathRE = regexp.MustCompile(`<path d="([^"]+)" style="fill:none;stroke:#[0-9A-F]{6};stroke-width:1.5(;stroke-dasharray:[^"]*)?"`)

// figurePaths returns the points of every data line inside <figure id="id">, in drawing order.
func figurePaths(t *testing.T, dom, id string) [][][2]float64 {
	t.Helper()
	start := strings.Index(dom, `<figure id="`+id+`">`)
	require.GreaterOrEqual(t, start, 0, "figure %s missing", id)
	end := strings.Index(dom[start:], "</figure>")
	require.Positive(t, end)
	fig := dom[start : start+end]
	require.Contains(t, fig, "<svg")
	var out [][][2]float64
	for _, m := range pathRE.FindAllStringSubmatch(fig, -1) {
		var pts [][2]float64
		for _, seg := range strings.FieldsFunc(m[1], func(r rune) bool { return r == 'M' || r == 'L' }) {
			xy := strings.Split(seg, ",")
			require.Len(t, xy, 2, "path %q", m[1])
			x, err1 := strconv.ParseFloat(xy[0], 64)
			y, err2 := strconv.ParseFloat(xy[1], 64)
			require.NoError(t, err1)
			require.NoError(t, err2)
			pts = append(pts, [2]float64{x, y})
		}
		out = append(out, pts)
	}
	return out
}

// TestBrowserHTMLReport opens the compare report in headless Chromium, served from loopback:
// the page requests nothing but itself, its charts are drawn, and the lines of the TTFT P95
// and TPOT P95 charts are the data (y an affine function of the values, x equally spaced over
// the concurrency levels 1, 4, 16 on a log2 axis), the CDFs one point per request.
func TestBrowserHTMLReport(t *testing.T) {
	off, on := sweepRun(t, "off", 1.5), sweepRun(t, "on", 1)
	var page bytes.Buffer
	require.NoError(t, RenderCompare(&page, FormatHTML, off, on))

	var mu sync.Mutex
	var fetched []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fetched = append(fetched, r.URL.Path)
		mu.Unlock()
		if r.URL.Path != "/report.html" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page.Bytes())
	}))
	defer srv.Close()
	url := srv.URL + "/report.html"

	dom := string(chromium(t, "--dump-dom", url))
	require.Equal(t, 3, strings.Count(dom, "<svg"), "three charts: two against load, the overlaid CDFs")

	for _, ch := range []struct {
		id     string
		metric func(*Level) float64
	}{
		{"ttft-p95", func(l *Level) float64 { return l.TTFTMs.P95 }},
		{"tpot-p95", func(l *Level) float64 { return l.TPOTMs.P95 }},
	} {
		paths := figurePaths(t, dom, ch.id)
		require.GreaterOrEqual(t, len(paths), 2, ch.id)
		// Calibrate y = a + b·value on the first run's extremes, then check every point.
		vals := func(run Run) []float64 {
			var v []float64
			for i := range run.Results.Levels {
				v = append(v, ch.metric(&run.Results.Levels[i]))
			}
			return v
		}
		offV, onV := vals(off), vals(on)
		p0 := paths[0]
		require.Len(t, p0, 3, "%s: one point per level", ch.id)
		b := (p0[2][1] - p0[0][1]) / (offV[2] - offV[0])
		a := p0[0][1] - b*offV[0]
		require.NotZero(t, b)
		for s, v := range [][]float64{offV, onV} {
			pts := paths[s]
			require.Len(t, pts, 3, "%s series %d", ch.id, s)
			for i := range pts {
				assert.InDelta(t, a+b*v[i], pts[i][1], 0.6, "%s series %d point %d", ch.id, s, i)
			}
			assert.InDelta(t, pts[1][0]-pts[0][0], pts[2][0]-pts[1][0], 0.6, "%s: log2 x spacing", ch.id)
		}
	}
	// Both runs' CDFs on one chart: A's levels first (solid), then B's (dashed), one point
	// per successful request (+ the origin) each.
	paths := figurePaths(t, dom, "ttft-cdf")
	var lens []int
	var rightmost []float64
	for _, p := range paths {
		if len(p) > 2 { // legend samples are two-point lines
			lens = append(lens, len(p))
			rightmost = append(rightmost, p[len(p)-1][0])
		}
	}
	var want []int
	for _, run := range []Run{off, on} {
		for _, l := range run.Results.Levels {
			want = append(want, l.Requests-l.Errors+1)
		}
	}
	require.Equal(t, want, lens, "overlaid CDFs: one line per run and level")
	// One x axis: "off" is 1.5× slower, so each of its curves ends farther right than the
	// same level of "on".
	for i := range 3 {
		assert.Greater(t, rightmost[i], rightmost[3+i]*1.3, "level %d: A's curve ends right of B's", i)
	}
	cdf := dom[strings.Index(dom, `<figure id="ttft-cdf">`):]
	assert.Contains(t, cdf[:strings.Index(cdf, "</figure>")], "stroke-dasharray", "B's curves are dashed")

	// Drawn, not just present: the screenshot shows both runs' line colours.
	shot := filepath.Join(t.TempDir(), "shot.png")
	chromium(t, "--window-size=1400,2400", "--screenshot="+shot, url)
	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	for _, c := range palette[:2] {
		assert.Greater(t, countColor(img, c.R, c.G, c.B), 50, "pixels of colour #%02x%02x%02x", c.R, c.G, c.B)
	}

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"/report.html", "/report.html"}, fetched, "the page loads nothing else")
}

// countColor counts the pixels within a small distance of the colour (anti-aliasing aside).
func countColor(img image.Image, r, g, b uint8) int {
	n := 0
	bounds := img.Bounds()
	near := func(a uint32, v uint8) bool { d := int(a>>8) - int(v); return d > -12 && d < 12 }
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			if near(pr, r) && near(pg, g) && near(pb, b) {
				n++
			}
		}
	}
	return n
}

// overflowProbe, appended to a copy of the page by the test only (the report itself has no
// script), writes into the DOM Chromium dumps the page's horizontal overflow in CSS pixels
// (document.scrollingElement: scrollWidth − clientWidth) and each table box's own ("id=px").
const overflowProbe = `<script>
for (const d of document.querySelectorAll("details")) d.open = true;
const se = document.scrollingElement;
const fig = document.querySelector("figure");
if (fig) document.body.setAttribute("data-chart-top", String(Math.round(fig.getBoundingClientRect().top)));
document.body.setAttribute("data-overflow-x", String(se.scrollWidth - se.clientWidth));
document.body.setAttribute("data-viewport", String(se.clientWidth));
const boxes = [];
for (const d of document.querySelectorAll("div.scroll")) boxes.push(d.id + "=" + (d.scrollWidth - d.clientWidth));
document.body.setAttribute("data-boxes", boxes.join(" "));
</script>`

var overflowRE = regexp.MustCompile(`data-overflow-x="(-?\d+)"`)
var viewportRE = regexp.MustCompile(`data-viewport="(\d+)"`)
var boxesRE = regexp.MustCompile(`data-boxes="([^"]*)"`)
var chartTopRE = regexp.MustCompile(`data-chart-top="(-?\d+)"`)

// withRealisticMeta gives a run what real results.json files carry and once pushed the page
// sideways: the simulator's cluster with durations in nanoseconds, a router whose worker list
// is a long setting, and a server_info with per-rank state and a load snapshot of hundreds of
// characters (runtime state, not a setting).
func withRealisticMeta(run Run, threshold string, workers int) Run {
	res := *run.Results
	var urls []string
	for i := range workers {
		urls = append(urls, `"http://decode-worker-`+strconv.Itoa(i)+`.sglang.svc.cluster.local:30001"`)
	}
	res.Meta.Router = json.RawMessage(`{"policy":"cache_aware","cache_threshold":` + threshold +
		`,"worker_urls":[` + strings.Join(urls, ",") + `]}`)
	res.Meta.Cluster = json.RawMessage(`{"prefill":2,"decode":` + strconv.Itoa(workers) +
		`,"ttft":100000000,"itl":20000000,"net_latency":100000,"profile":"llama3-8b-h100"}`)
	var load []string
	for r := range 8 {
		load = append(load, `{"dp_rank":`+strconv.Itoa(r)+`,"num_reqs":`+strconv.Itoa(r*workers)+
			`,"num_waiting_reqs":0,"num_tokens":`+strconv.Itoa(4096*r+workers)+`}`)
	}
	res.Meta.ServerInfo = json.RawMessage(`{"dp_size":8,"internal_states":[{"last_gen_throughput":` +
		strconv.Itoa(workers) + `.5}],"load":[` + strings.Join(load, ",") + `]}`)
	run.Results = &res
	return run
}

// TestBrowserReportFits1280 opens a comparison report and the demo's live-vs-sim report in
// headless Chromium at 1,280 × 800: the page never scrolls sideways (with every folded part
// open, no table scrolls inside its box either), its first chart starts on the first screen
// (the summary comes first, the long tables fold after the charts), a screenshot of that
// window is taken, and the live-vs-sim page says "error", never "impr". At a phone's 390 px
// the page does not scroll sideways either: wide tables scroll inside their own box.
func TestBrowserReportFits1280(t *testing.T) {
	off := withRealisticMeta(sweepRun(t, "off", 1.5), "0.3", 4)
	on := withRealisticMeta(sweepRun(t, "on", 1), "0.7", 8)
	// Long names, as real run directories have, widen every column.
	off.Name, on.Name = "cache-aware-threshold-0.3-run", "cache-aware-threshold-0.7-run"
	for _, tc := range []struct {
		name string
		mode CompareMode
		want string
	}{
		{"compare", CompareImprovement, ImprovementRule},
		{"live-vs-sim", CompareError, ErrorRule},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var page bytes.Buffer
			require.NoError(t, RenderHTML(&page, []Run{off, on}, tc.mode))
			html := page.String()
			assert.Contains(t, html, tc.want)
			if tc.mode == CompareError {
				assert.NotContains(t, html, ">impr<")
				assert.NotContains(t, html, "positive = B better")
			}
			probed := strings.Replace(html, "</body>", overflowProbe+"</body>", 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				if r.URL.Path == "/probed.html" {
					w.Write([]byte(probed))
					return
				}
				w.Write(page.Bytes())
			}))
			defer srv.Close()
			dom := string(chromium(t, "--window-size=1280,800", "--virtual-time-budget=2000", "--dump-dom", srv.URL+"/probed.html"))
			m := overflowRE.FindStringSubmatch(dom)
			require.NotNil(t, m, "the probe did not run")
			vp := viewportRE.FindStringSubmatch(dom)
			require.NotNil(t, vp)
			assert.Equal(t, "1280", vp[1], "the window is 1,280 px wide")
			assert.Equal(t, "0", m[1], "the page overflows a 1,280-px window by %s px", m[1])
			// No table scrolls inside its own box either: the comparison, the settings and
			// both runs' level tables fit.
			b := boxesRE.FindStringSubmatch(dom)
			require.NotNil(t, b)
			assert.Equal(t, "summary=0 compare=0 settings=0 levels-0=0 levels-1=0", b[1], "table boxes' horizontal overflow (px)")
			top := chartTopRE.FindStringSubmatch(dom)
			require.NotNil(t, top, "no chart")
			y, err := strconv.Atoi(top[1])
			require.NoError(t, err)
			assert.Less(t, y, 800-200, "the first chart starts on the first screen of 800 px, at %d px", y)

			phone := string(chromium(t, "--window-size=390,844", "--virtual-time-budget=2000", "--dump-dom", srv.URL+"/probed.html"))
			m = overflowRE.FindStringSubmatch(phone)
			require.NotNil(t, m, "the probe did not run")
			assert.Equal(t, "0", m[1], "the page overflows a 390-px window by %s px", m[1])

			// The settings diff lists settings only, durations as durations.
			settings := dom[strings.Index(dom, `id="settings"`):]
			settings = settings[:strings.Index(settings, "</table>")]
			for _, want := range []string{"router.cache_threshold", "router.worker_urls", "cluster.decode", "decode-worker-7"} {
				assert.Contains(t, settings, want)
			}
			for _, absent := range []string{"server_info.load", "num_waiting_reqs", "internal_states", "cluster.ttft", "100000000"} {
				assert.NotContains(t, settings, absent, "equal or runtime settings are not listed")
			}

			shot := filepath.Join(t.TempDir(), "shot.png")
			chromium(t, "--window-size=1280,800", "--screenshot="+shot, srv.URL+"/report.html")
			f, err := os.Open(shot)
			require.NoError(t, err)
			defer f.Close()
			img, err := png.Decode(f)
			require.NoError(t, err)
			assert.Equal(t, 1280, img.Bounds().Dx())
			assert.Greater(t, countColor(img, 0xf3, 0xf3, 0xf3), 500, "the comparison table's header is in view")
		})
	}
}
