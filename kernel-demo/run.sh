#!/usr/bin/env bash
# Builds the demo kernel (release) and boots it under QEMU (TCG, 4 vCPUs, 5 GiB:
# DMA, DMA32 and Normal zones with the PCI hole between them), printing its serial
# output. Exits 0 if the kernel reached its pass verdict, non-zero otherwise.
#
#   bash kernel-demo/run.sh                         # stage 1
#   KERNEL_DEMO_FEATURES=timer-alloc bash kernel-demo/run.sh
#
# Environment: KERNEL_DEMO_FEATURES (cargo features), KERNEL_DEMO_TIMEOUT (seconds
# QEMU may run, default 240), KERNEL_DEMO_SMP (default 4), KERNEL_DEMO_MEM
# (default 5G), CARGO_TARGET_DIR (default kernel-demo/target).
set -euo pipefail
cd "$(dirname "$0")"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
features="${KERNEL_DEMO_FEATURES:-}"
timeout_s="${KERNEL_DEMO_TIMEOUT:-240}"
smp="${KERNEL_DEMO_SMP:-4}"
mem="${KERNEL_DEMO_MEM:-5G}"

cargo build --release ${features:+--features "$features"}
kernel="$CARGO_TARGET_DIR/x86_64-unknown-none/release/kernel-demo"

echo "==> qemu-system-x86_64 -smp $smp -m $mem (TCG), kernel $kernel${features:+, features: $features}"
start=$SECONDS
set +e
timeout --kill-after=10 "$timeout_s" qemu-system-x86_64 \
    -kernel "$kernel" \
    -smp "$smp" -m "$mem" \
    -accel tcg,thread=multi \
    -serial stdio -display none -monitor none -no-reboot \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
    </dev/null
status=$?
set -e
elapsed=$((SECONDS - start))

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
    124 | 137) verdict="QEMU ran past ${timeout_s} s and was killed" ;;
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
