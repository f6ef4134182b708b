package auth

import (
	"testing"
	"time"
)

// TestThrottle_AdmitSpacesDecisions: after failures, every login from the
// source, right or wrong, waits for a slot one delay after the one before,
// so logins on parallel connections are decided one per delay; another
// source, and the same one after Window, are not held.
func TestThrottle_AdmitSpacesDecisions(t *testing.T) {
	th := &Throttle{Base: 100 * time.Millisecond, Max: 1600 * time.Millisecond, Window: time.Minute, MaxSources: 16}
	now := int64(1_000_000)
	if d := th.Admit("a", now); d != 0 {
		t.Fatalf("a source without failures waits %s", d)
	}
	for range 5 { // 100, 200, 400, 800, 1600 ms
		th.Fail("a", now)
	}
	// Ten logins at once: the first waits for the last failure's delay,
	// each next one a delay later.
	for i := range 10 {
		want := time.Duration(i+1) * 1600 * time.Millisecond
		if d := th.Admit("a", now); d != want {
			t.Fatalf("login %d at once waits %s, want %s", i+1, d, want)
		}
	}
	if d := th.Admit("b", now); d != 0 {
		t.Fatalf("another source waits %s", d)
	}
	later := now + time.Minute.Milliseconds() + 1
	if d := th.Admit("a", later); d != 0 {
		t.Fatalf("after the window: waits %s", d)
	}
	// A failure then starts again at Base, the reservations before gone.
	if d := th.Fail("a", later); d != th.Base {
		t.Fatalf("first failure after the window: %s", d)
	}
	if d := th.Admit("a", later); d != th.Base {
		t.Fatalf("the login after it waits %s, want %s", d, th.Base)
	}
}
