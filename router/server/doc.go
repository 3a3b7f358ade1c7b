// Package server is the live HTTP router (`router serve`): handlers for the SGLang router's
// endpoints, regular and PD dispatch, the SSE relay, probes that feed the router core's
// health and breaker machines, admission control and Prometheus metrics. Routing decisions
// themselves are the router package's; this package drives it with the wall clock.
//
// Its [Config] is serve's settings: the routing settings (router.Config, embedded, which the
// simulator shares) plus the server's own — listeners, API key, limits, admission, logging,
// Kubernetes service discovery and TLS — read from one flat settings file.
package server
