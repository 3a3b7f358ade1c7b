package main

import (
	"context"
	"log/slog"

	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/router/server/kube"
)

// The server is discovery's registry: pods become workers through the path POST /workers takes.
var _ kube.Registry = (*server.Server)(nil)

// discoverySettings is the discovery part of serve's settings.
func discoverySettings(cfg server.Config) kube.Config {
	return kube.Config{PD: cfg.PDDisaggregation, Selector: cfg.Selector, PrefillSelector: cfg.PrefillSelector,
		DecodeSelector: cfg.DecodeSelector, Port: cfg.ServiceDiscoveryPort, BootstrapPortAnnotation: cfg.BootstrapPortAnnotation,
		Namespace: cfg.ServiceDiscoveryNamespace, Kubeconfig: cfg.Kubeconfig}
}

// startDiscovery runs Kubernetes service discovery into s until ctx is done (nothing when
// --service-discovery is off); stop waits for it after ctx is cancelled.
func startDiscovery(ctx context.Context, cfg server.Config, s *server.Server, log *slog.Logger) (stop func(), err error) {
	if !cfg.ServiceDiscovery {
		return func() {}, nil
	}
	return kube.Start(ctx, discoverySettings(cfg), s, log)
}
