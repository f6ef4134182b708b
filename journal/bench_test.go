package journal

import (
	"strings"
	"testing"
)

// BenchmarkStore_OneAtATime is one durable enqueue per commit (sync=full),
// waiting for each: the journal's share of a lone SEND's latency. Compare
// with BenchmarkRawSQLite/size=100/batch=1 in package appliance.
func BenchmarkStore_OneAtATime(b *testing.B) {
	s := mustOpen(b, Config{Sync: "full"})
	body := strings.Repeat("x", 100)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := apply(b, s, enq("bench", body)); err != nil {
			b.Fatal(err)
		}
	}
}
