//! The stress: every CPU at once allocates and frees blocks of mixed orders and
//! zones, frees some of another CPU's blocks, and has its second frees refused,
//! while the timer interrupts every CPU; then the ledger must balance exactly.
//!
//! # Rounds
//!
//! ```text
//!  churn ── A ── mailbox drained, first frees ── B ── second frees ── C ── checkpoint (cpu 0) ── D
//!  (alloc/free, hand-offs)                          (must be refused)       (ledger, invariants, sync IPIs)
//! ```
//!
//! Every allocation and free a CPU's stress makes goes through the pinned fast
//! path (`alloc_pages_pinned`, `free_pages_pinned`) with that CPU's `PinnedCpu`
//! token: the kernel never preempts or moves a thread, and the only code that
//! interrupts it, the timer handler, runs to its end (it uses the plain and the
//! try-only calls, which take the per-CPU lists when they find a section
//! interrupted). Drains stop a CPU's pinned stacks through `cpu::sync_cpu`.
//!
//! * **Churn.** `OPS_PER_ROUND` operations per CPU: allocate (orders 0..=10,
//!   weighted to small ones; 85 % `KERNEL`, 12 % `KERNEL | DMA32`, 3 % `KERNEL |
//!   DMA` at orders 0..=2) into a per-CPU array of held blocks, or free a random
//!   held block; one free in eight instead passes the block to the next CPU's
//!   mailbox, which that CPU drains and frees (every 16 operations).
//! * **A, B, C, D** are barriers of all CPUs. Between A and B no CPU allocates
//!   (the timer handler's allocation is paused too), so a block freed there stays
//!   free until C: each CPU frees `REFREE_PER_ROUND` held blocks, and between B
//!   and C both it and the next CPU free each of them again; each second free must
//!   be refused with `FreeError::AlreadyFree` naming that block.
//! * **Checkpoint.** With every other CPU waiting at D, CPU 0 checks the exact
//!   ledger: frames held by the stress and the timer handlers + free frames on the
//!   buddy lists + frames on the per-CPU lists = managed frames, and the
//!   allocator's own count of allocated frames (`check_invariants`, every
//!   `CHECK_EVERY` rounds) = frames held. A `free_pages_nolock` that found its
//!   locks taken left its block on the zone's deferred list, which neither count
//!   shows (zonealloc has no count of it); if the ledger is short, CPU 0 merges
//!   those with `drain_all_pages` and checks again, exactly. Then it makes every
//!   CPU pass a barrier by IPI (`cpu::sync_cpu`).
//! * **Barriers with interrupts off.** After D every CPU, with interrupts
//!   disabled, syncs the next CPU and the previous one (`cpu::sync_cpu`): every
//!   CPU waits on another that is waiting too, which only works because a
//!   waiting CPU serves the requests made of it. During the churn, one
//!   operation in `SYNC_ONE_IN` is such a sync of a random other CPU.
//! * **Memory arrives.** Halfway through round `HOTADD_ROUND`'s churn, with the
//!   other CPUs allocating, CPU 0 adds the memory the kernel booted without
//!   (`hotadd`); its checkpoint checks the zone grew and that its new frames are
//!   handed out.
//!
//! # What a block proves
//!
//! Every block handed out must lie in usable RAM, outside everything the kernel
//! still reserves (or in memory that has arrived), and below the limit of the
//! zone its GFP allows. Its first and last words get a tag (CPU, sequence
//! number) when it is allocated, checked when it is freed: a block handed to
//! two owners at once shows as a changed tag. Those checks are `block`'s,
//! shared with the timer handler. Each CPU counts the blocks that came from its
//! own node: `alloc_pages` starts from the calling CPU's node, so every request
//! that a zone of that node can serve should be served there while it has
//! memory. Any failure prints what it saw and ends the run with its own status.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use spin::{Barrier, Mutex, Once};
use zonealloc::{FreeError, Gfp, Order, Pfn, PinnedCpu, ZoneAllocator, ZoneType};

use crate::block::{claim, fail, release, tag, Block, Via};
use crate::bootmem::BOOT;
use crate::consts::{MAX_CPUS, PAGE_BYTES};
use crate::exit::Exit;
use crate::serial::{fatal_print, println};
use crate::zones::{DMA32_END_PFN, DMA_END_PFN};
use crate::{boot, cpu, heap, hotadd, irq, tick, time};

