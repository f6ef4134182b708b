#!/usr/bin/env bash
# bench/peers.sh: run the same `herald bench` cases against Herald, RabbitMQ
# (STOMP plugin) and NATS (core for topics, JetStream for queues) on this
# machine, alternating, median of RUNS runs each, and print a table with the
# ratios Herald/peer. The durable SEND cases also get a bare SQLite writer of
# the same shape (target sqlite: the device's floor, see
# BenchmarkRawSQLiteTail in journal/bench_test.go); one SEND at a time also
# the same writer behind a TCP round trip (sqlite-served,
# BenchmarkRawSQLiteServed), and with that client in a process of its own as
# every broker's client is (sqlite-process, BenchmarkRawSQLiteServedProcess).
# 4 x 64 also gets a bare group-committing writer with the journal's
# checkpoints, flat out and paced to Herald's rate in the run (sqlite-group,
# sqlite-paced, BenchmarkRawSQLiteGroup).
#
#   bench/peers.sh                 # install the peers if needed, run, stop them
#   make bench-peers               # the same
#   DURATION=10s RUNS=3 bench/peers.sh   # DURATION in whole seconds (Ns)
#   CASES_ONLY="drain durable-1x1" bench/peers.sh   # a subset of the cases
#   SKIP_INSTALL=1 KEEP_PEERS=1 bench/peers.sh
#   HERALDD_ARGS="--config /tmp/x.toml" bench/peers.sh   # more heraldd flags (an A/B of a setting)
#   SERVER_WARMUP=0 bench/peers.sh # no unmeasured topic fan-out per server before the first case
#   PIN=1 bench/peers.sh           # servers on CPU 0, the load generator (herald bench) on CPU 1:
#                                  # the LAN's shape, where clients never share the server's cores
#                                  # (the bare SQLite floors, one process each, are not pinned)
#
# Needs root (apt-get, writing /etc/rabbitmq/rabbitmq.conf), Debian 12, Go.
# Ports: Herald STOMP 61614, RabbitMQ STOMP 61615 (AMQP 5672), NATS 4222; the
# default 61613 is left alone. Queues are named after the run
# (/queue/bench-peers-RUNID-...), so runs never share one. Results: $OUT
# (default /tmp/herald-peers-DATE), one JSON line per run in runs.jsonl, the
# table in table.md.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
# Seconds of topic fan-out each server gets, unmeasured, before the first
# case: a fresh server's first seconds are its heap's first touch of fresh
# pages (about 12 us a page fault on a VM), which a 1 s warm-up per run does
# not cover (docs/benchmarks.md).
SERVER_WARMUP=${SERVER_WARMUP:-10}
RUNS=${RUNS:-3}
SIZE=${SIZE:-1024}             # queue cases
TOPIC_SIZE=${TOPIC_SIZE:-128}  # topic cases (issue 17 measures fan-out with 128 B)
HERALD_PORT=${HERALD_PORT:-61614}
RABBIT_PORT=${RABBIT_PORT:-61615}
NATS_PORT=${NATS_PORT:-4222}
PEERS=${PEERS:-"rabbitmq nats sqlite"} # drop one to skip it
DRAIN_MESSAGES=${DRAIN_MESSAGES:-100000}
RUNID=$(date -u +%H%M%S)-$$
QPREFIX=bench-peers-$RUNID
OUT=${OUT:-/tmp/herald-peers-$(date -u +%Y%m%dT%H%M%SZ)}
WORK=$(mktemp -d /tmp/herald-peers.XXXXXX)
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/go/bin

log() { printf '%s peers.sh: %s\n' "$(date +%T)" "$*" >&2; }

