package reports

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// RenderMarkdown writes r as GitHub-flavoured Markdown: a heading naming the run, the level
// table of RenderTable (latencies in ms, one row per level), then error kinds and client-side
// queueing when present. Null values print as "-".
func RenderMarkdown(w io.Writer, r *Results) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", mdEscape(titleLine(r)))
	cols, rows := levelTable(r)
	writeMDTable(&b, cols, rows)
	if slices.ContainsFunc(r.Levels, func(l Level) bool { return l.Errors > 0 }) {
		b.WriteString("\n**Errors by kind**\n\n")
		var erows [][]string
		for i := range r.Levels {
			l := &r.Levels[i]
			if l.Errors > 0 {
				erows = append(erows, []string{l.Label, strconv.Itoa(l.Errors), errorKinds(l)})
			}
		}
		writeMDTable(&b, []string{"level", "errors", "kinds"}, erows)
	}
	if slices.ContainsFunc(r.Levels, func(l Level) bool { return l.QueueMs != nil }) {
		b.WriteString("\n**Client-side queueing** (open loop; not included in TTFT/E2E)\n\n")
		var qrows [][]string
		for _, l := range r.Levels {
			if s := l.QueueMs; s != nil {
				qrows = append(qrows, []string{l.Label, num(s.Mean), num(s.P50), num(s.P95), num(s.P99), num(s.Max)})
			}
		}
		writeMDTable(&b, []string{"level", "queue mean ms", "queue p50 ms", "queue p95 ms", "queue p99 ms", "queue max ms"}, qrows)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// levelTable returns the columns and rows of the per-level summary shared by the Markdown and
// HTML renderers: the columns of RenderTable with their units spelled out.
func levelTable(r *Results) ([]string, [][]string) {
	withGoodput := slices.ContainsFunc(r.Levels, func(l Level) bool { return l.Goodput != nil })
	withSGLang := slices.ContainsFunc(r.Levels, func(l Level) bool { return l.SGLangCacheHitRate != nil })
	cols := []string{"level", "reqs", "errs", "TTFT p50 ms", "TTFT p95 ms", "TTFT p99 ms",
		"TPOT p50 ms", "TPOT p95 ms", "ITL p95 ms", "E2E p50 ms", "E2E p95 ms", "req/s", "out tok/s", "cache hit"}
	if withSGLang {
		cols = append(cols, "sglang hit")
	}
	if withGoodput {
		cols = append(cols, "goodput")
	}
	var rows [][]string
	for i := range r.Levels {
		l := &r.Levels[i]
		row := []string{l.Label, strconv.Itoa(l.Requests), strconv.Itoa(l.Errors),
			num(l.TTFTMs.P50), num(l.TTFTMs.P95), num(l.TTFTMs.P99),
			num(l.TPOTMs.P50), num(l.TPOTMs.P95), num(l.ITLMs.P95),
			num(l.E2EMs.P50), num(l.E2EMs.P95),
			num(l.Throughput.ReqS), num(l.Throughput.OutputTokS), pct(l.CacheHitRate)}
		if withSGLang {
			row = append(row, pct(l.SGLangCacheHitRate))
		}
		if withGoodput {
			row = append(row, pct(l.Goodput))
		}
		rows = append(rows, row)
	}
	return cols, rows
}

// errorKinds lists a level's error kinds as "kind=n" in kind order.
func errorKinds(l *Level) string {
	kinds := make([]string, 0, len(l.ErrorsByKind))
	for k := range l.ErrorsByKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for i, k := range kinds {
		kinds[i] = k + "=" + strconv.Itoa(l.ErrorsByKind[k])
	}
	return strings.Join(kinds, " ")
}

// writeMDTable writes a Markdown table; the first column is left-aligned, the others right.
func writeMDTable(b *strings.Builder, cols []string, rows [][]string) {
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + mdEscape(c) + " |")
		}
		b.WriteString("\n")
	}
	line(cols)
	b.WriteString("|")
	for i := range cols {
		if i == 0 {
			b.WriteString(" :--- |")
		} else {
			b.WriteString(" ---: |")
		}
	}
	b.WriteString("\n")
	for _, r := range rows {
		line(r)
	}
}

// mdEscape escapes the characters that would break a table cell or start markup.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "*", `\*`, "_", `\_`, "`", "\\`", "<", "&lt;").Replace(s)
}
