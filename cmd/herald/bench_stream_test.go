package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testenv"
)

// BenchmarkAppendPeers: durable appends acknowledged after an fsync, in
// the same run, against three servers run as processes on this machine:
// heraldd's stream appends and queue SENDs (journal.sync = "full",
// RECEIPTs) and NATS JetStream's file stream (sync_interval: always,
// publish acknowledgements). 4 producers, 64 acknowledgements outstanding
// each, 100-byte bodies; msgs/s per case. JetStream needs a nats-server
// that has sync_interval (2.10 or later): HERALD_NATS_SERVER names it,
// else nats-server on PATH; the case is skipped with the reason when it
// is missing or older.
func BenchmarkAppendPeers(b *testing.B) {
	const producers, window, size = 4, 64, 100
	dir := b.TempDir()
	bin := filepath.Join(dir, "heraldd")
	args := append(append([]string{"build"}, testenv.GoBuildFlags()...), "-o", bin, "github.com/herald-mq/herald/cmd/heraldd")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		b.Fatalf("go build heraldd: %v: %s", err, out)
	}
	addr := freeTCP(b)
	cfg := filepath.Join(dir, "heraldd.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("data_dir = %q\n[stomp]\nlisten = %q\n[journal]\nsync = \"full\"\n[admin]\nsocket = %q\n[log]\nlevel = \"warn\"\n",
		filepath.Join(dir, "data"), addr, filepath.Join(dir, "admin.sock"))), 0o600)
	startProc(b, addr, bin, "--config", cfg)
	body := make([]byte, size)
	for _, dest := range []string{"/queue/bench", "/stream/bench"} {
		b.Run("herald-"+strings.Split(dest, "/")[1], func(b *testing.B) {
			conns := make([]*client.Conn, producers)
			for i := range conns {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				c, err := client.Dial(ctx, addr, client.Options{})
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				conns[i] = c
			}
			b.ResetTimer()
			per := b.N/producers + 1
			var wg sync.WaitGroup
			for _, c := range conns {
				wg.Add(1)
				go func(c *client.Conn) {
					defer wg.Done()
					pending := make(chan (<-chan client.Result), window)
					for i := 0; i < per; i++ {
						if len(pending) == window {
							if r := <-<-pending; r.Err != nil {
								b.Error(r.Err)
								return
							}
						}
						ch, err := c.SendAsync(dest, body)
						if err != nil {
							b.Error(err)
							return
						}
						pending <- ch
					}
					for len(pending) > 0 {
						if r := <-<-pending; r.Err != nil {
							b.Error(r.Err)
						}
					}
				}(c)
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(per*producers)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
	b.Run("jetstream-file-sync-always", func(b *testing.B) {
		natsBin := os.Getenv("HERALD_NATS_SERVER")
		if natsBin == "" {
			var err error
			if natsBin, err = exec.LookPath("nats-server"); err != nil {
				b.Skip("nats-server not found: set HERALD_NATS_SERVER to a nats-server 2.10 or later (go install github.com/nats-io/nats-server/v2@latest)")
			}
		}
		jsDir := b.TempDir()
		naddr := freeTCP(b)
		ncfg := filepath.Join(jsDir, "js.conf")
		os.WriteFile(ncfg, []byte(fmt.Sprintf("listen: %s\njetstream {\n  store_dir: %q\n  sync_interval: always\n}\n", naddr, filepath.Join(jsDir, "store"))), 0o600)
		if out, err := exec.Command(natsBin, "-c", ncfg, "-t").CombinedOutput(); err != nil {
			b.Skipf("%s cannot sync every write (sync_interval: always needs nats-server 2.10 or later; set HERALD_NATS_SERVER): %s", natsBin, out)
		}
		startProc(b, naddr, natsBin, "-c", ncfg)
		ctx := context.Background()
		admin, err := natsDial(ctx, naddr, 5*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		defer admin.nc.Close()
		// Create the stream: a request on $JS.API.STREAM.CREATE.
		admin.write("SUB _INBOX.admin 1\r\n")
		req := `{"name":"BENCH","subjects":["bench.js"],"storage":"file","retention":"limits","num_replicas":1}`
		admin.write(fmt.Sprintf("PUB $JS.API.STREAM.CREATE.BENCH _INBOX.admin %d\r\n%s\r\n", len(req), req))
		admin.nc.SetDeadline(time.Now().Add(10 * time.Second))
		if reply, err := natsReply(admin); err != nil || !strings.Contains(reply, `"config"`) {
			b.Fatalf("create JetStream stream: %q %v", reply, err)
		}
		conns := make([]*natsConn, producers)
		for i := range conns {
			c, err := natsDial(ctx, naddr, 5*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer c.nc.Close()
			c.write(fmt.Sprintf("SUB _INBOX.p%d 1\r\n", i))
			conns[i] = c
		}
		b.ResetTimer()
		per := b.N/producers + 1
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Add(2)
			credit := make(chan struct{}, window)
			for k := 0; k < window; k++ {
				credit <- struct{}{}
			}
			go func() { // publish acks: one slot back each
				defer wg.Done()
				for k := 0; k < per; k++ {
					reply, err := natsReply(c)
					if err != nil || !strings.Contains(reply, `"seq"`) {
						b.Errorf("JetStream publish ack: %q %v", reply, err)
						return
					}
					credit <- struct{}{}
				}
			}()
			go func(i int) {
				defer wg.Done()
				hdr := fmt.Sprintf("PUB bench.js _INBOX.p%d %d\r\n", i, size)
				msg := hdr + string(body) + "\r\n"
				for k := 0; k < per; k++ {
					<-credit
					if err := c.write(msg); err != nil {
						b.Error(err)
						return
					}
				}
			}(i)
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(per*producers)/b.Elapsed().Seconds(), "msgs/s")
	})
}

// natsReply reads the next MSG's payload (PING answered, +OK skipped).
func natsReply(c *natsConn) (string, error) {
	for {
		line, err := c.readLine()
		if err != nil {
			return "", err
		}
		switch {
		case line == "PING":
			c.write("PONG\r\n")
		case strings.HasPrefix(line, "-ERR"):
			return line, fmt.Errorf("nats: %s", line)
		case strings.HasPrefix(line, "MSG "):
			f := strings.Fields(line)
			var n int
			fmt.Sscan(f[len(f)-1], &n)
			buf := make([]byte, n+2)
			if _, err := ioReadFull(c, buf); err != nil {
				return "", err
			}
			return string(buf[:n]), nil
		}
	}
}

func ioReadFull(c *natsConn, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := c.br.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func freeTCP(b testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startProc runs a server and waits for addr to answer; it is killed at
// cleanup.
func startProc(b testing.TB, addr, bin string, args ...string) {
	cmd := exec.Command(bin, args...) // its log is not kept
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s did not listen on %s", bin, addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
