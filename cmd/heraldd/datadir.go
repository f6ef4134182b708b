package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// mkdirDurable is os.MkdirAll that also makes the new directories durable:
// the parent of each directory it creates is fsynced, since a new name is
// durable only once its directory is synced (fsync(2)). Without it a power
// cut after the first start could take the whole data dir, journal and
// all, away although every commit in it was fsynced (TestPowerCut_FirstStart).
func mkdirDurable(dir string, perm fs.FileMode) error {
	dir = filepath.Clean(dir)
	// The directories missing now, deepest first.
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			break // let MkdirAll report it
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	for _, d := range missing {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
