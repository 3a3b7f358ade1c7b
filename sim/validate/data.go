package validate

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// published holds the suite's data files (published/*.json, format in published/README.md).
//
//go:embed published/*.json
var published embed.FS

// Set is one published measurement: one data file.
type Set struct {
	Name          string
	File          string // where it was read from
	SourceURL     string
	Date          string
	SGLangVersion string
	Model         string // the file's model, verbatim (HF id, maybe with remarks)
	Precision     string
	GPU           string
	GPUsPerServer int // 0 when not stated
	// TP, DP, EP are the parallelism of a unified server; 0 when null (see PD).
	TP, DP, EP  int
	DPAttention bool
	PD          *PD // nil for unified serving
	// ServerArgs are the server arguments (unified), or per role under "prefill" / "decode".
	ServerArgs map[string]any
	Workload   map[string]any
	Levels     []Level
	Notes      string
	// Parse records how lenient fields were read (a string taken as a number, a null skipped),
	// one line each.
	Parse []string
}

// Source is the publication a set's figures come from, for leave-one-source-out validation:
// the repository of a GitHub source_url ("sgl-project/sgl-cookbook", "dstackai/benchmarks";
// every sglang README and PR is "sgl-project/sglang"), the site of any other
// ("lmsys.org"), the set's own name when it has no URL. Sets of one source share what a
// publication shares (its authors, client, hardware and habits), so leaving them out together
// tests the model on a publication it has not seen.
func (s Set) Source() string {
	u, err := url.Parse(s.SourceURL)
	if err != nil || u.Host == "" {
		return s.Name
	}
	if u.Host == "github.com" {
		if parts := strings.Split(strings.Trim(u.Path, "/"), "/"); len(parts) >= 2 {
			return parts[0] + "/" + parts[1]
		}
	}
	return u.Host
}

// PD is the layout of a disaggregated set.
type PD struct {
	Prefill, Decode Pool
}

// Pool is one side of a PD deployment; 0 where the file says null or nothing usable.
type Pool struct {
	Servers, Nodes, GPUs int
	TP, DP, EP           int
	GPUsPerInstance      int
}

// Level is one measured load point.
type Level struct {
	Load    map[string]any
	Figures []Figure // sorted by name
	Notes   string
	// KnownGaps are figures the model is known to miss, each with why (the file's
	// "known_gaps" object: figure name → reason). Such a figure outside its band is
	// reported as a known gap, not a failure; inside its band it fails until the entry is
	// removed, so the list says what is still missing and nothing more.
	KnownGaps map[string]string
	// Beyond2x is why any figure of this level that lies more than 2× from its published value
	// is that far off (the file's "beyond_2x": evidence from the source, e.g. a published number
	// below a physical bound), "" if nothing documents it. Unlike KnownGaps it changes nothing
	// the suite computes: the figures stay in the fit and the medians, and FarOff lists them
	// with this reason beside the ones nothing explains.
	Beyond2x string
}

// Figure is one published number.
type Figure struct {
	Name  string
	Value float64
}

// Embedded returns the suite's sets (published/*.json), sorted by name.
func Embedded() ([]Set, error) {
	names, err := fs.Glob(published, "published/*.json")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var sets []Set
	for _, n := range names {
		b, err := published.ReadFile(n)
		if err != nil {
			return nil, err
		}
		s, err := Parse(b, n)
		if err != nil {
			return nil, err
		}
		sets = append(sets, s)
	}
	return sets, nil
}

// Load reads data files from disk.
func Load(paths ...string) ([]Set, error) {
	var sets []Set
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("validate: %w", err)
		}
		s, err := Parse(b, p)
		if err != nil {
			return nil, err
		}
		sets = append(sets, s)
	}
	return sets, nil
}

