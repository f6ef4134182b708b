package appliance_test

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// First deliveries in queue order raise the queue's delivered mark instead
// of writing a claims row each, and the counts they stand for survive a
// restart: the messages delivered and not acknowledged come back with
// delivery-count 2, the ones never delivered as first deliveries, the
// acknowledged ones not at all.
func TestQueue_MarkCountsFirstDeliveriesAcrossRestart(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Journal.Sync = "full" })
	p := tb.Dial(t)
	sendN(t, p, "/queue/marked", 20, "m")
	c := tb.Dial(t)
	// Prefetch 5: m0-m4, then, as m0-m2 are acknowledged, m5-m7.
	sub, _ := c.Subscribe("/queue/marked", "client-individual", hdr("prefetch-count", "5"))
	for i := 0; i < 8; i++ {
		m := recv(t, sub)
		if string(m.Body) != "m"+strconvFormat(int64(i)) || m.Get("delivery-count") != "1" || m.Get("redelivered") != "" {
			t.Fatalf("first delivery %d: %s with delivery-count %q, redelivered %q", i, m.Body, m.Get("delivery-count"), m.Get("redelivered"))
		}
		if i < 3 {
			if _, err := c.Request(ctxT(t), stomp.NewFrame("ACK", "id", m.Get("ack"))); err != nil {
				t.Fatal(err)
			}
		}
	}
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(tb.Dir, "herald.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows, mark int64
	if err := db.QueryRow(`SELECT (SELECT count(*) FROM claims), (SELECT mark FROM queues WHERE name='marked')`).Scan(&rows, &mark); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || mark == 0 {
		t.Fatalf("after 8 first deliveries in order: %d claims rows, mark %d; want no row and a mark", rows, mark)
	}
	tb.Restart()
	c2 := tb.Dial(t)
	sub2, _ := c2.Subscribe("/queue/marked", "client-individual", hdr("prefetch-count", "100"))
	for i := 3; i < 20; i++ {
		m := recv(t, sub2)
		want, redelivered := "1", ""
		if i < 8 {
			want, redelivered = "2", "true"
		}
		if string(m.Body) != "m"+strconvFormat(int64(i)) || m.Get("delivery-count") != want || m.Get("redelivered") != redelivered {
			t.Fatalf("after the restart: %s with delivery-count %q, redelivered %q; want m%d, %q, %q",
				m.Body, m.Get("delivery-count"), m.Get("redelivered"), i, want, redelivered)
		}
	}
	expectNone(t, sub2, 200*time.Millisecond)
}
