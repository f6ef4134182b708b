package appliance_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp/client"
	"golang.org/x/crypto/argon2"
)

// hashWith is an argon2id hash of pw with the given parameters, as another
// tool (or an older default) could have written it in the users file.
func hashWith(pw string, mKiB, passes uint32) string {
	salt := []byte("review-salt-4567")
	key := argon2.IDKey([]byte(pw), salt, passes, mKiB, 1, 32)
	b := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=19$m=%d,t=%d,p=1$%s$%s", mKiB, passes, b.EncodeToString(salt), b.EncodeToString(key))
}

// failTime is the median time from dial to the ERROR of a failed login
// (the throttle is set to 1-2 ms).
func failTime(t *testing.T, addr, login string, n int) time.Duration {
	t.Helper()
	var ds []time.Duration
	dialAs(addr, login, "warm-up") // not counted: the first checks of a run are slower (fresh memory)
	for i := 0; i < n; i++ {
		start := time.Now()
		c, err := dialAs(addr, login, "wrong-password")
		d := time.Since(start)
		var se *client.ServerError
		if !errors.As(err, &se) || se.Frame.Get("message") != "authentication failed" {
			if c != nil {
				c.Close()
			}
			t.Fatalf("%s: %v, want authentication failed", login, err)
		}
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// A wrong password for a user whose hash has heavier parameters than the
// default takes as long as an unknown user's login (checked against a
// dummy with the default parameters): the floor under a refused login's
// answer (1 s) hides the check's time. Before it,
// heavy took 3.7x unknown's time: the user's existence showed.
func TestAuth_LoginTimingHashParams(t *testing.T) {
	src := `
[users.plain]
password = "{pw:p}"
[users.heavy]
password = "` + hashWith("h", 32*1024, 3) + `"
`
	tb := authBroker(t, src, nil)
	tb.B.SetLoginFailFloor(time.Second) // the default (authBroker's short throttle set it to 1 ms)
	unknown := failTime(t, tb.Addr, "no-such-user", 3)
	plain := failTime(t, tb.Addr, "plain", 3)
	heavy := failTime(t, tb.Addr, "heavy", 3)
	t.Logf("median failed login: unknown %s, known (default hash) %s, known (m=32MiB,t=3) %s", unknown, plain, heavy)
	if r := float64(heavy) / float64(unknown); r > 1.25 || r < 0.8 {
		t.Errorf("a wrong password for user heavy takes %.1fx the time of an unknown user (%s vs %s): the user's existence shows", r, heavy, unknown)
	}
}

// With auth.command, a wrong password for a users-file user (an argon2id
// check) and an unknown login (a run of the command) are answered after
// the same time (the floor): before it, they differed 9.8x, so the users
// file's password users could be told from others.
func TestAuth_LoginTimingExternal(t *testing.T) {
	tb := commandBroker(t, "exit 1", nil)
	tb.B.SetLoginFailFloor(time.Second) // the default (authBroker's short throttle set it to 1 ms)
	unknown := failTime(t, tb.Addr, "no-such-user", 3)
	local := failTime(t, tb.Addr, "local", 3)
	t.Logf("median failed login with auth.command: unknown %s (command), users-file user %s (argon2id)", unknown, local)
	if r := float64(local) / float64(unknown); r > 1.25 || r < 0.8 {
		t.Errorf("%s", strings.TrimSpace(fmt.Sprintf("a wrong password for users-file user local takes %.1fx the time of an unknown login (%s vs %s)", r, local, unknown)))
	}
}
