package reports

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// SettingDiff is one setting two runs ran with differently: its dotted key (router.
// cache_threshold, workload.turns, cluster.prefill, server_info.dp_size, seed, …) and each
// run's value, "-" where a run does not record it.
type SettingDiff struct {
	Key  string `json:"key"`
	A, B string
}

// MarshalJSON writes {"key", "a", "b"}.
func (d SettingDiff) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Key string `json:"key"`
		A   string `json:"a"`
		B   string `json:"b"`
	}{d.Key, d.A, d.B})
}

// DiffSettings lists, sorted by key, every recorded setting whose value differs between a and
// b: tool, version, target, seed, the workload's parameters, the router configuration, the
// cluster and the target's /get_server_info (bench), nested objects flattened to dotted keys.
// Server state that changes by itself (server_info.internal_states) is left out.
func DiffSettings(a, b *Results) []SettingDiff {
	sa, sb := settingsOf(a), settingsOf(b)
	keys := slices.Sorted(maps.Keys(sa))
	for k := range sb {
		if _, ok := sa[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []SettingDiff
	for _, k := range keys {
		va, oka := sa[k]
		vb, okb := sb[k]
		if oka && okb && va == vb {
			continue
		}
		if !oka {
			va = "-"
		}
		if !okb {
			vb = "-"
		}
		out = append(out, SettingDiff{Key: k, A: va, B: vb})
	}
	return out
}

// settingsOf flattens the meta of r into dotted keys and display values.
func settingsOf(r *Results) map[string]string {
	m := map[string]string{"tool": r.Meta.Tool, "version": r.Meta.Version, "seed": strconv.FormatInt(r.Meta.Seed, 10),
		"workload.name": r.Meta.Workload.Name}
	if r.Meta.Target != nil {
		m["target"] = *r.Meta.Target
	}
	for k, v := range r.Meta.Workload.Params {
		flattenJSON(m, "workload."+k, v)
	}
	flattenJSON(m, "router", r.Meta.Router)
	flattenJSON(m, "cluster", r.Meta.Cluster)
	flattenJSON(m, "server_info", r.Meta.ServerInfo)
	for k := range m {
		if k == "server_info.internal_states" || strings.HasPrefix(k, "server_info.internal_states.") {
			delete(m, k)
		}
	}
	return m
}

// flattenJSON adds raw under prefix: objects key by key (prefix.key), anything else as its
// compact JSON (strings unquoted). Null and absent values add nothing.
func flattenJSON(m map[string]string, prefix string, raw json.RawMessage) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil && obj != nil {
		for k, v := range obj {
			flattenJSON(m, prefix+"."+k, v)
		}
		return
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		m[prefix] = s
		return
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil && buf.String() != "null" {
		m[prefix] = buf.String()
	}
}
