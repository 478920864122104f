//! The local APIC (xAPIC, memory mapped): enabling it, its timer, end of
//! interrupt, and inter-processor interrupts (fixed, INIT, start-up).
//!
//! Each CPU drives its own local APIC at the same physical address (the boot
//! page tables map it). The legacy 8259 PICs are remapped above the exceptions
//! and masked, so every interrupt the kernel takes comes through here.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use x86_64::instructions::port::Port;
use x86_64::registers::model_specific::Msr;

use crate::consts::{SPURIOUS_VECTOR, TIMER_VECTOR};
use crate::irq;

const IA32_APIC_BASE: u32 = 0x1b;
const APIC_BASE_ENABLE: u64 = 1 << 11;

// Register offsets.
const ID: usize = 0x20;
const TPR: usize = 0x80;
const EOI: usize = 0xb0;
const SVR: usize = 0xf0;
const ESR: usize = 0x280;
const ICR_LOW: usize = 0x300;
const ICR_HIGH: usize = 0x310;
const LVT_TIMER: usize = 0x320;
const LVT_ERROR: usize = 0x370;
const TIMER_INITIAL: usize = 0x380;
const TIMER_CURRENT: usize = 0x390;
const TIMER_DIVIDE: usize = 0x3e0;

const SVR_ENABLE: u32 = 1 << 8;
const LVT_MASKED: u32 = 1 << 16;
const LVT_PERIODIC: u32 = 1 << 17;
const ICR_PENDING: u32 = 1 << 12;
const ICR_ASSERT: u32 = 1 << 14;
const ICR_INIT: u32 = 0b101 << 8;
const ICR_STARTUP: u32 = 0b110 << 8;
const ICR_NMI: u32 = 0b100 << 8;
/// Divide configuration 0b0011: the timer counts at the bus clock / 16.
const DIVIDE_BY_16: u32 = 0b0011;

/// Physical (= virtual) address of the local APIC's registers, the same on every
/// CPU; set by the bootstrap processor before any other CPU starts.
static BASE: AtomicU64 = AtomicU64::new(0);

/// Timer counts (at the bus clock / 16) per millisecond, from `time::calibrate`.
static COUNTS_PER_MS: AtomicU32 = AtomicU32::new(0);

fn reg(offset: usize) -> *mut u32 {
    (BASE.load(Ordering::Relaxed) as usize + offset) as *mut u32
}

fn read(offset: usize) -> u32 {
    // SAFETY: `BASE` is the local APIC's register page (identity mapped);
    // `offset` is one of its 32-bit registers.
    unsafe { reg(offset).read_volatile() }
}

fn write(offset: usize, value: u32) {
    // SAFETY: as in `read`.
    unsafe { reg(offset).write_volatile(value) }
}

/// Remaps the legacy PICs to vectors 0x20..0x30 (off the exceptions, where the
/// BIOS leaves them) and masks every line. A spurious IRQ 7 or 15 can still
/// arrive; the interrupt dispatcher ignores those vectors.
#[link_section = ".init.text"]
pub fn disable_legacy_pic() {
    let mut cmd1 = Port::<u8>::new(0x20);
    let mut data1 = Port::<u8>::new(0x21);
    let mut cmd2 = Port::<u8>::new(0xa0);
    let mut data2 = Port::<u8>::new(0xa1);
    // SAFETY: the initialisation sequence of the two 8259s; port I/O only.
    unsafe {
        cmd1.write(0x11); // ICW1: edge, cascade, ICW4 follows
        cmd2.write(0x11);
        data1.write(0x20); // ICW2: vector base
        data2.write(0x28);
        data1.write(0x04); // ICW3: slave on IRQ 2
        data2.write(0x02);
        data1.write(0x01); // ICW4: 8086 mode
        data2.write(0x01);
        data1.write(0xff); // mask everything
        data2.write(0xff);
    }
}

/// Enables this CPU's local APIC: the global enable bit, software enable with
/// the spurious vector, every priority accepted, errors masked. The bootstrap
/// processor calls it first and records the register base for the others.
pub fn enable() {
    let mut msr = Msr::new(IA32_APIC_BASE);
    // SAFETY: IA32_APIC_BASE exists on every x86-64 CPU; setting the global
    // enable bit keeps the base address.
    let base = unsafe {
        let v = msr.read();
        msr.write(v | APIC_BASE_ENABLE);
        v & 0x000f_ffff_ffff_f000
    };
    BASE.store(base, Ordering::Relaxed);
    write(TPR, 0);
    write(LVT_ERROR, LVT_MASKED);
    write(ESR, 0);
    write(SVR, SVR_ENABLE | SPURIOUS_VECTOR as u32);
}

/// This CPU's local APIC id.
pub fn id() -> u32 {
    read(ID) >> 24
}

/// Signals the end of the interrupt being handled.
pub fn eoi() {
    write(EOI, 0);
}

/// Starts the timer counting down from its maximum, masked and one-shot, for
/// calibration; `timer_elapsed` reads how far it got.
pub fn timer_start_calibration() {
    write(TIMER_DIVIDE, DIVIDE_BY_16);
    write(LVT_TIMER, LVT_MASKED | TIMER_VECTOR as u32);
    write(TIMER_INITIAL, u32::MAX);
}

/// Counts since `timer_start_calibration`.
pub fn timer_elapsed() -> u32 {
    u32::MAX - read(TIMER_CURRENT)
}

/// Records the calibration: counts per millisecond.
pub fn set_counts_per_ms(counts: u32) {
    COUNTS_PER_MS.store(counts, Ordering::Relaxed);
}

/// Starts this CPU's timer: periodic, `hz` interrupts a second on `TIMER_VECTOR`.
pub fn start_periodic_timer(hz: u32) {
    let per_ms = COUNTS_PER_MS.load(Ordering::Relaxed).max(1);
    let count = (u64::from(per_ms) * 1000 / u64::from(hz.max(1))).max(1);
    write(TIMER_DIVIDE, DIVIDE_BY_16);
    write(LVT_TIMER, LVT_PERIODIC | TIMER_VECTOR as u32);
    write(TIMER_INITIAL, count.min(u64::from(u32::MAX)) as u32);
}

/// Waits until the previous IPI has been sent, then sends `low` to `apic_id`.
/// Interrupts are disabled across the two register writes, so that a handler on
/// this CPU sending its own IPI cannot slip between them.
fn send(apic_id: u32, low: u32) {
    irq::without_interrupts(|| {
        while read(ICR_LOW) & ICR_PENDING != 0 {
            core::hint::spin_loop();
        }
        write(ICR_HIGH, apic_id << 24);
        write(ICR_LOW, low);
    });
}

/// A fixed interrupt with `vector` to the CPU whose local APIC id is `apic_id`.
pub fn send_ipi(apic_id: u32, vector: u8) {
    send(apic_id, ICR_ASSERT | u32::from(vector));
}

/// A non-maskable interrupt to `apic_id` (reaches it with interrupts disabled).
pub fn send_nmi(apic_id: u32) {
    send(apic_id, ICR_ASSERT | ICR_NMI);
}

/// INIT (asserted): puts the target in wait-for-start-up.
pub fn send_init(apic_id: u32) {
    send(apic_id, ICR_ASSERT | ICR_INIT);
}

/// Start-up IPI: the target starts in real mode at `page << 12`.
pub fn send_startup(apic_id: u32, page: u8) {
    send(apic_id, ICR_ASSERT | ICR_STARTUP | u32::from(page));
}
