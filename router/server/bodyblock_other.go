//go:build !linux

package server

// mapBlock has no mapping outside the Go heap on this platform: chunked bodies are read into
// heap blocks (bodyBlock falls back to make).
func mapBlock(int) []byte { return nil }

// unmapBlock is never called without mapBlock.
func unmapBlock([]byte) {}
