package journal

import (
	"context"
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance"
)

// BenchmarkStore_Page is a deep queue's page-ins as a drain makes them:
// pages of 1,000 messages of 1 KiB, in ID order, each after a commit by
// the writer (which drops the reading connection's page cache, as the
// drain's deletes do), every other message of the fill in another queue.
// It reports the time per message paged in. (The query's shape does not
// matter here: the table scanned by rowid, or without the claims join,
// measured the same, within 5%.)
func BenchmarkStore_Page(b *testing.B) {
	s := mustOpen(b, Config{Sync: "normal"})
	body := strings.Repeat("x", 1024)
	const n, page = 40000, 1000
	for i := 0; i < n; i += 500 {
		ops := make([]appliance.Op, 0, 500)
		for range 500 {
			ops = append(ops, enq("q", body))
			if i%2 == 0 {
				ops = append(ops, enq("other", body))
			}
		}
		if _, err := apply(b, s, ops...); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	var after uint64
	b.ReportAllocs()
	b.ResetTimer()
	msgs := 0
	for range b.N {
		b.StopTimer()
		if _, err := apply(b, s, appliance.Op{Kind: appliance.OpClaim, ID: 1, Deliveries: 1}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		ms, err := s.Page(ctx, appliance.PageRequest{Queue: "q", After: after, Limit: page})
		if err != nil {
			b.Fatal(err)
		}
		if len(ms) < page {
			after = 0
		} else {
			after = ms[len(ms)-1].ID
		}
		msgs += len(ms)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs), "ns/msg")
}
