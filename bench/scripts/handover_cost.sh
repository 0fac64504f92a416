#!/usr/bin/env bash
# The client's own instructions per cross-process hand-over of a redlease `Lock`, counted by
# callgrind. Against a private redis-server, a holder process (not under callgrind) takes the
# lock again and again, keeping each hold 50 ms; a waiter process under callgrind takes it N
# times and gives it back at once. The server's queue is FIFO, so every acquisition of the
# waiter is one hand-over: queued behind the holder, granted by the holder's release (the
# grant's message wakes it), then its release hands the lock back to the queued holder. The
# waiter runs N and 5 x N acquisitions; the difference over 4 x N is the client's cost of one
# hand-over (its acquisition and its release; start-up and connection cancel out). Counts do
# not depend on the machine's load.
#
#   bench/scripts/handover_cost.sh [N] [OUT]   (default N 100; takes a minute or two)
#
# With HANDOVER_FLOOR=1 in the environment, both processes hand over the bench's floor instead
# (W7's `BLPOP`/`LPUSH` token on one redis-rs connection): the floor's instructions per
# hand-over, to set beside redlease's.
#
# With REDLEASE_BENCH_LOSS_NOTICE=off in the environment, both processes run without the loss
# notice (the notice's price per hand-over is the difference).
#
# With OUT, the larger run's callgrind profile is kept there (for callgrind_annotate
# --inclusive=yes OUT; divide by the hand-overs, and compare with the smaller run's profile,
# OUT.small, to set start-up aside).
#
# With strace installed, it also counts the waiter's system calls per hand-over (futex and
# epoll_wait are the threads' wake-ups; recvfrom, the replies and messages read).
#
# Needs valgrind and a release build of the bench (cargo build --release -p redlease-bench).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
n="${1:-100}"
keep="${2:-}"
name=handover_cost
# shellcheck source=private_redis.sh
source "$here/private_redis.sh"

# The roles' prefix: the floor's, or redlease's.
if [[ "${HANDOVER_FLOOR:-0}" != 0 ]]; then
  floor="floor-" impl_name="the floor (BLPOP/LPUSH token)" label="floor"
else
  floor="" impl_name="a redlease Lock" label="redlease"
fi

# The holder: contends until killed (far more acquisitions than the runs take).
"$bench" --handover-cost "${floor}holder" 100000000 --urls "$url" >"$out/holder.log" 2>&1 &
holder=$!
also_stop="$holder"

# Instructions of one whole waiter run of n acquisitions (its profile as $out/cg.$1).
count() {
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1" "$bench" \
    --handover-cost "${floor}waiter" "$1" --urls "$url" >"$out/run.$1" 2>&1 || { cat "$out/run.$1" >&2; exit 1; }
  local waited
  waited="$(awk '/^waited:/ {print $2}' "$out/run.$1")"
  [[ "$waited" == "$1" ]] || echo "handover_cost: only $waited of $1 acquisitions waited (not all were hand-overs)" >&2
  awk '/Collected :/ {print $NF}' "$out/run.$1"
}
# The system calls of one whole waiter run of n acquisitions, by name (strace's summary, every
# thread of the process), as "name count" lines in $out/sys.$1; fails (after saying why) when
# strace cannot trace here. As with `count`, a run whose acquisitions were not all hand-overs
# is said, and still counted: the difference of the two runs sets a stray one aside.
syscalls() {
  if ! strace -f -c -o "$out/strace.$1" "$bench" \
    --handover-cost "${floor}waiter" "$1" --urls "$url" >"$out/srun.$1" 2>&1; then
    echo "handover_cost: no system call count (strace or the waiter failed):" >&2
    cat "$out/srun.$1" >&2
    return 1
  fi
  local waited
  waited="$(awk '/^waited:/ {print $2}' "$out/srun.$1")"
  [[ "$waited" == "$1" ]] || echo "handover_cost: strace run: only $waited of $1 acquisitions waited (not all were hand-overs)" >&2
  awk '$1 ~ /^[0-9.]+$/ && $NF != "total" {print $NF, $4}' "$out/strace.$1" >"$out/sys.$1"
}
small="$(count "$n")"
large="$(count "$((5 * n))")"
echo "client instructions per cross-process hand-over of $impl_name (callgrind, $((4 * n)) hand-overs' difference):"
echo "  $label: $(( (large - small) / (4 * n) ))"
if [[ -n "$keep" ]]; then
  cp "$out/cg.$((5 * n))" "$keep"
  cp "$out/cg.$n" "$keep.small"
fi
# Under strace every system call stops the process, so the counts of calls whose number
# depends on timing (a thread that spins, then yields or sleeps) are those of a slowed run.
if command -v strace >/dev/null && syscalls "$n" && syscalls "$((5 * n))"; then
  echo "system calls per hand-over (strace -f -c, the same difference; 0.05 or more):"
  awk -v d="$((4 * n))" 'NR == FNR {small[$1] = $2; next}
    {per = ($2 - small[$1]) / d; all += per; if (per >= 0.05) printf "  %s %.2f\n", $1, per}
    END {printf "  in all %.2f\n", all}' "$out/sys.$n" "$out/sys.$((5 * n))"
fi
kill "$holder" 2>/dev/null || true
also_stop=""
