package main

// herald bench drain: an acked queue drain, over STOMP or NATS JetStream.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

func benchDrainCommand(common []cli.Flag) *cli.Command {
	return &cli.Command{
		Name:  "drain",
		Usage: "fill a queue with M messages, then C consumers take and ACK them all",
		Description: `First stores --messages messages of --size bytes in a queue of its own
(/queue/bench-drain.RUNID; 4 producers keeping 64 SENDs with receipts
outstanding, persistent:true), then starts --consumers connections, each
subscribed with ack --ack (default client-individual) and --prefetch
messages in flight, that ACK every MESSAGE (the ACKs of the MESSAGEs at hand
written together, as NATS clients write their acks). Reports the drain rate: messages
per second from the first consumer's SUBSCRIBE to the last consumer's
UNSUBSCRIBE and DISCONNECT receipts (which come after its ACKs are
processed), and the
redeliveries seen. --duration bounds the drain (an error past it); --warmup
is not used.
With --jetstream, speaks NATS (default server 127.0.0.1:4222) to a JetStream
server: a file-backed work-queue stream, one durable pull consumer with
explicit acks shared by --consumers connections, each keeping --prefetch
messages requested (max_ack_pending = consumers x prefetch); the drain ends
when the consumer reports no message pending or unacknowledged.`,
		Flags: append([]cli.Flag{
			&cli.IntFlag{Name: "messages", Value: 100000, Usage: "messages to store, then drain"},
			&cli.IntFlag{Name: "consumers", Value: 4, Usage: "consumer connections"},
			&cli.IntFlag{Name: "prefetch", Value: 1000, Usage: "unacknowledged messages per consumer (STOMP prefetch-count)"},
			&cli.StringFlag{Name: "ack", Value: "client-individual", Usage: "STOMP ack mode: client-individual or client (one cumulative ACK per --prefetch/2 messages)"},
			&cli.BoolFlag{Name: "jetstream", Usage: "speak NATS JetStream (no STOMP) to --server"},
			&cli.IntFlag{Name: "server-pid", Usage: "`PID` of the server process (same host): report its CPU time (user+system, /proc/PID/stat) per message of the fill and of the drain"},
			&cli.StringFlag{Name: "socket", EnvVars: []string{"HERALD_SOCKET"}, Usage: "admin socket `PATH` used to delete the run's queue (default as for the admin commands)"},
		}, common...),
		Action: runBenchDrain,
	}
}

