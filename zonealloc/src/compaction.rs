//! Compaction: moving movable blocks out of the way so that free memory merges into
//! high-order blocks while memory is in use (Linux's `mm/compaction.c`).
//!
//! Layer on top of the allocator and `migrate`; the allocator's slow path calls in
//! through `DirectCompact`, and the state kept between runs lives below in
//! `compact_state`. Takes the zone lock for short holds
//! (taking free blocks, giving them back), the per-CPU locks to drain a zone, and a
//! per-zone compaction lock (`TryLock`) for a whole run, so that one thread at a
//! time compacts a zone; no allocator lock is held while the owner's callback runs.
//! Public API here: `compact_zone`, `compact_node`, `proactive_compact_node`,
//! `fragmentation_score`, `set_migrator`, the two tunables and `compaction_stats`.
//!
//! # Two scanners
//!
//! ```text
//!   zone start                                                    zone end
//!   | migrate scanner ──▶                          ◀── free scanner |
//!   [M M . M][M . M M][M M M M] ... [. F . F][F . . F][M . F F]
//!      sources: movable blocks          targets: free blocks
//! ```
//!
//! The *migration scanner* walks pageblocks from the zone's start. In each it
//! isolates the movable blocks (see `migrate`); for a request of order `o`, an
//! aligned `2^o` chunk holding anything that cannot move (an unmovable page, a
//! guarded block, a hole) is left alone, since emptying the rest would not make it
//! free. The *free scanner* walks pageblocks from the zone's end, taking free blocks
//! below pageblock order out of the buddy lists as migration targets (whole free
//! pageblocks are what compaction makes, so they are never used as targets). Each
//! isolated block is moved by its owner into a target of the same order; the freed
//! source merges with its free buddies. The run stops when a free block of the
//! requested order exists (`compact_finished`), or when the scanners meet.
//!
//! A pageblock in which the migration scanner could isolate nothing, or in which the
//! free scanner found nothing, gets a *skip hint* and is passed over by later runs
//! until a run completes (scanners met), after which every hint is cleared. The
//! scanners' positions are cached between runs, as `compact_cached_*_pfn` are.
//! Direct compaction first resumes from the cached positions with the hints in
//! force; if its scanners meet without a block, it runs once more over the whole
//! zone with the hints ignored and targets taken from any ordinary pageblock, as
//! Linux escalates to `MIN_COMPACT_PRIORITY` (`ignore_skip_hint`,
//! `ignore_block_suitable`). That last run also does what Linux's does not: when its
//! scanners meet, the migration scanner goes on to the zone's end, taking targets
//! upward from the zone's start, strictly below the pageblock it empties. The blocks
//! there are those it passed: holes in pageblocks pinned by unmovable pages, which
//! the meeting scanners leave unused. Targets the free scanner took above the
//! meeting point are given back as the migration scanner reaches their pageblock,
//! so that nothing moves into a pageblock being emptied or is moved twice. And when
//! a block finds no target of its order, that run puts the rest of the pageblock
//! back and goes on with the next one, where other runs end. Linux would split a
//! large folio into pages there (`migrate_pages()` on `-ENOMEM`); an owner's block
//! is one object that zonealloc cannot split, and a pageblock further on may hold
//! only blocks that fit. Explicit and proactive runs cover the whole zone with the
//! hints ignored, targets in movable pageblocks only.
//!
//! Neither scanner keeps a list on the heap, so direct compaction may run where
//! the heap takes its pages from this allocator: the migration scanner isolates
//! a pageblock's blocks `COMPACT_CLUSTER_MAX` (32) at a time into a batch on the
//! stack, moving each batch before it isolates the next; the free scanner takes
//! its blocks a batch at a time under the zone lock; and the run's targets are
//! lists through the private blocks' own links, one per order (Linux's
//! `cc->freepages[order]`).
//!
//! # When to compact
//!
//! `compaction_suitable()`: the zone must have enough free memory for compaction to
//! make a block of the order (more than the low watermark plus twice the block,
//! free pages of highatomic pageblocks not counted), and, above
//! `PAGE_ALLOC_COSTLY_ORDER`, the failure must be one of fragmentation rather than
//! of memory: the zone's fragmentation index (`fragmentation_index`, 0..1000) must be
//! above `extfrag_threshold` (500 by default, `/proc/sys/vm/extfrag_threshold`). A
//! zone whose runs keep failing is *deferred* (`defer_compaction`): after the `k`-th
//! failure in a row the next `2^k` attempts (at most 64) skip it, unless the order
//! asked for is below the one that failed.
//!
//! The allocation slow path compacts directly (`__alloc_pages_direct_compact`) for
//! orders above `PAGE_ALLOC_COSTLY_ORDER` when the GFP allows blocking
//! (`Gfp::DIRECT_RECLAIM`) and a migrator is registered. Proactive compaction
//! (`proactive_compact_node`) compacts whole zones while their fragmentation score
//! is above the watermark that `compaction_proactiveness` sets, for a program to call
//! from a background thread, as kcompactd does.

use alloc::sync::Arc;

use crate::allocate::DirectCompact;
use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::buddy::FreeDelta;
use crate::buf::Buf;
use crate::fragindex::{contig_page_info, fragmentation_index};
use crate::frame::{FrameList, Tag, Word, NIL};
use crate::hook::InCallback;
use crate::migrate::{is_movable_candidate, Step};
use crate::migrator::Migrate;
use crate::sync::Ordering;
use crate::types::{
    Migratetype, Order, Pfn, Wmark, ZoneId, ZoneType, MIGRATE_PCPTYPES, NR_ORDERS_MAX,
    PAGE_ALLOC_COSTLY_ORDER,
};
use crate::zone::Zone;

use crate::compact_state::{last_block, ZoneCompact};
pub use crate::compact_state::{
    COMPACTION_PROACTIVENESS_DEFAULT, EXTFRAG_THRESHOLD_DEFAULT, EXTFRAG_THRESHOLD_MAX,
};

