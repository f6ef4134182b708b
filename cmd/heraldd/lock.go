package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/herald-mq/herald/internal/flock"
)

// lockDataDir makes sure that one heraldd at a time runs on dir, before it
// opens anything there. It takes two exclusive flocks, both held for the
// process's life (they go with it, also on kill -9):
//
//   - on the data directory itself (an fd of it): deleting or replacing a
//     file in it cannot undo this one, so a second daemon is refused even
//     when heraldd.lock was removed under the first (TestDataDirLock_LockFileRemoved);
//   - on DATA_DIR/heraldd.lock, which also holds the daemon's pid for the
//     messages and for preflight, and which a heraldd of an earlier version,
//     which locks only this file, sees. It is checked after locking to be
//     the file at the path still (same device and inode), and taken again
//     if it was replaced meanwhile.
//
// A lock held by another is tried again for up to flock.Wait (1 s): the
// shared locks --check-config takes for a moment (lockHolder) do not
// refuse a start (TestDataDirLock_CheckHoldingItDoesNotRefuse). A refusal
// names the running daemon's pid when it can be learned: from
// heraldd.lock, else from /proc/locks.
func lockDataDir(dir string) (func(), error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	// A --check-config holding either lock shared for a moment is waited
	// out; a daemon holding it is reported after flock.Wait.
	deadline := time.Now().Add(flock.Wait)
	if err := flock.Exclusive(int(d.Fd()), deadline); err != nil {
		d.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, lockedError(dir)
		}
		// A filesystem without flock on directories (NFS emulates flock
		// with write locks, which need a file open for writing): the lock
		// file alone guards it.
		d = nil
	}
	path := filepath.Join(dir, "heraldd.lock")
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o640)
		if err != nil {
			closeFile(d)
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		if err := flock.Exclusive(int(f.Fd()), deadline); err != nil {
			f.Close()
			closeFile(d)
			return nil, lockedError(dir)
		}
		if !samePath(f, path) {
			// Unlinked or replaced between the open and the flock: lock
			// the one there now.
			f.Close()
			if attempt < 10 {
				continue
			}
			closeFile(d)
			return nil, fmt.Errorf("%s keeps being replaced: is another program removing it?", path)
		}
		f.Truncate(0)
		fmt.Fprintf(f, "%d\n", os.Getpid())
		return func() { f.Close(); closeFile(d) }, nil
	}
}

func closeFile(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// samePath reports whether the open file f is the file at path now.
func samePath(f *os.File, path string) bool {
	var a, b syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &a) != nil || syscall.Stat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

func lockedError(dir string) error {
	who := "another heraldd"
	if pid := lockHolder(dir); pid > 0 {
		who = fmt.Sprintf("another heraldd (pid %d)", pid)
	}
	return fmt.Errorf("%s is locked by %s (check with: herald status); stop it or choose another --data-dir", dir, who)
}

// lockHolder returns the pid of a heraldd running on dataDir (holding the
// lock of the directory or of its heraldd.lock), -1 when one does but its
// pid is unknown, or 0.
func lockHolder(dataDir string) int {
	var dirLocked bool
	var dirStat syscall.Stat_t
	if d, err := os.Open(dataDir); err == nil {
		if syscall.Fstat(int(d.Fd()), &dirStat) == nil {
			err := syscall.Flock(int(d.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
			if err == nil {
				syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
			}
			dirLocked = errors.Is(err, syscall.EWOULDBLOCK)
		}
		d.Close()
	}
	filePID := lockFileHolder(filepath.Join(dataDir, "heraldd.lock"))
	switch {
	case filePID > 0:
		return filePID
	case !dirLocked:
		return filePID // 0, or -1: the file is locked, its pid not written yet
	}
	// The directory is locked, heraldd.lock was removed or replaced: ask
	// the kernel who holds the directory's lock.
	if pid := flockHolder(dirStat); pid > 0 {
		return pid
	}
	return -1
}

// lockFileHolder returns the pid written in the lock file at path when it
// is locked (-1 if none is written yet), or 0 when it is not.
func lockFileHolder(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return 0
	}
	var b [32]byte
	n, _ := f.ReadAt(b[:], 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return -1 // locked, pid not written yet
	}
	return pid
}

// flockHolder returns the pid of the process holding a flock on the file
// st describes, from /proc/locks (lines like "1: FLOCK  ADVISORY  WRITE
// 1234 fe:00:10215736 0 EOF", the device as major:minor in hex), or 0 when
// it is not found or /proc/locks cannot be read (systemd's ProcSubset=pid
// hides it).
func flockHolder(st syscall.Stat_t) int {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer f.Close()
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^uint64(0xfff)
	minor := dev&0xff | (dev>>12)&^uint64(0xff)
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, st.Ino)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" || fs[5] != want {
			continue // a waiter ("->"), another kind of lock or file
		}
		if pid, err := strconv.Atoi(fs[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}
