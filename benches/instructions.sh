#!/usr/bin/env bash
# Instructions and simulated cache misses per forwarded frame through the
# worker, per strategy, counted by valgrind's callgrind (rounds of a batch
# of 64 known-unicast frames each): unlike frames per second, the counts do
# not move with the machine's speed. Counted inside the function that runs
# the rounds: on the in-memory path all of it (the in-memory peers' work
# included, as docs/benchmarks.md's earlier figures are); on the vhost
# path the worker's polls within it, the bridge's own work, not the
# drivers' the benchmark plays.
#
# Usage: benches/instructions.sh [PATH] [ROUNDS] [STRATEGY...]
#   PATH: memory (in-memory ports, benches/forwarding.rs; the default),
#         vhost (two vhost-user ports whose drivers the benchmark plays,
#         benches/vhost.rs, 64-byte frames) or vhost:BYTES (64 to 1518).
# MPBRIDGE_BENCH_BINARY names a benchmark binary built earlier (to count
# an older build) instead of building the current one. On the vhost path
# MPBRIDGE_STATIONS=K (1 to 64) has the frames come from K stations per
# side (64 by default: a station per frame of the batch).
# Columns: instructions (Ir), first-level data misses (D1mr + D1mw) and
# last-level data misses (DLmr + DLmw) per frame, callgrind's simulated
# caches (the machine's own sizes, as valgrind reads them). One process on
# one simulated core: a line the other side's core just wrote does not
# miss here as it would on the machine, so the misses count what the
# worker's own working set costs, not the sharing between cores.
set -euo pipefail
cd "$(dirname "$0")/.."
path=memory
case "${1:-}" in
memory | vhost | vhost:*) path=$1; shift ;;
esac
rounds=${1:-2000}
shift || true
strategies=${*:-mutex rwlock rmlock sharded rcu epoch}
command -v valgrind >/dev/null || { echo "needs valgrind" >&2; exit 1; }
case $path in
memory) bench=forwarding bytes= ;;
vhost) bench=vhost bytes=64 ;;
vhost:*) bench=vhost bytes=${path#vhost:} ;;
esac
binary=${MPBRIDGE_BENCH_BINARY:-}
[ -n "$binary" ] || binary=$(cargo bench --bench "$bench" --no-run --message-format=json 2>/dev/null \
    | sed -n "s/.*\"executable\":\"\\([^\"]*\\/$bench-[^\"]*\\)\".*/\\1/p" | tail -1)
[ -x "$binary" ] || { echo "no benchmark binary built" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# $path, $rounds rounds of 64 frames${MPBRIDGE_STATIONS:+, $MPBRIDGE_STATIONS stations per side}"
printf '%-8s %14s %10s %9s %9s\n' strategy instructions per-frame D1-miss LL-miss
for strategy in $strategies; do
    # shellcheck disable=SC2086 # $bytes is empty or one word
    MPBRIDGE_ROUNDS=$rounds valgrind --tool=callgrind --cache-sim=yes \
        --toggle-collect="*$bench::rounds*" --callgrind-out-file="$out/$strategy" \
        "$binary" "$strategy" $bytes >/dev/null 2>"$out/$strategy.log" ||
        { cat "$out/$strategy.log" >&2; exit 1; }
    if [ "$bench" = forwarding ]; then
        # Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
        read -r ir _ _ _ d1r d1w _ dlr dlw < <(sed -n 's/.*Collected : //p' "$out/$strategy.log")
    else
        # The worker's polls, inclusive: Ir D1mr D1mw DLmr DLmw ("." for 0).
        read -r ir d1r d1w dlr dlw < <(callgrind_annotate --inclusive=yes \
            --show=Ir,D1mr,D1mw,DLmr,DLmw "$out/$strategy" | grep -m1 -E 'Worker<S,P>::poll(_at)? \[' |
            sed 's/([^)]*)//g; s/,//g; s/ \. / 0 /g; s/ \. / 0 /g' | awk '{print $1, $2, $3, $4, $5}')
    fi
    # callgrind leaves trailing zero counts out.
    d1r=${d1r:-0} d1w=${d1w:-0} dlr=${dlr:-0} dlw=${dlw:-0}
    [ "$dlr" = . ] && dlr=0
    [ "$dlw" = . ] && dlw=0
    frames=$((rounds * 64))
    printf '%-8s %14s %10.1f %9.2f %9.2f\n' "$strategy" "$ir" \
        "$(echo "$ir / $frames" | bc -l)" "$(echo "($d1r + $d1w) / $frames" | bc -l)" \
        "$(echo "($dlr + $dlw) / $frames" | bc -l)"
done
