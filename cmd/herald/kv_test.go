package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testbroker"
)

func startKVBroker(t *testing.T) string {
	t.Helper()
	return testbroker.Start(t, func(c *appliance.Config) { c.KV.History = 5 }).Addr
}

func mustKV(t *testing.T, addr string, want int, stdin string, args ...string) string {
	t.Helper()
	code, out, stderr := runCLI(t, stdin, append([]string{"--server", addr, "kv"}, args...)...)
	if code != want {
		t.Fatalf("herald kv %v: exit %d, want %d; stdout %q stderr %q", args, code, want, out, stderr)
	}
	return out
}

// put (argument, --file, stdin, --content-type), get (plain, --raw,
// --json), compare-and-set with --if-revision (a conflict exits 1 naming
// the current revision and stores nothing), del, get of a missing key (66).
func TestKVCLI_PutGetCASDel(t *testing.T) {
	addr := startKVBroker(t)
	if out := mustKV(t, addr, 0, "", "put", "config.site1.db", `{"host":"db1"}`, "--content-type", "application/json"); out != "1\n" {
		t.Errorf("put: stdout %q, want the revision 1", out)
	}
	if out := mustKV(t, addr, 0, "", "get", "/kv/config.site1.db"); out != `{"host":"db1"}`+"\n" {
		t.Errorf("get: %q", out)
	}
	var e kvEntry
	if err := json.Unmarshal([]byte(mustKV(t, addr, 0, "", "get", "--json", "config.site1.db")), &e); err != nil {
		t.Fatal(err)
	}
	if e.Key != "config.site1.db" || e.Revision != 1 || e.ContentType != "application/json" || e.Value != `{"host":"db1"}` {
		t.Errorf("get --json: %+v", e)
	}
	// Value from stdin, whole (newlines kept), and from --file; --raw is exact.
	multi := "a=1\nb=2\n\xff"
	if out := mustKV(t, addr, 0, multi, "put", "config.site1.ini"); out != "2\n" {
		t.Errorf("put from stdin: %q", out)
	}
	if out := mustKV(t, addr, 0, "", "get", "--raw", "config.site1.ini"); out != multi {
		t.Errorf("get --raw: %q, want %q", out, multi)
	}
	f := filepath.Join(t.TempDir(), "v")
	os.WriteFile(f, []byte("from a file"), 0o644)
	mustKV(t, addr, 0, "", "put", "--file", f, "config.site2.db")
	if out := mustKV(t, addr, 0, "", "get", "config.site2.db"); out != "from a file\n" {
		t.Errorf("get after put --file: %q", out)
	}
	// Compare-and-set.
	if out := mustKV(t, addr, 0, "", "put", "--if-revision", "1", "config.site1.db", "db3", "--json"); strings.TrimSpace(out) != `{"key":"config.site1.db","revision":4}` {
		t.Errorf("CAS put --json: %q", out)
	}
	code, out, stderr := runCLI(t, "", "--server", addr, "kv", "put", "--if-revision", "1", "config.site1.db", "db4")
	if code != exitOther || out != "" || !strings.Contains(stderr, "config.site1.db is at revision 4, not 1") || !strings.Contains(stderr, "herald kv get") {
		t.Errorf("stale CAS: exit %d stdout %q stderr %q, want 1 naming revision 4 and what to do", code, out, stderr)
	}
	code, _, stderr = runCLI(t, "", "--server", addr, "kv", "put", "--if-revision", "0", "config.site1.db", "db5")
	if code != exitOther || !strings.Contains(stderr, "is at revision 4, not 0") {
		t.Errorf("create-only on an existing key: exit %d %q", code, stderr)
	}
	if out := mustKV(t, addr, 0, "", "get", "config.site1.db"); out != "db3\n" {
		t.Errorf("after the conflicts: %q, want db3 (nothing stored)", out)
	}
	mustKV(t, addr, 0, "", "put", "--if-revision", "0", "config.site3.db", "new")
	// Delete, then a missing key.
	if out := mustKV(t, addr, 0, "", "del", "config.site3.db", "--json"); strings.TrimSpace(out) != `{"key":"config.site3.db","revision":6,"deleted":true}` {
		t.Errorf("del --json: %q", out)
	}
	code, out, stderr = runCLI(t, "", "--server", addr, "kv", "get", "config.site3.db")
	if code != exitNotFound || out != "" || !strings.Contains(stderr, "no key config.site3.db") || !strings.Contains(stderr, "herald kv ls config") {
		t.Errorf("get of a deleted key: exit %d %q %q, want 66 with a hint", code, out, stderr)
	}
	code, out, stderr = runCLI(t, "", "--server", addr, "kv", "del", "config.site3.db")
	if code != 0 || out != "" || !strings.Contains(stderr, "does not exist") {
		t.Errorf("del of a missing key: exit %d %q %q, want 0 and a note", code, out, stderr)
	}
	code, _, stderr = runCLI(t, "", "--server", addr, "kv", "del", "--if-revision", "1", "config.site2.db")
	if code != exitOther || !strings.Contains(stderr, "is at revision 3, not 1") {
		t.Errorf("stale CAS del: exit %d %q", code, stderr)
	}
}

