package fakeworker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/pdrouter/pdrouter/sim/engine"
)

// ClusterConfig describes a whole local cluster in one process (`router fakeworker cluster`).
type ClusterConfig struct {
	Prefill, Decode, Regular int // workers per role; Prefill and Decode go together

	// BasePort numbers the ports: prefill workers P, P+1, …, then decode workers, then regular
	// workers, then the prefill workers' bootstrap ports in the same order. 0: the OS picks
	// every port.
	BasePort int

	// Worker is the template of every worker (DP size, profile, speedup, failures, …); its
	// Mode, Port and BootstrapPort are set per worker.
	Worker Config
}

// Cluster is a running local cluster. Its methods are safe for concurrent use.
type Cluster struct {
	workers []*Worker
	dpSize  int
	cancel  context.CancelFunc
}

// StartCluster starts every worker of cc (prefill, then decode, then regular) and returns once
// all of them listen; on an error it stops those already started.
func StartCluster(ctx context.Context, cc ClusterConfig) (*Cluster, error) {
	switch {
	case cc.Prefill < 0 || cc.Decode < 0 || cc.Regular < 0:
		return nil, fmt.Errorf("fakeworker: --prefill %d, --decode %d and --regular %d must not be negative", cc.Prefill, cc.Decode, cc.Regular)
	case (cc.Prefill > 0) != (cc.Decode > 0):
		return nil, fmt.Errorf("fakeworker: --prefill %d and --decode %d: a PD cluster needs both", cc.Prefill, cc.Decode)
	case cc.Prefill+cc.Decode+cc.Regular == 0:
		return nil, errors.New("fakeworker: the cluster has no workers (set --prefill and --decode, or --regular)")
	case cc.BasePort < 0 || cc.BasePort+cc.Prefill*2+cc.Decode+cc.Regular > 65536:
		return nil, fmt.Errorf("fakeworker: --base-port %d leaves no room for %d ports", cc.BasePort, cc.Prefill*2+cc.Decode+cc.Regular)
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &Cluster{dpSize: max(cc.Worker.DPSize, 1), cancel: cancel}
	for i, pl := range cc.plan() {
		wc := cc.Worker
		wc.Mode, wc.Port, wc.BootstrapPort = pl.mode, pl.port, pl.bootstrapPort
		wc.Seed = cc.Worker.Seed + uint64(i)
		if pl.mode != engine.RolePrefill {
			wc.Failures.NeverSignalKV = false
		}
		var err error
		if wc.KVEventsConfig != "" { // worker i publishes on the ports after worker i-1's ranks
			wc.KVEventsConfig, err = shiftKVEventPorts(wc.KVEventsConfig, i*c.dpSize)
		}
		if err != nil {
			c.Stop()
			c.Wait()
			return nil, err
		}
		w, err := Start(ctx, wc)
		if err != nil {
			c.Stop()
			c.Wait()
			return nil, fmt.Errorf("fakeworker: starting %s worker %d: %w", ModeName(pl.mode), pl.index, err)
		}
		c.workers = append(c.workers, w)
	}
	return c, nil
}

// workerPlan is one worker of a cluster: its mode, index within the mode and ports.
type workerPlan struct {
	mode                engine.Role
	index               int
	port, bootstrapPort int
}

// plan lays out the workers and their ports (see BasePort).
func (cc ClusterConfig) plan() []workerPlan {
	total := cc.Prefill + cc.Decode + cc.Regular
	port := func(i int) int {
		if cc.BasePort == 0 {
			return 0
		}
		return cc.BasePort + i
	}
	var out []workerPlan
	for _, r := range []struct {
		mode engine.Role
		n    int
	}{{engine.RolePrefill, cc.Prefill}, {engine.RoleDecode, cc.Decode}, {engine.RoleUnified, cc.Regular}} {
		for i := range r.n {
			pl := workerPlan{mode: r.mode, index: i, port: port(len(out))}
			if r.mode == engine.RolePrefill {
				pl.bootstrapPort = port(total + i)
			}
			out = append(out, pl)
		}
	}
	return out
}

// Workers returns the workers: prefill, then decode, then regular.
func (c *Cluster) Workers() []*Worker { return c.workers }

// Stop stops every worker.
func (c *Cluster) Stop() { c.cancel() }

// Wait blocks until every worker has stopped and returns the injected crashes, joined.
func (c *Cluster) Wait() error {
	var errs []error
	for _, w := range c.workers {
		errs = append(errs, w.Wait())
	}
	return errors.Join(errs...)
}

// ServeArgs returns the `router serve` arguments (after "router serve") matching the cluster:
// one PD line's flags when it has prefill and decode workers, else the regular workers' line.
// With more than one DP rank --dp-aware is added. A cluster with both PD and regular workers
// needs two routers; see ServeCommands.
func (c *Cluster) ServeArgs() []string {
	cmds := c.serveArgs()
	if len(cmds) == 0 {
		return nil
	}
	return cmds[0]
}

func (c *Cluster) serveArgs() [][]string {
	var pd, reg []string
	for _, w := range c.workers {
		switch w.Mode() {
		case engine.RolePrefill:
			pd = append(pd, "--prefill", w.URL(), strconv.Itoa(w.BootstrapPort()))
		case engine.RoleDecode:
			pd = append(pd, "--decode", w.URL())
		default:
			reg = append(reg, w.URL())
		}
	}
	var out [][]string
	if len(pd) > 0 {
		out = append(out, append([]string{"--pd-disaggregation"}, pd...))
	}
	if len(reg) > 0 {
		out = append(out, append([]string{"--worker-urls"}, reg...))
	}
	if c.dpSize > 1 {
		for i := range out {
			out[i] = append(out[i], "--dp-aware")
		}
	}
	return out
}

// ServeCommands returns one `router serve …` command line per router the cluster needs (PD
// and/or regular).
func (c *Cluster) ServeCommands() []string {
	var out []string
	for _, args := range c.serveArgs() {
		out = append(out, "router serve "+strings.Join(args, " "))
	}
	return out
}

// Describe writes one line per worker (role, URL, bootstrap port or "-", DP size) and then the
// matching `router serve` command lines.
func (c *Cluster) Describe(out io.Writer) error {
	var b strings.Builder
	for _, w := range c.workers {
		bp := "-"
		if p := w.BootstrapPort(); p != 0 {
			bp = strconv.Itoa(p)
		}
		fmt.Fprintf(&b, "%-8s %-28s bootstrap_port=%-6s dp_size=%d\n", ModeName(w.Mode()), w.URL(), bp, w.Config().DPSize)
	}
	for _, cmd := range c.ServeCommands() {
		b.WriteString(cmd)
		b.WriteByte('\n')
	}
	_, err := io.WriteString(out, b.String())
	return err
}