HERALDD_PID= NATS_PID= RABBIT_STARTED= EPMD_STARTED= RABBIT_OK= PINNED=
cleanup() {
	set +e
	# A server left running (KEEP_PEERS, a RabbitMQ that was already up) gets
	# every CPU back.
	for p in $PINNED; do
		taskset -a -p -c "0-$(($(nproc) - 1))" "$p" >/dev/null 2>&1
	done
	[ -n "$HERALDD_PID" ] && kill "$HERALDD_PID" 2>/dev/null && wait "$HERALDD_PID" 2>/dev/null
	# The run's queues on RabbitMQ (bench drain's empty ones included).
	if [ -n "$RABBIT_OK" ]; then
		rabbitmqctl list_queues -q name 2>/dev/null | grep -E "^($QPREFIX|bench-drain\.)" |
			while read -r q; do rabbitmqctl delete_queue "$q" >/dev/null 2>&1; done
	fi
	if [ -z "${KEEP_PEERS:-}" ]; then
		[ -n "$NATS_PID" ] && kill "$NATS_PID" 2>/dev/null && wait "$NATS_PID" 2>/dev/null
		if [ -n "$RABBIT_STARTED" ]; then
			log "stopping RabbitMQ"
			rabbitmqctl stop >/dev/null 2>&1
			# rabbitmq-server also started Erlang's port mapper; stop it if it was not running before.
			[ -n "$EPMD_STARTED" ] && epmd -kill >/dev/null 2>&1
		fi
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT

have() { command -v "$1" >/dev/null 2>&1; }
want() { [[ " $PEERS " == *" $1 "* ]]; }

# ---- install -----------------------------------------------------------
if [ -z "${SKIP_INSTALL:-}" ]; then
	pkgs=()
	want rabbitmq && ! have rabbitmq-server && pkgs+=(rabbitmq-server)
	want nats && ! have nats-server && pkgs+=(nats-server)
	have jq || pkgs+=(jq)
	if [ ${#pkgs[@]} -gt 0 ]; then
		log "installing ${pkgs[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}" >"$WORK/apt.log" 2>&1 ||
			{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}"; }
	fi
fi

# ---- build and start Herald --------------------------------------------
log "building heraldd and herald"
(cd "$ROOT" && go build -o "$WORK/bin/" ./cmd/heraldd ./cmd/herald)
HERALD=$WORK/bin/herald
mkdir -p "$WORK/herald-data"
"$WORK/bin/heraldd" --data-dir "$WORK/herald-data" --stomp-listen "127.0.0.1:$HERALD_PORT" \
	--admin-socket "$WORK/herald-admin.sock" --log-level warn ${HERALDD_ARGS:-} >"$OUT/heraldd.log" 2>&1 &
HERALDD_PID=$!

wait_port() { # host port what
	for _ in $(seq 1 100); do
		(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
		sleep 0.2
	done
	log "$3 is not listening on $1:$2"
	return 1
}
wait_port 127.0.0.1 "$HERALD_PORT" heraldd

# ---- RabbitMQ ----------------------------------------------------------
if want rabbitmq; then
	if rabbitmqctl status >/dev/null 2>&1; then
		log "RabbitMQ already running; using it (its stomp listener must be on $RABBIT_PORT)"
	else
		mkdir -p /etc/rabbitmq
		cat >/etc/rabbitmq/rabbitmq.conf <<EOF
# written by herald bench/peers.sh
listeners.tcp.1 = 127.0.0.1:5672
stomp.listeners.tcp.1 = 127.0.0.1:$RABBIT_PORT
stomp.default_vhost = /
loopback_users.guest = true
EOF
		rabbitmq-plugins --offline enable rabbitmq_stomp >/dev/null
		pgrep -x epmd >/dev/null || EPMD_STARTED=1
		log "starting RabbitMQ"
		rabbitmq-server -detached >"$OUT/rabbitmq-start.log" 2>&1 || true
		RABBIT_STARTED=1
	fi
	# await_startup fails at once while the node has not registered with epmd yet.
	up=
	for _ in $(seq 1 60); do
		if rabbitmqctl await_startup >>"$OUT/rabbitmq-start.log" 2>&1; then
			up=1
			break
		fi
		sleep 2
	done
	if [ -n "$up" ] && wait_port 127.0.0.1 "$RABBIT_PORT" rabbitmq-stomp; then
		RABBIT_OK=1
	else
		log "RabbitMQ did not start; see $OUT/rabbitmq-start.log and /var/log/rabbitmq/; carrying on without it"
	fi
fi

# ---- NATS --------------------------------------------------------------
NATS_OK=
if want nats; then
	# -js: JetStream (file store under $WORK) for the queue cases.
	nats-server -js -sd "$WORK/nats-js" -a 127.0.0.1 -p "$NATS_PORT" >"$OUT/nats.log" 2>&1 &
	NATS_PID=$!
	wait_port 127.0.0.1 "$NATS_PORT" nats-server && NATS_OK=1
fi

# ---- pinning (PIN=1) ------------------------------------------------------
GEN=()
if [ -n "${PIN:-}" ]; then
	[ "$(nproc)" -ge 2 ] || { log "PIN=1 needs 2 cores or more"; exit 2; }
	have taskset || { log "PIN=1 needs taskset (apt-get install util-linux)"; exit 2; }
	PINNED="$HERALDD_PID $NATS_PID"
	[ -n "$RABBIT_OK" ] && PINNED="$PINNED $(pgrep -x beam.smp || true)"
	for p in $PINNED; do
		taskset -a -p -c 0 "$p" >/dev/null
	done
	GEN=(taskset -c 1)
	log "pinned: servers on CPU 0, the load generator on CPU 1"
fi

# ---- run ---------------------------------------------------------------
# target NAME -> the global flags for herald
target() {
	case $1 in
	herald) echo "--server 127.0.0.1:$HERALD_PORT" ;;
	rabbitmq) echo "--server 127.0.0.1:$RABBIT_PORT --login guest --passcode guest" ;;
	nats) echo "--server 127.0.0.1:$NATS_PORT" ;;
	esac
}

# Cases: name | targets | bench arguments (the same for every target; per
# target, args below adds what selects the protocol). Each run of a send case
# gets a queue of its own.
CASES=(
	"durable-4x64|herald rabbitmq nats sqlite sqlite-group sqlite-paced|send --producers 4 --window 64 --size $SIZE --persistent"
	"durable-1x1|herald rabbitmq nats sqlite sqlite-served sqlite-process|send --producers 1 --window 1 --size $SIZE --persistent"
	"drain|herald rabbitmq nats|drain --messages $DRAIN_MESSAGES --consumers 4 --prefetch 1000 --size $SIZE"
	"topic-1k|herald rabbitmq nats|topic --dest /topic/bench --subscribers 4 --rate 1000 --size $TOPIC_SIZE"
	"topic-10k|herald rabbitmq nats|topic --dest /topic/bench --subscribers 4 --rate 10000 --size $TOPIC_SIZE"
	"topic-50k|herald rabbitmq nats|topic --dest /topic/bench --subscribers 4 --rate 50000 --size $TOPIC_SIZE"
	"topic-20x1k|herald rabbitmq nats|topic --dest /topic/bench --subscribers 20 --rate 1000 --size $TOPIC_SIZE"
	"topic-20x10k|herald rabbitmq nats|topic --dest /topic/bench --subscribers 20 --rate 10000 --size $TOPIC_SIZE"
	"topic-20x50k|herald rabbitmq nats|topic --dest /topic/bench --subscribers 20 --rate 50000 --size $TOPIC_SIZE"
)

# args TARGET CASE-ARGS DEST -> the protocol flags for TARGET
args() {
	local extra=
	case $1 in
	nats)
		case $2 in
		topic*) extra=--nats ;;
		*) extra=--jetstream ;; # send: JetStream publish acks; drain: a pull consumer
		esac ;;
	rabbitmq) extra="--vhost /" ;; # RabbitMQ takes CONNECT's host header for the vhost
	esac
	case $2 in
	send*) [ "$1" = nats ] || extra="$extra --dest $3" ;;
	esac
	# Herald's own admin socket, so that bench send and drain delete the
	# run's emptied queue (as they do on a default install).
	case $1/$2 in
	herald/send* | herald/drain*) extra="$extra --socket $WORK/herald-admin.sock" ;;
	esac
	echo "$extra"
}

