# Sourced by the callgrind scripts (client_cost.sh, handover_cost.sh): checks for the release
# bench and valgrind, then starts a private redis-server on a free loopback port, stopped when
# the script exits. Needs `root` (the workspace) and `name` (the script, for messages); sets
# `bench`, `out` (a scratch folder, removed at exit), `port`, `url` and `server` (its pid).
# A script that starts more processes lists their pids in `also_stop`, stopped at exit too.
bench="${CARGO_TARGET_DIR:-$root/target}/release/redlease-bench"
[[ -x "$bench" ]] || { echo "$name: build it first: cargo build --release -p redlease-bench" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "$name: valgrind not found" >&2; exit 1; }
out="$(mktemp -d)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  --loglevel warning >"$out/server.log" 2>&1 &
server=$!
also_stop=""
trap 'kill $also_stop "$server" 2>/dev/null || true; rm -rf "$out"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
url="redis://127.0.0.1:$port/"