// ls lists keys under a bucket, a prefix or a pattern (text and --json);
// history prints the kept revisions oldest first.
func TestKVCLI_LsHistory(t *testing.T) {
	addr := startKVBroker(t)
	for _, kv := range [][2]string{{"config.site1.db", "a"}, {"config.site1.web", "b"}, {"config.site2.db", "c"}, {"other.x", "d"}, {"config.site1.db", "e\tf"}} {
		mustKV(t, addr, 0, "", "put", kv[0], kv[1])
	}
	if out := mustKV(t, addr, 0, "", "ls", "config"); out != "config.site1.db\nconfig.site1.web\nconfig.site2.db\n" {
		t.Errorf("ls config: %q", out)
	}
	if out := mustKV(t, addr, 0, "", "ls", "config.site1"); out != "config.site1.db\nconfig.site1.web\n" {
		t.Errorf("ls config.site1: %q", out)
	}
	if out := mustKV(t, addr, 0, "", "ls", "/kv/config.*.db"); out != "config.site1.db\nconfig.site2.db\n" {
		t.Errorf("ls config.*.db: %q", out)
	}
	if out := mustKV(t, addr, 0, "", "ls", "nobucket"); out != "" {
		t.Errorf("ls of an empty bucket: %q", out)
	}
	var list []struct {
		Key      string `json:"key"`
		Revision uint64 `json:"revision"`
		Bytes    int    `json:"bytes"`
	}
	if err := json.Unmarshal([]byte(mustKV(t, addr, 0, "", "ls", "--json", "config.site1")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Key != "config.site1.db" || list[0].Revision != 4 || list[0].Bytes != 3 || list[1].Revision != 2 {
		t.Errorf("ls --json: %+v", list)
	}
	out := mustKV(t, addr, 0, "", "history", "config.site1.db")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "REVISION") ||
		strings.Join(strings.Fields(lines[1]), " ") != "1 PUT - 1 a" || strings.Join(strings.Fields(lines[2]), " ") != `4 PUT - 3 "e\tf"` {
		t.Errorf("history:\n%s", out)
	}
	var hist []kvEntry
	if err := json.Unmarshal([]byte(mustKV(t, addr, 0, "", "history", "--json", "config.site1.db")), &hist); err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].Revision != 1 || hist[1].Value != "e\tf" || hist[1].Operation != "PUT" {
		t.Errorf("history --json: %+v", hist)
	}
}

