#!/usr/bin/env bash
# Builds the demo kernel (release) and boots it under QEMU (TCG, 4 vCPUs, 5 GiB
# in two NUMA nodes of 2.5 GiB, CPUs 0-1 on node 0 and 2-3 on node 1, distance
# 21), printing its serial output. Exits 0 if the kernel reached its pass
# verdict, non-zero otherwise.
#
#   bash kernel-demo/run.sh
#   KERNEL_DEMO_CMDLINE="timer_alloc=off hotadd_mib=0" bash kernel-demo/run.sh
#   KERNEL_DEMO_NODES=1 bash kernel-demo/run.sh     # no -numa: one node, no SRAT
#
# Environment: KERNEL_DEMO_CMDLINE (the kernel's command line: timer_alloc=off,
# hotadd_mib=N), KERNEL_DEMO_FEATURES (cargo features), KERNEL_DEMO_TIMEOUT
# (seconds QEMU may run, default 240), KERNEL_DEMO_SMP (default 4),
# KERNEL_DEMO_MEM_MIB (default 5120), KERNEL_DEMO_NODES (1 or 2, default 2),
# CARGO_TARGET_DIR (default kernel-demo/target).
set -euo pipefail
cd "$(dirname "$0")"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
features="${KERNEL_DEMO_FEATURES:-}"
timeout_s="${KERNEL_DEMO_TIMEOUT:-240}"
smp="${KERNEL_DEMO_SMP:-4}"
mem_mib="${KERNEL_DEMO_MEM_MIB:-5120}"
nodes="${KERNEL_DEMO_NODES:-2}"
cmdline="${KERNEL_DEMO_CMDLINE:-}"

# Two nodes: each a RAM backend of half the memory and half the CPUs; QEMU
# writes the SRAT (and, with a distance given, the SLIT) from these.
numa=()
if [ "$nodes" = 2 ]; then
    half=$((mem_mib / 2))
    last=$((smp - 1))
    mid=$((smp / 2))
    numa=(
        -object "memory-backend-ram,id=m0,size=${half}M"
        -object "memory-backend-ram,id=m1,size=$((mem_mib - half))M"
        -numa "node,nodeid=0,cpus=0-$((mid - 1)),memdev=m0"
        -numa "node,nodeid=1,cpus=${mid}-${last},memdev=m1"
        -numa "dist,src=0,dst=1,val=21"
    )
elif [ "$nodes" != 1 ]; then
    echo "run.sh: KERNEL_DEMO_NODES must be 1 or 2" >&2
    exit 2
fi

cargo build --release ${features:+--features "$features"}
kernel="$CARGO_TARGET_DIR/x86_64-unknown-none/release/kernel-demo"

