package main

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/herald-mq/herald/appliance/auth"
)

// hashPasswordCommand prints an argon2id hash for the users file, as
// caddy hash-password and mosquitto_passwd do.
func hashPasswordCommand() *cli.Command {
	return &cli.Command{
		Name:        "hash-password",
		Usage:       "read a password without echo and print its argon2id hash for a users file",
		Description: "The hash goes in the password key of a [users.NAME] table; herald user add and passwd write it for you.",
		Flags:       []cli.Flag{passwordStdinFlag()},
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 0, 0, "hash-password [--password-stdin]"); err != nil {
				return err
			}
			h, err := readAndHash(cCtx)
			if err != nil {
				return err
			}
			fmt.Fprintln(cCtx.App.Writer, h)
			return nil
		},
	}
}

func passwordStdinFlag() cli.Flag {
	return &cli.BoolFlag{Name: "password-stdin", Usage: "read the password from the first line of standard input instead of a no-echo prompt"}
}

func fileFlag() cli.Flag {
	return &cli.StringFlag{Name: "file", Aliases: []string{"f"}, Required: true, Usage: "the users `FILE` (for example /etc/herald/users.toml, auth.users_file)"}
}

func groupFlag() cli.Flag {
	return &cli.BoolFlag{Name: "group", Usage: "NAME is a group, not a user"}
}

// userCommands edit a users file, as rabbitmqctl add_user and
// set_permissions do: operators never edit hashes by hand.
func userCommands() []*cli.Command {
	return []*cli.Command{hashPasswordCommand(), {
		Name:  "user",
		Usage: "add, change, delete, grant, revoke or list users of a users file",
		Description: "Edits the users file in place, atomically (a new file renamed over the old, keeping its mode and owner).\n" +
			"heraldd reads it at start and on SIGHUP (auth.users_file, --users-file). Permissions: read (SUBSCRIBE), write (SEND),\n" +
			"create (a SEND or SUBSCRIBE that creates a queue or stream, a put that creates a key) on /queue/, /topic/, /stream/, /kv/ or /lock/ patterns (a lock is taken with write): * one segment, > the rest.",
		Subcommands: []*cli.Command{
			{
				Name:      "add",
				Usage:     "add a user (password from a no-echo prompt or --password-stdin)",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{fileFlag(), passwordStdinFlag(),
					&cli.StringSliceFlag{Name: "groups", Usage: "groups of the user (comma-separated or repeated); created if new"},
					&cli.BoolFlag{Name: "no-password", Usage: "no password: the user logs in only with a client certificate naming it"}},
				Action: func(cCtx *cli.Context) error {
					if err := checkArgs(cCtx, 1, 1, "user add --file FILE [--groups G,...] [--password-stdin|--no-password] NAME"); err != nil {
						return err
					}
					return editUsers(cCtx, true, func(f *auth.File) (string, error) {
						name := cCtx.Args().First()
						if _, ok := f.Users[name]; ok {
							return "", fmt.Errorf("%w: %q (change its password with: herald user passwd --file %s %s)", auth.ErrUserExists, name, cCtx.String("file"), name)
						}
						h := ""
						if !cCtx.Bool("no-password") {
							var err error
							if h, err = readAndHash(cCtx); err != nil {
								return "", err
							}
						}
						var groups []string
						for _, g := range cCtx.StringSlice("groups") {
							for _, s := range strings.Split(g, ",") {
								if s = strings.TrimSpace(s); s != "" {
									groups = append(groups, s)
								}
							}
						}
						return "added user " + name + " (it may do nothing until granted: herald user grant)", f.AddUser(name, h, groups)
					})
				},
			},
			{
				Name:      "passwd",
				Usage:     "change a user's password",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{fileFlag(), passwordStdinFlag()},
				Action: func(cCtx *cli.Context) error {
					if err := checkArgs(cCtx, 1, 1, "user passwd --file FILE [--password-stdin] NAME"); err != nil {
						return err
					}
					return editUsers(cCtx, false, func(f *auth.File) (string, error) {
						name := cCtx.Args().First()
						if _, ok := f.Users[name]; !ok {
							return "", noUser(cCtx, name)
						}
						h, err := readAndHash(cCtx)
						if err != nil {
							return "", err
						}
						return "changed the password of " + name, f.SetPassword(name, h)
					})
				},
			},
			{
				Name:      "del",
				Usage:     "delete a user",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{fileFlag()},
				Action: func(cCtx *cli.Context) error {
					if err := checkArgs(cCtx, 1, 1, "user del --file FILE NAME"); err != nil {
						return err
					}
					return editUsers(cCtx, false, func(f *auth.File) (string, error) {
						name := cCtx.Args().First()
						if _, ok := f.Users[name]; !ok {
							return "", noUser(cCtx, name)
						}
						return "deleted user " + name, f.DelUser(name)
					})
				},
			},
			grantCommand("grant"), grantCommand("revoke"),
			{
				Name:  "list",
				Usage: "list users, their groups and permissions (and the groups')",
				Flags: []cli.Flag{fileFlag(), &cli.BoolFlag{Name: "json", Usage: "print JSON"}},
				Action: func(cCtx *cli.Context) error {
					if err := checkArgs(cCtx, 0, 0, "user list --file FILE [--json]"); err != nil {
						return err
					}
					f, _, err := readUsers(cCtx.String("file"), false)
					if err != nil {
						return err
					}
					return listUsers(cCtx.App.Writer, f, cCtx.Bool("json"))
				},
			},
		},
		Action: func(cCtx *cli.Context) error {
			if cCtx.Args().Present() {
				return usageErrorf("unknown user command %q: want add, passwd, del, grant, revoke or list; see: herald user --help", cCtx.Args().First())
			}
			return usageErrorf("no user command given: want add, passwd, del, grant, revoke or list; see: herald user --help")
		},
	}}
}

