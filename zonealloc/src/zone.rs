//! Zones: a range of frames with its own free lists, lock, watermarks and counters.
//!
//! A `Zone` owns the frame table and the pageblock table of its frames. Everything
//! the buddy algorithm changes lives behind `Zone::lock()`, which returns a
//! `ZoneLocked` guard: the proof token every `_locked` function takes. The guard also
//! brackets each critical section with the zone's sequence counter, so statistics can
//! be read from the counters without the lock and still never see a half-done merge.
//!
//! Counters that readers see (`nr_free[order][mt]`, free pages, pageblocks per type)
//! are `Counter`s whose single writer is the zone-lock holder; the sequence counter
//! makes a snapshot of several consistent for readers (see `counter`).
//!
//! The zone also owns one `PcpSlot` per CPU, as Linux's `struct zone` owns its
//! `per_cpu_pageset`: this module names `pcp`'s slot type and `pcp` works on zones,
//! the one pair of layers that refer to each other. Everything else here refers only
//! to the layers below (`frame`, `pageblock`, `config`, `counter`); the buddy
//! algorithm (`buddy`, `isolate`) is built on top, as methods of `ZoneLocked`.

use alloc::boxed::Box;

use crate::config::{Config, ConfigError, ZoneConfig};
use crate::counter::{counters, Counter};
use crate::frame::{zone_metadata_bytes, FrameTable, FreeList, TableSource, Tag, Word, ZONE_LISTS};
use crate::gfp::AllocFlags;
use crate::pageblock::{PageblockTable, COUNTED, WHOLE};
use crate::pcp::{PcpLocked, PcpSlot};
use crate::sync::{AtomicU32, AtomicU64, AtomicU8, Lock, LockGuard, Ordering, SeqCount};
use crate::types::{
    Migratetype, Order, Pfn, Wmark, ZoneId, ZoneType, MAX_NR_ZONES, MIGRATE_PCPTYPES,
    MIGRATE_TYPES, NR_ORDERS_MAX,
};

/// Zone flag: the last allocation found the zone below its high watermark.
pub(crate) const ZONE_BELOW_HIGH: u8 = 1;
/// Zone flag: a fallback boosted the watermarks, and kswapd is to be woken
/// (`ZONE_BOOSTED_WATERMARK`).
pub(crate) const ZONE_BOOSTED_WATERMARK: u8 = 2;

fn atomic_array<const N: usize>() -> [AtomicU64; N] {
    core::array::from_fn(|_| AtomicU64::new(0))
}

/// The zone's buddy lists. Protected by the zone lock.
///
/// Invariant: frame `h` is on `lists[o][mt]` iff its state is `Buddy{o}`, it is
/// aligned to `o`, and its pageblock's effective type is `mt`; bit `o` of
/// `nonempty[mt]` is set iff `lists[o][mt]` is not empty.
pub(crate) struct FreeArea {
    pub lists: [[FreeList; MIGRATE_TYPES]; NR_ORDERS_MAX],
    pub nonempty: [u32; MIGRATE_TYPES],
    /// Pages in pageblocks currently reserved as HighAtomic (`nr_reserved_highatomic`).
    pub nr_reserved_highatomic: u64,
    /// Free page reporting (see `reporting`): which free memory has been reported.
    pub report: ReportArea,
    /// Pageblocks taken out of the zone by `offline_pages` (see `hotplug`), one
    /// bit each by pageblock index; their frames are holes until onlined. Sized
    /// for every pageblock of the zone when the zone is built (`size_offline`),
    /// so that offlining never grows it under the zone lock.
    pub offline: alloc::vec::Vec<u64>,
}

impl FreeArea {
    /// Sizes the offline bitmap for `nr_blocks` pageblocks, all online. Set-up:
    /// called once, as the zone is built (`ZoneLocked::release_initial_frames`).
    pub(crate) fn size_offline(&mut self, nr_blocks: usize) {
        self.offline = alloc::vec![0; nr_blocks.div_ceil(64)];
    }
}

