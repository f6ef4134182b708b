package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/admin"
)

func backupCommand() *cli.Command {
	return &cli.Command{
		Name:      "backup",
		Usage:     "write a consistent copy of the journal while the daemon runs",
		ArgsUsage: "FILE",
		Description: `POST /v1/backup. The daemon copies its SQLite journal with SQLite's online
backup API to FILE: the copy holds every message committed before the backup
began, and producers and consumers carry on meanwhile. The daemon writes the
file, so its directory must be writable by the daemon's user; FILE must not
exist. A relative FILE is taken from the current directory. Restore by
stopping heraldd and putting the copy in place of DATA_DIR/herald.db (remove
herald.db-wal and herald.db-shm). If FILE is not there for herald once the
daemon has written it (the packaged unit gives heraldd a private /tmp), it
exits 1 saying where to back up instead.

Progress is a bar on a terminal, plain lines otherwise (on stderr); none
with --json. A backup of a large journal takes as long as it takes: there is
no --timeout unless one is given.`,
		Flags: adminFlagsTimeout(&cli.DurationFlag{Name: "timeout", DefaultText: "none", Usage: "give up after this long (exit 75)"}),
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 1, 1, "backup [flags] FILE"); err != nil {
				return err
			}
			dest, err := filepath.Abs(cCtx.Args().First())
			if err != nil {
				return usageErrorf("backup file %q: %v", cCtx.Args().First(), err)
			}
			errw := cCtx.App.ErrWriter
			bar := isTerminal(errw) && !cCtx.Bool("json")
			lastPct := -1
			return adminCall(cCtx, "backup", func(ctx context.Context, c *admin.Client) error {
				res, err := c.Backup(ctx, dest, func(ev admin.BackupEvent) {
					if ev.PagesTotal == 0 || cCtx.Bool("json") {
						return
					}
					pct := ev.PagesDone * 100 / ev.PagesTotal
					if bar {
						n := pct * 30 / 100
						fmt.Fprintf(errw, "\r[%s%s] %3d%% %d/%d pages", strings.Repeat("#", n), strings.Repeat(" ", 30-n), pct, ev.PagesDone, ev.PagesTotal)
						return
					}
					if pct/10 != lastPct/10 || pct == 100 && lastPct != 100 {
						fmt.Fprintf(errw, "backup: %d/%d pages (%d%%)\n", ev.PagesDone, ev.PagesTotal, pct)
					}
					lastPct = pct
				})
				if bar {
					fmt.Fprintln(errw)
				}
				if err != nil {
					return err
				}
				if cCtx.Bool("json") {
					if err := printJSON(cCtx.App.Writer, res); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(cCtx.App.Writer, "backup written: %s (%s, %d pages, %.1fs)\n", res.Path, humanBytes(res.Bytes), res.PagesTotal, res.Seconds)
				}
				return backupVisible(res.Path)
			})
		},
	}
}

// backupVisible checks that the file heraldd wrote is there for us too. A
// daemon with its own mount namespace writes elsewhere: the packaged unit's
// PrivateTmp=yes gives it a /tmp of its own, where a backup is out of
// reach and removed when the service stops, though it "succeeded".
func backupVisible(path string) error {
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil // there, or not ours to see (permissions)
	}
	return &exitError{code: exitOther, err: fmt.Errorf(
		"backup: heraldd wrote %s, but there is no such file here: heraldd sees another file system at that path "+
			"(the packaged unit has a private /tmp, PrivateTmp=yes, removed when the service stops); "+
			"back up under its data directory instead (herald backup /var/lib/herald/backup-$(date +%%F).db), "+
			"or a directory added with ReadWritePaths= (systemctl edit herald)", path)}
}
