package lazyfs

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// pageSize is the granularity of the unsynced-write model. It only decides
// how data is buffered, never what is lost: a page is dirty only if a byte
// in it was written (or zeroed by a truncate or hole punch) since the last
// fsync, and its clean bytes are copies of the synced backing data.
const pageSize = 4096

// fileKey names a backing inode.
type fileKey struct{ dev, ino uint64 }

// fileState is the unsynced state of one backing inode. While dirty is
// false the file is exactly its backing file. While dirty is true its
// content is: bytes [0, size), where a byte comes from pages if its page is
// there, else from the backing file if its offset is below valid, else zero.
type fileState struct {
	key   fileKey
	dirty bool
	size  int64 // logical size
	// valid bounds the backing bytes still part of the file: a truncate
	// below the backing size hides the backing tail even if the file grows
	// again later (that region reads as zeros).
	valid int64
	pages map[int64][]byte
	// fd is a backing descriptor of the inode kept while dirty, so that
	// the state can be synced after every handle closed (Unmount).
	fd int
}

// begin makes st dirty, taking its size from the backing file open as fd.
func (st *fileState) begin(fd int) syscall.Errno {
	if st.dirty {
		return 0
	}
	var s syscall.Stat_t
	if err := syscall.Fstat(fd, &s); err != nil {
		return errno(err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return errno(err)
	}
	st.fd = dup
	st.dirty = true
	st.size = s.Size
	st.valid = s.Size
	st.pages = map[int64][]byte{}
	return 0
}

// drop forgets every unsynced change: the file is its backing file again.
func (st *fileState) drop() {
	if st.dirty {
		syscall.Close(st.fd)
	}
	st.dirty = false
	st.pages = nil
	st.size, st.valid = 0, 0
}

// readBacking fills b with the backing bytes at off, limited to valid;
// what lies beyond stays zero.
func (st *fileState) readBacking(b []byte, off int64) syscall.Errno {
	n := int64(len(b))
	if off >= st.valid {
		return 0
	}
	if off+n > st.valid {
		n = st.valid - off
	}
	for done := int64(0); done < n; {
		m, err := syscall.Pread(st.fd, b[done:n], off+done)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return errno(err)
		}
		if m == 0 {
			break // the backing file is shorter: the rest is zero
		}
		done += int64(m)
	}
	return 0
}

// read returns the content at off (short at end of file).
func (st *fileState) read(dest []byte, off int64) ([]byte, syscall.Errno) {
	if off >= st.size {
		return dest[:0], 0
	}
	n := int64(len(dest))
	if off+n > st.size {
		n = st.size - off
	}
	b := dest[:n]
	clear(b)
	if e := st.readBacking(b, off); e != 0 {
		return nil, e
	}
	for pos := off; pos < off+n; {
		idx := pos / pageSize
		in := pos - idx*pageSize
		chunk := min(pageSize-in, off+n-pos)
		if p, ok := st.pages[idx]; ok {
			copy(b[pos-off:pos-off+chunk], p[in:in+chunk])
		}
		pos += chunk
	}
	return b, 0
}

// page returns the buffered page idx, filling a new one from the backing file.
func (st *fileState) page(idx int64) ([]byte, syscall.Errno) {
	if p, ok := st.pages[idx]; ok {
		return p, 0
	}
	p := make([]byte, pageSize)
	if e := st.readBacking(p, idx*pageSize); e != 0 {
		return nil, e
	}
	// Bytes at or past the logical size are zero whatever the backing holds.
	if end := st.size - idx*pageSize; end < pageSize {
		clear(p[max(end, 0):])
	}
	st.pages[idx] = p
	return p, 0
}

// write buffers data at off (data nil: zeros, a hole punch); fd is a
// descriptor of the backing file, used if st is not dirty yet.
func (st *fileState) write(fd int, data []byte, off int64, length int64) syscall.Errno {
	if e := st.begin(fd); e != 0 {
		return e
	}
	for pos := off; pos < off+length; {
		idx := pos / pageSize
		in := pos - idx*pageSize
		chunk := min(pageSize-in, off+length-pos)
		p, e := st.page(idx)
		if e != 0 {
			return e
		}
		if data != nil {
			copy(p[in:in+chunk], data[pos-off:pos-off+chunk])
		} else {
			clear(p[in : in+chunk])
		}
		pos += chunk
	}
	if off+length > st.size {
		st.size = off + length
	}
	return 0
}

// truncate sets the logical size.
func (st *fileState) truncate(fd int, size int64) syscall.Errno {
	if e := st.begin(fd); e != 0 {
		return e
	}
	if size < st.size {
		for idx, p := range st.pages {
			switch start := idx * pageSize; {
			case start >= size:
				delete(st.pages, idx)
			case start+pageSize > size:
				clear(p[size-start:])
			}
		}
		st.valid = min(st.valid, size)
	}
	st.size = size
	return 0
}

// flush makes the backing file equal the logical content: exactly what an
// fsync guarantees on a real disk.
func (st *fileState) flush() syscall.Errno {
	if !st.dirty {
		return 0
	}
	// The hidden backing tail goes first, so that regions between valid
	// and size that no page covers read as zeros.
	if err := syscall.Ftruncate(st.fd, st.valid); err != nil {
		return errno(err)
	}
	for idx, p := range st.pages {
		start := idx * pageSize
		n := min(int64(pageSize), st.size-start)
		if n <= 0 {
			continue
		}
		for done := int64(0); done < n; {
			m, err := syscall.Pwrite(st.fd, p[done:n], start+done)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				return errno(err)
			}
			done += int64(m)
		}
	}
	if err := syscall.Ftruncate(st.fd, st.size); err != nil {
		return errno(err)
	}
	st.drop()
	return 0
}

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	return syscall.EIO
}