type drainResult struct {
	Mode         string  `json:"mode"`      // "drain"
	Transport    string  `json:"transport"` // "stomp" or "jetstream"
	Server       string  `json:"server"`
	Dest         string  `json:"dest"`
	Consumers    int     `json:"consumers"`
	Prefetch     int     `json:"prefetch"`
	Ack          string  `json:"ack"`
	Size         int     `json:"size"`
	Messages     uint64  `json:"messages"` // stored, then drained
	FillS        float64 `json:"fill_s"`
	FillPerS     float64 `json:"fill_msgs_per_s"`
	DrainS       float64 `json:"drain_s"`
	MsgsPerS     float64 `json:"msgs_per_s"` // drain rate
	MBPerS       float64 `json:"mb_per_s"`
	Received     uint64  `json:"received"`
	Redelivered  uint64  `json:"redelivered"`
	Errors       uint64  `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	CleanupNote  string  `json:"cleanup"`
	DurationS    float64 `json:"duration_s"` // the drain's bound
	MissingAtEnd uint64  `json:"missing"`    // stored but not received
	// With --server-pid: the server's CPU time (user+system) per message
	// during the fill and during the drain, in microseconds.
	FillCPUus  float64 `json:"server_fill_cpu_us_per_msg,omitempty"`
	DrainCPUus float64 `json:"server_drain_cpu_us_per_msg,omitempty"`
	// This client's own CPU time (user+system, all its consumers) per
	// message of the drain, in microseconds: the two transports' clients
	// share the machine with the server.
	ClientDrainCPUus float64 `json:"client_drain_cpu_us_per_msg,omitempty"`
}

// serverCPU reads a process's CPU time (utime+stime) from /proc; zero
// when pid is 0 or unreadable.
type serverCPU struct {
	pid int
}

func (c serverCPU) now() time.Duration {
	if c.pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(c.pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count fields after the last ')'. utime and stime are fields 14 and
	// 15, in clock ticks (USER_HZ, 100 on Linux).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * (time.Second / 100)
}

// selfCPU is this process's CPU time (user+system) so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perMsg is d per message of n, in microseconds (2 decimals).
func cpuPerMsg(d time.Duration, n uint64) float64 {
	if n == 0 || d <= 0 {
		return 0
	}
	return math.Round(float64(d.Microseconds())/float64(n)*100) / 100
}

func runBenchDrain(cCtx *cli.Context) error {
	benchGC()
	bf, err := readBenchFlags(cCtx)
	if err != nil {
		return err
	}
	n, consumers, prefetch := cCtx.Int("messages"), cCtx.Int("consumers"), cCtx.Int("prefetch")
	ack := cCtx.String("ack")
	switch {
	case n < 1 || consumers < 1 || prefetch < 1:
		return usageErrorf("--messages, --consumers and --prefetch must be at least 1")
	case ack != "client-individual" && ack != "client":
		return usageErrorf("--ack %q: want client-individual or client", ack)
	}
	res := drainResult{Mode: "drain", Transport: "stomp", Server: bf.server, Consumers: consumers,
		Prefetch: prefetch, Ack: ack, Size: bf.size, DurationS: bf.duration.Seconds()}
	if cCtx.Bool("jetstream") {
		res.Transport, res.Ack = "jetstream", "explicit"
		if bf.server == DefaultServer && os.Getenv("HERALD_SERVER") == "" {
			res.Server = DefaultNATSServer
		}
		err = jsDrain(cCtx, &res, n)
	} else {
		err = stompDrain(cCtx, &res, n)
	}
	if err != nil {
		res.Errors++
		if res.FirstError == "" {
			res.FirstError = unwrapClient(err).Error()
		}
	}
	if res.DrainS > 0 {
		res.MsgsPerS = benchRound1(float64(res.Received) / res.DrainS)
		res.MBPerS = math.Round(res.MsgsPerS*float64(bf.size)/1e6*100) / 100
	}
	if res.Received < res.Messages {
		res.MissingAtEnd = res.Messages - res.Received
	}
	out := cCtx.App.Writer
	if bf.jsonOut {
		if err := writeJSON(out, res); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "server\t%s (%s)\n", res.Server, res.Transport)
		fmt.Fprintf(tw, "dest\t%s, %d consumers, ack %s, prefetch %d, %d B messages\n", res.Dest, consumers, res.Ack, prefetch, bf.size)
		fmt.Fprintf(tw, "fill\t%d messages in %.2f s, %.0f msg/s\n", res.Messages, res.FillS, res.FillPerS)
		fmt.Fprintf(tw, "drain\t%d messages in %.2f s, %.0f msg/s, %.2f MB/s\n", res.Received, res.DrainS, res.MsgsPerS, res.MBPerS)
		fmt.Fprintf(tw, "redelivered\t%d\n", res.Redelivered)
		fmt.Fprintf(tw, "missing\t%d\n", res.MissingAtEnd)
		fmt.Fprintf(tw, "errors\t%d\n", res.Errors)
		if res.FirstError != "" {
			fmt.Fprintf(tw, "first error\t%s\n", res.FirstError)
		}
		if res.DrainCPUus > 0 || res.FillCPUus > 0 {
			fmt.Fprintf(tw, "server CPU\t%.1f us/msg fill, %.1f us/msg drain\n", res.FillCPUus, res.DrainCPUus)
		}
		if res.ClientDrainCPUus > 0 {
			fmt.Fprintf(tw, "client CPU\t%.1f us/msg drain\n", res.ClientDrainCPUus)
		}
		if res.CleanupNote != "" {
			fmt.Fprintf(tw, "cleanup\t%s\n", res.CleanupNote)
		}
		tw.Flush()
	}
	if res.Errors > 0 || res.MissingAtEnd > 0 {
		return &exitError{code: exitOther, err: fmt.Errorf("drain incomplete: %d of %d received, %d error(s)", res.Received, res.Messages, res.Errors)}
	}
	return nil
}

// stompDrain fills a queue of its own and drains it.
func stompDrain(cCtx *cli.Context, res *drainResult, n int) error {
	ctx := cCtx.Context
	res.Dest = "/queue/bench-drain." + benchRunID()
	payload := benchBody(res.Size)
	cpu := serverCPU{cCtx.Int("server-pid")}
	// Fill: 4 producers x 64 receipts outstanding.
	start := time.Now()
	cpu0 := cpu.now()
	var next atomic.Int64
	var stored atomic.Uint64
	stopFill := benchProgress(cCtx, cCtx.Bool("json"), func() string {
		return fmt.Sprintf("filling %s: %d of %d messages stored", res.Dest, stored.Load(), n)
	})
	defer stopFill()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for range 4 {
		c, err := benchDial(ctx, cCtx)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			var q []<-chan client.Result
			for {
				for len(q) < 64 && next.Add(1) <= int64(n) {
					ch, err := c.SendAsync(res.Dest, payload, stomp.Header{Key: "persistent", Value: "true"})
					if err != nil {
						errc <- err
						return
					}
					q = append(q, ch)
				}
				if len(q) == 0 {
					return
				}
				if r := <-q[0]; r.Err != nil {
					errc <- r.Err
					return
				}
				stored.Add(1)
				q = q[1:]
			}
		}()
	}
	wg.Wait()
	stopFill()
	res.Messages = stored.Load()
	res.FillS = time.Since(start).Seconds()
	res.FillPerS = benchRound1(float64(res.Messages) / res.FillS)
	res.FillCPUus = cpuPerMsg(cpu.now()-cpu0, res.Messages)
	select {
	case err := <-errc:
		return fmt.Errorf("fill: %w", err)
	default:
	}

	// Drain.
	conns := make([]*client.Conn, res.Consumers)
	for i := range conns {
		c, err := benchDial(ctx, cCtx)
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return err
		}
		conns[i] = c
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var received, redelivered atomic.Uint64
	done := make(chan struct{})
	var once sync.Once
	bound := time.NewTimer(time.Duration(res.DurationS * float64(time.Second)))
	defer bound.Stop()
	var firstErr error
	var emu sync.Mutex
	fail := func(err error) {
		emu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		emu.Unlock()
		once.Do(func() { close(done) })
	}
	start = time.Now()
	cpu0 = cpu.now()
	self0 := selfCPU()
	stopDrain := benchProgress(cCtx, cCtx.Bool("json"), func() string {
		return fmt.Sprintf("draining %s: %d of %d messages received", res.Dest, received.Load(), res.Messages)
	})
	defer stopDrain()
	for _, c := range conns {
		// Each MESSAGE is handled on the connection's reading goroutine
		// (SubscribeFunc), as the JetStream consumer below handles its
		// messages on its own; the ACKs of the MESSAGEs at hand are
		// buffered and written together once no other frame is buffered,
		// as that consumer flushes its acks.
		every := max(res.Prefetch/2, 1)
		var mu sync.Mutex // unacked, last: the reading goroutine's, and the end's below
		var unacked int
		var last *stomp.Frame
		sub, err := c.SubscribeFunc(res.Dest, res.Ack, func(f *stomp.Frame, more bool) {
			if f.Get("redelivered") == "true" {
				redelivered.Add(1)
			}
			mu.Lock()
			last = f
			unacked++
			var err error
			if res.Ack == "client-individual" || unacked >= every {
				err = c.AckBuffered(f)
				unacked = 0
			}
			if err == nil && !more {
				err = c.Flush()
			}
			mu.Unlock()
			if err != nil {
				fail(err)
				return
			}
			if received.Add(1) >= res.Messages {
				once.Do(func() { close(done) })
			}
		}, stomp.Header{Key: "prefetch-count", Value: strconv.Itoa(res.Prefetch)})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-sub.C(): // closed: nothing is ever sent on it
				fail(fmt.Errorf("subscription ended: %v", c.Err()))
				return
			case <-done:
			}
			mu.Lock()
			if unacked > 0 && last != nil {
				if err := c.Ack(last); err != nil {
					fail(err)
				}
			}
			mu.Unlock()
			// The receipts come after the ACKs before them are
			// processed (durable). UNSUBSCRIBE's first: once it is
			// answered the consumer is gone and the queue can be
			// deleted (a DISCONNECT's receipt comes before that).
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := sub.Unsubscribe(dctx); err != nil {
				fail(fmt.Errorf("unsubscribe: %w", err))
				return
			}
			if err := c.Disconnect(dctx); err != nil {
				fail(fmt.Errorf("disconnect: %w", err))
			}
		}()
	}
	go func() {
		select {
		case <-bound.C:
			fail(fmt.Errorf("drain not done within --duration %.0fs", res.DurationS))
		case <-done:
		}
	}()
	<-done
	wg.Wait()
	stopDrain()
	res.DrainS = time.Since(start).Seconds()
	res.Received, res.Redelivered = received.Load(), redelivered.Load()
	res.DrainCPUus = cpuPerMsg(cpu.now()-cpu0, res.Received)
	res.ClientDrainCPUus = cpuPerMsg(selfCPU()-self0, res.Received)
	// The queue is empty: delete it when the admin socket is this daemon's.
	name := strings.TrimPrefix(res.Dest, "/queue/")
	cl := benchClean{Drained: res.Received}
	benchDeleteEmpty(ctx, cCtx, name, &cl)
	res.CleanupNote = cl.Note
	emu.Lock()
	defer emu.Unlock()
	return firstErr
}

// ---- JetStream -------------------------------------------------------------
//
// A minimal JetStream client over NATS's text protocol: the JetStream API is
// request/reply on $JS.API.> subjects with JSON bodies; a pull consumer is
// asked for messages with $JS.API.CONSUMER.MSG.NEXT; a message's reply
// subject ($JS.ACK...) takes its ack (an empty payload is +ACK). Status
// messages (408 request timeout, 404 no messages) come as HMSG.

type jsConn struct {
	*natsConn
	inbox string
	sid   int
}

func jsDial(ctx context.Context, addr string, timeout time.Duration, inbox string) (*jsConn, error) {
	c, err := natsDialOpts(ctx, addr, timeout, true)
	if err != nil {
		return nil, err
	}
	j := &jsConn{natsConn: c, inbox: inbox}
	if err := c.write("SUB " + inbox + ".> 1\r\n"); err != nil {
		c.nc.Close()
		return nil, err
	}
	return j, nil
}

// natsMsg is one MSG or HMSG.
type natsMsg struct {
	subject, reply string
	status         int // from an HMSG's "NATS/1.0 408" line; 0 for none
	data           []byte
}

// next reads the next message, answering PINGs.
func (c *natsConn) next() (natsMsg, error) {
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return natsMsg{}, err
		}
		l := strings.TrimRight(string(line), "\r\n")
		switch {
		case strings.HasPrefix(l, "MSG "), strings.HasPrefix(l, "HMSG "):
			f := strings.Fields(l)
			hdr := f[0] == "HMSG"
			// MSG <subject> <sid> [reply] <#bytes>; HMSG ... <#hdr> <#total>
			need := 4
			if hdr {
				need = 5
			}
			if len(f) < need {
				return natsMsg{}, fmt.Errorf("nats: bad line %q", l)
			}
			m := natsMsg{subject: f[1]}
			total, err := strconv.Atoi(f[len(f)-1])
			if err != nil || total < 0 {
				return natsMsg{}, fmt.Errorf("nats: bad line %q", l)
			}
			hlen := 0
			if hdr {
				if hlen, err = strconv.Atoi(f[len(f)-2]); err != nil || hlen > total {
					return natsMsg{}, fmt.Errorf("nats: bad line %q", l)
				}
				if len(f) == 6 {
					m.reply = f[3]
				}
			} else if len(f) == 5 {
				m.reply = f[3]
			}
			buf := make([]byte, total+2)
			if _, err := io.ReadFull(c.br, buf); err != nil {
				return natsMsg{}, err
			}
			if hlen > 0 {
				h := buf[:hlen]
				if i := bytes.IndexByte(h, '\r'); i > 0 {
					if fs := strings.Fields(string(h[:i])); len(fs) >= 2 {
						m.status, _ = strconv.Atoi(fs[1])
					}
				}
			}
			m.data = buf[hlen:total]
			return m, nil
		case l == "PING":
			c.wmu.Lock()
			c.bw.WriteString("PONG\r\n")
			err := c.bw.Flush()
			c.wmu.Unlock()
			if err != nil {
				return natsMsg{}, err
			}
		case strings.HasPrefix(l, "-ERR"):
			return natsMsg{}, fmt.Errorf("nats server error: %s", l)
		}
	}
}

// request publishes body to subject and returns the JSON reply (the
// reader is this goroutine: only before consuming starts).
func (j *jsConn) request(subject string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	if body == nil {
		b = nil
	}
	j.sid++
	reply := j.inbox + ".r" + strconv.Itoa(j.sid)
	j.wmu.Lock()
	fmt.Fprintf(j.bw, "PUB %s %s %d\r\n", subject, reply, len(b))
	j.bw.Write(b)
	j.bw.WriteString("\r\n")
	err = j.bw.Flush()
	j.wmu.Unlock()
	if err != nil {
		return err
	}
	j.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer j.nc.SetReadDeadline(time.Time{})
	for {
		m, err := j.next()
		if err != nil {
			return fmt.Errorf("jetstream %s: %w", subject, err)
		}
		if m.subject != reply {
			continue
		}
		if m.status == 503 {
			return fmt.Errorf("jetstream %s: no responders: start nats-server with -js (JetStream enabled)", subject)
		}
		var e struct {
			Error *struct {
				Code        int    `json:"code"`
				Description string `json:"description"`
			} `json:"error"`
		}
		if json.Unmarshal(m.data, &e) == nil && e.Error != nil {
			return fmt.Errorf("jetstream %s: %s (%d)", subject, e.Error.Description, e.Error.Code)
		}
		if out != nil {
			return json.Unmarshal(m.data, out)
		}
		return nil
	}
}

func jsDrain(cCtx *cli.Context, res *drainResult, n int) error {
	ctx := cCtx.Context
	timeout := cCtx.Duration("connect-timeout")
	run := benchRunID()
	stream, durable, subject := "BENCHDRAIN"+strings.ToUpper(run), "drain", "bench-drain."+run
	res.Dest = subject
	ctl, err := jsDial(ctx, res.Server, timeout, "_INBOX."+run+".ctl")
	if err != nil {
		return err
	}
	defer ctl.nc.Close()
	if err := ctl.request("$JS.API.STREAM.CREATE."+stream, map[string]any{
		"name": stream, "subjects": []string{subject}, "storage": "file", "retention": "workqueue",
	}, nil); err != nil {
		return err
	}
	defer func() {
		if err := ctl.request("$JS.API.STREAM.DELETE."+stream, nil, nil); err != nil {
			res.CleanupNote = fmt.Sprintf("stream %s left: %v; delete it with: nats stream rm %s", stream, err, stream)
		} else {
			res.CleanupNote = "deleted the stream " + stream
		}
	}()
	if err := ctl.request("$JS.API.CONSUMER.DURABLE.CREATE."+stream+"."+durable, map[string]any{
		"stream_name": stream,
		"config": map[string]any{"durable_name": durable, "ack_policy": "explicit", "deliver_policy": "all",
			"max_ack_pending": res.Consumers * res.Prefetch, "max_waiting": 512},
	}, nil); err != nil {
		return err
	}

	// Fill: 4 connections, each keeping 64 publishes awaiting their ack.
	payload := benchBody(res.Size)
	cpu := serverCPU{cCtx.Int("server-pid")}
	start := time.Now()
	cpu0 := cpu.now()
	var next atomic.Int64
	var stored atomic.Uint64
	stopFill := benchProgress(cCtx, cCtx.Bool("json"), func() string {
		return fmt.Sprintf("filling %s: %d of %d messages stored", res.Dest, stored.Load(), n)
	})
	defer stopFill()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for p := range 4 {
		c, err := jsDial(ctx, res.Server, timeout, "_INBOX."+run+".p"+strconv.Itoa(p))
		if err != nil {
			return err
		}
		wg.Add(2)
		sem := make(chan struct{}, 64)
		finished, dead := make(chan struct{}), make(chan struct{})
		go func() { // acks
			defer wg.Done()
			defer close(dead)
			for {
				m, err := c.next()
				if err != nil {
					select {
					case <-finished:
					default:
						errc <- err
					}
					return
				}
				if bytes.Contains(m.data, []byte(`"error"`)) || m.status >= 400 {
					errc <- fmt.Errorf("jetstream publish: %s (status %d)", m.data, m.status)
				} else {
					stored.Add(1)
				}
				<-sem
			}
		}()
		go func() {
			defer wg.Done()
			head := " " + strconv.Itoa(len(payload)) + "\r\n"
			acquire := func() bool {
				select {
				case sem <- struct{}{}:
					return true
				case <-dead:
					return false
				}
			}
			for next.Add(1) <= int64(n) {
				if !acquire() {
					break
				}
				c.wmu.Lock()
				c.bw.WriteString("PUB " + subject + " " + c.inbox + ".a" + head)
				c.bw.Write(payload)
				c.bw.WriteString("\r\n")
				var err error
				if len(sem) == cap(sem) || next.Load() >= int64(n) {
					err = c.bw.Flush()
				}
				c.wmu.Unlock()
				if err != nil {
					errc <- err
					break
				}
			}
			c.wmu.Lock()
			c.bw.Flush()
			c.wmu.Unlock()
			for range cap(sem) { // all acked
				if !acquire() {
					break
				}
			}
			close(finished)
			c.nc.Close()
		}()
	}
	wg.Wait()
	stopFill()
	res.Messages = stored.Load()
	res.FillS = time.Since(start).Seconds()
	res.FillPerS = benchRound1(float64(res.Messages) / res.FillS)
	res.FillCPUus = cpuPerMsg(cpu.now()-cpu0, res.Messages)
	select {
	case err := <-errc:
		return fmt.Errorf("fill: %w", err)
	default:
	}

	// Drain: every connection keeps prefetch messages requested: a pull of
	// prefetch first, then one of prefetch/2 for each prefetch/2 received.
	conns := make([]*jsConn, res.Consumers)
	for i := range conns {
		c, err := jsDial(ctx, res.Server, timeout, "_INBOX."+run+".c"+strconv.Itoa(i))
		if err != nil {
			return err
		}
		conns[i] = c
		defer c.nc.Close()
	}
	var received, redelivered atomic.Uint64
	done := make(chan struct{})
	var once sync.Once
	var firstErr error
	var emu sync.Mutex
	fail := func(err error) {
		emu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		emu.Unlock()
		once.Do(func() { close(done) })
	}
	next2 := "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + durable
	pull := func(c *jsConn, batch int) {
		body := `{"batch":` + strconv.Itoa(batch) + `,"expires":5000000000}`
		c.bw.WriteString("PUB " + next2 + " " + c.inbox + ".m " + strconv.Itoa(len(body)) + "\r\n" + body + "\r\n")
	}
	start = time.Now()
	cpu0 = cpu.now()
	self0 := selfCPU()
	stopDrain := benchProgress(cCtx, cCtx.Bool("json"), func() string {
		return fmt.Sprintf("draining %s: %d of %d messages received", res.Dest, received.Load(), res.Messages)
	})
	defer stopDrain()
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			half := max(res.Prefetch/2, 1)
			c.wmu.Lock()
			pull(c, res.Prefetch)
			err := c.bw.Flush()
			c.wmu.Unlock()
			if err != nil {
				fail(err)
				return
			}
			var got int
			for {
				m, err := c.next()
				if err != nil {
					select {
					case <-done:
					default:
						fail(err)
					}
					return
				}
				c.wmu.Lock()
				switch {
				case m.status == 408 || m.status == 404 || m.status == 409:
					pull(c, res.Prefetch) // a request expired: ask again
				case m.status != 0:
					c.wmu.Unlock()
					fail(fmt.Errorf("jetstream pull: status %d", m.status))
					return
				case strings.HasPrefix(m.reply, "$JS.ACK."):
					// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
					if f := strings.Split(m.reply, "."); len(f) >= 5 && f[4] != "1" {
						redelivered.Add(1)
					}
					c.bw.WriteString("PUB " + m.reply + " 0\r\n\r\n")
					if got++; got%half == 0 {
						pull(c, half)
					}
					if received.Add(1) >= res.Messages {
						once.Do(func() { close(done) })
					}
				}
				// Flush when nothing more is buffered: acks go out in
				// batches, as NATS clients do.
				if c.br.Buffered() == 0 {
					err = c.bw.Flush()
				}
				c.wmu.Unlock()
				if err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	// The acks are asynchronous: the drain ends when the consumer has
	// nothing pending and nothing unacknowledged.
	go func() {
		<-done
		for _, c := range conns {
			c.wmu.Lock()
			c.bw.Flush()
			c.wmu.Unlock()
		}
	}()
	bound := time.After(time.Duration(res.DurationS * float64(time.Second)))
	select {
	case <-done:
	case <-bound:
		fail(fmt.Errorf("drain not done within --duration %.0fs", res.DurationS))
	}
	failed := func() error {
		emu.Lock()
		defer emu.Unlock()
		return firstErr
	}
	for failed() == nil {
		var info struct {
			NumAckPending int `json:"num_ack_pending"`
			NumPending    int `json:"num_pending"`
		}
		if err := ctl.request("$JS.API.CONSUMER.INFO."+stream+"."+durable, nil, &info); err != nil {
			fail(err)
			break
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		select {
		case <-bound:
			fail(fmt.Errorf("drain not done within --duration %.0fs (%d unacknowledged)", res.DurationS, info.NumAckPending))
		case <-time.After(time.Millisecond):
		}
	}
	stopDrain()
	res.DrainS = time.Since(start).Seconds()
	res.Received, res.Redelivered = received.Load(), redelivered.Load()
	res.DrainCPUus = cpuPerMsg(cpu.now()-cpu0, res.Received)
	res.ClientDrainCPUus = cpuPerMsg(selfCPU()-self0, res.Received)
	for _, c := range conns {
		c.nc.Close()
	}
	wg.Wait()
	return failed()
}

// jsSend is bench send against JetStream: producers connections each keep
// window publishes awaiting their JetStream ack (the stream stored the
// message) to a file-backed stream of the run's own, deleted at the end.
func jsSend(cCtx *cli.Context, res *sendResult, bf benchFlags, producers, window int) error {
	ctx := cCtx.Context
	timeout := cCtx.Duration("connect-timeout")
	run := benchRunID()
	stream, subject := "BENCHSEND"+strings.ToUpper(run), "bench-send."+run
	res.Dest = subject
	ctl, err := jsDial(ctx, res.Server, timeout, "_INBOX."+run+".ctl")
	if err != nil {
		return err
	}
	defer ctl.nc.Close()
	if err := ctl.request("$JS.API.STREAM.CREATE."+stream, map[string]any{
		"name": stream, "subjects": []string{subject}, "storage": "file",
	}, nil); err != nil {
		return err
	}
	defer func() {
		if err := ctl.request("$JS.API.STREAM.DELETE."+stream, nil, nil); err != nil {
			res.Cleanup.Note = fmt.Sprintf("stream %s left: %v; delete it with: nats stream rm %s", stream, err, stream)
		} else {
			res.Cleanup.Note = "deleted the stream " + stream
		}
	}()
	payload := benchBody(bf.size)
	start := time.Now()
	measureFrom := start.Add(bf.warmup)
	measureTo := measureFrom.Add(bf.duration)
	stopProgress := benchProgress(cCtx, bf.jsonOut, benchClock(start, bf.warmup, bf.duration))
	defer stopProgress()
	type prod struct {
		h        histogram
		n        uint64
		stored   uint64
		errs     uint64
		firstErr error
	}
	results := make([]*prod, producers)
	var wg sync.WaitGroup
	for p := range producers {
		c, err := jsDial(ctx, res.Server, timeout, "_INBOX."+run+".p"+strconv.Itoa(p))
		if err != nil {
			return err
		}
		defer c.nc.Close()
		r := &prod{}
		results[p] = r
		sent := make(chan time.Time, window) // send times, in order: acks come in order
		wg.Add(2)
		go func() {
			defer wg.Done()
			head := "PUB " + subject + " " + c.inbox + ".a " + strconv.Itoa(len(payload)) + "\r\n"
			for {
				now := time.Now()
				if !now.Before(measureTo) {
					break
				}
				select {
				case sent <- now:
				case <-ctx.Done():
					close(sent)
					return
				}
				c.wmu.Lock()
				c.bw.WriteString(head)
				c.bw.Write(payload)
				c.bw.WriteString("\r\n")
				err := c.bw.Flush()
				c.wmu.Unlock()
				if err != nil {
					r.errs++
					r.firstErr = err
					break
				}
			}
			close(sent)
		}()
		go func() {
			defer wg.Done()
			for at := range sent {
				c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
				m, err := c.next()
				if err != nil {
					r.errs++
					if r.firstErr == nil {
						r.firstErr = err
					}
					c.nc.Close()
					for range sent {
					}
					return
				}
				done := time.Now()
				if m.status >= 400 || bytes.Contains(m.data, []byte(`"error"`)) {
					r.errs++
					if r.firstErr == nil {
						r.firstErr = fmt.Errorf("jetstream publish: %s (status %d)", m.data, m.status)
					}
					continue
				}
				r.stored++
				if !at.Before(measureFrom) && !done.After(measureTo) {
					r.n++
					r.h.record(done.Sub(at))
				}
			}
		}()
	}
	wg.Wait()
	stopProgress()
	var h histogram
	for _, r := range results {
		h.merge(&r.h)
		res.Messages += r.n
		res.Cleanup.Stored += r.stored
		res.Errors += r.errs
		if r.firstErr != nil && res.FirstError == "" {
			res.FirstError = r.firstErr.Error()
		}
	}
	res.MsgsPerS = benchRound1(float64(res.Messages) / bf.duration.Seconds())
	res.MBPerS = math.Round(res.MsgsPerS*float64(bf.size)/1e6*100) / 100
	res.Latency = h.summary()
	return nil
}

func runBenchSendJetStream(cCtx *cli.Context, bf benchFlags, producers, window int) error {
	res := sendResult{Mode: "send", Server: bf.server, Producers: producers, Window: window,
		Size: bf.size, Persistent: true, DurationS: bf.duration.Seconds()}
	if bf.server == DefaultServer && os.Getenv("HERALD_SERVER") == "" {
		res.Server = DefaultNATSServer
	}
	if err := jsSend(cCtx, &res, bf, producers, window); err != nil {
		return err
	}
	fmt.Fprintf(cCtx.App.ErrWriter, "bench: %s\n", res.Cleanup.Note)
	out := cCtx.App.Writer
	if bf.jsonOut {
		if err := writeJSON(out, res); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "server\t%s (jetstream)\n", res.Server)
		fmt.Fprintf(tw, "subject\t%s (file stream)\n", res.Dest)
		fmt.Fprintf(tw, "producers x window\t%d x %d, %d B messages, %s\n", producers, window, bf.size, bf.duration)
		fmt.Fprintf(tw, "confirmed\t%d messages\n", res.Messages)
		fmt.Fprintf(tw, "throughput\t%.0f msg/s, %.2f MB/s\n", res.MsgsPerS, res.MBPerS)
		l := res.Latency
		fmt.Fprintf(tw, "ack latency (ms)\tp50 %s  p99 %s  p999 %s  max %s\n", benchMS(l.P50), benchMS(l.P99), benchMS(l.P999), benchMS(l.Max))
		fmt.Fprintf(tw, "errors\t%d\n", res.Errors)
		if res.FirstError != "" {
			fmt.Fprintf(tw, "first error\t%s\n", res.FirstError)
		}
		tw.Flush()
	}
	if res.Messages == 0 {
		return &exitError{code: exitOther, err: fmt.Errorf("no publish was acknowledged: %s", res.FirstError)}
	}
	return nil
}
