package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/workloads"
)

// tenantConfig is an open-loop random workload over two regular servers that saturates an
// admission bound of 16: requests queue in the router.
func tenantConfig() Config {
	rc := router.DefaultConfig()
	rc.MaxConcurrentRequests, rc.QueueSize = 16, 1000
	p := workloads.DefaultParams()
	p.Workload, p.NumPrompts, p.InputLen, p.OutputLen = workloads.WorkloadRandom, 600, 256, 64
	l := workloads.DefaultLoadParams()
	l.Rates = []float64{200}
	return Config{Cluster: Cluster{Regular: 2}, Router: rc, Workload: p, Load: l}
}

func tenant(t *testing.T, res *Result, name string) *TenantStats {
	t.Helper()
	for _, ts := range res.Stats.Tenants {
		if ts.Tenant == name {
			return ts
		}
	}
	t.Fatalf("no stats for tenant %s", name)
	return nil
}

// The simulator runs serve's admission: a tenant sending most of the requests waits in the
// queue while the other, served at its fair share, barely does; an entry's weight moves the
// share; the run stays deterministic.
func TestSimTenantsFairShare(t *testing.T) {
	t.Parallel()
	cfg := tenantConfig()
	cfg.Routing.TenantMix = "flood:9,calm:1"
	res := mustRun(t, cfg)
	flood, calm := tenant(t, res, "flood"), tenant(t, res, "calm")
	require.Greater(t, flood.Requests, 4*calm.Requests)
	fw, cw := reports.Summarize(flood.Waits), reports.Summarize(calm.Waits)
	require.Greater(t, fw.Mean, 10*cw.Mean, "the flooding tenant waits, the other does not")
	require.Equal(t, encode(t, res), encode(t, mustRun(t, cfg)))

	// Giving flood a weight of 20 turns the tables: calm's share is now 1/21.
	cfg.Router.Tenants = []router.TenantSpec{{Name: "flood", Weight: 20}}
	res = mustRun(t, cfg)
	cw2 := reports.Summarize(tenant(t, res, "calm").Waits)
	require.Greater(t, cw2.Mean, 5*cw.Mean)
}

// A tenant over its limits is refused (429 in the records); priorities order a tenant's queue.
func TestSimTenantLimitsAndPriority(t *testing.T) {
	t.Parallel()
	cfg := tenantConfig()
	cfg.Routing.TenantMix = "flood:9,calm:1"
	cfg.Router.TenantMaxConcurrentRequests = 12
	cfg.Router.Tenants = []router.TenantSpec{{Name: "calm", MaxConcurrentRequests: -1}} // its entry: no limit
	res := mustRun(t, cfg)
	flood, calm := tenant(t, res, "flood"), tenant(t, res, "calm")
	require.Positive(t, flood.Rejected[router.ReasonTenantConcurrency])
	require.Zero(t, calm.Rejected[router.ReasonTenantConcurrency])
	n429 := 0
	for _, r := range res.Records {
		if r.Error != nil && reports.ErrorKind(*r.Error) == "http_429" {
			n429++
		}
	}
	require.Equal(t, flood.Rejected[router.ReasonTenantConcurrency], n429)

	cfg = tenantConfig()
	cfg.Routing.PriorityMix = "0:1,10:1"
	res = mustRun(t, cfg)
	// One tenant (anonymous); compare the waits of the two priorities through the records.
	var hi, lo []float64
	tn, _ := ParseMix("--priority-mix", cfg.Routing.PriorityMix)
	for _, r := range res.Records {
		if r.Error != nil || r.TTFTMs == nil {
			continue
		}
		if tn.pick(r.ID, 'p') == "10" {
			hi = append(hi, *r.TTFTMs)
		} else {
			lo = append(lo, *r.TTFTMs)
		}
	}
	require.NotEmpty(t, hi)
	require.Less(t, reports.Summarize(hi).P50*3, reports.Summarize(lo).P50, "priority 10 overtakes priority 0 (SGLang's default polarity)")
}

func TestParseMix(t *testing.T) {
	t.Parallel()
	m, err := ParseMix("--tenant-mix", "a:3, b")
	require.NoError(t, err)
	require.Equal(t, Mix{Names: []string{"a", "b"}, Weights: []float64{3, 1}}, m)
	for _, bad := range []string{"a:0", "a:x", "a,a", ":2", "a:-1"} {
		_, err := ParseMix("--tenant-mix", bad)
		require.ErrorContains(t, err, "--tenant-mix", bad)
	}
	n := 0
	for i := range 4000 {
		if m.pick(string(rune(i)), 't') == "a" {
			n++
		}
	}
	require.InDelta(t, 3000, n, 150)
}
