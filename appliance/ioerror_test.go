package appliance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/internal/lazyfs"
)

// startOnLazyfs starts a broker whose data directory is a lazyfs mount
// (sync full), so that a test can make the journal's fsyncs fail.
func startOnLazyfs(t *testing.T) (*testBroker, *lazyfs.FS) {
	t.Helper()
	backing, mnt := t.TempDir(), t.TempDir()
	fs, err := lazyfs.Mount(t, backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Unmount() }) // after the broker's Stop (cleanups run last first)
	tb := startWrapped(t, func(c *appliance.Config) {
		c.DataDir = mnt
		c.Journal.Sync = "full"
	}, nil)
	return tb, fs
}

// walEmpty waits until the idle journal's WAL is truncated, so that the
// next WAL fsync is a commit's, not the checkpointer's.
func walEmpty(t *testing.T, tb *testBroker) {
	t.Helper()
	waitFor(t, 10*time.Second, "the idle journal's WAL truncated", func() bool {
		_, wal := tb.Store.Sizes()
		return wal == 0
	})
	time.Sleep(100 * time.Millisecond)
}

// An ACK without a receipt whose commit met an I/O error may be stored:
// the ERROR a DISCONNECT with a receipt gets then must not say it was not
// stored and that its messages will be delivered again. Before, it said
// "acknowledgement not stored ... will be delivered again".
func TestDisconnectAfterAckOfUnknownOutcome(t *testing.T) {
	tb, fs := startOnLazyfs(t)
	p := tb.Dial(t)
	if _, err := p.SendReceipt(ctxT(t), "/queue/io", []byte("m")); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, tb)
	r.connect("1.2")
	r.write("SUBSCRIBE\nid:s\ndestination:/queue/io\nack:client-individual\n\n\x00")
	m := r.frame()
	if m.Command != stomp.CmdMessage {
		t.Fatalf("got %s %v, want the MESSAGE", m.Command, m.Headers)
	}
	walEmpty(t, tb)
	fs.FailFsyncs("herald.db-wal", 1)
	r.write("ACK\nid:" + m.Get("ack") + "\n\n\x00")
	r.write("DISCONNECT\nreceipt:bye\n\n\x00")
	f := r.frame()
	if f.Command != stomp.CmdError {
		t.Fatalf("DISCONNECT after an ACK whose commit failed: got %s %v, want an ERROR", f.Command, f.Headers)
	}
	if n := fs.FsyncFaults(); n != 1 {
		t.Fatalf("%d fsync faults, want 1 (the ACK's commit)", n)
	}
	msg := f.Get("message") + " " + string(f.Body)
	if !strings.Contains(f.Get("message"), "may or may not be stored") || strings.Contains(msg, "will be delivered again") {
		t.Fatalf("ERROR after an ACK of unknown outcome: %q, want it to say the acknowledgement may or may not be stored (not that its messages will be delivered again)", msg)
	}
}

// A lock passed on to a waiter whose token's commit met an I/O error: the
// waiter is refused (not granted), and its ERROR does not say the token
// was not stored, which is not known (it may be, and the next start then
// goes on from it). Before, it said the token "could not be stored".
func TestLockGrantOfUnknownOutcome(t *testing.T) {
	tb, fs := startOnLazyfs(t)
	holder := tb.Dial(t)
	hs, err := holder.Subscribe("/lock/l", "")
	if err != nil {
		t.Fatal(err)
	}
	recv(t, hs)
	w := dialRaw(t, tb)
	w.connect("1.2")
	w.write("SUBSCRIBE\nid:w\ndestination:/lock/l\nreceipt:sub-w\n\n\x00")
	if f := w.frame(); f.Command != stomp.CmdReceipt {
		t.Fatalf("got %s %v, want the waiter's SUBSCRIBE receipt", f.Command, f.Headers)
	}
	walEmpty(t, tb)
	fs.FailFsyncs("herald.db-wal", 1)
	if err := hs.Unsubscribe(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	f := w.frame()
	if f.Command != stomp.CmdError {
		t.Fatalf("waiter after a grant whose token's commit failed: got %s %v %q, want an ERROR", f.Command, f.Headers, f.Body)
	}
	if n := fs.FsyncFaults(); n != 1 {
		t.Fatalf("%d fsync faults, want 1 (the grant's commit)", n)
	}
	if msg := f.Get("message") + " " + string(f.Body); !strings.Contains(msg, "may or may not be stored") || strings.Contains(msg, "could not be stored") {
		t.Fatalf("ERROR of the refused grant: %q, want it to say the token may or may not be stored", msg)
	}
}