/// A zone's free page reporting state, under the zone lock (see `reporting`).
///
/// Reporting works on *units*: the naturally aligned blocks of the reporting
/// order `order`. Bit `u` of `reported` says that unit `u` (counted from the
/// zone's first aligned unit) was reported and has not been handed out since.
/// Invariant: a set bit's unit lies wholly inside one free buddy block of order
/// at least `order`; `units` counts the set bits.
pub(crate) struct ReportArea {
    /// The reporting order; `u8::MAX` while no reporter is registered.
    pub order: u8,
    pub reported: alloc::vec::Vec<u64>,
    pub units: u64,
    /// Heads (table indices) of the blocks a report has taken off the lists and
    /// not yet put back: they are `Frozen`, free and the reporter's. Room for a
    /// batch (the reporting capacity) is reserved when reporting starts, and a
    /// pass takes no more than there is room for (`hold`): no heap call under
    /// the zone lock.
    pub in_flight: alloc::vec::Vec<u32>,
}

impl ReportArea {
    /// No reporter registered.
    pub(crate) const OFF: u8 = u8::MAX;

    /// The bits of the units block `(pfn, order)` covers, in a zone starting at
    /// `start`: `(first, count)`. The caller checked `order >= self.order`.
    #[inline]
    fn units_of(&self, start: u64, pfn: Pfn, order: Order) -> (usize, usize) {
        let r = self.order as u32;
        let first = (pfn.0 >> r) - (start >> r);
        (first as usize, 1usize << (order.0 as u32 - r))
    }

    /// Starts reporting at `order` over `spanned` frames from `start`, in
    /// batches of up to `capacity` blocks: every unit unreported. Set-up: the
    /// bitmap and the room for a batch in flight are allocated here, once.
    pub(crate) fn start(&mut self, order: Order, start: u64, spanned: u64, capacity: usize) {
        let r = order.0 as u32;
        let units = if spanned == 0 {
            0
        } else {
            ((start + spanned - 1) >> r) - (start >> r) + 1
        };
        self.order = order.0;
        self.reported = alloc::vec![0; units.div_ceil(64) as usize];
        self.units = 0;
        self.in_flight = alloc::vec::Vec::with_capacity(capacity);
    }

    /// Stops reporting: no unit counts as reported any more. Teardown: frees what
    /// `start` allocated.
    pub(crate) fn stop(&mut self) {
        self.order = Self::OFF;
        self.reported = alloc::vec::Vec::new();
        self.units = 0;
        self.in_flight = alloc::vec::Vec::new();
    }

    /// Records head `idx` as taken off the lists by a pass, if the room reserved
    /// at `start` has some left; `false` if not (the pass takes no more: with
    /// one pass at a time and batches of at most the capacity, only a pass
    /// begun under an earlier registration can find it full).
    pub(crate) fn hold(&mut self, idx: u32) -> bool {
        if self.in_flight.len() == self.in_flight.capacity() {
            return false;
        }
        self.in_flight.push(idx);
        true
    }

    /// Marks the units of block `(pfn, order)` unreported; returns how many were
    /// reported.
    pub(crate) fn clear(&mut self, start: u64, pfn: Pfn, order: Order) -> u64 {
        let (first, n) = self.units_of(start, pfn, order);
        let mut cleared = 0;
        for u in first..first + n {
            let (w, b) = (u / 64, 1u64 << (u % 64));
            if self.reported[w] & b != 0 {
                self.reported[w] &= !b;
                cleared += 1;
            }
        }
        self.units -= cleared;
        cleared
    }

    /// Marks the units of block `(pfn, order)` reported; returns how many were not.
    pub(crate) fn set(&mut self, start: u64, pfn: Pfn, order: Order) -> u64 {
        let (first, n) = self.units_of(start, pfn, order);
        let mut set = 0;
        for u in first..first + n {
            let (w, b) = (u / 64, 1u64 << (u % 64));
            if self.reported[w] & b == 0 {
                self.reported[w] |= b;
                set += 1;
            }
        }
        self.units += set;
        set
    }

    /// Whether every unit of block `(pfn, order)` is reported.
    pub(crate) fn all_set(&self, start: u64, pfn: Pfn, order: Order) -> bool {
        let (first, n) = self.units_of(start, pfn, order);
        (first..first + n).all(|u| self.reported[u / 64] & (1u64 << (u % 64)) != 0)
    }

    /// Whether unit `u` is reported.
    pub(crate) fn is_set(&self, u: usize) -> bool {
        self.reported
            .get(u / 64)
            .is_some_and(|w| w & (1u64 << (u % 64)) != 0)
    }
}