func grantCommand(verb string) *cli.Command {
	usage := "give a user or group a permission on a destination pattern"
	if verb == "revoke" {
		usage = "take back a permission granted on exactly that pattern"
	}
	return &cli.Command{
		Name:      verb,
		Usage:     usage,
		ArgsUsage: "NAME read|write|create PATTERN",
		Flags:     []cli.Flag{fileFlag(), groupFlag()},
		Action: func(cCtx *cli.Context) error {
			u := "user " + verb + " --file FILE [--group] NAME read|write|create PATTERN (example: /queue/orders.>)"
			if err := checkArgs(cCtx, 3, 3, u); err != nil {
				return err
			}
			name, pattern := cCtx.Args().Get(0), cCtx.Args().Get(2)
			perm, err := auth.ParsePerm(cCtx.Args().Get(1))
			if err != nil {
				return usageErrorf("%v: herald %s", err, u)
			}
			if _, err := auth.ParsePattern(pattern); err != nil {
				return usageErrorf("%v", err)
			}
			group := cCtx.Bool("group")
			return editUsers(cCtx, false, func(f *auth.File) (string, error) {
				if !group {
					if _, ok := f.Users[name]; !ok {
						return "", noUser(cCtx, name)
					}
				}
				if verb == "grant" {
					return fmt.Sprintf("granted %s on %s to %s", perm, pattern, name), f.Grant(name, group, perm, pattern)
				}
				ok, err := f.Revoke(name, group, perm, pattern)
				if err == nil && !ok {
					return "", &exitError{code: exitNotFound, err: fmt.Errorf("%s has no %s grant on exactly %q; see its grants with: herald user list --file %s", name, perm, pattern, cCtx.String("file"))}
				}
				return fmt.Sprintf("revoked %s on %s from %s", perm, pattern, name), err
			})
		},
	}
}

func noUser(cCtx *cli.Context, name string) error {
	return &exitError{code: exitNotFound, err: fmt.Errorf("no user %q in %s (add it with: herald user add --file %s %s)", name, cCtx.String("file"), cCtx.String("file"), name)}
}

// readAndHash reads a password (prompt twice without echo, or one line of
// standard input) and returns its hash.
func readAndHash(cCtx *cli.Context) (string, error) {
	pw, err := readPassword(cCtx)
	if err != nil {
		return "", err
	}
	return auth.HashPassword(pw, rand.Reader)
}

