#!/usr/bin/env bash
# bench/web-peers.sh: topic fan-out latency to 20 WebSocket subscribers at
# 1,000 msg/s paced, on Herald (and, in the same run, to 20 STOMP TCP
# subscribers of the same messages) and on RabbitMQ's Web-STOMP plugin; the
# brokers take turns, ROUNDS rounds of DURATION each; medians of the rounds.
#
#   bench/web-peers.sh                       # install RabbitMQ if needed, run, stop it
#   DURATION=10s ROUNDS=3 SUBSCRIBERS=20 RATE=1000 bench/web-peers.sh
#   SKIP_RABBIT=1 bench/web-peers.sh         # Herald only
#
# Needs root (apt-get, writing /etc/rabbitmq/rabbitmq.conf), Debian 12, Go.
# Ports: Herald STOMP 61614 and web 15680; RabbitMQ STOMP 61615, Web-STOMP
# 15674, AMQP 5672. Results: $OUT (default /tmp/herald-web-peers-DATE):
# result.json and table.md. A broker that falls behind is waited for (up to
# webfanout's --drain) before the next one's turn, so a backlog does not
# spill into the other's measurement.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
ROUNDS=${ROUNDS:-3}
SUBSCRIBERS=${SUBSCRIBERS:-20}
RATE=${RATE:-1000}
SIZE=${SIZE:-100}
HERALD_PORT=${HERALD_PORT:-61614}
HERALD_WEB=${HERALD_WEB:-15680}
RABBIT_PORT=${RABBIT_PORT:-61615}
RABBIT_WEB=${RABBIT_WEB:-15674}
OUT=${OUT:-/tmp/herald-web-peers-$(date -u +%Y%m%dT%H%M%SZ)}
WORK=$(mktemp -d /tmp/herald-web-peers.XXXXXX)
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/go/bin

log() { printf '%s web-peers.sh: %s\n' "$(date +%T)" "$*" >&2; }

HERALDD_PID= RABBIT_STARTED= EPMD_STARTED=
cleanup() {
	set +e
	[ -n "$HERALDD_PID" ] && kill "$HERALDD_PID" 2>/dev/null && wait "$HERALDD_PID" 2>/dev/null
	if [ -n "$RABBIT_STARTED" ] && [ -z "${KEEP_PEERS:-}" ]; then
		log "stopping RabbitMQ"
		rabbitmqctl stop >/dev/null 2>&1
		[ -n "$EPMD_STARTED" ] && epmd -kill >/dev/null 2>&1
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT

wait_port() { # host port what
	for _ in $(seq 1 100); do
		(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
		sleep 0.2
	done
	log "$3 is not listening on $1:$2"
	return 1
}

if [ -z "${SKIP_RABBIT:-}" ] && ! command -v rabbitmq-server >/dev/null 2>&1; then
	log "installing rabbitmq-server"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends rabbitmq-server >"$WORK/apt.log" 2>&1 ||
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends rabbitmq-server; }
fi

log "building heraldd and webfanout"
(cd "$ROOT" && go build -o "$WORK/bin/" ./cmd/heraldd ./bench/webfanout)
mkdir -p "$WORK/herald-data"
"$WORK/bin/heraldd" --data-dir "$WORK/herald-data" --stomp-listen "127.0.0.1:$HERALD_PORT" --web-listen "127.0.0.1:$HERALD_WEB" \
	--admin-socket "$WORK/herald-admin.sock" --log-level warn >"$OUT/heraldd.log" 2>&1 &
HERALDD_PID=$!
wait_port 127.0.0.1 "$HERALD_PORT" heraldd
wait_port 127.0.0.1 "$HERALD_WEB" heraldd-web

RABBIT_ARGS=()
if [ -z "${SKIP_RABBIT:-}" ]; then
	# rabbitmqctl itself starts Erlang's port mapper: look for it first.
	pgrep -x epmd >/dev/null || EPMD_STARTED=1
	if rabbitmqctl status >/dev/null 2>&1; then
		EPMD_STARTED=
		log "RabbitMQ already running; using it (Web-STOMP must be on $RABBIT_WEB, STOMP on $RABBIT_PORT)"
	else
		mkdir -p /etc/rabbitmq
		cat >/etc/rabbitmq/rabbitmq.conf <<EOF
# written by herald bench/web-peers.sh
listeners.tcp.1 = 127.0.0.1:5672
stomp.listeners.tcp.1 = 127.0.0.1:$RABBIT_PORT
stomp.default_vhost = /
web_stomp.tcp.ip = 127.0.0.1
web_stomp.tcp.port = $RABBIT_WEB
loopback_users.guest = true
EOF
		rabbitmq-plugins --offline enable rabbitmq_stomp rabbitmq_web_stomp >/dev/null
		log "starting RabbitMQ"
		# Erlang's schedulers spin while idle by default: on a small shared
		# machine that takes CPU from Herald's turns. Off, as for any
		# co-located service.
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="+sbwt none +sbwtdcpu none +sbwtdio none" \
			rabbitmq-server -detached >"$OUT/rabbitmq-start.log" 2>&1 || true
		RABBIT_STARTED=1
	fi
	up=
	for _ in $(seq 1 60); do
		if rabbitmqctl await_startup >>"$OUT/rabbitmq-start.log" 2>&1; then
			up=1
			break
		fi
		sleep 2
	done
	if [ -n "$up" ] && wait_port 127.0.0.1 "$RABBIT_PORT" rabbitmq-stomp && wait_port 127.0.0.1 "$RABBIT_WEB" rabbitmq-web-stomp; then
		RABBIT_ARGS=(--rabbit-stomp "127.0.0.1:$RABBIT_PORT" --rabbit-ws "ws://127.0.0.1:$RABBIT_WEB/ws")
	else
		log "RabbitMQ did not start; see $OUT/rabbitmq-start.log; carrying on without it"
	fi
fi

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
"$WORK/bin/webfanout" --herald-stomp "127.0.0.1:$HERALD_PORT" --herald-ws "ws://127.0.0.1:$HERALD_WEB/stomp" "${RABBIT_ARGS[@]}" \
	--subscribers "$SUBSCRIBERS" --rate "$RATE" --size "$SIZE" --duration "$DURATION" --warmup "$WARMUP" --rounds "$ROUNDS" --json >"$OUT/result.json"
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
{
	echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')), kernel $(uname -r)."
	echo "Load average (1/5/15 min) before: $LOAD_BEFORE, after: $LOAD_AFTER. $SUBSCRIBERS subscribers per target, $RATE msg/s paced, $SIZE-byte bodies, $ROUNDS rounds of $DURATION (+$WARMUP warm-up), brokers alternating; medians of the rounds."
	echo
	echo "| target | p50 ms | p99 ms | p99.9 ms | lost | p99 / herald-tcp p99 |"
	echo "|---|---:|---:|---:|---:|---:|"
	jq -r '(.medians[] | select(.target=="herald-tcp") | .p99_us) as $tcp | .medians[] |
	  "| \(.target) | \(.p50_us/1000*1000|round/1000) | \(.p99_us/1000*1000|round/1000) | \(.p999_us/1000*1000|round/1000) | \(.lost) | \(.p99_us/$tcp*100|round/100) |"' "$OUT/result.json"
} | tee "$OUT/table.md"
log "results in $OUT"