/// Rounds of the stress.
pub const ROUNDS: u32 = 40;
/// Churn operations per CPU per round.
pub const OPS_PER_ROUND: u32 = 8000;
/// Blocks a CPU holds at most.
const HELD_MAX: usize = 512;
/// Blocks a mailbox holds at most; a hand-off to a full one frees locally.
const MAILBOX_SLOTS: usize = 64;
/// Blocks each CPU frees twice per round.
const REFREE_PER_ROUND: usize = 4;
/// Rounds between full `check_invariants` walks (the ledger is checked every
/// round).
const CHECK_EVERY: u32 = 5;
/// Order weights, percent, orders 0..=10.
const ORDER_WEIGHTS: [u32; 11] = [40, 20, 12, 10, 5, 4, 3, 2, 2, 1, 1];
/// One churn operation in this many also syncs a random other CPU with
/// interrupts disabled.
const SYNC_ONE_IN: u64 = 1024;
/// The round in whose churn the absent memory is added.
const HOTADD_ROUND: u32 = ROUNDS / 4;

/// One CPU's counters. Relaxed: each is written by its own CPU and read by
/// CPU 0 after a barrier (whose acquire/release orders them), or by the watchdog,
/// which needs no exact figure.
struct CpuStats {
    allocs: AtomicU64,
    frees: AtomicU64,
    /// Blocks passed to the next CPU to free.
    handed_off: AtomicU64,
    /// Blocks this CPU freed that another CPU allocated.
    remote_frees: AtomicU64,
    /// Second frees refused with `AlreadyFree`.
    refused: AtomicU64,
    /// Frames held now (in its array; its mailbox is empty at every checkpoint).
    held_pages: AtomicU64,
    pages_allocated: AtomicU64,
    round: AtomicU64,
    by_zone: [AtomicU64; 3],
    /// Blocks from the CPU's own node.
    local: AtomicU64,
    /// Blocks from another node though a zone of the CPU's node could serve
    /// the request.
    remote: AtomicU64,
    /// Blocks from another node for requests no zone of the CPU's node can
    /// serve (a DMA request on a node without ZONE_DMA).
    remote_forced: AtomicU64,
    /// Blocks in memory that arrived after boot.
    in_arrived: AtomicU64,
    /// `sync_cpu` calls made with interrupts disabled.
    syncs_irqs_off: AtomicU64,
}

impl CpuStats {
    const fn new() -> CpuStats {
        CpuStats {
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            handed_off: AtomicU64::new(0),
            remote_frees: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            held_pages: AtomicU64::new(0),
            pages_allocated: AtomicU64::new(0),
            round: AtomicU64::new(0),
            by_zone: [const { AtomicU64::new(0) }; 3],
            local: AtomicU64::new(0),
            remote: AtomicU64::new(0),
            remote_forced: AtomicU64::new(0),
            in_arrived: AtomicU64::new(0),
            syncs_irqs_off: AtomicU64::new(0),
        }
    }
}

static STATS: [CpuStats; MAX_CPUS] = [const { CpuStats::new() }; MAX_CPUS];

/// Blocks passed to a CPU (to free, or to free a second time).
struct Mailbox {
    blocks: [Block; MAILBOX_SLOTS],
    len: usize,
}

impl Mailbox {
    const fn new() -> Mailbox {
        Mailbox {
            blocks: [Block {
                pfn: 0,
                order: 0,
                tag: 0,
            }; MAILBOX_SLOTS],
            len: 0,
        }
    }

    fn push(&mut self, b: Block) -> bool {
        if self.len == MAILBOX_SLOTS {
            return false;
        }
        self.blocks[self.len] = b;
        self.len += 1;
        true
    }

    fn take(&mut self) -> ([Block; MAILBOX_SLOTS], usize) {
        let out = (self.blocks, self.len);
        self.len = 0;
        out
    }
}

/// Blocks to free for another CPU, per CPU.
static MAILBOXES: [Mutex<Mailbox>; MAX_CPUS] = [const { Mutex::new(Mailbox::new()) }; MAX_CPUS];
/// Blocks to free a second time, per CPU.
static REFREES: [Mutex<Mailbox>; MAX_CPUS] = [const { Mutex::new(Mailbox::new()) }; MAX_CPUS];

