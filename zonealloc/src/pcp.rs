//! Per-CPU page lists (PCP): the allocation and free fast paths.
//!
//! Layer between the allocator and the buddy lists. Each zone has one
//! `PerCpuPages` per CPU, each behind its own lock. The fast paths only *try* that
//! lock (a failure means another thread is using or draining this CPU's lists, or
//! the thread migrated); on failure they go to the zone directly. Lock order is
//! pcp lock, then zone lock: a refill or a flush takes the zone lock while holding the
//! pcp lock, never the other way round.
//!
//! # The algorithm (Linux 6.7+, `mm/page_alloc.c`)
//!
//! Lists hold free blocks of orders 0..=3 per migratetype, plus pageblock-order
//! blocks (THP size) split movable / non-movable:
//!
//! ```text
//!  pindex:  0  1  2 | 3  4  5 | 6  7  8 | 9 10 11 | 12        13
//!  order:   0       | 1       | 2       | 3       | pb order  pb order
//!  type:    U  M  R | U  M  R | U  M  R | U  M  R | non-mov.  movable
//! ```
//!
//! * **Allocation** pops the list head (most recently freed, cache-hot). An empty list
//!   is refilled with `nr_pcp_alloc()` blocks in one zone-lock hold
//!   (`rmqueue_bulk`), appended in ascending address order. Consecutive order-0
//!   refills without frees double the refill (`alloc_factor`, up to `batch << 5`).
//! * **Free** pushes at the head. When the list's CPU holds `high` pages or more,
//!   `nr_pcp_free()` pages are flushed from the list tails (coldest first), round
//!   robin starting with the list just freed to, in one zone-lock hold
//!   (`free_pcppages_bulk`), merging with their buddies there. The amount follows
//!   the recent free streak (`free_count`), clamped to `[batch, high - batch]`.
//! * **`high` auto-tunes** between `high_min` (from the low watermark) and `high_max`
//!   (1/8 of the zone), both split between the CPUs: refills grow it while the zone
//!   is above its high watermark, overflowing frees raise it to the free streak, and
//!   it shrinks when the zone falls below the high watermark or on `decay`.
//!
//! Blocks on per-CPU lists are free but not counted in `NR_FREE_PAGES` (as in Linux),
//! carry the `Pcp` state, and are refused by every free (double free) and counted by
//! `check_invariants()`.
//!
//! Linux 4.16 to 5.17's buddy prefetch is an option here (`PcpConfig::prefetch_buddy`): the flush first
//! picks its blocks off the per-CPU lists without the zone lock, prefetching each
//! buddy's metadata, then takes the zone lock and merges them.

use crate::buf::Buf;
use crate::counter::Counter;
use crate::frame::{FrameList, Word, NIL};
use crate::stacks::{CpuStacks, Mode};
use crate::sync::{Irq, Ordering, TryLock, TryLockGuard};
use crate::types::{
    Migratetype, Order, Pfn, MIGRATE_PCPTYPES, NR_PCP_LISTS, PAGE_ALLOC_COSTLY_ORDER,
};
use crate::zone::{Zone, ZoneLocked, ZONE_BELOW_HIGH};

/// `CONFIG_PCP_BATCH_SCALE_MAX`.
pub(crate) const PCP_BATCH_SCALE_MAX: u32 = 5;
const NR_LOWORDER_PCP_LISTS: usize = NR_PCP_LISTS - 2;
/// `MIN_PERCPU_PAGELIST_HIGH_FRACTION`.
pub(crate) const MIN_PERCPU_PAGELIST_HIGH_FRACTION: u64 = 8;

const PCPF_PREV_FREE_HIGH_ORDER: u8 = 1;
const PCPF_FREE_HIGH_BATCH: u8 = 2;

/// Largest number of blocks one prefetching flush picks before it takes the zone lock.
const PICK_MAX: usize = 256;

