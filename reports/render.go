package reports

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// Format is an output format of Render (the --format flag).
type Format string

// The formats of SPEC §6: RenderTable, RenderMarkdown, RenderCSV, RenderJSON and (for one
// run, without the TTFT CDF, which needs records: see RenderRuns) RenderHTML.
const (
	FormatTable    Format = "table"
	FormatMarkdown Format = "md"
	FormatCSV      Format = "csv"
	FormatJSON     Format = "json"
	FormatHTML     Format = "html"
)

// Formats lists every format in --help order.
func Formats() []Format {
	return []Format{FormatTable, FormatMarkdown, FormatCSV, FormatJSON, FormatHTML}
}

// ErrFormatNotImplemented is wrapped by Render for a known format that has no renderer yet
// (every format has one now; kept for callers that test for it).
var ErrFormatNotImplemented = errors.New("format not implemented yet")

// renderers maps each built format to its renderer; a format added later registers here.
var renderers = map[Format]func(io.Writer, *Results) error{
	FormatTable:    RenderTable,
	FormatMarkdown: RenderMarkdown,
	FormatCSV:      RenderCSV,
	FormatJSON:     RenderJSON,
	FormatHTML:     func(w io.Writer, r *Results) error { return RenderHTML(w, []Run{{Name: "run", Results: r}}, NoCompare) },
}

// ParseFormat returns the Format named s (table, md, csv, json, html).
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats() {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("reports: unknown format %q (want %s)", s, formatList())
}

func formatList() string {
	names := make([]string, 0, len(Formats()))
	for _, f := range Formats() {
		names = append(names, string(f))
	}
	return strings.Join(names, ", ")
}

// Render writes r to w in format f.
func Render(w io.Writer, f Format, r *Results) error {
	render, ok := renderers[f]
	if !ok {
		if _, err := ParseFormat(string(f)); err != nil {
			return err
		}
		return fmt.Errorf("reports: --format %s: %w", f, ErrFormatNotImplemented)
	}
	return render(w, r)
}
