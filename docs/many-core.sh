#!/usr/bin/env bash
# The full benchmark matrix, for a machine with many cores (16 or more).
# Run as root from the repository root; results land in mpbench-results/many-core/.
# Thread and worker counts stop at the machine's CPU count.
set -euo pipefail
cd "$(dirname "$0")/.."
cpus=$(nproc)
counts=""
for n in 1 2 4 8 12 16 24 32 48 64; do
    [ "$n" -le "$cpus" ] && counts="${counts:+$counts,}$n"
done
# The forwarder gets every CPU but the generator's.
workers=""
for n in 1 2 4 8 12 16; do
    [ "$n" -lt "$cpus" ] && workers="${workers:+$workers,}$n"
done
out=mpbench-results/many-core
cargo build --release --workspace
./target/release/mpbench locks --threads "$counts" --sizes 64,8192,1048576 --per-frame \
    --runs 5 --seconds 0.5 --out "$out/locks" | tee "$out-locks.txt"
MPBRIDGE_BENCH_THREADS="$counts" cargo bench --bench lock_contention | tee "$out-criterion.txt"
./target/release/mpbench forward --ports raw,tap --lock mutex,rwlock,rmlock,sharded,rcu,epoch \
    --workers "$workers" --sizes 64 --references kernel,relay,direct --runs 5 \
    --out "$out/scaling" | tee "$out-scaling.txt"
./target/release/mpbench forward --ports raw,tap --sizes 64,128,256,512,1024,1280,1518 \
    --io interrupt,poll --runs 5 --out "$out/sizes" | tee "$out-sizes.txt"
# Both receive placements: with cores to spare, (a) puts the ingress softirq
# on a CPU of its own, neither the generator's nor a worker's.
./target/release/mpbench forward --ports raw --placement apart,shared --sizes 64 \
    --references kernel,relay --sweep 25,50,100,150,200,300,max --runs 5 \
    --out "$out/placement" | tee "$out-placement.txt"
./target/release/mpbench forward --tcp --ports raw,tap,vxlan --references kernel,direct \
    --runs 5 --seconds 2 --out "$out/tcp" | tee "$out-tcp.txt"
./target/release/mpbench forward --ports vxlan --references kernel --sizes 64,512,1518 \
    --runs 5 --out "$out/vxlan" | tee "$out-vxlan.txt"
# vhost-user: P workers and P queue pairs between two vhost ports beside DPDK's vhost switch
# (needs dpdk-dev), every strategy, 64 to 1518 bytes.
./target/release/mpbench forward --ports vhost --lock mutex,rwlock,rmlock,sharded,rcu,epoch --workers "$workers" \
    --sizes 64,128,256,512,1024,1518 --runs 5 --seconds 3 | tee "$out-vhost.txt"
# The same with a generator CPU per port (3 CPUs per queue pair): on 2 CPUs the
# generator's one core sets the rate beside mpbridge (gen frames near 100%).
./target/release/mpbench forward --ports vhost --lock epoch,mutex --workers "$workers" \
    --generator-lcores 2 --sizes 64,1518 --runs 5 --seconds 3 | tee "$out-vhost-gen2.txt"
# The block ring beside the default frame ring: with more cores, whether
# handing over blocks saves wake-ups once several workers share the load.
./target/release/mpbench forward --rx-ring block --ports raw --workers "$workers" --sizes 64,1518 \
    --references kernel --runs 5 --out "$out/block-ring" | tee "$out-block-ring.txt"
./target/release/mpbench forward --rx-ring block --tcp --ports raw --references kernel \
    --runs 5 --seconds 2 --out "$out/block-ring-tcp" | tee "$out-block-ring-tcp.txt"
# Latency: the round trip through two raw ports, both placements.
./target/release/mpbench rtt --runs 5 --out "$out/rtt" | tee "$out-rtt.txt"
