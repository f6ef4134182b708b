package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes an exclusive flock on DATA_DIR/heraldd.lock so that a
// second daemon on the same journal stops before it opens anything. The
// lock goes with the process, also on kill -9.
func lockDataDir(dir string) (func(), error) {
	path := filepath.Join(dir, "heraldd.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s is locked by another heraldd (check with: herald status); stop it or choose another --data-dir", dir)
	}
	f.Truncate(0)
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return func() { f.Close() }, nil
}