# sqlite_run ARGS -> one JSON line like bench send's, from BenchmarkRawSQLiteTail
# (a bare SQLite writer, 256 rows per commit for 4x64, 1 for 1x1).
(cd "$ROOT" && go test -c -o "$WORK/bin/journal.test" ./journal)
# sqlite_run ARGS served: BenchmarkRawSQLiteServed instead (one row per
# request over a loopback TCP round trip; 1x1 only); sqlite_run ARGS process:
# BenchmarkRawSQLiteServedProcess (the same, the client in another process);
# group: BenchmarkRawSQLiteGroup (4 x 64 requests in flight to a bare
# group-committing writer with the journal's checkpoints; 4x64 only); paced:
# the same paced to HERALD_RATE requests a second (Herald's rate in the run).
sqlite_run() {
	local batch=256 secs bench=RawSQLiteTail
	[[ "$1" == *"--window 1 "* ]] && batch=1
	[ "${2:-}" = served ] && bench=RawSQLiteServed
	[ "${2:-}" = process ] && bench=RawSQLiteServedProcess
	local rate=0
	case ${2:-} in
	group) bench=RawSQLiteGroup ;;
	paced) bench=RawSQLiteGroup rate=${HERALD_RATE:-0} ;;
	esac
	secs=$(($(echo "$DURATION" | sed 's/s$//')))
	HERALD_BENCH_SECONDS=$secs HERALD_BENCH_BATCH=$batch HERALD_BENCH_RATE=$rate "$WORK/bin/journal.test" -test.run '^$' \
		-test.bench "$bench\$" -test.benchtime 1x 2>&1 | awk -v batch="$batch" '/^BenchmarkRawSQLite/ {
			for (i = 3; i < NF; i++) v[$(i+1)] = $i
			printf "{\"mode\":\"send\",\"transport\":\"sqlite\",\"window\":%d,\"msgs_per_s\":%s,\"errors\":0,\"receipt_latency\":{\"p50_us\":%s,\"p99_us\":%s,\"p999_us\":%s,\"max_us\":%s},\"wal_mib\":%s}\n",
				batch, v["rows/s"], v["p50-ms"]*1000, v["p99-ms"]*1000, v["p999-ms"]*1000, v["max-ms"]*1000, v["wal-MiB"]
		}'
}

