package natstest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// A node whose port another process took reports the listen error at
// once (it used to wait 20 s and say only "did not start").
func TestStartNodeReportsTakenPort(t *testing.T) {
	r := &reserved{}
	defer r.closeAll()
	c := &Cluster{t: t, Opts: nodeOptions(t, "taken", t.TempDir(), 1, r), ports: r}
	c.Servers = make([]*server.Server, 1)
	defer c.Shutdown()
	r.release(c.Opts[0].Port)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c.Opts[0].Port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	start := time.Now()
	err = c.startNode(0)
	if err == nil {
		t.Fatal("node started on a port another listener holds")
	}
	if !strings.Contains(err.Error(), "listen") || !strings.Contains(err.Error(), fmt.Sprint(c.Opts[0].Port)) {
		t.Fatalf("error does not name the listen failure and port: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("failure reported after %s", d)
	}
}

// A stopped node's ports stay held, so nothing else can take them before
// the node restarts on them.
func TestStoppedNodeKeepsItsPorts(t *testing.T) {
	c := Start(t, 1)
	port := c.Opts[0].Port
	c.StopNode(0)
	if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
		ln.Close()
		t.Fatalf("port %d of a stopped node is free for anyone", port)
	}
	c.StartNode(0)
	WaitJetStream(t, c.URLs(), 30*time.Second)
}

// ConsumerLeader names the node that leads a consumer: the one whose
// server says it is the leader, and none other; after a step-down it names
// the new leader; it fails for a consumer that does not exist and for a
// leader that is not among the nodes it is given.
func TestConsumerLeader(t *testing.T) {
	c := Start(t, 3)
	_, js := Connect(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	// isLeader waits for node i's own view to agree (the consumer's
	// info comes from the leader, a node's flag may follow a moment later).
	isLeader := func(i int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var leaders []int
			for k, s := range c.Servers {
				if s.JetStreamIsConsumerLeader(globalAccount, "S", "d") {
					leaders = append(leaders, k)
				}
			}
			if len(leaders) == 1 && leaders[0] == i {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("ConsumerLeader named node %d; the nodes that say they lead: %v", i, leaders)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	first, err := ConsumerLeader(ctx, js, "S", "d", c.Opts)
	if err != nil {
		t.Fatal(err)
	}
	isLeader(first)

	nc, _ := Connect(t, c.URLs())
	if _, err := nc.Request("$JS.API.CONSUMER.LEADER.STEPDOWN.S.d", nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	next := first
	for next == first {
		if ctx.Err() != nil {
			t.Fatalf("ConsumerLeader still names node %d after its step-down", first)
		}
		time.Sleep(100 * time.Millisecond)
		if next, err = ConsumerLeader(ctx, js, "S", "d", c.Opts); err != nil {
			t.Fatal(err)
		}
	}
	isLeader(next)

	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if i, err := ConsumerLeader(short, js, "S", "nope", c.Opts); err == nil {
		t.Fatalf("a consumer that does not exist: led by node %d, no error", i)
	}
	var others []*server.Options
	for k, o := range c.Opts {
		if k != next {
			others = append(others, o)
		}
	}
	if i, err := ConsumerLeader(ctx, js, "S", "d", others); err == nil || !strings.Contains(err.Error(), "not a node of the cluster") {
		t.Fatalf("its leader left out of the nodes given: got %d, %v; want an error naming it", i, err)
	}
}

// globalAccount is the account of a server without accounts configured.
const globalAccount = "$G"
