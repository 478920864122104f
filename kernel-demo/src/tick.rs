//! The local APIC timer's handler: counts ticks on every CPU, keeps the
//! watchdog, and allocates and frees from interrupt context.
//!
//! # Allocating from the handler
//!
//! Each tick frees the blocks this CPU's handler allocated `HOLD_TICKS` ticks
//! ago, then allocates one block of order `(tick / 2) % 4` into a ring of
//! `RING_SLOTS`. Even ticks use `alloc_pages(Gfp::ATOMIC)` and `free_pages`:
//! they may spin on a zone or per-CPU lock another CPU holds, never on one their
//! own CPU holds, because zonealloc takes every such lock with interrupts
//! disabled through the kernel's `Platform` (`cpu::PLATFORM`), so the tick
//! cannot have interrupted a holder. Odd ticks use `alloc_pages_nolock` and
//! `free_pages_nolock`, which only try locks: an allocation that finds them
//! taken fails (counted, not an error), a free that does goes onto its zone's
//! deferred list. The ring is this CPU's alone and is only touched with
//! interrupts disabled (by the handler, or by `drain_ring` at the end), so it
//! needs no lock. An `ATOMIC` allocation may fail without it being an error;
//! failures are counted.
//!
//! The switch is the command line's `timer_alloc=off` (`TIMER_ALLOC`), for
//! telling a problem of the handler's from one of the stress's.
//!
//! While the stress checks an exact ledger or re-frees blocks it has freed, the
//! kernel turns handler allocation off (`pause_allocation`): a block the handler
//! allocated in that window could be the very block a second free names.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use spin::Once;
use zonealloc::{Gfp, Order, Pfn};

use crate::block::{self, Block, Via};
use crate::consts::MAX_CPUS;
use crate::exit::{exit, Exit};
use crate::serial::fatal_print;
use crate::zones::ALLOCATOR;
use crate::{apic, cpu, irq, time};

/// Timer interrupts per second on each CPU.
pub const TIMER_HZ: u32 = 1000;

/// Whether the timer handler allocates and frees (see the module docs); set
/// from the command line at boot.
pub static TIMER_ALLOC: AtomicBool = AtomicBool::new(true);

/// Blocks one CPU's handler holds at most.
const RING_SLOTS: usize = 8;

/// Ticks a handler's block is held before the handler frees it.
const HOLD_TICKS: u64 = 4;

/// Seconds after boot at which an unfinished run is declared hung, by the first
/// CPU whose timer interrupt finds it so. A hang in which every CPU spins with
/// interrupts disabled takes no tick: run.sh's own timeout then asks QEMU where
/// each CPU is.
const WATCHDOG_SECONDS: u64 = 150;

/// One CPU's tick counters. Relaxed: each is written by its own CPU's handler
/// only and read after the CPUs meet at a barrier (or by the watchdog, which
/// needs no exact figure).
pub struct TickStats {
    /// Timer interrupts taken.
    pub ticks: AtomicU64,
    /// Blocks the handler allocated with `alloc_pages(Gfp::ATOMIC)`.
    pub allocs: AtomicU64,
    /// Blocks it allocated with `alloc_pages_nolock`.
    pub allocs_nolock: AtomicU64,
    /// Blocks it freed with `free_pages`.
    pub frees: AtomicU64,
    /// Blocks it freed with `free_pages_nolock`.
    pub frees_nolock: AtomicU64,
    /// `ATOMIC` allocations that failed.
    pub failures: AtomicU64,
    /// `alloc_pages_nolock` calls that failed (a lock taken, or no memory).
    pub failures_nolock: AtomicU64,
    /// Frames the handler holds now.
    pub held_pages: AtomicU64,
}

impl TickStats {
    const fn new() -> TickStats {
        TickStats {
            ticks: AtomicU64::new(0),
            allocs: AtomicU64::new(0),
            allocs_nolock: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            frees_nolock: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            failures_nolock: AtomicU64::new(0),
            held_pages: AtomicU64::new(0),
        }
    }
}

/// Per-CPU tick counters.
pub static STATS: [TickStats; MAX_CPUS] = [const { TickStats::new() }; MAX_CPUS];

/// Whether the handler may allocate now (release by the bootstrap processor,
/// acquire by the handler; the stress's barriers order the change against the
/// other CPUs' work).
static ALLOCATION_ON: AtomicBool = AtomicBool::new(false);

/// Set once the run has reached its verdict: the watchdog stands down.
pub static FINISHED: AtomicBool = AtomicBool::new(false);

/// Set by the CPU whose tick fires the watchdog (one CPU only).
static WATCHDOG_FIRED: AtomicBool = AtomicBool::new(false);

/// What the watchdog prints of the run's progress before it ends the run (the
/// stress's, `stress::print_progress_raw`, which lies above this handler).
static PROGRESS_REPORT: Once<fn()> = Once::new();

/// Sets what the watchdog prints of the run's progress (once, at boot).
pub fn set_progress_report(report: fn()) {
    PROGRESS_REPORT.call_once(|| report);
}

struct Ring(UnsafeCell<[Option<(Block, u64)>; RING_SLOTS]>);

// SAFETY: ring `c` is only touched on CPU `c` with interrupts disabled (see the
// module docs), so never by two contexts at once.
unsafe impl Sync for Ring {}

static RINGS: [Ring; MAX_CPUS] = [const { Ring(UnsafeCell::new([None; RING_SLOTS])) }; MAX_CPUS];

/// Lets the handler allocate (when `TIMER_ALLOC`).
pub fn resume_allocation() {
    ALLOCATION_ON.store(true, Ordering::Release);
}