/// Most failures a zone's deferral counts (`COMPACT_MAX_DEFER_SHIFT`).
const COMPACT_MAX_DEFER_SHIFT: u32 = 6;

/// Blocks the migration scanner isolates before they are moved, and free blocks
/// the free scanner finds before it takes them under one zone-lock hold: Linux's
/// `COMPACT_CLUSTER_MAX` (`SWAP_CLUSTER_MAX`, 32). A batch sits on the stack
/// (512 bytes), so a run calls no heap; a pageblock with more goes in several
/// batches, with the same outcome as one (see `isolate_migratepages_block`).
pub(crate) const COMPACT_CLUSTER_MAX: usize = 32;

/// A batch of blocks of one pageblock: isolated sources, or free blocks found.
type Batch = Buf<(Pfn, Order), COMPACT_CLUSTER_MAX>;

/// How a compaction run ended: the two endings of Linux's `enum compact_result`
/// that a run can have. The "not attempted" ones (skipped, deferred, contended)
/// belong to direct compaction, which passes over such a zone without a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactResult {
    /// A free block of the order asked for exists now (or, proactively, the zone's
    /// fragmentation score fell to its low watermark).
    Success,
    /// The scanners met without success.
    Complete,
}

/// What one compaction call did (its share of the vmstat counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactReport {
    /// How the run ended; for `compact_node`, the best result of its zones.
    pub result: Option<CompactResult>,
    /// Frames the migration scanner looked at (`compact_migrate_scanned`).
    pub migrate_scanned: u64,
    /// Frames the free scanner looked at (`compact_free_scanned`).
    pub free_scanned: u64,
    /// Pages isolated, sources and targets together (`compact_isolated`).
    pub isolated: u64,
    /// Pages moved to a new block (`pgmigrate_success`).
    pub pages_moved: u64,
    /// Blocks moved.
    pub blocks_moved: u64,
    /// Pages whose owner refused to move them (`pgmigrate_fail`).
    pub pages_refused: u64,
    /// Pages freed by their owner while isolated (put back and freed).
    pub pages_freed: u64,
    /// Migration callbacks that panicked. Each is taken as a refusal (the block
    /// stays where it was) and ends its zone's run; see `CompactError::OwnerPanicked`.
    pub owner_panics: u64,
}

impl CompactReport {
    fn add(&mut self, o: &CompactReport) {
        self.result = match (self.result, o.result) {
            (Some(CompactResult::Success), _) | (_, None) => self.result,
            (_, r) => r,
        };
        self.migrate_scanned += o.migrate_scanned;
        self.free_scanned += o.free_scanned;
        self.isolated += o.isolated;
        self.pages_moved += o.pages_moved;
        self.blocks_moved += o.blocks_moved;
        self.pages_refused += o.pages_refused;
        self.pages_freed += o.pages_freed;
        self.owner_panics += o.owner_panics;
    }
}

/// Why a compaction call was refused; nothing changes then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactError {
    /// No such zone (or node).
    NoZone,
    /// The order is above `max_order`.
    InvalidOrder(Order),
    /// A tunable out of its range.
    OutOfRange(u32),
    /// The owner's migration callback panicked (caught, with `std`). The block it
    /// was moving stayed where it was, every block isolated or held for the run was
    /// given back, and the run ended; blocks moved before it stay moved.
    OwnerPanicked,
    /// Called from inside one of this allocator's migration callbacks for a zone
    /// that is being compacted (by the callback's own run, as a rule): waiting
    /// would never end, so nothing is done. Without `std`, where threads cannot be
    /// told apart, a call made while any migration callback of this allocator
    /// runs answers this for a zone being compacted.
    Reentered,
}

impl core::fmt::Display for CompactError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CompactError::NoZone => f.write_str("no such zone or node"),
            CompactError::InvalidOrder(o) => write!(f, "order {o} above max_order"),
            CompactError::OutOfRange(v) => write!(f, "value {v} out of range"),
            CompactError::OwnerPanicked => {
                f.write_str("the owner's migration callback panicked; the run was stopped")
            }
            CompactError::Reentered => f.write_str(
                "compaction called from inside a migration callback for a zone being compacted",
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for CompactError {}

/// The compaction counters of `/proc/vmstat`, all zones together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactStats {
    /// `compact_migrate_scanned`.
    pub compact_migrate_scanned: u64,
    /// `compact_free_scanned`.
    pub compact_free_scanned: u64,
    /// `compact_isolated`.
    pub compact_isolated: u64,
    /// `compact_stall`: direct compactions attempted.
    pub compact_stall: u64,
    /// `compact_fail`: direct compactions after which the allocation still failed.
    pub compact_fail: u64,
    /// `compact_success`: direct compactions after which the allocation succeeded.
    pub compact_success: u64,
    /// `pgmigrate_success`: pages moved.
    pub pgmigrate_success: u64,
    /// `pgmigrate_fail`: pages whose owner refused.
    pub pgmigrate_fail: u64,
}

/// The allocation slow path's call into this layer (see `DirectCompact`).
impl<B: Backend> DirectCompact for ZoneAllocator<B> {
    /// Whether the allocation slow path compacts for this request: a costly order
    /// and a GFP that may block.
    #[inline]
    fn compacts_directly(&self, gfp: crate::gfp::Gfp, order: Order) -> bool {
        order.0 > PAGE_ALLOC_COSTLY_ORDER && gfp.contains(crate::gfp::Gfp::DIRECT_RECLAIM)
    }

