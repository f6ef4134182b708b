package lazyfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// server is one mount of the lazy file system, served by this process
// (a test mounts it in a child process: Mount, child.go).
type server struct {
	backing, mountDir string
	fuseServer        *fuse.Server

	mu     sync.Mutex
	states map[fileKey]*fileState  // by backing inode, clean or dirty
	dirty  map[*fileState]struct{} // states with unsynced changes
	fsyncs int
	cuts   int
	// fsync faults (FailFsyncs)
	faultSuffix    string
	faultsLeft     int
	faultsReturned int
	// read faults (FailReads)
	readFaultSuffix    string
	readFaultsLeft     int
	readFaultsReturned int

	// Namespace model (ns.go); nsMu is taken before mu, never after.
	nsMu     sync.Mutex
	ops      []*nsOp
	trash    string // where removed and replaced files wait, beside the backing dir
	trashSeq int

	t reporter

	// conn is the mount's connection in the FUSE control file system
	// (the minor number of its device), for abort.
	conn uint32

	unmountOnce sync.Once
	unmountErr  error
}

func (f *server) state(key fileKey) *fileState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.states[key]
	if st == nil {
		st = &fileState{key: key}
		f.states[key] = st
	}
	return st
}

// noteDirty records st in the dirty set; f.mu held.
func (f *server) noteDirty(st *fileState) {
	if st.dirty {
		f.dirty[st] = struct{}{}
	}
}

// forget unties key from its state: the file's last link is gone, and the
// backing file system may give the inode number to a new file.
func (f *server) forget(key fileKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.states, key)
}

// Cut simulates a power cut: every write not yet fsynced is discarded and
// every directory change whose directory was not fsynced is undone, so the
// backing directory holds exactly what was synced. Kill every process
// using the mount first (a process still writing would just make new
// unsynced state), then Unmount: the kernel may still cache pages and
// names of what was discarded, so read again only through a new Mount or
// the backing directory.
func (f *server) Cut() {
	for _, err := range f.undoAll() {
		f.t.Errorf("lazyfs: cut: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for st := range f.dirty {
		st.drop()
	}
	clear(f.dirty)
	f.cuts++
}

// syncEverything is a clean shutdown: all unsynced data and directory
// changes are made durable.
func (f *server) syncEverything() error {
	f.syncAll()
	f.mu.Lock()
	defer f.mu.Unlock()
	var first error
	for st := range f.dirty {
		if e := st.flush(); e != 0 && first == nil {
			first = fmt.Errorf("lazyfs: sync at unmount: %w", e)
		}
		delete(f.dirty, st)
	}
	return first
}

// Unsynced reports how many files have unsynced data changes now.
func (f *server) Unsynced() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.dirty)
}

// FailFsyncs makes the next n fsync or fdatasync calls on files whose
// path ends with suffix fail with EIO, as a device that cannot write
// makes them fail. The file's unsynced changes stay as they were: still
// read back, lost at a Cut, made durable by a later fsync that succeeds.
// (Linux may instead mark the pages clean and lose them for good; either
// way nothing written since the last successful fsync is known durable.)
func (f *server) FailFsyncs(suffix string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faultSuffix, f.faultsLeft = suffix, n
}

// FsyncFaults reports how many fsync calls failed because of FailFsyncs.
func (f *server) FsyncFaults() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faultsReturned
}

// FailReads makes the next n reads that reach the file system on files
// whose path ends with suffix fail with EIO (n < 0: every one, until
// FailReads is called again), as a device that cannot read a sector makes
// them fail; the file is unchanged. Reads the kernel's page cache serves
// do not reach the file system: what was written or read through the
// mount may be cached; a new Mount starts with nothing cached. The kernel
// tries a failed read again (a readahead, then the page's own read), so a
// read(2) fails only when two reads in a row do: a failing device is n < 0.
func (f *server) FailReads(suffix string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readFaultSuffix, f.readFaultsLeft = suffix, n
}

// ReadFaults reports how many reads failed because of FailReads.
func (f *server) ReadFaults() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.readFaultsReturned
}

// readFault tells whether a read of path fails (FailReads).
func (f *server) readFault(path string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readFaultsLeft != 0 && strings.HasSuffix(path, f.readFaultSuffix) {
		if f.readFaultsLeft > 0 {
			f.readFaultsLeft--
		}
		f.readFaultsReturned++
		return true
	}
	return false
}

// Fsyncs reports how many fsync/fdatasync calls the mount has served.
func (f *server) Fsyncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fsyncs
}

// Dir is the mount point.
func (f *server) Dir() string { return f.mountDir }

// Unmount unmounts the file system, lazily (MNT_DETACH) if it is busy.
// Like the clean unmount of a real file system it first makes everything
// durable: after a Cut there is nothing left to sync.
func (f *server) Unmount() error {
	f.unmountOnce.Do(func() {
		f.unmountErr = f.syncEverything()
		if err := f.fuseServer.Unmount(); err != nil {
			// Busy: a file on the mount is still open. Detached alone,
			// the connection would outlive its server: when this
			// process exits, closing that file sends a FLUSH nobody
			// will answer, and the kernel waits for the reply without
			// end (the process hangs in D state, unkillable). Abort the
			// connection first: every request on it fails at once.
			f.t.Logf("lazyfs: %s is busy at unmount (%v): aborting its connection, then detaching it", f.mountDir, err)
			if aerr := f.abort(); aerr != nil {
				f.unmountErr = errors.Join(f.unmountErr, aerr)
			}
			if lerr := lazyUnmount(f.mountDir); lerr != nil {
				f.unmountErr = errors.Join(f.unmountErr, fmt.Errorf("unmount %s: %v; lazy unmount: %v", f.mountDir, err, lerr))
			}
		}
		if err := os.RemoveAll(f.trash); err != nil {
			f.unmountErr = errors.Join(f.unmountErr, err)
		}
	})
	return f.unmountErr
}

