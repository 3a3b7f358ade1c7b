package main

import (
	"bytes"
	"sync"
	"testing"

	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/router/server/kube"
	"github.com/stretchr/testify/assert"
)

// Service discovery itself is tested in router/server/kube; here, that serve hands it every
// discovery setting.
func TestDiscoverySettingsFromServeConfig(t *testing.T) {
	t.Parallel()
	cfg := server.DefaultConfig()
	cfg.PDDisaggregation = true
	cfg.Selector = []string{"app=a"}
	cfg.PrefillSelector = []string{"app=p", "tier=gpu"}
	cfg.DecodeSelector = []string{"app=d"}
	cfg.ServiceDiscoveryPort = 30000
	cfg.BootstrapPortAnnotation = "x/port"
	cfg.ServiceDiscoveryNamespace = "ns"
	cfg.Kubeconfig = "/k"
	assert.Equal(t, kube.Config{PD: true, Selector: []string{"app=a"}, PrefillSelector: []string{"app=p", "tier=gpu"},
		DecodeSelector: []string{"app=d"}, Port: 30000, BootstrapPortAnnotation: "x/port", Namespace: "ns", Kubeconfig: "/k"},
		discoverySettings(cfg))
	stop, err := startDiscovery(t.Context(), server.DefaultConfig(), nil, nil)
	assert.NoError(t, err)
	stop() // off: nothing to stop
}

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