    /// `__alloc_pages_direct_compact()`: compacts the zones in `zones` (the
    /// request's zonelist, filtered) that are neither deferred nor unsuitable, each
    /// followed by an allocation attempt `retry`. Counts a stall if any zone was
    /// compacted, then a success or a failure.
    #[cold]
    fn compact_for<'a>(
        &'a self,
        zones: impl Iterator<Item = &'a Zone>,
        highest: ZoneType,
        order: Order,
        cma: bool,
        mut retry: impl FnMut() -> Option<Pfn>,
    ) -> Option<Pfn> {
        let m = self.migrator()?;
        let c = &self.compact.counters;
        let mut stalled = false;
        for z in zones {
            let Some(mut st) = self.compact.zones[z.index].try_lock() else {
                continue;
            };
            if compaction_deferred(&mut st, order) || !self.compaction_suitable(z, order, highest) {
                continue;
            }
            if !stalled {
                stalled = true;
                c.stall.inc(1);
            }
            // First from where the last run stopped, passing over hinted blocks;
            // if the scanners meet without a block, once more over the whole zone
            // at the highest priority (Linux's escalation).
            for prio in [Prio::Async, Prio::SyncFull] {
                let full = prio == Prio::SyncFull;
                let r = self.compact_zone_locked(z, &mut st, Some(order), cma, None, prio, &*m);
                let got = retry();
                if r.owner_panics > 0 && got.is_none() {
                    // The owner is in trouble: call it no more for this request.
                    c.fail.inc(1);
                    return None;
                }
                if got.is_some() {
                    compaction_defer_reset(&mut st, order, true);
                    c.success.inc(1);
                    return got;
                }
                if r.result != Some(CompactResult::Complete) {
                    break;
                }
                if full {
                    defer_compaction(&mut st, order);
                }
            }
        }
        if stalled {
            c.fail.inc(1);
        }
        None
    }
}

/// How hard a run tries (`enum compact_priority`, and the explicit runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prio {
    /// Direct compaction's first try: from the cached scanner positions, hinted
    /// pageblocks passed over, targets in movable pageblocks only.
    Async,
    /// Explicit and proactive runs (`compact_node`): the whole zone from its
    /// edges, hints ignored, targets in movable pageblocks only.
    Whole,
    /// Direct compaction's last try (`MIN_COMPACT_PRIORITY`): as `Whole`, with
    /// targets in any ordinary pageblock (`ignore_block_suitable`), going on past
    /// the scanners' meeting point and past a pageblock it cannot empty (see the
    /// module documentation).
    SyncFull,
}

/// One run's control block (`struct compact_control`).
struct Control<'m> {
    /// Order asked for; `None`: compact the whole zone.
    order: Option<Order>,
    /// The request may take CMA pages (Linux: `cc->migratetype` is movable and
    /// `ALLOC_CMA` set), so a free CMA block of the order is a success.
    cma: bool,
    /// Proactive: stop when the zone's score reaches the low watermark.
    proactive_low: Option<u64>,
    /// Look at hinted pageblocks too.
    ignore_skip: bool,
    /// Take targets in any ordinary pageblock, not only movable ones.
    ignore_block_suitable: bool,
    /// Blocks isolated by the migration scanner: the next pageblock it looks at.
    migrate_pfn: u64,
    /// The next pageblock the free scanner looks at (going down).
    free_pfn: u64,
    /// The free scanner has met the migration scanner (or the zone's start).
    free_done: bool,
    /// After the scanners meet, go on: targets from the zone's start upward,
    /// strictly below the block being emptied; and go on past a pageblock one of
    /// whose blocks finds no target (`Prio::SyncFull`).
    wrap: bool,
    /// Wrapped: the next pageblock to take targets from, going up.
    low_free: Option<u64>,
    /// Private free blocks (`Frozen` heads): migration targets.
    targets: Targets,
    migrator: &'m dyn Migrate,
    report: CompactReport,
}

impl<B: Backend> ZoneAllocator<B> {
    // -------------------------------------------------------------------------
    // Registration and tunables
    // -------------------------------------------------------------------------

    /// Registers the owner of movable memory that direct and proactive compaction
    /// move blocks through (`None` turns direct compaction off). See `Migrate`.
    pub fn set_migrator(&self, m: Option<Arc<dyn Migrate>>) {
        *self.compact.migrator.lock() = m;
    }

    pub(crate) fn migrator(&self) -> Option<Arc<dyn Migrate>> {
        self.compact.migrator.lock().clone()
    }

    /// Sets `extfrag_threshold` (0..=1000, default 500): above
    /// `PAGE_ALLOC_COSTLY_ORDER`, a zone whose fragmentation index for the order is
    /// at or below it is not compacted (its failure is a lack of memory).
    ///
    /// # Errors
    /// `OutOfRange` above 1000; nothing changes then.
    pub fn set_extfrag_threshold(&self, v: u32) -> Result<(), CompactError> {
        if v > EXTFRAG_THRESHOLD_MAX {
            return Err(CompactError::OutOfRange(v));
        }
        self.compact.extfrag_threshold.store(v, Ordering::Relaxed);
        Ok(())
    }

    /// `extfrag_threshold` in force.
    pub fn extfrag_threshold(&self) -> u32 {
        self.compact.extfrag_threshold.load(Ordering::Relaxed)
    }

    /// Sets `compaction_proactiveness` (0..=100, default 20; 0 turns proactive
    /// compaction off).
    ///
    /// # Errors
    /// `OutOfRange` above 100; nothing changes then.
    pub fn set_compaction_proactiveness(&self, v: u32) -> Result<(), CompactError> {
        if v > 100 {
            return Err(CompactError::OutOfRange(v));
        }
        self.compact.proactiveness.store(v, Ordering::Relaxed);
        Ok(())
    }

    /// `compaction_proactiveness` in force.
    pub fn compaction_proactiveness(&self) -> u32 {
        self.compact.proactiveness.load(Ordering::Relaxed)
    }

    /// The compaction counters (also printed by `vmstat`).
    pub fn compaction_stats(&self) -> CompactStats {
        let c = &self.compact.counters;
        CompactStats {
            compact_migrate_scanned: c.migrate_scanned.get(),
            compact_free_scanned: c.free_scanned.get(),
            compact_isolated: c.isolated.get(),
            compact_stall: c.stall.get(),
            compact_fail: c.fail.get(),
            compact_success: c.success.get(),
            pgmigrate_success: c.migrated.get(),
            pgmigrate_fail: c.refused.get(),
        }
    }

