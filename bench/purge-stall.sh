#!/usr/bin/env bash
# bench/purge-stall.sh: what a purge of a big queue costs everyone else.
# Fills /queue/big with durable 1 KiB SENDs (4 producers x 64 outstanding for
# FILL), then runs one durable SEND at a time to /queue/other for 14 s and,
# 3 s into it, `herald queue purge --yes big`. Prints per round: messages
# purged, the purge's time, the WAL's peak size during it (sampled every
# 50 ms), and the other queue's receipt latency (p50, p99, p999, max).
#
#   bench/purge-stall.sh                      # build this tree, 3 rounds
#   ROUNDS=2 bench/purge-stall.sh A B         # alternate builds: directories
#                                             # holding heraldd and herald
#   FILL=6s bench/purge-stall.sh              # a smaller queue
#
# Data goes to a fresh directory under ${TMPDIR:-/var/tmp} per round (on the
# disk, not tmpfs: the point is the device); ports 61700-61899 on 127.0.0.1.
# Needs jq, nc and bc.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
ROUNDS=${ROUNDS:-3}
FILL=${FILL:-12s}
BASE=${TMPDIR:-/var/tmp}
for tool in jq nc bc; do
	command -v "$tool" >/dev/null || { echo "purge-stall: needs $tool (apt-get install jq netcat-openbsd bc)" >&2; exit 1; }
done

BINS=("$@")
if [ ${#BINS[@]} -eq 0 ]; then
	b=$(mktemp -d "$BASE/purge-stall-bin.XXXXXX")
	echo "building heraldd and herald into $b" >&2
	(cd "$ROOT" && go build -o "$b/" ./cmd/heraldd ./cmd/herald)
	BINS=("$b")
fi

round() {
	local bin=$1 d port hp bp m w t0 t1
	d=$(mktemp -d "$BASE/purge-stall.XXXXXX")
	port=$((61700 + RANDOM % 200))
	"$bin/heraldd" --data-dir "$d/data" --stomp-listen "127.0.0.1:$port" --admin-socket "$d/adm.sock" \
		--log-level warn >"$d/heraldd.log" 2>&1 &
	hp=$!
	for _ in $(seq 100); do nc -z 127.0.0.1 "$port" 2>/dev/null && break; sleep 0.1; done
	export HERALD_SOCKET="$d/adm.sock"
	"$bin/herald" --server "127.0.0.1:$port" bench send --dest /queue/big --producers 4 --window 64 \
		--duration "$FILL" --json >"$d/fill.json" 2>/dev/null
	local n
	n=$("$bin/herald" queue show --json big | jq .messages)
	"$bin/herald" --server "127.0.0.1:$port" bench send --dest /queue/other --producers 1 --window 1 \
		--duration 14s --json >"$d/other.json" 2>/dev/null &
	bp=$!
	sleep 3
	(
		m=0
		while [ ! -e "$d/stop" ]; do
			w=$(stat -c %s "$d/data/herald.db-wal" 2>/dev/null || echo 0)
			[ "$w" -gt "$m" ] && m=$w
			echo "$m" >"$d/walmax"
			sleep 0.05
		done
	) &
	t0=$(date +%s%N)
	"$bin/herald" queue purge --yes big >"$d/purge.out" 2>&1 || true
	t1=$(date +%s%N)
	touch "$d/stop"
	wait "$bp"
	sleep 0.1
	printf '| %s | %s | %s | %.2f | %d | %s |\n' "$bin" "$n" "$(tr -d '\n' <"$d/purge.out")" \
		"$(echo "($t1 - $t0) / 1000000000" | bc -l)" "$(( $(cat "$d/walmax") / 1048576 ))" \
		"$(jq -r '.receipt_latency | "\(.p50_us) / \(.p99_us) / \(.p999_us) / \(.max_us)"' "$d/other.json")"
	kill "$hp"
	wait "$hp" 2>/dev/null || true
	rm -rf "$d"
}

echo "| build | messages | purge says | purge s | peak WAL MiB | other queue's receipt p50 / p99 / p999 / max us |"
echo "|---|---|---|---|---|---|"
for _ in $(seq "$ROUNDS"); do
	for bin in "${BINS[@]}"; do
		round "$bin"
	done
done
