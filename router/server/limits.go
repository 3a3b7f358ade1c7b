package server

import (
	"os"
	"runtime/debug"
)

// initLimits sets up what bounds the cost of hostile or excessive clients: the memory budget
// for bodies in flight (--body-memory-budget), the connection cap (--max-connections) and
// their metrics. New calls it once the registry is known.
func (s *Server) initLimits() {
	s.budget = newBudget(s.cfg.BodyMemoryBudget)
	s.limits = newLimitsMetrics(s.reg, s.budget)
	s.maxConns = s.cfg.MaxConnections
	// Half the descriptors at most go to client connections: the rest are for the workers'
	// connections (one or two per request in flight), the listeners and files.
	if n, ok := openFileLimit(); ok && s.maxConns > 0 && uint64(s.maxConns) > n/2 {
		s.log.Warn("--max-connections is over half the open-file limit; capping it there",
			"max_connections", s.cfg.MaxConnections, "open_file_limit", n, "cap", n/2)
		s.maxConns = int(n / 2)
	}
	s.log.Debug("limits", "body_memory_budget", s.budget.limit, "max_connections", s.maxConns)
}

// setMemoryLimit sets the Go runtime's soft memory limit, unless GOMEMLIMIT is set, to twice
// the body budget plus 64 MiB: what the bodies in flight may cost at most (a body costs about
// its size in regular mode), so near it the collector frees the bodies of finished and refused
// requests before the heap grows, instead of letting it reach twice what is live.
func (s *Server) setMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := 2*s.budget.limit + 64<<20
	debug.SetMemoryLimit(limit)
	s.log.Debug("Go memory limit set from --body-memory-budget", "bytes", limit)
}
