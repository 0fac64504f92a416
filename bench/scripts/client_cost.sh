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
name=client_cost
# shellcheck source=private_redis.sh
source "$here/private_redis.sh"

# Instructions of one whole run of n pairs.
count() {
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p" "$bench" \
    --client-cost "$1" "$2" --urls "$url" 2>&1 |
    awk '/Collected :/ {print $NF}'
}
echo "client instructions per lock+unlock pair (callgrind, $((4 * pairs)) pairs' difference):"
for impl in redlease rslock; do
  small="$(count "$impl" "$pairs")"
  large="$(count "$impl" "$((5 * pairs))")"
  echo "  $impl: $(( (large - small) / (4 * pairs) ))"
done
