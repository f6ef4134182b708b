package multicast

import (
	"fmt"
	"time"
)

// Profile selects recovery timing: how long a receiver waits before it NAKs and when it gives up.
type Profile string

// Profiles.
const (
	ProfileLowLatency Profile = "low-latency" // NAK after ~1 ms, give up after 200 ms
	ProfileDashboard  Profile = "dashboard"   // NAK after ~10 ms, give up after 2 s
)

// Mode selects how a receiver delivers around a hole in a stream.
type Mode int

// Modes.
const (
	// Ordered holds later messages of a stream back until the hole is repaired or given up (then a Gap
	// event comes first). The default.
	Ordered Mode = iota
	// Skip delivers every message at once; repairs arrive later, flagged Repaired, and a Gap is
	// reported for what is never repaired.
	Skip
)

// Defaults.
const (
	DefaultGroup = "239.255.0.1:7400"
	DefaultTTL   = 1
	DefaultMTU   = 1400
	// DefaultWindow: 64 MiB holds about 2 s of a channel sending 360,000 64-byte messages a
	// second (about 29 MB/s of datagrams), and more than the largest message (MaxMessage).
	// 16 MiB (0.55 s of that) lost messages ("gone") to a receiver behind 10% loss that fell
	// further behind than that on a loaded host (docs/benchmarks.md).
	DefaultWindow          = 64 << 20
	DefaultRepairRate      = 32 << 20 // bytes/s of repairs
	DefaultRcvBuf          = 16 << 20
	DefaultCatalogInterval = time.Second
	MaxHeartbeatInterval   = time.Second
	MinHeartbeatInterval   = 2 * time.Millisecond
)

// timing is what a profile decides.
type timing struct {
	nakBackoff   time.Duration // random wait in [0, nakBackoff) before the first NAK
	nakRetry     time.Duration // wait for an NCF or repair before NAKing again
	ncfWait      time.Duration // after an NCF, wait this long for the repair
	nakTries     int           // NAKs per missing datagram before giving up
	budget       time.Duration // give up on a missing datagram after this long
	repairHold   time.Duration // sender: ignore repeat NAKs this long after a repair
	nakRate      float64       // sender: NAKs per second accepted from one source
	nakBurst     float64
	delayedAfter int // sender: NCF "delayed" instead of "will send" when this many repairs queue
}

func (p Profile) timing() timing {
	if p == ProfileDashboard {
		return timing{nakBackoff: 10 * time.Millisecond, nakRetry: 40 * time.Millisecond,
			ncfWait: 100 * time.Millisecond, nakTries: 10, budget: 2 * time.Second,
			repairHold: 5 * time.Millisecond, nakRate: 500, nakBurst: 100, delayedAfter: 4096}
	}
	return timing{nakBackoff: time.Millisecond, nakRetry: 4 * time.Millisecond,
		ncfWait: 10 * time.Millisecond, nakTries: 10, budget: 200 * time.Millisecond,
		repairHold: 500 * time.Microsecond, nakRate: 2000, nakBurst: 200, delayedAfter: 4096}
}

// LoneInline is the profile's default for SenderConfig.LoneInline: on for low-latency (the
// default profile), off for dashboard, where a hand-off to the writer goroutine costs nothing
// that matters.
func (p Profile) LoneInline() bool { return p != ProfileDashboard }

func (p Profile) validate() error {
	switch p {
	case "", ProfileLowLatency, ProfileDashboard:
		return nil
	}
	return fmt.Errorf("profile %q (want %q or %q): %w", p, ProfileLowLatency, ProfileDashboard, ErrBadConfig)
}
