package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/herald-mq/herald/admin"
)

// More exit codes of the admin commands (sysexits.h).
const (
	exitNotFound = 66 // no such queue or connection
	exitNoPerm   = 77 // the admin socket refused us
)

// Admin socket locations tried without --socket or HERALD_SOCKET.
// SystemSocket is a variable so that a build can move it
// (go build -ldflags "-X main.SystemSocket=PATH"); the tests do.
const DefaultSocket = "./herald-data/admin.sock"

var SystemSocket = "/run/herald/admin.sock"

// adminCommands are the commands talking to heraldd's admin socket.
func adminCommands() []*cli.Command {
	cmds := []*cli.Command{
		statusCommand(), queuesCommand(), queueCommand(), streamsCommand(), streamCommand(), topicsCommand(), channelsCommand(),
		connectionsCommand(), backupCommand(), awaitReadyCommand(), configCommand(), logLevelCommand(),
		topCommand(), manCommand(), completionCommand(),
	}
	for _, c := range cmds {
		setUsageErrors(c)
	}
	return cmds
}

func setUsageErrors(c *cli.Command) {
	if c.OnUsageError == nil {
		c.OnUsageError = onUsageError
	}
	for _, s := range c.Subcommands {
		setUsageErrors(s)
	}
}

// adminFlags are the flags of every admin command.
func adminFlags(extra ...cli.Flag) []cli.Flag {
	return adminFlagsTimeout(&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up after this long (exit 75; 0: no limit)"}, extra...)
}

// adminFlagsTimeout are the admin flags with a command's own --timeout.
func adminFlagsTimeout(timeout *cli.DurationFlag, extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "socket", EnvVars: []string{"HERALD_SOCKET"}, Usage: "admin socket `PATH` of heraldd (default " + DefaultSocket + ", else " + SystemSocket + " if it exists)"},
		&cli.BoolFlag{Name: "json", Usage: "print the answer as JSON (the admin API's, see docs/admin-api.md)"},
		timeout,
	}, extra...)
}

// socketPath resolves --socket, HERALD_SOCKET and the defaults.
func socketPath(cCtx *cli.Context) string {
	if s := cCtx.String("socket"); s != "" {
		return s
	}
	if _, err := os.Stat(DefaultSocket); err == nil {
		return DefaultSocket
	}
	// The packages' socket directory is 0750 herald:herald: a user outside
	// the group cannot even see whether the socket exists (EACCES, not
	// ENOENT). It is still the daemon to talk to, and the permission error
	// that follows says which group to join.
	if _, err := os.Stat(SystemSocket); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return SystemSocket
	}
	return DefaultSocket
}

// socketGroup names the group that grants access to sock: the socket's own
// group, or its directory's when the socket cannot be seen; "herald" (the
// packages' group) when neither can be read.
func socketGroup(sock string) string {
	for _, p := range []string{sock, filepath.Dir(sock)} {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			break
		}
		if g, err := user.LookupGroupId(strconv.FormatUint(uint64(st.Gid), 10)); err == nil {
			return g.Name
		}
		return strconv.FormatUint(uint64(st.Gid), 10)
	}
	return "herald"
}

// adminCall runs fn with a client and a context bounded by --timeout,
// turning its error into an exit code.
func adminCall(cCtx *cli.Context, what string, fn func(ctx context.Context, c *admin.Client) error) error {
	if err := checkTimeout(cCtx); err != nil {
		return err
	}
	sock := socketPath(cCtx)
	c := admin.NewClient(sock)
	defer c.Close()
	ctx := cCtx.Context
	if d := cCtx.Duration("timeout"); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	if err := fn(ctx, c); err != nil {
		return adminFailure(what, sock, ctx, err)
	}
	return nil
}

// checkTimeout refuses a negative --timeout (0 is no limit), as send and
// receive do.
func checkTimeout(cCtx *cli.Context) error {
	if d := cCtx.Duration("timeout"); d < 0 {
		return usageErrorf("--timeout %s must not be negative (0: no limit)", d)
	}
	return nil
}

// adminFailure classifies an admin error into an exit code with a hint.
func adminFailure(what, sock string, ctx context.Context, err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	var ae *admin.APIError
	if errors.As(err, &ae) {
		code := exitOther
		switch ae.Status {
		case http.StatusNotFound:
			code = exitNotFound
		case http.StatusBadRequest:
			code = exitUsage
		case http.StatusServiceUnavailable:
			code = exitUnavailable
		case http.StatusGatewayTimeout:
			code = exitTimeout
		}
		return &exitError{code: code, err: &prefixless{msg: what + ": " + plain(ae.Error()), err: ae}}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded:
		return &exitError{code: exitTimeout, err: fmt.Errorf("%s: no answer from heraldd on %s in time; it may be overloaded (raise --timeout) or stuck (%s)", what, sock, logHint())}
	case errors.Is(err, syscall.EACCES) || errors.Is(err, os.ErrPermission):
		g := socketGroup(sock)
		return &exitError{code: exitNoPerm, err: fmt.Errorf(
			"%s: permission denied: join group %s to use the admin socket %s (sudo usermod -aG %s $USER, then log in again), or run with sudo",
			what, g, sock, g)}
	case errors.Is(err, syscall.ECONNREFUSED) && !isSocket(sock):
		return &exitError{code: exitUnavailable, err: fmt.Errorf("%s: %s is not a socket: point --socket / HERALD_SOCKET at heraldd's admin socket (admin.socket in its configuration, DATA_DIR/admin.sock by default)", what, sock)}
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		return &exitError{code: exitUnavailable, err: fmt.Errorf("%s: heraldd is not answering on %s; is it running? start it with: %s (or point --socket / HERALD_SOCKET at its admin socket)", what, sock, startHint())}
	}
	var ce *admin.ConnError
	if errors.As(err, &ce) {
		return &exitError{code: exitUnavailable, err: fmt.Errorf("%s: %w", what, err)}
	}
	return &exitError{code: exitOther, err: fmt.Errorf("%s: %w", what, err)}
}

// isSocket reports whether path is a unix socket (or cannot be looked at).
func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err != nil || fi.Mode()&fs.ModeSocket != 0
}

// printJSON writes v indented, as the admin API does.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // as the API writes it: "prices.>", not "prices.\u003e"
	return enc.Encode(v)
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(toAny(header)...)
	}
	return t
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func (t *table) row(cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(t.tw, strings.Join(parts, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// humanBytes formats n as 1.5 KiB, 3.2 MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// humanAge formats seconds as 45s, 3m12s, 2h5m, 3d4h.
func humanAge(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case sec <= 0:
		return "-"
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	days := int(d / (24 * time.Hour))
	return fmt.Sprintf("%dd%dh", days, int((d-time.Duration(days)*24*time.Hour)/time.Hour))
}

// queueName accepts NAME and /queue/NAME.
func queueName(s string) string { return strings.TrimPrefix(s, "/queue/") }

// isTerminal reports whether w is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