# server_warmup: SERVER_WARMUP seconds of 4 x 10k topic fan-out per broker
# (Herald, NATS, RabbitMQ), the same for each, not measured.
server_warmup() {
	[ "${SERVER_WARMUP:-0}" -gt 0 ] || return 0
	local t
	for t in herald rabbitmq nats; do
		case $t in
		rabbitmq) [ -n "$RABBIT_OK" ] || continue ;;
		nats) [ -n "$NATS_OK" ] || continue ;;
		esac
		log "server warm-up: $t, ${SERVER_WARMUP}s of topic fan-out (not measured)"
		# shellcheck disable=SC2046
		"${GEN[@]}" "$HERALD" $(target "$t") bench topic --dest /topic/bench-warmup --subscribers 4 --rate 10000 \
			--size "$TOPIC_SIZE" $(args "$t" topic) --duration "${SERVER_WARMUP}s" --warmup 0s --json >/dev/null 2>"$WORK/err" ||
			log "server warm-up of $t failed: $(cat "$WORK/err")"
	done
}
server_warmup

: >"$OUT/runs.jsonl"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
idx=0
for c in "${CASES[@]}"; do
	idx=$((idx + 1))
	IFS='|' read -r name targets cargs <<<"$c"
	if [ -n "${CASES_ONLY:-}" ] && [[ " $CASES_ONLY " != *" $name "* ]]; then
		continue
	fi
	for run in $(seq 1 "$RUNS"); do
		for t in $targets; do
			case $t in
			rabbitmq) [ -n "$RABBIT_OK" ] || continue ;;
			nats) [ -n "$NATS_OK" ] || continue ;;
			sqlite*) want sqlite || continue ;;
			esac
			dest=/queue/$QPREFIX-$idx-$run-$t
			if [[ "$t" == sqlite* ]]; then
				line=$(sqlite_run "$cargs " "${t#sqlite-}")
				[ -n "$line" ] || { log "$name $t run $run failed"; continue; }
			# shellcheck disable=SC2046,SC2086
			elif line=$("${GEN[@]}" "$HERALD" $(target "$t") bench $cargs $(args "$t" "$cargs" "$dest") --duration "$DURATION" --warmup "$WARMUP" --json 2>"$WORK/err"); then
				:
			else
				log "$name $t run $run failed: $(cat "$WORK/err")"
				[ -n "$line" ] || continue
			fi
			# The send cases leave their messages: remove the run's queue at once.
			if [[ "$cargs" == send* ]]; then
				case $t in
				herald) "$HERALD" queue delete --yes --socket "$WORK/herald-admin.sock" "${dest#/queue/}" >/dev/null 2>&1 || true ;;
				rabbitmq) rabbitmqctl delete_queue "${dest#/queue/}" >/dev/null 2>&1 || true ;;
				esac
			fi
			# The paced floor runs at the rate Herald reached in this run.
			[ "$t" = herald ] && HERALD_RATE=$(echo "$line" | jq -r '.msgs_per_s // 0 | floor')
			load=$(cut -d' ' -f1 /proc/loadavg)
			echo "$line" | jq -c --arg case "$name" --argjson idx "$idx" --arg target "$t" --argjson run "$run" --arg load "$load" \
				'{case:$case,idx:$idx,target:$target,run:$run,load1:($load|tonumber)} + .' >>"$OUT/runs.jsonl"
			log "$name $t run $run: $(echo "$line" | jq -r 'if .mode=="send" then "\(.msgs_per_s) msg/s p50 \(.receipt_latency.p50_us)us p99 \(.receipt_latency.p99_us)us p999 \(.receipt_latency.p999_us)us errors \(.errors)" elif .mode=="drain" then "drain \(.msgs_per_s) msg/s (fill \(.fill_msgs_per_s) msg/s) redelivered \(.redelivered) missing \(.missing) errors \(.errors)" else "p50 \(.latency.p50_us)us p99 \(.latency.p99_us)us lost \(.lost) min delivered \(.min_delivered_per_s)/s" end')"
		done
	done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- table -------------------------------------------------------------
