//! Time: the TSC and the local APIC timer, both calibrated once against the
//! legacy PIT's channel 2 (1.193182 MHz, whatever the CPU's speed).
//!
//! Under QEMU's TCG the PIT, the TSC and the APIC timer all follow the host's
//! clock, so the figures printed are wall-clock time.

use core::sync::atomic::{AtomicU64, Ordering};

use x86_64::instructions::port::Port;

use crate::apic;

/// The PIT's input clock, Hz.
const PIT_HZ: u64 = 1_193_182;

/// Milliseconds the calibration waits (at most 54: the PIT's 16-bit count).
const CALIBRATION_MS: u64 = 50;

/// TSC counts per microsecond (at least 1 once calibrated).
static TSC_PER_US: AtomicU64 = AtomicU64::new(1);

/// TSC at the kernel's first instruction in Rust.
static BOOT_TSC: AtomicU64 = AtomicU64::new(0);

/// The time-stamp counter.
#[inline]
pub fn tsc() -> u64 {
    // SAFETY: `rdtsc` is unprivileged here and has no side effect.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Records the boot's start, for `since_boot_ms`.
pub fn mark_boot() {
    BOOT_TSC.store(tsc(), Ordering::Relaxed);
}

/// Waits `ms` milliseconds (at most 54) on the PIT's channel 2, in mode 0 (its
/// output goes high at the end of the count), polled through port 0x61.
#[link_section = ".init.text"]
fn pit_wait_ms(ms: u64) {
    let count = (PIT_HZ * ms / 1000).min(0xffff) as u16;
    let mut gate = Port::<u8>::new(0x61);
    let mut command = Port::<u8>::new(0x43);
    let mut channel2 = Port::<u8>::new(0x42);
    // SAFETY: port I/O on the PIT and its gate register; no memory is touched.
    unsafe {
        let g = gate.read();
        gate.write((g & !0x02) | 0x01); // gate on, speaker off
        command.write(0b1011_0000); // channel 2, low then high byte, mode 0
        channel2.write(count as u8);
        channel2.write((count >> 8) as u8);
        while gate.read() & 0x20 == 0 {
            core::hint::spin_loop();
        }
    }
}

/// Calibrates the TSC and this CPU's APIC timer (the bootstrap processor's, with
/// interrupts disabled; all local APICs run from the same clock). Returns (TSC
/// MHz, APIC timer counts per ms).
#[link_section = ".init.text"]
pub fn calibrate() -> (u64, u32) {
    apic::timer_start_calibration();
    let t0 = tsc();
    pit_wait_ms(CALIBRATION_MS);
    let t1 = tsc();
    let counts = apic::timer_elapsed();
    let per_us = ((t1 - t0) / (CALIBRATION_MS * 1000)).max(1);
    TSC_PER_US.store(per_us, Ordering::Relaxed);
    let per_ms = (u64::from(counts) / CALIBRATION_MS).max(1) as u32;
    apic::set_counts_per_ms(per_ms);
    (per_us, per_ms)
}

/// Microseconds between two TSC readings.
pub fn tsc_to_us(delta: u64) -> u64 {
    delta / TSC_PER_US.load(Ordering::Relaxed)
}

/// Milliseconds since `mark_boot`.
pub fn since_boot_ms() -> u64 {
    tsc_to_us(tsc() - BOOT_TSC.load(Ordering::Relaxed)) / 1000
}

/// Spins for at least `us` microseconds.
pub fn delay_us(us: u64) {
    let end = tsc() + us * TSC_PER_US.load(Ordering::Relaxed);
    while tsc() < end {
        core::hint::spin_loop();
    }
}
