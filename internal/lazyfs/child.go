package lazyfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/internal/testenv"
)

// A test's mount is served by a child process: a run of the test binary
// that ChildMain turns into the FUSE server. Served by the test process
// itself, a mount can deadlock it for good: a munmap of a dirty shared
// mapping of a file on the mount (SQLite's -shm file, at its last close)
// waits for the pages' write-back holding the process's mmap lock, and the
// FUSE reader that would take that write-back in waits for the same lock
// to fault in its buffer (kernel stacks: fuse_vma_close,
// __gup_longterm_locked). A child has a memory map of its own.
//
// The test talks to the child over two pipes (descriptors 3 and 4 in the
// child), one JSON object a line each way: the child first says it has
// mounted (or why not), then answers each request.

// childEnv names the variable that makes ChildMain serve a mount: the
// backing and mount directories, as JSON.
const childEnv = "HERALD_LAZYFS_CHILD"

// How long the test waits for the child: to mount, to answer a request,
// to exit after an unmount.
const childTimeout = 60 * time.Second

type childDirs struct{ Backing, Mount string }

type request struct {
	Op     string `json:"op"`
	Suffix string `json:"suffix,omitempty"`
	N      int    `json:"n,omitempty"`
}

type response struct {
	Conn        uint32   `json:"conn,omitempty"`
	Unavailable string   `json:"unavailable,omitempty"`
	Err         string   `json:"err,omitempty"`
	N           int      `json:"n,omitempty"`
	List        []string `json:"list,omitempty"`
	Logs        []string `json:"logs,omitempty"`
	Errors      []string `json:"errors,omitempty"` // what the server reported as errors
}

// ChildMain serves a mount and exits when this run of the test binary is
// the child of a Mount; otherwise it returns at once. Every package whose
// tests call Mount calls it first thing in TestMain:
//
//	func TestMain(m *testing.M) { lazyfs.ChildMain(); os.Exit(m.Run()) }
func ChildMain() {
	v := os.Getenv(childEnv)
	if v == "" {
		return
	}
	os.Exit(serveChild(v))
}

// collector is the child's reporter: what the server logs and reports as
// errors goes to the test with the next answer.
type collector struct {
	mu           sync.Mutex
	logs, errors []string
}

func (c *collector) Logf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logs = append(c.logs, fmt.Sprintf(format, args...))
}

func (c *collector) Errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errors = append(c.errors, fmt.Sprintf(format, args...))
}

func (c *collector) drain(r *response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r.Logs, r.Errors = c.logs, c.errors
	c.logs, c.errors = nil, nil
}

func serveChild(v string) int {
	var dirs childDirs
	if err := json.Unmarshal([]byte(v), &dirs); err != nil {
		fmt.Fprintf(os.Stderr, "lazyfs child: %s: %v\n", childEnv, err)
		return 2
	}
	in, out := os.NewFile(3, "requests"), os.NewFile(4, "responses")
	dec, enc := json.NewDecoder(in), json.NewEncoder(out)
	rep := &collector{}
	srv, err := mount(rep, dirs.Backing, dirs.Mount)
	if err != nil {
		var unavail *unavailableError
		if errors.As(err, &unavail) {
			enc.Encode(response{Unavailable: unavail.msg})
		} else {
			enc.Encode(response{Err: err.Error()})
		}
		return 0
	}
	if err := enc.Encode(response{Conn: srv.conn}); err != nil {
		srv.Unmount()
		return 1
	}
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			// The test process is gone (or closed the pipe without an
			// unmount): clean up as an unmount would.
			if err := srv.Unmount(); err != nil {
				fmt.Fprintf(os.Stderr, "lazyfs child: unmount after the test went: %v\n", err)
			}
			return 0
		}
		var r response
		switch req.Op {
		case "cut":
			srv.Cut()
		case "unsynced":
			r.N = srv.Unsynced()
		case "failFsyncs":
			srv.FailFsyncs(req.Suffix, req.N)
		case "fsyncFaults":
			r.N = srv.FsyncFaults()
		case "failReads":
			srv.FailReads(req.Suffix, req.N)
		case "readFaults":
			r.N = srv.ReadFaults()
		case "fsyncs":
			r.N = srv.Fsyncs()
		case "pendingDirOps":
			r.N = srv.PendingDirOps()
		case "pendingDirOpList":
			r.List = srv.PendingDirOpList()
		case "unmount":
			if err := srv.Unmount(); err != nil {
				r.Err = err.Error()
			}
		default:
			r.Err = fmt.Sprintf("unknown request %q", req.Op)
		}
		rep.drain(&r)
		if err := enc.Encode(r); err != nil || req.Op == "unmount" {
			if req.Op != "unmount" {
				srv.Unmount()
			}
			return 0
		}
	}
}

