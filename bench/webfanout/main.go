// Command webfanout measures topic fan-out latency to browsers' transport:
// a publisher paced at --rate messages a second, --subscribers STOMP
// subscribers over WebSocket and as many over plain STOMP TCP on Herald, the
// same number over WebSocket on RabbitMQ's Web-STOMP plugin, in one run:
// the brokers take turns (--rounds rounds of --duration each), each
// subscriber times every message from the moment it was sent (a header
// with the send time, one clock) to its arrival.
//
// It prints a table, or one JSON object with --json. bench/web-peers.sh
// starts the brokers and runs it; see docs/benchmarks.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

type target struct {
	name             string
	pubAddr, pubHost string // STOMP TCP of the publisher
	login, passcode  string
	wsURL            string // "" : TCP subscribers on subAddr
	subAddr          string
}

type result struct {
	Target   string  `json:"target"`
	Round    int     `json:"round"`
	Sent     int     `json:"sent"`
	Received int     `json:"received"` // over all subscribers, after the warm-up
	Lost     int     `json:"lost"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	P999us   float64 `json:"p999_us"`
	MaxUs    float64 `json:"max_us"`
	// Closed counts subscribers whose connection the broker ended before
	// the last message; Reason is the first one's error.
	Closed int    `json:"closed,omitempty"`
	Reason string `json:"reason,omitempty"`
}

func main() {
	var (
		heraldStomp = flag.String("herald-stomp", "127.0.0.1:61614", "Herald STOMP TCP address")
		heraldWS    = flag.String("herald-ws", "ws://127.0.0.1:15680/stomp", "Herald STOMP over WebSocket URL")
		rabbitStomp = flag.String("rabbit-stomp", "", "RabbitMQ STOMP TCP address (the publisher's); empty: no RabbitMQ")
		rabbitWS    = flag.String("rabbit-ws", "ws://127.0.0.1:15674/ws", "RabbitMQ Web-STOMP URL")
		subs        = flag.Int("subscribers", 20, "subscribers per transport")
		rate        = flag.Int("rate", 1000, "messages a second, paced")
		size        = flag.Int("size", 100, "body bytes")
		duration    = flag.Duration("duration", 10*time.Second, "measured time per round and target")
		warmup      = flag.Duration("warmup", time.Second, "time before measuring, per round")
		rounds      = flag.Int("rounds", 3, "rounds; targets alternate within each")
		asJSON      = flag.Bool("json", false, "print JSON")
		drain       = flag.Duration("drain", 90*time.Second, "how long a subscriber waits for a message before it counts the rest lost: a broker that falls behind finishes its backlog before the next target's turn")
		settle      = flag.Duration("settle", 15*time.Second, "pause between turns, for the last broker to finish its work")
	)
	flag.Parse()
	targets := []target{
		{name: "herald-ws", pubAddr: *heraldStomp, wsURL: *heraldWS},
		{name: "herald-tcp", pubAddr: *heraldStomp, subAddr: *heraldStomp},
	}
	if *rabbitStomp != "" {
		targets = append(targets, target{name: "rabbitmq-ws", pubAddr: *rabbitStomp, pubHost: "/", login: "guest", passcode: "guest", wsURL: *rabbitWS})
	}
	var all []result
	for r := 1; r <= *rounds; r++ {
		// Herald's WebSocket and TCP subscribers share one publisher
		// and one topic: the same messages, at the same moments.
		res, err := run(r, targets[:2], *subs, *rate, *size, *warmup, *duration, *drain)
		if err != nil {
			fmt.Fprintln(os.Stderr, "webfanout:", err)
			os.Exit(1)
		}
		all = append(all, res...)
		if len(targets) > 2 {
			fmt.Fprintf(os.Stderr, "webfanout: round %d herald done\n", r)
			time.Sleep(*settle)
			res, err := run(r, targets[2:], *subs, *rate, *size, *warmup, *duration, *drain)
			if err != nil {
				fmt.Fprintln(os.Stderr, "webfanout:", err)
				os.Exit(1)
			}
			all = append(all, res...)
			fmt.Fprintf(os.Stderr, "webfanout: round %d rabbitmq done\n", r)
		}
		time.Sleep(*settle)
	}
	med := medians(all)
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(map[string]any{"rounds": all, "medians": med,
			"subscribers": *subs, "rate": *rate, "size": *size, "duration_s": duration.Seconds()})
		return
	}
	fmt.Printf("%d subscribers per transport, %d msg/s paced, %d-byte bodies, %d rounds of %s; medians of the rounds\n\n", *subs, *rate, *size, *rounds, *duration)
	fmt.Println("| target | p50 ms | p99 ms | p99.9 ms | lost |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, m := range med {
		fmt.Printf("| %s | %.3f | %.3f | %.3f | %d |\n", m.Target, m.P50us/1000, m.P99us/1000, m.P999us/1000, m.Lost)
	}
}

// medians takes, per target, the median of each figure over the rounds.
func medians(all []result) []result {
	by := map[string][]result{}
	var order []string
	for _, r := range all {
		if _, ok := by[r.Target]; !ok {
			order = append(order, r.Target)
		}
		by[r.Target] = append(by[r.Target], r)
	}
	var out []result
	for _, name := range order {
		rs := by[name]
		pick := func(f func(result) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			slices.Sort(v)
			return v[(len(v)-1)/2]
		}
		lost := 0
		for _, r := range rs {
			lost += r.Lost
		}
		out = append(out, result{Target: name, Lost: lost,
			P50us:  pick(func(r result) float64 { return r.P50us }),
			P99us:  pick(func(r result) float64 { return r.P99us }),
			P999us: pick(func(r result) float64 { return r.P999us }),
			MaxUs:  pick(func(r result) float64 { return r.MaxUs })})
	}
	return out
}

func dialSub(ctx context.Context, t target) (*client.Conn, error) {
	opts := client.Options{Login: t.login, Passcode: t.passcode, Host: t.pubHost, SubscriptionBuffer: 1 << 16, DialTimeout: 10 * time.Second}
	if t.wsURL == "" {
		return client.Dial(ctx, t.subAddr, opts)
	}
	ws, _, err := websocket.Dial(ctx, t.wsURL, &websocket.DialOptions{Subprotocols: appliance.WebSubprotocols})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.wsURL, err)
	}
	ws.SetReadLimit(-1)
	host := t.pubHost
	if host == "" {
		host = "127.0.0.1"
	}
	return client.Handshake(ctx, appliance.NewWebSocketConn(ws, &net.TCPAddr{}, &net.TCPAddr{}), host, opts)
}

// run measures targets that share a publisher (the first's).
func run(round int, targets []target, n, rate, size int, warmup, duration, drain time.Duration) ([]result, error) {
	ctx := context.Background()
	dest := fmt.Sprintf("/topic/webfanout.%d.%d", round, time.Now().UnixNano())
	type sub struct {
		t      int
		c      *client.Conn
		s      *client.Subscription
		lat    []time.Duration
		seen   int
		closed error
	}
	var all []*sub
	defer func() {
		for _, s := range all {
			s.c.Close()
		}
	}()
	for ti, t := range targets {
		for range n {
			c, err := dialSub(ctx, t)
			if err != nil {
				return nil, fmt.Errorf("%s subscriber: %w", t.name, err)
			}
			s, err := c.SubscribeReceipt(ctx, dest, "auto")
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("%s subscribe: %w", t.name, err)
			}
			all = append(all, &sub{t: ti, c: c, s: s})
		}
	}
	t0 := targets[0]
	pub, err := client.Dial(ctx, t0.pubAddr, client.Options{Login: t0.login, Passcode: t0.passcode, Host: t0.pubHost, DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("%s publisher: %w", t0.name, err)
	}
	defer pub.Close()
	body := make([]byte, size)
	for i := range body {
		body[i] = 'x'
	}
	total := int((warmup + duration).Seconds() * float64(rate))
	measureFrom := int(warmup.Seconds() * float64(rate))
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.lat = make([]time.Duration, 0, total)
			idle := time.NewTimer(drain)
			defer idle.Stop()
			for {
				select {
				case m, ok := <-s.s.C():
					if !ok {
						s.closed = s.c.Err()
						if s.closed == nil {
							s.closed = fmt.Errorf("subscription ended")
						}
						return
					}
					now := time.Now().UnixNano()
					ts, _ := strconv.ParseInt(m.Get("ts"), 10, 64)
					i, _ := strconv.Atoi(m.Get("i"))
					if i >= measureFrom {
						s.lat = append(s.lat, time.Duration(now-ts))
					}
					s.seen++
					if i == total-1 {
						return
					}
					idle.Reset(drain)
				case <-idle.C:
					return // the rest was lost
				}
			}
		}()
	}
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		if err := pub.Send(dest, body, stomp.Header{Key: "ts", Value: strconv.FormatInt(time.Now().UnixNano(), 10)}, stomp.Header{Key: "i", Value: strconv.Itoa(i)}); err != nil {
			return nil, fmt.Errorf("%s publish: %w", t0.name, err)
		}
	}
	wg.Wait()
	var out []result
	for ti, t := range targets {
		var lat []time.Duration
		lost, closed, reason := 0, 0, ""
		for _, s := range all {
			if s.t == ti {
				lat = append(lat, s.lat...)
				lost += total - s.seen
				if s.closed != nil {
					closed++
					if reason == "" {
						reason = s.closed.Error()
					}
				}
			}
		}
		slices.Sort(lat)
		q := func(p float64) float64 {
			if len(lat) == 0 {
				return 0
			}
			return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1000
		}
		out = append(out, result{Target: t.name, Round: round, Sent: total, Received: len(lat), Lost: lost,
			P50us: q(0.50), P99us: q(0.99), P999us: q(0.999), MaxUs: q(1), Closed: closed, Reason: reason})
	}
	return out, nil
}
