package lazyfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// nsOp is a namespace operation (a directory change) not yet made durable.
// It is applied to the backing directory at once, so that everything reads
// as usual; Cut undoes it, syncing its directory keeps it.
type nsOp struct {
	desc string
	dir  fileKey      // syncing this directory makes the op durable
	undo func() error // puts the backing directory back as before the op
	done func()       // frees what undo would have needed (trash)
}

// record adds a pending op.
func (f *server) record(op *nsOp) {
	f.nsMu.Lock()
	defer f.nsMu.Unlock()
	f.ops = append(f.ops, op)
}

// syncDir makes the pending ops of directory dir durable.
func (f *server) syncDir(dir fileKey) {
	f.nsMu.Lock()
	defer f.nsMu.Unlock()
	kept := f.ops[:0]
	for _, op := range f.ops {
		if op.dir == dir {
			if op.done != nil {
				op.done()
			}
			continue
		}
		kept = append(kept, op)
	}
	clear(f.ops[len(kept):])
	f.ops = kept
}

// syncAll makes every pending op durable (clean unmount).
func (f *server) syncAll() {
	f.nsMu.Lock()
	defer f.nsMu.Unlock()
	for _, op := range f.ops {
		if op.done != nil {
			op.done()
		}
	}
	f.ops = nil
}

// undoAll undoes the pending ops, newest first (power cut).
func (f *server) undoAll() []error {
	f.nsMu.Lock()
	defer f.nsMu.Unlock()
	var errs []error
	for i := len(f.ops) - 1; i >= 0; i-- {
		if err := f.ops[i].undo(); err != nil {
			errs = append(errs, fmt.Errorf("undo %s: %w", f.ops[i].desc, err))
		}
		if f.ops[i].done != nil {
			f.ops[i].done()
		}
	}
	f.ops = nil
	return errs
}

// PendingDirOps reports how many directory changes are not yet durable.
func (f *server) PendingDirOps() int {
	f.nsMu.Lock()
	defer f.nsMu.Unlock()
	return len(f.ops)
}

// PendingDirOpList describes the directory changes not yet durable
// ("create /backing/path", ...), oldest first.
func (f *server) PendingDirOpList() []string {
	f.nsMu.Lock()
	defer f.nsMu.Unlock()
	var l []string
	for _, op := range f.ops {
		l = append(l, op.desc)
	}
	return l
}

// toTrash moves the backing path p into the trash and returns where it
// went. The inode stays alive there until the op is durable.
func (f *server) toTrash(p string) (string, error) {
	f.nsMu.Lock()
	f.trashSeq++
	t := filepath.Join(f.trash, strconv.Itoa(f.trashSeq))
	f.nsMu.Unlock()
	return t, os.Rename(p, t)
}

// dropTrash deletes a trash entry for good; a file's state goes with its
// last link.
func (f *server) dropTrash(t string) {
	var s syscall.Stat_t
	if err := syscall.Lstat(t, &s); err == nil && s.Mode&syscall.S_IFMT == syscall.S_IFREG && s.Nlink == 1 {
		f.forget(keyOf(&s))
	}
	os.RemoveAll(t)
}

// same reports whether backing path p is the inode key.
func same(p string, key fileKey) bool {
	var s syscall.Stat_t
	return syscall.Lstat(p, &s) == nil && keyOf(&s) == key
}

func statKey(p string) (fileKey, *syscall.Stat_t, error) {
	var s syscall.Stat_t
	if err := syscall.Lstat(p, &s); err != nil {
		return fileKey{}, nil, err
	}
	return keyOf(&s), &s, nil
}

// dirKey is the key of the node's backing directory.
func (n *node) dirKey() (fileKey, syscall.Errno) {
	k, _, err := statKey(n.path())
	return k, errno(err)
}

// created records that name was created in n: undone by removing it (a
// directory with everything in it: nothing under it was reachable).
func (n *node) created(name, what string) {
	p := filepath.Join(n.path(), name)
	dir, e := n.dirKey()
	key, _, err := statKey(p)
	if e != 0 || err != nil {
		return
	}
	n.lfs.record(&nsOp{desc: what + " " + p, dir: dir, undo: func() error {
		if !same(p, key) {
			return nil // moved on by a durable later op: nothing to undo here
		}
		return os.RemoveAll(p)
	}})
}

