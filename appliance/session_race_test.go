package appliance_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// The admin view reads what CONNECT negotiated (login, version) while
// connections are being set up by their own goroutines. Under -race this
// fails if the two are not synchronised; without it, it still checks that a
// view never shows half a CONNECT (a version without its login).
func TestConnections_PolledDuringConnects(t *testing.T) {
	tb := mustStartBroker(t, nil)
	const n = 40
	stop := make(chan struct{})
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		bad   []appliance.ConnView
		polls int
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, v := range tb.B.Connections() {
				// Before CONNECT both are empty; after it both are set.
				if (v.Version == "") != (v.Login == "") || (v.Version != "" && v.Version != stomp.V12) {
					mu.Lock()
					bad = append(bad, v)
					mu.Unlock()
				}
			}
			mu.Lock()
			polls++
			mu.Unlock()
		}
	}()
	conns := make([]*client.Conn, 0, n)
	for i := 0; i < n; i++ {
		login := "user-" + strconv.Itoa(i)
		conns = append(conns, tb.Dial(t, func(o *client.Options) { o.Login = login }))
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("views with half a CONNECT: %+v", bad)
	}
	if polls == 0 {
		t.Fatal("the admin view was never polled")
	}
	logins := map[string]bool{}
	for _, v := range tb.B.Connections() {
		if v.Version != stomp.V12 {
			t.Errorf("connection %d: version %q, want %s", v.ID, v.Version, stomp.V12)
		}
		logins[v.Login] = true
	}
	for i := range conns {
		if login := "user-" + strconv.Itoa(i); !logins[login] {
			t.Errorf("no connection with login %s in %v", login, logins)
		}
	}
}

// An operator closing a connection while its CONNECT is being handled: the
// writer sends the ERROR with whatever version CONNECT has published (the
// writer and the reader share it), and the connection ends.
func TestCloseConnection_DuringConnect(t *testing.T) {
	tb := mustStartBroker(t, nil)
	for i := 0; i < 20; i++ {
		before := map[uint64]bool{}
		for _, v := range tb.B.Connections() {
			before[v.ID] = true
		}
		r := dialRaw(t, tb)
		// The broker lists the connection once it has accepted it: close
		// it from here while CONNECT is on its way (they race on purpose).
		done := make(chan bool)
		go func() {
			closed := false
			for deadline := time.Now().Add(5 * time.Second); !closed && time.Now().Before(deadline); {
				for _, v := range tb.B.Connections() {
					if !before[v.ID] {
						closed = tb.B.CloseConnection(v.ID, "operator says so")
						break
					}
				}
			}
			done <- closed
		}()
		r.write("CONNECT\naccept-version:1.2\nlogin:racer\nhost:test\n\n\x00")
		if !<-done {
			t.Fatal("CloseConnection found no connection to close")
		}
		for {
			f := r.frame()
			if f.Command == stomp.CmdConnected {
				r.r.SetVersion(f.Get("version"))
				continue
			}
			if f.Command != stomp.CmdError || f.Get("message") != "operator says so" {
				t.Fatalf("got %s %v, want the operator's ERROR", f.Command, f.Headers)
			}
			break
		}
		r.closed()
		r.c.Close()
	}
}