static BARRIER: Once<Barrier> = Once::new();
static NR_CPUS: Once<usize> = Once::new();
static START_TSC: AtomicU64 = AtomicU64::new(0);
/// Heap allocations when the stress started and ended, and those the checkpoints
/// made: the difference, less the hot-add's, is what the allocator's alloc and
/// free paths took from the heap (relaxed; written by CPU 0 alone).
static HEAP_AT_START: AtomicU64 = AtomicU64::new(0);
static HEAP_AT_END: AtomicU64 = AtomicU64::new(0);
static HEAP_IN_CHECKPOINTS: AtomicU64 = AtomicU64::new(0);

/// Sets the stress up for `nr_cpus` CPUs (before any of them starts it).
pub fn prepare(nr_cpus: usize) {
    NR_CPUS.call_once(|| nr_cpus);
    BARRIER.call_once(|| Barrier::new(nr_cpus));
    START_TSC.store(time::tsc(), Ordering::Relaxed);
}

fn wait() {
    BARRIER.get().expect("prepared").wait();
}

/// xorshift64*: a CPU's own random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One CPU's part in the stress.
struct Worker<'a> {
    za: &'a ZoneAllocator,
    cpu: usize,
    next: usize,
    rng: Rng,
    held: Vec<Block>,
    seq: u64,
    stats: &'static CpuStats,
    nr_cpus: usize,
    /// This CPU's node.
    node: u16,
    /// Whether this CPU's node has a zone for requests whose highest zone is
    /// DMA, DMA32, Normal.
    node_serves: [bool; 3],
    /// The proof that this thread runs on `cpu` with preemption off.
    pin: PinnedCpu,
}

