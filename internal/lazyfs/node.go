package lazyfs

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is a loopback node whose regular-file data goes through the model
// (file.go, state.go) and whose directory changes are recorded until their
// directory is synced (ns.go). Metadata changes (chmod, chown, utimes,
// xattrs) are the loopback's: they reach the backing directory at once.
type node struct {
	fs.LoopbackNode
	lfs *server
}

var (
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeCreater   = (*node)(nil)
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeStatxer   = (*node)(nil)
	_ fs.NodeUnlinker  = (*node)(nil) // ns.go
	_ fs.NodeRenamer   = (*node)(nil) // ns.go
)

// path is the node's backing path.
func (n *node) path() string {
	return filepath.Join(n.RootData.Path, n.Path(n.Root()))
}

// passthrough reports whether name is kept out of the model (see doc.go).
func passthrough(name string) bool {
	return strings.HasSuffix(name, "-shm")
}

func keyOf(s *syscall.Stat_t) fileKey { return fileKey{uint64(s.Dev), s.Ino} }

var _ fs.NodeLookuper = (*node)(nil)

// Lookup is the loopback's, with the size of a file with unsynced changes
// taken from the model: the kernel believes the size a lookup tells it.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, e := n.LoopbackNode.Lookup(ctx, name, out)
	if e == 0 {
		n.lfs.modelSize(filepath.Join(n.path(), name), &out.Attr)
	}
	return ch, e
}

// modelSize sets attr's size to the model's if the file at backing path p
// has unsynced changes.
func (f *server) modelSize(p string, attr *fuse.Attr) {
	if attr.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return
	}
	var s syscall.Stat_t
	if syscall.Lstat(p, &s) != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.states[keyOf(&s)]; st != nil && st.dirty {
		attr.Size = uint64(st.size)
	}
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return n.lfs.open(n.path(), flags)
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	// The loopback creates the file (recorded as a pending directory
	// change); its handle is replaced by one of ours. O_TRUNC on an
	// existing file is a data change and goes through the model instead.
	var s syscall.Stat_t
	existed := syscall.Lstat(filepath.Join(n.path(), name), &s) == nil
	ch, lf, _, e := n.LoopbackNode.Create(ctx, name, flags&^uint32(syscall.O_TRUNC), mode, out)
	if e != 0 {
		return nil, nil, 0, e
	}
	if r, ok := lf.(fs.FileReleaser); ok {
		r.Release(ctx)
	}
	if !existed {
		n.created(name, "create")
	}
	p := filepath.Join(n.path(), name)
	fh, fuseFlags, e := n.lfs.open(p, flags&^uint32(syscall.O_CREAT|syscall.O_EXCL))
	if e != 0 {
		return nil, nil, 0, e
	}
	n.lfs.modelSize(p, &out.Attr)
	return ch, fh, fuseFlags, 0
}

// state returns the model state of the node's backing file, if any.
func (n *node) state() (*fileState, *syscall.Stat_t, syscall.Errno) {
	var s syscall.Stat_t
	if err := syscall.Lstat(n.path(), &s); err != nil {
		return nil, nil, errno(err)
	}
	n.lfs.mu.Lock()
	st := n.lfs.states[keyOf(&s)]
	n.lfs.mu.Unlock()
	return st, &s, 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if h, ok := f.(*handle); ok {
		return h.Getattr(ctx, out)
	}
	st, s, e := n.state()
	if e != 0 {
		return e
	}
	out.FromStat(s)
	if st != nil {
		n.lfs.mu.Lock()
		if st.dirty {
			out.Size = uint64(st.size)
		}
		n.lfs.mu.Unlock()
	}
	return 0
}

func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if h, ok := f.(*handle); ok {
		return h.Statx(ctx, flags, mask, out)
	}
	st, _, e := n.state()
	if e != 0 {
		return e
	}
	if e := n.LoopbackNode.Statx(ctx, nil, flags, mask, out); e != 0 {
		return e
	}
	if st != nil {
		n.lfs.mu.Lock()
		if st.dirty {
			out.Size = uint64(st.size)
		}
		n.lfs.mu.Unlock()
	}
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	h, ok := f.(*handle)
	if !ok {
		if size, has := in.GetSize(); has {
			// A truncate by path: open the backing file for the model.
			fh, _, e := n.lfs.open(n.path(), syscall.O_RDWR)
			if e != 0 {
				return e
			}
			h = fh.(*handle)
			defer h.Release(ctx)
			if e := h.truncate(int64(size)); e != 0 {
				return e
			}
		}
	} else if size, has := in.GetSize(); has {
		if e := h.truncate(int64(size)); e != 0 {
			return e
		}
	}
	// Everything but the size is metadata, applied to the backing file.
	in.Valid &^= fuse.FATTR_SIZE
	if e := n.LoopbackNode.Setattr(ctx, nil, in, out); e != 0 {
		return e
	}
	if h != nil {
		return h.Getattr(ctx, out)
	}
	return n.Getattr(ctx, nil, out)
}
