// Command herald is Herald's command-line tool: STOMP client commands (send,
// receive), the multicast listener (listen) and, later, admin commands.
//
// Exit codes: 0 success, 64 usage error, 69 server unavailable, 75 timeout,
// 1 anything else. Errors are printed to stderr as "herald: ..." with what
// to do next.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/appliance/stomp/client"
)

// Exit codes (sysexits.h).
const (
	exitOK          = 0
	exitOther       = 1
	exitUsage       = 64
	exitUnavailable = 69
	exitTimeout     = 75
	exitNoInput     = 66 // a file to read cannot be opened
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// DefaultServer is the STOMP address used without --server or HERALD_SERVER.
const DefaultServer = "127.0.0.1:61613"

func main() {
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}

// run executes the CLI and returns the process exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := newApp(stdin, stdout, stderr)
	err := app.Run(reorderArgs(app, args))
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) && strings.HasPrefix(err.Error(), "Required flag") {
		// urfave/cli's own check of Required flags: say where to look, as
		// every other usage error does.
		fmt.Fprintf(stderr, "herald: %v; see: %s --help\n", err, strings.Join(append([]string{"herald"}, commandPath(app, args)...), " "))
		return exitUsage
	}
	fmt.Fprintf(stderr, "herald: %v\n", err)
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitOther
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      "herald",
		Usage:     "send, receive and inspect messages of a Herald appliance",
		Version:   version,
		Reader:    stdin,
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "server", Value: DefaultServer, EnvVars: []string{"HERALD_SERVER"}, Usage: "STOMP `host:port` of heraldd"},
			&cli.StringFlag{Name: "login", EnvVars: []string{"HERALD_LOGIN"}, Usage: "STOMP login"},
			&cli.StringFlag{Name: "passcode", EnvVars: []string{"HERALD_PASSCODE"}, Usage: "STOMP passcode (prefer HERALD_PASSCODE: arguments are visible to other users)"},
			&cli.DurationFlag{Name: "connect-timeout", Value: 5 * time.Second, Usage: "give up connecting after this long"},
		},
		Commands: append(append(append([]*cli.Command{sendCommand(), receiveCommand(), listenCommand(), doctorCommand(), benchCommand()}, append(adminCommands(), bridgesCommand())...), userCommands()...), lockCommand()),
		// Completion words come from the command definitions: herald completion bash.
		EnableBashCompletion: true,
		HideHelpCommand:      true,
		// Exit codes are decided by run, never by os.Exit inside the library.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   onUsageError,
		Action: func(cCtx *cli.Context) error {
			if cCtx.Args().Present() {
				return usageErrorf("unknown command %q; see: herald --help", cCtx.Args().First())
			}
			cli.ShowAppHelp(cCtx)
			return usageErrorf("no command given; see the list above")
		},
	}
	app.Commands = append(app.Commands, kvCommand())
	app.Flags = append(app.Flags, authFlags()...) // TLS and client certificates: auth_flags.go
	for _, c := range app.Commands {
		if c.OnUsageError == nil {
			c.OnUsageError = onUsageError
		}
		hideHelpCommands(c)
	}
	return app
}

// hideHelpCommands leaves out the library's "help" subcommand of c and
// its subcommands, as the application's own is (HideHelpCommand): --help is
// the one way to help, at every level.
func hideHelpCommands(c *cli.Command) {
	if len(c.Subcommands) > 0 {
		c.HideHelpCommand = true
	}
	for _, s := range c.Subcommands {
		hideHelpCommands(s)
	}
}

// exitError carries the exit code of an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func onUsageError(cCtx *cli.Context, err error, isSubcommand bool) error {
	if isSubcommand {
		return usageErrorf("%v; see: herald %s --help", err, cCtx.Command.Name)
	}
	return usageErrorf("%v; see: herald --help", err)
}

// checkArgs validates the number of positional arguments of a command.
// Flags written after the arguments were already moved in front of them
// (reorderArgs); what remains is an argument, even if it starts with "-".
func checkArgs(cCtx *cli.Context, min, max int, usage string) error {
	if n := cCtx.Args().Len(); n < min || n > max {
		return usageErrorf("wrong number of arguments: herald %s", usage)
	}
	return nil
}