/// Stops the handler allocating and freeing; it goes on counting.
pub fn pause_allocation() {
    ALLOCATION_ON.store(false, Ordering::Release);
}

/// The timer interrupt (interrupts disabled), which interrupted `rip`: the
/// timer vector's handler (`interrupts::set_handlers`).
pub fn on_tick(rip: u64, rflags: u64) {
    let cpu = cpu::this_cpu();
    let now = STATS[cpu].ticks.fetch_add(1, Ordering::Relaxed) + 1;
    // First, so that a handler about to block in the allocator still looks.
    if now.is_multiple_of(u64::from(TIMER_HZ))
        && time::since_boot_ms() > WATCHDOG_SECONDS * 1000
        && !FINISHED.load(Ordering::Relaxed)
        && !WATCHDOG_FIRED.swap(true, Ordering::AcqRel)
    {
        watchdog(cpu, rip, rflags);
    }
    if ALLOCATION_ON.load(Ordering::Acquire) && TIMER_ALLOC.load(Ordering::Relaxed) {
        allocate_and_free(cpu, now);
    }
}

/// Frees the ring's blocks that are due, then allocates one: through the
/// locking calls on even ticks, the try-only ones on odd ticks.
fn allocate_and_free(cpu: usize, now: u64) {
    let Some(za) = ALLOCATOR.get() else {
        return;
    };
    let stats = &STATS[cpu];
    let nolock = now % 2 == 1;
    let via = if nolock { Via::NoLock } else { Via::Locking };
    // SAFETY: this CPU's ring, in its interrupt handler (see `Ring`).
    let ring = unsafe { &mut *RINGS[cpu].0.get() };
    for slot in ring.iter_mut() {
        if let Some((block, due)) = *slot {
            if due <= now {
                block::release(za, block, via);
                *slot = None;
                if nolock {
                    stats.frees_nolock.fetch_add(1, Ordering::Relaxed);
                } else {
                    stats.frees.fetch_add(1, Ordering::Relaxed);
                }
                stats
                    .held_pages
                    .fetch_sub(block.nr_pages(), Ordering::Relaxed);
            }
        }
    }
    let Some(slot) = ring.iter_mut().find(|s| s.is_none()) else {
        return;
    };
    let order = ((now / 2) % 4) as u8;
    let got = if nolock {
        za.alloc_pages_nolock(Gfp::ATOMIC, None, Order(order))
    } else {
        za.alloc_pages(Gfp::ATOMIC, Order(order))
    };
    match got {
        Ok(Pfn(pfn)) => {
            let block = Block {
                pfn,
                order,
                tag: block::tag(cpu, true, now),
            };
            block::claim(&block, u64::MAX);
            *slot = Some((block, now + HOLD_TICKS));
            if nolock {
                stats.allocs_nolock.fetch_add(1, Ordering::Relaxed);
            } else {
                stats.allocs.fetch_add(1, Ordering::Relaxed);
            }
            stats
                .held_pages
                .fetch_add(block.nr_pages(), Ordering::Relaxed);
        }
        Err(_) if nolock => {
            stats.failures_nolock.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {
            stats.failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Frees every block this CPU's handler holds (handler allocation paused).
pub fn drain_ring() {
    let Some(za) = ALLOCATOR.get() else {
        return;
    };
    irq::without_interrupts(|| {
        let cpu = cpu::this_cpu();
        let stats = &STATS[cpu];
        // SAFETY: this CPU's ring, with interrupts disabled (see `Ring`).
        let ring = unsafe { &mut *RINGS[cpu].0.get() };
        for slot in ring.iter_mut() {
            if let Some((block, _)) = slot.take() {
                block::release(za, block, Via::Locking);
                stats.frees.fetch_add(1, Ordering::Relaxed);
                stats
                    .held_pages
                    .fetch_sub(block.nr_pages(), Ordering::Relaxed);
            }
        }
    });
}

/// The NMI's last step (`interrupts::set_handlers`), after its TLB and barrier
/// services: if the watchdog has fired, this CPU says where it was and stops.
pub fn on_nmi(rip: u64, rflags: u64) {
    if WATCHDOG_FIRED.load(Ordering::Acquire) {
        on_watchdog_nmi(rip, rflags);
    }
}

/// Where a CPU was when the watchdog stopped it.
fn print_where(cpu: usize, rip: u64, rflags: u64) {
    const IF: u64 = 1 << 9;
    fatal_print!(
        "  cpu {cpu} was at rip {rip:#x}, interrupts {} (addr2line -e <kernel> {rip:#x})\n",
        if rflags & IF != 0 { "on" } else { "off" }
    );
}

/// The run has taken too long: say where every CPU is (the others through an
/// NMI, which reaches a CPU spinning with interrupts disabled), then end it.
fn watchdog(cpu: usize, rip: u64, rflags: u64) -> ! {
    fatal_print!("\nWATCHDOG: no verdict {WATCHDOG_SECONDS} s after boot\n");
    print_where(cpu, rip, rflags);
    for other in (0..MAX_CPUS).filter(|&c| c != cpu) {
        if let Some(id) = cpu::apic_id_of(other) {
            apic::send_nmi(id);
            time::delay_us(50_000);
        }
    }
    if let Some(report) = PROGRESS_REPORT.get() {
        report();
    }
    exit(Exit::Watchdog)
}

/// The watchdog's NMI on another CPU: report, then stop here for good.
fn on_watchdog_nmi(rip: u64, rflags: u64) -> ! {
    print_where(cpu::this_cpu(), rip, rflags);
    loop {
        x86_64::instructions::hlt();
    }
}