// fusectlDir is where the FUSE control file system is mounted.
const fusectlDir = "/sys/fs/fuse/connections"

// abort aborts the mount's FUSE connection: requests waiting on it and
// every later one fail with ENOTCONN.
func (f *server) abort() error { return abortConn(f.conn, f.mountDir) }

// abortConn aborts FUSE connection conn, mounted at dir, through the FUSE
// control file system.
func abortConn(conn uint32, dir string) error {
	if conn == 0 {
		return fmt.Errorf("lazyfs: abort %s: its FUSE connection is not known", dir)
	}
	path := filepath.Join(fusectlDir, strconv.FormatUint(uint64(conn), 10), "abort")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		// The control file system is not mounted (systemd mounts it;
		// a bare VM or container may not). Mount it: root only.
		if merr := syscall.Mount("fusectl", fusectlDir, "fusectl", 0, ""); merr != nil && !errors.Is(merr, syscall.EBUSY) {
			return fmt.Errorf("lazyfs: abort %s: no %s and mounting fusectl there failed: %v (mount -t fusectl none %s)", dir, path, merr, fusectlDir)
		}
	}
	if err := os.WriteFile(path, []byte("1"), 0); err != nil {
		return fmt.Errorf("lazyfs: abort %s: %w", dir, err)
	}
	return nil
}

func lazyUnmount(dir string) error {
	if err := syscall.Unmount(dir, syscall.MNT_DETACH); err == nil {
		return nil
	}
	for _, bin := range []string{"fusermount3", "fusermount"} {
		if path, err := exec.LookPath(bin); err == nil {
			if out, err := exec.Command(path, "-u", "-z", dir).CombinedOutput(); err != nil {
				return fmt.Errorf("%s -u -z: %v: %s", bin, err, out)
			}
			return nil
		}
	}
	return errors.New("umount2(MNT_DETACH) failed and no fusermount3/fusermount is installed")
}

// How long the kernel may cache names and attributes (tests change them).
var entryTimeout, attrTimeout = time.Second, time.Second

// requireEnv names the variable that turns "cannot mount FUSE" from a
// skip into a failure.
const requireEnv = "HERALD_REQUIRE_ROOT_TESTS"

func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + ": lazyfs needs /dev/fuse and either root or fusermount3 (apt-get install fuse3)"
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("%s (%s=1: not skipping)", msg, requireEnv)
	}
	t.Skip(msg)
}

// reporter is where an FS reports: a test, or stderr in a test's child.
type reporter interface {
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
}

// unavailableError is a mount that failed because FUSE cannot be used here.
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string { return e.msg }

// mount mounts a lazy file system served by this process: the caller
// unmounts. Tests mount through Mount, in a child process (child.go).
func mount(t reporter, backingDir, mountDir string) (*server, error) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, &unavailableError{fmt.Sprintf("no /dev/fuse (%v)", err)}
	}
	backingDir, err := filepath.Abs(backingDir)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(backingDir, &st); err != nil {
		return nil, fmt.Errorf("lazyfs: backing dir: %w", err)
	}
	if fi, err := os.Stat(mountDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("lazyfs: mount point %s is not a directory (%v)", mountDir, err)
	}
	root := os.Geteuid() == 0
	// The trash must be on the backing file system (files are renamed
	// into it) but outside the backing dir (it must not show).
	trash, err := os.MkdirTemp(filepath.Dir(backingDir), ".lazyfs-trash-")
	if err != nil {
		return nil, fmt.Errorf("lazyfs: trash dir: %w", err)
	}
	var tst syscall.Stat_t
	if err := syscall.Stat(trash, &tst); err != nil || tst.Dev != st.Dev {
		os.Remove(trash)
		return nil, fmt.Errorf("lazyfs: %s is not on the file system of %s (%v): use a backing dir that is not a mount point", trash, backingDir, err)
	}
	f := &server{backing: backingDir, mountDir: mountDir, trash: trash, t: t,
		states: map[fileKey]*fileState{}, dirty: map[*fileState]struct{}{}}
	lroot := &fs.LoopbackRoot{Path: backingDir, Dev: uint64(st.Dev)}
	lroot.NewNode = func(r *fs.LoopbackRoot, parent *fs.Inode, name string, st *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, lfs: f}
	}
	rootNode := lroot.NewNode(lroot, nil, "", &st)
	lroot.RootNode = rootNode
	entry, attr := entryTimeout, attrTimeout
	opts := &fs.Options{
		EntryTimeout: &entry,
		AttrTimeout:  &attr,
		MountOptions: fuse.MountOptions{
			FsName: "lazyfs",
			Name:   "lazyfs",
			// mount(2) as root, fusermount3 otherwise.
			DirectMountStrict: root,
			// No EnableLocks: the kernel keeps flock and POSIX locks
			// itself, which is right for one mount.
		},
	}
	server, err := fs.Mount(mountDir, rootNode, opts)
	if err != nil {
		os.Remove(trash)
		s := err.Error()
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENODEV) ||
			errors.Is(err, exec.ErrNotFound) || strings.Contains(s, "permission denied") || strings.Contains(s, "not permitted") ||
			!root && strings.Contains(s, "fusermount") {
			return nil, &unavailableError{fmt.Sprintf("cannot mount FUSE at %s (%v)", mountDir, err)}
		}
		return nil, fmt.Errorf("lazyfs: mount %s: %w", mountDir, err)
	}
	f.fuseServer = server
	var mst syscall.Stat_t
	if err := syscall.Stat(mountDir, &mst); err == nil {
		f.conn = unix.Minor(mst.Dev)
	}
	return f, nil
}
