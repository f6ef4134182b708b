#!/usr/bin/env bash
# bench/mcast-peers.sh: Herald's multicast channel against ZeroMQ's epgm transport (OpenPGM,
# Debian's python3-zmq) in the same run, between network namespaces: one sender, two receivers,
# 64-byte messages sent as fast as the sender goes, without loss and with 10% loss at one
# receiver (nftables numgen inside its namespace); then latency at LRATE (default 10,000) msg/s
# of 64 bytes, paced, to both receivers (Herald: a STOMP SEND to the line `herald listen` prints;
# epgm: send to recv; the same Python pacing loop publishes both). Prints Markdown tables of messages per second per
# receiver, latency percentiles, the ratios Herald/epgm, and the load average of each round.
#
#   sudo bench/mcast-peers.sh                  # N=1000000 messages per run, RUNS=3 rounds
#   N=300000 RUNS=1 sudo bench/mcast-peers.sh  # a quick look
#   HERALDD_ENV="GOGC=200" LISTEN_ENV="GODEBUG=gctrace=1" sudo bench/mcast-peers.sh  # A/B of a setting
#   HERALD_TOML=$'window = "4MiB"' sudo bench/mcast-peers.sh  # more keys for the channel's table
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
LRATE=${LRATE:-10000} # latency case: messages per second
LSECS=${LSECS:-10}    # latency case: seconds measured (after LWARM s of warm-up)
LWARM=${LWARM:-1}     # latency case: seconds of warm-up, not measured, for both peers
HERALDD_ENV=${HERALDD_ENV:-} # environment (VAR=value ...) for heraldd
LISTEN_ENV=${LISTEN_ENV:-}   # environment for the two `herald listen`
HERALD_TOML=${HERALD_TOML:-} # lines added to the channel's table in heraldd's config
# latency case: the reader of herald listen's output takes what is there every READ_MS ms (a 1 MiB
# pipe), as epgm's receiver only notes the time in its own process; READ_MS=0 reads each line as
# it comes and reports when it got it ("Herald read"), at the cost of a Python wake-up per line.
READ_MS=${READ_MS:-5}
CASES=${CASES:-"throughput latency"}
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
# epgm_lat.py: latency case. lpub RATE SECONDS WARM SIZE URL: paced publisher (a message is due
# every 1/RATE s from the start; what is due is sent, then it sleeps to the next) for WARM + SECONDS
# seconds, the body is its send time (time_ns) and sequence, padded to SIZE; lsub WARM URL: the latency of each message from
# recv's return, after the first WARM messages, until 3 s of silence.
cat >"$WORK/epgm_lat.py" <<'PY'
import json, sys, time, zmq
role = sys.argv[1]
ctx = zmq.Context()
if role == "lpub":
    rate, secs, warm, size, url = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    s = ctx.socket(zmq.PUB)
    s.setsockopt(zmq.RATE, 1000000)
    s.setsockopt(zmq.SNDBUF, 16 << 20)
    s.setsockopt(zmq.SNDHWM, 0)
    s.connect(url)
    time.sleep(1)
    start, i, n = time.monotonic(), 0, int(rate * (secs + warm))
    while i < n:
        due = min(n, int((time.monotonic() - start) * rate) + 1)
        while i < due:
            p = b"%d %d " % (time.time_ns(), i)
            s.send(p + b"x" * max(0, size - len(p)))
            i += 1
        d = start + i / rate - time.monotonic()
        if d > 0:
            time.sleep(d)
    time.sleep(3)
else:
    warm, url = int(sys.argv[2]), sys.argv[3]
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.RATE, 1000000)
    s.setsockopt(zmq.RCVBUF, 16 << 20)
    s.setsockopt(zmq.RCVHWM, 0)
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(url)
    # Parsing waits for the end: during the run the receiver only receives and notes the time.
    got, seen = 0, []
    while s.poll(3000 if got else 30000):
        b = s.recv()
        seen.append((time.time_ns(), b[:40]))
        got += 1
    lat = []
    for now, b in seen:
        ts, seq, _ = b.split(b" ", 2)
        if int(seq) >= warm:
            lat.append(now - int(ts))
    lat.sort()
    pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] / 1e3 if lat else 0
    print(json.dumps({"received": got, "gaps": 0, "measured": len(lat), "p50_us": pct(0.5), "p90_us": pct(0.9),
                      "p99_us": pct(0.99), "p999_us": pct(0.999), "max_us": lat[-1] / 1e3 if lat else 0}))
