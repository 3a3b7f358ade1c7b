package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
)

// ShardFile is what `router sim sweep --shard i/N --out DIR` writes in DIR: the grid, which
// shard this is, and every point it ran with its router settings and results, for --merge.
const ShardFile = "sweep.json"

// shardSchema versions ShardFile.
const shardSchema = "pdrouter.sweep-shard/v1"

type shardDoc struct {
	Schema string      `json:"schema"`
	Vars   []shardVary `json:"vars"`
	Total  int         `json:"total"`
	Shard  int         `json:"shard"`
	Shards int         `json:"shards"`
	// Base is the grid index of the point with the defaults' settings (BaseIndex); absent
	// when the grid does not hold it (or the shard was written before it was recorded).
	Base   *int         `json:"base,omitempty"`
	Points []shardPoint `json:"points"`
}

type shardVary struct {
	Key    string   `json:"key"`
	Values []string `json:"values"`
}

type shardPoint struct {
	Index  int           `json:"index"`
	Values []string      `json:"values"`
	Router router.Config `json:"router"`
	// KVEvents is the point's Routing.KVEvents, so a merged winner writes serve's kv_events
	// as a single sweep's does.
	KVEvents string          `json:"kv_events,omitempty"`
	Results  json.RawMessage `json:"results"`
}

// WriteShard writes shard i of n of a sweep over vars (total points in the whole grid, base
// the grid index of the defaults' point or -1) to dir/ShardFile. Every point must have run
// without error.
func WriteShard(dir string, vars []Vary, total, base, i, n int, pts []Point) error {
	doc := shardDoc{Schema: shardSchema, Total: total, Shard: i, Shards: n}
	if base >= 0 {
		doc.Base = &base
	}
	for _, v := range vars {
		doc.Vars = append(doc.Vars, shardVary(v))
	}
	for _, p := range pts {
		if p.Err != nil || p.Result == nil {
			return fmt.Errorf("sim: shard %d/%d: point %d did not run: %v", i, n, p.Index, p.Err)
		}
		var buf bytes.Buffer
		if err := reports.EncodeResults(&buf, p.Result.Results); err != nil {
			return err
		}
		doc.Points = append(doc.Points, shardPoint{Index: p.Index, Values: p.Values, Router: p.Config.Router, KVEvents: p.Config.Routing.KVEvents, Results: buf.Bytes()})
	}
	b, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sim: --out: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ShardFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("sim: --out: %w", err)
	}
	return nil
}

// ReadShards reads the shards in dirs (each a --shard run's --out directory) and returns the
// grid and every point, in grid order, as a single sweep would have them (results without
// records). The shards must come from one sweep — the same grid and shard count — and
// together hold every point exactly once; the error says which are missing or doubled.
func ReadShards(dirs []string) ([]Vary, []Point, int, error) {
	if len(dirs) == 0 {
		return nil, nil, -1, fmt.Errorf("sim: --merge needs the shards' --out directories")
	}
	var first *shardDoc
	byIndex := map[int]Point{}
	from := map[int]string{}
	for _, dir := range dirs {
		path := filepath.Join(dir, ShardFile)
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, -1, fmt.Errorf("sim: --merge: %w", err)
		}
		var doc shardDoc
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&doc); err != nil {
			return nil, nil, -1, fmt.Errorf("sim: --merge %s: %w", path, err)
		}
		if doc.Schema != shardSchema {
			return nil, nil, -1, fmt.Errorf("sim: --merge %s: schema %q, want %q", path, doc.Schema, shardSchema)
		}
		if first == nil {
			first = &doc
		} else if !sameGrid(first, &doc) {
			return nil, nil, -1, fmt.Errorf("sim: --merge %s: another sweep (grid or shard count differs from %s)", path, dirs[0])
		}
		for _, sp := range doc.Points {
			if prev, dup := from[sp.Index]; dup {
				return nil, nil, -1, fmt.Errorf("sim: --merge: point %d is in both %s and %s", sp.Index, prev, dir)
			}
			res, err := reports.DecodeResults(bytes.NewReader(sp.Results))
			if err != nil {
				return nil, nil, -1, fmt.Errorf("sim: --merge %s: point %d: %w", path, sp.Index, err)
			}
			from[sp.Index] = dir
			byIndex[sp.Index] = Point{Index: sp.Index, Values: sp.Values, Config: Config{Router: sp.Router, Routing: Routing{KVEvents: sp.KVEvents}}, Result: &Result{Results: res}}
		}
	}
	var missing []string
	pts := make([]Point, 0, first.Total)
	for i := range first.Total {
		p, ok := byIndex[i]
		if !ok {
			missing = append(missing, fmt.Sprint(i))
			continue
		}
		pts = append(pts, p)
	}
	if len(missing) > 0 {
		return nil, nil, -1, fmt.Errorf("sim: --merge: %d of %d points missing (indexes %s): give every shard's directory",
			len(missing), first.Total, strings.Join(missing, ","))
	}
	vars := make([]Vary, len(first.Vars))
	for i, v := range first.Vars {
		vars[i] = Vary(v)
	}
	base := -1
	if first.Base != nil {
		base = *first.Base
	}
	return vars, pts, base, nil
}

func sameGrid(a, b *shardDoc) bool {
	return a.Total == b.Total && a.Shards == b.Shards && slices.EqualFunc(a.Vars, b.Vars, func(x, y shardVary) bool {
		return x.Key == y.Key && slices.Equal(x.Values, y.Values)
	})
}
