#!/usr/bin/env bash
# Instructions, simulated cache misses and simulated mispredicted branches per call
# of each allocation path:
# zonealloc/examples/paths.rs under cachegrind at N and 2N calls, the difference
# divided by N (set-up and the other half cancel out). Cachegrind simulates the
# machine's caches (first level and last level) and a simple branch predictor; it
# needs valgrind.
#
#   bash docs/count-paths.sh [N]        (default N = 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
cargo build -q --release -p zonealloc --example paths
bin=target/release/examples/paths
count() { # path calls -> "Ir D1mr+D1mw LLmr+LLmw mispredicts"
    local out
    out=$(valgrind --tool=cachegrind --cache-sim=yes --branch-sim=yes \
        --cachegrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1)
    local ir d1 ll mp
    ir=$(echo "$out" | sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' | tr -d ,)
    d1=$(echo "$out" | sed -n 's/.*D1  misses: *\([0-9,]*\).*/\1/p' | tr -d ,)
    ll=$(echo "$out" | sed -n 's/.*LLd misses: *\([0-9,]*\).*/\1/p' | tr -d ,)
    mp=$(echo "$out" | sed -n 's/.*Mispredicts: *\([0-9,]*\).*/\1/p' | tr -d ,)
    echo "$ir $d1 $ll $mp"
}
printf '%-12s %14s %18s %18s %13s\n' path "instructions" "D1 misses (data)" "LL misses (data)" \
    "mispredicts"
# Valgrind does not emulate restartable sequences (glibc registers no rseq area under
# it), so the raw-* paths take the per-CPU lists here and a LocalCache holds blocks of
# its own behind its lock: these are the counts of the fallback paths. The per-CPU
# stacks' own figures come from `PATHS_NS=1` wall-clock runs of the same example.
for path in local-pair pcp-pair raw-pair local-fill local-drain pcp-fill pcp-drain raw-fill raw-drain; do
    read -r i1 d1 l1 m1 < <(count "$path" "$n")
    read -r i2 d2 l2 m2 < <(count "$path" $((2 * n)))
    awk -v p="$path" -v n="$n" -v i1="$i1" -v i2="$i2" -v d1="$d1" -v d2="$d2" \
        -v l1="$l1" -v l2="$l2" -v m1="$m1" -v m2="$m2" 'BEGIN {
        printf "%-12s %14.1f %18.2f %18.2f %13.2f\n", p, (i2-i1)/n, (d2-d1)/n, (l2-l1)/n, (m2-m1)/n }'
done
