package main

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
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/internal/testenv"
	"github.com/herald-mq/herald/journal"
)

// runAdmin runs an admin command against socket and checks its exit code.
func runAdmin(t *testing.T, socket string, want int, args ...string) (string, string) {
	t.Helper()
	full := append([]string{args[0], "--socket", socket}, args[1:]...)
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") && (args[0] == "queue" || args[0] == "connections") && args[1] != "" {
		// subcommand: flags go after it
		full = append([]string{args[0], args[1], "--socket", socket}, args[2:]...)
	}
	code, stdout, stderr := runCLI(t, "", full...)
	if code != want {
		t.Fatalf("herald %s: exit code %d, want %d\nstdout: %s\nstderr: %s", strings.Join(full, " "), code, want, stdout, stderr)
	}
	return stdout, stderr
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %T: %v\n%s", v, err, s)
	}
	return v
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s: want %q in:\n%s", what, w, got)
		}
	}
}

// TestAdminCLI_Commands runs every admin command against a real daemon and
// checks its table and its JSON (docs/admin-api.md).
func TestAdminCLI_Commands(t *testing.T) {
	d := admintest.Start(t, nil)
	s := d.Socket
	conn := d.Dial(t)
	d.Send(t, conn, "/queue/orders", 4, "order-")
	conn.Send("/topic/prices.eur", []byte("1.1"))

	out, _ := runAdmin(t, s, exitOK, "status")
	mustContain(t, "status", out, "version:          test", "listeners:        stomp "+d.STOMP, "queues:           1 holding 4 messages", "WAL:", "last checkpoint:", "commits:")
	st := decode[admin.Status](t, first(runAdmin(t, s, exitOK, "status", "--json")))
	if st.Messages != 4 || st.Connections != 1 || st.Journal == nil || st.Journal.Path != filepath.Join(d.Dir, "herald.db") {
		t.Errorf("status --json: got %+v", st)
	}

	out, _ = runAdmin(t, s, exitOK, "queues")
	mustContain(t, "queues", out, "QUEUE", "MESSAGES", "orders", "DLQ")
	if f := strings.Fields(lineWith(out, "orders")); len(f) < 3 || f[1] != "4" || f[2] != "4" {
		t.Errorf("queues row: got %q, want orders 4 4 ...", lineWith(out, "orders"))
	}
	ql := decode[admin.QueueList](t, first(runAdmin(t, s, exitOK, "queues", "--json")))
	if len(ql.Queues) != 1 || ql.Queues[0].Name != "orders" || ql.Queues[0].Messages != 4 {
		t.Errorf("queues --json: got %+v", ql)
	}

	out, _ = runAdmin(t, s, exitOK, "queue", "show", "/queue/orders")
	mustContain(t, "queue show", out, "queue:              orders", "messages:           4", "dead-letter queue:  DLQ.orders (0 messages)",
		"in memory:          4; backlog cache 0 (0 B), 0 page-ins from it")
	qv := decode[appliance.QueueView](t, first(runAdmin(t, s, exitOK, "queue", "show", "--json", "orders")))
	if qv.Enqueued != 4 {
		t.Errorf("queue show --json: got %+v", qv)
	}

	out, _ = runAdmin(t, s, exitOK, "queue", "peek", "--limit", "2", "orders")
	mustContain(t, "queue peek", out, "ID", "BODY", "order-0", "order-1")
	if strings.Contains(out, "order-2") {
		t.Errorf("peek --limit 2 printed a third message:\n%s", out)
	}
	pk := decode[admin.Peek](t, first(runAdmin(t, s, exitOK, "queue", "peek", "--json", "orders")))
	if len(pk.Messages) != 4 || pk.Messages[3].Body != "order-3" {
		t.Errorf("peek --json: got %+v", pk)
	}

	out, _ = runAdmin(t, s, exitOK, "topics")
	mustContain(t, "topics", out, "TOPIC", "prices.eur")
	tl := decode[admin.TopicList](t, first(runAdmin(t, s, exitOK, "topics", "--json")))
	if len(tl.Topics) != 1 || tl.Topics[0].In != 1 {
		t.Errorf("topics --json: got %+v", tl)
	}

	out, _ = runAdmin(t, s, exitOK, "channels")
	mustContain(t, "channels", out, "CHANNEL", "(no multicast channels)")
	if cl := decode[admin.ChannelList](t, first(runAdmin(t, s, exitOK, "channels", "--json"))); cl.Channels == nil || len(cl.Channels) != 0 {
		t.Errorf("channels --json: got %+v, want []", cl)
	}

	out, _ = runAdmin(t, s, exitOK, "connections")
	mustContain(t, "connections", out, "ID", "PEER", "USER", "AUTH", "TLS", "127.0.0.1:", "1.2", "open")
	cl := decode[admin.ConnList](t, first(runAdmin(t, s, exitOK, "connections", "--json")))
	if len(cl.Connections) != 1 || cl.Connections[0].MessagesIn != 5 {
		t.Fatalf("connections --json: got %+v", cl)
	}

	cfgOut := first(runAdmin(t, s, exitOK, "config"))
	if cfg := decode[appliance.Config](t, cfgOut); cfg.DataDir != d.Dir {
		t.Errorf("config: got data_dir %q, want %q", cfg.DataDir, d.Dir)
	}

	out, _ = runAdmin(t, s, exitOK, "log-level")
	if out != "info\n" {
		t.Errorf("log-level: got %q, want info", out)
	}
	out, _ = runAdmin(t, s, exitOK, "log-level", "debug")
	if out != "log level debug (was info)\n" || d.Level.Level().String() != "DEBUG" {
		t.Errorf("log-level debug: got %q, daemon at %s", out, d.Level.Level())
	}
	if lv := decode[admin.LogLevel](t, first(runAdmin(t, s, exitOK, "log-level", "--json", "warn"))); lv.Level != "warn" || lv.Previous != "debug" {
		t.Errorf("log-level --json warn: got %+v", lv)
	}

	out, _ = runAdmin(t, s, exitOK, "await-ready", "--timeout", "5s")
	if out != "ready\n" {
		t.Errorf("await-ready: got %q", out)
	}

	// Dead letters, requeue, purge, delete.
	sub, err := conn.SubscribeReceipt(ctxT(t), "/queue/orders", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	f := <-sub.C()
	nack(t, conn, f.Get("ack"))
	sub.Unsubscribe(ctxT(t))
	waitUntil(t, func() bool { q, ok := d.Broker.Queue("orders"); return ok && q.DLQDepth == 1 && q.Consumers == 0 })
	out, _ = runAdmin(t, s, exitOK, "queue", "requeue", "orders")
	if out != "requeued 1 messages from DLQ.orders to orders\n" {
		t.Errorf("requeue: got %q", out)
	}
	if r := decode[admin.QueueOp](t, first(runAdmin(t, s, exitOK, "queue", "requeue", "--json", "--max", "5", "orders"))); r.Requeued == nil || *r.Requeued != 0 {
		t.Errorf("requeue --json of an empty DLQ: got %+v", r)
	}
	_, stderr := runAdmin(t, s, exitUsage, "queue", "purge", "orders")
	mustContain(t, "purge without --yes", stderr, "add --yes")
	out, _ = runAdmin(t, s, exitOK, "queue", "purge", "--yes", "orders")
	if out != "purged 4 messages from orders\n" {
		t.Errorf("purge: got %q", out)
	}
	if r := decode[admin.QueueOp](t, first(runAdmin(t, s, exitOK, "queue", "delete", "--json", "--yes", "orders"))); r.Deleted == nil || r.Queue != "orders" {
		t.Errorf("delete --json: got %+v", r)
	}
	_, stderr = runAdmin(t, s, exitNotFound, "queue", "show", "orders")
	mustContain(t, "show after delete", stderr, `no such queue "orders"`, "herald queues")

	id := fmt.Sprint(cl.Connections[0].ID)
	out, _ = runAdmin(t, s, exitOK, "connections", "close", "--reason", "maintenance", id)
	if out != "closed connection "+id+"\n" {
		t.Errorf("connections close: got %q", out)
	}
	select {
	case <-conn.Done():
	case <-time.After(5 * time.Second):
		t.Errorf("connection %s still open", id)
	}
	_, stderr = runAdmin(t, s, exitNotFound, "connections", "close", id)
	mustContain(t, "close again", stderr, "no connection "+id)

	out, _ = runAdmin(t, s, exitOK, "top", "--iterations", "2", "--interval", "100ms")
	mustContain(t, "top", out, "herald top", "QUEUE", "TOPIC", "prices.eur", "CHANNEL")

	code, man, _ := runCLI(t, "", "man")
	if code != exitOK || !strings.HasPrefix(man, ".nh") && !strings.Contains(man, ".TH") {
		t.Errorf("man: got %d %.80q, want roff", code, man)
	}
	mustContain(t, "man", man, "queue", `await\-ready`, "backup") // roff escapes hyphens
	code, comp, _ := runCLI(t, "", "completion", "bash")
	if code != exitOK || !strings.Contains(comp, "complete -o bashdefault") {
		t.Errorf("completion bash: got %d %q", code, comp)
	}
	// urfave/cli writes subcommand completions to os.Stdout: ask the binary.
	words, err := exec.Command(buildHerald(t), "queue", "--generate-bash-completion").Output()
	if err != nil || !strings.Contains(string(words), "peek") || !strings.Contains(string(words), "requeue") {
		t.Errorf("bash completion words of queue: got %v %q", err, words)
	}
}

func first(a, _ string) string { return a }

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAdminCLI_ExitCodes: the codes scripts rely on.
func TestAdminCLI_ExitCodes(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.sock")
	_, stderr := runAdmin(t, missing, exitUnavailable, "status")
	mustContain(t, "no daemon", stderr, "herald: status: heraldd is not answering on "+missing, "is it running?")
	runAdmin(t, missing, exitTimeout, "await-ready", "--timeout", "300ms")

	// A path that is not a socket (a data directory's file given by
	// mistake): not a daemon still starting, so at once, saying what it is.
	notSock := filepath.Join(dir, "herald.db")
	if err := os.WriteFile(notSock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, stderr = runAdmin(t, notSock, exitUnavailable, "await-ready", "--timeout", "20s")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("await-ready on a regular file waited %s", d)
	}
	mustContain(t, "await-ready on a file", stderr, notSock+" is not a socket")

	// A socket that accepts and never answers: timeout.
	mute := filepath.Join(dir, "mute.sock")
	ln, err := net.Listen("unix", mute)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	_, stderr = runAdmin(t, mute, exitTimeout, "queues", "--timeout", "300ms")
	mustContain(t, "mute daemon", stderr, "no answer from heraldd")

	d := admintest.Start(t, nil)
	runAdmin(t, d.Socket, exitNotFound, "queue", "peek", "nope")
	runAdmin(t, d.Socket, exitUsage, "log-level", "loud")
	runAdmin(t, d.Socket, exitUsage, "queue", "show")
	runAdmin(t, d.Socket, exitUsage, "queue", "peek", "--limit", "5000", "x")
	runAdmin(t, d.Socket, exitUsage, "connections", "close", "abc")
	code, _, stderr := runCLI(t, "", "queue", "frob")
	if code != exitUsage || !strings.Contains(stderr, "want show, peek, purge, delete or requeue") {
		t.Errorf("queue frob: got %d %q", code, stderr)
	}

	t.Setenv("HERALD_SOCKET", d.Socket)
	if code, out, stderr := runCLI(t, "", "log-level"); code != exitOK || out != "info\n" {
		t.Errorf("with HERALD_SOCKET: got %d %q %q", code, out, stderr)
	}
}

// TestAdminCLI_BackupUnderLoad: herald backup while producers send restores
// to a journal that opens and holds every message receipted before the
// backup began.
func TestAdminCLI_BackupUnderLoad(t *testing.T) {
	d := admintest.Start(t, nil)
	pre := d.Dial(t)
	big := strings.Repeat("x", 2000)
	for i := range 2000 {
		pre.Send("/queue/bulk", []byte(fmt.Sprintf("bulk-%d-%s", i, big)))
	}
	d.Send(t, pre, "/queue/bulk", 1, "last-") // receipt: everything before is committed

	var mu sync.Mutex
	receipted := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range 3 {
		c := d.Dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf("p%d-%d", p, i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := c.SendReceipt(ctx, fmt.Sprintf("/queue/load%d", p), []byte(body))
				cancel()
				if err != nil {
					t.Errorf("send %s: %v", body, err)
					return
				}
				mu.Lock()
				receipted[body] = true
				mu.Unlock()
			}
		}()
	}
	// The producers are under way: some of their receipts precede the backup.
	waitUntil(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(receipted) >= 20
	})
	mu.Lock()
	before := make([]string, 0, len(receipted))
	for b := range receipted {
		before = append(before, b)
	}
	mu.Unlock()
	dest := filepath.Join(t.TempDir(), "herald-backup.db")
	out, stderr := runAdmin(t, d.Socket, exitOK, "backup", dest)
	close(stop)
	wg.Wait()
	mustContain(t, "backup", out, "backup written: "+dest)
	mustContain(t, "backup progress", stderr, "backup: ", "pages (100%)")
	if len(before) == 0 {
		t.Fatal("no message was receipted before the backup")
	}

	s := journal.New(journal.Config{Path: dest, Sync: "normal"})
	if err := s.Open(context.Background()); err != nil {
		t.Fatalf("the backup does not open as a journal: %v", err)
	}
	defer s.Close(context.Background())
	have := map[string]bool{}
	for _, q := range []string{"bulk", "load0", "load1", "load2"} {
		msgs, err := s.Load(context.Background(), q, 0, 1_000_000)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			b := string(m.Body)
			if strings.HasPrefix(b, "bulk-") {
				b = "bulk"
			}
			have[b] = have[b] || true
			if q == "bulk" {
				have["bulk#"+fmt.Sprint(m.ID)] = true
			}
		}
	}
	missing := 0
	for _, b := range before {
		if !have[b] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d messages receipted before the backup are missing from it", missing, len(before))
	}
	bulk := 0
	for k := range have {
		if strings.HasPrefix(k, "bulk#") {
			bulk++
		}
	}
	if bulk != 2001 {
		t.Errorf("queue bulk in the backup: got %d messages, want 2001", bulk)
	}
	t.Logf("backup holds all %d load messages receipted before it began, and the 2001 bulk ones", len(before))

	_, stderr = runAdmin(t, d.Socket, exitOther, "backup", dest)
	mustContain(t, "backup over an existing file", stderr, "exists", "choose a new file name")
}