PY
# stomp_lat.py RATE SECONDS WARM SIZE HOST:PORT: the Herald latency publisher, paced exactly as
# epgm_lat.py's (same loop), over a plain STOMP 1.2 connection: SEND frames without receipts,
# header bench-ts = time_ns at the send, bench-seq = the sequence.
cat >"$WORK/stomp_lat.py" <<'PY'
import socket, sys, time
rate, secs, warm, size, (host, port) = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5].rsplit(":", 1)
c = socket.create_connection((host, int(port)))
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
c.sendall(b"CONNECT\naccept-version:1.2\nhost:%s\n\n\0" % host.encode())
got = b""
while b"\0" not in got:
    got += c.recv(4096)
if not got.startswith(b"CONNECTED"):
    sys.exit("stomp_lat.py: " + got.decode(errors="replace"))
body = b"x" * size
start, i, n = time.monotonic(), 0, int(rate * (secs + warm))
while i < n:
    due = min(n, int((time.monotonic() - start) * rate) + 1)
    while i < due:
        c.sendall(b"SEND\ndestination:/topic/bench.lat\nbench-ts:%d\nbench-seq:%d\ncontent-length:%d\n\n%s\0" % (time.time_ns(), i, size, body))
        i += 1
    d = start + i / rate - time.monotonic()
    if d > 0:
        time.sleep(d)
c.sendall(b"DISCONNECT\n\n\0")
time.sleep(0.5)
PY
# lat.py WARM READ_MS: reads `herald listen --json --timestamps` on stdin. A message's latency is
# its time_ns (when herald listen printed it) minus its bench-ts header (the publisher's clock:
# same host, other namespace). With READ_MS > 0 it takes what the pipe holds every READ_MS ms
# instead of waking for each line: a reader woken 10,000 times a second took about 20 µs of CPU
# per message from the processes measured on 2 cores, which epgm's receiver, noting the time in
# its own process, does not. With READ_MS = 0, "read" is the time this reader got the line (one
# pipe and one more process later). Messages of the first LWARM seconds (warm-up) are not counted.
# Ends after 3 s of silence.
cat >"$WORK/lat.py" <<'PY'
import fcntl, json, os, re, select, sys, time
warm = int(sys.argv[1])  # bench-seq below this: warm-up
every = int(sys.argv[2]) / 1000  # seconds between reads; 0: each line as it comes
fd = sys.stdin.fileno()
if every:
    try:
        fcntl.fcntl(fd, 1031, 1 << 20)  # F_SETPIPE_SZ: room for what comes between two reads
    except OSError as e:
        # Refused past the user's pipe-page limit (fs.pipe-user-pages-soft): go on with the
        # pipe's own size rather than end the reader, which would end herald listen with EPIPE.
        print("lat.py: F_SETPIPE_SZ refused (%s): the pipe keeps its size" % e, file=sys.stderr)
ts_re, seq_re, at_re = re.compile(rb'"bench-ts":"(\d+)"'), re.compile(rb'"bench-seq":"(\d+)"'), re.compile(rb'"time_ns":(\d+)')
# Parsing waits for the end: during the run this reader only reads and notes the time, so that
# it takes as little CPU from the processes measured as the epgm receiver does.
chunks = []
while True:
    r, _, _ = select.select([fd], [], [], 3)
    if not r:
        break
    b = os.read(fd, 1 << 20)
    now = time.time_ns()
    if not b:
        break
    chunks.append((now, b))
    if every:
        time.sleep(every)
