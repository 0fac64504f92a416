#!/usr/bin/env bash
# Usage: scripts/with-cluster.sh CMD ARGS...
# Runs CMD with REDIS_CLUSTER_URL set (redis+cluster://127.0.0.1:P1,...). If the caller set
# REDIS_CLUSTER_URL, CMD simply runs against it; otherwise a private Redis Cluster of 3
# primaries and 3 replicas (loopback ports, temp dir, no persistence) is started for CMD and
# each node is killed by its own pid when this script exits. The binary is
# $REDLEASE_SERVER_BIN or redis-server; redis-cli forms the cluster.
set -euo pipefail

if [[ $# -eq 0 ]]; then
  echo "usage: $0 CMD ARGS..." >&2
  exit 2
fi
if [[ -n "${REDIS_CLUSTER_URL:-}" ]]; then
  exec "$@"
fi

bin="${REDLEASE_SERVER_BIN:-redis-server}"
for tool in "$bin" redis-cli; do
  if ! command -v "$tool" >/dev/null; then
    echo "$0: $tool not found: run 'make deps', or set REDIS_CLUSTER_URL" >&2
    exit 1
  fi
done

dir="$(mktemp -d "${TMPDIR:-/tmp}/redlease-cluster.XXXXXX")"
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

# Six ports below the ephemeral range, each with its bus port (+10000) free too.
base=$((20000 + RANDOM % 9000))
ports=()
for i in 0 1 2 3 4 5; do
  port=$((base + i))
  if port_taken "$port" || port_taken $((port + 10000)); then
    echo "$0: port $port or its bus port is taken; try again" >&2
    exit 1
  fi
  mkdir -p "$dir/$port"
  "$bin" --port "$port" --bind 127.0.0.1 --dir "$dir/$port" --save '' --appendonly no \
    --cluster-enabled yes --cluster-node-timeout 1000 --daemonize no \
    </dev/null >"$dir/$port/server.log" 2>&1 &
  pids+=($!)
  ports+=("$port")
done
for port in "${ports[@]}"; do
  for _poll in $(seq 50); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
done
nodes=()
for port in "${ports[@]}"; do nodes+=("127.0.0.1:$port"); done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 ||
  { cat "$dir/create.log" >&2; exit 1; }
for _poll in $(seq 100); do
  ok=1
  for port in "${ports[@]}"; do
    redis-cli -p "$port" cluster info 2>/dev/null | grep -q 'cluster_state:ok' || ok=0
  done
  [[ $ok == 1 ]] && break
  sleep 0.1
done

REDIS_CLUSTER_URL="redis+cluster://$(IFS=,; echo "${nodes[*]}")"
export REDIS_CLUSTER_URL
echo "with-cluster: $REDIS_CLUSTER_URL" >&2
"$@"
