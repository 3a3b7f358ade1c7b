package plan

import (
	"fmt"
	"slices"

	"github.com/pdrouter/pdrouter/sim"
)

// shardKey names the one sweep dimension a plan's shard files hold: the candidate's shape.
const shardKey = "plan_cluster"

// WriteShard writes this shard's first-stage simulations to dir as `router sim sweep
// --shard` does (sim.WriteShard: dir/sweep.json), for Merge: the points are the positions of
// Todo, their value the candidate's shape.
func (p *Plan) WriteShard(dir string) error {
	todo := p.Todo()
	vars := []sim.Vary{{Key: shardKey, Values: shapes(todo)}}
	var pts []sim.Point
	n := max(p.Spec.Shards, 1)
	for k, c := range todo {
		if k%n != p.Spec.Shard {
			continue
		}
		pt := c.Point
		pt.Index, pt.Values = k, []string{c.Shape()}
		pts = append(pts, pt)
	}
	return sim.WriteShard(dir, vars, len(todo), -1, p.Spec.Shard, n, pts)
}

// Merge reads the shards' directories (sim.ReadShards) into the plan's first stage, as if Run
// had simulated every candidate here. The shards must come from a plan of the same flags: the
// same candidates left by the same bounds.
func (p *Plan) Merge(dirs []string) error {
	vars, pts, _, err := sim.ReadShards(dirs)
	if err != nil {
		return err
	}
	todo := p.Todo()
	if len(vars) != 1 || vars[0].Key != shardKey || !slices.Equal(vars[0].Values, shapes(todo)) {
		return fmt.Errorf("plan: --merge: the shards hold another plan's candidates (give the flags the shards ran with)")
	}
	for _, pt := range pts {
		c := todo[pt.Index]
		c.Point.Result, c.Point.Err = pt.Result, nil
		c.score(p.Spec.SLO)
	}
	return nil
}

func shapes(cs []*Candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Shape()
	}
	return out
}
