#!/usr/bin/env bash
# Server instructions per call of redlease's uncontended acquire and release (and rslock's calls
# beside them), counted by callgrind on a redis-server pinned to CPU 0: see server_cost.py.
#
#   bench/scripts/server_cost.sh [CALLS [SERVER_BIN [OUT_DIR]]]
#
# CALLS per phase (default 2000); SERVER_BIN default redis-server ($REDLEASE_SERVER_BIN), e.g.
# "$(bash scripts/valkey-bin.sh)" for Valkey; OUT_DIR default target/server-cost/<server>.
# Needs valgrind (callgrind_control, callgrind_annotate) and python3. Takes a minute or two.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
calls="${1:-2000}"
bin="${2:-${REDLEASE_SERVER_BIN:-redis-server}}"
label="$("$bin" --version | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^v=/) print $1, substr($i, 3)}')"
out="${3:-$root/target/server-cost/${label// /-}}"
for tool in valgrind callgrind_control callgrind_annotate python3; do
  command -v "$tool" >/dev/null || { echo "server_cost: $tool not found" >&2; exit 1; }
done
mkdir -p "$out"
rm -f "$out"/callgrind.out.*

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cpu=0
(cd "$out" && exec taskset -c "$cpu" valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out.%p" \
  "$bin" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  --loglevel warning >"$out/server.log" 2>&1) &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
# The valgrind process is the shell's child (exec); its pid is the server's.
echo "server_cost: $label under callgrind on port $port (pid $server, CPU $cpu), $calls calls per phase"
timeout 1800 python3 "$here/server_cost.py" --port "$port" --pid "$server" --calls "$calls" \
  --out "$out" --label "($label, $(date -u +%F))"
echo "server_cost: dumps and summary.md in $out"
