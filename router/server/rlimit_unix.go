//go:build unix

package server

import "syscall"

// openFileLimit returns the process's soft limit on open files (Go raises it to the hard
// limit at start). An unlimited or absurdly large limit counts as none.
func openFileLimit() (uint64, bool) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur >= 1<<62 {
		return 0, false
	}
	return uint64(r.Cur), true
}
