package reports

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Run is one results file to render: its name (a column or legend label), its results, and
// optionally its per-request records (the HTML TTFT CDF needs them; nil omits that chart).
type Run struct {
	Name    string
	Results *Results
	Records []Record
}

// ReadRun reads a run from path, a results.json file or the directory holding it. With
// records, the per-request records come from requests.jsonl beside it when that file exists
// (only the HTML CDF needs them). The name is RunName(path).
func ReadRun(path string, records bool) (Run, error) {
	res, err := ReadResults(path)
	if err != nil {
		return Run{}, err
	}
	run := Run{Name: RunName(path), Results: res}
	if res.Meta.Label != "" {
		run.Name = res.Meta.Label
	}
	if !records {
		return run, nil
	}
	dir := path
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		dir = filepath.Dir(path)
	}
	recs, err := ReadRecords(filepath.Join(dir, RequestsFile))
	switch {
	case err == nil:
		run.Records = recs
	case !errors.Is(err, fs.ErrNotExist):
		return Run{}, err
	}
	return run, nil
}

// RunName names a run after its path: the directory for DIR or DIR/results.json, else the
// file name without its extension ("runs/on/results.json" → "on", "off.json" → "off").
func RunName(path string) string {
	clean := filepath.Clean(path)
	if filepath.Base(clean) == ResultsFile {
		clean = filepath.Dir(clean)
	}
	base := filepath.Base(clean)
	if ext := filepath.Ext(base); ext != "" && ext != base {
		base = strings.TrimSuffix(base, ext)
	}
	return base
}

// RenderRuns writes several runs in format f: table and md one after another (each with its
// title), csv as one table with a leading "run" column, json as an array of
// {"name", "results"} objects, html as one page whose charts overlay the runs. One run renders
// exactly as Render does, except html, which adds the TTFT CDF when Records are present.
func RenderRuns(w io.Writer, f Format, runs []Run) error {
	if len(runs) == 0 {
		return fmt.Errorf("reports: no runs to render")
	}
	if _, err := ParseFormat(string(f)); err != nil {
		return err
	}
	switch f {
	case FormatHTML:
		return RenderHTML(w, runs, NoCompare)
	case FormatCSV:
		return renderCSV(w, runs, len(runs) > 1)
	case FormatJSON:
		if len(runs) == 1 {
			return RenderJSON(w, runs[0].Results)
		}
		return renderJSONRuns(w, runs)
	}
	for i, run := range runs {
		if i > 0 {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		if err := Render(w, f, run.Results); err != nil {
			return fmt.Errorf("reports: run %s: %w", run.Name, err)
		}
	}
	return nil
}
