package appliance_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// The admin views and operations run on their own goroutines while
// sessions subscribe, publish, unsubscribe and end. Under -race this checks
// that what they read is synchronised; in any build it checks that the
// views stay consistent and that closing connections ends them.
func TestAdmin_ViewsAndClosesDuringTraffic(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Topics.LastValue = true
		c.Topics.SubscriberBuffer = 64
		c.Topics.SlowSubscriber = "drop-oldest"
	})
	const workers, rounds = 4, 30
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stop := make(chan struct{})
	var admin sync.WaitGroup
	var polls, closed atomic.Int64
	var viewErr atomic.Value
	admin.Add(1)
	go func() {
		defer admin.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, v := range tb.B.Connections() {
				// Every client here sends a login: CONNECT shows whole.
				if v.Subscriptions < 0 || (v.Version == "") != (v.Login == "") {
					viewErr.CompareAndSwap(nil, fmt.Sprintf("inconsistent connection view %+v", v))
				}
			}
			for _, v := range tb.B.Topics() {
				if v.Subscribers < 0 {
					viewErr.CompareAndSwap(nil, fmt.Sprintf("topic view %+v", v))
				}
			}
			tb.B.Queues()
			tb.B.Stats()
			polls.Add(1)
		}
	}()
	// A victim connection per worker round, closed by the operator while
	// it subscribes and receives.
	admin.Add(1)
	victims := make(chan struct{}, workers*rounds)
	go func() {
		defer admin.Done()
		for {
			select {
			case <-stop:
				return
			case <-victims:
				for _, v := range tb.B.Connections() {
					if v.Login == "victim" && tb.B.CloseConnection(v.ID, "stress") {
						closed.Add(1)
					}
				}
			}
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Dial(ctx, tb.Addr, client.Options{DialTimeout: 5 * time.Second, Login: "worker"})
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			topic := "/topic/stress." + strconv.Itoa(w)
			queue := "/queue/stress." + strconv.Itoa(w)
			for r := 0; r < rounds; r++ {
				// The operator closes every victim it sees, another
				// worker's included: this one's CONNECT may get its ERROR.
				v, err := client.Dial(ctx, tb.Addr, client.Options{DialTimeout: 5 * time.Second, Login: "victim"})
				if err != nil && !strings.Contains(err.Error(), "stress") {
					errs <- fmt.Errorf("victim: %w", err)
					return
				}
				if err == nil {
					v.Subscribe("/topic/stress.*", "auto")
					v.Subscribe(queue, "client-individual")
				}
				victims <- struct{}{}
				ts, err := c.SubscribeReceipt(ctx, topic, "auto")
				if err != nil {
					errs <- fmt.Errorf("subscribe: %w", err)
					return
				}
				if _, err := c.SendReceipt(ctx, topic, []byte("t"+strconv.Itoa(r))); err != nil {
					errs <- fmt.Errorf("send: %w", err)
					return
				}
				// The last value (of the previous round) may come first.
				for live := false; !live; {
					select {
					case m := <-ts.C():
						live = string(m.Body) == "t"+strconv.Itoa(r)
					case <-ctx.Done():
						errs <- fmt.Errorf("round %d: topic message not received", r)
						return
					}
				}
				if err := ts.Unsubscribe(ctx); err != nil {
					errs <- fmt.Errorf("unsubscribe: %w", err)
					return
				}
				if _, err := c.SendReceipt(ctx, queue, []byte("q")); err != nil {
					errs <- fmt.Errorf("send queue: %w", err)
					return
				}
				if v != nil {
					v.Close()
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	admin.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if e := viewErr.Load(); e != nil {
		t.Error(e)
	}
	if polls.Load() == 0 {
		t.Error("admin views never polled")
	}
	// Every victim ended (closed by the operator or by itself): none is
	// listed once the broker has seen them go.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0
		for _, v := range tb.B.Connections() {
			if v.Login == "victim" {
				n++
			}
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d victim connections still listed", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d admin polls, %d connections closed by the operator", polls.Load(), closed.Load())
}
