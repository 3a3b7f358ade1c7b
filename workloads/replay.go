package workloads

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Replay is what a run needs to be replayed: its workload and load parameters, exactly.
// The bench writes it into results.json (meta.replay) so that `router sim calibrate` can run
// the same conversations at the same levels in the simulator.
type Replay struct {
	Workload Params     `json:"workload"`
	Load     LoadParams `json:"load"`
}

// replayJSON is Replay with the rates as strings: JSON has no +Inf (a burst level).
type replayJSON struct {
	Workload Params     `json:"workload"`
	Load     LoadParams `json:"load"`
	Rates    []string   `json:"rates"`
}

// MarshalJSON writes the replay; rates go to their own list of strings ("+Inf" for a burst).
func (r Replay) MarshalJSON() ([]byte, error) {
	out := replayJSON{Workload: r.Workload, Load: r.Load}
	out.Load.Rates = nil
	for _, v := range r.Load.Rates {
		out.Rates = append(out.Rates, strconv.FormatFloat(v, 'g', -1, 64))
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Replay) UnmarshalJSON(b []byte) error {
	var in replayJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	r.Workload, r.Load = in.Workload, in.Load
	r.Load.Rates = nil
	for _, s := range in.Rates {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(v) {
			return fmt.Errorf("workloads: replay rate %q is not a number", s)
		}
		r.Load.Rates = append(r.Load.Rates, v)
	}
	return nil
}
