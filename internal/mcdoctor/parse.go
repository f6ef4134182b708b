package mcdoctor

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// igmpIface is one interface of /proc/net/igmp.
type igmpIface struct {
	version string             // V1, V2 or V3: the IGMP version in use, lowered by the queriers heard
	groups  map[netip.Addr]int // group -> users (sockets joined)
}

// parseIGMP reads /proc/net/igmp's format.
func parseIGMP(b []byte) map[string]*igmpIface {
	out := map[string]*igmpIface{}
	var cur *igmpIface
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "Idx" {
			continue
		}
		if line[0] != '\t' && line[0] != ' ' {
			// "2\teth0      :     1      V3"; a 10-character name has the colon attached.
			if len(f) < 4 {
				cur = nil
				continue
			}
			name := strings.TrimSuffix(f[1], ":")
			rest := f[2:]
			if len(rest) > 0 && rest[0] == ":" {
				rest = rest[1:]
			}
			cur = &igmpIface{groups: map[netip.Addr]int{}}
			if len(rest) >= 2 {
				cur.version = rest[1]
			}
			out[name] = cur
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[0], 16, 32)
		if err != nil {
			continue
		}
		var a [4]byte
		binary.NativeEndian.PutUint32(a[:], uint32(v)) // the kernel prints the network-order word as a host integer
		users, _ := strconv.Atoi(f[1])
		cur.groups[netip.AddrFrom4(a)] = users
	}
	return out
}

// nftVerdict is what one nftables rule does to the channel's datagrams.
type nftVerdict int

const (
	nftNone       nftVerdict = iota // the rule does not match them, or does not decide
	nftAccept                       // accepts every one of them
	nftDrop                         // drops (or rejects) every one of them
	nftDropSome                     // drops some of them (other conditions: addresses, numgen, ct...)
	nftAcceptSome                   // accepts some of them
)

// nftFinding is a rule or chain policy that drops the channel's port.
type nftFinding struct {
	drop  nftVerdict // nftDrop or nftDropSome
	where string     // "table inet t chain input rule handle 4" or "... policy drop"
	fix   string
}

type nftChain struct {
	Family, Table, Name, Hook, Policy string
	Handle                            int
}

type nftRule struct {
	Family, Table, Chain string
	Handle               int
	Expr                 []map[string]json.RawMessage
}

// parseNft decodes `nft -j list ruleset` and returns the rules and chain policies that drop UDP
// datagrams to port, in ruleset order. A rule counts when it matches udp (or th) dport with port
// in its value (number, range or set); a rule with no match at all and a drop verdict drops
// everything. Chains with policy drop count unless an earlier rule of theirs accepts the port
// unconditionally. Regular chains are judged like base chains (they are reached by jumps).
func parseNft(b []byte, port uint16) ([]nftFinding, error) {
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("nft -j list ruleset: %w", err)
	}
	var chains []nftChain
	rules := map[string][]nftRule{}
	key := func(f, t, c string) string { return f + "\x00" + t + "\x00" + c }
	for _, o := range doc.Nftables {
		if raw, ok := o["chain"]; ok {
			var c nftChain
			if json.Unmarshal(raw, &c) == nil {
				chains = append(chains, c)
			}
		}
		if raw, ok := o["rule"]; ok {
			var r nftRule
			if json.Unmarshal(raw, &r) == nil {
				k := key(r.Family, r.Table, r.Chain)
				rules[k] = append(rules[k], r)
			}
		}
	}
	var out []nftFinding
	for _, c := range chains {
		switch c.Family {
		case "ip", "inet", "netdev":
		default:
			continue // bridge and arp tables do not see this host's own datagrams; ip6 not IPv4
		}
		switch c.Hook {
		case "", "input", "prerouting", "output", "postrouting", "ingress":
		default:
			continue
		}
		accepted := false
		for _, r := range rules[key(c.Family, c.Table, c.Name)] {
			v := nftRuleVerdict(r.Expr, port)
			where := fmt.Sprintf("table %s %s chain %s rule handle %d", c.Family, c.Table, c.Name, r.Handle)
			fix := fmt.Sprintf("nft delete rule %s %s %s handle %d (see it with: nft -a list chain %s %s %s), or accept udp dport %d before it",
				c.Family, c.Table, c.Name, r.Handle, c.Family, c.Table, c.Name, port)
			if v == nftAccept {
				accepted = true
				break
			}
			if v == nftDrop || v == nftDropSome {
				out = append(out, nftFinding{drop: v, where: where, fix: fix})
				if v == nftDrop {
					accepted = true // decided: the policy is not reached
					break
				}
			}
		}
		if c.Hook != "" && c.Policy == "drop" && !accepted {
			out = append(out, nftFinding{drop: nftDrop,
				where: fmt.Sprintf("table %s %s chain %s (hook %s) has policy drop and no rule accepting udp dport %d", c.Family, c.Table, c.Name, c.Hook, port),
				fix:   fmt.Sprintf("nft insert rule %s %s %s udp dport %d accept", c.Family, c.Table, c.Name, port)})
		}
	}
	return out, nil
}

