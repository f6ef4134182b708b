package main

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// TestCrash_StreamCursor kill -9s heraldd while a producer appends to a
// stream (receipts, dedup ids, retried after a lost receipt) and a worker
// with a durable cursor (x-stream-consumer, ack:client) reads and
// acknowledges. Then: every receipted append is in the stream exactly
// once; each time the worker resumes, its first offset is right after the
// last offset whose ACK was receipted, or right after an ACK sent whose
// receipt was lost (never before: a cursor does not go back past an
// acknowledged offset; never after: nothing unacknowledged is skipped);
// within a subscription offsets come in order without gaps.
func TestCrash_StreamCursor(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	const kills = 10
	dir := t.TempDir()
	addr := freeAddr(t)
	d := startChild(t, dir, addr)
	defer func() { d.kill() }()

	var mu sync.Mutex
	receipted := map[string]bool{}
	var violations []string
	violate := func(s string) {
		if len(violations) < 20 {
			violations = append(violations, s)
		}
	}
	ackedOK, ackTried := int64(-1), int64(-1) // last offset whose ACK was receipted / written (receipt maybe lost)
	resumes, delivered := 0, 0

	stop := make(chan struct{})
	dial := func() *client.Conn {
		for {
			select {
			case <-stop:
				return nil
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			c, err := client.Dial(ctx, addr, client.Options{})
			cancel()
			if err == nil {
				return c
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // producer
		defer wg.Done()
		var c *client.Conn
		for seq := 0; ; {
			select {
			case <-stop:
				if c != nil {
					c.Close()
				}
				return
			default:
			}
			if c == nil {
				if c = dial(); c == nil {
					return
				}
			}
			key := "k" + strconv.Itoa(seq)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err := c.SendReceipt(ctx, "/stream/crash", []byte(key), stomp.Header{Key: "dedup-id", Value: key})
			cancel()
			if err != nil {
				c.Close()
				c = nil
				continue // the same key again: dedup keeps one copy
			}
			mu.Lock()
			receipted[key] = true
			mu.Unlock()
			seq++
		}
	}()
	go func() { // worker with a durable cursor
		defer wg.Done()
		for {
			c := dial()
			if c == nil {
				return
			}
			sub, err := c.Subscribe("/stream/crash", "client",
				stomp.Header{Key: "x-stream-consumer", Value: "worker"},
				stomp.Header{Key: "x-stream-offset", Value: "first"},
				stomp.Header{Key: "prefetch-count", Value: "20"})
			if err != nil {
				c.Close()
				continue
			}
			last := int64(-2)
			func() {
				defer c.Close()
				for {
					var m *stomp.Frame
					var ok bool
					select {
					case m, ok = <-sub.C():
					case <-stop:
						return
					}
					if !ok {
						return
					}
					off, _ := strconv.ParseInt(m.Get("x-stream-offset"), 10, 64)
					mu.Lock()
					delivered++
					if last == -2 {
						resumes++
						if off < ackedOK+1 {
							violate("resumed at " + strconv.FormatInt(off, 10) + " but offset " + strconv.FormatInt(ackedOK, 10) + " was acknowledged (receipted)")
						}
						if off > ackTried+1 {
							violate("resumed at " + strconv.FormatInt(off, 10) + " skipping unacknowledged offsets after " + strconv.FormatInt(ackTried, 10))
						}
					} else if off != last+1 {
						violate("offset " + strconv.FormatInt(off, 10) + " after " + strconv.FormatInt(last, 10))
					}
					last = off
					mu.Unlock()
					if off%3 != 0 && rand.IntN(4) != 0 {
						continue // acknowledge now and then: an ACK covers what came before
					}
					mu.Lock()
					ackTried = max(ackTried, off)
					mu.Unlock()
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					_, err := c.Request(ctx, stomp.NewFrame("ACK", "id", m.Get("ack")))
					cancel()
					if err != nil {
						return
					}
					mu.Lock()
					ackedOK = max(ackedOK, off)
					mu.Unlock()
				}
			}()
		}
	}()
	progress := func() (int, int64) {
		mu.Lock()
		defer mu.Unlock()
		return len(receipted), ackedOK
	}
	for k := 0; k <= kills; k++ {
		r0, a0 := progress()
		deadline := time.Now().Add(30 * time.Second)
		for {
			r, a := progress()
			if r > r0 && a > a0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("daemon %d: no append and cursor ACK receipted within 30s", k)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if k == kills {
			break
		}
		// Not synchronisation: the kill comes at a random moment of the load.
		time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
		d.kill()
		d = startChild(t, dir, addr)
	}
	close(stop)
	wg.Wait()

	// Every receipted append is in the stream, once.
	c := dial2(t, addr)
	defer c.Close()
	sub, err := c.Subscribe("/stream/crash", "auto", stomp.Header{Key: "x-stream-offset", Value: "first"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	next := int64(0)
	for done := false; !done; {
		select {
		case m := <-sub.C():
			off, _ := strconv.ParseInt(m.Get("x-stream-offset"), 10, 64)
			if off != next {
				t.Fatalf("replay: offset %d, want %d", off, next)
			}
			next++
			seen[string(m.Body)]++
		case <-time.After(2 * time.Second):
			done = true
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for key := range receipted {
		if seen[key] != 1 {
			t.Errorf("receipted append %s is in the stream %d times", key, seen[key])
		}
	}
	for _, v := range violations {
		t.Error(v)
	}
	t.Logf("kills=%d receipted=%d stored=%d worker deliveries=%d resumes=%d last acknowledged=%d", kills, len(receipted), next, delivered, resumes, ackedOK)
	if resumes < kills/2 {
		t.Errorf("the worker resumed %d times across %d kills: the test did not exercise the cursor", resumes, kills)
	}
}