/// `pcp_allowed_order()`: orders 0..=3 and the pageblock (THP) order.
#[inline]
pub(crate) fn pcp_allowed_order(order: Order, pageblock_order: Order) -> bool {
    order.0 <= PAGE_ALLOC_COSTLY_ORDER || order == pageblock_order
}

/// A flush's picked blocks merged onto the free lists: as one batch where no
/// per-CPU order exceeds a pageblock (`pageblock_order` at least
/// `PAGE_ALLOC_COSTLY_ORDER`, as in Linux's configurations), else one at a time so
/// that a block spanning pageblocks is split by their types.
#[inline(always)]
fn free_picked(zl: &mut ZoneLocked<'_>, blocks: impl Iterator<Item = (Pfn, Order)>) {
    if zl.zone.pageblock_order.0 >= PAGE_ALLOC_COSTLY_ORDER {
        zl.free_blocks_locked(blocks);
    } else {
        for (pfn, order) in blocks {
            zl.free_block_locked(pfn, order, false);
        }
    }
}

/// `order_to_pindex()`.
#[inline]
pub(crate) fn order_to_pindex(mt: Migratetype, order: Order) -> usize {
    if order.0 > PAGE_ALLOC_COSTLY_ORDER {
        NR_LOWORDER_PCP_LISTS + (mt == Migratetype::Movable) as usize
    } else {
        MIGRATE_PCPTYPES * order.idx() + mt.idx()
    }
}

/// `pindex_to_order()`.
#[inline]
pub(crate) fn pindex_to_order(pindex: usize, pageblock_order: Order) -> Order {
    if pindex >= NR_LOWORDER_PCP_LISTS {
        pageblock_order
    } else {
        Order((pindex / MIGRATE_PCPTYPES) as u8)
    }
}

/// One CPU's lists for one zone. Protected by its `PcpSlot` lock.
pub(crate) struct PerCpuPages {
    /// Pages (not blocks) on all lists.
    pub count: u64,
    pub high: u64,
    pub high_min: u64,
    pub high_max: u64,
    pub batch: u64,
    flags: u8,
    alloc_factor: u32,
    /// Pages freed recently without allocation in between.
    free_count: u64,
    pub lists: [FrameList; NR_PCP_LISTS],
}

/// Per-CPU event counters. Written only by the holder of the slot's lock (relaxed
/// load + store, no read-modify-write); read lock-free, exact once quiescent.
pub(crate) struct PcpStats {
    pub pgalloc: Counter,
    pub pgfree: Counter,
    /// Refills (`rmqueue_bulk` calls) and blocks they took from the buddy lists.
    pub refills: Counter,
    pub refill_blocks: Counter,
    /// Flushes (`free_pcppages_bulk` calls) and blocks they returned.
    pub drains: Counter,
    pub drain_blocks: Counter,
    /// `refill_blocks` and `drain_blocks` per list order (`pcp_order_slot`).
    pub refill_blocks_by_order: [Counter; PCP_ORDER_SLOTS],
    pub drain_blocks_by_order: [Counter; PCP_ORDER_SLOTS],
    /// Mirror of `PerCpuPages::count` for lock-free readers.
    pub count: Counter,
}

impl PcpStats {
    /// Counts a refill of `blocks` blocks of `order` (the slot's lock held).
    #[inline]
    pub fn count_refill(&self, order: Order, pageblock_order: Order, blocks: u64) {
        self.refills.add(1);
        self.refill_blocks.add(blocks as i64);
        self.refill_blocks_by_order[pcp_order_slot(order, pageblock_order)].add(blocks as i64);
    }

    /// Counts a flush; `by_order` holds its blocks per `pcp_order_slot`.
    #[inline]
    pub fn count_drain(&self, by_order: &[u64; PCP_ORDER_SLOTS]) {
        self.drains.add(1);
        self.drain_blocks.add(by_order.iter().sum::<u64>() as i64);
        for (c, &n) in self.drain_blocks_by_order.iter().zip(by_order) {
            if n > 0 {
                c.add(n as i64);
            }
        }
    }
}