// FS is one mount of the lazy file system, served by a child process.
type FS struct {
	t        testing.TB
	mountDir string
	conn     uint32 // the mount's FUSE connection (abortConn)

	cmd    *exec.Cmd
	stderr *testenv.LogBuffer
	exited chan struct{} // closed when the child has exited
	exit   error         // how it exited (a race report's exit status 66 among others)
	answer chan result   // the child's answers, in order

	mu  sync.Mutex // one request at a time
	enc *json.Encoder
	req *os.File

	unmountOnce sync.Once
	unmountErr  error
}

type result struct {
	r   response
	err error
}

// Mount mounts a lazy file system over backingDir at mountDir (both must
// exist), served by a child process (a run of the test binary: TestMain
// must call ChildMain), and registers a cleanup that unmounts it, also
// when the test fails. If FUSE cannot be used here (no /dev/fuse, no
// permission, no fusermount for a non-root user) the test is skipped, or
// fails when HERALD_REQUIRE_ROOT_TESTS=1. Other errors are returned.
func Mount(t testing.TB, backingDir, mountDir string) (*FS, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("lazyfs: the test binary: %w", err)
	}
	dirs, _ := json.Marshal(childDirs{Backing: backingDir, Mount: mountDir})
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	respR, respW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	f := &FS{t: t, mountDir: mountDir, stderr: &testenv.LogBuffer{}, exited: make(chan struct{}),
		answer: make(chan result, 1), req: reqW, enc: json.NewEncoder(reqW)}
	// ChildMain serves before the tests would run; in a binary whose
	// TestMain lacks it, -test.run=^$ runs none (not this test again,
	// which would mount in a grandchild) and the child exits unmounted.
	f.cmd = exec.Command(exe, "-test.run=^$")
	// A race-built child would sleep a second at exit (the race
	// runtime's atexit_sleep_ms), at every Unmount.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	f.cmd.Env = append(os.Environ(), childEnv+"="+string(dirs), "GORACE="+gorace)
	f.cmd.ExtraFiles = []*os.File{reqR, respW}
	f.cmd.Stdout, f.cmd.Stderr = f.stderr, f.stderr
	// Its own process group: a signal to the test's group (a terminal's
	// ^C) leaves it to clean up when the test's end closes its pipe.
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = f.cmd.Start()
	reqR.Close()
	respW.Close()
	if err != nil {
		reqW.Close()
		respR.Close()
		return nil, fmt.Errorf("lazyfs: start the serving child: %w", err)
	}
	go func() {
		f.exit = f.cmd.Wait()
		close(f.exited)
	}()
	go func() {
		defer respR.Close()
		dec := json.NewDecoder(respR)
		for {
			var r response
			err := dec.Decode(&r)
			f.answer <- result{r, err}
			if err != nil {
				return
			}
		}
	}()
	first, err := f.wait("mount")
	switch {
	case err != nil:
		f.stop()
		return nil, fmt.Errorf("lazyfs: the child serving %s did not mount (does this package's TestMain call lazyfs.ChildMain first?): %v\n%s", mountDir, err, f.stderr.String())
	case first.Unavailable != "":
		f.stop()
		unavailable(t, "%s", first.Unavailable)
		return nil, errors.New(first.Unavailable) // not reached: unavailable skips or fails
	case first.Err != "":
		f.stop()
		return nil, errors.New(first.Err)
	}
	f.conn = first.Conn
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("lazyfs cleanup: %v", err)
		}
	})
	return f, nil
}

// wait takes the child's next answer.
func (f *FS) wait(what string) (response, error) {
	select {
	case res := <-f.answer:
		if res.err == io.EOF {
			res.err = errors.New("the child exited")
		}
		return res.r, res.err
	case <-time.After(childTimeout):
		return response{}, fmt.Errorf("no answer to %s within %v", what, childTimeout)
	}
}

// stop ends the child: it unmounts when its request pipe closes; past
// childTimeout the connection is aborted and the child killed.
func (f *FS) stop() {
	f.req.Close()
	select {
	case <-f.exited:
		return
	case <-time.After(childTimeout):
	}
	if f.conn != 0 {
		abortConn(f.conn, f.mountDir)
	}
	f.cmd.Process.Kill()
	<-f.exited
}

