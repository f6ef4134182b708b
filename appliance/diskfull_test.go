package appliance_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testenv"
)

// mountTmpfs mounts a tmpfs of size (like "4m") on a new directory.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	testenv.RequireRoot(t, "mount", "umount")
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

func remount(t *testing.T, dir, size string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
}

// fill sends 4 KiB messages with receipts until the broker refuses one; it
// returns the bodies receipted and the refusal.
func fill(t *testing.T, tb *testBroker, dest string) ([]string, error) {
	t.Helper()
	var ok []string
	body := strings.Repeat("x", 4000)
	for i := 0; i < 100000; i++ {
		c, err := client.Dial(ctxT(t), tb.Addr, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for {
			b := body + string(rune('a'+len(ok)%26))
			if _, err := c.SendReceipt(ctxT(t), dest, []byte(b)); err != nil {
				c.Close()
				return ok, err
			}
			ok = append(ok, b)
		}
	}
	return ok, nil
}

func TestDiskFull_Floor(t *testing.T) {
	dir := mountTmpfs(t, "24m")
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.DataDir = dir
		c.Journal.MinFreeBytes = 8 << 20
		c.Journal.WALLimitBytes = 4 << 20 // the floor: 12 MiB free
	})
	ok, err := fill(t, tb, "/queue/floor")
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("after %d messages: got %v, want ERROR disk full", len(ok), err)
	}
	if !strings.Contains(err.Error(), "min_free_bytes") || !strings.Contains(err.Error(), "wal_limit_bytes") {
		t.Fatalf("error does not say what to do: %v", err)
	}
	remount(t, dir, "256m")
	// It recovers by itself once space returns.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := tb.Dial(t)
		_, err := c.SendReceipt(ctxT(t), "/queue/floor", []byte("after"))
		c.Close()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused 10s after space returned: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	checkAll(t, tb, "/queue/floor", append(ok, "after"))
}

func TestDiskFull_ENOSPC(t *testing.T) {
	dir := mountTmpfs(t, "3m")
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.DataDir = dir
		c.Journal.MinFreeBytes = 0 // no floor: hit the real ENOSPC
	})
	ok, err := fill(t, tb, "/queue/enospc")
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("after %d messages: got %v, want ERROR naming disk full", len(ok), err)
	}
	if len(ok) == 0 {
		t.Fatal("nothing stored before the disk filled")
	}
	// The daemon is alive; with space back, sends succeed again and
	// nothing receipted was lost, also across a restart.
	remount(t, dir, "64m")
	c := tb.Dial(t)
	if _, err := c.SendReceipt(ctxT(t), "/queue/enospc", []byte("after")); err != nil {
		t.Fatalf("send after space returned: %v", err)
	}
	c.Close()
	tb.Restart()
	checkAll(t, tb, "/queue/enospc", append(ok, "after"))
}

func checkAll(t *testing.T, tb *testBroker, dest string, want []string) {
	t.Helper()
	c := tb.Dial(t)
	sub, err := c.Subscribe(dest, "auto", hdr("prefetch-count", "1000"))
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if m := recv(t, sub); string(m.Body) != w {
			t.Fatalf("message %d: got %.8q..., want %.8q...", i, m.Body, w)
		}
	}
	expectNone(t, sub, 100*time.Millisecond)
}

// Space the journal frees inside its file counts: once the queue that
// filled the disk to the floor is purged, SENDs are accepted again without
// any space returned to the filesystem (SQLite reuses the freed pages; the
// journal gives them back only when idle with 64 MiB of them): about as
// many as were purged fit, none refused
// before three quarters of them (before, only the WAL's truncations let a
// few through between refusals), and the floor still refuses SENDs before
// the disk is really full (the journal never meets ENOSPC).
func TestDiskFull_PurgedSpaceIsReused(t *testing.T) {
	dir := mountTmpfs(t, "64m")
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.DataDir = dir
		c.Journal.MinFreeBytes = 6 << 20
		c.Journal.WALLimitBytes = 4 << 20 // the floor: 10 MiB free; the messages' pages fill the rest
	})
	ok, err := fill(t, tb, "/queue/full")
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("after %d messages: got %v, want ERROR disk full", len(ok), err)
	}
	if n, err := tb.B.Purge(ctxT(t), "full"); err != nil || n != len(ok) {
		t.Fatalf("purge of the full queue: %d, %v; want %d", n, err, len(ok))
	}
	// Fill again: a refusal while the WAL is over its bound passes once it
	// starts over; the fill ends when refused for 2 s.
	body := strings.Repeat("y", 4000)
	c := tb.Dial(t)
	var again, refusals int
	firstRefusal := -1
	var refusedSince time.Time
	for again < 2*len(ok) {
		_, err := c.SendReceipt(ctxT(t), "/queue/again", []byte(body))
		if err == nil {
			again++
			refusedSince = time.Time{}
			continue
		}
		if !strings.Contains(err.Error(), "is below") {
			t.Fatalf("after the purge, SEND %d: %v; want only the floor's refusal (the journal must not meet a full disk)", again, err)
		}
		refusals++
		if firstRefusal < 0 {
			firstRefusal = again
		}
		if refusedSince.IsZero() {
			refusedSince = time.Now()
		} else if time.Since(refusedSince) > 2*time.Second {
			break
		}
		c.Close()
		time.Sleep(100 * time.Millisecond)
		c = tb.Dial(t)
	}
	c.Close()
	t.Logf("%d messages of 4 KiB filled the disk to the floor; after their purge %d fit again, the first refused after %d, %d refusals", len(ok), again, firstRefusal, refusals)
	if again < len(ok)*3/4 || again >= 2*len(ok) || firstRefusal >= 0 && firstRefusal < len(ok)*3/4 {
		t.Fatalf("after purging %d messages of 4 KiB, %d fit again, the first refused after %d; want about as many, none refused before three quarters", len(ok), again, firstRefusal)
	}
	tb.Restart()
	if v, _ := tb.B.Queue("again"); v.Messages != again {
		t.Fatalf("after a restart, %d messages in the queue; %d were receipted", v.Messages, again)
	}
}