/// Counters readable without the zone lock.
pub(crate) struct ZoneCounters {
    /// Free blocks per (order, migratetype), kept on every list add and remove.
    pub nr_free: [[Counter; MIGRATE_TYPES]; NR_ORDERS_MAX],
    /// `NR_FREE_PAGES`: free pages on the buddy lists, isolated ones excluded.
    pub nr_free_pages: Counter,
    /// Free pages on HighAtomic lists.
    pub nr_free_highatomic: Counter,
    /// `NR_FREE_CMA_PAGES`: free pages on CMA lists (part of `nr_free_pages`).
    pub nr_free_cma: Counter,
    /// `NR_FREE_PAGES_BLOCKS`: free pages in blocks of pageblock order or more.
    pub nr_free_pages_blocks: Counter,
    /// Counted pageblocks per effective migratetype.
    pub nr_blocks: [Counter; MIGRATE_TYPES],
    /// Mirror of `FreeArea::nr_reserved_highatomic` for lock-free readers.
    pub nr_reserved_highatomic: Counter,
    /// Free pages reported and not handed out since (`ReportArea::units` in pages).
    pub nr_reported: Counter,
    /// Present pages taken offline (`offline_pages`): `present` and `managed`
    /// less this are the zone's memory now.
    pub nr_offline: Counter,
    /// Pages hot-added since construction (`add_memory`): present and managed.
    pub nr_added: Counter,
    /// Reserved pages given to the allocator (`free_reserved_area`): managed now.
    pub nr_released: Counter,
    /// Set when a free leaves a block of at least the reporting order on the lists
    /// (`page_reporting_notify_free()`); cleared by the reporting pass. Written
    /// only under the zone lock.
    pub report_pending: crate::sync::AtomicBool,
}

/// Event counters (vmstat events), bumped by any thread (`Counter::inc`).
pub(crate) struct ZoneEvents {
    /// `pgalloc_<zone>`: pages allocated.
    pub pgalloc: Counter,
    /// `pgfree`: pages freed into the allocator (to the buddy or a per-CPU list).
    pub pgfree: Counter,
    /// Fallbacks that took memory from another migratetype (`mm_page_alloc_extfrag`).
    pub extfrag: Counter,
    /// Pageblocks claimed wholesale by a fallback.
    pub claims: Counter,
    /// Highatomic pageblocks reserved and released.
    pub highatomic_reserve: Counter,
    pub highatomic_unreserve: Counter,
    /// Allocations that failed in this zone's watermark check.
    pub wmark_fail: Counter,
}

/// One zone.
pub(crate) struct Zone {
    pub id: ZoneId,
    /// Index of this zone in the allocator's zone array.
    pub index: usize,
    pub start_pfn: u64,
    pub spanned: u64,
    pub present: u64,
    pub managed: u64,
    /// `cma_pages`: frames of contiguous memory areas in the zone (see `cma`).
    pub cma_pages: u64,
    pub max_order: Order,
    pub pageblock_order: Order,
    /// Linux's `page_group_by_mobility_disabled`, per zone here.
    pub mobility_disabled: bool,
    pub frames: FrameTable,
    pub blocks: PageblockTable,
    free: Lock<FreeArea>,
    pub seq: SeqCount,
    pub counters: ZoneCounters,
    pub events: ZoneEvents,
    /// min, low, high, promo (pages), without the boost.
    pub watermark: [AtomicU64; 4],
    /// `watermark_boost`: pages added to every watermark after fallbacks stole
    /// pageblocks, until kswapd has balanced the node (`reclaim`). Raised under
    /// the zone lock; reset by kswapd under it.
    pub watermark_boost: AtomicU64,
    /// `watermark_boost_factor` (units of 0.01 % of the high watermark; 0: no
    /// boosting), from the configuration.
    pub boost_factor: u64,
    /// Pages this zone keeps back from requests whose highest zone is `j`.
    pub lowmem_reserve: [AtomicU64; MAX_NR_ZONES],
    pub flags: AtomicU8,
    /// One slot of per-CPU lists per CPU.
    pub pcp: Box<[PcpSlot]>,
    /// The per-CPU stacks in front of `pcp` (see `rseq`); empty where the
    /// process cannot use them or the configuration turns them off.
    pub stacks: crate::stacks::Stacks,
    /// The platform: what the zone's locks disable interrupts through, and what
    /// stops another CPU's pinned stacks (`Platform::sync_cpu`).
    pub platform: crate::sync::Irq,
    /// Frozen blocks whose free found the zone lock taken (`free_pages_nolock`),
    /// a stack linked through their `prev` links: the first one's index, `NIL`
    /// for none (see `defer_free`).
    pub deferred: AtomicU32,
    /// Pages on `deferred`: free, outside the buddy lists until merged, counted
    /// with the per-CPU lists' (`nr_pcp_pages`).
    deferred_pages: AtomicU64,
}

