package admin_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/internal/testenv"
)

// TestSocket_NoWindowHelper is the unprivileged side of
// TestSocket_NoWindowBeforeChmod: run as uid 65534, it tries, in a tight
// loop, to connect to every socket it can reach in the directory
// HERALD_TEST_SOCK_DIR and in the directories inside it; once connected it
// asks GET /v1/status and prints the status line.
func TestSocket_NoWindowHelper(t *testing.T) {
	dir := os.Getenv("HERALD_TEST_SOCK_DIR")
	if dir == "" {
		t.Skip("run by TestSocket_NoWindowBeforeChmod only")
	}
	try := func(p string) bool {
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err != nil {
			fmt.Println("SOCKET", err)
			os.Exit(3)
		}
		if syscall.Connect(fd, &syscall.SockaddrUnix{Name: p}) != nil {
			syscall.Close(fd)
			return false
		}
		fmt.Printf("CONNECTED %s uid=%d\n", p, os.Getuid())
		c, err := net.FileConn(os.NewFile(uintptr(fd), "admin"))
		if err != nil {
			fmt.Println("FILECONN", err)
			os.Exit(3)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET /v1/status HTTP/1.1\r\nHost: herald\r\nConnection: close\r\n\r\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		fmt.Printf("RESPONSE %q %v\n", strings.TrimSpace(line), err)
		return true
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		es, _ := os.ReadDir(dir)
		for _, e := range es {
			p := filepath.Join(dir, e.Name())
			if e.IsDir() {
				inner, _ := os.ReadDir(p)
				for _, ie := range inner {
					if try(filepath.Join(p, ie.Name())) {
						os.Exit(0)
					}
				}
				continue
			}
			if try(p) {
				os.Exit(0)
			}
		}
	}
	fmt.Println("TIMEOUT")
	os.Exit(2)
}

// TestSocket_NoWindowBeforeChmod: under umask 0, in a socket directory
// others may traverse (a data directory or /run/herald made by hand with
// mode 0755), a local user with no right to the admin socket (uid 65534,
// not in its group) cannot connect to it at any moment of its creation.
// The socket used to be bound at PATH.PID.tmp with mode 0777 before its
// chmod to 0660: such a user was served the admin API within 2 starts.
// Here: 600 starts with the helper connecting to everything it can reach.
func TestSocket_NoWindowBeforeChmod(t *testing.T) {
	testenv.RequireRoot(t)
	d := admintest.Start(t, nil)
	dir, err := os.MkdirTemp("", "herald-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "admin.sock")
	// The test binary, where uid 65534 may run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper.test")
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	cmd := exec.Command(bin, "-test.run=^TestSocket_NoWindowHelper$", "-test.count=1")
	cmd.Env = []string{"HERALD_TEST_SOCK_DIR=" + dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var connected atomic.Bool
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "CONNECTED") {
				connected.Store(true)
			}
			lines <- sc.Text()
		}
		close(lines)
	}()
	time.Sleep(300 * time.Millisecond) // the helper is looping
	for i := range 600 {
		srv := admin.New(admin.Options{Socket: sock, Broker: d.Broker, OpTimeout: time.Second})
		if err := srv.Start(context.Background()); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != admin.DefaultSocketMode {
			t.Fatalf("start %d: socket %v %v, want mode %v", i, fi, err, admin.DefaultSocketMode)
		}
		time.Sleep(200 * time.Microsecond)
		if connected.Load() {
			var got []string
			for l := range lines {
				got = append(got, l)
				if strings.HasPrefix(l, "RESPONSE") {
					break
				}
			}
			srv.Close(context.Background())
			t.Fatalf("after %d starts, uid 65534 (no access to a 0660 root:root socket) connected to the admin socket during its creation: %v", i+1, got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		srv.Close(ctx)
		cancel()
		if es, _ := os.ReadDir(dir); len(es) != 1 {
			t.Fatalf("start %d: the socket directory holds %v after Close, want only the helper binary", i, es)
		}
	}
	if connected.Load() {
		t.Fatal("uid 65534 connected to the admin socket")
	}
}
