package appliance_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testbroker"
)

// BenchmarkStreamAppend compares stream appends with queue SENDs, both with
// receipts and sync=full, in the same run: 4 producers, 64 receipts
// outstanding each, 100-byte bodies.
func BenchmarkStreamAppend(b *testing.B) {
	for _, dest := range []string{"/queue/bench", "/stream/bench"} {
		b.Run("dest="+dest, func(b *testing.B) {
			tb := mustStartBroker(b, func(c *appliance.Config) { c.Journal.Sync = "full" })
			const producers, window = 4, 64
			body := make([]byte, 100)
			conns := make([]*client.Conn, producers)
			for i := range conns {
				c, err := client.Dial(context.Background(), tb.Addr, client.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				conns[i] = c
			}
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N/producers + 1
			for _, c := range conns {
				wg.Add(1)
				go func(c *client.Conn) {
					defer wg.Done()
					pending := make(chan (<-chan client.Result), window)
					for i := 0; i < per; i++ {
						if len(pending) == window {
							if r := <-<-pending; r.Err != nil {
								b.Error(r.Err)
								return
							}
						}
						ch, err := c.SendAsync(dest, body)
						if err != nil {
							b.Error(err)
							return
						}
						pending <- ch
					}
					for len(pending) > 0 {
						<-<-pending
					}
				}(c)
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(per*producers)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// fillStream appends n messages of size bytes to stream name through the
// journal directly, in batches of 1000.
func fillStream(b *testing.B, tb *testBroker, name string, n, size int) {
	body := make([]byte, size)
	for done := 0; done < n; {
		k := min(1000, n-done)
		ops := make([]appliance.Op, k)
		for i := range ops {
			ops[i] = appliance.Op{Kind: appliance.OpAppend, Msg: &appliance.Message{Queue: name, Body: body}, Stream: &appliance.StreamOp{Name: name}}
		}
		ch := make(chan error, 1)
		tb.Store.Submit(&appliance.Batch{Ops: ops, Done: func(_ *appliance.Batch, err error) { ch <- err }})
		if err := <-ch; err != nil {
			b.Fatal(err)
		}
		done += k
	}
}

// BenchmarkStreamReplay replays a stream from offset 0 to one auto-ack
// subscriber (every message through STOMP to the client), against a raw
// SQLite scan of the same rows in the same run (raw-ratio: replay rate /
// scan rate).
func BenchmarkStreamReplay(b *testing.B) {
	tb := mustStartBroker(b, nil)
	fillStream(b, tb, "replay", b.N, 100)
	tb.Restart() // the broker learns the stream from the journal
	c := tb.Dial(b)
	b.SetBytes(100)
	b.ResetTimer()
	sub, err := c.Subscribe("/stream/replay", "auto", hdr("x-stream-offset", "first"))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		select {
		case <-sub.C():
		case <-time.After(10 * time.Second):
			b.Fatalf("replay stalled at %d of %d", i, b.N)
		}
	}
	b.StopTimer()
	replay := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(replay, "msgs/s")

	db, err := sql.Open("sqlite3", "file:"+filepath.Join(tb.Dir, "herald.db")+"?mode=ro")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	start := time.Now()
	rows, err := db.Query(`SELECT off, ts, headers, body FROM stream_messages WHERE sid=(SELECT id FROM streams WHERE name='replay') ORDER BY off`)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var off, ts int64
		var h, body []byte
		if err := rows.Scan(&off, &ts, &h, &body); err != nil {
			b.Fatal(err)
		}
		n++
	}
	rows.Close()
	if n != b.N {
		b.Fatalf("raw scan read %d rows, want %d", n, b.N)
	}
	scan := float64(n) / time.Since(start).Seconds()
	b.ReportMetric(replay/scan, "raw-ratio")

	// The journal's part alone: the pages a replay reads (StreamRead,
	// streams.page_messages at a time), without STOMP.
	start = time.Now()
	page := appliance.DefaultConfig().Streams.PageMessages
	read := 0
	for from := uint64(0); read < b.N; {
		msgs, err := tb.Store.StreamRead(context.Background(), "replay", from, page, 1<<20)
		if err != nil || len(msgs) == 0 {
			b.Fatalf("StreamRead at %d: %d messages, %v", from, len(msgs), err)
		}
		read += len(msgs)
		from = msgs[len(msgs)-1].ID + 1
	}
	b.ReportMetric(float64(read)/time.Since(start).Seconds()/scan, "journal-ratio")
}

// BenchmarkStreamRetentionStall measures append latency (one producer, one
// receipt at a time, sync=full) while retention removes a large backlog of
// another stream, against the same appends once retention is done:
// stall-ratio is p99 during / p99 after (1 = no stall).
func BenchmarkStreamRetentionStall(b *testing.B) {
	for _, batch := range []int{256, 2048} {
		b.Run(fmt.Sprintf("retention_batch=%d", batch), func(b *testing.B) { benchRetentionStall(b, batch) })
	}
}

func benchRetentionStall(b *testing.B, batch int) {
	const backlog = 200_000
	tb := testbroker.Start(b, func(c *appliance.Config) {
		c.Streams.RetentionBatch = batch
		c.Journal.Sync = "full"
		c.Streams.Policies = []appliance.StreamPolicy{{Match: "big", MaxCount: 1}}
		c.Streams.RetentionInterval = appliance.Duration{Duration: 10 * time.Millisecond}
	})
	fillStream(b, tb, "big", backlog, 100)
	lat := func(n int) []time.Duration {
		c := tb.Dial(b)
		defer c.Close()
		out := make([]time.Duration, n)
		for i := range out {
			t0 := time.Now()
			if _, err := c.SendReceipt(context.Background(), "/stream/small", []byte("x")); err != nil {
				b.Fatal(err)
			}
			out[i] = time.Since(t0)
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
		return out
	}
	n := max(b.N, 200)
	b.ResetTimer()
	tb.Restart() // retention of the backlog starts now
	during := lat(n)
	b.StopTimer()
	left := func() int {
		var c int
		db, _ := sql.Open("sqlite3", "file:"+filepath.Join(tb.Dir, "herald.db")+"?mode=ro")
		defer db.Close()
		db.QueryRow(`SELECT count(*) FROM stream_messages WHERE sid=(SELECT id FROM streams WHERE name='big')`).Scan(&c)
		return c
	}
	removedDuring := backlog - left()
	deadline := time.Now().Add(2 * time.Minute)
	for left() > 1 {
		if time.Now().After(deadline) {
			b.Fatal("retention did not finish within 2 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
	after := lat(n)
	p := func(d []time.Duration, q float64) time.Duration { return d[int(float64(len(d)-1)*q)] }
	b.ReportMetric(float64(p(during, 0.99))/float64(p(after, 0.99)), "stall-ratio-p99")
	b.ReportMetric(float64(p(during, 0.5))/float64(p(after, 0.5)), "stall-ratio-p50")
	b.ReportMetric(float64(removedDuring), "removed-while-measured")
}
