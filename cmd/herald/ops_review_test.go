package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/internal/testenv"
)

// docs/admin-api.md: the CLI's --json output is exactly the API's answer.
// A wildcard subscription is listed under its pattern ("prices.>"), which
// the API writes as is and the CLI wrote as "prices.\u003e".
func TestAdminCLI_TopicsJSONIsTheAPIAnswer(t *testing.T) {
	d := admintest.Start(t, nil)
	conn := d.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := conn.SubscribeReceipt(ctx, "/topic/prices.>", "auto"); err != nil {
		t.Fatal(err)
	}
	c := admin.NewClient(d.Socket)
	defer c.Close()
	api, err := c.Do(ctx, "GET", "/v1/topics", nil)
	if err != nil {
		t.Fatal(err)
	}
	cli, _ := runAdmin(t, d.Socket, exitOK, "topics", "--json")
	if cli != string(api) {
		t.Errorf("herald topics --json differs from GET /v1/topics:\nCLI: %s\nAPI: %s", cli, api)
	}
}

// herald top took the shared --json flag and printed its table anyway
// (exit 0): its frames must be JSON, or the flag refused (it is, exit 64).
func TestAdminCLI_TopJSON(t *testing.T) {
	d := admintest.Start(t, nil)
	code, out, errOut := runCLI(t, "", "top", "--socket", d.Socket, "--json", "--iterations", "1")
	if code == exitUsage {
		if !strings.Contains(errOut, "--json") {
			t.Errorf("herald top --json refused without naming the flag: %s", errOut)
		}
		return // refused: fine
	}
	var v any
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&v); err != nil {
		t.Errorf("herald top --json --iterations 1: exit %d, output is not JSON (%v):\n%s%s", code, err, firstLines(out, 4), errOut)
	}
}

func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, "\n") + "\n"
}

// The documented setup (README, man heraldd: "/etc/herald/users.toml ...
// mode 0640 root:herald") is "sudo herald user add --file
// /etc/herald/users.toml NAME" then auth.users_file. A new file got mode
// 0640 and the group of its directory, but the packages install /etc/herald
// root:root (packaging/nfpm.yaml): the daemon's user (herald, here uid/gid
// 54321) could not read it. It now gets the group of the herald.toml
// beside it. Needs root and setpriv.
func TestUser_AddInPackagedEtcReadableByDaemon(t *testing.T) {
	testenv.RequireRoot(t, "setpriv")
	// /etc/herald as nfpm.yaml installs it.
	y, err := os.ReadFile("../../packaging/nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^  - dst: /etc/herald\n    type: dir\n    file_info: \{mode: (0\d+), owner: (\w+), group: (\w+)\}`).FindSubmatch(y)
	if m == nil {
		t.Fatal("no /etc/herald directory entry in packaging/nfpm.yaml")
	}
	mode, _ := strconv.ParseUint(string(m[1]), 8, 32)
	const heraldID = 54321 // the herald user and group of this test
	ids := map[string]int{"root": 0, "herald": heraldID}
	etc, err := os.MkdirTemp("", "review-etc-herald-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(etc) })
	if err := os.Chown(etc, ids[string(m[2])], ids[string(m[3])]); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(etc, os.FileMode(mode)); err != nil {
		t.Fatal(err)
	}
	// herald.toml as packaged: 0640 root:herald (readable by the daemon).
	conf := filepath.Join(etc, "herald.toml")
	os.WriteFile(conf, []byte("[auth]\nusers_file = \""+filepath.Join(etc, "users.toml")+"\"\n"), 0o640)
	os.Chown(conf, 0, heraldID)
	users := filepath.Join(etc, "users.toml")
	code, _, errOut := runCLI(t, "pw\n", "user", "add", "--file", users, "--password-stdin", "alice")
	if code != 0 {
		t.Fatalf("herald user add: exit %d: %s", code, errOut)
	}
	asDaemon := func(path string) error {
		out, err := exec.Command("setpriv", "--reuid", strconv.Itoa(heraldID), "--regid", strconv.Itoa(heraldID), "--clear-groups", "cat", path).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
		}
		return nil
	}
	if err := asDaemon(conf); err != nil {
		t.Fatalf("the daemon's user cannot read the packaged herald.toml either (test setup): %v", err)
	}
	if err := asDaemon(users); err != nil {
		fi, _ := os.Stat(users)
		st := fi.Sys().(*syscall.Stat_t)
		t.Errorf("users file made by herald user add in /etc/herald (%s %s:%s as packaged) is %v %d:%d: the daemon's user (group herald) cannot read it: %v",
			m[1], m[2], m[3], fi.Mode().Perm(), st.Uid, st.Gid, err)
	}
}