/// Proof that the zone lock is held; gives access to the free lists.
pub(crate) struct ZoneLocked<'a> {
    pub zone: &'a Zone,
    pub area: LockGuard<'a, FreeArea>,
}

impl ZoneLocked<'_> {
    /// Whether the pageblock holding `pfn` is offline (see `hotplug`).
    pub(crate) fn is_offline(&self, pfn: Pfn) -> bool {
        let b = self.zone.blocks.index(pfn);
        self.area
            .offline
            .get(b / 64)
            .is_some_and(|w| w & (1u64 << (b % 64)) != 0)
    }

    /// Marks the pageblock holding `pfn` offline or online (the bitmap has a bit
    /// for every pageblock of the zone: see `FreeArea::size_offline`).
    pub(crate) fn set_offline(&mut self, pfn: Pfn, on: bool) {
        let b = self.zone.blocks.index(pfn);
        let bits = &mut self.area.offline;
        if on {
            bits[b / 64] |= 1u64 << (b % 64);
        } else {
            bits[b / 64] &= !(1u64 << (b % 64));
        }
    }
}

impl Drop for ZoneLocked<'_> {
    fn drop(&mut self) {
        // Runs before `area` (the lock guard) is dropped: the write section closes
        // while the lock is still held.
        self.zone.seq.write_end();
    }
}

