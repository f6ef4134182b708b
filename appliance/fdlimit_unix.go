//go:build unix

package appliance

import "syscall"

// openFileLimit is the process's RLIMIT_NOFILE (soft), 0 when unknown. Go
// raises the soft limit to the hard one at start.
func openFileLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return int(r.Cur)
}
