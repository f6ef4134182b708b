package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// TestKVTxnLockCrash_KillNine kill -9s heraldd while writers commit
// transactions that set three keys to one value and lockers take and give
// back a lock, then restarts it on the same data directory, several times.
// After every restart: the three keys hold the same value (a transaction
// is never half there), every receipted transaction is there or was
// overwritten by a later one (the bucket's revision is at least the last
// receipted), and the first lock token is above every token shown before
// the kill (tokens never go back).
func TestKVTxnLockCrash_KillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	dir := t.TempDir()
	keys := []string{"tx.site1.a", "tx.site1.b", "tx.site2.c"}
	var mu sync.Mutex
	var maxRev, maxToken uint64
	txns, grants := 0, 0
	for round := 0; round < 4; round++ {
		addr := freeAddr(t)
		d := startChild(t, dir, addr)
		c := dial2(t, addr)
		sub, err := c.Subscribe("/kv/tx.>", "auto", stomp.Header{Key: "kv-get", Value: "true"})
		if err != nil {
			t.Fatal(err)
		}
		vals := map[string]string{}
		revs := map[string]uint64{}
		var marker uint64
	snapshot:
		for {
			select {
			case m := <-sub.C():
				if v := m.Get("kv-snapshot-complete"); v != "" {
					marker, _ = strconv.ParseUint(v, 10, 64)
					break snapshot
				}
				vals[m.Get("destination")] = string(m.Body)
				revs[m.Get("destination")], _ = strconv.ParseUint(m.Get("revision"), 10, 64)
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: no snapshot marker", round)
			}
		}
		mu.Lock()
		if marker < maxRev {
			t.Errorf("round %d: bucket at revision %d after the restart; %d was receipted", round, marker, maxRev)
		}
		if round > 0 {
			v := vals["/kv/"+keys[0]]
			for _, k := range keys {
				if vals["/kv/"+k] != v || v == "" {
					t.Errorf("round %d: half a transaction after kill -9: %v (revisions %v)", round, vals, revs)
				}
			}
		}
		mu.Unlock()
		// The first lock grant after the restart.
		ls, err := c.SubscribeReceipt(context.Background(), "/lock/crash", "auto")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-ls.C():
			tok, _ := strconv.ParseUint(m.Get("lock-token"), 10, 64)
			mu.Lock()
			if tok <= maxToken {
				t.Errorf("round %d: first token after the restart %d; %d was shown before", round, tok, maxToken)
			}
			maxToken = max(maxToken, tok)
			mu.Unlock()
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: no lock grant", round)
		}
		ls.Unsubscribe(context.Background())
		c.Close()

		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wc, err := client.Dial(context.Background(), addr, client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() { // transactions
				defer wg.Done()
				defer wc.Close()
				for i := 0; ; i++ {
					id := fmt.Sprintf("r%dw%dn%d", round, w, i)
					if wc.Write(stomp.NewFrame(stomp.CmdBegin, "transaction", id)) != nil {
						return
					}
					for _, k := range keys {
						f := stomp.NewFrame(stomp.CmdSend, "destination", "/kv/"+k, "transaction", id)
						f.Body = []byte(id)
						if wc.Write(f) != nil {
							return
						}
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					r, err := wc.Request(ctx, stomp.NewFrame(stomp.CmdCommit, "transaction", id))
					cancel()
					if err != nil {
						return // killed
					}
					rev, _ := strconv.ParseUint(r.Get("revision"), 10, 64)
					mu.Lock()
					maxRev = max(maxRev, rev)
					txns++
					mu.Unlock()
				}
			}()
			lc, err := client.Dial(context.Background(), addr, client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() { // lockers
				defer wg.Done()
				defer lc.Close()
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					s, err := lc.SubscribeReceipt(ctx, "/lock/crash", "auto")
					cancel()
					if err != nil {
						return
					}
					select {
					case m, ok := <-s.C():
						if !ok {
							return
						}
						tok, _ := strconv.ParseUint(m.Get("lock-token"), 10, 64)
						mu.Lock()
						if tok <= maxToken {
							t.Errorf("token %d after %d", tok, maxToken)
						}
						maxToken = max(maxToken, tok)
						grants++
						mu.Unlock()
					case <-lc.Done():
						return
					}
					ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
					err = s.Unsubscribe(ctx)
					cancel()
					if err != nil {
						return
					}
				}
			}()
		}
		time.Sleep(time.Duration(200+round*70) * time.Millisecond)
		d.kill()
		wg.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	if txns < 10 || grants < 10 {
		t.Errorf("only %d transactions and %d lock grants over the rounds: the clients hardly ran", txns, grants)
	}
	t.Logf("%d transactions, %d lock grants over 4 kill -9 rounds; last revision %d, last token %d", txns, grants, maxRev, maxToken)
}