// watch prints the snapshot, the marker, then the changes (a delete
// included), as text and as JSON lines.
func TestKVCLI_Watch(t *testing.T) {
	addr := startKVBroker(t)
	mustKV(t, addr, 0, "", "put", "config.site1.db", "db1")
	mustKV(t, addr, 0, "", "put", "config.site2.db", "db2")
	mustKV(t, addr, 0, "", "put", "other.k", "x")
	c, err := client.Dial(context.Background(), addr, client.Options{DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, asJSON := range []bool{false, true} {
		type res struct {
			code        int
			out, stderr string
		}
		done := make(chan res, 1)
		args := []string{"--server", addr, "kv", "watch", "--count", "2", "--timeout", "20s", "config.>"}
		if asJSON {
			args = append(args, "--json")
		}
		// A second watcher of our own tells when the CLI's watch is in place:
		// every change after the CLI's marker reaches it, so writes start
		// once the CLI has printed... which it cannot tell us; instead write
		// until the CLI exits, each write a change it must print.
		go func() {
			code, out, stderr := runCLI(t, "", args...)
			done <- res{code, out, stderr}
		}()
		var r res
		for i := 0; ; i++ {
			op := stomp.Header{Key: "kv-operation", Value: "PUT"}
			if i%2 == 1 {
				op.Value = "DEL"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := c.SendReceipt(ctx, "/kv/config.site3.db", []byte("v"), op)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			select {
			case r = <-done:
			case <-time.After(50 * time.Millisecond):
				if i < 400 {
					continue
				}
				t.Fatal("watch did not print 2 changes")
			}
			break
		}
		if r.code != 0 {
			t.Fatalf("watch (json %v): exit %d: %s", asJSON, r.code, r.stderr)
		}
		lines := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
		if len(lines) < 5 {
			t.Fatalf("watch: %q", r.out)
		}
		// The snapshot holds site1 and site2 (site3 perhaps, from the previous
		// round or a write before the marker), then the marker, then exactly two
		// changes of site3, alternating PUT and DEL.
		mark := -1
		for i, l := range lines {
			if strings.HasPrefix(l, "#SNAPSHOT-COMPLETE ") || strings.HasPrefix(l, `{"snapshot_complete":`) {
				mark = i
			}
		}
		if mark < 2 || len(lines)-mark-1 != 2 {
			t.Fatalf("watch: want the snapshot, one marker, then 2 changes; got %q", r.out)
		}
		if !asJSON {
			if lines[0] != "1\tPUT\tconfig.site1.db\tdb1" || lines[1] != "2\tPUT\tconfig.site2.db\tdb2" {
				t.Errorf("snapshot lines: %q", lines[:mark])
			}
			a, b := strings.Split(lines[mark+1], "\t"), strings.Split(lines[mark+2], "\t")
			if len(a) < 3 || len(b) < 3 || a[2] != "config.site3.db" || b[2] != "config.site3.db" || a[1] == b[1] {
				t.Errorf("change lines: %q %q", lines[mark+1], lines[mark+2])
			}
			continue
		}
		var first, change kvEntry
		json.Unmarshal([]byte(lines[0]), &first)
		json.Unmarshal([]byte(lines[mark+1]), &change)
		var m map[string]uint64
		json.Unmarshal([]byte(lines[mark]), &m)
		if !first.Snapshot || first.Key != "config.site1.db" || first.Value != "db1" || change.Snapshot || change.Key != "config.site3.db" || change.Revision <= m["snapshot_complete"] {
			t.Errorf("watch --json: first %+v, marker %v, change %+v", first, m, change)
		}
	}
}

// Bad arguments are usage errors (64) saying what is wanted; a server that
// is not there is 69, as for send.
func TestKVCLI_Errors(t *testing.T) {
	down := closedAddr(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"kv", "get"}, exitUsage, "wrong number of arguments: herald kv get"},
		{[]string{"kv", "get", "nobucketdot"}, exitUsage, "want BUCKET.KEY"},
		{[]string{"kv", "get", "config.>"}, exitUsage, "herald kv ls config.>"},
		{[]string{"kv", "put", "--if-revision", "x", "a.b", "v"}, exitUsage, "--if-revision"},
		{[]string{"kv", "put", "--file", "/nonexistent/f", "a.b"}, exitNoInput, "/nonexistent/f"},
		{[]string{"kv", "put", "--file", "f", "a.b", "v"}, exitUsage, "not both"},
		{[]string{"kv", "ls", ">"}, exitUsage, "want a bucket"},
		{[]string{"kv", "frob"}, exitUsage, "unknown kv command \"frob\""},
		{[]string{"--server", down, "kv", "get", "a.b"}, exitUnavailable, "is heraldd running?"},
		{[]string{"--server", down, "kv", "put", "a.b", "v"}, exitUnavailable, "is heraldd running?"},
	} {
		code, _, stderr := runCLI(t, "", tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d %q, want %d with %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
	// A limit of the server is told as the server says it, naming the setting.
	addr := testbroker.Start(t, func(c *appliance.Config) { c.KV.MaxValueBytes = 8 }).Addr
	code, _, stderr := runCLI(t, "", "--server", addr, "kv", "put", "a.b", "far too long a value")
	if code != exitOther || !strings.Contains(stderr, "max_value_bytes") {
		t.Errorf("value over the limit: exit %d %q", code, stderr)
	}
}
