package server

// upstreamClient sends the inference legs (regular, prefill, decode) upstream.
type upstreamClient interface {
	doer
	// CloseIdleConnections closes pooled connections not in use (Server.Wait).
	CloseIdleConnections()
}
