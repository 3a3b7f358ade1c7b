package fakeworker

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClusterPlan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cc   ClusterConfig
		want []workerPlan
	}{
		{"pd with base port", ClusterConfig{Prefill: 2, Decode: 1, BasePort: 30001}, []workerPlan{
			{engine.RolePrefill, 0, 30001, 30004}, {engine.RolePrefill, 1, 30002, 30005}, {engine.RoleDecode, 0, 30003, 0}}},
		{"mixed", ClusterConfig{Prefill: 1, Decode: 1, Regular: 1, BasePort: 100}, []workerPlan{
			{engine.RolePrefill, 0, 100, 103}, {engine.RoleDecode, 0, 101, 0}, {engine.RoleUnified, 0, 102, 0}}},
		{"os ports", ClusterConfig{Prefill: 1, Decode: 1}, []workerPlan{
			{engine.RolePrefill, 0, 0, 0}, {engine.RoleDecode, 0, 0, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.cc.plan())
		})
	}
}

func TestClusterStartDescribeStop(t *testing.T) {
	base := runtime.NumGoroutine()
	c, err := StartCluster(context.Background(), ClusterConfig{Prefill: 2, Decode: 2, Regular: 1, Worker: Config{DPSize: 4}})
	require.NoError(t, err)
	require.Len(t, c.Workers(), 5)
	var out strings.Builder
	require.NoError(t, c.Describe(&out))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 7, out.String())
	cmds := c.ServeCommands()
	require.Len(t, cmds, 2)
	assert.Equal(t, "router serve --pd-disaggregation --prefill "+c.Workers()[0].URL()+" "+strconv.Itoa(c.Workers()[0].BootstrapPort())+
		" --prefill "+c.Workers()[1].URL()+" "+strconv.Itoa(c.Workers()[1].BootstrapPort())+
		" --decode "+c.Workers()[2].URL()+" --decode "+c.Workers()[3].URL()+" --dp-aware", cmds[0])
	assert.Equal(t, "router serve --worker-urls "+c.Workers()[4].URL()+" --dp-aware", cmds[1])
	assert.Equal(t, cmds[0], "router serve "+strings.Join(c.ServeArgs(), " "))
	// A PD request through the cluster's own workers.
	p, d := c.Workers()[0], c.Workers()[3]
	leg := pdBody(`{"text":"cluster"}`, p, 11, "")
	done := make(chan int, 1)
	go func() { s, _ := post(t, p.URL()+"/generate", leg); done <- s }()
	status, raw := post(t, d.URL()+"/generate", leg)
	assert.Equal(t, http.StatusOK, status, string(raw))
	assert.Equal(t, http.StatusOK, <-done)
	c.Stop()
	require.NoError(t, c.Wait())
	testClient.CloseIdleConnections()
	goroutinesSettle(t, base)
}

func TestClusterErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cc   ClusterConfig
		want string
	}{
		{"empty", ClusterConfig{}, "no workers"},
		{"prefill only", ClusterConfig{Prefill: 1}, "needs both"},
		{"negative", ClusterConfig{Regular: -1}, "must not be negative"},
		{"bad worker", ClusterConfig{Regular: 1, Worker: Config{DPSize: -2}}, "--dp-size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := StartCluster(context.Background(), tc.cc)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