func readPassword(cCtx *cli.Context) (string, error) {
	if cCtx.Bool("password-stdin") {
		line, err := bufio.NewReader(io.LimitReader(cCtx.App.Reader, 4096)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		pw := strings.TrimRight(line, "\r\n")
		if pw == "" {
			return "", usageErrorf("empty password on standard input")
		}
		return pw, nil
	}
	in, ok := cCtx.App.Reader.(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		return "", usageErrorf("standard input is not a terminal, so the password cannot be read without echo: pipe it with --password-stdin")
	}
	fd := int(in.Fd())
	fmt.Fprint(cCtx.App.ErrWriter, "Password: ")
	a, err := term.ReadPassword(fd)
	fmt.Fprintln(cCtx.App.ErrWriter)
	if err != nil {
		return "", err
	}
	fmt.Fprint(cCtx.App.ErrWriter, "Password (again): ")
	b, err := term.ReadPassword(fd)
	fmt.Fprintln(cCtx.App.ErrWriter)
	if err != nil {
		return "", err
	}
	if string(a) != string(b) {
		return "", usageErrorf("the two passwords differ; nothing was changed")
	}
	if len(a) == 0 {
		return "", usageErrorf("empty password; nothing was changed")
	}
	return string(a), nil
}

// readUsers reads and decodes the users file; missing is allowed (an empty
// file) when create is set.
func readUsers(path string, create bool) (*auth.File, fs.FileInfo, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if create {
			f, _ := auth.DecodeUsers(nil)
			return f, nil, nil
		}
		return nil, nil, &exitError{code: exitNotFound, err: fmt.Errorf("users file %s does not exist (create it with: herald user add --file %s NAME)", path, path)}
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	f, err := auth.DecodeUsers(b)
	if err != nil {
		return nil, nil, fmt.Errorf("users file %s: %w; fix it, nothing was changed", path, err)
	}
	return f, fi, nil
}

// editUsers reads the file, applies edit and writes the file back
// atomically; the message edit returns is printed.
func editUsers(cCtx *cli.Context, create bool, edit func(*auth.File) (string, error)) error {
	path := cCtx.String("file")
	// Two edits at once would each write back what they read: take turns,
	// on a lock of the file's directory (the file itself is replaced).
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		defer d.Close()
		if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX); err != nil {
			return fmt.Errorf("lock %s: %w", filepath.Dir(path), err)
		}
	}
	f, fi, err := readUsers(path, create)
	if err != nil {
		return err
	}
	msg, err := edit(f)
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		if errors.Is(err, auth.ErrNoUser) || errors.Is(err, auth.ErrNoGroup) {
			return &exitError{code: exitNotFound, err: err}
		}
		return usageErrorf("%v", err)
	}
	if err := writeFileAtomic(path, f.Encode(), fi); err != nil {
		return fmt.Errorf("write users file %s: %w; it was left as it was", path, err)
	}
	fmt.Fprintln(cCtx.App.Writer, msg)
	return nil
}

// writeFileAtomic replaces path with data: a temporary file in the same
// directory with the old file's mode and owner (a new file: 0640, the
// directory's group), fsynced, renamed over path, and the directory fsynced.
// A reader sees the old file or the new one, never a part.
func writeFileAtomic(path string, data []byte, old fs.FileInfo) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	mode := fs.FileMode(0o640)
	uid, gid := -1, -1
	if old != nil {
		mode = old.Mode().Perm()
		if st, ok := old.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	} else if ci, err := os.Stat(filepath.Join(dir, "herald.toml")); err == nil {
		// The daemon's config beside it (packaged 0640 root:herald in a
		// root:root /etc/herald): its group is the daemon's, which must
		// read the new file.
		if st, ok := ci.Sys().(*syscall.Stat_t); ok {
			gid = int(st.Gid)
		}
	} else if di, err := os.Stat(dir); err == nil {
		if st, ok := di.Sys().(*syscall.Stat_t); ok {
			gid = int(st.Gid) // a directory of the daemon's group
		}
	}
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if uid >= 0 || gid >= 0 {
		if err := tmp.Chown(uid, gid); err != nil && !(errors.Is(err, fs.ErrPermission) && old == nil) {
			return fmt.Errorf("keep the owner %d:%d: %w (run as root or as the file's owner)", uid, gid, err)
		}
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
