#!/usr/bin/env bash
# Instructions per forwarded frame through the worker on in-memory ports
# (benches/forwarding.rs's known unicast, one batch of 64 per round), per
# strategy, counted by valgrind's callgrind inside the function that runs
# the rounds: unlike frames per second, the count does not move with the
# machine's speed. Usage: benches/instructions.sh [ROUNDS] [STRATEGY...]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2000}
shift || true
strategies=${*:-mutex rwlock rmlock sharded rcu epoch}
command -v valgrind >/dev/null || { echo "needs valgrind" >&2; exit 1; }
bench=$(cargo bench --bench forwarding --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*forwarding[^"]*\)".*/\1/p' | tail -1)
[ -x "$bench" ] || { echo "no benchmark binary built" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-8s %14s %12s\n' strategy instructions per-frame
for strategy in $strategies; do
    MPBRIDGE_ROUNDS=$rounds valgrind --tool=callgrind --toggle-collect='*forwarding::rounds*' \
        --callgrind-out-file="$out/$strategy" "$bench" "$strategy" >/dev/null 2>"$out/$strategy.log"
    ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$out/$strategy.log")
    printf '%-8s %14s %12.1f\n' "$strategy" "$ir" "$(echo "$ir / ($rounds * 64)" | bc -l)"
done
