package fakeworker

// kvEventPorts returns each DP rank's KV-event PUB port and replay ROUTER port (0 without
// replay); nil when events are off.
func (w *Worker) kvEventPorts() (pub, replay []int) {
	if w.kv == nil {
		return nil, nil
	}
	for _, kr := range w.kv.ranks {
		pub = append(pub, kr.pubPort)
		replay = append(replay, kr.repPort)
	}
	return pub, replay
}
