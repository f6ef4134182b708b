package appliance_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	_ "github.com/mattn/go-sqlite3"
)

// BenchmarkDurableSend measures queue SENDs with receipts (sync=full): each
// producer keeps `window` receipts outstanding. Compare with
// BenchmarkRawSQLite in the same run: the ceiling of a bare SQLite writer
// with the same sync setting and a comparable batch size.
func BenchmarkDurableSend(b *testing.B) {
	for _, size := range []int{100, 1024} {
		for _, producers := range []int{1, 4, 16} {
			for _, window := range []int{1, 64} {
				b.Run(fmt.Sprintf("size=%d/producers=%d/window=%d", size, producers, window), func(b *testing.B) {
					benchDurableSend(b, size, producers, window)
				})
			}
		}
	}
}

func benchDurableSend(b *testing.B, size, producers, window int) {
	tb := mustStartBroker(b, func(c *appliance.Config) { c.Journal.Sync = "full" })
	body := make([]byte, size)
	conns := make([]*client.Conn, producers)
	for i := range conns {
		c, err := client.Dial(context.Background(), tb.Addr, client.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
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
				ch, err := c.SendAsync("/queue/bench", body)
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
	st := tb.Store.Stats()
	b.ReportMetric(float64(per*producers)/b.Elapsed().Seconds(), "msgs/s")
	if st.Commits > 0 {
		b.ReportMetric(float64(st.Ops)/float64(st.Commits), "ops/commit")
	}
}

// BenchmarkRawSQLite inserts the same rows as Herald's journal (same table
// shape, WAL, synchronous=FULL) from one goroutine, batch rows per
// transaction: the raw ceiling for BenchmarkDurableSend.
func BenchmarkRawSQLite(b *testing.B) {
	for _, size := range []int{100, 1024} {
		for _, batch := range []int{1, 4, 16, 256} {
			b.Run(fmt.Sprintf("size=%d/batch=%d", size, batch), func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "raw.db")
				db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous=FULL")
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				db.SetMaxOpenConns(1)
				db.Exec(`CREATE TABLE messages(id INTEGER PRIMARY KEY AUTOINCREMENT, qid INTEGER NOT NULL, enqueued INTEGER NOT NULL,
					deliveries INTEGER NOT NULL DEFAULT 0, not_before INTEGER NOT NULL DEFAULT 0, expires INTEGER NOT NULL DEFAULT 0,
					grp TEXT NOT NULL DEFAULT '', flags INTEGER NOT NULL DEFAULT 0, size INTEGER NOT NULL, headers BLOB NOT NULL, body BLOB NOT NULL)`)
				db.Exec(`CREATE INDEX messages_qid ON messages(qid, id)`)
				ins, err := db.Prepare(`INSERT INTO messages(qid, enqueued, deliveries, not_before, expires, grp, flags, size, headers, body) VALUES(?,?,?,?,?,?,?,?,?,?)`)
				if err != nil {
					b.Fatal(err)
				}
				body, hdrs := make([]byte, size), []byte{0}
				b.SetBytes(int64(size))
				b.ResetTimer()
				for i := 0; i < b.N; {
					tx, _ := db.Begin()
					st := tx.Stmt(ins)
					for j := 0; j < batch && i < b.N; j, i = j+1, i+1 {
						if _, err := st.Exec(1, time.Now().UnixMilli(), 0, 0, 0, "", 0, size+64, hdrs, body); err != nil {
							b.Fatal(err)
						}
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkTopic measures one publisher to 1 and 10 subscribers: messages
// per second delivered to each subscriber, and SEND-to-MESSAGE latency.
func BenchmarkTopic(b *testing.B) {
	for _, subs := range []int{1, 10} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			tb := mustStartBroker(b, func(c *appliance.Config) { c.Topics.SubscriberBuffer = 1 << 20 })
			var wg sync.WaitGroup
			lat := make([][]time.Duration, subs)
			for i := 0; i < subs; i++ {
				c, err := client.Dial(context.Background(), tb.Addr, client.Options{SubscriptionBuffer: 1 << 16})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				sub, err := c.SubscribeReceipt(context.Background(), "/topic/bench", "auto")
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					for n := 0; n < b.N; n++ {
						m := <-sub.C()
						ts, _ := strconv.ParseInt(m.Get("ts"), 10, 64)
						lat[i] = append(lat[i], time.Duration(time.Now().UnixNano()-ts))
					}
				}(i)
			}
			p, err := client.Dial(context.Background(), tb.Addr, client.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			body := make([]byte, 100)
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				p.Send("/topic/bench", body, stomp.Header{Key: "ts", Value: strconv.FormatInt(time.Now().UnixNano(), 10)})
			}
			wg.Wait()
			b.StopTimer()
			var all []time.Duration
			for _, l := range lat {
				all = append(all, l...)
			}
			sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkFloodSend measures one producer sending 1 KiB queue messages
// without receipts (sync=full), for several sizes of the journal intake's
// share in flight (intakeInflight): smaller keeps other clients' round
// trips short beside a flood (TestBudget_JournalIntakeIsFair) and makes
// commits smaller. The last SEND carries a receipt, so the timer covers the
// commits.
func BenchmarkFloodSend(b *testing.B) {
	for _, inflight := range []int64{64 << 10, 256 << 10, 1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("inflight=%dKiB", inflight>>10), func(b *testing.B) {
			old := appliance.SetIntakeInflight(inflight)
			defer appliance.SetIntakeInflight(old)
			tb := mustStartBroker(b, func(c *appliance.Config) {
				c.Journal.Sync = "full"
				c.Stomp.MaxJournalPendingBytes = 64 << 20
			})
			c, err := client.Dial(context.Background(), tb.Addr, client.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			body := make([]byte, 1024)
			b.SetBytes(1024)
			b.ResetTimer()
			for range b.N {
				if err := c.Send("/queue/flood", body); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := c.SendReceipt(context.Background(), "/queue/flood", body); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
