package bridge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// Headers a bridge adds to every message it carries (loop prevention).
const (
	HeaderOrigin = "herald-bridge-origin" // appliance ids the message left, comma-separated
	HeaderHops   = "herald-bridge-hops"   // bridges crossed
	// HeaderVia names the bridge that brought a message in; that bridge
	// does not send it back out.
	HeaderVia = "herald-bridge-via"
)

// Options are what New needs.
type Options struct {
	Config appliance.BridgeConfig
	// LocalAddr is this appliance's STOMP listener (host:port), which the
	// bridge connects to over loopback.
	LocalAddr string
	// LocalLimits are the frame limits of the local connection's reader,
	// and of a STOMP peer's (whose messages are sent here): at least what
	// this appliance's listener accepts (appliance.BridgeLocalLimits), or
	// a message it accepted breaks the bridge's connection at every
	// delivery. Zero fields: the STOMP client's defaults (16 MiB bodies,
	// 128 headers).
	LocalLimits stomp.Limits
	// LocalLimitsFunc, if set, is called at each connection instead of
	// reading LocalLimits, so that limits raised by a reload apply from
	// the next connection.
	LocalLimitsFunc func() stomp.Limits
	Logger          *slog.Logger
	// QueueDepth returns a local queue's messages and bytes (the lag of
	// direction out); nil: unknown.
	QueueDepth func(name string) (msgs, bytes int64, ok bool)
	// Seed seeds the back-off jitter; 0: from the clock.
	Seed uint64
}

// limits are the frame limits of the connections' readers.
func (o *Options) limits() stomp.Limits {
	if o.LocalLimitsFunc != nil {
		return o.LocalLimitsFunc()
	}
	return o.LocalLimits
}

// Bridge is one [[bridge]]: a worker per direction.
type Bridge struct {
	cfg     appliance.BridgeConfig
	log     *slog.Logger
	workers []*worker
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New checks o and returns a bridge ready to Start.
func New(o Options) (*Bridge, error) {
	cfg := appliance.BridgeDefaults(o.Config)
	if cfg.ApplianceID == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return nil, fmt.Errorf("bridge %s: appliance_id is not set and the host name is unknown: set appliance_id", cfg.Name)
		}
		cfg.ApplianceID = strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
				return r
			}
			return '_'
		}, h)
	}
	if cfg.Durable == "" {
		cfg.Durable = "herald-" + cfg.ApplianceID + "-" + cfg.Name
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	b := &Bridge{cfg: cfg, log: o.Logger.With("bridge", cfg.Name)}
	var outMaps, inMaps []appliance.BridgeMap
	for _, m := range cfg.Map {
		if m.Direction == "out" || m.Direction == "both" {
			outMaps = append(outMaps, m)
		}
		if m.Direction == "in" || m.Direction == "both" {
			inMaps = append(inMaps, m)
		}
	}
	tc, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	for i, dir := range []struct {
		name string
		maps []appliance.BridgeMap
	}{{"out", outMaps}, {"in", inMaps}} {
		if len(dir.maps) == 0 {
			continue
		}
		w := &worker{
			b: b, dir: dir.name, maps: dir.maps, o: o, tls: tc,
			core: NewCore(CoreConfig{
				Window:     cfg.MaxInFlight,
				BackoffMin: int64(cfg.ReconnectMin.Duration),
				BackoffMax: int64(cfg.ReconnectMax.Duration),
				AckTimeout: int64(cfg.AckTimeout.Duration),
				SeqOrder:   cfg.Kind == "jetstream" && dir.name == "out",
			}, o.Seed+uint64(i)),
			handles:   map[uint64]handle{},
			topicBoot: bootStamp(),
			checks:    make(chan bool, 1),
			results:   make(chan result, cfg.MaxInFlight*2+16),
		}
		switch {
		case cfg.Kind == "jetstream" && dir.name == "out":
			w.remote = &jsOut{w: w}
		case cfg.Kind == "jetstream":
			j := &jsIn{w: w}
			w.remote = j
			w.seq = NewSequencer(SequencerConfig{MaxBytes: cfg.MaxHoldBytes, RegapAfter: int64(2 * j.ackWait())})
			w.heldIn = map[uint64]inMsg{}
			w.probes = make(chan probeAnswer, 4)
		case dir.name == "out":
			w.remote = &stompOut{w: w}
		default:
			w.remote = &stompIn{w: w}
		}
		b.workers = append(b.workers, w)
	}
	return b, nil
}

