#!/usr/bin/env bash
# bench/mcast-peers.sh: Herald's multicast channel against ZeroMQ's epgm transport (OpenPGM,
# Debian's python3-zmq) in the same run, between network namespaces: one sender, two receivers,
# 64-byte messages sent as fast as the sender goes, without loss and with 10% loss at one
# receiver (nftables numgen inside its namespace). Prints a Markdown table of messages per second
# per receiver and the ratios Herald/epgm.
#
#   sudo bench/mcast-peers.sh                  # N=1000000 messages per run, RUNS=3 rounds
#   N=300000 RUNS=1 sudo bench/mcast-peers.sh  # a quick look
#
# Needs root (namespaces, nftables), Go, and python3-zmq (installed with apt-get when missing;
# SKIP_INSTALL=1 skips that). Addresses 198.18.120.0/24 (RFC 2544 benchmark range) on a bridge in
# a namespace of its own: nothing leaves the machine. Host-wide settings are not changed: the
# receive buffers are 16 MiB where root may force them (Herald: SO_RCVBUFFORCE) and at most
# net.core.rmem_max for ZeroMQ (which uses SO_RCVBUF); the table says which.
# Results: $OUT (default /tmp/herald-mcast-peers-DATE): runs.jsonl and table.md.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
N=${N:-1000000}
RUNS=${RUNS:-3}
SIZE=64
WAIT=${WAIT:-120} # seconds a receiver waits for the last message
PY=${PY:-/usr/bin/python3}
OUT=${OUT:-/tmp/herald-mcast-peers-$(date -u +%Y%m%dT%H%M%SZ)}
WORK=$(mktemp -d /tmp/herald-mcast-peers.XXXXXX)
P=hmp$$ # namespace prefix
HGROUP=239.255.120.1:7420
ZGROUP=239.255.120.2:7421
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/go/bin

log() { printf '%s mcast-peers.sh: %s\n' "$(date +%T)" "$*" >&2; }

cleanup() {
	set +e
	for pid in $(jobs -p); do kill "$pid" 2>/dev/null; done
	wait 2>/dev/null
	for ns in s r1 r2 br; do ip netns del "$P-$ns" 2>/dev/null; done
	rm -rf "$WORK"
}
trap cleanup EXIT

[ "$(id -u)" -eq 0 ] || { echo "mcast-peers.sh: run as root (network namespaces, nftables)" >&2; exit 1; }
if ! "$PY" -c 'import zmq, sys; sys.exit(0 if zmq.has("pgm") else 1)' 2>/dev/null; then
	[ -n "${SKIP_INSTALL:-}" ] && { echo "mcast-peers.sh: python3-zmq with PGM is missing (apt-get install python3-zmq)" >&2; exit 1; }
	apt-get install -y -qq python3-zmq >/dev/null
	"$PY" -c 'import zmq, sys; sys.exit(0 if zmq.has("pgm") else 1)' ||
		{ echo "mcast-peers.sh: this python3-zmq's libzmq has no PGM support: epgm cannot be measured" >&2; exit 1; }
fi

log "building heraldd and herald"
(cd "$ROOT" && go build -o "$WORK/bin/" ./cmd/heraldd ./cmd/herald)

# ---- network: bridge + sender s + receivers r1, r2 ------------------------
ip netns add "$P-br"
ip -n "$P-br" link add br0 type bridge mcast_snooping 0
ip -n "$P-br" link set br0 up
i=1
for h in s r1 r2; do
	ip netns add "$P-$h"
	ip -n "$P-br" link add "v$h" type veth peer name eth0 netns "$P-$h"
	ip -n "$P-br" link set "v$h" master br0 up
	ip -n "$P-$h" addr add "198.18.120.$i/24" dev eth0
	ip -n "$P-$h" link set eth0 up
	ip -n "$P-$h" link set lo up
	ip -n "$P-$h" route add 224.0.0.0/4 dev eth0
	i=$((i + 1))
done
sleep 2 # bridge ports to forwarding
RMEM=$(cat /proc/sys/net/core/rmem_max)

# loss HOST PORT: drop one datagram in ten to udp PORT at HOST; noloss HOST removes it.
loss() {
	ip netns exec "$P-$1" nft add table inet mp
	ip netns exec "$P-$1" nft add chain inet mp input '{ type filter hook input priority 0 ; }'
	ip netns exec "$P-$1" nft add rule inet mp input udp dport "$2" numgen random mod 10 0 drop
}
noloss() { ip netns exec "$P-$1" nft delete table inet mp 2>/dev/null || true; }

