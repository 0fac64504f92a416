#!/usr/bin/env bash
# Usage: scripts/with-sentinel.sh CMD ARGS...
# Runs CMD with REDIS_SENTINEL_URL set (redis+sentinel://127.0.0.1:S1,...,/mymaster). If the
# caller set REDIS_SENTINEL_URL, CMD simply runs against it; otherwise a private group of one
# master, two replicas and three sentinels (quorum 2, down-after 1 s; loopback ports, temp dir,
# no persistence) is started for CMD, and each process is killed by its own pid when this script
# exits. The binary is $REDLEASE_SERVER_BIN or redis-server (sentinels run it with --sentinel).
set -euo pipefail

if [[ $# -eq 0 ]]; then
  echo "usage: $0 CMD ARGS..." >&2
  exit 2
fi
if [[ -n "${REDIS_SENTINEL_URL:-}" ]]; then
  exec "$@"
fi

bin="${REDLEASE_SERVER_BIN:-redis-server}"
for tool in "$bin" redis-cli; do
  if ! command -v "$tool" >/dev/null; then
    echo "$0: $tool not found: run 'make deps', or set REDIS_SENTINEL_URL" >&2
    exit 1
  fi
done

dir="$(mktemp -d "${TMPDIR:-/tmp}/redlease-sentinel.XXXXXX")"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_taken() {
  timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}
until_ping() {
  for _poll in $(seq 50); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "$0: nothing answers on port $1" >&2
  exit 1
}

base=$((20000 + RANDOM % 9000))
for i in 0 1 2 3 4 5; do
  if port_taken $((base + i)); then
    echo "$0: port $((base + i)) is taken; try again" >&2
    exit 1
  fi
done
master=$base
for i in 0 1 2; do
  port=$((base + i))
  mkdir -p "$dir/$port"
  replica=()
  [[ $i -gt 0 ]] && replica=(--replicaof 127.0.0.1 "$master")
  "$bin" --port "$port" --bind 127.0.0.1 --dir "$dir/$port" --save '' --appendonly no \
    --daemonize no "${replica[@]}" </dev/null >"$dir/$port/server.log" 2>&1 &
  pids+=($!)
  until_ping "$port"
done
sentinels=()
for i in 3 4 5; do
  port=$((base + i))
  mkdir -p "$dir/$port"
  cat >"$dir/$port/sentinel.conf" <<CONF
port $port
bind 127.0.0.1
daemonize no
dir $dir/$port
sentinel monitor mymaster 127.0.0.1 $master 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 5000
CONF
  "$bin" "$dir/$port/sentinel.conf" --sentinel </dev/null >"$dir/$port/sentinel.log" 2>&1 &
  pids+=($!)
  until_ping "$port"
  sentinels+=("127.0.0.1:$port")
done
# A failover needs the sentinels to know each other (hello messages, every 2 s).
for _poll in $(seq 100); do
  known=$(redis-cli -p $((base + 3)) sentinel sentinels mymaster 2>/dev/null | grep -c '^name$' || true)
  [[ $known -ge 2 ]] && break
  sleep 0.1
done

REDIS_SENTINEL_URL="redis+sentinel://$(IFS=,; echo "${sentinels[*]}")/mymaster"
export REDIS_SENTINEL_URL
echo "with-sentinel: $REDIS_SENTINEL_URL" >&2
"$@"
