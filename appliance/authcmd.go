package appliance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herald-mq/herald/appliance/auth"
)

// External authentication (auth.command): a program decides logins the
// users file cannot check. It gets the user name and the password on its
// standard input, one per line (never on its command line, where other
// users could read them); exit 0 allows, 1 denies, and any other outcome
// (another exit code, a crash, auth.command_timeout) denies and is counted
// as an error. Its standard output may name groups of the users file, one
// per line, whose grants the user gets. Positive answers are cached for
// auth.command_cache, keyed by a hash of user and password.

// Bounds on what the command may send back and on the cache.
const (
	maxCommandOutput = 64 << 10
	maxCommandCache  = 10000
)

type authCommand struct {
	argv    []string
	timeout time.Duration
	ttl     time.Duration

	mu    sync.Mutex
	cache map[[32]byte]cachedLogin

	runs, errors, hits atomic.Uint64
}

type cachedLogin struct {
	groups  []string
	expires time.Time
}

func (c *authCommand) init(a AuthConfig) {
	c.argv = a.Command
	c.timeout = a.CommandTimeout.Duration
	c.ttl = a.CommandCache.Duration
	c.cache = map[[32]byte]cachedLogin{}
}

// external checks login and password with the command (or its cache).
func (a *authState) external(b *Broker, p *auth.Policy, login, password string, log *slog.Logger) (auth.Identity, error) {
	c := &a.cmd
	if len(c.argv) == 0 {
		return auth.Identity{}, fmt.Errorf("%w: no auth.command", auth.ErrAuthFailed)
	}
	key := sha256.Sum256([]byte(login + "\x00" + password))
	now := b.now()
	c.mu.Lock()
	e, ok := c.cache[key]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		c.hits.Add(1)
		id, _ := p.External(login, e.groups)
		return id, nil
	}
	groups, err := c.run(login, password)
	if err != nil {
		if !errors.Is(err, errDenied) {
			c.errors.Add(1)
			log.Error("auth.command failed; the login is refused", "login", login, "err", err)
		}
		return auth.Identity{}, fmt.Errorf("%w: auth.command: %v", auth.ErrAuthFailed, err)
	}
	id, unknown := p.External(login, groups)
	if len(unknown) > 0 {
		log.Warn("auth.command named groups the users file does not define; ignored", "login", login, "groups", unknown)
	}
	if c.ttl > 0 {
		c.mu.Lock()
		if len(c.cache) >= maxCommandCache {
			for k, v := range c.cache {
				if !now.Before(v.expires) || len(c.cache) >= maxCommandCache {
					delete(c.cache, k)
				}
			}
		}
		c.cache[key] = cachedLogin{groups: groups, expires: now.Add(c.ttl)}
		c.mu.Unlock()
	}
	return id, nil
}

var errDenied = errors.New("denied (exit 1)")

// run runs the command once: the groups it printed, errDenied, or why it
// failed.
func (c *authCommand) run(login, password string) ([]string, error) {
	c.runs.Add(1)
	if strings.ContainsAny(login, "\n\r") || strings.ContainsAny(password, "\n\r") {
		return nil, errDenied // cannot be passed one per line
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.argv[0], c.argv[1:]...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cmd.Stdin = strings.NewReader(login + "\n" + password + "\n")
	var out, errb limitedBuffer
	out.max, errb.max = maxCommandOutput, 4096
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second // a child holding the pipes open cannot hold us
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("timed out after %s (auth.command_timeout)", c.timeout)
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return nil, errDenied
	case err != nil:
		return nil, fmt.Errorf("%v; stderr: %q", err, strings.TrimSpace(errb.String()))
	case out.over:
		return nil, fmt.Errorf("more than %d bytes on standard output", maxCommandOutput)
	}
	var groups []string
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	for sc.Scan() {
		if g := strings.TrimSpace(sc.Text()); g != "" {
			groups = append(groups, g)
		}
	}
	return groups, nil
}

// limitedBuffer keeps at most max bytes and notes whether more came.
type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.Len(); len(p) > room {
		l.over = true
		if room > 0 {
			l.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return l.Buffer.Write(p)
}

var _ io.Writer = (*limitedBuffer)(nil)
