// Package natstest runs a real NATS JetStream cluster for tests: nats-server
// from its Go module, in this process, one server per node on 127.0.0.1
// with its own store directory. It is imported by tests only, so the
// server is never compiled into the binaries.
package natstest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a running JetStream cluster.
type Cluster struct {
	t       testing.TB
	Opts    []*server.Options
	Servers []*server.Server
}

// FreePort returns a TCP port free on 127.0.0.1 now.
func FreePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// NodeOptions returns the options of n nodes of a cluster named name, with
// store directories under dir.
func NodeOptions(t testing.TB, name, dir string, n int) []*server.Options {
	var routes []string
	ports := make([][2]int, n)
	for i := range n {
		ports[i] = [2]int{FreePort(t), FreePort(t)}
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[i][1]))
	}
	var out []*server.Options
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("%s-n%d", name, i+1),
			Host:       "127.0.0.1",
			Port:       ports[i][0],
			JetStream:  true,
			StoreDir:   filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			Cluster:    server.ClusterOpts{Name: name, Host: "127.0.0.1", Port: ports[i][1]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
			NoLog:      true,
			NoSigs:     true,
		}
		out = append(out, o)
	}
	return out
}

// Start starts a cluster of n nodes and waits until JetStream answers.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t, Opts: NodeOptions(t, "herald", t.TempDir(), n)}
	c.Servers = make([]*server.Server, n)
	for i := range n {
		c.StartNode(i)
	}
	t.Cleanup(c.Shutdown)
	c.WaitReady(60 * time.Second)
	return c
}

// StartNode starts (or restarts) node i with its store.
func (c *Cluster) StartNode(i int) {
	c.t.Helper()
	s, err := server.NewServer(c.Opts[i])
	if err != nil {
		c.t.Fatalf("nats node %d: %v", i, err)
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		c.t.Fatalf("nats node %d did not start", i)
	}
	c.Servers[i] = s
}

// StopNode stops node i.
func (c *Cluster) StopNode(i int) {
	if s := c.Servers[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.Servers[i] = nil
	}
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for i := range c.Servers {
		c.StopNode(i)
	}
}

// URLs are the client URLs of every node.
func (c *Cluster) URLs() []string {
	var out []string
	for _, o := range c.Opts {
		out = append(out, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return out
}

// WaitReady waits until JetStream answers an account info request through
// the cluster (a meta leader is elected).
func (c *Cluster) WaitReady(d time.Duration) {
	c.t.Helper()
	WaitJetStream(c.t, c.URLs(), d)
}

// WaitJetStream waits until JetStream at urls answers.
func WaitJetStream(t testing.TB, urls []string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		nc, err := nats.Connect(strings.Join(urls, ","), nats.Timeout(time.Second))
		if err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = js.AccountInfo(ctx)
			cancel()
			nc.Close()
			if err == nil {
				return
			}
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("JetStream cluster not ready after %s: %v", d, last)
}

// Connect returns a client connection to urls, closed with the test.
func Connect(t testing.TB, urls []string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}
