package interop_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// Tests with stomp.py (Debian python3-stomp), driving
// testdata/stomppy_client.py, which prints what the client saw as JSON.

type pyMsg struct {
	Body    string            `json:"body"`
	Headers map[string]string `json:"headers"`
}

func runPy(t *testing.T, out any, mode string, args ...string) {
	t.Helper()
	py := stompPython(t)
	runJSON(t, 30*time.Second, out, py, append([]string{"-u", testdata(t, "stomppy_client.py"), mode}, args...)...)
}

// STOMP 1.2 negotiation: stomp.py sends STOMP with accept-version:1.2 and
// host; Herald must answer CONNECTED version:1.2 with session and server.
func TestStompPy_Connect12(t *testing.T) {
	stompPython(t)
	tb := startBroker(t, nil)
	var res struct {
		Connected map[string]string `json:"connected"`
		Version   string            `json:"stomp_py_version"`
	}
	runPy(t, &res, "connect", tb.Addr)
	t.Logf("stomp.py %s, CONNECTED %v", res.Version, res.Connected)
	if v := res.Connected["version"]; v != "1.2" {
		t.Errorf("CONNECTED version = %q, want 1.2", v)
	}
	if s := res.Connected["server"]; !strings.HasPrefix(s, "herald/") {
		t.Errorf("CONNECTED server = %q, want herald/...", s)
	}
	if res.Connected["session"] == "" {
		t.Errorf("CONNECTED has no session header: %v", res.Connected)
	}
	if hb := res.Connected["heart-beat"]; hb != "10000,10000" {
		t.Errorf("CONNECTED heart-beat = %q, want the configured 10000,10000", hb)
	}
	// The DISCONNECT (with receipt) must leave no connection behind.
	waitUntil(t, 5*time.Second, "no connections after DISCONNECT",
		func() bool { return tb.B.Stats().Connections == 0 },
		func() string { return strconv.Itoa(tb.B.Stats().Connections) })
}

// SEND with a receipt header: every RECEIPT arrives, and a RECEIPT means
// the message is committed (visible in the queue view at once) with its
// custom header, in order, to a consumer using another client (Herald's).
func TestStompPy_SendWithReceipts(t *testing.T) {
	stompPython(t)
	tb := startBroker(t, nil)
	const n = 5
	var res struct {
		Sent     []string `json:"sent"`
		Receipts []string `json:"receipts"`
	}
	runPy(t, &res, "send-receipts", tb.Addr, "/queue/py.receipts", strconv.Itoa(n))
	got := slices.Clone(res.Receipts)
	slices.Sort(got)
	if !slices.Equal(got, res.Sent) || len(got) != n {
		t.Fatalf("receipts %v, want one per SEND: %v", res.Receipts, res.Sent)
	}
	// stomp.py has exited after its receipts: the messages must be stored.
	if q := tb.queue("py.receipts"); q.Messages != n || q.Enqueued != n {
		t.Fatalf("queue after receipts: messages=%d enqueued=%d, want %d", q.Messages, q.Enqueued, n)
	}
	c := tb.dial(t)
	sub, err := c.SubscribeReceipt(ctxT(t), "/queue/py.receipts", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		f := recv(t, sub)
		if want := "py-" + strconv.Itoa(i); string(f.Body) != want {
			t.Errorf("message %d body %q, want %q (FIFO)", i, f.Body, want)
		}
		if h := f.Get("x-interop"); h != "stomp.py" {
			t.Errorf("message %d x-interop header %q, want stomp.py", i, h)
		}
		// stomp.py escapes \\ \c \n \r (1.2); Herald must decode them
		// and its own client decode what Herald re-encodes.
		if h, want := f.Get("x-special"), "colon:back\\slash\nnew line\rcr"; h != want {
			t.Errorf("message %d x-special header %q, want %q", i, h, want)
		}
		if err := c.Ack(f); err != nil {
			t.Fatal(err)
		}
	}
}

// client-individual: ACK four, NACK one; only the NACKed one comes back,
// marked redelivered:true with delivery-count 2, and once it is ACKed the
// queue is empty.
func TestStompPy_AckNackClientIndividual(t *testing.T) {
	stompPython(t)
	tb := startBroker(t, func(c *appliance.Config) {
		c.Queues.RedeliveryMin = appliance.Duration{Duration: 100 * time.Millisecond}
	})
	testAckNack(t, tb, "1.2")
}

// The same with STOMP 1.1 ACK/NACK frames (message-id + subscription).
func TestStompPy_AckNack11(t *testing.T) {
	stompPython(t)
	tb := startBroker(t, func(c *appliance.Config) {
		c.Queues.RedeliveryMin = appliance.Duration{Duration: 100 * time.Millisecond}
	})
	testAckNack(t, tb, "1.1")
}

