// Package lazyfs is a test-only FUSE file system that loses what was not
// made durable, to test what survives a power cut. It is built in the
// spirit of Jepsen's LazyFS, on github.com/hanwen/go-fuse/v2's loopback
// file system.
//
// # Contract
//
// Mount(t, backing, mnt) shows the backing directory at mnt. Through the
// mount everything reads as on any POSIX file system (a reader sees every
// earlier write, truncate, fallocate, create, rename and unlink, synced or
// not); what is kept by a power cut is what POSIX says fsync makes
// durable, and nothing more:
//
//   - File data. write, truncate (ftruncate, truncate(2) by path, open
//     with O_TRUNC) and fallocate (mode 0 extends the size,
//     FALLOC_FL_KEEP_SIZE alone changes nothing visible,
//     FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE zeroes; other modes fail
//     with EOPNOTSUPP) change only an in-memory state per backing inode:
//     the 4 KiB pages that were changed, the logical size, and how much of
//     the backing file still belongs to the file (after a shrink, a later
//     grow reads zeros there, as it must). fsync or fdatasync of any
//     descriptor of the inode writes the whole state to the backing file,
//     which is then byte for byte the file as read through the mount.
//     close(2) syncs nothing. The state follows the inode, so a renamed
//     file keeps its unsynced data under its new name.
//   - Directory entries. create, mkdir, mknod, symlink, link, unlink,
//     rmdir and rename are applied to the backing directory at once (a
//     removed or replaced file waits in a trash directory beside the
//     backing dir), and are recorded as pending until their directory is
//     synced (fsync of a descriptor of the directory): for a rename, the
//     directory it moved into. Fsync of a file does not make its name
//     durable (fsync(2): "an explicit fsync() on a file descriptor for the
//     directory is also needed").
//   - Cut() is the power cut: it drops every unsynced data state and undoes
//     every pending directory change, newest first, so the backing
//     directory holds exactly what was synced. A new file whose name was
//     not synced is gone even if its data was synced; a new directory goes
//     with everything in it. The caller first kills the processes using the
//     mount, and afterwards unmounts and reads through a new Mount or the
//     backing directory (the kernel may still cache what was dropped).
//   - Unmount without Cut is a clean shutdown: everything is made durable.
//
// # What is not modelled
//
// Metadata (mode, owner, times, xattrs) is written through at once.
// Writes are not torn and not reordered: a cut loses all unsynced writes
// of a file, never a subset of them, and never tears a page (Jepsen's LazyFS
// can also do those). The fsync of the model is not passed on to the
// backing file: the model is the power cut of this mount, not of the disk
// under it. Undoing a directory change assumes the names it touched were
// not changed again by a later change that was synced; where they were, it
// leaves them as they are. O_TMPFILE is refused (EOPNOTSUPP).
//
// # SQLite and the -shm file
//
// SQLite in WAL mode keeps its wal-index in DB-shm and uses it through a
// shared writable mmap. The data of files whose name ends in "-shm" is
// kept out of the model: reads, writes and truncates go straight to the
// backing file and fsync is a no-op for them. That is sound because the
// wal-index is a cache: SQLite never syncs it, and the first connection
// after a crash rebuilds it from the -wal file (LazyFS lets it through the
// same way). The database and -wal files are fully modelled, so with
// PRAGMA synchronous=NORMAL in WAL mode (no WAL sync at commit) a cut loses
// the commits since the last checkpoint, and with FULL it loses none.
// SQLite syncs the directory when it first syncs a new -wal file, which
// also makes the database file's name durable. The mount uses the kernel
// page cache without direct I/O, so shared writable mmap works, and it
// does not ask for lock forwarding, so flock and POSIX locks are kept by
// the kernel (right for one mount).
//
// # Faults
//
// FailFsyncs(suffix, n) makes the next n fsync or fdatasync calls on files
// whose path ends with suffix fail with EIO; the file's unsynced state is
// left as it was (still read back, lost at a Cut, made durable by a later
// fsync that succeeds). FailReads(suffix, n) makes the next n reads of such
// files that reach the file system fail with EIO (n < 0: all of them until
// FailReads is called again; the kernel tries a failed read once more, so
// a failing device is n < 0), the file unchanged;
// reads the kernel's page cache serves do not reach it (what was written
// or read through the mount may be cached; a new Mount starts with nothing
// cached). FsyncFaults and ReadFaults count the faults returned.
//
// # The serving process
//
// Mount serves the mount from a child process, a run of the test binary:
// every package whose tests call Mount calls ChildMain first in its
// TestMain. Served by the test process itself, a mount can deadlock that
// process for good: unmapping a dirty shared mapping of a file on the
// mount (SQLite's -shm file, at the database's last close) waits for the
// pages' write-back holding the process's mmap lock, and the FUSE reader
// that would serve the write-back waits for the same lock to fault in its
// buffer. The test drives the child over two pipes (JSON lines): Cut,
// the faults and the counters are requests; what the server reports as an
// error fails the test. When the test process goes without unmounting (a
// timeout's panic), the child sees its pipe close and unmounts.
//
// # When FUSE is not there
//
// The child mounts with mount(2) as root and through fusermount3
// otherwise. Without /dev/fuse, or without the permission to mount, the
// test is skipped with a message naming what to install (apt-get install
// fuse3, and a /dev/fuse device); with HERALD_REQUIRE_ROOT_TESTS=1 it fails
// instead. Cleanup (registered by Mount) unmounts and waits for the child
// to exit, also when the test fails. A busy mount (a file on it still
// open) is first aborted through the FUSE control file system
// (/sys/fs/fuse/connections, mounted there if it is not), then detached:
// detached alone, it would outlive its server, and closing the file later
// would wait for a reply for good. Close files on the mount before the
// cleanup runs: after the abort, every operation on them fails with
// ENOTCONN.
package lazyfs