// call sends one request and returns the answer, reporting what the server
// reported.
func (f *FS) call(req request) (response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enc.Encode(req); err != nil {
		return response{}, fmt.Errorf("lazyfs: %s: the serving child is gone (%v)\n%s", req.Op, err, f.stderr.String())
	}
	r, err := f.wait(req.Op)
	if err != nil {
		return r, fmt.Errorf("lazyfs: %s: %v\n%s", req.Op, err, f.stderr.String())
	}
	for _, l := range r.Logs {
		f.t.Logf("%s", l)
	}
	for _, e := range r.Errors {
		f.t.Errorf("%s", e)
	}
	if r.Err != "" {
		return r, errors.New(r.Err)
	}
	return r, nil
}

// do is call for a request whose failure fails the test.
func (f *FS) do(req request) response {
	r, err := f.call(req)
	if err != nil {
		f.t.Errorf("%v", err)
	}
	return r
}

// Cut simulates a power cut: every write not yet fsynced is discarded and
// every directory change whose directory was not fsynced is undone, so the
// backing directory holds exactly what was synced. Kill every process
// using the mount first (a process still writing would just make new
// unsynced state), then Unmount: the kernel may still cache pages and
// names of what was discarded, so read again only through a new Mount or
// the backing directory.
func (f *FS) Cut() { f.do(request{Op: "cut"}) }

// Unsynced reports how many files have unsynced data changes now.
func (f *FS) Unsynced() int { return f.do(request{Op: "unsynced"}).N }

// FailFsyncs makes the next n fsync or fdatasync calls on files whose
// path ends with suffix fail with EIO, as a device that cannot write
// makes them fail. The file's unsynced changes stay as they were: still
// read back, lost at a Cut, made durable by a later fsync that succeeds.
// (Linux may instead mark the pages clean and lose them for good; either
// way nothing written since the last successful fsync is known durable.)
func (f *FS) FailFsyncs(suffix string, n int) {
	f.do(request{Op: "failFsyncs", Suffix: suffix, N: n})
}

// FsyncFaults reports how many fsync calls failed because of FailFsyncs.
func (f *FS) FsyncFaults() int { return f.do(request{Op: "fsyncFaults"}).N }

// FailReads makes the next n reads that reach the file system on files
// whose path ends with suffix fail with EIO (n < 0: every one, until
// FailReads is called again), as a device that cannot read a sector makes
// them fail; the file is unchanged. Reads the kernel's page cache serves
// do not reach the file system: what was written or read through the
// mount may be cached; a new Mount starts with nothing cached. The kernel
// tries a failed read again (a readahead, then the page's own read), so a
// read(2) fails only when two reads in a row do: a failing device is n < 0.
func (f *FS) FailReads(suffix string, n int) {
	f.do(request{Op: "failReads", Suffix: suffix, N: n})
}

// ReadFaults reports how many reads failed because of FailReads.
func (f *FS) ReadFaults() int { return f.do(request{Op: "readFaults"}).N }

// Fsyncs reports how many fsync/fdatasync calls the mount has served.
func (f *FS) Fsyncs() int { return f.do(request{Op: "fsyncs"}).N }

// PendingDirOps reports how many directory changes are not yet durable.
func (f *FS) PendingDirOps() int { return f.do(request{Op: "pendingDirOps"}).N }

// PendingDirOpList describes the directory changes not yet durable, oldest
// first.
func (f *FS) PendingDirOpList() []string { return f.do(request{Op: "pendingDirOpList"}).List }

// Dir is the mount point.
func (f *FS) Dir() string { return f.mountDir }

// Unmount unmounts the file system, lazily (MNT_DETACH) if it is busy,
// and waits for the serving child to exit. Like the clean unmount of a
// real file system it first makes everything durable: after a Cut there
// is nothing left to sync.
func (f *FS) Unmount() error {
	f.unmountOnce.Do(func() {
		_, f.unmountErr = f.call(request{Op: "unmount"})
		f.stop()
		if f.exit != nil {
			f.unmountErr = errors.Join(f.unmountErr, fmt.Errorf("lazyfs: the child serving %s: %v\n%s", f.mountDir, f.exit, f.stderr.String()))
		}
	})
	return f.unmountErr
}