impl Worker<'_> {
    fn pick_order(&mut self) -> u8 {
        let mut r = self.rng.below(100) as u32;
        for (o, &w) in ORDER_WEIGHTS.iter().enumerate() {
            if r < w {
                return o as u8;
            }
            r -= w;
        }
        0
    }

    fn alloc_one(&mut self) {
        let mut order = self.pick_order();
        let r = self.rng.below(100);
        let (gfp, ceiling, class) = if r < 3 {
            order = order.min(2);
            (Gfp::KERNEL | Gfp::DMA, DMA_END_PFN, 0)
        } else if r < 15 {
            (Gfp::KERNEL | Gfp::DMA32, DMA32_END_PFN, 1)
        } else {
            (Gfp::KERNEL, u64::MAX, 2)
        };
        let pfn = match self.za.alloc_pages_pinned(&self.pin, gfp, Order(order)) {
            Ok(Pfn(p)) => p,
            Err(e) => fail!(
                Exit::AllocFailed,
                "alloc_pages({gfp:?}, order {order}) failed: {e} (holding {} blocks)",
                self.held.len()
            ),
        };
        self.seq += 1;
        let block = Block {
            pfn,
            order,
            tag: tag(self.cpu, false, self.seq),
        };
        claim(&block, ceiling);
        let zone = if pfn < DMA_END_PFN {
            0
        } else if pfn < DMA32_END_PFN {
            1
        } else {
            2
        };
        self.stats.by_zone[zone].fetch_add(1, Ordering::Relaxed);
        let node = self.za.zone_id_of(Pfn(pfn)).map(|z| z.node);
        let count = if node == Some(self.node) {
            &self.stats.local
        } else if self.node_serves[class] {
            &self.stats.remote
        } else {
            &self.stats.remote_forced
        };
        count.fetch_add(1, Ordering::Relaxed);
        if hotadd::arrived(pfn, block.nr_pages()) {
            self.stats.in_arrived.fetch_add(1, Ordering::Relaxed);
        }
        self.stats.allocs.fetch_add(1, Ordering::Relaxed);
        self.stats
            .pages_allocated
            .fetch_add(block.nr_pages(), Ordering::Relaxed);
        self.stats
            .held_pages
            .fetch_add(block.nr_pages(), Ordering::Relaxed);
        self.held.push(block);
    }

    /// Takes a random held block out of the array.
    fn take_random(&mut self) -> Block {
        let i = self.rng.below(self.held.len() as u64) as usize;
        let b = self.held.swap_remove(i);
        self.stats
            .held_pages
            .fetch_sub(b.nr_pages(), Ordering::Relaxed);
        b
    }

    fn free_one(&mut self) {
        let b = self.take_random();
        if self.next != self.cpu && self.rng.below(8) == 0 && MAILBOXES[self.next].lock().push(b) {
            self.stats.handed_off.fetch_add(1, Ordering::Relaxed);
            return;
        }
        release(self.za, b, Via::Pinned(&self.pin));
        self.stats.frees.fetch_add(1, Ordering::Relaxed);
    }

    /// Makes a random other CPU pass a barrier, with interrupts disabled.
    fn sync_other(&mut self) {
        if self.nr_cpus < 2 {
            return;
        }
        let other =
            (self.cpu + 1 + self.rng.below(self.nr_cpus as u64 - 1) as usize) % self.nr_cpus;
        let ok = irq::without_interrupts(|| cpu::sync_cpu(other));
        if !ok {
            fail!(Exit::Smp, "cpu {other} did not pass a barrier");
        }
        self.stats.syncs_irqs_off.fetch_add(1, Ordering::Relaxed);
    }

    /// Frees what the previous CPU passed here.
    fn drain_mailbox(&mut self) {
        let (blocks, n) = MAILBOXES[self.cpu].lock().take();
        for &b in &blocks[..n] {
            release(self.za, b, Via::Pinned(&self.pin));
            self.stats.frees.fetch_add(1, Ordering::Relaxed);
            self.stats.remote_frees.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn churn(&mut self, round: u32) {
        for op in 0..OPS_PER_ROUND {
            if op % 16 == 0 {
                self.drain_mailbox();
            }
            if self.cpu == 0 && round == HOTADD_ROUND && op == OPS_PER_ROUND / 2 {
                if let Err(e) = hotadd::add(self.za) {
                    fail!(Exit::Memory, "adding the absent memory: {e}");
                }
            }
            if self.rng.below(SYNC_ONE_IN) == 0 {
                self.sync_other();
            }
            let alloc =
                self.held.is_empty() || (self.held.len() < HELD_MAX && self.rng.below(100) < 55);
            if alloc {
                self.alloc_one();
            } else {
                self.free_one();
            }
        }
    }

    /// Between barriers A and B: frees blocks whose second frees come after B.
    fn first_frees(&mut self) -> ([Block; REFREE_PER_ROUND], usize) {
        self.drain_mailbox();
        let mut freed = [Block {
            pfn: 0,
            order: 0,
            tag: 0,
        }; REFREE_PER_ROUND];
        let mut n = 0;
        while n < REFREE_PER_ROUND && !self.held.is_empty() {
            let b = self.take_random();
            release(self.za, b, Via::Pinned(&self.pin));
            self.stats.frees.fetch_add(1, Ordering::Relaxed);
            freed[n] = b;
            n += 1;
        }
        let mut other = REFREES[self.next].lock();
        for &b in &freed[..n] {
            other.push(b);
        }
        (freed, n)
    }

    /// A second free of `b`, which must be refused.
    fn refree(&self, b: Block) {
        match self
            .za
            .free_pages_pinned(&self.pin, Pfn(b.pfn), Order(b.order))
        {
            Err(FreeError::AlreadyFree(p)) if p.0 == b.pfn => {
                self.stats.refused.fetch_add(1, Ordering::Relaxed);
            }
            other => fail!(
                Exit::DoubleFree,
                "second free of pfn {:#x} order {} gave {other:?}, not AlreadyFree",
                b.pfn,
                b.order
            ),
        }
    }

    /// Frees everything still held.
    fn free_all(&mut self) {
        self.drain_mailbox();
        while !self.held.is_empty() {
            let b = self.take_random();
            release(self.za, b, Via::Pinned(&self.pin));
            self.stats.frees.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Bad frees the allocator must refuse before the stress starts: a frame of the
/// kernel image (reserved), a frame of the absent memory (a hole), a frame past
/// the end of RAM.
pub fn preflight(za: &ZoneAllocator) {
    let boot = BOOT.get().expect("boot memory is set before the stress");
    let (image, _) = boot::kernel_image();
    let pfn = image / PAGE_BYTES;
    match za.free_pages(Pfn(pfn), Order(0)) {
        Err(FreeError::Hole(p)) if p.0 == pfn => {}
        other => fail!(
            Exit::FreeRefused,
            "free of kernel image frame {pfn:#x} gave {other:?}, not Hole"
        ),
    }
    let mut absent = "";
    if let Some(&(s, _, _)) = boot.absent().first() {
        match za.free_pages(Pfn(s), Order(0)) {
            Err(FreeError::Hole(p)) if p.0 == s => {}
            other => fail!(
                Exit::FreeRefused,
                "free of absent frame {s:#x} gave {other:?}, not Hole"
            ),
        }
        absent = ", absent frame -> Hole";
    }
    let beyond = boot.frame_span().map_or(0, |s| s.1) + (1 << 20);
    match za.free_pages(Pfn(beyond), Order(0)) {
        Err(FreeError::OutOfRange(_)) => {}
        other => fail!(
            Exit::FreeRefused,
            "free of frame {beyond:#x}, past RAM, gave {other:?}, not OutOfRange"
        ),
    }
    println!(
        "bad frees refused: kernel image frame {pfn:#x} -> Hole{absent}, frame {beyond:#x} -> OutOfRange"
    );
}

/// Whether each request class (highest zone DMA, DMA32, Normal) has a zone on
/// node `node`.
fn node_serves(za: &ZoneAllocator, node: u16) -> [bool; 3] {
    let mut has = [false; 3];
    for (id, _, _, present) in za.zones() {
        if id.node != node || present == 0 {
            continue;
        }
        let level = match id.zone_type {
            ZoneType::Dma => 0,
            ZoneType::Dma32 => 1,
            _ => 2,
        };
        for h in has.iter_mut().skip(level) {
            *h = true;
        }
    }
    has
}

/// Runs the stress on this CPU, `cpu`; returns once every CPU has freed
/// everything and the timer handlers hold nothing.
pub fn run(za: &ZoneAllocator, cpu: usize) {
    let nr_cpus = *NR_CPUS.get().expect("prepared");
    let node = cpu::cpu_to_node(cpu);
    let mut w = Worker {
        za,
        cpu,
        next: (cpu + 1) % nr_cpus,
        rng: Rng(0x9e37_79b9_7f4a_7c15 ^ ((cpu as u64 + 1) << 32) ^ time::tsc()),
        held: Vec::with_capacity(HELD_MAX),
        seq: 0,
        stats: &STATS[cpu],
        nr_cpus,
        node,
        node_serves: node_serves(za, node),
        // SAFETY: this thread runs on `cpu` for good (the kernel never moves
        // or preempts a thread); only the timer handler interrupts it, and it
        // runs to its end before the thread goes on.
        pin: unsafe { PinnedCpu::new(cpu) },
    };
    // Every CPU's own arrays are allocated before the heap count starts.
    wait();
    if cpu == 0 {
        HEAP_AT_START.store(heap::stats().allocs, Ordering::Relaxed);
    }
    wait();
    let prev = (cpu + nr_cpus - 1) % nr_cpus;
    for round in 0..ROUNDS {
        w.stats.round.store(u64::from(round), Ordering::Relaxed);
        w.churn(round);
        if cpu == 0 {
            tick::pause_allocation();
        }
        wait(); // A
        let (own, n) = w.first_frees();
        wait(); // B
        for &b in &own[..n] {
            w.refree(b);
        }
        let (theirs, m) = REFREES[cpu].lock().take();
        for &b in &theirs[..m] {
            w.refree(b);
        }
        wait(); // C
        if cpu == 0 {
            checkpoint(za, round, nr_cpus);
            tick::resume_allocation();
        }
        wait(); // D
                // Every CPU at once waits, interrupts off, on one that waits too.
        let ok = irq::without_interrupts(|| cpu::sync_cpu(w.next) && cpu::sync_cpu(prev));
        if !ok {
            fail!(
                Exit::Smp,
                "round {round}: a neighbour did not pass a barrier"
            );
        }
        w.stats.syncs_irqs_off.fetch_add(2, Ordering::Relaxed);
    }
    w.free_all();
    if cpu == 0 {
        tick::pause_allocation();
    }
    wait();
    tick::drain_ring();
    wait();
    if cpu == 0 {
        HEAP_AT_END.store(heap::stats().allocs, Ordering::Relaxed);
    }
}

/// Frames held now by the stress and the timer handlers (every CPU quiet).
fn held_pages(nr_cpus: usize) -> u64 {
    (0..nr_cpus)
        .map(|c| {
            STATS[c].held_pages.load(Ordering::Relaxed)
                + tick::STATS[c].held_pages.load(Ordering::Relaxed)
        })
        .sum()
}

/// CPU 0's checks while the others wait (see the module docs).
fn checkpoint(za: &ZoneAllocator, round: u32, nr_cpus: usize) {
    let heap_before = heap::stats().allocs;
    if round == HOTADD_ROUND {
        hotadd::check(za, round);
    }
    let held = held_pages(nr_cpus);
    let (mut free, mut pcp, mut managed) =
        (za.nr_free_pages(), za.nr_pcp_pages(), za.managed_pages());
    if held + free + pcp < managed {
        // Frees that found their locks taken wait on deferred lists, counted
        // nowhere: merge them (with the per-CPU lists) and look again.
        za.drain_all_pages();
        DEFERRED_DRAINS.fetch_add(1, Ordering::Relaxed);
        (free, pcp, managed) = (za.nr_free_pages(), za.nr_pcp_pages(), za.managed_pages());
    }
    if held + free + pcp != managed {
        fail!(
            Exit::Ledger,
            "round {round}: held {held} + free {free} + per-CPU {pcp} != managed {managed}"
        );
    }
    if round.is_multiple_of(CHECK_EVERY) || round + 1 == ROUNDS {
        match za.check_invariants() {
            Ok(r) if r.allocated_pages == held => {}
            Ok(r) => fail!(
                Exit::Ledger,
                "round {round}: the allocator counts {} allocated frames, the stress holds {held}",
                r.allocated_pages
            ),
            Err(v) => fail!(Exit::Invariants, "round {round}: {v:?}"),
        }
    }
    let synced = cpu::sync_all_cpus(nr_cpus);
    if synced != nr_cpus {
        fail!(
            Exit::Smp,
            "round {round}: {synced} of {nr_cpus} CPUs passed the sync barrier"
        );
    }
    SYNCS.fetch_add(synced as u64, Ordering::Relaxed);
    HEAP_IN_CHECKPOINTS.fetch_add(heap::stats().allocs - heap_before, Ordering::Relaxed);
}

/// Barriers passed through `sync_cpu` at the checkpoints.
static SYNCS: AtomicU64 = AtomicU64::new(0);
/// Checkpoints whose ledger needed the deferred frees merged first.
static DEFERRED_DRAINS: AtomicU64 = AtomicU64::new(0);

/// Totals over the CPUs.
#[derive(Default)]
pub struct Totals {
    /// Blocks the stress allocated.
    pub allocs: u64,
    /// Blocks the stress freed (its own and others').
    pub frees: u64,
    /// Blocks passed to another CPU to free.
    pub handed_off: u64,
    /// Blocks freed by a CPU other than the one that allocated them.
    pub remote_frees: u64,
    /// Second frees refused with `AlreadyFree`.
    pub refused: u64,
    /// Frames allocated in all.
    pub pages_allocated: u64,
    /// Blocks by zone: DMA, DMA32, Normal.
    pub by_zone: [u64; 3],
    /// Blocks from the allocating CPU's node, from another node that one of
    /// its node's zones could have served, from another for lack of a zone.
    pub local: u64,
    /// See `local`.
    pub remote: u64,
    /// See `local`.
    pub remote_forced: u64,
    /// Blocks in memory that arrived after boot.
    pub in_arrived: u64,
    /// Timer-handler allocations and frees through the locking calls and the
    /// try-only ones, and failures of each.
    pub irq_allocs: u64,
    /// See `irq_allocs`.
    pub irq_allocs_nolock: u64,
    /// See `irq_allocs`.
    pub irq_frees: u64,
    /// See `irq_allocs`.
    pub irq_frees_nolock: u64,
    /// See `irq_allocs`.
    pub irq_failures: u64,
    /// See `irq_allocs`.
    pub irq_failures_nolock: u64,
    /// Frames still held (must be 0 at the end).
    pub held_pages: u64,
    /// Barriers passed through `sync_cpu` at the checkpoints, and with
    /// interrupts disabled.
    pub syncs: u64,
    /// See `syncs`.
    pub syncs_irqs_off: u64,
    /// Checkpoints that merged deferred frees before their ledger.
    pub deferred_drains: u64,
    /// Microseconds since `prepare`.
    pub elapsed_us: u64,
    /// Heap allocations made by the allocator's alloc and free paths during the
    /// stress (all of them but the checkpoints' and the hot-add's).
    pub heap_allocs_in_paths: u64,
}

/// Adds up every CPU's counters (every CPU quiet).
pub fn totals(nr_cpus: usize) -> Totals {
    let mut t = Totals::default();
    for (s, k) in STATS.iter().zip(tick::STATS.iter()).take(nr_cpus) {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        t.allocs += get(&s.allocs);
        t.frees += get(&s.frees);
        t.handed_off += get(&s.handed_off);
        t.remote_frees += get(&s.remote_frees);
        t.refused += get(&s.refused);
        t.pages_allocated += get(&s.pages_allocated);
        for z in 0..3 {
            t.by_zone[z] += get(&s.by_zone[z]);
        }
        t.local += get(&s.local);
        t.remote += get(&s.remote);
        t.remote_forced += get(&s.remote_forced);
        t.in_arrived += get(&s.in_arrived);
        t.syncs_irqs_off += get(&s.syncs_irqs_off);
        t.irq_allocs += get(&k.allocs);
        t.irq_allocs_nolock += get(&k.allocs_nolock);
        t.irq_frees += get(&k.frees);
        t.irq_frees_nolock += get(&k.frees_nolock);
        t.irq_failures += get(&k.failures);
        t.irq_failures_nolock += get(&k.failures_nolock);
    }
    t.held_pages = held_pages(nr_cpus);
    t.syncs = SYNCS.load(Ordering::Relaxed);
    t.deferred_drains = DEFERRED_DRAINS.load(Ordering::Relaxed);
    t.elapsed_us = time::tsc_to_us(time::tsc() - START_TSC.load(Ordering::Relaxed));
    t.heap_allocs_in_paths = HEAP_AT_END.load(Ordering::Relaxed)
        - HEAP_AT_START.load(Ordering::Relaxed)
        - HEAP_IN_CHECKPOINTS.load(Ordering::Relaxed)
        - hotadd::arrival().map_or(0, |a| a.heap_in_all);
    t
}

/// Per-CPU counters, one line each, with the share of blocks from the CPU's
/// own node.
pub fn print_per_cpu(nr_cpus: usize) {
    for (c, s) in STATS.iter().enumerate().take(nr_cpus) {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let k = &tick::STATS[c];
        let (local, remote, forced) = (get(&s.local), get(&s.remote), get(&s.remote_forced));
        println!(
            "  cpu {c} (node {}): allocs {} local {} ({}.{}% of those its node can serve; remote {}, {} more with no zone on its node) frees {} (of other CPUs' blocks {}) handed off {} double frees refused {} syncs with irqs off {} ticks {} irq allocs {} + {} nolock ({} nolock failed)",
            cpu::cpu_to_node(c),
            get(&s.allocs),
            local,
            permille(local, local + remote) / 10,
            permille(local, local + remote) % 10,
            remote,
            forced,
            get(&s.frees),
            get(&s.remote_frees),
            get(&s.handed_off),
            get(&s.refused),
            get(&s.syncs_irqs_off),
            get(&k.ticks),
            get(&k.allocs),
            get(&k.allocs_nolock),
            get(&k.failures_nolock),
        );
    }
}

/// `part / whole` in tenths of a percent (0 for an empty whole).
pub fn permille(part: u64, whole: u64) -> u64 {
    (part * 1000).checked_div(whole).unwrap_or(0)
}

/// Where each CPU is, without the console lock (for the watchdog).
pub fn print_progress_raw() {
    let nr_cpus = NR_CPUS.get().copied().unwrap_or(1);
    for (c, s) in STATS.iter().enumerate().take(nr_cpus) {
        fatal_print!(
            "  cpu {c}: round {} allocs {} frees {} ticks {}\n",
            s.round.load(Ordering::Relaxed),
            s.allocs.load(Ordering::Relaxed),
            s.frees.load(Ordering::Relaxed),
            tick::STATS[c].ticks.load(Ordering::Relaxed)
        );
    }
}