lat, rd, rest, gaps, got = [], [], b"", 0, 0
for now, b in chunks:
    b = rest + b
    cut = b.rfind(b"\n") + 1
    b, rest = b[:cut], b[cut:]
    for l in b.split(b"\n"):
        if l.startswith(b'{"gap"'):
            gaps += 1
        m, q, a = ts_re.search(l), seq_re.search(l), at_re.search(l)
        if m and q and a:
            got += 1
            if int(q.group(1)) >= warm:
                lat.append(int(a.group(1)) - int(m.group(1)))
                rd.append(now - int(m.group(1)))
lat.sort()
rd.sort()
pct = lambda l, p: l[min(len(l) - 1, int(p * len(l)))] / 1e3 if l else 0
print(json.dumps({"received": got, "gaps": gaps, "measured": len(lat), "p50_us": pct(lat, 0.5), "p90_us": pct(lat, 0.9),
                  "p99_us": pct(lat, 0.99), "p999_us": pct(lat, 0.999), "max_us": lat[-1] / 1e3 if lat else 0,
                  "read_p50_us": None if every else pct(rd, 0.5), "read_p99_us": None if every else pct(rd, 0.99)}))
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
$HERALD_TOML
EOF2

# herald_run LOSS: one Herald run; prints one JSON line per receiver.
herald_run() {
	local loss=$1 port=${HGROUP#*:}
	rm -rf "$WORK/data"
	# shellcheck disable=SC2086
	ip netns exec "$P-s" env $HERALDD_ENV "$WORK/bin/heraldd" --config "$WORK/herald.toml" 2>"$WORK/heraldd.log" &
	local hpid=$!
	ip netns exec "$P-s" "$WORK/bin/herald" await-ready --socket "$WORK/data/admin.sock" --timeout 20s >/dev/null
	[ "$loss" = 10 ] && loss r2 "$port"
	local lpids=() cpids=()
	for r in r1 r2; do
		rm -f "$WORK/fifo-$r"; mkfifo "$WORK/fifo-$r"
		# shellcheck disable=SC2086
		ip netns exec "$P-$r" env $LISTEN_ENV "$WORK/bin/herald" listen --group "$HGROUP" --interface eth0 --topic 'bench.>' --count "$N" >"$WORK/fifo-$r" &
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

# herald_lat: the latency case for Herald: stomp_lat.py (one STOMP publisher paced at LRATE with
# a send-time header, the same pacing loop as epgm's) into heraldd, two `herald listen --json
# --timestamps` piped into lat.py.
herald_lat() {
	rm -rf "$WORK/data"
	# shellcheck disable=SC2086
	ip netns exec "$P-s" env $HERALDD_ENV "$WORK/bin/heraldd" --config "$WORK/herald.toml" 2>"$WORK/heraldd.log" &
	local hpid=$!
	ip netns exec "$P-s" "$WORK/bin/herald" await-ready --socket "$WORK/data/admin.sock" --timeout 20s >/dev/null
	local lpids=() cpids=()
	for r in r1 r2; do
		rm -f "$WORK/fifo-$r"; mkfifo "$WORK/fifo-$r"
		# shellcheck disable=SC2086
		ip netns exec "$P-$r" env $LISTEN_ENV "$WORK/bin/herald" listen --json --timestamps --group "$HGROUP" --interface eth0 --topic 'bench.>' >"$WORK/fifo-$r" &
		lpids+=($!)
		"$PY" "$WORK/lat.py" "$((LRATE * LWARM))" "$READ_MS" <"$WORK/fifo-$r" >"$WORK/hl-$r.json" &
		cpids+=($!)
	done
	sleep 1
	ip netns exec "$P-s" "$PY" "$WORK/stomp_lat.py" "$LRATE" "$LSECS" "$LWARM" "$SIZE" 127.0.0.1:61620
	sleep 1
	kill "${lpids[@]}" 2>/dev/null || true
	wait "${cpids[@]}" || true
	wait "${lpids[@]}" 2>/dev/null || true
	kill "$hpid"; wait "$hpid" 2>/dev/null || true
	for r in r1 r2; do echo "{\"peer\":\"herald\",\"case\":\"latency\",\"receiver\":\"$r\",\"result\":$(cat "$WORK/hl-$r.json")}"; done
}

zmq_lat() {
	local spids=()
	for r in r1 r2; do
		ip netns exec "$P-$r" "$PY" "$WORK/epgm_lat.py" lsub "$((LRATE * LWARM))" "epgm://$(addr "$r");$ZGROUP" >"$WORK/zl-$r.json" 2>"$WORK/zl-$r.err" &
		spids+=($!)
	done
	sleep 1
	ip netns exec "$P-s" "$PY" "$WORK/epgm_lat.py" lpub "$LRATE" "$LSECS" "$LWARM" "$SIZE" "epgm://$(addr s);$ZGROUP"
	wait "${spids[@]}" || true
	for r in r1 r2; do
		[ -s "$WORK/zl-$r.json" ] || { echo "mcast-peers.sh: the epgm latency receiver on $r failed:" >&2; cat "$WORK/zl-$r.err" >&2; exit 1; }
		echo "{\"peer\":\"epgm\",\"case\":\"latency\",\"receiver\":\"$r\",\"result\":$(cat "$WORK/zl-$r.json")}"
	done
}

loadavg() { echo "{\"round\":$1,\"case\":\"$2\",\"loadavg\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}"; }

: >"$OUT/runs.jsonl"
for run in $(seq "$RUNS"); do
	for loss in 0 10; do
		case $CASES in *throughput*) ;; *) continue ;; esac
		loadavg "$run" "loss$loss" | tee -a "$OUT/runs.jsonl"
		log "round $run, loss $loss%: herald"
		herald_run "$loss" | tee -a "$OUT/runs.jsonl"
		log "round $run, loss $loss%: epgm"
		zmq_run "$loss" | tee -a "$OUT/runs.jsonl"
	done
	case $CASES in *latency*) ;; *) continue ;; esac
	loadavg "$run" latency | tee -a "$OUT/runs.jsonl"
	log "round $run, latency at $LRATE msg/s: herald"
	herald_lat | tee -a "$OUT/runs.jsonl"
	log "round $run, latency at $LRATE msg/s: epgm"
	zmq_lat | tee -a "$OUT/runs.jsonl"
	loadavg "$run" end | tee -a "$OUT/runs.jsonl"