impl Zone {
    /// Builds a zone whose frames are all taken (`Tail`, `Hole`, or reserved);
    /// the buddy layer then frees the present ones that are not reserved
    /// (`ZoneLocked::release_initial_frames`). Its frame table comes from `src`,
    /// backed only where `zc` has memory (see `memmap`); its locks disable
    /// interrupts through `config.platform`. Cost: linear in the present frames
    /// and in the spanned pageblocks.
    pub fn new(
        id: ZoneId,
        index: usize,
        zc: &ZoneConfig,
        config: &Config,
        src: &mut TableSource<'_>,
    ) -> Result<Zone, ConfigError> {
        let (max_order, pageblock_order) = (config.max_order, config.pageblock_order);
        let start = zc.start_pfn.0;
        let spanned = zc.spanned_pages;
        let end = start + spanned;
        let present_ranges = zc.present_ranges();
        let no_memory = ConfigError::Metadata {
            bytes: match src {
                TableSource::Own => config.metadata_bytes(),
                TableSource::Given(_) => zone_metadata_bytes(spanned),
            },
        };
        let frames = usize::try_from(spanned)
            .ok()
            .and_then(|nr| FrameTable::build(id, start, nr, ZONE_LISTS, &present_ranges, src))
            .ok_or(no_memory)?;
        let lists = core::array::from_fn(|o| {
            core::array::from_fn(|mt| FreeList::new(&frames, o * MIGRATE_TYPES + mt))
        });
        let present: u64 = present_ranges.iter().map(|&(a, b)| b - a).sum();
        // Reserved frames (validated: present memory) stay out until released.
        let mut reserved = 0u64;
        for &(r, n) in &config.reserved {
            let (a, b) = (r.0.max(start), r.0.saturating_add(n).min(end));
            for p in a..b {
                let i = (p - start) as u32;
                if frames.word(i) == Word::TAIL {
                    frames.set_word(i, Word::RESERVED);
                    reserved += 1;
                }
            }
        }
        let pb = pageblock_order.0;
        let pb_nr = 1u64 << pb;
        let (first_block, nr_blocks) = if spanned == 0 {
            (start >> pb, 0)
        } else {
            (start >> pb, ((end - 1) >> pb) - (start >> pb) + 1)
        };
        let offset = start & (pb_nr - 1);
        let is_hole = |p: u64| {
            let i = present_ranges.partition_point(|&(_, e)| e <= p);
            present_ranges.get(i).is_none_or(|&(a, _)| a > p)
        };
        let block_flags = (0..nr_blocks as usize).map(|k| {
            let b = first_block + k as u64;
            let bstart = b << pb;
            let bend = bstart + pb_nr;
            let probe = bstart + offset;
            let mut f = 0;
            if probe >= start && probe < end && !is_hole(probe) {
                f |= COUNTED;
            }
            if bstart >= start && bend <= end {
                f |= WHOLE;
            }
            f
        });
        let blocks = PageblockTable::new(first_block, pb, block_flags).ok_or(no_memory)?;
        let managed = present - reserved;
        let irq = config.platform;
        let (nr_cpus, mobility_grouping) = (config.nr_cpus, config.mobility_grouping);
        let cma = !config.cma.is_empty();
        let zone = Zone {
            id,
            index,
            start_pfn: start,
            spanned,
            present,
            managed,
            cma_pages: 0,
            max_order,
            pageblock_order,
            // Linux: grouping is pointless when the zone cannot hold a few blocks of
            // each type beyond its watermarks (each type of a kernel built with
            // CMA where an area is configured, else without: one fewer).
            mobility_disabled: !mobility_grouping
                || managed < pb_nr * (MIGRATE_TYPES as u64 - u64::from(!cma)),
            frames,
            blocks,
            free: Lock::new(
                FreeArea {
                    lists,
                    nonempty: [0; MIGRATE_TYPES],
                    nr_reserved_highatomic: 0,
                    report: ReportArea {
                        order: ReportArea::OFF,
                        reported: alloc::vec::Vec::new(),
                        units: 0,
                        in_flight: alloc::vec::Vec::new(),
                    },
                    offline: alloc::vec::Vec::new(),
                },
                irq,
            ),
            seq: SeqCount::new(),
            counters: ZoneCounters {
                nr_free: core::array::from_fn(|_| counters()),
                nr_free_pages: Counter::new(),
                nr_free_highatomic: Counter::new(),
                nr_free_cma: Counter::new(),
                nr_free_pages_blocks: Counter::new(),
                nr_blocks: counters(),
                nr_reserved_highatomic: Counter::new(),
                nr_reported: Counter::new(),
                nr_offline: Counter::new(),
                nr_added: Counter::new(),
                nr_released: Counter::new(),
                report_pending: crate::sync::AtomicBool::new(false),
            },
            events: ZoneEvents {
                pgalloc: Counter::new(),
                pgfree: Counter::new(),
                extfrag: Counter::new(),
                claims: Counter::new(),
                highatomic_reserve: Counter::new(),
                highatomic_unreserve: Counter::new(),
                wmark_fail: Counter::new(),
            },
            watermark: atomic_array(),
            watermark_boost: AtomicU64::new(0),
            boost_factor: 0,
            lowmem_reserve: atomic_array(),
            flags: AtomicU8::new(0),
            pcp: (0..nr_cpus).map(|_| PcpSlot::new(1, 0, 0, irq)).collect(),
            deferred: AtomicU32::new(crate::frame::NIL),
            deferred_pages: AtomicU64::new(0),
            stacks: crate::stacks::Stacks::none(),
            platform: irq,
        };
        let counted = (0..zone.blocks.len())
            .filter(|&i| zone.blocks.raw(i) & COUNTED != 0)
            .count() as u64;
        zone.counters.nr_blocks[Migratetype::Movable.idx()].set(counted);
        Ok(zone)
    }