// Name is the bridge's name.
func (b *Bridge) Name() string { return b.cfg.Name }

// SetLocalAddr sets Options.LocalAddr, for a bridge made before the
// appliance listens (so that a bridge that cannot be made refuses the start
// before any client connects). Call it before Start.
func (b *Bridge) SetLocalAddr(addr string) {
	for _, w := range b.workers {
		w.o.LocalAddr = addr
	}
}

// Start runs the workers until Close.
func (b *Bridge) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	for _, w := range b.workers {
		b.wg.Add(1)
		go func() { defer b.wg.Done(); w.run(ctx) }()
	}
}

// Close stops the workers and closes their connections; what is in flight
// stays unacknowledged at its source and is sent again later.
func (b *Bridge) Close() {
	if b.cancel != nil {
		b.cancel()
	}
	b.wg.Wait()
}

// Check reports what would make New refuse cfg beyond its validation
// (appliance.Config.Validate): its TLS files, read and parsed. For
// heraldd --check-config and the checks before a start.
func Check(cfg appliance.BridgeConfig) error {
	_, err := tlsConfig(cfg)
	return err
}

func tlsConfig(cfg appliance.BridgeConfig) (*tls.Config, error) {
	if !cfg.TLS {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLSCA != "" {
		pem, err := os.ReadFile(cfg.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("bridge %s: tls_ca: %w", cfg.Name, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("bridge %s: tls_ca %s: no PEM certificate in it", cfg.Name, cfg.TLSCA)
		}
		tc.RootCAs = pool
	}
	if cfg.TLSCert != "" {
		c, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("bridge %s: tls_cert/tls_key: %w", cfg.Name, err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}

// ---- one direction ----------------------------------------------------

// remote is the peer's side of a worker: the sink of direction out, the
// source of direction in.
type remote interface {
	// connect makes the connection usable (connecting, checking the
	// stream, subscribing) if it is not.
	connect(ctx context.Context) error
	// ok reports whether the connection still stands.
	ok() bool
	close()
}

// handle is how to acknowledge an item at its source.
type handle struct {
	ack func() error
	// nack sends a queue message to its dead-letter queue at the source,
	// saying why (direction out: a NACK with requeue:false and a reason);
	// nil for a topic message and for direction in.
	nack  func(reason string) error
	id    string // dedup id
	topic bool   // best effort: dropped rather than fail the link
	src   string // the source's destination (direction out: the local one)
	// what to forward
	dest    string
	headers stomp.Headers
	body    []byte
}

// result is a sink's answer to a forward, or an event of a connection.
type result struct {
	key uint64
	err error
	gen uint64
	// refused: the sink refused the forward because its After did not
	// hold (not a link failure: the core forwards it again in order).
	refused bool
	// forGood: the sink refused the message itself (refusedForGood: its
	// size, its headers), which no resend changes.
	forGood bool
	seq     uint64 // the sink's sequence of a confirmed forward (JetStream), else 0
}

type worker struct {
	b       *Bridge
	dir     string
	maps    []appliance.BridgeMap
	o       Options
	tls     *tls.Config
	core    *Core
	remote  remote
	handles map[uint64]handle
	results chan result
	gen     uint64 // of the sink's link: results of an older link that failed are errors of the past

	local     *client.Conn
	localSubs []*client.Subscription
	localIn   chan localMsg // direction out: MESSAGEs of the local subscriptions
	remoteIn  chan inMsg    // direction in: messages of the peer

	// Direction in from JetStream: stream order (inorder_core.go).
	seq          *Sequencer
	runCtx       context.Context // the worker's (probes outlive a connection attempt)
	sharedLogged bool
	checks       chan bool        // direction out (JetStream): answers of ActCheck
	heldIn       map[uint64]inMsg // by stream sequence, held back or waiting to be passed on
	probes       chan probeAnswer

	mu   sync.Mutex
	view DirView
	// rate
	lastConfirmed uint64
	lastRateAt    time.Time
	lastLogAt     time.Time
	suppressed    int
	dropped       atomic.Uint64 // topic messages dropped
	// headers dropped from messages crossing the link (headers.go)
	headersDropped atomic.Uint64
	lastHdrLogAt   time.Time
	// queue messages the sink refuses for good, sent to their dead-letter
	// queue (letGo)
	deadLettered atomic.Uint64
	lastDLLogAt  time.Time
	dlSuppressed int
	// Direction in from JetStream: pull heartbeats missed (nats.go's
	// ErrNoHeartbeat), counted and logged from nats.go's goroutine
	// (heartbeatMissed).
	heartbeatsMissed atomic.Uint64
	heartbeatLog     rateLog
	heldLog          rateLog // a long wait of the in-order sequencer (logHeldBack)
	consumeErrLog    rateLog // other errors of the pull (consumeError)
	// Topic messages' dedup ids are APPLIANCE_ID:tBOOT.N: N counts from 1
	// in each worker, BOOT (topicBoot) tells the workers of this process
	// and of earlier ones apart (bootStamp).
	topicSeq  uint64
	topicBoot string
}

// lastBoot is the last stamp bootStamp gave.
var lastBoot atomic.Int64

// bootStamp returns the time in Unix nanoseconds, base 36, and never the
// same twice in a process: it names a worker's run in the dedup ids of its
// topic messages. A counter alone started at 1 again in each process, and a
// bridge restarted within the stream's duplicate window (2 minutes for a
// stream the bridge creates) sent its topic messages under the ids of the
// previous process's: JetStream took them for duplicates and dropped them.
func bootStamp() string {
	for {
		last, now := lastBoot.Load(), time.Now().UnixNano()
		if now <= last {
			now = last + 1
		}
		if lastBoot.CompareAndSwap(last, now) {
			return strconv.FormatInt(now, 36)
		}
	}
}

// inMsg is one message of the peer (direction in).
type inMsg struct {
	seq     uint64 // JetStream stream sequence (0: a STOMP peer's)
	dseq    uint64 // JetStream consumer (delivery) sequence
	first   bool   // JetStream: its first delivery
	id      string
	dest    string
	headers stomp.Headers
	body    []byte
	ack     func() error
}

func (w *worker) cfg() *appliance.BridgeConfig { return &w.b.cfg }

func (w *worker) run(ctx context.Context) {
	w.runCtx = ctx
	w.localIn = make(chan localMsg, w.cfg().MaxInFlight*len(w.maps)+16)
	w.remoteIn = make(chan inMsg, w.cfg().MaxInFlight+16)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	defer w.closeAll()
	w.lastRateAt = time.Now()
	for {
		now := time.Now().UnixNano()
		w.exec(ctx, w.core.Tick(now))
		if w.seq != nil {
			w.execSeq(ctx, w.seq.Tick(now))
			w.logHeldBack(now)
		}
		w.publishView(false)
		select {
		case <-ctx.Done():
			return
		case m := <-w.localIn:
			if m.c != w.local {
				// Of a local connection gone since: the appliance
				// delivers its unacknowledged messages again.
				continue
			}
			w.takeLocal(ctx, m.f)
		case m := <-w.remoteIn:
			w.takeRemote(ctx, m)
		case foreign := <-w.checks:
			w.exec(ctx, w.core.Checked(foreign, time.Now().UnixNano()))
			if !w.sharedLogged && w.core.Stats().Shared {
				w.sharedLogged = true
				w.b.log.Warn("bridge: another publisher writes to the stream; sending one message at a time from now on, so that order holds (give this bridge a stream of its own to keep max_in_flight)", "direction", w.dir, "stream", w.cfg().Stream)
			}
		case p := <-w.probes:
			w.execSeq(ctx, w.seq.ProbeResult(p.after, p.first, p.streamFirst, p.ackFloor, p.found, p.err != nil, time.Now().UnixNano()))
			if p.err != nil {
				w.b.log.Debug("stream order probe", "err", p.err)
			}
		case r := <-w.results:
			w.onResult(ctx, r)
		case <-tick.C:
			if w.core.State() == LinkUp && (!w.localOK() || !w.remote.ok()) {
				w.fail(fmt.Errorf("connection lost"))
			}
		}
	}
}

func (w *worker) localOK() bool {
	if w.local == nil {
		return false
	}
	select {
	case <-w.local.Done():
		return false
	default:
		return true
	}
}

func (w *worker) closeAll() {
	if w.local != nil {
		w.local.Close()
		w.local = nil
	}
	w.remote.close()
}

// fail records err and fails the link; the core schedules the retry.
func (w *worker) fail(err error) {
	w.core.SinkFailed(time.Now().UnixNano())
	w.gen++
	w.noteErr(err)
	if !w.localOK() && w.local != nil {
		w.localLost()
	}
}

// localLost closes the dead connection to this appliance. Direction out:
// it was the source, whose unacknowledged messages come again, so the core
// lets go of those not yet forwarded. Direction in: it was the sink; the
// peer's messages are still held by the core and are sent again.
func (w *worker) localLost() {
	w.local.Close()
	w.local = nil
	if w.dir == "out" {
		w.core.SourceLost(time.Now().UnixNano())
		w.dropDeadHandles()
	}
}

// dropDeadHandles forgets the handles of items the core let go when their
// source session ended (their messages come again).
func (w *worker) dropDeadHandles() {
	for k := range w.handles {
		if !w.core.Holds(k) {
			delete(w.handles, k)
		}
	}
}

func (w *worker) noteErr(err error) {
	now := time.Now()
	w.mu.Lock()
	w.view.LastError = err.Error()
	w.view.LastErrorAt = now.UTC().Format(time.RFC3339)
	if w.view.FailingSince == "" {
		w.view.FailingSince = now.UTC().Format(time.RFC3339)
	}
	w.mu.Unlock()
	if now.Sub(w.lastLogAt) >= w.cfg().LogInterval.Duration {
		w.b.log.Warn("bridge failing; it retries with back-off", "direction", w.dir, "reason", err.Error(), "suppressed", w.suppressed, "retry_in", time.Duration(w.core.RetryAt()-now.UnixNano()).Round(time.Millisecond))
		w.lastLogAt = now
		w.suppressed = 0
	} else {
		w.suppressed++
	}
}

func (w *worker) exec(ctx context.Context, acts []Action) {
	for _, a := range acts {
		switch a.Kind {
		case ActConnect:
			err := w.connect(ctx)
			now := time.Now().UnixNano()
			if err != nil {
				w.core.ConnectFailed(now)
				w.noteErr(err)
				continue
			}
			w.gen++
			w.mu.Lock()
			w.view.FailingSince = ""
			w.mu.Unlock()
			var sinkLast uint64
			if j, ok := w.remote.(*jsOut); ok {
				sinkLast = j.lastSeq
				if j.open {
					w.core.MarkShared()
				}
			}
			w.exec(ctx, w.core.LinkUp(now, sinkLast))
		case ActForward:
			h, ok := w.handles[a.Key]
			if !ok {
				continue
			}
			if err := w.forward(a.Key, a.AfterSeq, h); err != nil {
				if perMessage(err) {
					// The message goes, not the link: a topic message is
					// dropped (best effort), a queue message goes to its
					// dead-letter queue. The rest of acts (forwards
					// behind it) may name it in their conditions: the
					// core forwards them again.
					delete(w.handles, a.Key)
					w.letGo(h, err)
					w.exec(ctx, w.core.Drop(a.Key, time.Now().UnixNano()))
					return
				}
				w.fail(err)
				return
			}
		case ActCheck:
			if j, ok := w.remote.(*jsOut); ok {
				j.check(w.runCtx, a.From, a.To, w.checks)
			} else {
				w.exec(ctx, w.core.Checked(true, time.Now().UnixNano()))
			}
		case ActAckSource:
			h, ok := w.handles[a.Key]
			delete(w.handles, a.Key)
			if ok && h.ack != nil {
				if err := h.ack(); err != nil {
					// The source will deliver it again; the sink keeps
					// one copy by its dedup id.
					w.b.log.Debug("acknowledgement at the source failed", "direction", w.dir, "err", err)
				}
			}
		}
	}
}

func (w *worker) connect(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, max(5*time.Second, w.cfg().AckTimeout.Duration))
	defer cancel()
	if !w.localOK() {
		if w.local != nil {
			w.localLost()
		}
		c, err := client.Dial(cctx, w.o.LocalAddr, client.Options{
			Login: w.cfg().LocalLogin, Passcode: w.cfg().LocalPasscode,
			DialTimeout: 5 * time.Second, HeartBeat: [2]time.Duration{10 * time.Second, 0},
			Limits: w.o.limits(), SubscriptionBuffer: w.cfg().MaxInFlight + 16,
		})
		if err != nil {
			return fmt.Errorf("connect to this appliance at %s: %w", w.o.LocalAddr, err)
		}
		w.local = c
		w.localSubs = nil
		if w.dir == "out" {
			if err := w.subscribeLocal(cctx); err != nil {
				return err
			}
		}
	}
	return w.remote.connect(cctx)
}

// subscribeLocal subscribes to the out maps' local destinations: queues
// with client-individual acks, a prefetch of the window and no ack timeout,
// topics with auto acks.
//
// ack-timeout:0: the core holds what it was given until the peer confirmed
// it, however long the link is down. With the queue's own ack_timeout
// (queues.ack_timeout or a [[queues.policy]]), the queue would take back
// the messages the bridge holds during an outage, count a delivery each
// time and dead-letter them after max_deliveries, while the core still
// forwards its copy once the link is back: a link outage alone would move
// bridged messages to the DLQ, and deliver them as well.
func (w *worker) subscribeLocal(ctx context.Context) error {
	c := w.local
	for _, m := range w.maps {
		ack := "client-individual"
		hdrs := []stomp.Header{{Key: "prefetch-count", Value: strconv.Itoa(w.cfg().MaxInFlight)}}
		if strings.HasPrefix(m.Local, "/topic/") {
			ack = "auto"
		} else {
			hdrs = append(hdrs, stomp.Header{Key: "ack-timeout", Value: "0"})
		}
		sub, err := c.SubscribeReceipt(ctx, m.Local, ack, hdrs...)
		if err != nil {
			return fmt.Errorf("subscribe to %s on this appliance: %w", m.Local, err)
		}
		w.localSubs = append(w.localSubs, sub)
		topic := ack == "auto"
		go func() {
			for f := range sub.C() {
				if topic {
					// Best effort: never hold the local session up
					// (a slow topic subscriber is disconnected).
					select {
					case w.localIn <- localMsg{c, f}:
					default:
						w.dropped.Add(1)
					}
					continue
				}
				select {
				case w.localIn <- localMsg{c, f}:
				case <-c.Done():
					return
				}
			}
		}()
	}
	return nil
}

// localMsg is a MESSAGE of a local subscription and the connection it came
// on: its ACK goes there, and a message of a connection gone since is not
// taken (its ack would go to nil, or to a connection that never sent it).
type localMsg struct {
	c *client.Conn
	f *stomp.Frame
}

// takeLocal: a MESSAGE of the local subscriptions (direction out), of the
// current local connection.
func (w *worker) takeLocal(ctx context.Context, f *stomp.Frame) {
	dest := f.Get("destination")
	m, rest, ok := matchLocal(w.maps, dest)
	if !ok {
		return
	}
	remoteDest := mapName(m.Remote, rest)
	topic := strings.HasPrefix(dest, "/topic/")
	if topic && f.Get("last-value") == "true" {
		// The topic's last value (topics.last_value), given to every new
		// subscription first: this bridge's at each start and each local
		// reconnection. It went out when it was published (or was
		// dropped then); sent now it would reach the far side's
		// subscribers again as a new message.
		return
	}
	hops, _ := strconv.Atoi(f.Get(HeaderHops))
	hdrs := w.outHeaders(carried(f.Headers, false))
	origin := f.Get(HeaderOrigin)
	if origin == "" {
		origin = w.cfg().ApplianceID
	} else {
		origin += "," + w.cfg().ApplianceID
	}
	hdrs = append(hdrs, stomp.Header{Key: HeaderOrigin, Value: origin}, stomp.Header{Key: HeaderHops, Value: strconv.Itoa(hops + 1)})
	var id string
	var ack func() error
	var nack func(string) error
	if topic {
		// Best effort: a topic message is forwarded only while the link
		// is up with room in the window, else dropped (counted); so is
		// one whose subject NATS refuses (a space is legal in a Herald
		// topic name), which would otherwise fail the link at every
		// attempt and hold up every queue message behind it.
		st := w.core.Stats()
		if w.core.State() != LinkUp || st.PendingItems >= int64(w.cfg().MaxInFlight) {
			w.dropped.Add(1)
			return
		}
		if w.cfg().Kind == "jetstream" && !natsSubjectOK(remoteDest) {
			w.dropped.Add(1)
			w.b.log.Debug("topic message dropped: its subject is not one NATS takes", "direction", w.dir, "subject", remoteDest)
			return
		}
		w.topicSeq++
		id = w.cfg().ApplianceID + ":t" + w.topicBoot + "." + strconv.FormatUint(w.topicSeq, 10)
	} else {
		id = w.cfg().ApplianceID + ":" + f.Get("message-id")
		c := w.local
		ack = func() error { return w.guarded(c, func() error { return c.Ack(f) }) }
		nack = func(reason string) error {
			return w.guarded(c, func() error {
				return c.Nack(f, stomp.Header{Key: "requeue", Value: "false"}, stomp.Header{Key: "reason", Value: reason})
			})
		}
	}
	skip := hops >= w.cfg().MaxHops || f.Get(HeaderVia) == w.cfg().Name
	key, dup, acts := w.core.Offer(Item{ID: id, Bytes: len(f.Body), Skip: skip}, time.Now().UnixNano())
	if dup {
		if h, ok := w.handles[key]; ok {
			h.ack, h.nack = ack, nack
			w.handles[key] = h
		}
		return
	}
	w.handles[key] = handle{ack: ack, nack: nack, id: id, topic: topic, src: dest, dest: remoteDest, headers: hdrs, body: f.Body}
	w.exec(ctx, acts)
}

// takeRemote: a message of the peer (direction in). A JetStream message
// goes through the sequencer, which passes it on in stream order.
func (w *worker) takeRemote(ctx context.Context, m inMsg) {
	if w.seq == nil || m.seq == 0 {
		w.offerRemote(ctx, m)
		return
	}
	w.heldIn[m.seq] = m // a copy delivered again replaces the older one (its ack is the live one)
	w.execSeq(ctx, w.seq.Arrive(m.seq, m.dseq, m.first, len(m.body), time.Now().UnixNano()))
}

// execSeq carries out the sequencer's actions.
func (w *worker) execSeq(ctx context.Context, acts []SeqAction) {
	for _, a := range acts {
		switch a.Kind {
		case ActSeqPass:
			m, ok := w.heldIn[a.Seq]
			delete(w.heldIn, a.Seq)
			if ok {
				w.offerRemote(ctx, m)
			}
		case ActSeqDrop:
			delete(w.heldIn, a.Seq)
			w.noteErr(fmt.Errorf("stream %s: message %d left unacknowledged (it comes again): %d bytes are held back waiting for message %d, which the server redelivers after its ack wait; raise max_hold_bytes in [[bridge]] %s to hold more",
				w.cfg().Stream, a.Seq, w.seq.Stats().HeldBytes, w.seq.Next()+1, w.cfg().Name))
		case ActSeqGap:
			err := fmt.Errorf("stream %s: messages %d to %d were removed from the stream (retention or a deletion) before this bridge brought them in; those of its subjects among them are not in the local queue", w.cfg().Stream, a.From, a.To)
			w.b.log.Warn("bridge gap: messages removed from the stream before they came in", "direction", w.dir, "stream", w.cfg().Stream, "from", a.From, "to", a.To)
			w.mu.Lock()
			w.view.LastError = err.Error()
			w.view.LastErrorAt = time.Now().UTC().Format(time.RFC3339)
			w.mu.Unlock()
		case ActSeqProbe:
			if j, ok := w.remote.(*jsIn); ok {
				j.probe(w.runCtx, a.Seq, w.probes)
			}
		}
	}
}

// offerRemote gives a message of the peer to the core, in the order it
// is to be sent locally.
func (w *worker) offerRemote(ctx context.Context, m inMsg) {
	hops, _ := strconv.Atoi(m.headers.Get(HeaderHops))
	skip := hops >= w.cfg().MaxHops
	for _, o := range strings.Split(m.headers.Get(HeaderOrigin), ",") {
		if o == w.cfg().ApplianceID {
			skip = true // it left this appliance: a loop
		}
	}
	key, dup, acts := w.core.Offer(Item{ID: m.id, Bytes: len(m.body), Skip: skip}, time.Now().UnixNano())
	if dup {
		if h, ok := w.handles[key]; ok {
			h.ack = m.ack
			w.handles[key] = h
		}
		return
	}
	hdrs := append(w.inHeaders(m.headers), stomp.Header{Key: "dedup-id", Value: m.id}, stomp.Header{Key: HeaderVia, Value: w.cfg().Name})
	w.handles[key] = handle{ack: m.ack, id: m.id, dest: m.dest, headers: hdrs, body: m.body}
	w.exec(ctx, acts)
}

// forward sends item key to the sink; its answer comes as a result.
func (w *worker) forward(key uint64, afterSeq uint64, h handle) error {
	gen := w.gen
	if w.dir == "in" {
		// The sink is this appliance: a SEND with a receipt, answered
		// once the message is committed.
		if w.local == nil {
			return errors.New("not connected to this appliance")
		}
		c := w.local
		var ch <-chan client.Result
		err := w.guarded(c, func() (err error) {
			ch, err = c.SendAsync(h.dest, h.body, h.headers...)
			return err
		})
		if err != nil {
			return fmt.Errorf("send to %s on this appliance: %w", h.dest, err)
		}
		go func() {
			r := <-ch
			err := r.Err
			if err != nil {
				err = fmt.Errorf("send to %s on this appliance: %w", h.dest, err)
			}
			w.report(result{key: key, err: err, gen: gen})
		}()
		return nil
	}
	return w.remote.(sink).publish(key, gen, afterSeq, h)
}

// guarded runs write, a write to conn made on the worker's goroutine,
// closing conn if it takes longer than ack_timeout or the worker is
// stopped: the write then fails (and the link with it). A STOMP peer (or
// this appliance) that stops reading its socket, say a queue full with
// full_policy block, otherwise blocked the worker inside the write once
// the socket's buffer was full: the ack timeout, which the worker's
// goroutine runs, never fired, the view stayed "up", and Close waited
// until the peer gave up.
func (w *worker) guarded(conn *client.Conn, write func() error) error {
	t := time.AfterFunc(w.cfg().AckTimeout.Duration, func() { conn.Close() })
	stop := context.AfterFunc(w.runCtx, func() { conn.Close() })
	err := write()
	t.Stop()
	stop()
	return err
}

// report hands a sink's answer (a forward's result) to the worker's
// goroutine, or drops it once the worker is stopped: nothing reads results
// after Close, whose closing of the connections answers every forward
// still waiting (with an error), and the goroutines past the channel's
// room (forwards of earlier links still waiting count too) blocked
// forever.
func (w *worker) report(r result) {
	select {
	case w.results <- r:
	case <-w.runCtx.Done():
	}
}

// sink is the remote side of direction out. afterSeq is the sequence the
// sink's last message must have for this one to be stored (0: none); a
// sink that can check it answers a result with refused set when it does
// not hold, one that cannot ignores it (its link stores in send order).
type sink interface {
	publish(key, gen, afterSeq uint64, h handle) error
}

func (w *worker) onResult(ctx context.Context, r result) {
	now := time.Now().UnixNano()
	if r.err == nil {
		w.exec(ctx, w.core.Confirmed(r.key, r.seq, now))
		return
	}
	if r.forGood && r.gen == w.gen && w.core.Holds(r.key) {
		// The sink refused the message itself (too large for the
		// stream): it goes (dropped or dead-lettered), not the link. The
		// forwards sent behind it carry its predicted sequence as their
		// condition, so the sink stores none of them; the link fails
		// (they are forwarded again, in order, once it is back), and the
		// core lets the refused one go.
		h := w.handles[r.key]
		delete(w.handles, r.key)
		w.letGo(h, r.err)
		w.fail(r.err)
		w.exec(ctx, w.core.Drop(r.key, now))
		return
	}
	if r.refused && !w.core.Holds(r.key) {
		// Stored already: another copy of it was confirmed. A stream
		// that is not clustered checks the condition before the
		// Nats-Msg-Id, so a resend of a message stored late (a failed
		// link's forward) is refused rather than answered "duplicate".
		return
	}
	if r.refused && r.gen == w.gen && !w.core.Conditioned(r.key) {
		// Refused without a condition of the core's: not an order
		// matter; a failure, retried with back-off.
		w.fail(r.err)
		return
	}
	if r.refused {
		if r.gen == w.gen {
			w.exec(ctx, w.core.Refused(r.key, now))
		}
		return
	}
	if r.gen == w.gen {
		w.fail(r.err)
	}
}

// letGo: the sink refused h's message itself, which no resend
// changes (perMessage, refusedForGood). A topic message is dropped
// (counted); a queue message goes to its queue's dead-letter queue at the
// source, the way this appliance dead-letters others (a NACK with
// requeue:false: dlq-original-destination, and dlq-reason "nack: bridge
// NAME: " and the refusal), counted
// (herald_bridge_dead_lettered_total) and logged at most once per
// log_interval. Before, it failed the link at every attempt, and nothing
// behind it went out. If the NACK does not reach this appliance, the
// message comes again and is refused again.
func (w *worker) letGo(h handle, err error) {
	if h.topic || h.nack == nil {
		w.dropped.Add(1)
		w.b.log.Debug("topic message dropped: the other side refused it", "direction", w.dir, "destination", h.dest, "err", err)
		return
	}
	w.deadLettered.Add(1)
	nerr := h.nack("bridge " + w.cfg().Name + ": the other side refuses it for good: " + err.Error())
	if nerr != nil {
		w.b.log.Debug("dead-lettering a message at the source failed (it comes again)", "direction", w.dir, "err", nerr)
	}
	now := time.Now()
	if now.Sub(w.lastDLLogAt) < w.cfg().LogInterval.Duration {
		w.dlSuppressed++
		return
	}
	w.b.log.Warn("bridge: the other side refuses a queue message for good (its size or headers); it goes to the queue's dead-letter queue and the messages behind it go on (herald_bridge_dead_lettered_total counts them)",
		"direction", w.dir, "queue", h.src, "remote", h.dest, "reason", err.Error(), "suppressed", w.dlSuppressed)
	w.lastDLLogAt = now
	w.dlSuppressed = 0
}

// ---- mapping ----------------------------------------------------------

// matchLocal finds the map whose local side matches dest, and the rest of
// the name a ".>" pattern matched.
func matchLocal(maps []appliance.BridgeMap, dest string) (appliance.BridgeMap, string, bool) {
	for _, m := range maps {
		if rest, ok := matchPattern(m.Local, dest); ok {
			return m, rest, true
		}
	}
	return appliance.BridgeMap{}, "", false
}

// matchRemote finds the map whose remote side matches subject.
func matchRemote(maps []appliance.BridgeMap, subject string) (appliance.BridgeMap, string, bool) {
	for _, m := range maps {
		if rest, ok := matchPattern(m.Remote, subject); ok {
			return m, rest, true
		}
	}
	return appliance.BridgeMap{}, "", false
}

// matchPattern matches name against an exact pattern or one ending in ">"
// (the rest of the name, one or more segments).
func matchPattern(pattern, name string) (string, bool) {
	if p, ok := strings.CutSuffix(pattern, ">"); ok {
		if len(name) > len(p) && strings.HasPrefix(name, p) {
			return name[len(p):], true
		}
		return "", false
	}
	return "", pattern == name
}

// mapName puts rest in place of pattern's ">".
func mapName(pattern, rest string) string {
	if p, ok := strings.CutSuffix(pattern, ">"); ok {
		return p + rest
	}
	return pattern
}

// carried are the headers of a MESSAGE that cross the link (a local one
// going out, a STOMP peer's coming in): the user's, without those of the
// delivery or of dedup (a new one is set), nor a delay (delay,
// AMQ_SCHEDULED_DELAY): the broker the message was sent to served it
// before delivering the message to the bridge, and the far side would
// delay it a second time.
func carried(h stomp.Headers, keepLoop bool) stomp.Headers {
	out := make(stomp.Headers, 0, len(h)+3)
	for _, x := range h {
		if keepLoop && (x.Key == HeaderOrigin || x.Key == HeaderHops) {
			out = append(out, x)
			continue
		}
		switch x.Key {
		case "subscription", "message-id", "destination", "ack", "redelivered", "delivery-count",
			"content-length", "receipt", "transaction", "dedup-id", "_AMQ_DUPL_ID", "Nats-Msg-Id",
			HeaderOrigin, HeaderHops, HeaderVia, "expires", "persistent", "last-value",
			"delay", "AMQ_SCHEDULED_DELAY":
			continue
		}
		if natsControl(x.Key) {
			continue
		}
		out = append(out, x)
	}
	return out
}

var (
	_ sink = (*jsOut)(nil)
	_ sink = (*stompOut)(nil)
)
