package multicast

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestNetns_LargeMessagesLossy: 200 KB messages (fragments of one MTU each) to two receivers, each
// behind 10% loss (nftables numgen random in its namespace): every message is reassembled whole,
// in order, with no gap; the fragments lost were repaired one by one.
func TestNetns_LargeMessagesLossy(t *testing.T) {
	tp := newTopo(t, "s", "r1", "r2")
	const group, port, size, n = "239.255.7.11:7411", 7411, 200_000, 60
	tp.dropShare("r1", port)
	tp.dropShare("r2", port)
	rs := []*child{
		tp.startReceiver("r1", helperConfig{Group: group, Count: n, Big: size}),
		tp.startReceiver("r2", helperConfig{Group: group, Count: n, Big: size}),
	}
	s := tp.startSender("s", SenderConfig{Group: group})
	count := map[string]uint64{}
	start := time.Now()
	for i := 0; i < n; i++ {
		topic := netTopics[i%2]
		count[topic]++
		if err := s.Publish(topic, nil, bigBody(count[topic], size)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // not synchronisation: about 20 MB/s
	}
	for _, r := range rs {
		st := r.wait(t, 30*time.Second)
		msgs, gaps := r.check(t, []map[string]uint64{count})
		t.Logf("receiver %s: %d messages, %d gaps, %d datagrams, %d NAKs, %d repairs, %d reassembled, %d kernel drops",
			r.name, msgs, gaps, st.Datagrams, st.NAKs, st.Repairs, st.Reassembled, st.KernelDrops)
		if msgs != n || gaps != 0 || st.Reassembled != n {
			t.Errorf("receiver %s: %d messages (%d reassembled), %d gaps; want %d reassembled, no gap", r.name, msgs, st.Reassembled, gaps, n)
		}
		if st.Repairs == 0 {
			t.Errorf("receiver %s: no repairs behind 10%% loss", r.name)
		}
	}
	ss := s.Stats()
	t.Logf("sender: %d messages in %d datagrams in %v, %d NAKs, %d repairs", ss.Messages, ss.Datagrams, time.Since(start).Round(time.Millisecond), ss.NAKs, ss.Repairs)
}

// TestNetns_SealedLossy: a sealed channel (seal = true) between namespaces, 200 KB messages in
// fragments and small ones, one receiver with the key behind 10% loss (NAKs HMAC-signed, repairs
// sealed under fresh nonces) and one receiver without the key: the first gets everything, the
// second nothing but a count of sealed datagrams.
func TestNetns_SealedLossy(t *testing.T) {
	tp := newTopo(t, "s", "r1", "r2")
	const group, port, size, n = "239.255.7.12:7412", 7412, 200_000, 20
	key := []byte("a sealed channel's key, 32 bytes")
	tp.dropShare("r1", port)
	r1 := tp.startReceiver("r1", helperConfig{Group: group, Count: n, Big: size, Key: key, Seal: true})
	r2 := tp.startReceiver("r2", helperConfig{Group: group, Big: size})
	s := tp.startSender("s", SenderConfig{Group: group, Key: key, KeyID: 1, Seal: true})
	count := map[string]uint64{}
	for i := 0; i < n; i++ {
		topic := netTopics[i%2]
		count[topic]++
		if err := s.Publish(topic, nil, bigBody(count[topic], size)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // not synchronisation: about 20 MB/s
	}
	st := r1.wait(t, 30*time.Second)
	msgs, gaps := r1.check(t, []map[string]uint64{count})
	t.Logf("receiver with the key: %d messages, %d gaps, %d NAKs, %d repairs, %d auth failures", msgs, gaps, st.NAKs, st.Repairs, st.AuthFailures)
	if msgs != n || gaps != 0 || st.Repairs == 0 || st.AuthFailures != 0 {
		t.Errorf("receiver with the key: %d messages, %d gaps, %d repairs, %d auth failures; want %d, 0, some, 0", msgs, gaps, st.Repairs, st.AuthFailures, n)
	}
	st2 := r2.wait(t, 0)
	t.Logf("receiver without the key: %d messages, %d sealed datagrams", st2.Messages, st2.Sealed)
	if st2.Messages != 0 || st2.Sealed < uint64(n*100) {
		t.Errorf("receiver without the key: %d messages, %d sealed; want 0 and every datagram counted", st2.Messages, st2.Sealed)
	}
}

// TestNetns_PublishQueueBytes: large messages wait in the publish queue within QueueBytes, not
// QueueLen x MaxMessage: with the rate limit holding data back, Publish of 1 MB messages blocks
// once about QueueBytes of them are queued, and returns ErrClosed when the sender closes.
func TestNetns_PublishQueueBytes(t *testing.T) {
	tp := newTopo(t, "s")
	s := tp.startSender("s", SenderConfig{Group: "239.255.7.13:7413", RateLimit: 100_000, QueueBytes: MaxMessage})
	var returned atomic.Int32
	errc := make(chan error, 1)
	go func() {
		body := make([]byte, 1_000_000)
		for i := 0; i < 100; i++ {
			if err := s.Publish("files", nil, body); err != nil {
				errc <- err
				return
			}
			returned.Add(1)
		}
		errc <- nil
	}()
	time.Sleep(time.Second) // not synchronisation: the time Publish would need to queue all 100
	n := returned.Load()
	// The core takes two (its backlog bound, 1 MiB), the queue holds MaxMessage / 1 MB = 16.
	t.Logf("%d of 100 Publish calls of 1 MB returned with QueueBytes %d and a 100 kB/s rate limit", n, MaxMessage)
	if n < 10 || n > 20 {
		t.Errorf("%d Publish calls of 1 MB returned, want 10 to 20 (QueueBytes %d bounds the queue)", n, MaxMessage)
	}
	s.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("the blocked Publish returned %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Publish still blocked 5 s after Close")
	}
}