func testAckNack(t *testing.T, tb *broker, version string) {
	t.Helper()
	var res struct {
		First []pyMsg `json:"first"`
		Again []pyMsg `json:"again"`
	}
	runPy(t, &res, "ack-nack", tb.Addr, "/queue/py.ack", version)
	if len(res.First) != 5 {
		t.Fatalf("first deliveries: %+v, want 5", res.First)
	}
	for i, m := range res.First {
		if want := "m" + strconv.Itoa(i); m.Body != want {
			t.Errorf("first delivery %d: body %q, want %q", i, m.Body, want)
		}
		if m.Headers["redelivered"] == "true" {
			t.Errorf("first delivery %d marked redelivered: %v", i, m.Headers)
		}
		if (version == "1.2" && m.Headers["ack"] == "") || m.Headers["subscription"] != "sub-1" || m.Headers["message-id"] == "" {
			t.Errorf("first delivery %d lacks MESSAGE headers (ack at 1.2, subscription:sub-1, message-id): %v", i, m.Headers)
		}
	}
	if len(res.Again) != 1 {
		t.Fatalf("redeliveries: %+v, want exactly the NACKed m2", res.Again)
	}
	again := res.Again[0]
	if again.Body != "m2" || again.Headers["redelivered"] != "true" || again.Headers["delivery-count"] != "2" {
		t.Errorf("redelivery %q headers %v, want m2 with redelivered:true and delivery-count:2", again.Body, again.Headers)
	}
	if again.Headers["message-id"] != res.First[2].Headers["message-id"] {
		t.Errorf("redelivery message-id %q, want the NACKed one's %q", again.Headers["message-id"], res.First[2].Headers["message-id"])
	}
	q := tb.queue("py.ack")
	if q.Messages != 0 || q.Acked != 5 || q.Redelivered != 1 {
		t.Errorf("queue view %+v, want messages=0 acked=5 redelivered=1", q)
	}
}

// stomp.py sends without receipts and then DISCONNECTs with one: once the
// DISCONNECT's RECEIPT is in, every SEND before it is stored.
func TestStompPy_DisconnectReceiptAfterDurable(t *testing.T) {
	stompPython(t)
	tb := startBroker(t, nil)
	const n = 300
	var res struct {
		Receipts []string `json:"receipts"`
	}
	runPy(t, &res, "send-disconnect", tb.Addr, "/queue/py.disc", strconv.Itoa(n))
	if !slices.Contains(res.Receipts, "bye") {
		t.Fatalf("no RECEIPT for DISCONNECT: %v", res.Receipts)
	}
	// No polling: the RECEIPT promised these were committed.
	if q := tb.queue("py.disc"); q.Messages != n {
		t.Fatalf("queue holds %d messages right after the DISCONNECT receipt, want %d (%+v)", q.Messages, n, q)
	}
}

// An ACK inside an aborted transaction does not acknowledge: the message
// comes back (redelivered) after the consumer disconnects; an ACK inside a
// committed transaction does.
func TestStompPy_AckInTransaction(t *testing.T) {
	stompPython(t)
	tb := startBroker(t, nil)
	var res struct {
		AfterAbort []string `json:"after_abort"`
		Second     []pyMsg  `json:"second_connection"`
	}
	runPy(t, &res, "tx-ack", tb.Addr, "/queue/py.txack")
	if !slices.Equal(res.AfterAbort, []string{"txack-1"}) {
		t.Errorf("after the aborted ACK the first consumer had %v, want only txack-1 (prefetch 1, no credit returned)", res.AfterAbort)
	}
	var bodies []string
	for _, m := range res.Second {
		bodies = append(bodies, m.Body)
	}
	if !slices.Equal(bodies, []string{"txack-1", "txack-2"}) {
		t.Fatalf("second consumer got %v, want txack-1 (its ACK was aborted) then txack-2", bodies)
	}
	if h := res.Second[0].Headers; h["redelivered"] != "true" {
		t.Errorf("txack-1 on the second consumer: headers %v, want redelivered:true", h)
	}
	if q := tb.queue("py.txack"); q.Messages != 0 || q.Acked != 2 {
		t.Errorf("queue view %+v, want messages=0 acked=2", q)
	}
}

