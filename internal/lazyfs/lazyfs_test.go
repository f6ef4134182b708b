package lazyfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// env mounts a lazy FS over a fresh backing dir.
type env struct {
	t       *testing.T
	backing string
	mnt     string
	fs      *FS
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, backing: t.TempDir(), mnt: t.TempDir()}
	e.mount()
	return e
}

func (e *env) mount() {
	e.t.Helper()
	fs, err := Mount(e.t, e.backing, e.mnt)
	if err != nil {
		e.t.Fatal(err)
	}
	e.fs = fs
}

// cut is a power cut followed by a reboot: drop unsynced state, unmount,
// mount again.
func (e *env) cut() {
	e.t.Helper()
	e.fs.Cut()
	if err := e.fs.Unmount(); err != nil {
		e.t.Fatal(err)
	}
	e.mount()
}

func (e *env) path(name string) string { return filepath.Join(e.mnt, name) }

func (e *env) create(name string) *os.File {
	e.t.Helper()
	f, err := os.OpenFile(e.path(name), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	return f
}

func (e *env) writeAt(f *os.File, s string, off int64) {
	e.t.Helper()
	if _, err := f.WriteAt([]byte(s), off); err != nil {
		e.t.Fatal(err)
	}
}

// syncDir fsyncs a directory of the mount ("" is its root).
func (e *env) syncDir(name string) {
	e.t.Helper()
	d, err := os.Open(e.path(name))
	if err != nil {
		e.t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		e.t.Fatal(err)
	}
}

// createSynced creates name and syncs its directory: the name is durable.
func (e *env) createSynced(name string) *os.File {
	e.t.Helper()
	f := e.create(name)
	e.syncDir(filepath.Dir(name))
	return f
}

func (e *env) sync(f *os.File) {
	e.t.Helper()
	if err := f.Sync(); err != nil {
		e.t.Fatal(err)
	}
}

// expect checks name's content both through the mount and in the backing
// dir (which must then agree: call it only when nothing is unsynced, or
// with backing to check the backing side alone).
func (e *env) expect(name string, want []byte) {
	e.t.Helper()
	got, err := os.ReadFile(e.path(name))
	if err != nil {
		e.t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		e.t.Errorf("%s through the mount: %q, want %q", name, short(got), short(want))
	}
	e.expectBacking(name, want)
}

func (e *env) expectBacking(name string, want []byte) {
	e.t.Helper()
	got, err := os.ReadFile(filepath.Join(e.backing, name))
	if err != nil {
		e.t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		e.t.Errorf("%s in the backing dir: %q, want %q", name, short(got), short(want))
	}
}

func short(b []byte) string {
	if len(b) > 64 {
		return string(b[:30]) + "..." + string(b[len(b)-30:])
	}
	return string(b)
}

func TestUnsyncedWriteLostOnCut(t *testing.T) {
	e := newEnv(t)
	f := e.createSynced("a")
	e.writeAt(f, "hello", 0)
	got, err := os.ReadFile(e.path("a"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("read your writes: %q, %v", got, err)
	}
	e.expectBacking("a", nil) // nothing reached the backing file yet
	if e.fs.Unsynced() != 1 {
		t.Errorf("Unsynced() = %d, want 1", e.fs.Unsynced())
	}
	f.Close() // close(2) is no sync
	e.cut()
	e.expect("a", nil) // the create is durable (its directory was synced), the data is not
}

func TestSyncedWriteKept(t *testing.T) {
	e := newEnv(t)
	f := e.createSynced("a")
	e.writeAt(f, "hello", 0)
	e.sync(f)
	e.writeAt(f, "J", 0)
	e.writeAt(f, " world", 5)
	if got, _ := os.ReadFile(e.path("a")); string(got) != "Jello world" {
		t.Errorf("read your writes: %q", got)
	}
	f.Close()
	e.cut()
	e.expect("a", []byte("hello"))

	// fdatasync counts as well as fsync.
	f = e.create("a")
	e.writeAt(f, "HELLO again", 0)
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e.cut()
	e.expect("a", []byte("HELLO again"))
}

func TestLargeWritesAcrossPages(t *testing.T) {
	e := newEnv(t)
	f := e.createSynced("big")
	a := bytes.Repeat([]byte("abcdefg"), 3000) // 21000 bytes, not page aligned
	e.writeAt(f, string(a), 0)
	e.sync(f)
	b := bytes.Repeat([]byte("XY"), 5000)
	e.writeAt(f, string(b), 1234) // unsynced overwrite across pages
	want := append([]byte{}, a...)
	copy(want[1234:], b)
	if got, _ := os.ReadFile(e.path("big")); !bytes.Equal(got, want) {
		t.Errorf("read your writes across pages differs")
	}
	f.Close()
	e.cut()
	e.expect("big", a)
}

func TestTruncate(t *testing.T) {
	e := newEnv(t)
	f := e.createSynced("t")
	data := bytes.Repeat([]byte("0123456789"), 1000)
	e.writeAt(f, string(data), 0)
	e.sync(f)

	// Shrink, then grow by writing past the end: the gap reads as zeros,
	// not as the old backing bytes.
	if err := f.Truncate(100); err != nil {
		t.Fatal(err)
	}
	if fi, _ := f.Stat(); fi.Size() != 100 {
		t.Errorf("size after truncate %d, want 100", fi.Size())
	}
	e.writeAt(f, "END", 8000)
	want := make([]byte, 8003)
	copy(want, data[:100])
	copy(want[8000:], "END")
	if got, _ := os.ReadFile(e.path("t")); !bytes.Equal(got, want) {
		t.Errorf("after truncate and write: %q", short(got))
	}
	e.expectBacking("t", data)
	f.Close()
	e.cut()
	e.expect("t", data) // the truncate was not synced either

	// The same, synced: the backing file holds the zeros too.
	f, err := os.OpenFile(e.path("t"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(100); err != nil {
		t.Fatal(err)
	}
	e.writeAt(f, "END", 8000)
	e.sync(f)
	f.Close()
	e.cut()
	e.expect("t", want)

	// truncate(2) by path and open(O_TRUNC) are modelled as well.
	if err := os.Truncate(e.path("t"), 5); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(e.path("t")); fi.Size() != 5 {
		t.Errorf("size after truncate(2): %d", fi.Size())
	}
	f, err = os.OpenFile(e.path("t"), os.O_RDWR|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := f.Stat(); fi.Size() != 0 {
		t.Errorf("size after O_TRUNC: %d", fi.Size())
	}
	f.Close()
	e.expectBacking("t", want)
	e.cut()
	e.expect("t", want)
}

func TestRename(t *testing.T) {
	e := newEnv(t)
	f := e.createSynced("old")
	e.writeAt(f, "synced", 0)
	e.sync(f)
	e.writeAt(f, "SYNCED+unsynced", 0)
	f.Close()
	g := e.createSynced("victim")
	e.writeAt(g, "victim data", 0)
	e.sync(g)
	g.Close()

	// The unsynced data follows the inode, not the name.
	if err := os.Rename(e.path("old"), e.path("victim")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(e.path("victim")); string(got) != "SYNCED+unsynced" {
		t.Errorf("after rename: %q", got)
	}
	if _, err := os.Stat(e.path("old")); !os.IsNotExist(err) {
		t.Errorf("old name still there: %v", err)
	}
	if e.fs.PendingDirOps() != 1 {
		t.Errorf("PendingDirOps() = %d, want 1", e.fs.PendingDirOps())
	}
	// Cut before the directory is synced: the rename is undone, the
	// replaced file is back, each with its synced data.
	e.cut()
	e.expect("old", []byte("synced"))
	e.expect("victim", []byte("victim data"))

	// Synced, the rename stays.
	if err := os.Rename(e.path("old"), e.path("victim")); err != nil {
		t.Fatal(err)
	}
	e.syncDir("")
	e.cut()
	e.expect("victim", []byte("synced"))
	if _, err := os.Stat(filepath.Join(e.backing, "old")); !os.IsNotExist(err) {
		t.Errorf("old name back after a synced rename: %v", err)
	}

	// A file created in place of the renamed one does not inherit state.
	h := e.createSynced("old")
	h.Close()
	e.expect("old", nil)
}

func TestCreateUnlinkMkdir(t *testing.T) {
	e := newEnv(t)
	// Created, data synced, directory not: the file is gone.
	f := e.create("new")
	e.writeAt(f, "data", 0)
	e.sync(f)
	f.Close()
	e.cut()
	if _, err := os.Stat(e.path("new")); !os.IsNotExist(err) {
		t.Errorf("a create whose directory was not synced survived the cut: %v", err)
	}

	// Unlinked, directory not synced: the file is back with its data.
	f = e.createSynced("keep")
	e.writeAt(f, "kept", 0)
	e.sync(f)
	f.Close()
	if err := os.Remove(e.path("keep")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.path("keep")); !os.IsNotExist(err) {
		t.Errorf("unlinked file still visible: %v", err)
	}
	e.cut()
	e.expect("keep", []byte("kept"))
	if err := os.Remove(e.path("keep")); err != nil {
		t.Fatal(err)
	}
	e.syncDir("")
	e.cut()
	if _, err := os.Stat(e.path("keep")); !os.IsNotExist(err) {
		t.Errorf("a synced unlink was undone: %v", err)
	}

	// A new directory with a synced file in it, the parent not synced:
	// the whole directory is gone.
	if err := os.Mkdir(e.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	f = e.createSynced("d/x")
	e.writeAt(f, "x", 0)
	e.sync(f)
	f.Close()
	e.cut()
	if _, err := os.Stat(e.path("d")); !os.IsNotExist(err) {
		t.Errorf("an unsynced mkdir survived the cut: %v", err)
	}
	// rmdir is undone the same way.
	if err := os.Mkdir(e.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.syncDir("")
	if err := os.Remove(e.path("d")); err != nil {
		t.Fatal(err)
	}
	e.cut()
	if fi, err := os.Stat(e.path("d")); err != nil || !fi.IsDir() {
		t.Errorf("an unsynced rmdir was not undone: %v", err)
	}
}

// TestUnmountIsCleanShutdown: without Cut, Unmount makes everything
// durable, like unmounting a real file system.
func TestUnmountIsCleanShutdown(t *testing.T) {
	e := newEnv(t)
	f := e.create("a")
	e.writeAt(f, "never synced", 0)
	f.Close()
	if err := e.fs.Unmount(); err != nil {
		t.Fatal(err)
	}
	e.expectBacking("a", []byte("never synced"))
}

func TestUnlinkOpenFile(t *testing.T) {
	e := newEnv(t)
	f := e.create("gone")
	e.writeAt(f, "scratch", 0)
	if err := os.Remove(e.path("gone")); err != nil {
		t.Fatal(err)
	}
	// Still readable through the open descriptor.
	buf := make([]byte, 7)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "scratch" {
		t.Errorf("unlinked open file: %q, %v", buf, err)
	}
	e.sync(f) // syncing an unlinked file is harmless
	f.Close()
	g := e.createSynced("gone")
	g.Close()
	e.expect("gone", nil)
}

func TestFallocate(t *testing.T) {
	e := newEnv(t)
	f := e.createSynced("f")
	e.writeAt(f, "abcdefghij", 0)
	e.sync(f)
	if err := unix.Fallocate(int(f.Fd()), 0, 0, 100); err != nil {
		t.Fatal(err)
	}
	if fi, _ := f.Stat(); fi.Size() != 100 {
		t.Errorf("size after fallocate: %d", fi.Size())
	}
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 2, 3); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 100)
	copy(want, "ab\x00\x00\x00fghij")
	if got, _ := os.ReadFile(e.path("f")); !bytes.Equal(got, want) {
		t.Errorf("after fallocate and punch: %q", got)
	}
	f.Close()
	e.cut()
	e.expect("f", []byte("abcdefghij"))
}

// TestShmPassthrough: *-shm files are out of the model (doc.go): a shared
// writable mmap works, and what is written reaches the backing file at
// once. The mmap is made by a child process, as SQLite's is made by
// heraldd in the power-cut tests: a page fault on a FUSE mapping blocks its
// thread without the Go scheduler knowing, so when this process (which
// serves the mount) started a garbage collection during the fault, the
// collection waited for that thread and the thread for the file system:
// the test hung for good (one clean-clone CI run; lazyfs.test was still
// there after 8 minutes).
func TestShmPassthrough(t *testing.T) {
	e := newEnv(t)
	f := e.createSynced("db-shm")
	if err := f.Truncate(2 * pageSize); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), shmChildEnv+"="+e.path("db-shm"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the child's mmap of the -shm file: %v: %s", err, out)
	}
	if e.fs.Unsynced() != 0 {
		t.Errorf("a -shm file left unsynced state")
	}
	e.cut()
	want := make([]byte, 2*pageSize)
	copy(want[pageSize:], "index")
	e.expect("db-shm", want)
}

// shmChildEnv names the file TestMain maps, writes and syncs, instead of
// running the tests, when set (TestShmPassthrough's child).
const shmChildEnv = "LAZYFS_TEST_SHM_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(noChildMainEnv) == "" {
		ChildMain()
	}
	if dirs := os.Getenv(busyChildEnv); dirs != "" {
		if err := busyChild(dirs); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if path := os.Getenv(shmChildEnv); path != "" {
		if err := shmChild(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func shmChild(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, 2*pageSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap on lazyfs: %w", err)
	}
	copy(m[pageSize:], "index")
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		return fmt.Errorf("msync: %w", err)
	}
	return syscall.Munmap(m)
}

// TestMountBadDir: a missing mount point is an error, not a skip.
func TestMountBadDir(t *testing.T) {
	_, err := Mount(t, t.TempDir(), filepath.Join(t.TempDir(), "missing"))
	if err == nil {
		t.Fatal("mount on a missing directory succeeded")
	}
}

// TestLookupSize: a fresh lookup of a file with unsynced data reports the
// model's size, not the backing file's (the kernel believes it).
func TestLookupSize(t *testing.T) {
	defer func(e, a time.Duration) { entryTimeout, attrTimeout = e, a }(entryTimeout, attrTimeout)
	entryTimeout, attrTimeout = 0, time.Hour // every path walk looks up; attributes stay cached
	e := newEnv(t)
	f := e.createSynced("a")
	defer f.Close()
	e.writeAt(f, "0123456789", 0)
	fi, err := os.Stat(e.path("a"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != 10 {
		t.Errorf("size after a lookup: %d, want 10", fi.Size())
	}
	if got, _ := os.ReadFile(e.path("a")); string(got) != "0123456789" {
		t.Errorf("read through a new descriptor: %q", got)
	}
	if err := os.Link(e.path("a"), e.path("b")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(e.path("b")); err != nil || fi.Size() != 10 {
		t.Errorf("hard link: size %v, %v; want 10", fi, err)
	}
}

// FailFsyncs: the next fsyncs of a matching file fail with EIO, others'
// do not; its unsynced data still reads back and is lost at a cut unless a
// later fsync succeeds.
func TestFailFsyncs(t *testing.T) {
	e := newEnv(t)
	a, b := e.createSynced("a-wal"), e.createSynced("b")
	e.writeAt(a, "lost", 0)
	e.writeAt(b, "kept", 0)
	e.fs.FailFsyncs("-wal", 1)
	if err := a.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync of a-wal with a fault set: %v, want EIO", err)
	}
	e.sync(b) // not matching: succeeds
	if n := e.fs.FsyncFaults(); n != 1 {
		t.Fatalf("FsyncFaults() = %d, want 1", n)
	}
	if got, _ := os.ReadFile(e.path("a-wal")); string(got) != "lost" {
		t.Errorf("a-wal after its failed fsync reads %q, want the unsynced %q", got, "lost")
	}
	a.Close()
	b.Close()
	e.cut()
	e.expect("a-wal", nil)
	e.expect("b", []byte("kept"))

	c := e.createSynced("c-wal")
	e.writeAt(c, "later", 0)
	e.fs.FailFsyncs("-wal", 1)
	if err := c.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync of c-wal with a fault set: %v, want EIO", err)
	}
	e.sync(c) // the fault is spent: this one makes it durable
	c.Close()
	e.cut()
	e.expect("c-wal", []byte("later"))
}

// FailReads: reads of a matching file that reach the file system (nothing
// is cached after a remount) fail with EIO while the fault is set (n < 0);
// other files read; the file is unchanged and reads back once cleared.
func TestFailReads(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"x.db", "y"} {
		f := e.createSynced(name)
		e.writeAt(f, "data of "+name, 0)
		e.sync(f)
		f.Close()
	}
	e.cut() // everything is synced: a remount, so that no page is cached
	e.fs.FailReads(".db", -1)
	if got, err := os.ReadFile(e.path("y")); err != nil || string(got) != "data of y" {
		t.Fatalf("read of y (not matching) with a fault set: %q, %v", got, err)
	}
	for range 2 {
		if _, err := os.ReadFile(e.path("x.db")); !errors.Is(err, syscall.EIO) {
			t.Fatalf("read of x.db with a fault set: %v, want EIO", err)
		}
	}
	if n := e.fs.ReadFaults(); n < 2 {
		t.Fatalf("ReadFaults() = %d, want at least 2", n)
	}
	e.fs.FailReads("", 0)
	if got, err := os.ReadFile(e.path("x.db")); err != nil || string(got) != "data of x.db" {
		t.Fatalf("read of x.db once the fault is spent: %q, %v", got, err)
	}
}

// busyChildEnv names a backing dir and a mount point (joined by a colon)
// for TestMain to run busyChild with, instead of the tests, when set.
const busyChildEnv = "LAZYFS_TEST_BUSY_CHILD"

// TestBusyUnmountLetsTheProcessExit: a process that serves a mount and
// still has a file open on it when it unmounts must still be able to exit.
// Detaching the busy mount is not enough: at exit the kernel closes that
// file, sends a FLUSH to the server, which died with the process, and
// waits for the reply for good (a clean-clone CI run hung so, in a journal
// test, its test process unkillable). The child holds the file on
// descriptor 0 so that it is closed before the /dev/fuse descriptor is.
func TestBusyUnmountLetsTheProcessExit(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		unavailable(t, "no /dev/fuse (%v)", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), busyChildEnv+"="+t.TempDir()+":"+t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out.String())
		}
		if !bytes.Contains(out.Bytes(), []byte("aborting its connection")) {
			t.Errorf("the child's unmount was not busy, so this test proved nothing:\n%s", out.String())
		}
	case <-time.After(30 * time.Second):
		// Free the hung child by aborting its connection, named in its output.
		var conn int
		for _, line := range bytes.Split(out.Bytes(), []byte("\n")) {
			if i := bytes.Index(line, []byte("conn=")); i >= 0 {
				fmt.Sscanf(string(line[i:]), "conn=%d", &conn)
			}
		}
		if conn != 0 {
			os.WriteFile(filepath.Join(fusectlDir, fmt.Sprint(conn), "abort"), []byte("1"), 0)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
		t.Fatalf("the child did not exit within 30 s of unmounting with a file open (conn=%d):\n%s", conn, out.String())
	}
}

// stderrReporter reports to stderr, for a child process with no test.
type stderrReporter struct{}

func (stderrReporter) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (stderrReporter) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "error: "+format+"\n", args...)
}

// busyChild mounts, opens a file on the mount as descriptor 0, unmounts
// and returns, leaving the file open until the process exits.
func busyChild(dirs string) error {
	backing, mnt, _ := strings.Cut(dirs, ":")
	fs, err := mount(stderrReporter{}, backing, mnt)
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(mnt, "held"))
	if err != nil {
		return err
	}
	if err := unix.Dup2(int(f.Fd()), 0); err != nil {
		return err
	}
	f.Close()
	fmt.Fprintf(os.Stderr, "conn=%d\n", fs.conn)
	return fs.Unmount()
}

