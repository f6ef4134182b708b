// Package natstest runs a real NATS JetStream cluster for tests: nats-server
// from its Go module, in this process, one server per node on 127.0.0.1
// with its own store directory. It is imported by tests only, so the
// server is never compiled into the binaries.
package natstest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
		if n == 1 {
			// One node: a standalone JetStream server (a cluster of
			// one never elects a meta leader).
			o.Cluster, o.Routes = server.ClusterOpts{}, nil
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
	waitJetStream(t, urls, d)
}

func waitJetStream(t testing.TB, urls []string, d time.Duration, opts ...nats.Option) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		nc, err := nats.Connect(strings.Join(urls, ","), append([]nats.Option{nats.Timeout(time.Second)}, opts...)...)
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
func Connect(t testing.TB, urls []string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(strings.Join(urls, ","), append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)...)
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

// A Procs cluster runs each node in a child process (the test binary
// itself, which calls RunChildIfAsked from an init function), so that a
// node can be killed with SIGKILL.
type Procs struct {
	t    testing.TB
	Opts []*server.Options
	cmds []*exec.Cmd
	exe  string
	mu   sync.Mutex
	// Prefix runs each node under a command ("ip", "netns", "exec", NS);
	// Host is the address clients reach the nodes at; Dialer connects to
	// them (from another namespace). Set by StartProcsIn.
	Prefix []string
	Host   string
	Dialer Dialer
}

// Dialer dials a node (nats.CustomDialer).
type Dialer interface {
	Dial(network, address string) (net.Conn, error)
}

const childEnv = "HERALD_TEST_NATS_NODE"

// nodeSpec is what a child needs to run a node.
type nodeSpec struct {
	Name, Cluster, Store string
	Port, ClusterPort    int
	Routes               string
	Listen               string // client listen host; default 127.0.0.1
}

// RunChildIfAsked runs a NATS node and never returns when this process was
// started as one by StartProcs; call it from an init function of the test
// package.
func RunChildIfAsked() {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return
	}
	var n nodeSpec
	if err := json.Unmarshal([]byte(spec), &n); err != nil {
		fmt.Fprintln(os.Stderr, "natstest child:", err)
		os.Exit(2)
	}
	if n.Listen == "" {
		n.Listen = "127.0.0.1"
	}
	o := &server.Options{
		ServerName: n.Name, Host: n.Listen, Port: n.Port, JetStream: true, StoreDir: n.Store,
		Cluster: server.ClusterOpts{Name: n.Cluster, Host: "127.0.0.1", Port: n.ClusterPort},
		Routes:  server.RoutesFromStr(n.Routes), NoLog: os.Getenv("HERALD_TEST_NATS_LOG") != "1", NoSigs: true,
	}
	s, err := server.NewServer(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natstest child:", err)
		os.Exit(2)
	}
	if !o.NoLog {
		s.ConfigureLogger()
	}
	s.Start()
	s.WaitForShutdown()
	os.Exit(0)
}

// StartProcs starts n nodes as child processes of the test binary.
func StartProcs(t testing.TB, n int) *Procs {
	t.Helper()
	return StartProcsIn(t, n, nil, "", nil)
}

// StartProcsIn is StartProcs with every node run under prefix (a network
// namespace: "ip", "netns", "exec", NS), listening for clients on all
// addresses, reached at host through dialer.
func StartProcsIn(t testing.TB, n int, prefix []string, host string, dialer Dialer) *Procs {
	t.Helper()
	p := &Procs{t: t, Opts: NodeOptions(t, "herald", t.TempDir(), n), cmds: make([]*exec.Cmd, n), exe: os.Args[0], Prefix: prefix, Host: host, Dialer: dialer}
	if p.Host == "" {
		p.Host = "127.0.0.1"
	}
	if p.Dialer == nil {
		p.Dialer = &net.Dialer{Timeout: time.Second}
	}
	for i := range n {
		p.Start(i)
	}
	t.Cleanup(func() {
		for i := range n {
			p.Kill(i)
		}
	})
	waitJetStream(t, p.URLs(), 120*time.Second, nats.SetCustomDialer(p.Dialer)) // race-built child nodes on 2 loaded cores took over 60 s once
	return p
}

// Start starts (or restarts) node i with its store.
func (p *Procs) Start(i int) {
	p.t.Helper()
	o := p.Opts[i]
	var routes []string
	for _, r := range o.Routes {
		routes = append(routes, r.String())
	}
	listen := ""
	if p.Prefix != nil {
		listen = "0.0.0.0"
	}
	spec, _ := json.Marshal(nodeSpec{Name: o.ServerName, Cluster: o.Cluster.Name, Store: o.StoreDir, Port: o.Port, ClusterPort: o.Cluster.Port, Routes: strings.Join(routes, ","), Listen: listen})
	args := append(append([]string(nil), p.Prefix...), p.exe, "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start nats node %d: %v", i, err)
	}
	p.mu.Lock()
	p.cmds[i] = cmd
	p.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := p.Dialer.Dial("tcp", fmt.Sprintf("%s:%d", p.Host, o.Port))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("nats node %d did not listen", i)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends SIGKILL to node i and reaps it.
func (p *Procs) Kill(i int) {
	p.mu.Lock()
	cmd := p.cmds[i]
	p.cmds[i] = nil
	p.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
}

// URLs are the client URLs of every node.
func (p *Procs) URLs() []string {
	var out []string
	for _, o := range p.Opts {
		out = append(out, fmt.Sprintf("nats://%s:%d", p.Host, o.Port))
	}
	return out
}
