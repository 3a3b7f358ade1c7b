package server

import "syscall"

// mapBlock returns n zeroed bytes of an anonymous mapping outside the Go heap, or nil when
// the kernel refuses one. unmapBlock gives the pages back to the kernel at once: the block of a
// refused or joined chunked body stops counting in the router's resident set when it is
// dropped, not at the next garbage collection.
func mapBlock(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	return b
}

// unmapBlock unmaps a block from mapBlock (b as returned, or resliced within its capacity).
func unmapBlock(b []byte) { _ = syscall.Munmap(b[:cap(b)]) }
