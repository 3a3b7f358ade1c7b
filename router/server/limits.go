package server

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