    // -------------------------------------------------------------------------
    // Public entry points
    // -------------------------------------------------------------------------

    /// `compact_zone()`: compacts zone `id` through `m` until a free block of
    /// `order` exists, or over the whole zone (`None`) until the scanners meet.
    /// Explicit calls scan the whole zone from its edges with the skip hints
    /// ignored, and ignore deferral and suitability (as a write to
    /// `/proc/sys/vm/compact_memory` does); they wait for another thread's run,
    /// except from inside a migration callback (see `Reentered`).
    ///
    /// # Errors
    /// `NoZone`, `InvalidOrder`, `Reentered`; nothing changes then.
    /// `OwnerPanicked` if `m` panicked: the block it was moving stays where it
    /// was and the run stops, every frame accounted for (blocks moved before the
    /// panic stay moved).
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, Gfp, MigrateOutcome, Migrate, Order, Pfn, ZoneAllocator};
    /// /// An owner that never lets its blocks move.
    /// struct Pinned;
    /// impl Migrate for Pinned {
    ///     fn relocate(&self, _: Pfn, _: Pfn, _: Order) -> MigrateOutcome {
    ///         MigrateOutcome::Refused
    ///     }
    /// }
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let p = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(0)).unwrap();
    /// let zone = za.zone_id_of(p).unwrap();
    /// let r = za.compact_zone(zone, None, &Pinned).unwrap();
    /// assert_eq!(r.pages_moved, 0);
    /// za.free_pages(p, Order(0)).unwrap();
    /// ```
    pub fn compact_zone(
        &self,
        id: ZoneId,
        order: Option<Order>,
        m: &dyn Migrate,
    ) -> Result<CompactReport, CompactError> {
        if let Some(o) = order.filter(|&o| o > self.config.max_order) {
            return Err(CompactError::InvalidOrder(o));
        }
        let z = self
            .zones
            .iter()
            .find(|z| z.id == id && z.present > 0)
            .ok_or(CompactError::NoZone)?;
        let lock = &self.compact.zones[z.index];
        let mut st = match lock.try_lock() {
            Some(st) => st,
            None if InCallback::may_wait(self.compact_key(), &self.compact.callbacks) => {
                lock.lock()
            }
            None => return Err(CompactError::Reentered),
        };
        let r = self.compact_zone_locked(z, &mut st, order, false, None, Prio::Whole, m);
        if r.owner_panics > 0 {
            return Err(CompactError::OwnerPanicked);
        }
        Ok(r)
    }

    /// `compact_node()`: `compact_zone` on every populated zone of node `nid`.
    ///
    /// # Errors
    /// `NoZone` for a node that does not exist; `InvalidOrder`; the first zone's
    /// `Reentered` or `OwnerPanicked` (see `compact_zone`), which stops it.
    pub fn compact_node(
        &self,
        nid: u16,
        order: Option<Order>,
        m: &dyn Migrate,
    ) -> Result<CompactReport, CompactError> {
        if nid as usize >= self.config.nodes.len() {
            return Err(CompactError::NoZone);
        }
        let mut total = CompactReport::default();
        for z in self
            .zones
            .iter()
            .filter(|z| z.id.node == nid && z.present > 0)
        {
            total.add(&self.compact_zone(z.id, order, m)?);
        }
        Ok(total)
    }

    /// `fragmentation_score_node()`: node `nid`'s fragmentation score, 0..=100: each
    /// zone's share of free memory not in pageblock-order blocks, weighted by the
    /// zone's size. `None` for a node that does not exist.
    pub fn fragmentation_score(&self, nid: u16) -> Option<u64> {
        if nid as usize >= self.config.nodes.len() {
            return None;
        }
        let node_present: u64 = self.node_zones_of(nid).map(|z| z.present).sum();
        Some(
            self.node_zones_of(nid)
                .map(|z| zone_score(z) * z.present / node_present.max(1))
                .sum(),
        )
    }

    /// Proactive compaction (kcompactd's `proactive_compact_node`): if node `nid`'s
    /// fragmentation score is above the high watermark that
    /// `compaction_proactiveness` sets, compacts its zones through the registered
    /// migrator until each zone's score falls to the low watermark or its scanners
    /// meet. Returns `None` when there was nothing to do (score low enough,
    /// proactiveness 0, no migrator, no such node). For a background thread.
    pub fn proactive_compact_node(&self, nid: u16) -> Option<CompactReport> {
        let p = u64::from(self.compaction_proactiveness());
        if p == 0 {
            return None;
        }
        let low = 100u64.saturating_sub(p).max(5);
        let high = (low + 10).min(100);
        if self.fragmentation_score(nid)? <= high {
            return None;
        }
        let m = self.migrator()?;
        let mut total = CompactReport::default();
        for z in self.node_zones_of(nid) {
            let Some(mut st) = self.compact.zones[z.index].try_lock() else {
                continue;
            };
            total.add(&self.compact_zone_locked(
                z,
                &mut st,
                None,
                false,
                Some(low),
                Prio::Whole,
                &*m,
            ));
        }
        Some(total)
    }

    fn node_zones_of(&self, nid: u16) -> impl Iterator<Item = &Zone> {
        self.zones
            .iter()
            .filter(move |z| z.id.node == nid && z.present > 0)
    }

    // -------------------------------------------------------------------------
    // Direct compaction
    // -------------------------------------------------------------------------

    /// `compaction_suitable()`: enough free memory to compact into (low watermark
    /// plus twice the block), and above `PAGE_ALLOC_COSTLY_ORDER` a fragmentation
    /// index above `extfrag_threshold` (or -1000: a suitable block exists already).
    ///
    /// Free pages of highatomic pageblocks are not counted: Linux's check is an
    /// order-0 watermark test with `ALLOC_CMA` and no reserve flag, which leaves
    /// them out, and no migration target is taken from them
    /// (`suitable_migration_target`).
    pub(crate) fn compaction_suitable(&self, z: &Zone, order: Order, highest: ZoneType) -> bool {
        let gap = 2 * order.nr_pages();
        let reserve = z.lowmem_reserve[highest.idx()].load(Ordering::Relaxed);
        let free = z
            .nr_free_pages()
            .saturating_sub(z.counters.nr_free_highatomic.get());
        if free <= z.wmark(Wmark::Low) + gap + reserve {
            return false;
        }
        if order.0 > PAGE_ALLOC_COSTLY_ORDER {
            let free = zone_free_blocks(z);
            let idx = fragmentation_index(&free[..=z.max_order.idx()], order.idx());
            if (0..=i64::from(self.extfrag_threshold())).contains(&idx) {
                return false;
            }
        }
        true
    }

    // -------------------------------------------------------------------------
    // The run
    // -------------------------------------------------------------------------

    /// `compact_zone()` with the zone's compaction lock held, at priority `prio`.
    /// `cma`: the run is for a request that may take CMA pages (a free CMA block
    /// of the order then ends it).
    #[allow(clippy::too_many_arguments)]
    fn compact_zone_locked(
        &self,
        z: &Zone,
        st: &mut ZoneCompact,
        order: Option<Order>,
        cma: bool,
        proactive_low: Option<u64>,
        prio: Prio,
        m: &dyn Migrate,
    ) -> CompactReport {
        let full = prio != Prio::Async;
        let pb_nr = z.pageblock_order.nr_pages();
        if st.blockskip_flush {
            st.skip.iter_mut().for_each(|s| *s = false);
            st.blockskip_flush = false;
        }
        let first = z.start_pfn & !(pb_nr - 1);
        if st.migrate_pfn < first || st.migrate_pfn >= z.end_pfn() {
            st.migrate_pfn = first;
        }
        if st.free_pfn < first || st.free_pfn > last_block(z) {
            st.free_pfn = last_block(z);
        }
        let (migrate_pfn, free_pfn) = if full {
            (first, last_block(z))
        } else {
            (st.migrate_pfn, st.free_pfn)
        };
        let mut cc = Control {
            order,
            cma,
            proactive_low,
            ignore_skip: full,
            ignore_block_suitable: prio == Prio::SyncFull,
            migrate_pfn,
            free_pfn,
            free_done: false,
            wrap: prio == Prio::SyncFull,
            low_free: None,
            targets: Targets::new(),
            migrator: m,
            report: CompactReport::default(),
        };
        // Blocks parked on per-CPU lists cannot merge: flush them first.
        self.drain_zone(z);
        let result = loop {
            if let Some(r) = self.compact_finished(z, &cc) {
                break r;
            }
            let blk = cc.migrate_pfn;
            if blk >= z.end_pfn() {
                break CompactResult::Complete;
            }
            if cc.low_free.is_none() && (cc.free_done || blk > cc.free_pfn) {
                if !cc.wrap {
                    break CompactResult::Complete;
                }
                // The scanners met: go on, taking targets below (see
                // `isolate_freepages`).
                cc.free_done = true;
                cc.low_free = Some(first);
            }
            cc.migrate_pfn = blk + pb_nr;
            let bi = z.blocks.index(Pfn(blk));
            if st.skip[bi] && !cc.ignore_skip {
                continue;
            }
            if cc.low_free.is_some() {
                // Wrapped: targets in this pageblock or above would keep it
                // occupied or be moved again later; give them back.
                cc.targets.release(z, |p| p.0 >= blk);
            }
            // The pageblock's movable blocks, a batch at a time: isolated, then
            // moved, then the next batch from where the scanner stopped.
            let mut resume = None;
            let mut isolated_any = false;
            let go_on = loop {
                let mut sources = Batch::new();
                resume = self.isolate_migratepages_block(z, blk, &mut cc, resume, &mut sources);
                if sources.len() > 0 {
                    isolated_any = true;
                    match self.migrate_sources(z, st, &mut cc, sources.as_slice()) {
                        Moved::All => {}
                        // The rest of the pageblock stays where it is (see
                        // `migrate_sources`).
                        Moved::NoTarget => break cc.wrap,
                        Moved::Panicked => break false,
                    }
                }
                if resume.is_none() {
                    break true;
                }
            };
            if !isolated_any {
                st.skip[bi] = true;
                continue;
            }
            if !go_on {
                break CompactResult::Complete;
            }
        };
        // Unused targets go back to the buddy lists.
        cc.targets.release(z, |_| true);
        if result == CompactResult::Complete || cc.low_free.is_some() {
            // A completed or wrapped run leaves nothing to resume.
            st.migrate_pfn = first;
            st.free_pfn = last_block(z);
            st.blockskip_flush |= result == CompactResult::Complete;
        } else {
            st.migrate_pfn = cc.migrate_pfn;
            st.free_pfn = cc.free_pfn;
        }
        cc.report.result = Some(result);
        let c = &self.compact.counters;
        c.migrate_scanned.inc(cc.report.migrate_scanned);
        c.free_scanned.inc(cc.report.free_scanned);
        c.isolated.inc(cc.report.isolated);
        c.migrated.inc(cc.report.pages_moved);
        c.refused.inc(cc.report.pages_refused);
        cc.report
    }

    /// Flushes every CPU's per-CPU lists of zone `z` into its buddy lists.
    fn drain_zone(&self, z: &Zone) {
        for cpu in 0..z.pcp.len() {
            z.pcp_lock(cpu).drain(self.config.pcp.prefetch_buddy);
        }
    }

    /// `__compact_finished()`: `Some` when the run should stop.
    fn compact_finished(&self, z: &Zone, cc: &Control<'_>) -> Option<CompactResult> {
        if let Some(low) = cc.proactive_low {
            return (zone_score(z) <= low).then_some(CompactResult::Success);
        }
        let order = cc.order?;
        let c = &z.counters.nr_free;
        let pb = z.pageblock_order;
        for o in order.idx()..=z.max_order.idx() {
            if c[o][Migratetype::Movable.idx()].get() > 0 {
                return Some(CompactResult::Success);
            }
            // A movable request may take a free CMA block too; no other may.
            if cc.cma && c[o][Migratetype::Cma.idx()].get() > 0 {
                return Some(CompactResult::Success);
            }
            // A whole free pageblock of another ordinary type can be claimed.
            if o >= pb.idx() && (0..MIGRATE_PCPTYPES).any(|mt| c[o][mt].get() > 0) {
                return Some(CompactResult::Success);
            }
        }
        None
    }

    /// `isolate_migratepages_block()`: isolates the movable blocks of the pageblock
    /// at `blk` that are worth moving: for an order `o`, those in aligned `2^o`
    /// chunks (at most a pageblock) holding nothing immovable. Adds them to `out`
    /// until it is full, and then returns where to go on (`from` for the next
    /// call); `None` once the pageblock is done.
    ///
    /// Each chunk is looked at twice: first whole, for anything immovable (which
    /// leaves it alone), then block by block, isolating, so that a full batch can
    /// stop inside a chunk and the next call go on there with no list of the
    /// chunk's blocks kept in between. A batch is moved before the next is
    /// isolated; a pageblock that yields none gets its skip hint from the caller.
    fn isolate_migratepages_block(
        &self,
        z: &Zone,
        blk: u64,
        cc: &mut Control<'_>,
        from: Option<Resume>,
        out: &mut Batch,
    ) -> Option<Resume> {
        let pb = z.pageblock_order;
        let lo = blk.max(z.start_pfn);
        let hi = (blk + pb.nr_pages()).min(z.end_pfn());
        if z.blocks.migratetype(Pfn(lo)) == Migratetype::Isolate {
            return None;
        }
        let chunk = cc.order.map_or(1, |o| o.min(pb).nr_pages());
        let (mut c, mut resume_at) = match from {
            Some(r) => (r.chunk, Some(r.at)),
            None => (lo & !(chunk - 1), None),
        };
        while c < hi {
            let (cs, ce) = (c.max(lo), (c + chunk).min(hi));
            let first = match resume_at.take() {
                // Looked at whole already, and found movable.
                Some(at) => at,
                None => {
                    // First look: is anything in the chunk immovable?
                    let pinned = self.chunk_pinned(z, cs, ce, cc);
                    if pinned && cc.order.is_some() {
                        c += chunk;
                        continue;
                    }
                    cs
                }
            };
            // Second look: isolate the movable blocks.
            let mut p = first;
            while p < ce {
                if out.len() == COMPACT_CLUSTER_MAX {
                    return Some(Resume { chunk: c, at: p });
                }
                let w = z.frames.word(z.idx(Pfn(p)));
                if w.tag() == Tag::Alloc && is_movable_candidate(w) && w.order() < pb {
                    if let Some(o) = self.isolate_movable(z, Pfn(p)) {
                        cc.report.isolated += o.nr_pages();
                        out.push((Pfn(p), o));
                        p += o.nr_pages();
                        continue;
                    }
                }
                p += match w.tag() {
                    Tag::Tail => 1,
                    _ => w.order().nr_pages().max(1),
                };
            }
            c += chunk;
        }
        None
    }

    /// The migration scanner's first look at chunk `[cs, ce)`: whether anything
    /// in it cannot move (with an order asked for, it stops at the first such
    /// block). Lazily split movable blocks get their pages' words on the way, to
    /// move page by page. Counts the frames looked at.
    fn chunk_pinned(&self, z: &Zone, cs: u64, ce: u64, cc: &mut Control<'_>) -> bool {
        let pb = z.pageblock_order;
        let mut pinned = false;
        let mut p = cs;
        while p < ce {
            let w = z.frames.word(z.idx(Pfn(p)));
            // A lazily split block's pages move one by one: give them their
            // words, and look at the head again.
            if w.is_lazy() && is_movable_candidate(w) {
                Self::materialize(z, Pfn(p), w);
                continue;
            }
            let step = match w.tag() {
                Tag::Buddy | Tag::Pcp | Tag::Frozen => w.order().nr_pages(),
                Tag::Alloc if is_movable_candidate(w) && w.order() < pb => w.order().nr_pages(),
                Tag::Tail => 1,
                // Bad frames, blocks of other owners (guards, page_frag, not
                // movable) and blocks a `LocalCache` holds: none can move.
                _ => {
                    pinned = true;
                    w.order().nr_pages()
                }
            };
            p += step.max(1);
            if pinned && cc.order.is_some() {
                break;
            }
        }
        cc.report.migrate_scanned += p.min(ce) - cs;
        pinned
    }

    /// Moves each isolated source into a target of its order, taking more targets
    /// with the free scanner as needed. When a source finds no target, the rest are
    /// put back (`NoTarget`: the run ends, unless it may wrap, which goes on with
    /// the next pageblock); when the owner panics, too (`Panicked`: the run ends).
    fn migrate_sources(
        &self,
        z: &Zone,
        st: &mut ZoneCompact,
        cc: &mut Control<'_>,
        sources: &[(Pfn, Order)],
    ) -> Moved {
        for (i, &(src, order)) in sources.iter().enumerate() {
            let target = loop {
                if let Some(t) = cc.targets.take(z, order) {
                    break Some(t);
                }
                if !self.isolate_freepages(z, st, cc) {
                    break None;
                }
            };
            let Some(dst) = target else {
                for &(p, _) in &sources[i..] {
                    self.putback_movable(z, p);
                }
                // A run that may wrap has no targets left below this pageblock,
                // which therefore cannot be emptied; the next one may still be
                // (its own sources may be smaller, and the pageblock passed now
                // becomes a place for targets). Other runs end: their scanners met.
                return Moved::NoTarget;
            };
            let nr = order.nr_pages();
            match self.migrate_isolated(z, src, dst, order, cc.migrator) {
                Step::Moved => {
                    cc.report.pages_moved += nr;
                    cc.report.blocks_moved += 1;
                }
                Step::Refused => {
                    cc.report.pages_refused += nr;
                    cc.targets.push(z, dst, order);
                    st.skip[z.blocks.index(src)] = true;
                }
                Step::Freed => {
                    cc.report.pages_freed += nr;
                    cc.targets.push(z, dst, order);
                }
                Step::Panicked => {
                    // Call the owner no more in this run: put the rest back.
                    cc.report.owner_panics += 1;
                    cc.targets.push(z, dst, order);
                    for &(p, _) in &sources[i + 1..] {
                        self.putback_movable(z, p);
                    }
                    return Moved::Panicked;
                }
            }
        }
        Moved::All
    }

    /// `isolate_freepages()`: scans pageblocks down from the free scanner's position
    /// until one yields free blocks below pageblock order, and takes them. `false`
    /// if the scanners met first. A run that may wrap (`Prio::SyncFull`) then goes
    /// on upward from the zone's start, strictly below the pageblock being emptied:
    /// the blocks the migration scanner passed, whose holes (pageblocks it could
    /// not empty) Linux's scanners never reach.
    fn isolate_freepages(&self, z: &Zone, st: &mut ZoneCompact, cc: &mut Control<'_>) -> bool {
        let pb_nr = z.pageblock_order.nr_pages();
        let first = z.start_pfn & !(pb_nr - 1);
        loop {
            let blk = if let Some(low) = cc.low_free {
                let source = cc.migrate_pfn.saturating_sub(pb_nr);
                if low >= source {
                    return false;
                }
                cc.low_free = Some(low + pb_nr);
                low
            } else {
                let blk = cc.free_pfn;
                // The free scanner stays strictly above the migration scanner's blocks.
                if cc.free_done || blk < cc.migrate_pfn {
                    cc.free_done = true;
                    if cc.wrap {
                        cc.low_free = Some(first);
                        continue;
                    }
                    return false;
                }
                match blk.checked_sub(pb_nr) {
                    Some(b) if b >= first => cc.free_pfn = b,
                    _ => cc.free_done = true,
                }
                blk
            };
            if self.isolate_freepages_block(z, st, cc, blk) {
                return true;
            }
        }
    }

    /// `isolate_freepages_block()`: takes the free blocks below pageblock order of
    /// the pageblock at `blk` as targets (each checked again under the zone lock, and
    /// only while the zone stays above its min watermark). Whether it took any.
    fn isolate_freepages_block(
        &self,
        z: &Zone,
        st: &mut ZoneCompact,
        cc: &mut Control<'_>,
        blk: u64,
    ) -> bool {
        let pb = z.pageblock_order;
        let lo = blk.max(z.start_pfn);
        let hi = (blk + pb.nr_pages()).min(z.end_pfn());
        let bi = z.blocks.index(Pfn(lo));
        if st.skip[bi] && !cc.ignore_skip {
            return false;
        }
        let mt = z.blocks.migratetype(Pfn(lo));
        if !suitable_migration_target(z, mt, cc.ignore_block_suitable) {
            st.skip[bi] = true;
            return false;
        }
        // Free blocks found without the lock, a batch at a time, each batch
        // checked again and taken under one zone-lock hold.
        let mut taken = 0;
        let mut p = lo;
        while p < hi {
            let mut found = Batch::new();
            while p < hi && found.len() < COMPACT_CLUSTER_MAX {
                let w = z.frames.word(z.idx(Pfn(p)));
                match w.tag() {
                    Tag::Buddy | Tag::Pcp | Tag::Frozen | Tag::Alloc | Tag::Cached => {
                        if w.tag() == Tag::Buddy && w.order() < pb {
                            found.push((Pfn(p), w.order()));
                        }
                        p += w.order().nr_pages();
                    }
                    _ => p += 1,
                }
            }
            if found.len() > 0 {
                taken += self.take_free_targets(z, cc, found.as_slice());
            }
        }
        cc.report.free_scanned += hi - lo;
        cc.report.isolated += taken;
        if taken == 0 {
            st.skip[bi] = true;
        }
        taken > 0
    }

    /// Takes the free blocks `found` (seen without the lock) as targets, each
    /// checked again under the zone lock, and only while the zone stays above
    /// its min watermark. Returns the pages taken.
    fn take_free_targets(&self, z: &Zone, cc: &mut Control<'_>, found: &[(Pfn, Order)]) -> u64 {
        let mut zl = z.lock();
        let min = z.wmark(Wmark::Min);
        let mut d = FreeDelta::default();
        let mut taken = 0;
        for &(p, o) in found {
            let mt = z.blocks.migratetype(p);
            // The counter is stored once, at the end: subtract what this hold
            // took so far.
            let free_now = z.nr_free_pages().saturating_sub(taken);
            if !suitable_migration_target(z, mt, cc.ignore_block_suitable)
                || z.frames.word(z.idx(p)) != Word::buddy(o)
                || free_now < min + o.nr_pages()
            {
                continue;
            }
            zl.del_from_free_list(p, o, mt);
            d = d.with(-(o.nr_pages() as i64), mt);
            z.frames.set_word(z.idx(p), Word::frozen(o));
            cc.targets.push(z, p, o);
            taken += o.nr_pages();
        }
        d.apply(&zl);
        taken
    }
}

