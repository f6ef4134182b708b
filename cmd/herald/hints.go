package main

import "os"

// unitFiles are where the packages install the systemd unit, herald.service.
var unitFiles = []string{"/usr/lib/systemd/system/herald.service", "/lib/systemd/system/herald.service", "/etc/systemd/system/herald.service"}

// packaged reports whether the herald package (its systemd unit) is
// installed on this machine.
func packaged() bool {
	for _, f := range unitFiles {
		if _, err := os.Stat(f); err == nil {
			return true
		}
	}
	return false
}

// startHint is how to start the daemon here: the unit when packaged.
func startHint() string {
	if packaged() {
		return "sudo systemctl start herald"
	}
	return "heraldd"
}

// logHint is where the daemon's log is here.
func logHint() string {
	if packaged() {
		return "journalctl -u herald"
	}
	return "see heraldd's standard error"
}
