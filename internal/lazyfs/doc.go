// Package lazyfs is a test-only FUSE file system that loses what was not
// fsynced, to test what survives a power cut. It is built in the spirit of
// Jepsen's LazyFS, on github.com/hanwen/go-fuse/v2's loopback file system.
//
// # Contract
//
// Mount(t, backing, mnt) shows the backing directory at mnt. Through the
// mount, every file reads as a POSIX file would (a reader sees every
// earlier write, truncate and fallocate, unsynced or not), but the data of
// regular files reaches the backing directory only when it is synced:
//
//   - write, truncate (ftruncate, truncate(2) by path, open with O_TRUNC)
//     and fallocate (mode 0 extends the size, FALLOC_FL_KEEP_SIZE alone
//     changes nothing visible, FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE
//     zeroes; other modes fail with EOPNOTSUPP) change only an in-memory
//     state per backing inode: 4 KiB pages that were changed, the logical
//     size, and how much of the backing file is still part of the file
//     (after a shrink, a later grow reads zeros there, as it must);
//   - fsync and fdatasync of any descriptor on the inode write the whole
//     state to the backing file (the backing file is then byte for byte
//     the file as read through the mount); close(2) syncs nothing;
//   - Cut() is the power cut: it drops every unsynced state, so the
//     backing directory holds exactly what was synced. The caller first
//     kills the processes that use the mount, and afterwards unmounts and
//     reads through a new Mount (or the backing directory): the kernel may
//     still cache pages of the dropped data.
//
// The state follows the inode: a renamed file keeps its unsynced data
// under its new name; unlinking the last link (or renaming another file
// over it) forgets it.
//
// # What is not modelled
//
// Namespace operations (create, mkdir, unlink, rename, link, symlink,
// chmod, chown, utimes, xattrs) go to the backing directory at once, as if
// every directory were synced after every change. A real file system may
// lose a create or rename whose directory was not fsynced; here it never
// does, so this model can miss bugs that need that loss, but it never
// invents a loss that fsync would have prevented. Syncing a directory is
// accepted and does nothing. Fsync does not call fsync on the backing
// file: the model is the power cut of the FUSE mount, not of the machine
// under it. Writes are not torn: a write is buffered whole and a sync
// writes whole pages, so a cut loses whole unsynced writes, never part of
// one (LazyFS can also tear them; this does not).
//
// # SQLite and the -shm file
//
// SQLite in WAL mode keeps its wal-index in DB-shm and uses it through a
// shared writable mmap. Files whose name ends in "-shm" are kept out of
// the model: reads, writes and truncates go straight to the backing file
// and fsync is a no-op for them. That is sound because the wal-index is a
// cache: SQLite never syncs it, and the first connection after a crash
// rebuilds it from the -wal file (LazyFS lets it through the same way).
// The database file and the -wal file are fully modelled, so with
// PRAGMA synchronous=NORMAL in WAL mode (no WAL sync at commit) a cut
// loses the commits since the last checkpoint, and with FULL it loses
// none. The mount uses the kernel's page cache without direct I/O, so
// shared writable mmap works, and it does not ask for lock forwarding, so
// flock and POSIX locks are kept by the kernel (right for one mount).
//
// # When FUSE is not there
//
// Mount mounts with mount(2) as root and through fusermount3 otherwise.
// Without /dev/fuse, or without the permission to mount, the test is
// skipped with a message naming what to install (apt-get install fuse3,
// and a /dev/fuse device); with HERALD_REQUIRE_ROOT_TESTS=1 it fails
// instead. Cleanup (registered by Mount) unmounts, lazily if the mount is
// busy, also when the test fails.
package lazyfs
