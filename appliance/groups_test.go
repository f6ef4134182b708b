package appliance_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

func TestQueue_MessageGroups(t *testing.T) {
	tb := mustStartBroker(t, nil)
	const groups, perGroup = 10, 30
	var (
		mu       sync.Mutex
		inFlight = map[string]string{} // group -> consumer holding one
		next     = map[string]int{}    // group -> next expected sequence
		total    int
		failure  string
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for ci := 0; ci < 3; ci++ {
		c := tb.Dial(t)
		sub, err := c.SubscribeReceipt(ctxT(t), "/queue/groups", "client-individual", hdr("prefetch-count", "5"))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func(name string, c *client.Conn, sub *client.Subscription) {
			defer wg.Done()
			for {
				var m *stomp.Frame
				select {
				case m = <-sub.C():
				case <-done:
					return
				}
				g := m.Get("JMSXGroupID")
				n, _ := strconv.Atoi(strings.TrimPrefix(string(m.Body), g+":"))
				mu.Lock()
				if holder, busy := inFlight[g]; busy && failure == "" {
					failure = fmt.Sprintf("group %s: message %d delivered to %s while %s holds one", g, n, name, holder)
				}
				if n != next[g] && failure == "" {
					failure = fmt.Sprintf("group %s: got %d, want %d", g, n, next[g])
				}
				inFlight[g] = name
				mu.Unlock()
				// Not synchronisation: a consumer's random processing time.
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				mu.Lock()
				delete(inFlight, g)
				next[g] = n + 1
				total++
				all := total == groups*perGroup
				mu.Unlock()
				c.Ack(m)
				if all {
					close(done)
					return
				}
			}
		}(fmt.Sprint("consumer", ci), c, sub)
	}
	p := tb.Dial(t)
	for i := 0; i < perGroup; i++ {
		for g := 0; g < groups; g++ {
			gid := "g" + strconv.Itoa(g)
			if err := p.Send("/queue/groups", []byte(gid+":"+strconv.Itoa(i)), hdr("JMSXGroupID", gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		mu.Lock()
		t.Fatalf("only %d of %d messages consumed", total, groups*perGroup)
	}
	wg.Wait()
	if failure != "" {
		t.Fatal(failure)
	}
}

func TestQueue_GroupHeldThroughNackBackoff(t *testing.T) {
	tb := mustStartBroker(t, nil)
	p := tb.Dial(t)
	for i := 0; i < 3; i++ {
		p.SendReceipt(ctxT(t), "/queue/gn", []byte("a"+strconv.Itoa(i)), hdr("group-id", "A"))
	}
	p.SendReceipt(ctxT(t), "/queue/gn", []byte("free"))
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/gn", "client-individual", hdr("prefetch-count", "10"))
	var got []string
	for len(got) < 2 {
		m := recv(t, sub)
		got = append(got, string(m.Body))
		if string(m.Body) == "a0" {
			c.Nack(m) // back-off; a1 must not overtake it
		} else {
			c.Ack(m)
		}
	}
	eq(t, got, []string{"a0", "free"})
	for _, want := range []string{"a0", "a1", "a2"} {
		m := recv(t, sub)
		if string(m.Body) != want {
			t.Fatalf("got %q, want %q", m.Body, want)
		}
		if m.Get("group-id") != "A" {
			t.Fatalf("group header not carried back: %v", m.Headers)
		}
		c.Ack(m)
	}
}