/// Orders with per-CPU lists, as `PcpCpuStats` counts them per order: 0 to
/// `PAGE_ALLOC_COSTLY_ORDER`, then the pageblock order.
pub const PCP_ORDER_SLOTS: usize = PAGE_ALLOC_COSTLY_ORDER as usize + 2;

/// Where `PcpCpuStats` counts an order with per-CPU lists: its own index up to
/// `PAGE_ALLOC_COSTLY_ORDER`, the last slot for the pageblock order (and any
/// order above `PAGE_ALLOC_COSTLY_ORDER`).
#[inline]
pub fn pcp_order_slot(order: Order, pageblock_order: Order) -> usize {
    if order == pageblock_order || order.0 > PAGE_ALLOC_COSTLY_ORDER {
        PCP_ORDER_SLOTS - 1
    } else {
        order.0 as usize
    }
}

/// A CPU's lists and counters, on their own cache lines.
#[repr(align(128))]
pub(crate) struct PcpSlot {
    lock: TryLock<PerCpuPages>,
    pub stats: PcpStats,
    /// Whether fork's `prefork` stopped this CPU's stacks when it took the
    /// lock (pinned stacks may refuse), so that `postfork_parent` resumes
    /// exactly what it stopped.
    #[cfg(not(loom))]
    pub fork_stopped: crate::sync::AtomicBool,
}

/// Proof that a CPU's pcp lock is held.
pub(crate) struct PcpLocked<'a> {
    pub zone: &'a Zone,
    pub cpu: usize,
    pub slot: &'a PcpSlot,
    pub pcp: TryLockGuard<'a, PerCpuPages>,
    /// This holder stopped the CPU's stacks (`Zone::pcp_lock`); released with it.
    stopped: bool,
    /// Only try the zone lock (`free_pages_nolock`): a flush that finds it taken
    /// leaves the blocks on the lists.
    pub trylock: bool,
}

impl Drop for PcpLocked<'_> {
    fn drop(&mut self) {
        if self.stopped {
            let z = self.zone;
            match z.stacks.mode() {
                Mode::Pinned => z.stacks.resume_pinned(self.cpu),
                _ => {
                    for i in (self.cpu..z.stacks.len()).step_by(z.pcp.len()) {
                        z.stacks.resume(i);
                    }
                }
            }
        }
    }
}

impl PcpSlot {
    /// A CPU's empty lists, locked with interrupts disabled through `irq`.
    pub(crate) fn new(batch: u64, high_min: u64, high_max: u64, irq: Irq) -> PcpSlot {
        PcpSlot {
            lock: TryLock::new(
                PerCpuPages {
                    count: 0,
                    high: high_min,
                    high_min,
                    high_max,
                    batch,
                    flags: 0,
                    alloc_factor: 0,
                    free_count: 0,
                    lists: [FrameList::EMPTY; NR_PCP_LISTS],
                },
                irq,
            ),
            stats: PcpStats {
                pgalloc: Counter::new(),
                pgfree: Counter::new(),
                refills: Counter::new(),
                refill_blocks: Counter::new(),
                drains: Counter::new(),
                drain_blocks: Counter::new(),
                refill_blocks_by_order: core::array::from_fn(|_| Counter::new()),
                drain_blocks_by_order: core::array::from_fn(|_| Counter::new()),
                count: Counter::new(),
            },
            #[cfg(not(loom))]
            fork_stopped: crate::sync::AtomicBool::new(false),
        }
    }
}

/// `zone_batchsize()`: about 0.025% of the zone, at most 256 KiB, as `2^n - 1`.
pub(crate) fn zone_batchsize(managed: u64, page_size: u64) -> u64 {
    let b = (managed >> 12).min((256 * 1024 / page_size).max(1)).max(1);
    let b = b + b / 2;
    let r = (1u64 << crate::types::ilog2(b)) - 1;
    r.max(1)
}