// BEGIN/SEND/SEND/COMMIT delivers both, nothing before COMMIT;
// BEGIN/SEND/ABORT delivers nothing.
func TestStompPy_Transaction(t *testing.T) {
	stompPython(t)
	tb := startBroker(t, nil)
	var res struct {
		BeforeCommit []string `json:"before_commit"`
		AfterCommit  []string `json:"after_commit"`
		All          []string `json:"all"`
	}
	runPy(t, &res, "transaction", tb.Addr, "/queue/py.tx")
	if len(res.BeforeCommit) != 0 {
		t.Errorf("delivered before COMMIT: %v", res.BeforeCommit)
	}
	if want := []string{"tx1-a", "tx1-b"}; !slices.Equal(res.AfterCommit, want) {
		t.Errorf("after COMMIT: %v, want %v", res.AfterCommit, want)
	}
	if want := []string{"tx1-a", "tx1-b", "marker"}; !slices.Equal(res.All, want) {
		t.Errorf("all delivered: %v, want %v (the aborted tx2-aborted must never arrive)", res.All, want)
	}
	if q := tb.queue("py.tx"); q.Enqueued != 3 {
		t.Errorf("queue enqueued_total=%d, want 3 (the aborted SEND is not enqueued)", q.Enqueued)
	}
}

// A body with NUL bytes, every byte value and invalid UTF-8 survives a
// round trip through stomp.py (content-length framing) byte for byte.
func TestStompPy_BinaryBody(t *testing.T) {
	stompPython(t)
	tb := startBroker(t, nil)
	var body []byte
	body = append(body, 0, 0, 0)
	for i := 0; i < 256; i++ {
		body = append(body, byte(i))
	}
	body = append(body, []byte("\x00\nMESSAGE\n\n\x00\xff\xfe\xc3\x28\x80\x00")...)
	for i := 0; i < 64<<10; i++ {
		body = append(body, byte(i*7+i>>8))
	}
	body = append(body, 0)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.bin"), filepath.Join(dir, "out.bin")
	if err := os.WriteFile(in, body, 0o644); err != nil {
		t.Fatal(err)
	}
	var res struct {
		SentLen int               `json:"sent_len"`
		RecvLen int               `json:"recv_len"`
		Headers map[string]string `json:"headers"`
	}
	runPy(t, &res, "binary", tb.Addr, "/queue/py.bin", in, out)
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if res.SentLen != len(body) {
		t.Fatalf("stomp.py sent %d bytes, want %d", res.SentLen, len(body))
	}
	if !bytes.Equal(got, body) {
		i := 0
		for i < len(got) && i < len(body) && got[i] == body[i] {
			i++
		}
		t.Fatalf("body changed in transit: sent %d bytes, received %d, first difference at offset %d", len(body), len(got), i)
	}
	if cl := res.Headers["content-length"]; cl != strconv.Itoa(len(body)) {
		t.Errorf("MESSAGE content-length %q, want %d", cl, len(body))
	}
	if ct := res.Headers["content-type"]; ct != "application/octet-stream" {
		t.Errorf("MESSAGE content-type %q, want application/octet-stream", ct)
	}
}

// heart-beat:1000,1000 against a broker offering 500,500 negotiates 1 s
// both ways: stomp.py receives beats, the broker does not time the idle
// client out, and the connection still carries frames after 3.5 s idle.
func TestStompPy_Heartbeats(t *testing.T) {
	stompPython(t)
	t.Parallel() // mostly idle: overlap its 3.5 s hold with the other tests
	tb := startBroker(t, func(c *appliance.Config) {
		c.Stomp.HeartbeatSend = appliance.Duration{Duration: 500 * time.Millisecond}
		c.Stomp.HeartbeatReceive = appliance.Duration{Duration: 500 * time.Millisecond}
	})
	var res struct {
		Connected    map[string]string `json:"connected"`
		Beats        int               `json:"heartbeats_received"`
		Timeouts     int               `json:"heartbeat_timeouts"`
		Disconnected bool              `json:"disconnected_during_hold"`
		Alive        bool              `json:"is_connected_after_hold"`
		Body         string            `json:"body_after_hold"`
	}
	runPy(t, &res, "heartbeat", tb.Addr, "/queue/py.hb", "3.5")
	t.Logf("heart-beat result: %+v", res)
	if hb := res.Connected["heart-beat"]; hb != "500,500" {
		t.Errorf("CONNECTED heart-beat %q, want 500,500", hb)
	}
	// 3.5 s at one beat per second (sent after 750 ms of silence) is 3-4.
	if res.Beats < 2 {
		t.Errorf("stomp.py received %d heart-beats in 3.5 s, want at least 2 at the negotiated 1 s", res.Beats)
	}
	if res.Timeouts != 0 || res.Disconnected || !res.Alive {
		t.Errorf("connection unhealthy during idle hold: timeouts=%d disconnected=%v connected=%v", res.Timeouts, res.Disconnected, res.Alive)
	}
	if res.Body != "still-alive" {
		t.Errorf("round trip after the hold delivered %q, want still-alive", res.Body)
	}
}
