package reports

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"strconv"
)

// RenderCSV writes r as CSV (RFC 4180): a header, then one row per level with every field of
// the level (stats as <metric>_<stat>, e.g. ttft_ms_p95; errors_by_kind as "kind=n ..."; null
// as an empty cell). Numbers are plain decimals, full precision.
func RenderCSV(w io.Writer, r *Results) error {
	return renderCSV(w, []Run{{Results: r}}, false)
}

var csvStats = []string{"mean", "p50", "p90", "p95", "p99", "max"}

func csvHeader(withRun bool) []string {
	h := []string{"level", "concurrency", "rate", "arrival", "requests", "errors", "errors_by_kind", "duration_s"}
	if withRun {
		h = append([]string{"run"}, h...)
	}
	for _, m := range []string{"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"} {
		for _, s := range csvStats {
			h = append(h, m+"_"+s)
		}
	}
	return append(h, "req_s", "input_tok_s", "output_tok_s", "cache_hit_rate", "sglang_cache_hit_rate", "goodput")
}

func renderCSV(w io.Writer, runs []Run, withRun bool) error {
	var buf bytes.Buffer
	cw := csv.NewWriter(&buf)
	if err := cw.Write(csvHeader(withRun)); err != nil {
		return err
	}
	for _, run := range runs {
		for i := range run.Results.Levels {
			l := &run.Results.Levels[i]
			row := []string{l.Label, optInt(l.Concurrency), optFloat(l.Rate), optString(l.Arrival),
				strconv.Itoa(l.Requests), strconv.Itoa(l.Errors), errorKinds(l), fmtFloat(l.DurationS)}
			if withRun {
				row = append([]string{run.Name}, row...)
			}
			for _, s := range []*Stats{&l.TTFTMs, &l.TPOTMs, &l.ITLMs, &l.E2EMs, l.QueueMs} {
				row = append(row, statCells(s)...)
			}
			row = append(row, fmtFloat(l.Throughput.ReqS), fmtFloat(l.Throughput.InputTokS),
				fmtFloat(l.Throughput.OutputTokS), optFloat(l.CacheHitRate), optFloat(l.SGLangCacheHitRate), optFloat(l.Goodput))
			if err := cw.Write(row); err != nil {
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

func statCells(s *Stats) []string {
	if s == nil {
		return make([]string, len(csvStats))
	}
	return []string{fmtFloat(s.Mean), fmtFloat(s.P50), fmtFloat(s.P90), fmtFloat(s.P95), fmtFloat(s.P99), fmtFloat(s.Max)}
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func optFloat(v *float64) string {
	if v == nil {
		return ""
	}
	return fmtFloat(*v)
}

func optInt(v *int) string {
	if v == nil {
		return ""
	}
	return strconv.Itoa(*v)
}

func optString(v *string) string {
	if v == nil {
		return ""
	}
	return *v
}

// RenderJSON writes r as results.json (EncodeResults: indented, SPEC §6 field order).
func RenderJSON(w io.Writer, r *Results) error { return EncodeResults(w, r) }

// renderJSONRuns writes runs as an indented JSON array of {"name", "results"}.
func renderJSONRuns(w io.Writer, runs []Run) error {
	type named struct {
		Name    string          `json:"name"`
		Results json.RawMessage `json:"results"`
	}
	out := make([]named, len(runs))
	for i, run := range runs {
		var buf bytes.Buffer
		if err := EncodeResults(&buf, run.Results); err != nil {
			return err
		}
		out[i] = named{Name: run.Name, Results: json.RawMessage(bytes.TrimSpace(buf.Bytes()))}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