/// `zone_highsize()`: the zone's share (low watermark, or `managed / fraction`) per
/// CPU, at least four batches.
pub(crate) fn zone_highsize(total_pages: u64, batch: u64, nr_cpus: u64) -> u64 {
    (total_pages / nr_cpus.max(1)).max(batch * 4)
}

impl PcpSlot {
    /// Tries this slot's lock: CPU `cpu`'s lists for `zone`.
    #[inline]
    pub(crate) fn try_lock<'a>(&'a self, zone: &'a Zone, cpu: usize) -> Option<PcpLocked<'a>> {
        let pcp = self.lock.try_lock()?;
        Some(PcpLocked {
            zone,
            cpu,
            slot: self,
            pcp,
            stopped: false,
            trylock: false,
        })
    }

    /// Takes this slot's lock, waiting for it (drains, statistics, validators).
    pub(crate) fn lock<'a>(&'a self, zone: &'a Zone, cpu: usize) -> PcpLocked<'a> {
        PcpLocked {
            zone,
            cpu,
            slot: self,
            pcp: self.lock.lock(),
            stopped: false,
            trylock: false,
        }
    }
}

#[cfg(not(loom))]
impl PcpSlot {
    /// Releases this slot's lock, kept held by `PcpLocked::keep_locked`.
    ///
    /// # Safety
    /// As `TryLock::force_unlock`.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn force_unlock(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.lock.force_unlock() }
    }
}

#[cfg(not(loom))]
impl PcpLocked<'_> {
    /// Keeps the lock held, and the CPU's stacks stopped if this holder stopped
    /// them, after the guard is gone (fork's `prefork`). Returns whether it had
    /// stopped them.
    #[allow(unsafe_code)]
    pub(crate) fn keep_locked(self) -> bool {
        let stopped = self.stopped;
        let me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped, so the guard read out here is the only
        // owner of the lock's hold, and dropping nothing else of `me` skips the
        // resume of its stacks.
        let pcp = unsafe { core::ptr::read(&me.pcp) };
        pcp.keep_locked();
        stopped
    }
}

