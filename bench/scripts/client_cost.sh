#!/usr/bin/env bash
# The client's own instructions per uncontended lock+unlock pair (W1's loop), for redlease and
# rslock, counted by callgrind: each runs PAIRS and 5 x PAIRS pairs against a private
# redis-server (not under callgrind), and the difference over 4 x PAIRS is the client's cost
# of one pair (start-up and connection cancel out). Counts do not depend on the machine's load.
#
#   bench/scripts/client_cost.sh [PAIRS]       (default 300; takes a minute or two)
#
# Needs valgrind and a release build of the bench (cargo build --release -p redlease-bench).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
pairs="${1:-300}"
bench="${CARGO_TARGET_DIR:-$root/target}/release/redlease-bench"
[[ -x "$bench" ]] || { echo "client_cost: build it first: cargo build --release -p redlease-bench" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "client_cost: valgrind not found" >&2; exit 1; }
out="$(mktemp -d)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  --loglevel warning >"$out/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -rf "$out"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

# Instructions of one whole run of n pairs.
count() {
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p" "$bench" \
    --client-cost "$1" "$2" --urls "redis://127.0.0.1:$port/" 2>&1 |
    awk '/Collected :/ {print $NF}'
}
echo "client instructions per lock+unlock pair (callgrind, $((4 * pairs)) pairs' difference):"
for impl in redlease rslock; do
  small="$(count "$impl" "$pairs")"
  large="$(count "$impl" "$((5 * pairs))")"
  echo "  $impl: $(( (large - small) / (4 * pairs) ))"
done
