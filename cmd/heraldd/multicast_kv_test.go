package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testenv"
)

// kvWatchLine is one line of `herald kv watch --json`.
type kvWatchLine struct {
	Key              string  `json:"key"`
	Revision         uint64  `json:"revision"`
	Operation        string  `json:"operation"`
	Value            string  `json:"value"`
	Snapshot         bool    `json:"snapshot"`
	SnapshotComplete *uint64 `json:"snapshot_complete"`
	Resync           *struct {
		Reason string `json:"reason"`
		After  uint64 `json:"after"`
	} `json:"resync"`
}

// kvWatcher follows a `herald kv watch --group --json` process and keeps
// the copy of the bucket a user of its output would: each snapshot (the
// first, and each after #RESYNC) replaces the copy, each change after it
// updates it.
type kvWatcher struct {
	mu       sync.Mutex
	state    map[string]string
	rev      uint64 // the revision the copy reflects
	resyncs  []string
	bad      []string
	fresh    bool // the next snapshot entry starts a new copy
	changes  int  // change lines after a marker
	stderr   *lineLogger
	done     chan struct{}
	complete int
}

func (w *kvWatcher) line(b []byte) {
	var l kvWatchLine
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := json.Unmarshal(b, &l); err != nil {
		w.bad = append(w.bad, string(b))
		return
	}
	switch {
	case l.Resync != nil:
		w.resyncs = append(w.resyncs, l.Resync.Reason)
		w.fresh = true
	case l.SnapshotComplete != nil:
		if w.fresh {
			w.state = map[string]string{}
		}
		w.fresh = false
		w.rev = *l.SnapshotComplete
		w.complete++
	case l.Snapshot:
		if w.fresh {
			w.state, w.fresh = map[string]string{}, false
		}
		w.state[l.Key] = l.Value
	default:
		if l.Revision != w.rev+1 {
			w.bad = append(w.bad, fmt.Sprintf("change at revision %d after %d: %s", l.Revision, w.rev, b))
		}
		w.rev = l.Revision
		w.changes++
		if l.Operation == "DEL" {
			delete(w.state, l.Key)
		} else {
			w.state[l.Key] = l.Value
		}
	}
}

