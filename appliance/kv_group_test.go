package appliance_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/internal/testbroker"
)

// Group commit: concurrent SENDs to /kv/ share journal commits (each
// commit is slowed here, so writers pile up behind it), and each still
// gets its own revision, its RECEIPT only once durable and applied, and
// its change delivered to watchers once, in revision order.
func TestKV_GroupCommitSharesCommits(t *testing.T) {
	tb := testbroker.StartWith(t, nil, func(int, time.Duration) { time.Sleep(3 * time.Millisecond) })
	w := tb.Dial(t)
	watch, err := w.SubscribeReceipt(ctxT(t), "/kv/g.>", "auto")
	if err != nil {
		t.Fatal(err)
	}
	recv(t, watch) // marker
	const writers, each = 8, 15
	var mu sync.Mutex
	seen := map[uint64]string{}
	var wg sync.WaitGroup
	for i := 0; i < writers; i++ {
		c := tb.Dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < each; n++ {
				val := fmt.Sprintf("w%d-%d", i, n)
				r, err := c.SendReceipt(ctxT(t), fmt.Sprintf("/kv/g.k%d", n%3), []byte(val))
				if err != nil {
					t.Error(err)
					return
				}
				rev, _ := strconv.ParseUint(r.Get("revision"), 10, 64)
				mu.Lock()
				if _, dup := seen[rev]; dup || rev == 0 {
					t.Errorf("revision %q given twice or missing", r.Get("revision"))
				}
				seen[rev] = val
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for rev := uint64(1); rev <= writers*each; rev++ {
		m := recv(t, watch)
		if m.Get("revision") != strconv.FormatUint(rev, 10) || string(m.Body) != seen[rev] {
			t.Fatalf("watcher got %v %q, want revision %d %q", m.Headers, m.Body, rev, seen[rev])
		}
	}
	st := tb.B.KVStats()
	if st.Puts != writers*each {
		t.Fatalf("%d puts counted", st.Puts)
	}
	if st.Groups >= st.Puts*3/4 {
		t.Errorf("%d puts in %d journal commits: concurrent writers did not share commits", st.Puts, st.Groups)
	}
	t.Logf("%d puts in %d commits", st.Puts, st.Groups)
}