# ---- the programs ------------------------------------------------------------
# count.py: counts `herald listen` lines on stdin until N messages or WAIT seconds of silence.
cat >"$WORK/count.py" <<'PY'
import json, os, sys, time, select
n, wait = int(sys.argv[1]), float(sys.argv[2])
fd = sys.stdin.fileno()
msgs = gaps = 0
gap_lines = []
first = last = None
rest = b""
while msgs < n:
    r, _, _ = select.select([fd], [], [], wait)
    if not r:
        break
    b = os.read(fd, 1 << 20)
    if not b:
        break
    now = time.monotonic()
    first = first or now
    b = rest + b
    cut = b.rfind(b"\n") + 1
    b, rest = b[:cut], b[cut:]
    lines = b.count(b"\n")
    g = b.count(b"#GAP") + b.count(b"#SESSION")
    gaps += b.count(b"#GAP")
    if b"#GAP" in b and len(gap_lines) < 5:
        gap_lines += [l.decode(errors="replace") for l in b.split(b"\n") if l.startswith(b"#GAP")][:5 - len(gap_lines)]
    if lines - g > 0:
        last = now
    msgs += lines - g
el = (last - first) if first and last and last > first else 0.0
print(json.dumps({"received": msgs, "gaps": gaps, "gap_lines": gap_lines, "seconds": el, "rate": msgs / el if el > 0 else 0}))
PY
# epgm_peer.py: epgm publisher (pub N SIZE) or subscriber (sub N WAIT), RATE 1 Gbit/s.
cat >"$WORK/epgm_peer.py" <<'PY'
import json, sys, time, zmq
role, n, url = sys.argv[1], int(sys.argv[2]), sys.argv[4]
ctx = zmq.Context()
if role == "pub":
    s = ctx.socket(zmq.PUB)
    s.setsockopt(zmq.RATE, 1000000)
    s.setsockopt(zmq.SNDBUF, 16 << 20)
    s.setsockopt(zmq.SNDHWM, 0)
    s.connect(url)
    time.sleep(1)
    body = b"x" * int(sys.argv[3])
    for i in range(n):
        s.send(body)
    time.sleep(float(sys.argv[5]))  # keep the transmit window for repairs
else:
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.RATE, 1000000)
    s.setsockopt(zmq.RCVBUF, 16 << 20)
    s.setsockopt(zmq.RCVHWM, 0)
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(url)
    print("ready", flush=True, file=sys.stderr)
    wait = float(sys.argv[3])
    msgs, first, last = 0, None, None
    while msgs < n:
        if not s.poll(wait * 1000):
            break
        s.recv()
        now = time.monotonic()
        first = first or now
        last = now
        msgs += 1
    el = (last - first) if first and last and last > first else 0.0
    print(json.dumps({"received": msgs, "gaps": 0, "seconds": el, "rate": msgs / el if el > 0 else 0}))
PY
"$PY" -c "import sys; l=b'x'*$SIZE+b'\n'; sys.stdout.buffer.write(l*$N)" >"$WORK/body.txt"

cat >"$WORK/herald.toml" <<EOF2
data_dir = "$WORK/data"
[stomp]
listen = "127.0.0.1:61620"
[[multicast.channel]]
name = "bench"
group = "$HGROUP"
interface = "eth0"
topics = ["bench.>"]
profile = "low-latency"
EOF2

# herald_run LOSS: one Herald run; prints one JSON line per receiver.
herald_run() {
	local loss=$1 port=${HGROUP#*:}
	rm -rf "$WORK/data"
	ip netns exec "$P-s" "$WORK/bin/heraldd" --config "$WORK/herald.toml" 2>"$WORK/heraldd.log" &
	local hpid=$!
	ip netns exec "$P-s" "$WORK/bin/herald" await-ready --socket "$WORK/data/admin.sock" --timeout 20s >/dev/null
	[ "$loss" = 10 ] && loss r2 "$port"
	local lpids=() cpids=()
	for r in r1 r2; do
		rm -f "$WORK/fifo-$r"; mkfifo "$WORK/fifo-$r"
		ip netns exec "$P-$r" "$WORK/bin/herald" listen --group "$HGROUP" --interface eth0 --topic 'bench.>' --count "$N" >"$WORK/fifo-$r" &
		lpids+=($!)
		"$PY" "$WORK/count.py" "$N" 10 <"$WORK/fifo-$r" >"$WORK/h-$r.json" &
		cpids+=($!)
	done
	sleep 1
	ip netns exec "$P-s" "$WORK/bin/herald" --server 127.0.0.1:61620 send /topic/bench.x <"$WORK/body.txt"
	wait "${cpids[@]}" || true
	kill "${lpids[@]}" 2>/dev/null || true
	wait "${lpids[@]}" 2>/dev/null || true
	kill "$hpid"; wait "$hpid" 2>/dev/null || true
	noloss r2
	for r in r1 r2; do echo "{\"peer\":\"herald\",\"loss\":$loss,\"receiver\":\"$r\",\"result\":$(cat "$WORK/h-$r.json")}"; done
}

# addr HOST: HOST's address (OpenPGM does not resolve interface names inside a namespace:
# "epgm://eth0;GROUP" fails with EINVAL there, the address works).
addr() { case $1 in s) echo 198.18.120.1 ;; r1) echo 198.18.120.2 ;; r2) echo 198.18.120.3 ;; esac; }

