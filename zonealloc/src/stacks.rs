//! Per-CPU stacks of free blocks in front of the per-CPU lists, and the pinned
//! way to use them: a caller that proves it runs on its CPU with nothing else
//! using that CPU's stacks (a kernel with preemption off, a thread pinned alone
//! to a CPU) pushes and pops with plain loads and stores.
//!
//! Part of the unsafe island, beside `rseq`. Each zone has one `CpuStacks` per
//! CPU: for every per-CPU list index (order and migratetype, as
//! `pcp::order_to_pindex`), an array of free blocks' frame indices and one
//! 64-bit word that holds the stack's length (low 16 bits) and the pushes made on
//! it since the zone was built (the rest). Two protocols keep a CPU's stacks to
//! one user at a time, chosen when the allocator is built:
//!
//! * **Restartable sequences** (`rseq`: `std` on x86-64 Linux with glibc, and no
//!   `Config::platform`): any thread may push or pop on the CPU it runs on; the
//!   kernel restarts a sequence that is preempted, migrated or signalled before
//!   its commit store.
//! * **Pinned** (a `Config::platform` that can make another CPU pass a barrier,
//!   `Platform::sync_cpu`): only the holder of a `PinnedCpu` token for CPU `c`
//!   uses `c`'s stacks (`ZoneAllocator::alloc_pages_pinned`,
//!   `free_pages_pinned`). A section marks the CPU `busy` with a plain store,
//!   checks `stopped`, pushes or pops with plain stores, and clears `busy`; an
//!   interrupt handler on the same CPU that finds `busy` set takes the per-CPU
//!   lists instead, so it never breaks into a section it interrupted.
//!
//! ```text
//!   owner (CPU c):  busy = 1 ; if stopped: busy = 0, miss ; push/pop ; busy = 0
//!   stopper:        stopped += 1 ; sync_cpu(c) ; wait until busy == 0
//!                   ... owns c's stacks (with c's pcp lock) ... stopped -= 1
//! ```
//!
//! The barrier `sync_cpu` makes CPU `c` pass stands in for the fence neither
//! side's section pays: after it, either `c`'s store of `busy` is visible to the
//! stopper (which waits for the section to end), or `c`'s next load of `stopped`
//! sees the stopper's increment (and misses). The same argument is rseq's with
//! `membarrier`.
//!
//! Pops are not counted at all: per stack, pops = pushes + blocks put on by
//! refills - blocks taken off by flushes and stops - length (`CpuStacks::pops`).

#![allow(unsafe_code)]

