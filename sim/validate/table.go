package validate

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the results as an aligned table (set, level, figure, published, sim,
// ratio, band, ok), then the notes of each set.
func WriteTable(w io.Writer, reps []SetReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SET\tLEVEL\tFIGURE\tPUBLISHED\tSIM\tRATIO\tBAND\tOK")
	for _, rep := range reps {
		for _, r := range rep.Results {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Set, r.Level, r.Figure, num(r.Published),
				num(r.Simulated), ratio(r.Ratio), band(r.Band), verdict(r))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, rep := range reps {
		if len(rep.Notes) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nnotes, %s:\n", rep.Set)
		for _, n := range rep.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
	return nil
}

// WriteMarkdown prints the results as the table of docs/validation.md.
func WriteMarkdown(w io.Writer, reps []SetReport) error {
	var b strings.Builder
	b.WriteString("| set | level | figure | published | sim | sim ÷ published | band | ok |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---|\n")
	for _, rep := range reps {
		for _, r := range rep.Results {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Set, r.Level, strings.ReplaceAll(r.Figure, "_", "\\_"),
				num(r.Published), num(r.Simulated), ratio(r.Ratio), band(r.Band), verdict(r))
		}
	}
	fmt.Fprintf(&b, "\n%s\n", strings.ReplaceAll(Count(Results(reps)).String(), "_", "\\_"))
	_, err := io.WriteString(w, b.String())
	return err
}

func num(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	if math.Abs(v) >= 1000 {
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func ratio(r float64) string {
	if math.IsNaN(r) {
		return "—"
	}
	return fmt.Sprintf("%.2f", r)
}

func band(b float64) string { return fmt.Sprintf("±%.0f%%", 100*b) }

func verdict(r Result) string {
	switch {
	case r.Note != "" && math.IsNaN(r.Ratio):
		return r.Note
	case r.Pass && r.Gap != "":
		return "ok, but listed as a known gap: remove its known_gaps entry"
	case r.Pass:
		return "ok"
	case r.Gap != "":
		return "KNOWN GAP (the notes say why)"
	}
	return "OUTSIDE"
}