impl PcpLocked<'_> {
    /// Stops this CPU's stacks (see `stacks`) and moves their blocks onto its
    /// lists, the top of each stack at the head of its list: from then on the
    /// lists hold everything the CPU holds, until this guard is dropped. Pinned
    /// stacks were stopped before the lock was taken (`pinned_stopped`: whether
    /// that worked; see `Zone::pcp_lock`).
    pub(crate) fn stop_stacks(&mut self, pinned_stopped: bool) {
        let z = self.zone;
        match z.stacks.mode() {
            Mode::Off => {}
            Mode::Rseq => {
                self.stopped = true;
                // Stack `i` belongs to the lists of CPU `i % nr_cpus`.
                for i in (self.cpu..z.stacks.len()).step_by(z.pcp.len()) {
                    if let Some(cs) = z.stacks.stop(i) {
                        self.take_stacked(cs);
                    }
                }
            }
            Mode::Pinned => {
                if pinned_stopped {
                    self.stopped = true;
                    if let Some(cs) = z.stacks.cpu(self.cpu) {
                        self.take_stacked(cs);
                    }
                }
            }
        }
    }

    /// Moves the blocks of stopped stacks `cs` onto this CPU's lists.
    fn take_stacked(&mut self, cs: &CpuStacks) {
        let z = self.zone;
        let mut pages = 0;
        for p in 0..NR_PCP_LISTS {
            let order = pindex_to_order(p, z.pageblock_order);
            let word = Word::pcp(order, self.cpu as u8);
            let list = &mut self.pcp.lists[p];
            cs.take_all_stopped(p, |idx| {
                z.frames.set_word(idx, word);
                list.push_head(&z.frames, idx);
                pages += order.nr_pages();
            });
        }
        if pages > 0 {
            let c = self.pcp.count + pages;
            self.set_count(c);
        }
    }

    /// Unlinks up to `max` blocks from the head of list `pindex` onto `out` (frame
    /// indices), for the stacks: they stay free and per-CPU, so no event is
    /// counted.
    pub(crate) fn take_listed<const N: usize>(
        &mut self,
        pindex: usize,
        max: usize,
        out: &mut Buf<u32, N>,
    ) {
        let z = self.zone;
        let order = pindex_to_order(pindex, z.pageblock_order);
        let mut n = 0;
        while n < max && !self.pcp.lists[pindex].is_empty() {
            let idx = self.pcp.lists[pindex].head;
            self.pcp.lists[pindex].unlink(&z.frames, idx);
            out.push(idx);
            n += 1;
        }
        if n > 0 {
            let c = self.pcp.count - ((n as u64) << order.0);
            self.set_count(c);
        }
    }

    #[inline]
    fn set_count(&mut self, count: u64) {
        self.pcp.count = count;
        self.slot.stats.count.set(count);
    }

    // ---------------------------------------------------------------------------
    // Allocation
    // ---------------------------------------------------------------------------

    /// `rmqueue_pcplist()`: a block of `order` for type `mt` from this CPU's list,
    /// refilling it from the buddy lists when empty and `refill` allows it. The
    /// returned head has no state yet; the caller publishes it. `highatomic`
    /// requests never refill.
    #[inline]
    pub(crate) fn rmqueue(
        &mut self,
        order: Order,
        mt: Migratetype,
        flags: crate::gfp::AllocFlags,
        faults: &crate::fault::Faults,
        refill: bool,
    ) -> Option<Pfn> {
        let pindex = order_to_pindex(mt, order);
        if !refill && self.pcp.lists[pindex].is_empty() {
            return None;
        }
        self.pcp.free_count >>= 1;
        if self.pcp.lists[pindex].is_empty() {
            if faults.should_fail(crate::fault::FaultSite::PcpRefill) {
                return None;
            }
            if flags.has(crate::gfp::AllocFlags::HIGHATOMIC) {
                return None;
            }
            let n = self.nr_pcp_alloc(order);
            self.rmqueue_bulk(order, n, pindex, mt, flags);
            if self.pcp.lists[pindex].is_empty() {
                return None;
            }
        }
        let z = self.zone;
        let idx = self.pcp.lists[pindex].head;
        self.pcp.lists[pindex].unlink(&z.frames, idx);
        let c = self.pcp.count - order.nr_pages();
        self.set_count(c);
        self.slot.stats.pgalloc.add(order.nr_pages() as i64);
        Some(z.pfn_of(idx))
    }

    /// `nr_pcp_alloc()`: how many blocks a refill takes.
    fn nr_pcp_alloc(&mut self, order: Order) -> u64 {
        let p = &mut *self.pcp;
        p.high = p.high.clamp(p.high_min, p.high_max.max(p.high_min));
        let mut high = p.high;
        let base = p.batch;
        if high < base {
            return 1;
        }
        let mut batch = if order.0 > 0 {
            base
        } else {
            base << p.alloc_factor
        };
        if p.high_min != p.high_max
            && self.zone.flags.load(Ordering::Relaxed) & ZONE_BELOW_HIGH == 0
        {
            high = (high + batch).min(p.high_max);
            p.high = high;
        }
        if order.0 == 0 {
            let max_nr = high.saturating_sub(p.count + base).max(base);
            if batch <= max_nr && p.alloc_factor < PCP_BATCH_SCALE_MAX {
                p.alloc_factor += 1;
            }
            batch = batch.min(max_nr);
        }
        if batch > 1 {
            batch = (batch >> order.0).max(2);
        }
        batch
    }

    /// `rmqueue_bulk()`: takes up to `count` blocks from the buddy lists in one zone
    /// lock hold and appends them, in the order found, to list `pindex`.
    fn rmqueue_bulk(
        &mut self,
        order: Order,
        count: u64,
        pindex: usize,
        mt: Migratetype,
        flags: crate::gfp::AllocFlags,
    ) {
        let z = self.zone;
        let cpu = self.cpu as u8;
        let list = &mut self.pcp.lists[pindex];
        let t = z.frames.view();
        let zl = if flags.has(crate::gfp::AllocFlags::TRYLOCK) {
            z.try_lock()
        } else {
            Some(z.lock())
        };
        let Some(mut zl) = zl else {
            return;
        };
        if z.has_deferred() {
            zl.free_deferred();
        }
        let got = zl.rmqueue_bulk(order, mt, flags, count, false, |first, k| {
            let first = t.idx(first);
            for i in 0..k as u32 {
                let idx = first + (i << order.0);
                t.set_word(idx, Word::pcp(order, cpu));
                list.push_tail(t, idx);
            }
        });
        drop(zl);
        let c = self.pcp.count + (got << order.0);
        self.set_count(c);
        self.slot.stats.count_refill(order, z.pageblock_order, got);
    }

    // ---------------------------------------------------------------------------
    // Freeing
    // ---------------------------------------------------------------------------

    /// `free_frozen_page_commit()`: puts the frozen block on this CPU's list and
    /// flushes when the CPU holds `high` pages or more.
    #[inline]
    pub(crate) fn free(&mut self, pfn: Pfn, order: Order, mt: Migratetype, prefetch: bool) {
        let z = self.zone;
        let idx = z.idx(pfn);
        z.frames.set_word(idx, Word::pcp(order, self.cpu as u8));
        let pindex = order_to_pindex(mt, order);
        self.pcp.alloc_factor >>= 1;
        self.slot.stats.pgfree.add(order.nr_pages() as i64);
        self.pcp.lists[pindex].push_head(&z.frames, idx);
        let c = self.pcp.count + order.nr_pages();
        self.set_count(c);
        let p = &mut *self.pcp;
        let batch = p.batch;
        let mut free_high = false;
        if order.0 > 0 && order.0 <= PAGE_ALLOC_COSTLY_ORDER {
            free_high = p.free_count >= batch + p.high_min / 2
                && p.flags & PCPF_PREV_FREE_HIGH_ORDER != 0
                && (p.flags & PCPF_FREE_HIGH_BATCH == 0 || p.count >= batch);
            p.flags |= PCPF_PREV_FREE_HIGH_ORDER;
        } else {
            p.flags &= !PCPF_PREV_FREE_HIGH_ORDER;
        }
        if p.free_count < batch << PCP_BATCH_SCALE_MAX {
            p.free_count += order.nr_pages();
        }
        let high = self.nr_pcp_high(batch, free_high);
        if self.pcp.count >= high {
            let n = self.nr_pcp_free(batch, high, free_high);
            self.free_bulk(n, pindex, prefetch);
            if z.flags.load(Ordering::Relaxed) & ZONE_BELOW_HIGH != 0
                && z.watermark_ok(
                    Order(0),
                    z.wmark(crate::types::Wmark::High),
                    crate::types::ZoneType::Movable,
                    crate::gfp::AllocFlags::checking(crate::types::Wmark::Min),
                    z.nr_free_pages() as i64,
                )
            {
                z.flags.fetch_and(!ZONE_BELOW_HIGH, Ordering::Relaxed);
            }
        }
    }

    /// `nr_pcp_high()`: the flush threshold; tunes `high`.
    fn nr_pcp_high(&mut self, batch: u64, free_high: bool) -> u64 {
        let below_high = self.zone.flags.load(Ordering::Relaxed) & ZONE_BELOW_HIGH != 0;
        let p = &mut *self.pcp;
        let high = p.high.clamp(p.high_min, p.high_max.max(p.high_min));
        p.high = high;
        if high == 0 {
            return 0;
        }
        if free_high {
            p.high = high
                .saturating_sub(batch << PCP_BATCH_SCALE_MAX)
                .max(p.high_min);
            return 0;
        }
        if p.high_min == p.high_max {
            return high;
        }
        if below_high {
            p.high = high.saturating_sub(p.free_count.max(batch)).max(p.high_min);
            return p.count.max(p.high_min);
        }
        if p.count >= high && p.high < p.free_count + batch {
            p.high = (p.free_count + batch).clamp(p.high_min, p.high_max);
        }
        high
    }

    /// `nr_pcp_free()`: how many pages a flush returns.
    fn nr_pcp_free(&self, batch: u64, high: u64, free_high: bool) -> u64 {
        let p = &*self.pcp;
        if free_high {
            return p.count.min(batch << PCP_BATCH_SCALE_MAX);
        }
        if high < batch {
            return 1;
        }
        let max_nr = high - batch;
        p.free_count.min(max_nr).max(batch)
    }

    /// Picks the next block to flush: round robin over the lists starting after
    /// `*pindex`, taking the list tail (coldest). Unlinks it.
    #[inline]
    fn pick(&mut self, pindex: &mut usize) -> Option<(u32, Order)> {
        if self.pcp.count == 0 {
            return None;
        }
        let z = self.zone;
        let mut i = *pindex;
        while self.pcp.lists[i].is_empty() {
            i = (i + 1) % NR_PCP_LISTS;
            if i == *pindex {
                return None;
            }
        }
        *pindex = i;
        let idx = self.pcp.lists[i].tail;
        debug_assert_ne!(idx, NIL);
        self.pcp.lists[i].unlink(&z.frames, idx);
        let order = pindex_to_order(i, z.pageblock_order);
        let c = self.pcp.count - order.nr_pages();
        self.set_count(c);
        Some((idx, order))
    }

    /// `free_pcppages_bulk()`: returns at least `count` pages (or everything) from
    /// this CPU's lists to the buddy lists, starting with list `pindex`.
    pub(crate) fn free_bulk(&mut self, count: u64, pindex: usize, prefetch: bool) {
        let z = self.zone;
        let mut left = count.min(self.pcp.count);
        let mut pindex = pindex;
        let pb = z.pageblock_order;
        let mut blocks = [0u64; PCP_ORDER_SLOTS];
        if self.trylock {
            // The zone lock first, and nothing picked unless it is had.
            let Some(mut zl) = z.try_lock() else {
                return;
            };
            free_picked(
                &mut zl,
                core::iter::from_fn(|| {
                    if left == 0 {
                        return None;
                    }
                    let (idx, order) = self.pick(&mut pindex)?;
                    left = left.saturating_sub(order.nr_pages());
                    blocks[pcp_order_slot(order, pb)] += 1;
                    Some((z.pfn_of(idx), order))
                }),
            );
        } else if prefetch {
            // The buddy prefetch: pick outside the zone lock, prefetching each buddy's metadata,
            // then merge the picked blocks under one zone-lock hold per chunk.
            let mut picked = [(0u32, Order(0)); PICK_MAX];
            while left > 0 {
                let mut n = 0;
                while left > 0 && n < PICK_MAX {
                    let Some((idx, order)) = self.pick(&mut pindex) else {
                        break;
                    };
                    z.frames.view().prefetch(z.pfn_of(idx).buddy(order));
                    picked[n] = (idx, order);
                    blocks[pcp_order_slot(order, pb)] += 1;
                    n += 1;
                    left = left.saturating_sub(order.nr_pages());
                }
                if n == 0 {
                    break;
                }
                let picked = picked[..n]
                    .iter()
                    .map(|&(idx, order)| (z.pfn_of(idx), order));
                free_picked(&mut z.lock(), picked);
            }
        } else {
            let mut zl = z.lock();
            if z.has_deferred() {
                zl.free_deferred();
            }
            free_picked(
                &mut zl,
                core::iter::from_fn(|| {
                    if left == 0 {
                        return None;
                    }
                    let (idx, order) = self.pick(&mut pindex)?;
                    left = left.saturating_sub(order.nr_pages());
                    blocks[pcp_order_slot(order, pb)] += 1;
                    Some((z.pfn_of(idx), order))
                }),
            );
        }
        self.slot.stats.count_drain(&blocks);
    }

    /// Empties this CPU's lists (`drain_pages_zone()`), at most `batch << 5` pages
    /// per zone-lock hold.
    pub(crate) fn drain(&mut self, prefetch: bool) {
        while self.pcp.count > 0 {
            let chunk = self.pcp.batch.max(1) << PCP_BATCH_SCALE_MAX;
            self.free_bulk(chunk, 0, prefetch);
        }
    }

    /// `decay_pcp_high()`: lowers `high` by an eighth toward `high_min` and flushes
    /// what is above it. Returns whether there is more to decay.
    pub(crate) fn decay(&mut self, prefetch: bool) -> bool {
        let p = &mut *self.pcp;
        let batch = p.batch.max(1);
        if p.high > p.high_min {
            p.high = p
                .count
                .saturating_sub(batch << PCP_BATCH_SCALE_MAX)
                .max(p.high - p.high / 8)
                .max(p.high_min);
        }
        let todo = self.pcp.count.saturating_sub(self.pcp.high);
        if todo > 0 {
            self.free_bulk(todo, 0, prefetch);
        }
        self.pcp.high > self.pcp.high_min || self.pcp.count > self.pcp.high
    }

    /// The heads on this CPU's lists, as `(frame index, order)`.
    pub(crate) fn census(&self, out: &mut alloc::vec::Vec<(u32, Order)>) {
        let z = self.zone;
        for (i, l) in self.pcp.lists.iter().enumerate() {
            let order = pindex_to_order(i, z.pageblock_order);
            out.extend(l.iter(&z.frames).map(|idx| (idx, order)));
        }
    }
}