use core::marker::PhantomData;
use core::sync::atomic::{compiler_fence, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::platform::Platform;
use crate::types::NR_PCP_LISTS;

/// Blocks one stack can hold (a power of two: a sequence finds a stack's slots
/// with a shift).
pub(crate) const STACK_CAP: usize = 512;
const _: () = assert!(STACK_CAP.is_power_of_two());
pub(crate) const LEN_MASK: u64 = 0xffff;
pub(crate) const PUSH_SHIFT: u32 = 16;

/// Tuning of one stack, changed only by the holder of its CPU's pcp lock.
#[derive(Default)]
pub(crate) struct Tune {
    /// Batches held before a free flushes (2 to `MAX_BATCHES`).
    pub limit: AtomicU8,
    /// Flushes since the last refill.
    pub flush_run: AtomicU8,
    /// A refill takes `batch << alloc_factor` blocks.
    pub alloc_factor: AtomicU8,
}

/// One CPU's stacks for one zone, 32 KiB apart, so that a sequence finds its CPU's
/// with a shift.
#[repr(C, align(32768))]
pub(crate) struct CpuStacks {
    /// Non-zero while a remote thread owns these stacks, or is about to (see
    /// `Stacks::stop` for the sequences, `Stacks::stop_pinned` for the pinned
    /// protocol, where it counts the stoppers).
    pub(crate) stopped: AtomicU32,
    /// Pinned protocol: 1 while the CPU's owner (or an interrupt of it) is inside
    /// a section; written only on that CPU.
    busy: AtomicU32,
    /// Per stack: a push finding this many blocks or more fails (a flush is due).
    pub(crate) lim: [AtomicU32; NR_PCP_LISTS],
    /// Per stack: length | pushes << 16. The commit word.
    pub(crate) words: [AtomicU64; NR_PCP_LISTS],
    /// Per stack: blocks put on by refills, taken off by flushes and stops.
    inflow: [AtomicU64; NR_PCP_LISTS],
    outflow: [AtomicU64; NR_PCP_LISTS],
    pub tune: [Tune; NR_PCP_LISTS],
    pub(crate) slots: [[AtomicU32; STACK_CAP]; NR_PCP_LISTS],
}

// The sequences' offsets (unused where the target has no sequences).
#[allow(dead_code)]
pub(crate) const OFF_LIM: usize = core::mem::offset_of!(CpuStacks, lim);
#[allow(dead_code)]
pub(crate) const OFF_WORDS: usize = core::mem::offset_of!(CpuStacks, words);
#[allow(dead_code)]
pub(crate) const OFF_SLOTS: usize = core::mem::offset_of!(CpuStacks, slots);
pub(crate) const STRIDE: usize = core::mem::size_of::<CpuStacks>();
pub(crate) const STRIDE_SHIFT: u32 = STRIDE.trailing_zeros();
const _: () = assert!(STRIDE == 1 << STRIDE_SHIFT);
const _: () = assert!(core::mem::offset_of!(CpuStacks, stopped) == 0);
// The sequences read these three fields of `Stacks` at these offsets.
const _: () = assert!(core::mem::offset_of!(Stacks, base) == 0);
const _: () = assert!(core::mem::offset_of!(Stacks, n) == 8);
const _: () = assert!(core::mem::offset_of!(Stacks, rs_offset) == 16);

impl CpuStacks {
    /// Blocks on stack `p` now (lock-free; exact while stopped).
    #[inline]
    pub(crate) fn len(&self, p: usize) -> u64 {
        self.words[p].load(Ordering::Relaxed) & LEN_MASK
    }

    /// Blocks handed out by pops of stack `p` so far (exact once quiet).
    pub(crate) fn pops(&self, p: usize) -> u64 {
        let w = self.words[p].load(Ordering::Acquire);
        let pushes = w >> PUSH_SHIFT;
        (pushes + self.inflow[p].load(Ordering::Relaxed))
            .saturating_sub(self.outflow[p].load(Ordering::Relaxed) + (w & LEN_MASK))
    }

    /// Blocks pushed by frees so far.
    pub(crate) fn pushes(&self, p: usize) -> u64 {
        self.words[p].load(Ordering::Relaxed) >> PUSH_SHIFT
    }

    /// Sets the length at which a push fails (a flush is due).
    pub(crate) fn set_lim(&self, p: usize, lim: u32) {
        self.lim[p].store(lim.min(STACK_CAP as u32), Ordering::Relaxed);
    }

    /// Counts blocks a refill put on stack `p`.
    pub(crate) fn count_in(&self, p: usize, n: u64) {
        self.inflow[p].fetch_add(n, Ordering::Relaxed);
    }

    /// Counts blocks a flush took off stack `p`.
    pub(crate) fn count_out(&self, p: usize, n: u64) {
        self.outflow[p].fetch_add(n, Ordering::Relaxed);
    }

    /// Takes every block off stack `p` of a stopped CPU, bottom first, handing
    /// each to `f`. Counts them out.
    pub(crate) fn take_all_stopped(&self, p: usize, mut f: impl FnMut(u32)) {
        debug_assert_ne!(self.stopped.load(Ordering::Relaxed), 0);
        let w = self.words[p].load(Ordering::Acquire);
        let len = (w & LEN_MASK) as usize;
        for s in &self.slots[p][..len] {
            f(s.load(Ordering::Relaxed));
        }
        self.words[p].store(w & !LEN_MASK, Ordering::Release);
        self.outflow[p].fetch_add(len as u64, Ordering::Relaxed);
    }

    /// Enters a pinned section on this (the caller's) CPU: `false` if one is
    /// under way here already (the caller interrupted it) or the stacks are
    /// stopped.
    #[inline(always)]
    fn enter(&self) -> bool {
        // Relaxed: only this CPU writes `busy`, and an interrupt runs to its end
        // before the code it interrupted goes on.
        if self.busy.load(Ordering::Relaxed) != 0 {
            return false;
        }
        self.busy.store(1, Ordering::Relaxed);
        // The stopper's barrier on this CPU (`sync_cpu`) orders the store above
        // before the load below for it; on this CPU, nothing may move across.
        compiler_fence(Ordering::SeqCst);
        // Acquire: a stopper's changes to the stacks, published by its Release
        // decrement, are seen once `stopped` reads 0.
        if self.stopped.load(Ordering::Acquire) != 0 {
            self.busy.store(0, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Leaves a pinned section.
    #[inline(always)]
    fn leave(&self) {
        // Release: the section's stores are seen by a stopper that sees 0.
        self.busy.store(0, Ordering::Release);
    }
}

/// Why a push or pop did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Miss {
    /// The stack of CPU `.0` is empty (pop) or at its limit (push).
    Cpu(usize),
    /// No stack to use: this thread's CPU is stopped, busy (an interrupt of a
    /// pinned section) or out of range, or the process has no stacks.
    Off,
}

/// How a zone's stacks are used (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// No stacks.
    Off,
    /// Restartable sequences on the CPU a thread runs on (built only where the
    /// target has them).
    #[allow(dead_code)]
    Rseq,
    /// Holders of a `PinnedCpu` token, stopped through the platform's barrier.
    Pinned,
}

/// A zone's per-CPU stacks (empty when there are none).
#[repr(C)]
pub(crate) struct Stacks {
    /// `cpus`' address and length, first, where a sequence reads them through one
    /// pointer to `Stacks` (one register fewer at the call site).
    pub(crate) base: usize,
    pub(crate) n: usize,
    /// glibc's `__rseq_offset`, a constant of the process, kept here beside the
    /// two above: one load from a line the call reads anyway (0 but for
    /// `Mode::Rseq`).
    pub(crate) rs_offset: isize,
    pub(crate) cpus: alloc::boxed::Box<[CpuStacks]>,
    pub(crate) mode: Mode,
}

impl Stacks {
    /// No stacks: every call takes the per-CPU lists' try-lock path.
    pub(crate) fn none() -> Stacks {
        Stacks::of(alloc::boxed::Box::new([]), Mode::Off, 0)
    }

    /// Stacks for `n` CPUs used as `mode` says.
    pub(crate) fn of(cpus: alloc::boxed::Box<[CpuStacks]>, mode: Mode, rs_offset: isize) -> Stacks {
        let mode = if cpus.is_empty() { Mode::Off } else { mode };
        Stacks {
            base: cpus.as_ptr() as usize,
            n: cpus.len(),
            rs_offset,
            cpus,
            mode,
        }
    }

    /// `n` CPUs' empty stacks, on the heap, built in place: all their fields
    /// start at zero (a `CpuStacks` is 32 KiB; building each on the stack and
    /// moving it would take that much of a kernel's boot stack per CPU).
    pub(crate) fn build(n: usize) -> alloc::boxed::Box<[CpuStacks]> {
        let layout =
            core::alloc::Layout::array::<CpuStacks>(n).expect("CPU count bounded by Config");
        if n == 0 {
            return alloc::boxed::Box::new([]);
        }
        // SAFETY: the layout's size is non-zero (`n` > 0 stacks of 32 KiB).
        let p = unsafe { alloc::alloc::alloc_zeroed(layout) }.cast::<CpuStacks>();
        if p.is_null() {
            alloc::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `p` holds `n` `CpuStacks`, allocated with the global allocator
        // and the layout `Box<[CpuStacks]>` frees with. Every field of a
        // `CpuStacks` is an atomic integer or an array of them (`Tune` too), for
        // which all zeroes is a valid value, and zero is each one's starting
        // value: no stopper, not busy, empty stacks, no limit yet
        // (`reset_limits` sets them), zero counters and tuning.
        unsafe { alloc::boxed::Box::from_raw(core::ptr::slice_from_raw_parts_mut(p, n)) }
    }

    /// Stacks for CPUs `0..nr_cpus`, used pinned.
    pub(crate) fn pinned(nr_cpus: usize) -> Stacks {
        Stacks::of(Stacks::build(nr_cpus), Mode::Pinned, 0)
    }

    /// Whether there are stacks at all.
    #[inline(always)]
    pub(crate) fn on(&self) -> bool {
        self.mode != Mode::Off
    }

    /// How the stacks are used.
    #[inline(always)]
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// How many CPUs have stacks.
    pub(crate) fn len(&self) -> usize {
        self.cpus.len()
    }

    /// CPU `cpu`'s stacks.
    pub(crate) fn cpu(&self, cpu: usize) -> Option<&CpuStacks> {
        self.cpus.get(cpu)
    }

    /// Pops a frame index from stack `p` of CPU `cpu`, whose pinned token the
    /// caller holds.
    #[inline(always)]
    pub(crate) fn pop_pinned(&self, cpu: usize, p: usize) -> Result<u32, Miss> {
        let c = self.cpus.get(cpu).ok_or(Miss::Off)?;
        if !c.enter() {
            return Err(Miss::Off);
        }
        let w = c.words[p].load(Ordering::Relaxed);
        let len = (w & LEN_MASK) as usize;
        let r = if len == 0 {
            Err(Miss::Cpu(cpu))
        } else {
            let idx = c.slots[p][len - 1].load(Ordering::Relaxed);
            c.words[p].store(w - 1, Ordering::Relaxed);
            Ok(idx)
        };
        c.leave();
        r
    }

    /// Pushes frame index `idx` on stack `p` of CPU `cpu` (pinned, as
    /// `pop_pinned`), counting it as a free.
    #[inline(always)]
    pub(crate) fn push_pinned(&self, cpu: usize, p: usize, idx: u32) -> Result<(), Miss> {
        let c = self.cpus.get(cpu).ok_or(Miss::Off)?;
        if !c.enter() {
            return Err(Miss::Off);
        }
        let w = c.words[p].load(Ordering::Relaxed);
        let len = (w & LEN_MASK) as usize;
        let r = if len >= c.lim[p].load(Ordering::Relaxed) as usize {
            Err(Miss::Cpu(cpu))
        } else {
            c.slots[p][len].store(idx, Ordering::Relaxed);
            c.words[p].store(w + (1 << PUSH_SHIFT) + 1, Ordering::Relaxed);
            Ok(())
        };
        c.leave();
        r
    }

    /// Pushes all of `blocks` on stack `p` of CPU `cpu` (pinned), or none of
    /// them (no room below `STACK_CAP`, stopped or busy). Returns the CPU.
    pub(crate) fn push_all_pinned(&self, cpu: usize, p: usize, blocks: &[u32]) -> Option<usize> {
        let c = self.cpus.get(cpu)?;
        if blocks.is_empty() || !c.enter() {
            return None;
        }
        let w = c.words[p].load(Ordering::Relaxed);
        let len = (w & LEN_MASK) as usize;
        let ok = len + blocks.len() <= STACK_CAP;
        if ok {
            for (j, &b) in blocks.iter().enumerate() {
                c.slots[p][len + j].store(b, Ordering::Relaxed);
            }
            c.words[p].store(w + blocks.len() as u64, Ordering::Relaxed);
        }
        c.leave();
        ok.then_some(cpu)
    }

    /// Pops up to `out.len()` frame indices (the top of the stack) from stack `p`
    /// of CPU `cpu` (pinned) into the start of `out`. Returns the CPU and how many
    /// it popped, or `None` when stopped or busy.
    pub(crate) fn pop_many_pinned(
        &self,
        cpu: usize,
        p: usize,
        out: &mut [core::mem::MaybeUninit<u32>],
    ) -> Option<(usize, usize)> {
        let c = self.cpus.get(cpu)?;
        if !c.enter() {
            return None;
        }
        let w = c.words[p].load(Ordering::Relaxed);
        let len = (w & LEN_MASK) as usize;
        let k = out.len().min(len).min(STACK_CAP);
        for (j, o) in out[..k].iter_mut().enumerate() {
            o.write(c.slots[p][len - k + j].load(Ordering::Relaxed));
        }
        c.words[p].store(w - k as u64, Ordering::Relaxed);
        c.leave();
        Some((cpu, k))
    }

    /// Stops CPU `cpu`'s pinned stacks: on `true`, no section runs on them until
    /// `resume_pinned`, and the caller may change them (under the CPU's pcp lock,
    /// which serialises the stoppers' changes). `false`: `platform` could not make
    /// the CPU pass a barrier now; nothing is stopped. Call it before taking the
    /// CPU's pcp lock.
    pub(crate) fn stop_pinned(&self, cpu: usize, platform: &dyn Platform) -> bool {
        let Some(c) = self.cpus.get(cpu) else {
            return false;
        };
        // SeqCst: ordered before the barrier and the loads of `busy` below.
        c.stopped.fetch_add(1, Ordering::SeqCst);
        if !platform.sync_cpu(cpu) {
            c.stopped.fetch_sub(1, Ordering::Release);
            return false;
        }
        // A section that began before the barrier ends soon: its CPU runs it with
        // preemption off, or its thread is pinned alone to it.
        let mut spins = 0u32;
        // Acquire: pairs with `leave`'s Release.
        while c.busy.load(Ordering::Acquire) != 0 {
            crate::sync::backoff(&mut spins);
        }
        true
    }

    /// In a `fork` child, whose only thread is the one that forked: clears
    /// every CPU's `stopped` (the stoppers were other threads, or prefork) and
    /// `busy` (a pinned section of another thread, which will never end).
    #[cfg(not(loom))]
    pub(crate) fn clear_after_fork(&self) {
        for c in self.cpus.iter() {
            c.busy.store(0, Ordering::Relaxed);
            c.stopped.store(0, Ordering::Release);
        }
    }

    /// Lets CPU `cpu`'s pinned sections use its stacks again (when no other
    /// stopper holds them).
    pub(crate) fn resume_pinned(&self, cpu: usize) {
        if let Some(c) = self.cpus.get(cpu) {
            // Release: the stopper's changes are seen by the next section.
            c.stopped.fetch_sub(1, Ordering::Release);
        }
    }
}

/// Where a stack operation happens: the CPU the thread runs on (restartable
/// sequences), or the CPU of a pinned token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum On {
    /// The CPU the thread runs on, with restartable sequences.
    Here,
    /// CPU `.0`, whose pinned token the caller holds.
    Pinned(usize),
}

impl Stacks {
    /// `pop` or `pop_pinned`.
    #[inline(always)]
    pub(crate) fn pop_on(&self, on: On, p: usize) -> Result<u32, Miss> {
        match on {
            On::Here => self.pop(p),
            On::Pinned(cpu) => self.pop_pinned(cpu, p),
        }
    }

    /// `push` or `push_pinned`.
    #[inline(always)]
    pub(crate) fn push_on(&self, on: On, p: usize, idx: u32) -> Result<(), Miss> {
        match on {
            On::Here => self.push(p, idx),
            On::Pinned(cpu) => self.push_pinned(cpu, p, idx),
        }
    }

    /// `push_all` or `push_all_pinned`.
    pub(crate) fn push_all_on(&self, on: On, p: usize, blocks: &[u32]) -> Option<usize> {
        match on {
            On::Here => self.push_all(p, blocks),
            On::Pinned(cpu) => self.push_all_pinned(cpu, p, blocks),
        }
    }

    /// `pop_many` or `pop_many_pinned`.
    pub(crate) fn pop_many_on(
        &self,
        on: On,
        p: usize,
        out: &mut [core::mem::MaybeUninit<u32>],
    ) -> Option<(usize, usize)> {
        match on {
            On::Here => self.pop_many(p, out),
            On::Pinned(cpu) => self.pop_many_pinned(cpu, p, out),
        }
    }
}

/// Proof that the holder runs on CPU `cpu` with nothing else using that CPU's
/// pinned stacks: what `ZoneAllocator::alloc_pages_pinned` and
/// `free_pages_pinned` need instead of restartable sequences. A kernel makes one
/// with preemption disabled (or in an interrupt handler, which runs to its end);
/// a program makes one on a thread pinned alone to a CPU. Not `Send`: it
/// belongs to the thread that made it.
#[derive(Debug)]
pub struct PinnedCpu {
    cpu: usize,
    _thread: PhantomData<*mut ()>,
}

impl PinnedCpu {
    /// A token for CPU `cpu` (taken modulo `Config::nr_cpus` when used).
    ///
    /// # Safety
    /// Until the token is dropped:
    /// * no other thread uses a token for the same CPU (number modulo
    ///   `nr_cpus`) with the same allocator, except interrupt handlers (or
    ///   signal handlers) that interrupt this thread on that CPU and run to
    ///   their end before it goes on;
    /// * the thread stays on CPU `cpu`, or the platform's `sync_cpu(cpu)` makes
    ///   it pass a barrier wherever it runs (as `membarrier` does for every
    ///   thread of a process).
    ///
    /// Breaking either lets two threads interleave inside one CPU's stacks: a
    /// block could be handed out twice.
    pub unsafe fn new(cpu: usize) -> PinnedCpu {
        PinnedCpu {
            cpu,
            _thread: PhantomData,
        }
    }

    /// The CPU.
    pub fn cpu(&self) -> usize {
        self.cpu
    }
}
