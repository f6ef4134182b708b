package natstest

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
