package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/pflag"
)

// Commands that share flags: the key of sharedFlagHelp's inner maps.
const (
	cmdServe      = "serve"
	cmdSim        = "sim"
	cmdBench      = "bench"
	cmdFakeworker = "fakeworker"
	cmdDemo       = "demo"
)

// sharedFlagHelp is the one place that defines the flags several commands take (by their
// config-file key), with the help text each command gives it: the same name means the same
// thing, but what it acts on differs (serve asks live workers; sim has simulated servers).
// A test walks every command's --help for phrases that were once copied to the wrong one.
var sharedFlagHelp = map[string]map[string]string{
	"seed": {
		cmdServe:      "seed for rooms, rids and random policies: the same seed gives the same ids and picks (default: a random seed, logged at start)",
		cmdSim:        "seed of the workload, arrivals, router and engine (same flags and seed: byte-identical results)",
		cmdBench:      "seed of all generated text, lengths and random arrivals (same seed: the same requests)",
		cmdFakeworker: "seed of failure-injection draws and generated ids",
		cmdDemo:       "seed of the router, the rids and rooms, and the workload (both runs)",
	},
	"dp_aware": {
		cmdServe: "route to DP ranks: read dp_size from each worker's /get_server_info and address url@rank targets",
		cmdSim:   "route to the DP ranks (url@rank) of the simulated servers, --dp-size ranks each",
	},
	"pd_disaggregation": {
		cmdServe: "prefill/decode disaggregated mode: give --prefill and --decode workers",
		cmdSim:   "simulate a PD cluster of --prefill prefill and --decode decode servers (set false, or give --regular K, for a regular cluster)",
	},
	"decision_log": {
		cmdServe: "file receiving one JSON line per routing decision (the format router sim writes, to compare the two)",
		cmdSim:   "file receiving one JSON line per simulated routing decision (the format router serve writes, to compare the two)",
	},
}

// flagHelp is the help text of the setting key in command cmd: its shared definition when it
// has one, else def (the setting's help tag).
func flagHelp(cmd, key, def string) string {
	if h, ok := sharedFlagHelp[key][cmd]; ok {
		return h
	}
	if _, shared := sharedFlagHelp[key]; shared {
		panic(fmt.Sprintf("sharedFlagHelp[%q] has no text for %s", key, cmd))
	}
	return def
}

// seedValue is --seed in every command: one flag type ("int", a non-negative integer) whatever
// the field it fills.
type seedValue struct {
	set func(int64)
	get func() (int64, bool)
}

func (s seedValue) Type() string { return "int" }
func (s seedValue) String() string {
	if s.get == nil {
		return ""
	}
	if v, ok := s.get(); ok {
		return strconv.FormatInt(v, 10)
	}
	return ""
}
func (s seedValue) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a non-negative integer", v)
	}
	s.set(n)
	return nil
}

// seedFlag registers --seed on fs for command cmd, filling whichever kind of field it holds:
// *uint64, *int64, or **int64 (nil: not given).
func seedFlag(fs *pflag.FlagSet, cmd string, dst any) {
	var v seedValue
	switch p := dst.(type) {
	case *uint64:
		v = seedValue{set: func(n int64) { *p = uint64(n) }, get: func() (int64, bool) { return int64(*p), true }}
	case *int64:
		v = seedValue{set: func(n int64) { *p = n }, get: func() (int64, bool) { return *p, true }}
	case **int64:
		v = seedValue{set: func(n int64) { *p = &n }, get: func() (int64, bool) {
			if *p == nil {
				return 0, false
			}
			return **p, true
		}}
	default:
		panic(fmt.Sprintf("seedFlag: unsupported field type %T", dst))
	}
	fs.Var(v, "seed", flagHelp(cmd, "seed", ""))
}