done

"$PY" - "$OUT/runs.jsonl" "$N" "$RMEM" >"$OUT/table.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
loads = [x for x in rows if "loadavg" in x]
lats = [x for x in rows if x.get("case") == "latency" and "peer" in x]
rows = [x for x in rows if "loss" in x]
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
lr = {}
for x in lats:
    lr.setdefault((x["peer"], x["receiver"]), []).append(x["result"])
if lr:
    print("\nLatency at the paced rate, 64-byte bodies, per round (µs; Herald: STOMP SEND to the line `herald listen`"
          " prints (its time_ns); epgm: send to recv in Python); ratio Herald/epgm within the round; Herald read:"
          " the same lines when a Python reader of herald listen's stdout got them (one pipe and one process later;"
          " '-' when that reader took the pipe's content every READ_MS ms instead, the default):\n")
    print("| round | receiver | Herald p50 / p90 / p99 / max | epgm p50 / p90 / p99 / max | p50 ratio | p99 ratio | Herald read p50 / p99 | Herald received / gaps | epgm received |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in ("r1", "r2"):
        for k, (a, b) in enumerate(zip(lr.get(("herald", r), []), lr.get(("epgm", r), []))):
            f = lambda x: f'{x["p50_us"]:.0f} / {x["p90_us"]:.0f} / {x["p99_us"]:.0f} / {x["max_us"]:.0f}'
            ratio = lambda p: f'{a[p] / b[p]:.2f}' if b[p] else "-"
            rd = "-" if a.get("read_p50_us") is None else f'{a["read_p50_us"]:.0f} / {a["read_p99_us"]:.0f}'
            print(f'| {k + 1} | {r} | {f(a)} | {f(b)} | {ratio("p50_us")} | {ratio("p99_us")} | {rd} | {a["received"]:,} / {a["gaps"]} | {b["received"]:,} |')
if loads:
    print("\nLoad average (1, 5, 15 min) at the start of each case: " + "; ".join(f'round {x["round"]} {x["case"]}: {x["loadavg"]}' for x in loads))
PY
cat "$OUT/table.md"
