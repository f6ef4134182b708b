package appliance_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// deleteCounter counts the journal batches that carry deletes, and the
// deletes.
type deleteCounter struct {
	appliance.Journal
	mu               sync.Mutex
	batches, deletes int
}

func (j *deleteCounter) Submit(b *appliance.Batch) {
	n := 0
	for _, op := range b.Ops {
		if op.Kind == appliance.OpDelete {
			n++
		}
	}
	if n > 0 {
		j.mu.Lock()
		j.batches++
		j.deletes += n
		j.mu.Unlock()
	}
	j.Journal.Submit(b)
}

func (j *deleteCounter) counts() (batches, deletes int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.batches, j.deletes
}

// ACK frames that arrive together are journaled together: 200 ACKs in
// one write (with a stale and an unknown token among them) make a few
// journal batches, not 200, every message is deleted once, the stale ones
// are counted, the DISCONNECT receipt comes after they are durable, and
// after a restart nothing comes back.
func TestAck_FramesReadTogetherShareABatch(t *testing.T) {
	jc := &deleteCounter{}
	tb := startWrapped(t, nil, func(j appliance.Journal) appliance.Journal { jc.Journal = j; return jc })
	p := tb.Dial(t)
	const n = 200
	sendN(t, p, "/queue/grp", n, "m")

	r := dialRaw(t, tb)
	r.connect("1.2")
	r.write("SUBSCRIBE\nid:s1\ndestination:/queue/grp\nack:client-individual\nprefetch-count:" + strconv.Itoa(n) + "\n\n\x00")
	var acks []string
	for len(acks) < n {
		f := r.frame()
		if f.Command != stomp.CmdMessage {
			t.Fatalf("got %s %v, want MESSAGE", f.Command, f.Headers)
		}
		acks = append(acks, f.Get("ack"))
	}
	staleBefore := tb.B.Stats().StaleAcks
	batchesBefore, _ := jc.counts()
	var w strings.Builder
	for i, a := range acks {
		w.WriteString("ACK\nid:" + a + "\n\n\x00")
		switch i {
		case 50:
			w.WriteString("ACK\nid:" + acks[0] + "\n\n\x00") // acked already: stale
		case 120:
			w.WriteString("ACK\nid:999999999.1\n\n\x00") // no such message
		}
	}
	w.WriteString("DISCONNECT\nreceipt:bye\n\n\x00")
	r.write(w.String())
	if f := r.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != "bye" {
		t.Fatalf("got %s %v, want the DISCONNECT receipt", f.Command, f.Headers)
	}
	batches, deletes := jc.counts()
	batches -= batchesBefore
	if deletes != n {
		t.Fatalf("%d deletes journaled, want %d", deletes, n)
	}
	// One socket read holds them all on loopback; allow a few reads.
	if batches > 8 {
		t.Fatalf("%d journal batches for %d ACKs read together, want at most 8", batches, n)
	}
	if got := tb.B.Stats().StaleAcks - staleBefore; got != 2 {
		t.Fatalf("%d stale acks counted, want 2", got)
	}
	waitQueue(t, tb, "grp", "empty", func(v appliance.QueueView) bool { return v.Messages == 0 && v.InFlight == 0 })

	tb.Restart()
	c := tb.Dial(t)
	sub, err := c.Subscribe("/queue/grp", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	expectNone(t, sub, 300*time.Millisecond)
}

// Frames that cannot join a group (a NACK, an ACK with a receipt, an ACK of
// a topic message) end it where they stand: everything before them is
// handled first, in order. Here the NACKed message comes back (once), the
// ACK receipt answers after the ACKs before it are durable, and the rest is
// deleted.
func TestAck_GroupEndsAtOtherFrames(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Queues.RedeliveryMin.Duration = time.Millisecond
		c.Queues.RedeliveryMax.Duration = time.Millisecond
	})
	p := tb.Dial(t)
	const n = 40
	sendN(t, p, "/queue/mixed", n, "m")

	r := dialRaw(t, tb)
	r.connect("1.2")
	r.write("SUBSCRIBE\nid:s1\ndestination:/queue/mixed\nack:client-individual\nprefetch-count:" + strconv.Itoa(n) + "\n\n\x00")
	r.write("SUBSCRIBE\nid:t1\ndestination:/topic/mixed\nack:client\nreceipt:t\n\n\x00")
	var acks []string
	bodies := map[string]string{}
	// The topic SUBSCRIBE's receipt may come before, among or after the
	// queue's MESSAGEs: wait for both.
	gotT := false
	for len(acks) < n || !gotT {
		f := r.frame()
		if f.Command == stomp.CmdReceipt {
			gotT = gotT || f.Get("receipt-id") == "t"
			continue
		}
		acks = append(acks, f.Get("ack"))
		bodies[f.Get("ack")] = string(f.Body)
	}
	var w strings.Builder
	for i, a := range acks {
		switch i {
		case 10:
			w.WriteString("NACK\nid:" + a + "\n\n\x00")
		case 20:
			w.WriteString("ACK\nid:" + a + "\nreceipt:mid\n\n\x00")
		case 30:
			w.WriteString("ACK\nid:t999\n\n\x00") // a topic token: accepted, does nothing
			w.WriteString("ACK\nid:" + a + "\n\n\x00")
		default:
			w.WriteString("ACK\nid:" + a + "\n\n\x00")
		}
	}
	r.write(w.String())
	// The receipt of ACK 20, and the NACKed message again.
	var gotReceipt, gotAgain bool
	for !gotReceipt || !gotAgain {
		f := r.frame()
		switch {
		case f.Command == stomp.CmdReceipt && f.Get("receipt-id") == "mid":
			gotReceipt = true
		case f.Command == stomp.CmdMessage:
			if string(f.Body) != bodies[acks[10]] || f.Get("redelivered") != "true" {
				t.Fatalf("got %q redelivered %q, want %q again", f.Body, f.Get("redelivered"), bodies[acks[10]])
			}
			gotAgain = true
			r.write("ACK\nid:" + f.Get("ack") + "\nreceipt:last\n\n\x00")
		default:
			t.Fatalf("got %s %v", f.Command, f.Headers)
		}
	}
	if f := r.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != "last" {
		t.Fatalf("got %s %v, want receipt last", f.Command, f.Headers)
	}
	waitQueue(t, tb, "mixed", "empty", func(v appliance.QueueView) bool { return v.Messages == 0 && v.InFlight == 0 })
}
