// Package natstest runs a real NATS JetStream cluster for tests: nats-server
// from its Go module, in this process, one server per node on 127.0.0.1
// with its own store directory. It is imported by tests only, so the
// server is never compiled into the binaries.
package natstest

import (
	"context"
	"encoding/json"
	"errors"
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
	ports   *reserved
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

// reserved holds a listener on each port a node will use while the node
// is not running. A port picked by FreePort and left unbound until the
// node starts (seconds later for the last node of a cluster) can become
// the source port of another test's connection, and then the node cannot
// listen on it: a bound listener keeps the kernel from handing it out.
type reserved struct {
	mu   sync.Mutex
	held map[int]net.Listener
}

// take binds a new port on 127.0.0.1 and holds it.
func (r *reserved) take(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	r.mu.Lock()
	if r.held == nil {
		r.held = map[int]net.Listener{}
	}
	r.held[port] = ln
	r.mu.Unlock()
	return port
}

// release lets go of ports, just before a node binds them.
func (r *reserved) release(ports ...int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range ports {
		if ln := r.held[p]; ln != nil {
			ln.Close()
			delete(r.held, p)
		}
	}
}

// hold binds ports again once a node has stopped, so that they are still
// free when it restarts; a port taken in between stays unheld (the
// restart then reports it).
func (r *reserved) hold(ports ...int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range ports {
		if r.held[p] != nil {
			continue
		}
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			r.held[p] = ln
		}
	}
}

func (r *reserved) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, ln := range r.held {
		ln.Close()
		delete(r.held, p)
	}
}

// NodeOptions returns the options of n nodes of a cluster named name, with
// store directories under dir.
func NodeOptions(t testing.TB, name, dir string, n int) []*server.Options {
	r := &reserved{}
	defer r.closeAll()
	return nodeOptions(t, name, dir, n, r)
}

// nodeOptions is NodeOptions with the ports held in r.
func nodeOptions(t testing.TB, name, dir string, n int, r *reserved) []*server.Options {
	var routes []string
	ports := make([][2]int, n)
	for i := range n {
		ports[i] = [2]int{r.take(t), r.take(t)}
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
			r.release(ports[i][1])
		}
		out = append(out, o)
	}
	return out
}

// nodePorts are the ports node options listen on.
func nodePorts(o *server.Options) []int {
	if o.Cluster.Port != 0 {
		return []int{o.Port, o.Cluster.Port}
	}
	return []int{o.Port}
}

// errLog keeps what a node logs as an error or fatal error (a port it
// could not listen on), which NoLog would otherwise drop.
type errLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *errLog) add(kind, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < 20 {
		l.lines = append(l.lines, kind+": "+fmt.Sprintf(format, v...))
	}
}

// fatal tells whether the node logged a fatal error (it will not start).
func (l *errLog) fatal() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.HasPrefix(line, "fatal: ") {
			return true
		}
	}
	return false
}

func (l *errLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return "nothing logged as an error"
	}
	return strings.Join(l.lines, "; ")
}

func (l *errLog) Noticef(string, ...any)         {}
func (l *errLog) Warnf(string, ...any)           {}
func (l *errLog) Debugf(string, ...any)          {}
func (l *errLog) Tracef(string, ...any)          {}
func (l *errLog) Errorf(format string, v ...any) { l.add("error", format, v...) }
func (l *errLog) Fatalf(format string, v ...any) { l.add("fatal", format, v...) }

// Start starts a cluster of n nodes and waits until JetStream answers. A
// node that cannot listen (a port taken by another process after all) gets
// the whole cluster started again on new ports, up to three times.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	var last error
	for range 3 {
		r := &reserved{}
		c := &Cluster{t: t, Opts: nodeOptions(t, "herald", t.TempDir(), n, r), ports: r}
		c.Servers = make([]*server.Server, n)
		var err error
		for i := range n {
			if err = c.startNode(i); err != nil {
				break
			}
		}
		if err != nil {
			last = err
			c.Shutdown()
			r.closeAll()
			continue
		}
		t.Cleanup(func() { c.Shutdown(); r.closeAll() })
		c.WaitReady(60 * time.Second)
		return c
	}
	t.Fatalf("nats cluster of %d did not start in 3 tries: %v", n, last)
	return nil
}

// StartNode starts (or restarts) node i with its store.
func (c *Cluster) StartNode(i int) {
	c.t.Helper()
	if err := c.startNode(i); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Cluster) startNode(i int) error {
	o := c.Opts[i]
	c.ports.release(nodePorts(o)...)
	s, err := server.NewServer(o)
	if err != nil {
		return fmt.Errorf("nats node %d: %v", i, err)
	}
	log := &errLog{}
	s.SetLogger(log, false, false)
	go s.Start()
	deadline := time.Now().Add(20 * time.Second)
	for !s.ReadyForConnections(100 * time.Millisecond) {
		if log.fatal() || time.Now().After(deadline) {
			s.Shutdown()
			return fmt.Errorf("nats node %d did not start (ports %v): %s", i, nodePorts(o), log)
		}
	}
	c.Servers[i] = s
	return nil
}