/// Records a free that bypassed the per-CPU lists (zone-lock path).
#[inline]
pub(crate) fn count_zone_free(z: &Zone, order: Order) {
    z.events.pgfree.inc(order.nr_pages());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_matches_linux_for_known_zones() {
        // Zones of 1 GiB or more get 63; DMA32 of the traced machine too.
        assert_eq!(zone_batchsize(772_917, 4096), 63);
        assert_eq!(zone_batchsize(524_288, 4096), 63);
        assert_eq!(zone_batchsize(65_536, 4096), 15);
        // Tiny zones get 1.
        assert_eq!(zone_batchsize(3840, 4096), 1);
    }

    #[test]
    fn highsize_matches_the_traced_machine() {
        // DMA32: low 12546, 2 CPUs -> high_min 6273; managed / 8 / 2 -> 48307.
        assert_eq!(zone_highsize(12_546, 63, 2), 6273);
        assert_eq!(zone_highsize(772_917 / 8, 63, 2), 48_307);
        // DMA: low 61 -> 30; 3840 / 8 / 2 = 240.
        assert_eq!(zone_highsize(61, 1, 2), 30);
        assert_eq!(zone_highsize(3840 / 8, 1, 2), 240);
    }

    #[test]
    fn pindex_round_trips() {
        for o in 0..=3u8 {
            for mt in [
                Migratetype::Unmovable,
                Migratetype::Movable,
                Migratetype::Reclaimable,
            ] {
                let i = order_to_pindex(mt, Order(o));
                assert_eq!(pindex_to_order(i, Order(9)), Order(o));
            }
        }
        assert_eq!(order_to_pindex(Migratetype::Movable, Order(9)), 13);
        assert_eq!(order_to_pindex(Migratetype::Unmovable, Order(9)), 12);
    }
}