echo "==> qemu-system-x86_64 -smp $smp -m ${mem_mib}M, $nodes node(s) (TCG), kernel $kernel${features:+, features: $features}${cmdline:+, command line: $cmdline}"
# QEMU's monitor on a pair of FIFOs: if the kernel hangs past the timeout (every
# CPU spinning with interrupts disabled leaves its own watchdog no tick), the
# monitor says where each CPU is before QEMU is stopped.
work=$(mktemp -d)
qemu_pid=""
cleanup() {
    if [ -n "$qemu_pid" ]; then
        kill -9 "$qemu_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
mkfifo "$work/monitor.in" "$work/monitor.out"
start=$SECONDS
# `timeout` is the backstop; the loop below stops QEMU first, at `timeout_s`, so
# that it can ask the monitor where the CPUs are.
timeout --kill-after=5 $((timeout_s + 20)) qemu-system-x86_64 \
    -kernel "$kernel" -append "$cmdline" \
    -smp "$smp" -m "${mem_mib}M" "${numa[@]}" \
    -accel tcg,thread=multi \
    -chardev stdio,id=com1,logfile="$work/serial.log" -serial chardev:com1 \
    -display none -monitor pipe:"$work/monitor" -no-reboot \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
    </dev/null &
qemu_pid=$!
cat "$work/monitor.out" >"$work/monitor.log" &

while kill -0 "$qemu_pid" 2>/dev/null && [ $((SECONDS - start)) -lt "$timeout_s" ]; do
    sleep 1
done
hung=0
if kill -0 "$qemu_pid" 2>/dev/null; then
    hung=1
    echo "info registers -a" >"$work/monitor.in"
    sleep 2
    kill "$qemu_pid" 2>/dev/null || true
    for _ in 1 2 3 4 5; do
        kill -0 "$qemu_pid" 2>/dev/null || break
        sleep 1
    done
    kill -9 "$qemu_pid" 2>/dev/null || true
fi
set +e
wait "$qemu_pid"
status=$?
set -e
qemu_pid=""
elapsed=$((SECONDS - start))

# Function names of a kernel address, innermost first, without the libraries'.
symbolize() {
    if command -v addr2line >/dev/null; then
        addr2line -f -i -C -e "$kernel" "$1" | awk 'NR % 2 == 1' |
            { grep -v -E '^<?(core|alloc|spin)::' || true; } | head -n 4 | paste -sd'|' |
            sed 's/|/ <- /g'
    fi
}

# The kernel's watchdog names each CPU's rip: say which functions those are.
if grep -q "was at rip" "$work/serial.log" 2>/dev/null; then
    echo "kernel-demo: where the watchdog found each CPU:"
    grep -o "cpu [0-9]* was at rip 0x[0-9a-f]*" "$work/serial.log" | while read -r _ cpu _ _ _ rip; do
        echo "  cpu $cpu $rip: $(symbolize "$rip")"
    done
fi

if grep -q "^EXCEPTION" "$work/serial.log" 2>/dev/null; then
    rip=$(grep -A1 "^EXCEPTION" "$work/serial.log" | grep -o "rip 0x[0-9a-f]*" | head -n 1 | cut -d' ' -f2)
    echo "kernel-demo: the exception's rip $rip: $(symbolize "$rip")"
fi

if [ "$hung" = 1 ]; then
    status=124
    echo
    echo "kernel-demo: no verdict after ${timeout_s} s; where each CPU was:"
    awk '/^CPU#/ { cpu = $1 } /RIP=/ { for (i = 1; i <= NF; i++) if ($i ~ /^RIP=|^RFL=/) printf "%s %s ", (i == 1 ? cpu : ""), $i; print "" }' \
        "$work/monitor.log" | while read -r cpu rip rfl; do
        where=$(symbolize "0x${rip#RIP=}")
        irq=off
        if (( (0x${rfl#RFL=} >> 9) & 1 )); then
            irq=on
        fi
        echo "  $cpu $rip interrupts $irq: $where"
    done
fi

# The kernel writes v to isa-debug-exit and QEMU exits with (v << 1) | 1; the
# values are src/exit.rs's.
case $status in
    33) verdict="" ;;
    35) verdict="a Rust panic" ;;
    37) verdict="a CPU exception" ;;
    39) verdict="no usable boot information" ;;
    41) verdict="an application processor did not start (or no MADT)" ;;
    43) verdict="the zones, the heap or ZoneAllocator::new failed" ;;
    45) verdict="an allocation failed" ;;
    47) verdict="a free of a held block was refused" ;;
    49) verdict="a second free was not refused with AlreadyFree" ;;
    51) verdict="a block's tags changed while held (two owners)" ;;
    53) verdict="a block outside usable RAM or above its zone limit" ;;
    55) verdict="the page ledger does not balance" ;;
    57) verdict="check_invariants reported a violation" ;;
    59) verdict="the kernel's watchdog fired (a hang)" ;;
    61) verdict="a stack overflowed" ;;
    63) verdict="reserved memory was not released, or arriving memory not added" ;;
    124) verdict="QEMU ran past ${timeout_s} s and was stopped" ;;
    0) verdict="QEMU exited without a verdict (a triple fault resets, and -no-reboot ends it)" ;;
    *) verdict="QEMU exited with status $status" ;;
esac

if [ -z "$verdict" ]; then
    echo "kernel-demo: PASS in ${elapsed} s (QEMU included)"
    echo "kernel-demo: 1 passed, 0 failed"
    exit 0
fi
echo "kernel-demo: FAIL after ${elapsed} s: $verdict (QEMU status $status)" >&2
echo "kernel-demo: 0 passed, 1 failed"
exit 1