# Medians per case and target; ratio Herald/peer.
{
	echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')), kernel $(uname -r)."
	[ -n "${PIN:-}" ] && echo "Pinned (PIN=1): the servers on CPU 0, the load generator on CPU 1; the bare SQLite floors not pinned."
	echo "Load average (1/5/15 min) before: $LOAD_BEFORE, after: $LOAD_AFTER. $RUNS runs of $DURATION (+$WARMUP warm-up) per case and target, alternating; medians."
	echo
	echo "| case | target | pub msg/s | msg/s | p50 ms | p99 ms | p999 ms | lost+errors | msg/s H/peer | p50 H/peer | p99 H/peer |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	jq -s -r '
	  def med: sort | if length == 0 then null else .[(length-1)/2|floor] end;
	  def lat: if .mode == "send" then .receipt_latency elif .mode == "drain" then {} else .latency end;
	  def rate: if .mode == "topic" then .min_delivered_per_s else .msgs_per_s end;
	  def sig(x): if x == 0 then "0" elif x >= 100 then (x | round | tostring)
	              elif x >= 10 then ((x * 10 | round) / 10 | tostring)
	              elif x >= 1 then ((x * 100 | round) / 100 | tostring)
	              elif x >= 0.01 then ((x * 1000 | round) / 1000 | tostring)
	              else "<0.01" end;
	  def r(a; b): if a == null or b == null or b == 0 then "" else sig(a / b) end;
	  def f(x): if x == null then "" else sig(x) end;
	  group_by(.idx) | map(
	    .[0].case as $case
	    | [ group_by(.target)[] | {
	          target: .[0].target,
	          pub: (if .[0].mode == "topic" then ([.[] | .sent_per_s] | med) else null end),
	          rate: ([.[] | rate] | med),
	          p50: ([.[] | lat.p50_us | select(. != null) / 1000] | med),
	          p99: ([.[] | lat.p99_us | select(. != null) / 1000] | med),
	          p999: ([.[] | lat.p999_us | select(. != null) / 1000] | med),
	          bad: ([.[] | ((.lost // 0) + (.missing // 0) + .errors)] | add)
	        } ] as $t
	    | ($t | map(select(.target == "herald")) | first) as $h
	    | $t | sort_by(if .target == "herald" then 0 elif .target == "rabbitmq" then 1 elif .target == "nats" then 2 else 3 end)[]
	    | "| \($case) | \(.target) | \(if .pub == null then "" else (.pub | round | tostring) end) | \(.rate | round) | \(f(.p50)) | \(f(.p99)) | \(f(.p999)) | \(.bad) | " +
	      (if .target == "herald" or $h == null then " |  |  |" else
	        "\(r($h.rate; .rate)) | \(r($h.p50; .p50)) | \(r($h.p99; .p99)) |" end)
	  ) | .[]' "$OUT/runs.jsonl"
	echo
	echo "Herald/peer in each run (round) separately, as the goals are judged:"
	echo
	echo "| case | peer | msg/s H/peer per run | p50 H/peer per run | p99 H/peer per run |"
	echo "|---|---|---|---|---|"
	jq -s -r '
	  def lat: if .mode == "send" then .receipt_latency elif .mode == "drain" then {} else .latency end;
	  def rate: if .mode == "topic" then .min_delivered_per_s else .msgs_per_s end;
	  def r(a; b): if a == null or b == null or b == 0 then "-" else ((a / b * 100 | round) / 100 | tostring) end;
	  group_by(.idx) | map(
	    .[0].case as $case
	    | (map(select(.target == "herald"))) as $h
	    | group_by(.target)[] | select(.[0].target != "herald")
	    | sort_by(.run) as $p
	    | [ $p[] | . as $x | ($h | map(select(.run == $x.run)) | first) as $y
	        | select($y != null)
	        | {rate: r($y | rate; $x | rate), p50: r($y | lat.p50_us; $x | lat.p50_us), p99: r($y | lat.p99_us; $x | lat.p99_us)} ] as $rs
	    | select($rs | length > 0)
	    | "| \($case) | \($p[0].target) | \($rs | map(.rate) | join(" / ")) | \($rs | map(.p50) | join(" / ")) | \($rs | map(.p99) | join(" / ")) |"
	  ) | .[]' "$OUT/runs.jsonl"
	echo
	echo "pub msg/s: the topic publisher's achieved rate (a server can slow it by TCP flow control)."
	echo "Targets: nats is NATS core for the topic cases and JetStream (file stream; a publish ack for the receipt; a durable"
	echo "pull consumer with explicit acks for the drain) for the others; sqlite is a bare SQLite writer (WAL, synchronous=FULL,"
	echo "256 rows per commit for 4x64, 1 for 1x1), its latencies the commit times: the device's floor; sqlite-served (1x1) is"
	echo "the same writer committing each 1 KiB request of a client on a loopback TCP connection before a 1-byte answer,"
	echo "latency at the client: the floor of any server that commits a request before it answers; sqlite-process is that"
	echo "with the client in a process of its own, as a broker's client is (each request and answer wakes another process)."
	echo "sqlite-group (4x64) is 4 x 64 requests in flight to a bare writer that commits all waiting requests at once, with"
	echo "the journal's checkpoints (a PASSIVE every 10 ms, the WAL started over past 16 MiB), latency per request: the device's"
	echo "floor for that shape; sqlite-paced is the same paced to the rate Herald reached in the same run."
	echo "msg/s: confirmed SENDs per second (send cases); messages drained per second, from the first SUBSCRIBE to the last"
	echo "ACK processed (drain, after a fill of $DRAIN_MESSAGES); the slowest subscriber's delivered rate (topic cases)."
	echo "p50/p99/p999: receipt latency (send); publisher-to-subscriber latency over all subscribers (topic)."
	echo "lost+errors: summed over the runs; lost = sent in the window, not delivered within the 2 s drain (topic), or"
	echo "stored but not drained (drain)."
	echo "H/peer: Herald/peer; for msg/s above 1 favours Herald, for latencies below 1 does."
} | tee "$OUT/table.md"
log "results in $OUT"
