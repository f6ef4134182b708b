package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testenv"
)

var longCrash = flag.Bool("herald.long-crash", false, "run the long kill -9 crash test (200 kills)")

// TestMain lets the test binary act as heraldd in a child process.
func TestMain(m *testing.M) {
	if os.Getenv("HERALDD_TEST_CHILD") == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

type child struct {
	cmd  *exec.Cmd
	addr string
}

func startChild(t *testing.T, dir, addr string, extra ...string) *child {
	t.Helper()
	args := append([]string{"--data-dir", dir, "--stomp-listen", addr, "--log-level", "warn"}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	// The child is this test binary: under -race its races fail the test.
	cmd.Stderr = testenv.RaceWatch(t, os.Stderr)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start heraldd: %v", err)
	}
	c := &child{cmd: cmd, addr: addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			conn.Close()
			return c
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("heraldd did not listen on %s within 30s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *child) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// crashLog records what the clients saw, under one lock, with a logical
// clock so "after" is exact.
type crashLog struct {
	mu         sync.Mutex
	clock      int
	receipted  map[string]bool // "g:seq" whose SEND was receipted
	delivered  map[string]int  // deliveries per message
	ackedAt    map[string]int  // clock when the ACK's RECEIPT arrived
	lastSeq    map[string]int  // group -> last delivered seq
	violations []string
	deliveries int
}

func (l *crashLog) violate(format string, args ...any) {
	if len(l.violations) < 20 {
		l.violations = append(l.violations, fmt.Sprintf(format, args...))
	}
}

// TestCrash_KillNine runs heraldd as a child process and kill -9s it at
// random moments while producers (receipts, dedup ids, one message group
// each) and consumers (client-individual acks with receipts) run. Then:
// every receipted message was delivered, no message was delivered after its
// ACK was receipted, no message was stored twice (dedup ids survive the
// crash), and per-producer (per-group) order held.
func TestCrash_KillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	kills := 20
	if *longCrash {
		kills = 200
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	d := startChild(t, dir, addr)
	defer func() { d.kill() }()

	l := &crashLog{receipted: map[string]bool{}, delivered: map[string]int{}, ackedAt: map[string]int{}, lastSeq: map[string]int{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const producers, consumers = 4, 3
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
	sent := make([]int, producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			g := "p" + strconv.Itoa(p)
			var c *client.Conn
			for seq := 0; ; {
				select {
				case <-stop:
					if c != nil {
						c.Close()
					}
					sent[p] = seq
					return
				default:
				}
				if c == nil {
					if c = dial(); c == nil {
						sent[p] = seq
						return
					}
				}
				key := g + ":" + strconv.Itoa(seq)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				_, err := c.SendReceipt(ctx, "/queue/crash", []byte(key),
					stomp.Header{Key: "dedup-id", Value: key}, stomp.Header{Key: "JMSXGroupID", Value: g})
				cancel()
				if err != nil {
					c.Close()
					c = nil
					continue // retry the same seq with the same dedup id
				}
				l.mu.Lock()
				l.receipted[key] = true
				l.mu.Unlock()
				seq++
			}
		}(p)
	}
	// consume handles deliveries until stop closes (idle == 0) or nothing
	// arrives for idle; false when the connection broke.
	consume := func(c *client.Conn, sub *client.Subscription, idle time.Duration) bool {
		stop := stop
		if idle > 0 {
			stop = nil
		}
		for {
			var m *stomp.Frame
			var ok bool
			select {
			case m, ok = <-sub.C():
				if !ok {
					return false
				}
			case <-stop:
				return true
			case <-time.After(max(idle, 50*time.Millisecond)):
				if idle > 0 {
					return true
				}
				continue
			}
			key := string(m.Body)
			g, s, _ := strings.Cut(key, ":")
			seq, _ := strconv.Atoi(s)
			l.mu.Lock()
			l.clock++
			l.deliveries++
			if l.delivered[key] > 0 && m.Get("delivery-count") == "1" {
				// A second copy, not a redelivery: dedup failed.
				l.violate("%s stored twice: delivered again with delivery-count 1", key)
			}
			l.delivered[key]++
			if at, acked := l.ackedAt[key]; acked {
				l.violate("%s delivered at %d after its ACK was receipted at %d", key, l.clock, at)
			}
			if last, seen := l.lastSeq[g]; seen && seq < last {
				l.violate("group %s: %d delivered after %d", g, seq, last)
			}
			l.lastSeq[g] = seq
			l.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err := c.Request(ctx, stomp.NewFrame("ACK", "id", m.Get("ack")))
			cancel()
			if err != nil {
				return false
			}
			l.mu.Lock()
			l.clock++
			l.ackedAt[key] = l.clock
			l.mu.Unlock()
		}
	}
	for i := 0; i < consumers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c := dial()
				if c == nil {
					return
				}
				sub, err := c.Subscribe("/queue/crash", "client-individual", stomp.Header{Key: "prefetch-count", Value: "4"})
				if err == nil && consume(c, sub, 0) {
					c.Close()
					return
				}
				c.Close()
			}
		}()
	}
	for k := 0; k < kills; k++ {
		time.Sleep(time.Duration(50+rand.IntN(250)) * time.Millisecond)
		d.kill()
		d = startChild(t, dir, addr)
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()

	// Drain what is left with a fresh consumer.
	c := dial2(t, addr)
	sub, err := c.Subscribe("/queue/crash", "client-individual", stomp.Header{Key: "prefetch-count", Value: "100"})
	if err != nil {
		t.Fatal(err)
	}
	consume(c, sub, 2*time.Second)
	c.Close()

	l.mu.Lock()
	defer l.mu.Unlock()
	missing := 0
	for key := range l.receipted {
		if l.delivered[key] == 0 {
			missing++
			if missing <= 10 {
				t.Errorf("receipted message %s never delivered", key)
			}
		}
	}
	redelivered := l.deliveries - len(l.delivered)
	t.Logf("kills=%d receipted=%d distinct delivered=%d deliveries=%d redeliveries=%d acked=%d missing=%d",
		kills, len(l.receipted), len(l.delivered), l.deliveries, redelivered, len(l.ackedAt), missing)
	if len(l.receipted) < kills {
		t.Errorf("only %d messages receipted across %d kills: the test did not exercise the daemon", len(l.receipted), kills)
	}
	for _, v := range l.violations {
		t.Error(v)
	}
}

func dial2(t *testing.T, addr string) *client.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		c, err := client.Dial(ctx, addr, client.Options{})
		if err == nil {
			return c
		}
		if ctx.Err() != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCrash_TransactionsAtomic kill -9s heraldd while clients commit
// transactions of five SENDs: after restart every transaction is there
// completely or not at all, and every receipted COMMIT is complete.
func TestCrash_TransactionsAtomic(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	d := startChild(t, dir, addr)
	defer func() { d.kill() }()
	const size = 5
	var mu sync.Mutex
	committed := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				c, err := client.Dial(ctx, addr, client.Options{})
				cancel()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				tx := fmt.Sprintf("w%d-%d", w, n)
				c.Begin(tx)
				for i := 0; i < size; i++ {
					c.Send("/queue/tx", []byte(tx), stomp.Header{Key: "transaction", Value: tx})
				}
				ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
				_, err = c.Request(ctx, stomp.NewFrame("COMMIT", "transaction", tx))
				cancel()
				if err == nil {
					mu.Lock()
					committed[tx] = true
					mu.Unlock()
				}
				c.Close()
			}
		}(w)
	}
	for k := 0; k < 10; k++ {
		time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond)
		d.kill()
		d = startChild(t, dir, addr)
	}
	close(stop)
	wg.Wait()
	c := dial2(t, addr)
	defer c.Close()
	sub, err := c.Subscribe("/queue/tx", "auto", stomp.Header{Key: "prefetch-count", Value: "1000"})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for done := false; !done; {
		select {
		case m := <-sub.C():
			count[string(m.Body)]++
		case <-time.After(time.Second):
			done = true
		}
	}
	mu.Lock()
	defer mu.Unlock()
	partial := 0
	for tx, n := range count {
		if n != size {
			partial++
			t.Errorf("transaction %s: %d of %d messages stored", tx, n, size)
		}
	}
	for tx := range committed {
		if count[tx] != size {
			t.Errorf("receipted transaction %s has %d messages, want %d", tx, count[tx], size)
		}
	}
	t.Logf("transactions receipted %d, stored %d, partial %d", len(committed), len(count), partial)
	if len(committed) == 0 {
		t.Error("no transaction committed: the test exercised nothing")
	}
}

func TestDataDirLock(t *testing.T) {
	dir := t.TempDir()
	d := startChild(t, dir, freeAddr(t))
	defer d.kill()
	cmd := exec.Command(os.Args[0], "--data-dir", dir, "--stomp-listen", freeAddr(t))
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "locked by another heraldd") {
		t.Fatalf("second daemon on the same data dir: err %v, output %s", err, out)
	}
}
