package multicast

import (
	"errors"
	"sync"
	"testing"
)

// Sender and Receiver are safe for concurrent use: Stats, Session and
// Publish may run while Open is still setting them up (an admin API polling
// channel statistics, a publisher that starts early), and Close may come
// at any time. Under -race this fails if Open publishes its state without
// synchronisation; in any build Publish must say ErrNotOpen or succeed.
func TestShells_ConcurrentWithOpen(t *testing.T) {
	for i := 0; i < 20; i++ {
		s, err := NewSender(SenderConfig{Group: "239.255.42.2:7498", Interface: "lo", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewReceiver(ReceiverConfig{Group: "239.255.42.2:7498", Interface: "lo", RcvBuf: 1 << 20, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var bad []error
		wg.Add(3)
		go func() {
			defer wg.Done()
			<-start
			for j := 0; j < 200; j++ {
				s.Stats()
				s.Session()
				r.Stats()
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			for j := 0; j < 200; j++ {
				if err := s.Publish("a", nil, []byte("x")); err != nil && !errors.Is(err, ErrNotOpen) {
					mu.Lock()
					bad = append(bad, err)
					mu.Unlock()
				}
			}
		}()
		var sErr, rErr error
		go func() {
			defer wg.Done()
			<-start
			sErr = s.Open(t.Context())
			rErr = r.Open(t.Context())
		}()
		close(start)
		wg.Wait()
		if sErr != nil || rErr != nil {
			t.Skipf("no multicast on lo here: %v %v", sErr, rErr)
		}
		if len(bad) > 0 {
			t.Fatalf("Publish during Open: %v", bad)
		}
		if err := s.Publish("a", nil, []byte("x")); err != nil {
			t.Fatalf("Publish after Open: %v", err)
		}
		if st := s.Stats(); st.Session == 0 {
			t.Fatal("no session after Open")
		}
		if err := errors.Join(s.Close(), r.Close()); err != nil {
			t.Fatal(err)
		}
	}
}

// Close racing Open leaves nothing running: either Open fails with
// ErrClosed or Close stops what Open started. Events ends closed.
func TestShells_CloseDuringOpen(t *testing.T) {
	for i := 0; i < 20; i++ {
		s, err := NewSender(SenderConfig{Group: "239.255.42.3:7497", Interface: "lo", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewReceiver(ReceiverConfig{Group: "239.255.42.3:7497", Interface: "lo", RcvBuf: 1 << 20, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var sErr, rErr error
		wg.Add(2)
		go func() { defer wg.Done(); sErr = s.Open(t.Context()) }()
		go func() { defer wg.Done(); rErr = r.Open(t.Context()) }()
		s.Close()
		r.Close()
		wg.Wait()
		for _, err := range []error{sErr, rErr} {
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Skipf("no multicast on lo here: %v", err)
			}
		}
		if err := s.Publish("a", nil, []byte("x")); !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotOpen) {
			t.Fatalf("Publish after Close: got %v, want ErrClosed or ErrNotOpen", err)
		}
		for range r.Events() {
		}
	}
}