/// Where the migration scanner stopped inside a pageblock when its batch filled
/// (see `isolate_migratepages_block`): the chunk it was isolating, found free of
/// anything immovable, and the frame to look at next.
#[derive(Clone, Copy)]
struct Resume {
    chunk: u64,
    at: u64,
}

/// How a batch of sources went (`migrate_sources`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Moved {
    /// Each source was moved, refused or freed.
    All,
    /// A source found no target; it and the rest were put back.
    NoTarget,
    /// The owner panicked; the rest were put back.
    Panicked,
}

/// A run's private free blocks (`Frozen` heads), by order: Linux's
/// `cc->freepages[order]`. Each list runs through its heads' own list links,
/// which a private block uses for nothing else (no allocator list holds it), so
/// a run keeps any number of targets without the heap. Only the run's thread
/// touches them.
struct Targets {
    lists: [FrameList; NR_ORDERS_MAX],
}

impl Targets {
    fn new() -> Targets {
        Targets {
            lists: [FrameList::EMPTY; NR_ORDERS_MAX],
        }
    }

    /// Adds the private block `(p, o)`.
    fn push(&mut self, z: &Zone, p: Pfn, o: Order) {
        self.lists[o.idx()].push_tail(&z.frames, z.idx(p));
    }

    /// Takes a target of `order`: the oldest of the smallest order that has one,
    /// split if larger; the split-off parts become targets of their own.
    fn take(&mut self, z: &Zone, order: Order) -> Option<Pfn> {
        let o = (order.idx()..NR_ORDERS_MAX).find(|&o| !self.lists[o].is_empty())?;
        let idx = self.lists[o].head;
        self.lists[o].unlink(&z.frames, idx);
        let p = z.pfn_of(idx);
        for k in order.0..o as u8 {
            let part = p.add(1 << k);
            z.frames.set_word(z.idx(part), Word::frozen(Order(k)));
            self.push(z, part, Order(k));
        }
        z.frames.set_word(idx, Word::frozen(order));
        Some(p)
    }

