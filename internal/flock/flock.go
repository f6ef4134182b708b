// Package flock takes the exclusive flocks by which one heraldd claims its
// data directory and its admin socket.
package flock

import (
	"errors"
	"syscall"
	"time"
)

// Wait is how long Exclusive waits for a lock held by another before it
// gives up. heraldd --check-config takes these locks shared for a moment
// to learn whether a daemon holds them; a daemon starting in that moment
// must wait it out, not be refused, and a daemon that really holds the
// lock must still be reported within about a second.
const Wait = time.Second

// retryEvery is the pause between two attempts.
const retryEvery = 10 * time.Millisecond

// Exclusive takes an exclusive flock on fd without blocking, trying again
// every few milliseconds while another holds it, until deadline. It
// returns syscall.EWOULDBLOCK when the lock is still held then, and any
// other error of flock(2) at once.
func Exclusive(fd int, deadline time.Time) error {
	for {
		err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(min(retryEvery, time.Until(deadline)))
	}
}
