package lazyfs

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// handle is an open file: a backing descriptor (always read-write, the
// kernel enforces the caller's access mode) and the model state of its
// inode, shared by every handle on that inode.
type handle struct {
	lfs  *server
	fd   int
	st   *fileState // nil for a passthrough file
	path string
}

var (
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileGetattrer = (*handle)(nil)
	_ fs.FileStatxer   = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
)

func (f *server) open(path string, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	// O_TRUNC is a data change: modelled below. O_APPEND: the kernel
	// passes the end-of-file offset with each write.
	trunc := flags&syscall.O_TRUNC != 0
	fl := int(flags) &^ (syscall.O_TRUNC | syscall.O_APPEND | syscall.O_ACCMODE | syscall.O_CREAT | syscall.O_EXCL | fuse.FMODE_EXEC)
	fd, err := syscall.Open(path, fl|syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err == syscall.EACCES || err == syscall.EPERM || err == syscall.EROFS {
		fd, err = syscall.Open(path, fl|int(flags)&syscall.O_ACCMODE|syscall.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, 0, errno(err)
	}
	h := &handle{lfs: f, fd: fd, path: path}
	if !passthrough(filepath.Base(path)) {
		var s syscall.Stat_t
		if err := syscall.Fstat(fd, &s); err != nil {
			syscall.Close(fd)
			return nil, 0, errno(err)
		}
		h.st = f.state(keyOf(&s))
	}
	if trunc {
		if e := h.truncate(0); e != 0 {
			syscall.Close(fd)
			return nil, 0, e
		}
	}
	return h, 0, 0
}

func (h *handle) truncate(size int64) syscall.Errno {
	if h.st == nil {
		return errno(syscall.Ftruncate(h.fd, size))
	}
	h.lfs.mu.Lock()
	defer h.lfs.mu.Unlock()
	e := h.st.truncate(h.fd, size)
	h.lfs.noteDirty(h.st)
	return e
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if h.lfs.readFault(h.path) {
		return nil, syscall.EIO
	}
	if h.st != nil {
		h.lfs.mu.Lock()
		defer h.lfs.mu.Unlock()
		if h.st.dirty {
			b, e := h.st.read(dest, off)
			if e != 0 {
				return nil, e
			}
			return fuse.ReadResultData(b), 0
		}
	}
	// The kernel takes a short answer for the end of the file: read
	// until dest is full or the backing file ends.
	n := 0
	for n < len(dest) {
		m, err := syscall.Pread(h.fd, dest[n:], off+int64(n))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, errno(err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if h.st == nil {
		n, err := syscall.Pwrite(h.fd, data, off)
		return uint32(max(n, 0)), errno(err)
	}
	h.lfs.mu.Lock()
	defer h.lfs.mu.Unlock()
	e := h.st.write(h.fd, data, off, int64(len(data)))
	h.lfs.noteDirty(h.st)
	if e != 0 {
		return 0, e
	}
	return uint32(len(data)), 0
}

// Fsync (fsync and fdatasync alike) writes the inode's unsynced state to
// the backing file.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if h.st == nil {
		return 0
	}
	h.lfs.mu.Lock()
	defer h.lfs.mu.Unlock()
	h.lfs.fsyncs++
	if h.lfs.faultsLeft > 0 && strings.HasSuffix(h.path, h.lfs.faultSuffix) {
		h.lfs.faultsLeft--
		h.lfs.faultsReturned++
		return syscall.EIO
	}
	if !h.st.dirty {
		return 0
	}
	e := h.st.flush()
	if e == 0 {
		delete(h.lfs.dirty, h.st)
	}
	return e
}

// Flush is close(2): it syncs nothing.
func (h *handle) Flush(ctx context.Context) syscall.Errno { return 0 }

func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.lfs.mu.Lock()
	defer h.lfs.mu.Unlock()
	if h.fd >= 0 {
		syscall.Close(h.fd)
		h.fd = -1
	}
	return 0
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	var s syscall.Stat_t
	if err := syscall.Fstat(h.fd, &s); err != nil {
		return errno(err)
	}
	out.FromStat(&s)
	if size, ok := h.unsyncedSize(); ok {
		out.Size = size
	}
	return 0
}

// unsyncedSize is the file's size with its unsynced writes, when it has
// any (the backing file does not know them).
func (h *handle) unsyncedSize() (uint64, bool) {
	if h.st == nil {
		return 0, false
	}
	h.lfs.mu.Lock()
	defer h.lfs.mu.Unlock()
	return uint64(h.st.size), h.st.dirty
}

func (h *handle) Statx(ctx context.Context, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	var s unix.Statx_t
	if err := unix.Statx(h.fd, "", int(flags)|unix.AT_EMPTY_PATH, int(mask), &s); err != nil {
		return errno(err)
	}
	out.FromStatx(&s)
	if size, ok := h.unsyncedSize(); ok {
		out.Size = size
	}
	return 0
}

// Allocate models fallocate(2): mode 0 extends the size (the new range
// reads as zeros), FALLOC_FL_KEEP_SIZE alone changes nothing visible, and
// FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE zeroes the range; all unsynced.
// Other modes are refused with EOPNOTSUPP (glibc's posix_fallocate then
// falls back to writes).
func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if h.st == nil {
		return errno(syscall.Fallocate(h.fd, mode, int64(off), int64(size)))
	}
	h.lfs.mu.Lock()
	defer h.lfs.mu.Unlock()
	end := int64(off + size)
	var e syscall.Errno
	switch mode {
	case 0:
		if e = h.st.begin(h.fd); e == 0 && end > h.st.size {
			e = h.st.truncate(h.fd, end)
		}
	case unix.FALLOC_FL_KEEP_SIZE:
	case unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE:
		if e = h.st.begin(h.fd); e == 0 && int64(off) < h.st.size {
			e = h.st.write(h.fd, nil, int64(off), min(end, h.st.size)-int64(off))
		}
	default:
		return syscall.EOPNOTSUPP
	}
	h.lfs.noteDirty(h.st)
	return e
}