    /// Gives the targets that `which` selects back to the buddy lists, under one
    /// zone-lock hold (none taken if none is selected).
    fn release(&mut self, z: &Zone, which: impl Fn(Pfn) -> bool) {
        let t = &z.frames;
        let any = self
            .lists
            .iter()
            .any(|l| l.iter(t).any(|i| which(z.pfn_of(i))));
        if !any {
            return;
        }
        let mut zl = z.lock();
        for (o, l) in self.lists.iter_mut().enumerate() {
            let mut cur = l.head;
            while cur != NIL {
                // The link is read before the block goes to the buddy lists.
                let next = t.next(cur);
                let p = z.pfn_of(cur);
                if which(p) {
                    l.unlink(t, cur);
                    zl.free_block_locked(p, Order(o as u8), false);
                }
                cur = next;
            }
        }
    }
}

/// `suitable_migration_target()`: free blocks of movable pageblocks (CMA ones
/// included: `is_migrate_movable()`), so that movable pages stay grouped; never
/// isolated or highatomic ones. At the highest
/// priority (`ignore_block_suitable`), and in a zone without mobility grouping
/// (where every allocation may retype a block), any ordinary type.
fn suitable_migration_target(z: &Zone, mt: Migratetype, ignore_block_suitable: bool) -> bool {
    mt.is_movable() || ((ignore_block_suitable || z.mobility_disabled) && mt.is_mergeable())
}