zmq_run() {
	local loss=$1 port=${ZGROUP#*:}
	[ "$loss" = 10 ] && loss r2 "$port"
	local spids=()
	for r in r1 r2; do
		ip netns exec "$P-$r" "$PY" "$WORK/epgm_peer.py" sub "$N" 10 "epgm://$(addr "$r");$ZGROUP" >"$WORK/z-$r.json" 2>"$WORK/z-$r.err" &
		spids+=($!)
	done
	sleep 1
	ip netns exec "$P-s" "$PY" "$WORK/epgm_peer.py" pub "$N" "$SIZE" "epgm://$(addr s);$ZGROUP" "$WAIT" &
	local ppid=$!
	# The subscribers end on N messages or 10 s of silence; the publisher keeps its transmit
	# window for repairs until then.
	wait "${spids[@]}" || true
	kill "$ppid" 2>/dev/null; wait "$ppid" 2>/dev/null || true
	noloss r2
	for r in r1 r2; do
		[ -s "$WORK/z-$r.json" ] || { echo "mcast-peers.sh: the epgm receiver on $r failed:" >&2; cat "$WORK/z-$r.err" >&2; exit 1; }
		echo "{\"peer\":\"epgm\",\"loss\":$loss,\"receiver\":\"$r\",\"result\":$(cat "$WORK/z-$r.json")}"
	done
}

: >"$OUT/runs.jsonl"
for run in $(seq "$RUNS"); do
	for loss in 0 10; do
		log "round $run, loss $loss%: herald"
		herald_run "$loss" | tee -a "$OUT/runs.jsonl"
		log "round $run, loss $loss%: epgm"
		zmq_run "$loss" | tee -a "$OUT/runs.jsonl"
	done
done

"$PY" - "$OUT/runs.jsonl" "$N" "$RMEM" >"$OUT/table.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
n, rmem = int(sys.argv[2]), int(sys.argv[3])
# The k-th result of (peer, loss, receiver) is round k: ratios are taken within a round.
runs = {}
for x in rows:
    runs.setdefault((x["peer"], x["loss"], x["receiver"]), []).append(x["result"])
nr = len(runs.get(("herald", 0, "r1"), []))
def cell(v):
    return f"{statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})" if v else "-"
print(f"{n:,} messages of 64 bytes per run, {nr} round(s); msg/s per receiver: median (min-max) over the rounds;"
      " ratio: Herald/epgm within each round; missing: messages not delivered, over all rounds\n")
print("| case | receiver | Herald msg/s | epgm msg/s | Herald/epgm per round | Herald missing | epgm missing |")
print("|---|---|---|---|---|---|---|")
for loss in (0, 10):
    for r in ("r1", "r2"):
        h, z = runs.get(("herald", loss, r), []), runs.get(("epgm", loss, r), [])
        hr, zr = [x["rate"] for x in h], [x["rate"] for x in z]
        ratios = " / ".join(f"{a['rate'] / b['rate']:.2f}" if b["rate"] and b["received"] == n else "epgm incomplete" for a, b in zip(h, z))
        hm = sum(n - x["received"] for x in h)
        hg = sum(x["gaps"] for x in h)
        zm = sum(n - x["received"] for x in z)
        case = "no loss" if loss == 0 else "10% loss at r2"
        print(f"| {case} | {r} | {cell(hr)} | {cell(zr)} | {ratios} | {hm} ({hg} #GAP lines) | {zm} |")
print(f"\nReceive buffers: Herald 16 MiB (SO_RCVBUFFORCE as root); epgm asks 16 MiB, capped at net.core.rmem_max = {rmem:,}."
      " A receiver that got less than all messages is rated over what it got.")
PY
cat "$OUT/table.md"
