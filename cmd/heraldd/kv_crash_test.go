package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// TestKVCrash_KillNine kill -9s heraldd while writers put keys of one bucket
// with receipts, then restarts it on the same data directory, several
// times. After every restart: each receipted write is still the key's value
// or was overwritten by a higher revision (nothing receipted is lost), the
// snapshot marker is at least the highest receipted revision, and the first
// write after the restart gets a revision above every earlier one (none is
// reused, though the last ones before the kill were never receipted).
func TestKVCrash_KillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	dir := t.TempDir()
	type put struct {
		rev uint64
		val string
	}
	var mu sync.Mutex
	receipted := map[string][]put{} // key -> receipted puts
	var maxRev uint64
	for round := 0; round < 4; round++ {
		addr := freeAddr(t)
		d := startChild(t, dir, addr)
		c := dial2(t, addr)
		// What survived.
		sub, err := c.Subscribe("/kv/crash.>", "auto", stomp.Header{Key: "kv-get", Value: "true"})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]put{}
		var marker uint64
		for marker == 0 && round > 0 {
			select {
			case m := <-sub.C():
				if v := m.Get("kv-snapshot-complete"); v != "" {
					marker, _ = strconv.ParseUint(v, 10, 64)
					continue
				}
				rev, _ := strconv.ParseUint(m.Get("revision"), 10, 64)
				got[strings.TrimPrefix(m.Get("destination"), "/kv/crash.")] = put{rev, string(m.Body)}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: no snapshot marker", round)
			}
		}
		mu.Lock()
		if marker < maxRev {
			t.Errorf("round %d: bucket at revision %d after the restart, but %d was receipted", round, marker, maxRev)
		}
		for k, ps := range receipted {
			last := ps[len(ps)-1]
			g := got[k]
			if g.rev < last.rev || (g.rev == last.rev && g.val != last.val) {
				t.Errorf("round %d: key %s is %q at revision %d; %q at revision %d was receipted", round, k, g.val, g.rev, last.val, last.rev)
			}
		}
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := c.SendReceipt(ctx, "/kv/crash.first", []byte("r"+strconv.Itoa(round)))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		first, _ := strconv.ParseUint(r.Get("revision"), 10, 64)
		mu.Lock()
		if first <= maxRev {
			t.Errorf("round %d: first write after the restart got revision %d; %d was receipted before", round, first, maxRev)
		}
		receipted["first"] = append(receipted["first"], put{first, "r" + strconv.Itoa(round)})
		maxRev = max(maxRev, first)
		mu.Unlock()
		c.Close()
		// Writers, killed mid-stream.
		var wg sync.WaitGroup
		for w := 0; w < 3; w++ {
			wc, err := client.Dial(context.Background(), addr, client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer wc.Close()
				for i := 0; ; i++ {
					key := fmt.Sprintf("k%d", (i+w)%5)
					val := fmt.Sprintf("r%d-w%d-%d", round, w, i)
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					r, err := wc.SendReceipt(ctx, "/kv/crash."+key, []byte(val))
					cancel()
					if err != nil {
						return // killed
					}
					rev, _ := strconv.ParseUint(r.Get("revision"), 10, 64)
					mu.Lock()
					ps := receipted[key]
					if len(ps) > 0 && ps[len(ps)-1].rev >= rev {
						// Receipts of one key come in revision order only per connection;
						// keep the highest.
						mu.Unlock()
						continue
					}
					receipted[key] = append(ps, put{rev, val})
					maxRev = max(maxRev, rev)
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(150+round*70) * time.Millisecond)
		d.kill()
		wg.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	if maxRev < 20 {
		t.Errorf("only %d revisions receipted over the rounds: the writers hardly ran", maxRev)
	}
	t.Logf("%d revisions receipted over 4 kill -9 rounds", maxRev)
}