/// Free blocks per order of the zone, all ordinary types together: the first
/// `max_order + 1` entries.
fn zone_free_blocks(z: &Zone) -> [u64; NR_ORDERS_MAX] {
    let c = &z.counters.nr_free;
    let mut v = [0; NR_ORDERS_MAX];
    for (o, n) in v.iter_mut().enumerate().take(z.max_order.idx() + 1) {
        *n = (0..MIGRATE_PCPTYPES).map(|mt| c[o][mt].get()).sum();
    }
    v
}

/// `fragmentation_score_zone()` before weighting: `extfrag_for_order()` at
/// pageblock order, the share (0..=100) of free memory outside pageblock-order
/// blocks.
fn zone_score(z: &Zone) -> u64 {
    let blocks = zone_free_blocks(z);
    let (free, _, suitable) =
        contig_page_info(&blocks[..=z.max_order.idx()], z.pageblock_order.idx());
    if free == 0 {
        return 0;
    }
    (free - (suitable << z.pageblock_order.0).min(free)) * 100 / free
}

/// `compaction_deferred()`: whether to skip the zone this time.
fn compaction_deferred(st: &mut ZoneCompact, order: Order) -> bool {
    if order.0 < st.order_failed {
        return false;
    }
    let limit = 1u32 << st.defer_shift;
    st.considered = st.considered.saturating_add(1);
    if st.considered >= limit {
        st.considered = limit;
        return false;
    }
    true
}

