#!/usr/bin/env bash
# What an EVPN port's reconcile costs: the CPU time of mpbridge's owner
# thread (which reconciles each mirror once a second: one dump of the
# namespace's fdb, and the table's records) while nothing else happens,
# with N remote stations that zebra's way of installing them (extern_learn
# entries with a dst on the mirror's vxlan device) put there, so that the
# dump and the table both hold N. The main thread is the owner; the
# figure is its utime + stime over SECONDS, per tick.
#
# Usage: benches/evpn_reconcile.sh [--lock STRATEGY] [SECONDS] [N...]   (as root)
#   STRATEGY: the bridge's --lock (default: its default); SECONDS: how
#   long each N is watched (default 30); N: default 0 1000 10000 30000.
# Builds the release binary first; MPBRIDGE_BINARY names one built
# earlier (to measure an older build) instead. Everything runs in a namespace of its
# own, removed at the end; no FRR is needed (the entries are written as
# zebra writes them).
set -euo pipefail
cd "$(dirname "$0")/.."
lock=()
if [ "${1:-}" = --lock ]; then
    lock=(--lock "$2")
    shift 2
fi
seconds=${1:-30}
shift || true
counts=${*:-0 1000 10000 30000}
[ "$(id -u)" = 0 ] || { echo "needs root (namespaces)" >&2; exit 1; }
binary=${MPBRIDGE_BINARY:-}
if [ -z "$binary" ]; then
    cargo build --release --bin mpbridge >&2
    binary=$PWD/target/release/mpbridge
fi
hz=$(getconf CLK_TCK)
ns=mpbevpn$$
work=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# The owner thread's user and system CPU time, in clock ticks.
owner_ticks() { awk '{print $14, $15}' "/proc/$pid/task/$pid/stat"; }

echo "# N remote stations | owner CPU ms per tick (user + system) | ms per 1000 stations | VmRSS kB"
for n in $counts; do
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add 198.19.0.1/32 dev lo
    ip -n "$ns" link add a0 type veth peer name a1
    ip -n "$ns" link set a0 up
    ip -n "$ns" link set a1 up
    ip netns exec "$ns" "$binary" run --name "$ns" "${lock[@]}" --port raw:a0 \
        --port vxlan:s42,vni=42,local=198.19.0.1,evpn=on 2>"$work/log" &
    pid=$!
    for _ in $(seq 100); do grep -q ready "$work/log" && break; sleep 0.1; done
    grep -q ready "$work/log" || { cat "$work/log" >&2; exit 1; }
    # N stations behind 198.19.0.2 and its flood entry, as zebra installs
    # them.
    {
        echo "fdb add 00:00:00:00:00:00 dev mpe42v dst 198.19.0.2 self permanent"
        for i in $(seq 1 "$n"); do
            printf 'fdb add 02:00:00:%02x:%02x:%02x dev mpe42v dst 198.19.0.2 self extern_learn\n' \
                $((i >> 16 & 255)) $((i >> 8 & 255)) $((i & 255))
        done
    } >"$work/batch"
    ip netns exec "$ns" bridge -batch "$work/batch"
    socket=/run/mpbridge/$ns.sock
    got=
    for _ in $(seq 600); do
        got=$("$binary" --ctl "$socket" stats -j |
            python3 -c 'import json,sys; p=[p for p in json.load(sys.stdin)["ports"] if p["name"]=="vxlan:s42"][0]; print(p["evpn"]["remote_macs"])')
        [ "$got" = "$n" ] && break
        sleep 0.1
    done
    [ "$got" = "$n" ] || { echo "N=$n: $got installed" >&2; exit 1; }
    sleep 2
    read -r user0 sys0 < <(owner_ticks)
    sleep "$seconds"
    read -r user1 sys1 < <(owner_ticks)
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    python3 -c "
n, u, k, s, hz, rss = $n, $user1 - $user0, $sys1 - $sys0, $seconds, $hz, $rss
user, system = u * 1000 / hz / s, k * 1000 / hz / s
ms = user + system
print(f'{n} | {ms:.2f} ({user:.2f} + {system:.2f}) | {ms / n * 1000 if n else 0:.2f} | {rss}')"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
    ip netns del "$ns"
done