// mounted reports whether dir is a mount point (/proc/self/mountinfo).
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// TestChildServesAndCleansUp: the mount is served by another process (so
// this one's memory map cannot deadlock it), and when the test process
// goes without unmounting (its pipe to the child closes, as at a
// timeout's panic), the child syncs, unmounts and exits.
func TestChildServesAndCleansUp(t *testing.T) {
	e := newEnv(t)
	if e.fs.cmd.Process.Pid == os.Getpid() || !mounted(t, e.mnt) {
		t.Fatalf("mount %s not served by a child (pid %d)", e.mnt, e.fs.cmd.Process.Pid)
	}
	f := e.create("unsynced")
	if _, err := f.WriteString("kept by the clean unmount"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n := e.fs.Unsynced(); n != 1 {
		t.Fatalf("unsynced files: %d, want 1", n)
	}
	e.fs.req.Close() // what the test process's exit does
	select {
	case <-e.fs.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not exit within 30 s of its pipe closing")
	}
	if e.fs.exit != nil {
		t.Errorf("child exit: %v\n%s", e.fs.exit, e.fs.stderr.String())
	}
	if mounted(t, e.mnt) {
		t.Errorf("%s still mounted after the child exited", e.mnt)
	}
	if b, err := os.ReadFile(filepath.Join(e.backing, "unsynced")); err != nil || string(b) != "kept by the clean unmount" {
		t.Errorf("backing file after the child's unmount: %q, %v", b, err)
	}
	e.fs.unmountOnce.Do(func() {}) // nothing left for the cleanup
}

// noChildMainEnv makes TestMain leave out ChildMain, as a package that
// forgot it would (TestMountWithoutChildMain).
const noChildMainEnv = "LAZYFS_TEST_NO_CHILDMAIN"

// TestMountWithoutChildMain: in a test binary whose TestMain does not call
// ChildMain, Mount fails at once with an error naming it, and the child
// runs no test (it would otherwise run this one again, and mount in a
// grandchild).
func TestMountWithoutChildMain(t *testing.T) {
	t.Setenv(noChildMainEnv, "1")
	start := time.Now()
	fs, err := Mount(t, t.TempDir(), t.TempDir())
	if err == nil {
		fs.Unmount()
		t.Fatal("Mount served without ChildMain")
	}
	if !strings.Contains(err.Error(), "lazyfs.ChildMain") || !strings.Contains(err.Error(), "no tests to run") {
		t.Errorf("the error does not name ChildMain or the child ran tests: %v", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("Mount took %v to fail", d)
	}
}