    /// Tries CPU `cpu`'s pcp lock for the zone.
    #[inline]
    pub(crate) fn pcp_trylock(&self, cpu: usize) -> Option<PcpLocked<'_>> {
        self.pcp.get(cpu)?.try_lock(self, cpu)
    }

    /// Takes CPU `cpu`'s pcp lock for the zone, waiting for it, and stops that
    /// CPU's stacks, moving what they hold onto its lists (see `rseq`): the holder
    /// sees every block the CPU holds, and no fast path on that CPU commits until
    /// the lock is released.
    pub(crate) fn pcp_lock(&self, cpu: usize) -> PcpLocked<'_> {
        // Pinned stacks stop before the lock: the barrier on that CPU may need
        // it to take an interrupt, which the lock's interrupt guard would hold
        // off on this one while another CPU waits for it (see `stacks`).
        let pinned = self.stacks.mode() == crate::stacks::Mode::Pinned
            && self
                .platform
                .is_some_and(|p| self.stacks.stop_pinned(cpu, p));
        let mut l = self.pcp[cpu].lock(self, cpu);
        l.stop_stacks(pinned);
        l
    }

    /// Takes CPU `cpu`'s pcp lock for the zone, waiting for it, for a holder
    /// that reads or retunes the lists and needs none of the stacks' blocks:
    /// restartable sequences' stacks are stopped as by `pcp_lock` (it costs a
    /// `membarrier`), pinned ones are left running (stopping them makes that CPU
    /// pass a barrier, an interrupt in a kernel).
    pub(crate) fn pcp_lock_lists(&self, cpu: usize) -> PcpLocked<'_> {
        let mut l = self.pcp[cpu].lock(self, cpu);
        l.stop_stacks(false);
        l
    }

    /// Takes the zone lock.
    #[inline]
    pub fn lock(&self) -> ZoneLocked<'_> {
        let area = self.free.lock();
        self.seq.write_begin();
        ZoneLocked { zone: self, area }
    }

    /// Takes the zone lock if it is free now; never waits.
    #[inline]
    pub fn try_lock(&self) -> Option<ZoneLocked<'_>> {
        let area = self.free.try_lock()?;
        self.seq.write_begin();
        Some(ZoneLocked { zone: self, area })
    }

    /// Takes the zone lock and keeps it held past any guard, in a write section
    /// of `seq` (fork's `prefork`); `fork_unlock` ends both.
    #[cfg(not(loom))]
    pub(crate) fn fork_lock(&self) {
        self.free.lock().keep_locked();
        self.seq.write_begin();
    }

    /// Ends the write section and releases the zone lock that `fork_lock` took.
    ///
    /// `child`: in the child of a `fork` (see `Lock::reset_in_child`).
    ///
    /// # Safety
    /// `fork_lock` took it (in this process or the parent that forked it), and
    /// it has not been released since.
    #[cfg(not(loom))]
    #[allow(unsafe_code)]
    pub(crate) unsafe fn fork_unlock(&self, child: bool) {
        self.seq.write_end();
        // SAFETY: the caller's contract (and, in a child, its only thread).
        unsafe {
            if child {
                self.free.reset_in_child()
            } else {
                self.free.force_unlock()
            }
        }
    }

    /// Sets the deferred pages' count to 0: in a `fork` child, once the
    /// deferred list is merged, what is left counts frees of threads that do
    /// not exist there (their blocks are given back by the child's fix-up).
    #[cfg(not(loom))]
    pub(crate) fn reset_deferred_pages(&self) {
        self.deferred_pages.store(0, Ordering::Relaxed);
    }

    /// Puts frozen block `idx` (its word `Frozen` with its order; the caller owns
    /// it) on the zone's list of frees that found the zone lock taken
    /// (`free_pages_nolock`), linked through the frames' `prev` links; the next
    /// holder of the zone lock on a free path merges them
    /// (`ZoneLocked::free_deferred`). Lock-free: one compare-and-swap, retried
    /// while other frees push.
    pub(crate) fn defer_free(&self, idx: u32) {
        let t = self.frames.view();
        // Relaxed: a count for readers, exact once the list is quiet; counted
        // before the block is on the list so the merge never takes it below 0.
        self.deferred_pages
            .fetch_add(t.word(idx).order().nr_pages(), Ordering::Relaxed);
        // Relaxed: the compare-and-swap below orders it.
        let mut head = self.deferred.load(Ordering::Relaxed);
        loop {
            t.set_prev(idx, head);
            // Release: the link and the frozen word are seen by the holder that
            // takes the list (Acquire swap in `free_deferred`).
            match self.deferred.compare_exchange_weak(
                head,
                idx,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Pages on the deferred list now.
    #[inline]
    pub(crate) fn deferred_pages(&self) -> u64 {
        self.deferred_pages.load(Ordering::Relaxed)
    }

    /// Counts `nr` pages off the deferred list (merged by its taker).
    pub(crate) fn undefer_pages(&self, nr: u64) {
        self.deferred_pages.fetch_sub(nr, Ordering::Relaxed);
    }

    /// Whether frees wait on the deferred list (a hint: whoever acts takes the
    /// zone lock).
    #[inline]
    pub(crate) fn has_deferred(&self) -> bool {
        self.deferred.load(Ordering::Relaxed) != crate::frame::NIL
    }

    /// Whether `pfn` lies in the zone's span.
    #[inline]
    pub fn contains(&self, pfn: Pfn) -> bool {
        pfn.0.wrapping_sub(self.start_pfn) < self.spanned
    }

    /// The head of the block that tail frame `pfn` lies in, as the words read now:
    /// the first frame that is not a tail at an aligned position below `pfn`, with
    /// its word, if its order reaches `pfn` (else a merge or split is under way, or
    /// `pfn` is no tail).
    pub(crate) fn head_of_tail(&self, pfn: Pfn) -> Option<(Pfn, Word)> {
        for o in 1..=self.max_order.0 {
            let head = Pfn(pfn.0 & !((1u64 << o) - 1));
            if !self.contains(head) {
                break;
            }
            let w = self.frames.word(self.idx(head));
            if w.tag() != Tag::Tail {
                return (w.order().0 >= o).then_some((head, w));
            }
        }
        None
    }

    /// Frame-table index of `pfn`. Caller checked `contains(pfn)`.
    #[inline]
    pub fn idx(&self, pfn: Pfn) -> u32 {
        debug_assert!(self.contains(pfn));
        (pfn.0 - self.start_pfn) as u32
    }

    #[inline]
    pub fn pfn_of(&self, idx: u32) -> Pfn {
        Pfn(self.start_pfn + idx as u64)
    }

    #[inline]
    pub fn end_pfn(&self) -> u64 {
        self.start_pfn + self.spanned
    }

    #[inline]
    pub fn zone_type(&self) -> ZoneType {
        self.id.zone_type
    }

    /// `wmark_pages()`: the watermark plus the boost.
    #[inline]
    pub fn wmark(&self, mark: Wmark) -> u64 {
        self.watermark[mark as usize].load(Ordering::Relaxed)
            + self.watermark_boost.load(Ordering::Relaxed)
    }

    /// Present pages now: `present`, plus those hot-added, less those offline.
    #[inline]
    pub fn present_now(&self) -> u64 {
        self.present + self.counters.nr_added.get() - self.counters.nr_offline.get()
    }

    /// Managed pages now: `managed`, plus those hot-added and those released
    /// from the boot reservations, less those offline.
    #[inline]
    pub fn managed_now(&self) -> u64 {
        self.managed + self.counters.nr_added.get() + self.counters.nr_released.get()
            - self.counters.nr_offline.get()
    }

    #[inline]
    pub fn nr_free_pages(&self) -> u64 {
        self.counters.nr_free_pages.get()
    }

    /// Free pages any request may use: `nr_free_pages` less the free CMA pages,
    /// as Linux's kswapd judges a zone (`zone_watermark_ok_safe()` without
    /// `ALLOC_CMA`).
    #[inline]
    pub fn nr_free_pages_no_cma(&self) -> u64 {
        self.nr_free_pages()
            .saturating_sub(self.counters.nr_free_cma.get())
    }

    /// `__zone_watermark_unusable_free()`: free pages this request may not count.
    #[inline]
    fn unusable_free(&self, order: Order, flags: AllocFlags) -> i64 {
        let mut u = order.nr_pages() as i64 - 1;
        if !flags.has(AllocFlags::RESERVES) {
            u += self.counters.nr_free_highatomic.get() as i64;
        }
        // Only movable requests may take CMA pages (`ALLOC_CMA`).
        if !flags.has(AllocFlags::CMA) {
            u += self.counters.nr_free_cma.get() as i64;
        }
        u
    }

    /// `__zone_watermark_ok()`: whether `free_pages` stays above `mark` (lowered for
    /// reserve-entitled requests) plus the lowmem reserve, and for `order > 0` whether
    /// a suitable free block exists. Reads counters only: no lock needed.
    pub fn watermark_ok(
        &self,
        order: Order,
        mark: u64,
        highest: ZoneType,
        flags: AllocFlags,
        free_pages: i64,
    ) -> bool {
        let free = free_pages - self.unusable_free(order, flags);
        // A mark past `i64::MAX` (no zone has that many pages) fails, as any mark
        // above the free pages does.
        let mut min = i64::try_from(mark).unwrap_or(i64::MAX);
        if flags.has(AllocFlags::RESERVES) {
            if flags.has(AllocFlags::MIN_RESERVE) {
                min -= min / 2;
                if flags.has(AllocFlags::NON_BLOCK) {
                    min -= min / 4;
                }
            }
            if flags.has(AllocFlags::OOM) {
                min -= min / 2;
            }
        }
        let reserve = self.lowmem_reserve[highest.idx()].load(Ordering::Relaxed) as i64;
        if free <= min.saturating_add(reserve) {
            return false;
        }
        if order.0 == 0 {
            return true;
        }
        let c = &self.counters.nr_free;
        for o in order.idx()..=self.max_order.idx() {
            if (0..MIGRATE_PCPTYPES).any(|mt| c[o][mt].get() > 0) {
                return true;
            }
            if flags.has(AllocFlags::HIGHATOMIC | AllocFlags::OOM)
                && c[o][Migratetype::HighAtomic.idx()].get() > 0
            {
                return true;
            }
            if flags.has(AllocFlags::CMA) && c[o][Migratetype::Cma.idx()].get() > 0 {
                return true;
            }
        }
        false
    }

    /// After a failed watermark check at `mark`: whether the zone's free-page count
    /// is what failed it (always, for order 0), rather than the lack of a free
    /// block of `order`. Only then may blocks already on a per-CPU list be handed
    /// out below the mark; a high-order request short of its block goes on to the
    /// slow path and its drain, as in Linux.
    #[inline]
    pub(crate) fn short_of_pages(
        &self,
        order: Order,
        mark: u64,
        highest: ZoneType,
        flags: AllocFlags,
    ) -> bool {
        order.0 == 0 || !self.watermark_fast(Order(0), mark, highest, flags)
    }

    /// `zone_watermark_fast()`: an order-0 shortcut, then the full check.
    #[inline]
    pub fn watermark_fast(
        &self,
        order: Order,
        mark: u64,
        highest: ZoneType,
        flags: AllocFlags,
    ) -> bool {
        let free = self.nr_free_pages() as i64;
        if order.0 == 0 {
            let reserved = self.unusable_free(order, flags);
            let usable = free - free.min(reserved);
            let reserve = self.lowmem_reserve[highest.idx()].load(Ordering::Relaxed) as i64;
            let mark = i64::try_from(mark).unwrap_or(i64::MAX);
            if usable > mark.saturating_add(reserve) {
                return true;
            }
        }
        self.watermark_ok(order, mark, highest, flags, free)
    }
}

/// The greedy decomposition of `[pfn, pfn + nr)` into naturally aligned blocks: each
/// step takes the largest order that is aligned at the current frame, fits in what is
/// left, and does not exceed `max_order` (frame 0 counts as aligned to any order).
/// A range that would run past the last frame number (`u64::MAX`) ends there.
pub fn chunks(pfn: Pfn, nr: u64, max_order: Order) -> impl Iterator<Item = (Pfn, Order)> {
    let mut p = pfn.0;
    let mut left = nr;
    core::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        let align = if p == 0 { 63 } else { p.trailing_zeros() };
        let fit = crate::types::ilog2(left);
        let o = align.min(fit).min(max_order.0 as u32) as u8;
        let out = (Pfn(p), Order(o));
        // A range that runs past the last frame number ends there.
        match p.checked_add(1 << o) {
            Some(next) => {
                p = next;
                left -= 1 << o;
            }
            None => left = 0,
        }
        Some(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn chunks_match_the_worked_examples() {
        let got: Vec<_> = chunks(Pfn(4099), 1024, Order(10))
            .map(|(p, o)| (p.0, o.0))
            .collect();
        assert_eq!(
            got,
            [
                (4099, 0),
                (4100, 2),
                (4104, 3),
                (4112, 4),
                (4128, 5),
                (4160, 6),
                (4224, 7),
                (4352, 8),
                (4608, 9),
                (5120, 1),
                (5122, 0)
            ]
        );
        let got: Vec<_> = chunks(Pfn(0), 1536, Order(10))
            .map(|(p, o)| (p.0, o.0))
            .collect();
        assert_eq!(got, [(0, 10), (1024, 9)]);
    }

    /// What docs/kernel.md says a kernel pays per CPU and per zone besides the
    /// frame tables: a per-CPU slot (lists, lock, counters) within 1 KiB, one
    /// CPU's stacks 32 KiB, and the zone itself within 8 KiB.
    #[test]
    #[cfg(not(loom))]
    fn the_per_cpu_and_per_zone_costs_are_what_the_kernel_guide_says() {
        let slot = core::mem::size_of::<PcpSlot>();
        let stacks = core::mem::size_of::<crate::stacks::CpuStacks>();
        let zone = core::mem::size_of::<Zone>();
        assert!(slot <= 1024, "a per-CPU slot takes {slot} bytes");
        assert_eq!(stacks, 32 << 10);
        assert!(zone <= 8 << 10, "a zone takes {zone} bytes");
    }
}
