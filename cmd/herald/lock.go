package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/appliance/lockcore"
)

func lockCommand() *cli.Command {
	return &cli.Command{
		Name:  "lock",
		Usage: "advisory locks of the appliance (/lock/NAME)",
		Subcommands: []*cli.Command{{
			Name:      "run",
			Usage:     "hold a lock while a command runs, like flock",
			ArgsUsage: "NAME -- COMMAND [ARG...]",
			Description: `Takes lock NAME (SUBSCRIBE /lock/NAME; the write permission on /lock/NAME),
waiting its turn behind earlier requests, runs COMMAND while holding it, then
gives it back and exits with COMMAND's exit status (128+N when a signal N
ended it). COMMAND runs with HERALD_LOCK_NAME and HERALD_LOCK_TOKEN set: the
lock's fencing token, for key-value writes that must be refused once another
holder has the lock (header if-fence:NAME:TOKEN).

The connection is the lock's lease: if herald is killed (kill -9 included),
or misses heart-beats for --lease, heraldd gives the lock to the next waiter.
If herald loses the connection while COMMAND runs, it cannot know whether
another holder has the lock: it stops COMMAND (SIGTERM, SIGKILL 10s later)
and exits with status 69. SIGINT and SIGTERM sent to herald are passed to
COMMAND.

With --timeout, herald gives up waiting after that long (exit status 75) and
COMMAND does not run.`,
			Flags: []cli.Flag{
				&cli.DurationFlag{Name: "timeout", Usage: "give up waiting for the lock after this long, exit status 75 (0: wait forever)"},
				&cli.DurationFlag{Name: "lease", Value: 10 * time.Second, Usage: "heart-beat interval: heraldd gives the lock away when herald is silent for about this long"},
			},
			Action: runLockRun,
		}},
	}
}

func runLockRun(cCtx *cli.Context) error {
	const usage = "lock run [--timeout D] NAME -- COMMAND [ARG...]"
	args := cCtx.Args().Slice()
	if len(args) > 1 && args[1] == "--" {
		args = append(args[:1], args[2:]...)
	}
	if len(args) < 2 {
		return usageErrorf("wrong number of arguments: herald %s", usage)
	}
	name, argv := args[0], args[1:]
	if err := lockcore.CheckName(name); err != nil {
		return usageErrorf("%v: herald %s", err, usage)
	}
	timeout, lease := cCtx.Duration("timeout"), cCtx.Duration("lease")
	if timeout < 0 || lease < 0 {
		return usageErrorf("--timeout and --lease must not be negative")
	}
	server := cCtx.String("server")
	c, err := dial(context.Background(), cCtx, [2]time.Duration{lease, lease})
	if err != nil {
		return err
	}
	defer c.Close()
	dest := "/lock/" + name
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	sub, err := c.SubscribeReceipt(ctx, dest, "auto")
	cancel()
	if err != nil {
		return failure(server, "ask for lock "+name, serverCause(c, err))
	}
	var wait <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		wait = t.C
	}
	var token string
	for token == "" {
		select {
		case m, ok := <-sub.C():
			if !ok {
				return failure(server, "wait for lock "+name, serverCause(c, c.Err()))
			}
			token = m.Get("lock-token")
		case <-c.Done():
			return failure(server, "wait for lock "+name, serverCause(c, c.Err()))
		case <-wait:
			return &exitError{code: exitTimeout, err: fmt.Errorf("lock %s: not granted within %s (--timeout); another holder has it", name, timeout)}
		case s := <-sigs:
			return &exitError{code: 128 + int(s.(syscall.Signal)), err: fmt.Errorf("lock %s: interrupted while waiting (%v)", name, s)}
		}
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = cCtx.App.Reader, cCtx.App.Writer, cCtx.App.ErrWriter
	cmd.Env = append(os.Environ(), "HERALD_LOCK_NAME="+name, "HERALD_LOCK_TOKEN="+token)
	if err := cmd.Start(); err != nil {
		return &exitError{code: 127, err: fmt.Errorf("lock %s: start %s: %w", name, argv[0], err)}
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var werr error
	lost := false
	for done := false; !done; {
		select {
		case werr = <-exited:
			done = true
		case s := <-sigs:
			cmd.Process.Signal(s)
		case <-c.Done():
			if !lost {
				lost = true
				cmd.Process.Signal(syscall.SIGTERM)
				go func() {
					time.Sleep(10 * time.Second)
					cmd.Process.Kill()
				}()
			}
		}
	}
	if lost {
		return &exitError{code: exitUnavailable, err: fmt.Errorf(
			"lock %s: lost the connection to %s while %s ran, so another holder may have the lock now; %s was stopped. Check that heraldd is running and the network, then run again", name, server, argv[0], argv[0])}
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	uerr := sub.Unsubscribe(ctx) // gives the lock back; closing would too
	cancel()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(werr, &ee):
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	case werr != nil:
		return fmt.Errorf("lock %s: %s: %w", name, argv[0], werr)
	}
	if uerr != nil {
		return failure(server, "give back lock "+name+" (the end of the connection gives it back)", serverCause(c, uerr))
	}
	if code != 0 {
		return &exitError{code: code, err: fmt.Errorf("lock %s (token %s) released; %s exited with status %d", name, token, argv[0], code)}
	}
	return nil
}
