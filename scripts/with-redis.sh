#!/usr/bin/env bash
# Usage: scripts/with-redis.sh CMD ARGS...
# Runs CMD with REDIS_URL set. If the caller set REDIS_URL, CMD simply runs against it;
# otherwise a private server (free loopback port, temp dir, no persistence) is started for
# CMD and killed by its own pid when this script exits. The binary is $REDLEASE_SERVER_BIN
# or redis-server.
set -euo pipefail

if [[ $# -eq 0 ]]; then
  echo "usage: $0 CMD ARGS..." >&2
  exit 2
fi
if [[ -n "${REDIS_URL:-}" ]]; then
  exec "$@"
fi

bin="${REDLEASE_SERVER_BIN:-redis-server}"
if ! command -v "$bin" >/dev/null; then
  echo "$0: $bin not found: run 'make deps', or set REDIS_URL to a running server" >&2
  exit 1
fi

dir="$(mktemp -d "${TMPDIR:-/tmp}/redlease-redis.XXXXXX")"
pid=""
cleanup() {
  if [[ -n "$pid" ]]; then
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM # run the EXIT trap on Ctrl-C too

# True when something on 127.0.0.1:$1 answers PING (bash's /dev/tcp: no redis-cli needed).
answers_ping() {
  timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1 && printf 'PING\r\n' >&3 &&
    IFS= read -r line <&3 && [[ \$line == +PONG* ]]" 2>/dev/null
}
port_taken() {
  timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# Ports below the kernel's ephemeral range (32768+), so outgoing connections never hold one.
for _attempt in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 10000))
  port_taken "$port" && continue
  "$bin" --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
    --daemonize no </dev/null >"$dir/server.log" 2>&1 &
  pid=$!
  for _poll in $(seq 50); do # 50 x 0.1 s
    kill -0 "$pid" 2>/dev/null || break
    answers_ping "$port" && break 2
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
done
if [[ -z "$pid" ]]; then
  echo "$0: could not start $bin; its last log:" >&2
  cat "$dir/server.log" >&2
  exit 1
fi

export REDIS_URL="redis://127.0.0.1:$port"
echo "with-redis: $bin pid $pid at $REDIS_URL" >&2
status=0
"$@" || status=$?
exit "$status"
