// Package mcdoctor checks, on the host where it runs, what makes IP
// multicast fail in practice for one Herald channel: the interface, the
// route to the group, the receive buffer limit, reverse-path filtering,
// IGMP membership and querier, firewall rules on the channel's port, the
// TTL against the route, and a loopback send/receive on the group. Each
// check gives a status and, when it is not OK, the fix. `herald doctor`
// is its command line.
//
// The checks read the namespace of the calling OS thread (/proc/thread-self,
// /proc/sys, sockets and the ip and nft commands it starts), so a test can
// run them inside a network namespace.
package mcdoctor

import (
	"context"
	"net/netip"
	"time"
)

// Status is the outcome of one check.
type Status string

const (
	OK   Status = "OK"
	Info Status = "INFO" // nothing wrong found, but it could not be verified (the detail says why)
	Warn Status = "WARN" // works here, but fails under load, on some networks or for some receivers
	Fail Status = "FAIL" // multicast does not work as configured
)

// Result is one check's outcome.
type Result struct {
	Check  string `json:"check"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Channel is what is checked: one group on one interface.
type Channel struct {
	Group     netip.AddrPort
	Interface string // "" means the interface of the route to the group, as heraldd and herald listen pick it
	TTL       int    // the sender's TTL (0: multicast.DefaultTTL)
	RcvBuf    int    // the receive buffer herald listen asks for (0: multicast.DefaultRcvBuf)
	// Sender, when valid, is the address the channel's datagrams come
	// from: rp_filter is then checked against the route back to it.
	Sender netip.Addr
}

// Options tune the active checks.
type Options struct {
	// QuerierWait is how long to listen for an IGMP query when the kernel
	// has not recorded one (0: do not listen; queries come every 125 s by
	// default).
	QuerierWait time.Duration
	// LoopbackWait bounds the loopback send/receive (0: 1 s).
	LoopbackWait time.Duration
}

// Check names, in the order Run returns them.
const (
	CheckInterface = "interface"
	CheckRoute     = "route"
	CheckRmemMax   = "rmem_max"
	CheckRPFilter  = "rp_filter"
	CheckIGMP      = "igmp"
	CheckQuerier   = "querier"
	CheckFirewall  = "firewall"
	CheckTTL       = "ttl"
	CheckLoopback  = "loopback"
)

// Failed returns the names of the checks that failed.
func Failed(rs []Result) []string {
	var out []string
	for _, r := range rs {
		if r.Status == Fail {
			out = append(out, r.Check)
		}
	}
	return out
}

// Run runs every check for ch on the calling thread's network namespace.
func Run(ctx context.Context, ch Channel, o Options) []Result {
	return run(ctx, ch, o)
}