/// `defer_compaction()`: a run failed; back off.
fn defer_compaction(st: &mut ZoneCompact, order: Order) {
    st.considered = 0;
    st.defer_shift = (st.defer_shift + 1).min(COMPACT_MAX_DEFER_SHIFT);
    st.order_failed = st.order_failed.min(order.0);
}

/// `compaction_defer_reset()`: a run succeeded for `order`.
fn compaction_defer_reset(st: &mut ZoneCompact, order: Order, alloc_success: bool) {
    if alloc_success {
        st.considered = 0;
        st.defer_shift = 0;
    }
    if order.0 >= st.order_failed {
        st.order_failed = order.0 + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st() -> ZoneCompact {
        ZoneCompact {
            migrate_pfn: 0,
            free_pfn: 0,
            skip: Box::new([]),
            blockskip_flush: false,
            considered: 0,
            defer_shift: 0,
            order_failed: u8::MAX,
        }
    }

    #[test]
    fn deferral_backs_off_twice_as_long_after_each_failure() {
        let mut s = st();
        let o = Order(9);
        assert!(!compaction_deferred(&mut s, o), "nothing failed yet");
        defer_compaction(&mut s, o);
        // Shift 1: one attempt skipped, then one allowed.
        assert!(compaction_deferred(&mut s, o));
        assert!(!compaction_deferred(&mut s, o));
        defer_compaction(&mut s, o);
        let skipped = (0..10)
            .take_while(|_| compaction_deferred(&mut s, o))
            .count();
        assert_eq!(skipped, 3, "shift 2: three skipped, the fourth allowed");
        // A lower order than the one that failed is never deferred.
        assert!(!compaction_deferred(&mut s, Order(4)));
        for _ in 0..20 {
            defer_compaction(&mut s, o);
        }
        assert_eq!(s.defer_shift, COMPACT_MAX_DEFER_SHIFT);
        compaction_defer_reset(&mut s, o, true);
        assert_eq!((s.defer_shift, s.considered), (0, 0));
        assert_eq!(s.order_failed, 10);
        assert!(!compaction_deferred(&mut s, o));
    }
}
