package reports

import (
	"bytes"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
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
// Settings only: state that changes by itself while a server runs (runtimeKeys: its
// per-rank internal_states, the load snapshot) is left out. Durations the simulator records
// in nanoseconds (cluster.ttft, cluster.net_latency, …) read as Go durations ("100ms").
//
// A live run's engine settings (the target's /get_server_info: server_info.dp_size, …) and a
// simulated run's (cluster.resolved.prefill.dp_size, …) are compared by meaning: when one run
// records each form, both are keyed engine.ROLE.SETTING (engine.prefill.dp_size), so the same
// setting is one row — listed only when its values differ — rather than two one-sided ones.
func DiffSettings(a, b *Results) []SettingDiff {
	sa, sb := settingsOf(a), settingsOf(b)
	if liveVsSim(sa, sb) || liveVsSim(sb, sa) {
		byMeaning(sa)
		byMeaning(sb)
	}
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
	for k, v := range m {
		if isRuntimeKey(k) {
			delete(m, k)
			continue
		}
		m[k] = formatDuration(k, v)
	}
	return m
}

// runtimeKeys are the top-level fields of a recorded object (server_info, router, cluster)
// that snapshot what a server is doing rather than how it was set up: SGLang's
// /get_server_info merges per-rank internal_states (last_gen_throughput, memory usage) and,
// on newer versions and fakeworker, a "load" list of running and queued requests per rank.
// Two runs always differ in them, and a snapshot can run to hundreds of characters.
var runtimeKeys = []string{"internal_states", "load"}

// isRuntimeKey reports whether dotted key k lies under a runtimeKeys field of its object.
func isRuntimeKey(k string) bool {
	parts := strings.SplitN(k, ".", 3)
	return len(parts) >= 2 && slices.Contains(runtimeKeys, parts[1])
}

// nanosKey matches the duration fields the simulator's cluster records as a count of
// nanoseconds (encoding/json's form of time.Duration): ttft, itl, net_latency, think_time, ….
// Fields with a unit suffix (_secs, _ms, _s) keep their number.
var nanosKey = regexp.MustCompile(`^cluster\.(.+\.)?(ttft|itl|tpot|[a-z_]*(latency|timeout|interval|delay|duration|think_time))$`)

// formatDuration writes an integer count of nanoseconds under a duration key of the cluster
// as a Go duration (100000000 → "100ms"); any other value is returned as it is.
func formatDuration(k, v string) string {
	if !nanosKey.MatchString(k) {
		return v
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return v
	}
	return time.Duration(n).String()
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

// liveVsSim reports whether live records a target's /get_server_info and sim a simulated
// cluster's resolved engines.
func liveVsSim(live, sim map[string]string) bool {
	return hasPrefix(live, "server_info.") && hasPrefix(sim, "cluster.resolved.")
}

// hasPrefix reports whether any key of m starts with prefix.
func hasPrefix(m map[string]string, prefix string) bool {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// engineSettings maps the /get_server_info fields a simulated cluster also resolves to their
// place under cluster.resolved.ROLE: the parallelism, the engine model and the engine
// arguments whose meaning is the same on both sides (max_running_requests is left out: SGLang
// reports it over all DP ranks, the simulator per rank).
var engineSettings = map[string]string{
	"dp_size": "dp_size", "tp_size": "tp_size", "ep_size": "ep_size",
	"enable_dp_attention": "enable_dp_attention", "profile": "profile",
	"chunked_prefill_size":      "engine_args.chunked_prefill_size",
	"page_size":                 "engine_args.page_size",
	"schedule_conservativeness": "engine_args.schedule_conservativeness",
	"max_total_num_tokens":      "engine_args.max_total_tokens",
}

// byMeaning rekeys m's engine settings as engine.ROLE.SETTING: server_info.F (ROLE from its
// disaggregation_mode; regular without one) and cluster.resolved.ROLE.PATH (engineSettings).
// The router settings serve and sim share keep their names (router.Config's), except serve's
// load poll interval, in ms, which is sim's load_report_interval (a Go duration).
func byMeaning(m map[string]string) {
	if v, ok := m["router.load_poll_interval_ms"]; ok {
		if ms, err := strconv.Atoi(v); err == nil {
			m["router.load_report_interval"] = (time.Duration(ms) * time.Millisecond).String()
			delete(m, "router.load_poll_interval_ms")
		}
	}
	role := m["server_info.disaggregation_mode"]
	if role == "" || role == "null" {
		role = "regular"
	}
	for f, path := range engineSettings {
		if v, ok := m["server_info."+f]; ok {
			m["engine."+role+"."+f] = v
			delete(m, "server_info."+f)
		}
		for _, r := range []string{"prefill", "decode", "regular"} {
			if v, ok := m["cluster.resolved."+r+"."+path]; ok {
				m["engine."+r+"."+f] = v
				delete(m, "cluster.resolved."+r+"."+path)
			}
		}
	}
}
