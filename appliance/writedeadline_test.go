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
	var dl time.Time
	before := time.Now()
	s.armWriteDeadline(&dl)
	within(before, time.Now(), 8*time.Second)
	if len(c.set) != 1 || !dl.Equal(c.set[0]) {
		t.Fatalf("first write: %d deadlines set, writer's record %v; want 1, the one set", len(c.set), dl)
	}
	for range 100 {
		s.armWriteDeadline(&dl)
	}
	if len(c.set) != 1 {
		t.Fatalf("%d deadlines set by 100 writes right after the first; want the first kept", len(c.set))
	}

	// Less than write_timeout left (an eighth of it passed): set again.
	dl = time.Now().Add(8*time.Second - time.Millisecond)
	before = time.Now()
	s.armWriteDeadline(&dl)
	within(before, time.Now(), 8*time.Second)
	if len(c.set) != 2 {
		t.Fatalf("deadline nearer than write_timeout kept")
	}
	// Passed and cleared by a direct write (rawWrite): set again.
	dl = time.Now().Add(-time.Second)
	s.armWriteDeadline(&dl)
	if len(c.set) != 3 {
		t.Fatalf("passed deadline kept")
	}

	// A dropped session (hurry): its writes get the short timeout, not
	// what is left of the long one.
	s.hurry.Store(true)
	before = time.Now()
	s.armWriteDeadline(&dl)
	within(before, time.Now(), lastWriteTimeout)
	if len(c.set) != 4 {
		t.Fatalf("hurried session kept the longer deadline")
	}
	s.hurry.Store(false)

	// A reload to a shorter write_timeout: the next write has the new one.
	cfg2 := *cfg
	cfg2.Stomp.WriteTimeout.Duration = time.Second
	b.conf.Store(&cfg2)
	before = time.Now()
	s.armWriteDeadline(&dl)
	within(before, time.Now(), time.Second)
	if len(c.set) != 5 {
		t.Fatalf("deadline of the old write_timeout kept after a reload")
	}
}