// nftRuleVerdict classifies one rule's expressions for UDP datagrams to port.
func nftRuleVerdict(exprs []map[string]json.RawMessage, port uint16) nftVerdict {
	portMatch, other := false, false
	verdict := ""
	for _, e := range exprs {
		for k, raw := range e {
			switch k {
			case "match":
				var m struct {
					Op    string          `json:"op"`
					Left  json.RawMessage `json:"left"`
					Right json.RawMessage `json:"right"`
				}
				if json.Unmarshal(raw, &m) != nil {
					other = true
					continue
				}
				var left struct {
					Payload *struct{ Protocol, Field string } `json:"payload"`
					Meta    *struct{ Key string }             `json:"meta"`
				}
				_ = json.Unmarshal(m.Left, &left)
				switch {
				case left.Payload != nil && (left.Payload.Protocol == "udp" || left.Payload.Protocol == "th") && left.Payload.Field == "dport":
					in := nftContains(m.Right, port)
					if m.Op == "!=" {
						in = !in
					}
					if !in {
						return nftNone // the rule does not apply to this port
					}
					portMatch = true
				case left.Meta != nil && (left.Meta.Key == "l4proto" || left.Meta.Key == "protocol") && nftIsUDP(m.Right, m.Op),
					left.Payload != nil && left.Payload.Protocol == "ip" && left.Payload.Field == "protocol" && nftIsUDP(m.Right, m.Op):
					// matches UDP: no restriction for our datagrams
				default:
					other = true
				}
			case "drop", "reject":
				verdict = "drop"
			case "accept":
				verdict = "accept"
			case "counter", "log", "limit", "comment":
			}
		}
	}
	switch {
	case verdict == "drop" && !other:
		return nftDrop
	case verdict == "drop":
		return nftDropSome
	case verdict == "accept" && portMatch && !other:
		return nftAccept
	case verdict == "accept":
		return nftAcceptSome
	}
	return nftNone
}

func nftIsUDP(right json.RawMessage, op string) bool {
	var s string
	if json.Unmarshal(right, &s) == nil {
		return (s == "udp") == (op != "!=")
	}
	var n float64
	if json.Unmarshal(right, &n) == nil {
		return (n == 17) == (op != "!=")
	}
	return false
}

// nftContains reports whether an nft JSON value (a number, {"range":[a,b]}, {"set":[...]}, or a
// service name) contains port.
func nftContains(v json.RawMessage, port uint16) bool {
	var n float64
	if json.Unmarshal(v, &n) == nil {
		return n == float64(port)
	}
	var o struct {
		Range []json.RawMessage `json:"range"`
		Set   []json.RawMessage `json:"set"`
	}
	if json.Unmarshal(v, &o) == nil {
		if len(o.Range) == 2 {
			var lo, hi float64
			if json.Unmarshal(o.Range[0], &lo) == nil && json.Unmarshal(o.Range[1], &hi) == nil {
				return lo <= float64(port) && float64(port) <= hi
			}
		}
		for _, e := range o.Set {
			if nftContains(e, port) {
				return true
			}
		}
		return false
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		// A named service or a set reference (@name): judged as containing the port only when
		// it is the number itself.
		return s == strconv.Itoa(int(port))
	}
	return false
}

// parseIptablesSave returns the iptables-save lines that drop or reject UDP to port.
func parseIptablesSave(b []byte, port uint16) []string {
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "-A" {
			continue
		}
		drop, udp, match := false, false, false
		for i := 0; i+1 < len(f); i++ {
			switch f[i] {
			case "-j":
				drop = f[i+1] == "DROP" || f[i+1] == "REJECT"
			case "-p":
				udp = f[i+1] == "udp" || f[i+1] == "17"
			case "--dport", "--dports", "--destination-port", "--destination-ports":
				for _, d := range strings.Split(f[i+1], ",") {
					lo, hi, isRange := strings.Cut(d, ":")
					if !isRange {
						hi = lo
					}
					l, e1 := strconv.Atoi(lo)
					h, e2 := strconv.Atoi(hi)
					if e1 == nil && e2 == nil && l <= int(port) && int(port) <= h {
						match = true
					}
				}
			}
		}
		if drop && (udp && match || len(f) == 4) { // "-A INPUT -j DROP" drops everything
			out = append(out, line)
		}
	}
	return out
}
