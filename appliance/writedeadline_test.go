package appliance

import (
	"net"
	"testing"
	"time"
)

// deadlineConn records the write deadlines set on it.
type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

// TestArmWriteDeadline: every write the writer starts has at least
// stomp.write_timeout and at most 9/8 of it before its deadline; a deadline
// still in that range is kept (no timer re-armed per write), one nearer or
// farther (time passed, a dropped session's shorter timeout, a reload) is
// set again.
func TestArmWriteDeadline(t *testing.T) {
	b := &Broker{}
	cfg := &Config{}
	cfg.Stomp.WriteTimeout.Duration = 8 * time.Second
	b.conf.Store(cfg)
	c := &deadlineConn{}
	s := &session{b: b, conn: c}

	// within checks the deadline the write about to start has, from
	// just before to just after the call.
	within := func(before, after time.Time, wt time.Duration) {
		t.Helper()
		d := c.set[len(c.set)-1]
		if d.Before(before.Add(wt)) || d.After(after.Add(wt+wt/8)) {
			t.Fatalf("deadline %v after the call, want between %v and %v", d.Sub(after), wt, wt+wt/8)
		}
	}
	before := time.Now()
	s.armWriteDeadline()
	within(before, time.Now(), 8*time.Second)
	if len(c.set) != 1 || !s.wdl.Equal(c.set[0]) {
		t.Fatalf("first write: %d deadlines set, writer's record %v; want 1, the one set", len(c.set), s.wdl)
	}
	for range 100 {
		s.armWriteDeadline()
	}
	if len(c.set) != 1 {
		t.Fatalf("%d deadlines set by 100 writes right after the first; want the first kept", len(c.set))
	}

	// Less than write_timeout left (an eighth of it passed): set again.
	s.wdl = time.Now().Add(8*time.Second - time.Millisecond)
	before = time.Now()
	s.armWriteDeadline()
	within(before, time.Now(), 8*time.Second)
	if len(c.set) != 2 {
		t.Fatalf("deadline nearer than write_timeout kept")
	}
	// Passed and cleared by a direct write (rawWrite clears wdl with
	// it): set again.
	s.wdl = time.Time{}
	s.armWriteDeadline()
	if len(c.set) != 3 {
		t.Fatalf("cleared deadline not set again")
	}

	// A dropped session (hurry): its writes get the short timeout, not
	// what is left of the long one.
	s.hurry.Store(true)
	before = time.Now()
	s.armWriteDeadline()
	within(before, time.Now(), lastWriteTimeout)
	if len(c.set) != 4 {
		t.Fatalf("hurried session kept the longer deadline")
	}
	// A deadline that suits the hurried timeout but was set before the
	// session was hurried is set again: drop() set its own on the socket
	// meanwhile, which rawWrite may have cleared once it passed.
	s.hurry.Store(false)
	s.wdl = time.Now().Add(lastWriteTimeout + time.Second/2)
	s.wdlHurry = false
	s.hurry.Store(true)
	before = time.Now()
	s.armWriteDeadline()
	within(before, time.Now(), lastWriteTimeout)
	if len(c.set) != 5 || !s.wdlHurry {
		t.Fatalf("first write after hurry kept the deadline set before it")
	}
	s.hurry.Store(false)
	before = time.Now()
	s.armWriteDeadline()
	within(before, time.Now(), 8*time.Second)
	if len(c.set) != 6 {
		t.Fatalf("%d deadlines set; want 6", len(c.set))
	}

	// A reload to a shorter write_timeout: the next write has the new one.
	cfg2 := *cfg
	cfg2.Stomp.WriteTimeout.Duration = time.Second
	b.conf.Store(&cfg2)
	before = time.Now()
	s.armWriteDeadline()
	within(before, time.Now(), time.Second)
	if len(c.set) != 7 {
		t.Fatalf("%d deadlines set; want 7: the old write_timeout's kept after a reload", len(c.set))
	}
}