// removed moves name in n to the trash instead of removing it.
func (n *node) removed(name, what string) syscall.Errno {
	p := filepath.Join(n.path(), name)
	dir, e := n.dirKey()
	if e != 0 {
		return e
	}
	t, err := n.lfs.toTrash(p)
	if err != nil {
		return errno(err)
	}
	n.lfs.record(&nsOp{desc: what + " " + p, dir: dir,
		undo: func() error { return os.Rename(t, p) },
		done: func() { n.lfs.dropTrash(t) }})
	return 0
}

var (
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.FileFsyncdirer     = (*dirHandle)(nil)
	_ fs.FileReaddirenter   = (*dirHandle)(nil)
	_ fs.FileReleasedirer   = (*dirHandle)(nil)
	_ fs.FileSeekdirer      = (*dirHandle)(nil)
)

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, e := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if e == 0 {
		n.created(name, "mkdir")
	}
	return ch, e
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, e := n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
	if e == 0 {
		n.created(name, "mknod")
	}
	return ch, e
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, e := n.LoopbackNode.Symlink(ctx, target, name, out)
	if e == 0 {
		n.created(name, "symlink")
	}
	return ch, e
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, e := n.LoopbackNode.Link(ctx, target, name, out)
	if e == 0 {
		n.created(name, "link")
		n.lfs.modelSize(filepath.Join(n.path(), name), &out.Attr)
	}
	return ch, e
}

// Tmpfile (O_TMPFILE) is refused: its data would bypass the model.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	var s syscall.Stat_t
	p := filepath.Join(n.path(), name)
	if err := syscall.Lstat(p, &s); err != nil {
		return errno(err)
	}
	if s.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return syscall.EISDIR
	}
	return n.removed(name, "unlink")
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	p := filepath.Join(n.path(), name)
	d, err := os.Open(p)
	if err != nil {
		return errno(err)
	}
	fi, err := d.Stat()
	if err != nil {
		d.Close()
		return errno(err)
	}
	names, _ := d.Readdirnames(1)
	d.Close()
	switch {
	case !fi.IsDir():
		return syscall.ENOTDIR
	case len(names) > 0:
		return syscall.ENOTEMPTY
	}
	return n.removed(name, "rmdir")
}

// Rename keeps a replaced file in the trash (a hard link taken before the
// rename; a replaced directory is empty and is made again on undo).
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	src := filepath.Join(n.path(), name)
	dst := filepath.Join(np.path(), newName)
	dir, e := np.dirKey()
	if e != 0 {
		return e
	}
	srcKey, _, err := statKey(src)
	if err != nil {
		return errno(err)
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		if e := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags); e != 0 {
			return e
		}
		n.lfs.record(&nsOp{desc: "exchange " + src + " " + dst, dir: dir, undo: func() error {
			return unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_EXCHANGE)
		}})
		return 0
	}
	var trash string
	var victimDir *syscall.Stat_t
	if key, s, err := statKey(dst); err == nil && key != srcKey {
		if s.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			victimDir = s
		} else {
			n.lfs.nsMu.Lock()
			n.lfs.trashSeq++
			trash = filepath.Join(n.lfs.trash, strconv.Itoa(n.lfs.trashSeq))
			n.lfs.nsMu.Unlock()
			if err := os.Link(dst, trash); err != nil {
				return errno(err)
			}
		}
	}
	if e := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags); e != 0 {
		if trash != "" {
			os.Remove(trash)
		}
		return e
	}
	op := &nsOp{desc: "rename " + src + " " + dst, dir: dir, undo: func() error {
		if !same(dst, srcKey) {
			return nil
		}
		if err := os.Rename(dst, src); err != nil {
			return err
		}
		if trash != "" {
			return os.Rename(trash, dst)
		}
		if victimDir != nil {
			return os.Mkdir(dst, os.FileMode(victimDir.Mode&0o7777))
		}
		return nil
	}}
	if trash != "" {
		op.done = func() { n.lfs.dropTrash(trash) }
	}
	n.lfs.record(op)
	return 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, e := n.LoopbackNode.OpendirHandle(ctx, flags)
	if e != 0 {
		return nil, 0, e
	}
	return &dirHandle{inner: fh, n: n}, fuseFlags, 0
}

// dirHandle is an open directory: the loopback's, but syncing it makes
// the directory's pending ops durable.
type dirHandle struct {
	inner fs.FileHandle
	n     *node
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	key, e := d.n.dirKey()
	if e != 0 {
		return e
	}
	d.n.lfs.syncDir(key)
	return 0
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.inner.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	if r, ok := d.inner.(fs.FileReleasedirer); ok {
		r.Releasedir(ctx, flags)
	}
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if s, ok := d.inner.(fs.FileSeekdirer); ok {
		return s.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}