// TestAdminCLI_SocketRefusesOtherUsers: a user outside the socket's group
// gets permission denied (exit 77); one in the group gets an answer.
func TestAdminCLI_SocketRefusesOtherUsers(t *testing.T) {
	// Root to create a user and switch to it.
	testenv.RequireRoot(t, "useradd", "userdel", "setpriv")
	user := fmt.Sprintf("hrldt%d", os.Getpid()%100000)
	if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", user).Run() })
	var uid, gid int
	if out, err := exec.Command("id", "-u", user).Output(); err != nil {
		t.Fatal(err)
	} else {
		fmt.Sscan(string(out), &uid)
	}
	if out, err := exec.Command("id", "-g", user).Output(); err != nil {
		t.Fatal(err)
	} else {
		fmt.Sscan(string(out), &gid)
	}

	d := admintest.Start(t, nil)
	bin := buildHerald(t)
	// Let the user reach the socket's directory: only the socket's own mode
	// (0660 root:root) may stop it.
	for dir := d.Dir; dir != "/" && dir != os.TempDir(); dir = filepath.Dir(dir) {
		os.Chmod(dir, 0o755)
	}
	asUser := func(groups ...string) (int, string) {
		args := []string{"--reuid=" + fmt.Sprint(uid), "--regid=" + fmt.Sprint(gid)}
		if len(groups) > 0 {
			args = append(args, "--groups="+strings.Join(groups, ","))
		} else {
			args = append(args, "--clear-groups")
		}
		args = append(args, bin, "status", "--socket", d.Socket)
		cmd := exec.Command("setpriv", args...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("setpriv: %v", err)
		}
		return code, string(out)
	}
	code, out := asUser()
	if code != exitNoPerm || !strings.Contains(out, "permission denied: join group") {
		t.Errorf("user %s outside the group: got exit %d %q, want %d permission denied", user, code, out, exitNoPerm)
	}
	// Positive control: the socket's group grants access.
	if err := os.Chown(d.Socket, 0, gid); err != nil {
		t.Fatal(err)
	}
	code, out = asUser(fmt.Sprint(gid))
	if code != exitOK || !strings.Contains(out, "version:") {
		t.Errorf("user %s in the socket's group: got exit %d %q, want the status", user, code, out)
	}
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// buildHerald builds the herald binary once per test run, world-executable.
func buildHerald(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "herald-bin-")
		if err != nil {
			buildErr = err
			return
		}
		os.Chmod(dir, 0o755)
		buildPath = filepath.Join(dir, "herald")
		// Under -race the binary is built with it too: a race makes it exit
		// with status 66, which the tests check.
		args := append(append([]string{"build"}, testenv.GoBuildFlags()...), "-o", buildPath, ".")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

func TestMain(m *testing.M) {
	// herald listen runs in this process: leave the tests' threads alone, note what it asked.
	setMaxProcs = func(n int) { listenMaxProcs.Store(int64(n)) }
	code := m.Run()
	if buildPath != "" {
		os.RemoveAll(filepath.Dir(buildPath))
	}
	if daemonPath != "" {
		os.RemoveAll(filepath.Dir(daemonPath))
	}
	os.Exit(code)
}

func nack(t *testing.T, c interface{ Write(*stomp.Frame) error }, ack string) {
	t.Helper()
	if err := c.Write(stomp.NewFrame(stomp.CmdNack, "id", ack, "requeue", "false")); err != nil {
		t.Fatalf("nack: %v", err)
	}
}

// TestAdminCLI_PeekTruncates shows a cut body as such in the table and the
// JSON, and --full-body fetches it whole.
func TestAdminCLI_PeekTruncates(t *testing.T) {
	d := admintest.Start(t, nil)
	s := d.Socket
	conn := d.Dial(t)
	long := strings.Repeat("x", 3000)
	if _, err := conn.SendReceipt(context.Background(), "/queue/big", []byte(long)); err != nil {
		t.Fatal(err)
	}
	out, _ := runAdmin(t, s, exitOK, "queue", "peek", "big")
	row := lineWith(out, "xxxx")
	if f := strings.Fields(row); len(f) < 6 || f[4] != "3000" || f[len(f)-1] != "[cut]" {
		t.Errorf("peek row: got %q, want BYTES 3000 and a body ending in [cut]", row)
	}
	pk := decode[admin.Peek](t, first(runAdmin(t, s, exitOK, "queue", "peek", "--json", "big")))
	if len(pk.Messages) != 1 || len(pk.Messages[0].Body) != admin.DefaultMaxBody || !pk.Messages[0].BodyTruncated || pk.Messages[0].BodyBytes != 3000 {
		t.Fatalf("peek --json: got %+v, want one body of %d bytes, body_truncated, body_bytes 3000", pk, admin.DefaultMaxBody)
	}
	pk = decode[admin.Peek](t, first(runAdmin(t, s, exitOK, "queue", "peek", "--json", "--max-body", "10", "big")))
	if len(pk.Messages) != 1 || pk.Messages[0].Body != long[:10] || !pk.Messages[0].BodyTruncated {
		t.Errorf("peek --max-body 10: got %+v, want a 10-byte body, truncated", pk)
	}
	pk = decode[admin.Peek](t, first(runAdmin(t, s, exitOK, "queue", "peek", "--json", "--full-body", "big")))
	if len(pk.Messages) != 1 || pk.Messages[0].Body != long || pk.Messages[0].BodyTruncated {
		t.Errorf("peek --full-body: got body of %d bytes, truncated %v; want 3000, false", len(pk.Messages[0].Body), pk.Messages[0].BodyTruncated)
	}
	out, _ = runAdmin(t, s, exitOK, "queue", "peek", "--full-body", "big")
	if row := lineWith(out, "xxxx"); strings.Contains(row, "[cut]") {
		t.Errorf("peek --full-body row: got %q, want no [cut]", row)
	}
	runAdmin(t, s, exitUsage, "queue", "peek", "--full-body", "--max-body", "5", "big")
}

// TestAdminCLI_TopicsLimit lists the first --limit topics and says how many
// there are.
func TestAdminCLI_TopicsLimit(t *testing.T) {
	d := admintest.Start(t, nil)
	conn := d.Dial(t)
	for i := range 4 {
		if _, err := conn.SendReceipt(context.Background(), fmt.Sprintf("/topic/t.%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	out, _ := runAdmin(t, d.Socket, exitOK, "topics", "--limit", "3")
	mustContain(t, "topics --limit 3", out, "t.0", "t.2", "(3 of 4 topics shown; see --limit)")
	if strings.Contains(out, "t.3") {
		t.Errorf("topics --limit 3 printed a fourth topic:\n%s", out)
	}
	tl := decode[admin.TopicList](t, first(runAdmin(t, d.Socket, exitOK, "topics", "--json", "--limit", "2")))
	if len(tl.Topics) != 2 || tl.Total != 4 {
		t.Errorf("topics --json --limit 2: got %+v, want 2 topics of 4", tl)
	}
	out, _ = runAdmin(t, d.Socket, exitOK, "topics")
	if strings.Contains(out, "shown") {
		t.Errorf("topics (all shown): got %q, want no 'shown' line", out)
	}
	runAdmin(t, d.Socket, exitUsage, "topics", "--limit", "100001")
}
