#!/usr/bin/env bash
# What a raw port costs in resident memory: an empty bridge's VmRSS, then
# with N veth ends added as raw ports by `port add` (each with OPTIONS,
# e.g. ,ring=512K), per port. The kernel maps a raw port's whole receive
# ring into the process when the port opens, once per worker, so the
# figure is the ring and the rest of the port, per worker.
#
# Usage: benches/port_rss.sh [N] [OPTIONS] [WORKERS]   (as root)
#   N: ports (default 100); OPTIONS: appended to each raw:vethK (default
#   none, the 4M ring); WORKERS: --workers (default 1).
# Builds the release binary first; MPBRIDGE_BINARY names one built
# earlier instead. Everything is made in a namespace of its own, removed
# at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100}
options=${2:-}
workers=${3:-1}
[ "$(id -u)" = 0 ] || { echo "needs root (namespaces)" >&2; exit 1; }
binary=${MPBRIDGE_BINARY:-}
if [ -z "$binary" ]; then
    cargo build --release --bin mpbridge >&2
    binary=$PWD/target/release/mpbridge
fi
ns=mpbrss$$
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link set lo up
for i in $(seq "$n"); do
    ip -n "$ns" link add "veth$i" type veth peer name "ctr$i"
    ip -n "$ns" link set "ctr$i" up
done
ip netns exec "$ns" "$binary" run --name "$ns" --workers "$workers" 2>/dev/null &
pid=$!
socket=/run/mpbridge/$ns.sock
for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
sleep 1
rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }
empty=$(rss)
for i in $(seq "$n"); do
    "$binary" --ctl "$socket" port add "raw:veth$i$options" >/dev/null
done
sleep 1
full=$(rss)
fds=$(ls "/proc/$pid/fd" | wc -l)
echo "ports $n options '${options}' workers $workers: empty ${empty} KiB, with the ports ${full} KiB, per port $(((full - empty) / n)) KiB ($(((full - empty) / n / workers)) KiB per worker), $fds fds"
for i in $(seq "$n"); do
    "$binary" --ctl "$socket" port del "raw:veth$i" >/dev/null
done
sleep 1
echo "all removed again: ${empty} KiB before, $(rss) KiB after, $(ls "/proc/$pid/fd" | wc -l) fds"