// dial connects to the server named by the global flags, turning failures
// into exit codes with a hint.
func dial(ctx context.Context, cCtx *cli.Context, heartBeat [2]time.Duration) (*client.Conn, error) {
	server := cCtx.String("server")
	tc, err := clientTLS(cCtx)
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(ctx, server, client.Options{
		TLS:         tc,
		Login:       cCtx.String("login"),
		Passcode:    cCtx.String("passcode"),
		HeartBeat:   heartBeat,
		DialTimeout: cCtx.Duration("connect-timeout"),
	})
	if err == nil {
		return c, nil
	}
	var se *client.ServerError
	if errors.As(err, &se) {
		return nil, &exitError{code: exitOther, err: fmt.Errorf(
			"server %s refused the connection: %s; check --login and --passcode (or HERALD_LOGIN and HERALD_PASSCODE)",
			server, strings.TrimPrefix(se.Error(), "stomp server error: "))}
	}
	if ctx.Err() != nil {
		return nil, &exitError{code: exitOther, err: ctx.Err()}
	}
	return nil, &exitError{code: exitUnavailable, err: fmt.Errorf(
		"cannot reach the STOMP server at %s: %w; is heraldd running? start it with: %s (or point --server / HERALD_SERVER at it)%s",
		server, unwrapClient(err), startHint(), tlsHint(tc))}
}

// failure classifies an error met after connecting.
func failure(server, doing string, err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	var se *client.ServerError
	var ne net.Error
	switch {
	case errors.As(err, &se) && se.Frame.Get("message") == "invalid destination":
		// The server's reason names the destination and what is allowed:
		// a usage error, said plainly.
		return &exitError{code: exitUsage, err: errors.New(plain(serverDetail(se)))}
	case errors.As(err, &se):
		return &exitError{code: exitOther, err: fmt.Errorf("%s: server said: %s", doing, plain(strings.TrimPrefix(se.Error(), "stomp server error: ")))}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, client.ErrHeartbeatTimeout), errors.As(err, &ne) && ne.Timeout():
		return &exitError{code: exitTimeout, err: fmt.Errorf("%s: %w", doing, unwrapClient(err))}
	case errors.Is(err, client.ErrConnectionLost), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return &exitError{code: exitUnavailable, err: fmt.Errorf(
			"%s: lost the connection to %s; check that heraldd is still running (%s)", doing, server, logHint())}
	}
	return &exitError{code: exitOther, err: fmt.Errorf("%s: %w", doing, err)}
}

// serverDetail is the body of the server's ERROR frame (its reason), or its
// message header when the body is empty.
func serverDetail(se *client.ServerError) string {
	if d := strings.TrimSpace(string(se.Frame.Body)); d != "" {
		return d
	}
	return se.Frame.Get("message")
}

// plain drops the package prefixes ("appliance: ") the server's and the
// admin API's error texts carry: they name Go packages, not anything an
// operator knows.
func plain(msg string) string {
	for _, p := range []string{"appliance: ", "journal: ", "admin: "} {
		msg = strings.ReplaceAll(msg, p, "")
	}
	return msg
}

// serverCause returns the server's ERROR behind err when the connection
// ended with one: after refusing a frame the server closes the connection,
// and a write or request that follows fails as "connection lost" (or the
// write's broken pipe) before, or while, the reader records the ERROR.
// Timeouts and errors of a live connection are returned as they are.
func serverCause(c *client.Conn, err error) error {
	var se *client.ServerError
	var ne net.Error
	if err == nil || errors.As(err, &se) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return err
	}
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-c.Done():
	case <-t.C:
		return err
	}
	if errors.As(c.Err(), &se) {
		return se
	}
	return err
}

// unwrapClient drops the "stomp client: " prefixes for a shorter message.
func unwrapClient(err error) error {
	msg := strings.ReplaceAll(err.Error(), "stomp client: ", "")
	return &prefixless{msg: msg, err: err}
}

type prefixless struct {
	msg string
	err error
}

func (p *prefixless) Error() string { return p.msg }
func (p *prefixless) Unwrap() error { return p.err }