// TestMulticastKVWatch: a bucket carried on a multicast channel (kv =
// ["config"]). `herald kv watch --group` in another namespace reads the
// snapshot over STOMP and then follows every change by multicast, each
// revision once and in order; cut off for longer than the channel's window
// it prints #RESYNC, re-reads the bucket over STOMP and goes on, and its
// copy ends equal to the store's.
func TestMulticastKVWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace tests skipped in -short mode")
	}
	testenv.RequireRoot(t, "ip", "nft", "go")
	herald := buildHerald(t, t.TempDir())
	nw := newMCNet(t, "app", "r1")
	const group, port = "239.255.78.11:7811", 7811
	cfgPath := writeDaemonConfig(t, t.TempDir(), nw.Addr["app"].String(), mcChannel{group: group, extra: "window = 65536\nkv = [\"config\"]\n"})
	d := nw.startDaemon(t, "app", cfgPath)
	pub := nw.dialStomp(t, "app", d.stomp)
	want := map[string]string{}
	var rev uint64
	put := func(c *client.Conn, key, value string, receipt bool) {
		t.Helper()
		dest := "/kv/config." + key
		var err error
		if receipt {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var r *stomp.Frame
			r, err = c.SendReceipt(ctx, dest, []byte(value))
			cancel()
			if err == nil {
				if got := r.Get("revision"); got != strconv.FormatUint(rev+1, 10) {
					t.Fatalf("put %s: revision %s, want %d", key, got, rev+1)
				}
			}
		} else {
			err = c.Send(dest, []byte(value))
		}
		if err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		rev++
		want["config."+key] = value
	}
	del := func(key string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pub.SendReceipt(ctx, "/kv/config."+key, nil, stomp.Header{Key: "kv-operation", Value: "DEL"}); err != nil {
			t.Fatalf("delete %s: %v", key, err)
		}
		rev++
		delete(want, "config."+key)
	}
	for i := 0; i < 5; i++ {
		put(pub, "k"+strconv.Itoa(i), "initial "+strconv.Itoa(i), true)
	}
	put(pub, "site1.db", "db1", true)

	w := &kvWatcher{fresh: true, done: make(chan struct{}), stderr: &lineLogger{t: t, prefix: "kv watch"}}
	cmd := exec.Command("ip", "netns", "exec", nw.NS["r1"], herald, "kv", "watch", "--group", group, "--interface", "eth0",
		"--json", "--server", d.stomp, "config.>")
	cmd.Stderr = testenv.RaceWatch(t, w.stderr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			w.line(sc.Bytes())
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		<-w.done
	})
	waitRev := func(what string, target uint64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			w.mu.Lock()
			got, n := w.rev, w.complete
			w.mu.Unlock()
			if n > 0 && got >= target {
				return
			}
			select {
			case <-w.done:
				t.Fatalf("%s: kv watch exited: %s", what, w.stderr)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the watch's copy is at revision %d (%d snapshots), want %d; stderr: %s", what, got, n, target, w.stderr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	check := func(what string) {
		t.Helper()
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.bad) > 0 {
			t.Fatalf("%s: %d bad lines, first %q", what, len(w.bad), w.bad[0])
		}
		if len(w.state) != len(want) {
			t.Fatalf("%s: the watch's copy has %d keys, the store %d", what, len(w.state), len(want))
		}
		for k, v := range want {
			if w.state[k] != v {
				t.Fatalf("%s: key %s is %q in the watch's copy, %q in the store", what, k, w.state[k], v)
			}
		}
	}
	waitRev("snapshot", rev)
	// Wait until the receiver has joined: the first change after it must
	// come by multicast, not by a resync.
	time.Sleep(300 * time.Millisecond)

	// No loss: every change by multicast, in order, none twice.
	other := nw.dialStomp(t, "app", d.stomp)
	for i := 0; i < 200; i++ {
		switch {
		case i%50 == 49:
			del("k" + strconv.Itoa(i%5))
		default:
			put(pub, "k"+strconv.Itoa(i%5), "v"+strconv.Itoa(i), i%20 == 19)
		}
		if i%40 == 0 { // another bucket, not carried: no revision of config
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := other.SendReceipt(ctx, "/kv/other.x", []byte("x")); err != nil {
				t.Fatal(err)
			}
			cancel()
		}
	}
	waitRev("no loss", rev)
	check("no loss")
	w.mu.Lock()
	resyncs, changes := len(w.resyncs), w.changes
	w.mu.Unlock()
	if resyncs != 0 || changes != 200 {
		t.Fatalf("no loss: %d resyncs (%v), %d changes; want none and 200 (all by multicast)", resyncs, w.resyncs, changes)
	}

	// Cut r1 off while more than the channel's window goes out.
	ns := nw.NS["r1"]
	testenv.Sh(t, "ip", "netns", "exec", ns, "nft", "add", "table", "inet", "cut")
	t.Cleanup(func() { exec.Command("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "cut").Run() })
	testenv.Sh(t, "ip", "netns", "exec", ns, "nft", "add", "chain", "inet", "cut", "input", "{ type filter hook input priority 0 ; }")
	testenv.Sh(t, "ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "cut", "input", "udp", "dport", strconv.Itoa(port), "drop")
	pad := strings.Repeat("p", 200)
	for i := 0; i < 1000; i++ {
		put(pub, "k"+strconv.Itoa(i%7), pad+strconv.Itoa(i), i%100 == 99)
	}
	del("k6")
	time.Sleep(200 * time.Millisecond)
	testenv.Sh(t, "ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "cut")
	for i := 0; i < 20; i++ {
		put(pub, "after", strconv.Itoa(i), i == 19)
	}
	waitRev("after the cut", rev)
	check("after the cut")
	w.mu.Lock()
	cutResyncs := len(w.resyncs)
	w.mu.Unlock()
	if cutResyncs == 0 {
		t.Fatalf("after a cut longer than the window: no #RESYNC; the copy matched by chance?")
	}

	// heraldd killed and started again: a new sender session. The change
	// made while it was down (none can be) and the ones after come in
	// order, after a resync for the restart.
	d.kill()
	d = nw.startDaemon(t, "app", cfgPath)
	pub = nw.dialStomp(t, "app", d.stomp)
	for i := 0; i < 10; i++ {
		put(pub, "restarted", strconv.Itoa(i), true)
	}
	waitRev("after a restart", rev)
	check("after a restart")
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.resyncs) <= cutResyncs || w.resyncs[len(w.resyncs)-1] != "the sender restarted" {
		t.Fatalf("after heraldd restarted: resyncs %v, want one more for the restart", w.resyncs)
	}
	t.Logf("revision %d; %d resyncs (%v), %d snapshots, %d changes by multicast", rev, len(w.resyncs), w.resyncs, w.complete, w.changes)
}
