package appliance_test

import (
	"errors"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

func TestAdmin_PeekPurgeDelete(t *testing.T) {
	tb := mustStartBroker(t, nil)
	p := tb.Dial(t)
	sendN(t, p, "/queue/adm", 10, "m")
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/adm", "client-individual", hdr("prefetch-count", "2"))
	held := []string{string(recv(t, sub).Body), string(recv(t, sub).Body)}
	eq(t, held, []string{"m0", "m1"})

	var msgs []*appliance.Message
	err := tb.B.Peek(ctxT(t), "adm", 3, -1, func(m *appliance.Message, _ int) error { msgs = append(msgs, m); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 || string(msgs[0].Body) != "m0" || string(msgs[2].Body) != "m2" {
		t.Fatalf("peek got %d messages", len(msgs))
	}
	n, err := tb.B.Purge(ctxT(t), "adm")
	if err != nil || n != 8 {
		t.Fatalf("purge: n=%d err=%v, want 8 (the 2 in flight stay)", n, err)
	}
	v, _ := tb.B.Queue("adm")
	if v.Messages != 2 || v.InFlight != 2 {
		t.Fatalf("after purge: %+v", v)
	}
	if _, err := tb.B.DeleteQueue(ctxT(t), "adm"); !errors.Is(err, appliance.ErrQueueBusy) {
		t.Fatalf("delete with consumer: %v, want ErrQueueBusy", err)
	}
	c.Close()
	// The two held come back; nothing purged does, even after a restart.
	c2 := tb.Dial(t)
	sub2, _ := c2.Subscribe("/queue/adm", "auto")
	eq(t, bodies(t, sub2, 2), []string{"m0", "m1"})
	expectNone(t, sub2, 100*time.Millisecond)
	c2.Close()
	// c2 must be gone before more messages come: an auto-ack consumer whose
	// connection is closing would be handed them and auto-ack them onto
	// the closed socket (auto ack is lossy).
	waitQueue(t, tb, "adm", "consumers 0, messages 0", func(v appliance.QueueView) bool { return v.Consumers == 0 && v.Messages == 0 })
	sendN(t, p, "/queue/adm", 3, "n")
	waitQueue(t, tb, "adm", "messages 3", func(v appliance.QueueView) bool { return v.Messages == 3 })
	if n, err := tb.B.DeleteQueue(ctxT(t), "adm"); err != nil || n != 3 {
		t.Fatalf("delete: n=%d err=%v", n, err)
	}
	if err := tb.B.Peek(ctxT(t), "adm", 1, -1, func(*appliance.Message, int) error { return nil }); !errors.Is(err, appliance.ErrNoQueue) {
		t.Fatalf("peek deleted queue: %v", err)
	}
	tb.Restart()
	if qs := tb.B.Queues(); len(qs) != 0 {
		t.Fatalf("queues after restart: %+v", qs)
	}
}

func TestAdmin_RequeueFromDLQ(t *testing.T) {
	tb := mustStartBroker(t, nil)
	p := tb.Dial(t)
	sendN(t, p, "/queue/rq", 3, "m")
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/rq", "client-individual", hdr("prefetch-count", "3"))
	for i := 0; i < 3; i++ {
		c.Nack(recv(t, sub), hdr("requeue", "false"))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v, _ := tb.B.Queue("rq"); v.DLQDepth == 3 && v.Messages == 0 {
			break
		}
		if time.Now().After(deadline) {
			v, _ := tb.B.Queue("rq")
			t.Fatalf("DLQ not filled: %+v", v)
		}
		time.Sleep(10 * time.Millisecond)
	}
	n, err := tb.B.Requeue(ctxT(t), "rq", 2)
	if err != nil || n != 2 {
		t.Fatalf("requeue: n=%d err=%v", n, err)
	}
	for _, want := range []string{"m0", "m1"} {
		m := recv(t, sub)
		if string(m.Body) != want || m.Get("dlq-reason") != "" || m.Get("delivery-count") != "1" {
			t.Fatalf("requeued %q %v, want %s clean", m.Body, m.Headers, want)
		}
		c.Ack(m)
	}
	if v, _ := tb.B.Queue("DLQ.rq"); v.Messages != 1 {
		t.Fatalf("DLQ left with %d, want 1", v.Messages)
	}
}
