#!/usr/bin/env bash
# bench/kv-peers.sh: Herald's key-value store against etcd (Debian's etcd-server) on this
# machine, the same cases against each with the same load generator (bench/kvpeers, a Go
# program of its own module: Herald's STOMP client and etcd's clientv3), alternating targets
# within each round, median of RUNS rounds, and a table with the ratios Herald/etcd.
#
#   bench/kv-peers.sh                      # install etcd-server if needed, run, stop both
#   DURATION=5s RUNS=1 bench/kv-peers.sh   # a quick look
#   SKIP_INSTALL=1 bench/kv-peers.sh
#
# Cases: puts with an answer once durable (1 and 4 writers), compare-and-set of one counter
# key by 4 writers racing (read-free retry), and watch fan-out latency to 20 watchers (one put
# at a time). Both durable on every write: heraldd with its default journal.sync = "full",
# etcd with its default fsync of the WAL. Needs root for apt-get (or etcd already installed)
# and Go. Ports: Herald STOMP 61616, etcd client 2479 and peer 2480 (the defaults 61613 and
# 2379 are left alone). Results: $OUT (default /tmp/herald-kv-peers-DATE): runs.jsonl, one
# JSON line per run, and table.md.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
RUNS=${RUNS:-3}
SIZE=${SIZE:-100}
PUTS=${PUTS:-500}
HERALD_PORT=${HERALD_PORT:-61616}
ETCD_PORT=${ETCD_PORT:-2479}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-2480}
OUT=${OUT:-/tmp/herald-kv-peers-$(date -u +%Y%m%dT%H%M%SZ)}
WORK=$(mktemp -d /tmp/herald-kv-peers.XXXXXX)
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/go/bin

log() { printf '%s kv-peers.sh: %s\n' "$(date +%T)" "$*" >&2; }

HERALDD_PID= ETCD_PID=
cleanup() {
	set +e
	[ -n "$HERALDD_PID" ] && kill "$HERALDD_PID" 2>/dev/null && wait "$HERALDD_PID" 2>/dev/null
	[ -n "$ETCD_PID" ] && kill "$ETCD_PID" 2>/dev/null && wait "$ETCD_PID" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT

# ---- install -----------------------------------------------------------
if [ -z "${SKIP_INSTALL:-}" ] && ! command -v etcd >/dev/null 2>&1; then
	log "installing etcd-server"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server >"$WORK/apt.log" 2>&1 ||
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server; }
fi
command -v etcd >/dev/null 2>&1 || { log "etcd not found: apt-get install etcd-server"; exit 1; }

# ---- build -------------------------------------------------------------
log "building heraldd and bench/kvpeers"
(cd "$ROOT" && go build -o "$WORK/bin/" ./cmd/heraldd)
(cd "$HERE/kvpeers" && go build -o "$WORK/bin/kvpeers" .)
KVPEERS=$WORK/bin/kvpeers

wait_port() { # host port what
	for _ in $(seq 1 100); do
		(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
		sleep 0.2
	done
	log "$3 is not listening on $1:$2"
	return 1
}

# ---- start both --------------------------------------------------------
mkdir -p "$WORK/herald-data"
"$WORK/bin/heraldd" --data-dir "$WORK/herald-data" --stomp-listen "127.0.0.1:$HERALD_PORT" \
	--admin-socket "$WORK/herald-admin.sock" --log-level warn >"$OUT/heraldd.log" 2>&1 &
HERALDD_PID=$!
etcd --name kvpeers --data-dir "$WORK/etcd-data" \
	--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
	--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-cluster "kvpeers=http://127.0.0.1:$ETCD_PEER_PORT" --log-level warn >"$OUT/etcd.log" 2>&1 &
ETCD_PID=$!
wait_port 127.0.0.1 "$HERALD_PORT" heraldd
wait_port 127.0.0.1 "$ETCD_PORT" etcd
log "$(etcd --version | head -1), heraldd from $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo this tree)"

addr() { # target
	case $1 in
	herald) echo "127.0.0.1:$HERALD_PORT" ;;
	etcd) echo "127.0.0.1:$ETCD_PORT" ;;
	esac
}

# Cases: name | kvpeers arguments (the same for both targets).
CASES=(
	"put-1|-case put -writers 1 -duration $DURATION -warmup $WARMUP"
	"put-4|-case put -writers 4 -duration $DURATION -warmup $WARMUP"
	"cas-4|-case cas -writers 4 -duration $DURATION -warmup $WARMUP"
	"fanout-20|-case fanout -watchers 20 -puts $PUTS"
)

: >"$OUT/runs.jsonl"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for run in $(seq 1 "$RUNS"); do
	for c in "${CASES[@]}"; do
		name=${c%%|*}
		args=${c#*|}
		# Alternate which target goes first from round to round.
		targets="herald etcd"
		[ $((run % 2)) -eq 0 ] && targets="etcd herald"
		for t in $targets; do
			log "round $run/$RUNS: $name against $t"
			# shellcheck disable=SC2086
			"$KVPEERS" -target "$t" -addr "$(addr "$t")" -size "$SIZE" -prefix "kvp$run" $args >>"$OUT/runs.jsonl"
		done
	done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

{
	echo "Herald/etcd, median of $RUNS round(s); $SIZE-byte values; $DURATION per put/cas run; $PUTS puts per fan-out run."
	echo "Load average before: $LOAD_BEFORE, after: $LOAD_AFTER; $(nproc) CPUs."
	echo
	"$KVPEERS" -table "$OUT/runs.jsonl"
} | tee "$OUT/table.md"
log "results in $OUT"