// StopNode stops node i.
func (c *Cluster) StopNode(i int) {
	if s := c.Servers[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.Servers[i] = nil
		c.ports.hold(nodePorts(c.Opts[i])...)
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
	ports  *reserved
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
	} else {
		// Errors still go to stderr, and a port the node cannot listen
		// on ends it (the parent's start then fails at once).
		s.SetLogger(childLog{}, false, false)
	}
	s.Start()
	s.WaitForShutdown()
	os.Exit(0)
}

// childLog is a child node's logger when logging is off.
type childLog struct{}

func (childLog) Noticef(string, ...any) {}
func (childLog) Warnf(string, ...any)   {}
func (childLog) Debugf(string, ...any)  {}
func (childLog) Tracef(string, ...any)  {}
func (childLog) Errorf(format string, v ...any) {
	fmt.Fprintf(os.Stderr, "natstest child: error: "+format+"\n", v...)
}
func (childLog) Fatalf(format string, v ...any) {
	fmt.Fprintf(os.Stderr, "natstest child: fatal: "+format+"\n", v...)
	os.Exit(3)
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
	r := &reserved{}
	p := &Procs{t: t, Opts: nodeOptions(t, "herald", t.TempDir(), n, r), ports: r, cmds: make([]*exec.Cmd, n), exe: os.Args[0], Prefix: prefix, Host: host, Dialer: dialer}
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
		r.closeAll()
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
	p.ports.release(nodePorts(o)...)
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
		if exitedEarly(cmd.Process.Pid) {
			p.t.Fatalf("nats node %d exited before listening on %d (its stderr above says why)", i, o.Port)
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("nats node %d did not listen on %d in 20s", i, o.Port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exitedEarly tells whether process pid has exited and waits to be reaped
// (a zombie).
func exitedEarly(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	st := string(b)
	if k := strings.LastIndexByte(st, ')'); k >= 0 && k+2 < len(st) {
		return st[k+2] == 'Z'
	}
	return false
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
		if p.Prefix == nil {
			p.ports.hold(nodePorts(p.Opts[i])...)
		}
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

// ConsumerLeader returns the index in opts (a Cluster's or a Procs' Opts:
// node i is named opts[i].ServerName) of the node that leads consumer
// durable of stream, as the cluster reports it through js (the consumer's
// info). It asks again until ctx is done while the consumer has no leader
// yet or its info cannot be read (an election under way), and fails with
// the last reason if so, or if the leader it names is not among opts.
func ConsumerLeader(ctx context.Context, js jetstream.JetStream, stream, durable string, opts []*server.Options) (int, error) {
	for {
		leader, err := consumerLeaderOnce(ctx, js, stream, durable)
		if err == nil {
			for i, o := range opts {
				if o.ServerName == leader {
					return i, nil
				}
			}
			return -1, fmt.Errorf("consumer %s of stream %s: its leader %q is not a node of the cluster", durable, stream, leader)
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("consumer %s of stream %s: no leader: %w (%v)", durable, stream, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// consumerLeaderOnce is the name of the node the consumer's info names as
// its leader.
func consumerLeaderOnce(ctx context.Context, js jetstream.JetStream, stream, durable string) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := js.Consumer(rctx, stream, durable)
	if err != nil {
		return "", err
	}
	ci, err := c.Info(rctx)
	if err != nil {
		return "", err
	}
	if ci.Cluster == nil || ci.Cluster.Leader == "" {
		return "", errors.New("the consumer's info names no leader")
	}
	return ci.Cluster.Leader, nil
}

// ConsumerLeaderOf creates, on the cluster of procs, a stream named stream
// taking subject (three replicas, file storage, a 2-minute duplicate
// window) and a durable consumer of it with explicit acks from the start,
// then returns the index of the node that leads that consumer and the URLs
// of the other nodes: what a test that kills the consumer's leader needs.
// It fails the test if any step does.
func ConsumerLeaderOf(t testing.TB, procs *Procs, stream, subject, durable string) (leader int, others []string) {
	t.Helper()
	urls := procs.URLs()
	_, js := Connect(t, urls)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: stream, Subjects: []string{subject}, Replicas: 3,
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, FilterSubjects: []string{subject},
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	leader, err := ConsumerLeader(ctx, js, stream, durable, procs.Opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, u := range urls {
		if i != leader {
			others = append(others, u)
		}
	}
	return leader, others
}