// Parse reads one data file. Fields are read leniently — a number may be a JSON number or a
// string holding one (the first number in it, e.g. "PARALLELISM_SIZE (inferred 32)" → 32;
// "inf" → +Inf), null means not stated — and each such reading is noted in Set.Parse. Only
// malformed JSON, a missing name or no levels are errors.
func Parse(data []byte, file string) (Set, error) {
	var raw map[string]any
	d := json.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(&raw); err != nil {
		return Set{}, fmt.Errorf("validate: %s: %w", file, err)
	}
	s := Set{File: file}
	p := &parser{set: &s}
	s.Name = str(raw["name"])
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
		p.note("name missing: taken from the file name")
	}
	s.SourceURL, s.Date, s.SGLangVersion = str(raw["source_url"]), str(raw["date"]), str(raw["sglang_version"])
	s.Model, s.Precision, s.GPU, s.Notes = str(raw["model"]), str(raw["precision"]), str(raw["gpu"]), str(raw["notes"])
	s.GPUsPerServer = p.integer("gpus_per_server", raw["gpus_per_server"])
	s.TP, s.DP, s.EP = p.integer("tp", raw["tp"]), p.integer("dp", raw["dp"]), p.integer("ep", raw["ep"])
	s.DPAttention, _ = raw["dp_attention"].(bool)
	if pd, ok := raw["pd"].(map[string]any); ok {
		s.PD = &PD{Prefill: p.pool("pd.prefill", pd["prefill"]), Decode: p.pool("pd.decode", pd["decode"])}
	}
	s.ServerArgs, _ = raw["server_args"].(map[string]any)
	s.Workload, _ = raw["workload"].(map[string]any)
	levels, _ := raw["levels"].([]any)
	for i, l := range levels {
		lm, ok := l.(map[string]any)
		if !ok {
			p.note(fmt.Sprintf("levels[%d] is not an object: skipped", i))
			continue
		}
		lv := Level{Notes: str(lm["notes"]), Beyond2x: str(lm["beyond_2x"])}
		lv.Load, _ = lm["load"].(map[string]any)
		figs, _ := lm["figures"].(map[string]any)
		for name, v := range figs {
			f, ok := p.number(fmt.Sprintf("levels[%d].figures.%s", i, name), v)
			if !ok || math.IsInf(f, 0) {
				p.note(fmt.Sprintf("levels[%d].figures.%s = %v: not a number, skipped", i, name, v))
				continue
			}
			lv.Figures = append(lv.Figures, Figure{Name: name, Value: f})
		}
		sort.Slice(lv.Figures, func(a, b int) bool { return lv.Figures[a].Name < lv.Figures[b].Name })
		if gaps, ok := lm["known_gaps"].(map[string]any); ok {
			lv.KnownGaps = map[string]string{}
			for name, why := range gaps {
				lv.KnownGaps[name] = str(why)
			}
		}
		s.Levels = append(s.Levels, lv)
	}
	if len(s.Levels) == 0 {
		return s, fmt.Errorf("validate: %s: no levels", file)
	}
	return s, nil
}

type parser struct{ set *Set }

func (p *parser) note(s string) { p.set.Parse = append(p.set.Parse, s) }

var firstNumber = regexp.MustCompile(`[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?`)

// Num reads v as a number: a JSON number, or a string that is "inf" or holds a number (the
// first one in it). ok is false for null, booleans, objects and strings without a number.
func Num(v any) (f float64, ok bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case string:
		t := strings.TrimSpace(strings.ToLower(x))
		if t == "inf" || t == "+inf" || t == "infinity" {
			return math.Inf(1), true
		}
		if f, err := strconv.ParseFloat(t, 64); err == nil {
			return f, true
		}
		if m := firstNumber.FindString(x); m != "" {
			f, err := strconv.ParseFloat(m, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// number reads a field leniently, noting a string read as a number.
func (p *parser) number(field string, v any) (float64, bool) {
	f, ok := Num(v)
	if s, isStr := v.(string); ok && isStr {
		if _, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err != nil {
			p.note(fmt.Sprintf("%s = %q read as %g", field, s, f))
		}
	}
	return f, ok
}

// integer reads a count: 0 when null or unreadable.
func (p *parser) integer(field string, v any) int {
	if v == nil {
		return 0
	}
	f, ok := p.number(field, v)
	if !ok || f < 0 || math.IsInf(f, 0) {
		p.note(fmt.Sprintf("%s = %v: not a count, taken as not stated", field, v))
		return 0
	}
	return int(f)
}

func (p *parser) pool(field string, v any) Pool {
	m, _ := v.(map[string]any)
	return Pool{
		Servers: p.integer(field+".servers", m["servers"]), Nodes: p.integer(field+".nodes", m["nodes"]),
		GPUs: p.integer(field+".gpus", m["gpus"]), TP: p.integer(field+".tp", m["tp"]),
		DP: p.integer(field+".dp", m["dp"]), EP: p.integer(field+".ep", m["ep"]),
		GPUsPerInstance: p.integer(field+".gpus_per_instance", m["gpus_per_instance"]),
	}
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}
