#!/usr/bin/env bash
# Round-trip time of a small UDP request and its answer between two hosts
# (network namespaces) joined by the kernel bridge or by mpbridge on raw
# ports: the latency a forwarder adds, which frames per second do not
# show. Needs root, iproute2 and python3; addresses 198.18.0.1 and
# 198.18.0.2 exist only inside the namespaces it makes and removes.
#
#   sudo docs/rtt.sh kernel
#   sudo docs/rtt.sh mpbridge [MPBRIDGE OPTIONS...]    e.g. --rx-ring block
#
# Prints the median and 90th percentile of 2000 round trips (after 300
# unmeasured ones), as the client in Python measures them.

set -u
here=$(cd "$(dirname "$0")" && pwd)
mpbridge=${MPBRIDGE:-$here/../target/release/mpbridge}
what=${1:?usage: $0 kernel|mpbridge [mpbridge options]}
shift
prefix=rtt$$
daemon=""
server=""

cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null
    [ -n "$daemon" ] && kill "$daemon" 2>/dev/null
    wait 2>/dev/null
    for n in h1 h2 br; do ip netns del "$prefix$n" 2>/dev/null; done
}
trap cleanup EXIT

for n in h1 h2 br; do
    ip netns add "$prefix$n"
    ip -n "$prefix$n" link set lo up
done
for i in 1 2; do
    ip -n "${prefix}h$i" link add eth0 type veth peer name "p$i" netns "${prefix}br"
    ip -n "${prefix}h$i" addr add "198.18.0.$i/24" dev eth0
    ip -n "${prefix}h$i" link set eth0 up
    ip -n "${prefix}br" link set "p$i" up
done
case $what in
kernel)
    ip -n "${prefix}br" link add b0 type bridge
    ip -n "${prefix}br" link set b0 up
    for i in 1 2; do ip -n "${prefix}br" link set "p$i" master b0; done
    ;;
mpbridge)
    ip netns exec "${prefix}br" "$mpbridge" run --name "$prefix" \
        --port raw:p1 --port raw:p2 "$@" >/dev/null 2>&1 &
    daemon=$!
    sleep 1
    ;;
*)
    echo "usage: $0 kernel|mpbridge [mpbridge options]" >&2
    exit 2
    ;;
esac

ip netns exec "${prefix}h2" python3 - <<'PY' &
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.18.0.2", 7000))
s.settimeout(10)
try:
    while True:
        data, peer = s.recvfrom(2048)
        s.sendto(data, peer)
except socket.timeout:
    pass
PY
server=$!
sleep 0.5

ip netns exec "${prefix}h1" python3 - <<'PY'
import socket, statistics, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
rtts = []
for i in range(2300):
    start = time.perf_counter()
    s.sendto(b"x" * 32, ("198.18.0.2", 7000))
    try:
        s.recv(2048)
    except socket.timeout:
        continue
    if i >= 300:
        rtts.append((time.perf_counter() - start) * 1e6)
rtts.sort()
print(f"{len(rtts)} round trips: median {statistics.median(rtts):.0f} us, "
      f"90th percentile {rtts[int(len(rtts) * 0.9)]:.0f} us")
PY
