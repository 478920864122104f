//! The allocation path: `alloc_pages` and its passes over the zonelist.
//!
//! A path of `ZoneAllocator` (allocator layer, beside `free`, `drain` and `fast`).
//! It tries this CPU's stack first (`fast`), then walks the zonelist: this
//! CPU's list (`pcp`, under its try-lock) or the buddy lists (`buddy`, under the
//! zone lock for one operation). Callers hold no lock, and none is held across
//! zones. The slow path wakes kswapd, asks the shrinkers (`shrinker`) and
//! compacts through `DirectCompact`, the one call upward: `compaction`
//! implements it.
//!
//! # Allocation
//!
//! A fast pass walks the zonelist with the low watermark; a slow pass retries with
//! the min watermark and the reserves the request is entitled to (`__GFP_HIGH`,
//! non-blocking, `MEMALLOC`); then the highatomic reserves are released and a last
//! pass runs. Orders above `PAGE_ALLOC_COSTLY_ORDER` whose GFP may block compact
//! first, through the registered migrator (see `compaction`); a request that may
//! reclaim then asks the registered shrinkers for memory (direct reclaim, see
//! `shrinker`), and wakes kswapd (`reclaim`) on its way into the slow path. When
//! the last pass fails the request fails with `AllocError::NoMemory`.

use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::error::AllocError;
use crate::fault::FaultSite;
use crate::frame::{Tag, Word, FLAG_FRAG, FLAG_GUARDED, FLAG_LAZY, FLAG_VMALLOC};
use crate::gfp::{AllocFlags, Gfp};
use crate::pcp::pcp_allowed_order;
use crate::sync::Ordering;
use crate::types::Wmark;
use crate::types::{Migratetype, Order, Pfn, ZoneType};
use crate::zone::{Zone, ZONE_BELOW_HIGH, ZONE_BOOSTED_WATERMARK};

impl<B: Backend> ZoneAllocator<B> {
    /// Allocates a block of `2^order` frames, naturally aligned, with one reference.
    ///
    /// # Errors
    /// `InvalidOrder` above `max_order`; `NoMemory` if no eligible zone can serve it.
    #[inline]
    pub fn alloc_pages(&self, gfp: Gfp, order: Order) -> Result<Pfn, AllocError> {
        if let Some(p) = self.alloc_fast(gfp, order, Head::PLAIN) {
            return Ok(p);
        }
        self.alloc_pages_local(self.current_cpu(), gfp, order, Head::PLAIN)
    }

    /// `alloc_pages` of a block published as `head` (a vmalloc area's blocks come
    /// marked as its own): this CPU's stack first, as `alloc_pages`.
    pub(crate) fn alloc_pages_as(
        &self,
        gfp: Gfp,
        order: Order,
        head: Head,
    ) -> Result<Pfn, AllocError> {
        if let Some(p) = self.alloc_fast(gfp, order, head) {
            return Ok(p);
        }
        self.alloc_pages_local(self.current_cpu(), gfp, order, head)
    }

    /// As `alloc_pages`, using CPU `cpu`'s per-CPU lists (taken modulo `nr_cpus`).
    /// For simulated CPUs in tests and for callers that know their CPU.
    ///
    /// # Errors
    /// As `alloc_pages`.
    #[inline]
    pub fn alloc_pages_on(&self, cpu: usize, gfp: Gfp, order: Order) -> Result<Pfn, AllocError> {
        self.alloc_pages_local(self.cpu_index(cpu), gfp, order, Head::PLAIN)
    }

    /// `alloc_pages_nolock()`: an allocation from any context (an interrupt
    /// handler, a handler interrupting the allocator itself, code that may not
    /// wait) that never waits for a lock, never reclaims, compacts or drains,
    /// and fails instead. It pops this CPU's stack if it has a block, else tries
    /// this CPU's list and the zones of node `nid` (the calling CPU's when
    /// `None`), then the other nodes', by their locks' `try_lock` only, at the
    /// min watermark. Of `gfp` only the zone modifiers, the mobility and
    /// `ZERO` count: it never reclaims or wakes kswapd.
    ///
    /// # Errors
    /// `InvalidOrder` above `max_order`; `InvalidNode`; `NoMemory` when nothing
    /// could be had without waiting.
    pub fn alloc_pages_nolock(
        &self,
        gfp: Gfp,
        nid: Option<u16>,
        order: Order,
    ) -> Result<Pfn, AllocError> {
        if order > self.config.max_order {
            return Err(AllocError::InvalidOrder(order));
        }
        let gfp = Gfp::from_bits(
            gfp.bits()
                & (Gfp::DMA
                    | Gfp::DMA32
                    | Gfp::HIGHMEM
                    | Gfp::MOVABLE
                    | Gfp::RECLAIMABLE
                    | Gfp::ZERO)
                    .bits(),
        ) | Gfp::NOWARN
            | Gfp::NOMEMALLOC;
        let cpu = self.current_cpu();
        let nid = nid.unwrap_or_else(|| self.cpu_to_node(cpu));
        let (first, _) = self
            .preferred
            .get(nid as usize)
            .ok_or(AllocError::InvalidNode(nid))?[gfp.highest_zone().idx()]
        .ok_or(AllocError::NoEligibleZone)?;
        if self.fast_alloc.load(Ordering::Relaxed) {
            let z = &self.zones[first];
            if pcp_allowed_order(order, z.pageblock_order) {
                if let Ok(idx) = z
                    .stacks
                    .pop(crate::pcp::order_to_pindex(gfp.migratetype(), order))
                {
                    let pfn = z.pfn_of(idx);
                    self.prep_new_page(z, pfn, order, gfp, gfp.migratetype(), Head::PLAIN);
                    return Ok(pfn);
                }
            }
        }
        let req = Request {
            cpu,
            nid,
            gfp,
            order,
            highest: gfp.highest_zone(),
            mt: gfp.migratetype(),
            first,
            head: Head::PLAIN,
        };
        let flags = AllocFlags::checking(Wmark::Min).cma_for(gfp) | AllocFlags::TRYLOCK;
        self.get_page_from_freelist(&req, flags)
            .ok_or(AllocError::NoMemory { order })
    }

    /// `alloc_pages` for the holder of a `PinnedCpu` token: the token's CPU's
    /// pinned stacks first, with no lock and no atomic read-modify-write (see
    /// `stacks`), where the platform can stop them (`Platform::can_sync_cpu`);
    /// then that CPU's lists and the zones of its node, as `alloc_pages`.
    ///
    /// # Errors
    /// As `alloc_pages`.
    #[inline]
    pub fn alloc_pages_pinned(
        &self,
        pin: &crate::stacks::PinnedCpu,
        gfp: Gfp,
        order: Order,
    ) -> Result<Pfn, AllocError> {
        let cpu = self.cpu_index(pin.cpu());
        if self.pinned && order <= self.config.max_order && !self.debug.faults.armed() {
            let zi = if self.single_node {
                self.fast_zone[gfp.highest_zone().idx()]
            } else {
                self.preferred[usize::from(self.cpu_to_node(cpu))][gfp.highest_zone().idx()]
                    .and_then(|(zi, _)| u8::try_from(zi).ok())
                    .unwrap_or(u8::MAX)
            };
            if let Some(z) = self.zones.get(usize::from(zi)) {
                let on = crate::stacks::On::Pinned(cpu);
                if let Some(p) =
                    self.alloc_fast_in(z, gfp, gfp.migratetype(), order, Head::PLAIN, on)
                {
                    return Ok(p);
                }
            }
        }
        self.alloc_pages_local(cpu, gfp, order, Head::PLAIN)
    }

    /// Whether `alloc_pages_pinned` and `free_pages_pinned` have pinned stacks to
    /// use: the configuration's platform can stop them (`can_sync_cpu`), per-CPU
    /// lists are on, and no debug mode that touches pages is set.
    pub fn pinned_available(&self) -> bool {
        self.pinned
    }

    /// `alloc_pages_node_on` from CPU `cpu`'s node (`numa_node_id()`), as every
    /// call that names no node starts.
    #[inline]
    pub(crate) fn alloc_pages_local(
        &self,
        cpu: usize,
        gfp: Gfp,
        order: Order,
        head: Head,
    ) -> Result<Pfn, AllocError> {
        self.alloc_pages_node_on(cpu, self.cpu_to_node(cpu), gfp, order, head)
    }

    /// `alloc_pages_node()`: as `alloc_pages`, starting from node `nid`'s zonelist.
    ///
    /// # Errors
    /// As `alloc_pages`, and `InvalidNode` for a node that does not exist.
    pub fn alloc_pages_node(&self, nid: u16, gfp: Gfp, order: Order) -> Result<Pfn, AllocError> {
        self.alloc_pages_node_on(self.current_cpu(), nid, gfp, order, Head::PLAIN)
    }

    /// The allocation path: fast pass, slow pass, drain and unreserve, last pass.
    /// The block's head is published as `head` says (see `Head`).
    pub(crate) fn alloc_pages_node_on(
        &self,
        cpu: usize,
        nid: u16,
        gfp: Gfp,
        order: Order,
        head: Head,
    ) -> Result<Pfn, AllocError> {
        if self.debug.faults.should_fail(FaultSite::Alloc) {
            return Err(AllocError::NoMemory { order });
        }
        if order > self.config.max_order {
            return Err(AllocError::InvalidOrder(order));
        }
        let highest = gfp.highest_zone();
        let (first, nofragment) = self
            .preferred
            .get(nid as usize)
            .ok_or(AllocError::InvalidNode(nid))?[highest.idx()]
        .ok_or(AllocError::NoEligibleZone)?;
        let req = Request {
            cpu,
            nid,
            gfp,
            order,
            highest,
            mt: gfp.migratetype(),
            first,
            head,
        };
        let mut fast = AllocFlags::fast(gfp, order.0);
        if nofragment {
            fast = fast | AllocFlags::NOFRAGMENT;
        }
        if let Some(p) = self.get_page_from_freelist(&req, fast) {
            return Ok(p);
        }
        // Slow path: wake kswapd, then the min watermark and whatever reserves the
        // request may use.
        if gfp.contains(Gfp::KSWAPD_RECLAIM) {
            self.wake_kswapd(&req);
        }
        let slow = AllocFlags::slow(gfp, order.0);
        if let Some(p) = self.get_page_from_freelist(&req, slow) {
            return Ok(p);
        }
        // Costly orders that may block compact first (`DirectCompact`).
        if self.compacts_directly(gfp, order) {
            let zones = self.zonelist(nid).filter(|z| {
                z.zone_type() <= highest
                    && (!gfp.contains(Gfp::THISNODE) || z.id.node == nid)
                    && (!gfp.contains(Gfp::THISZONE) || z.index == first)
            });
            let retry = || self.get_page_from_freelist(&req, slow);
            let cma = req.mt == Migratetype::Movable;
            if let Some(p) = self.compact_for(zones, highest, order, cma, retry) {
                return Ok(p);
            }
        }
        // Direct reclaim: the shrinkers give back what they cache, a pass at a
        // time, while passes make progress (Linux's `should_reclaim_retry()`
        // gives up after 16 without any).
        if let Some(p) = self.reclaim_directly(&req, slow) {
            return Ok(p);
        }
        if gfp.contains(Gfp::NORETRY) {
            return Err(AllocError::NoMemory { order });
        }
        // What is left is memory parked on per-CPU lists and in highatomic
        // reserves (Linux's drain after failed direct reclaim).
        for force in [false, true] {
            let unreserved = self.unreserve_highatomic(&req, force);
            let drained = !force && self.drain_all_pages() > 0;
            if unreserved || drained {
                if let Some(p) = self.get_page_from_freelist(&req, slow) {
                    return Ok(p);
                }
            }
        }
        Err(AllocError::NoMemory { order })
    }

    /// `wake_all_kswapds()`: marks the request's node for kswapd when one of its
    /// eligible zones is below its high watermark (boost included; free CMA
    /// pages left out, as `pgdat_balanced()` leaves them).
    #[cold]
    fn wake_kswapd(&self, req: &Request) {
        let short = self.zonelist(req.nid).any(|z| {
            z.zone_type() <= req.highest
                && z.id.node == req.nid
                && z.present_now() > 0
                && z.nr_free_pages_no_cma() <= z.wmark(Wmark::High)
        });
        if short {
            self.reclaim.wake(req.nid);
        }
    }

    /// `__alloc_pages_direct_reclaim()`, retried: asks the shrinkers for memory
    /// (`shrink_slab`) from `DEF_PRIORITY` down, trying the allocation after each
    /// priority that freed something, and again, while passes free anything, at
    /// most `MAX_RECLAIM_RETRIES` times in a row. Linux stops a pass once the
    /// shrinkers say they freed `SWAP_CLUSTER_MAX` pages; judging by the
    /// allocation instead keeps a shrinker that claims what it did not free from
    /// ending the pass before the others are asked. Only for a request that may
    /// reclaim directly, not from inside a reclaim pass (a shrinker's own
    /// allocations), and only when shrinkers are registered.
    #[cold]
    fn reclaim_directly(&self, req: &Request, flags: AllocFlags) -> Option<Pfn> {
        const MAX_RECLAIM_RETRIES: u32 = 16;
        let r = &self.reclaim;
        if !req.gfp.contains(Gfp::DIRECT_RECLAIM)
            || !crate::hook::InReclaim::may_reclaim(&r.running)
            || r.shrinkers.is_empty()
        {
            return None;
        }
        let zone_type = self.zones[req.first].zone_type();
        r.allocstall[zone_type.idx()].inc(1);
        for _ in 0..MAX_RECLAIM_RETRIES {
            let mut freed = 0;
            for priority in (0..=crate::shrinker::DEF_PRIORITY).rev() {
                let s = {
                    let _g = crate::hook::InReclaim::enter(&r.running);
                    r.shrinkers
                        .shrink(req.gfp, req.nid, priority, self.node_managed(req.nid))
                };
                r.pgscan_direct.inc(s.scanned);
                r.pgsteal_direct.inc(s.freed);
                freed += s.freed;
                if s.freed == 0 {
                    continue;
                }
                if let Some(p) = self.get_page_from_freelist(req, flags) {
                    return Some(p);
                }
                // What was freed may sit on per-CPU lists and stacks (Linux
                // drains after a failed attempt that reclaimed something).
                if self.drain_all_pages() > 0 {
                    if let Some(p) = self.get_page_from_freelist(req, flags) {
                        return Some(p);
                    }
                }
            }
            if freed == 0 {
                return None;
            }
        }
        None
    }

    /// `get_page_from_freelist()`: one pass over the zonelist.
    fn get_page_from_freelist(&self, req: &Request, flags: AllocFlags) -> Option<Pfn> {
        let zonelist = &self.zonelists[req.nid as usize];
        for &zi in zonelist.iter() {
            let z = &self.zones[zi];
            if z.zone_type() > req.highest
                || (req.gfp.contains(Gfp::THISZONE) && zi != req.first)
                || (req.gfp.contains(Gfp::THISNODE) && z.id.node != req.nid)
            {
                continue;
            }
            // Below the high watermark, per-CPU lists shrink (see `pcp`); the test is
            // made here rather than on the hotter free path, as Linux does.
            let above_high = z.flags.load(Ordering::Relaxed) & ZONE_BELOW_HIGH == 0
                && (z.watermark_fast(req.order, z.wmark(Wmark::High), req.highest, flags) || {
                    z.flags.fetch_or(ZONE_BELOW_HIGH, Ordering::Relaxed);
                    false
                });
            if !above_high
                && !flags.has(AllocFlags::NO_WATERMARKS)
                && !z.watermark_fast(req.order, z.wmark(flags.wmark()), req.highest, flags)
            {
                z.events.wmark_fail.inc(1);
                // The watermark guards the zone's free pages; blocks already on this
                // CPU's list are not counted there, and handing them out takes
                // nothing from the zone. Without this, a refill that dips below the
                // mark would fail every later allocation into a drain of the very
                // blocks it took (a refill/drain ping-pong near the watermark).
                // Only when the free-page count is what failed (`short_of_pages`): a
                // high-order request short of its block goes on to the slow path,
                // whose drain gives the blocks parked on per-CPU lists back to merge
                // (whole free pageblocks kept on the THP list are out of the
                // fallback's reach, and unmovable fallbacks then steal pages inside
                // movable pageblocks).
                let mark = z.wmark(flags.wmark());
                if z.short_of_pages(req.order, mark, req.highest, flags) {
                    if let Some(p) = self.rmqueue_cached(z, req, flags) {
                        return Some(p);
                    }
                }
                continue;
            }
            if let Some(p) = self.rmqueue(z, req, flags) {
                return Some(p);
            }
        }
        if flags.has(AllocFlags::NOFRAGMENT) {
            return self.get_page_from_freelist(req, flags.without(AllocFlags::NOFRAGMENT));
        }
        None
    }

    /// `rmqueue()`: from this CPU's list where the order has one, else the buddy;
    /// a block that fails its debug checks is retired and another one taken.
    #[inline]
    fn rmqueue(&self, z: &Zone, req: &Request, flags: AllocFlags) -> Option<Pfn> {
        loop {
            let pfn = self
                .rmqueue_pcplist(z, req, flags, true)
                .or_else(|| self.rmqueue_buddy(z, req, flags))?;
            // A fallback boosted the watermarks: wake kswapd to reclaim and
            // compact (`ZONE_BOOSTED_WATERMARK`).
            if z.flags.load(Ordering::Relaxed) & ZONE_BOOSTED_WATERMARK != 0 {
                self.boosted(z, req.gfp);
            }
            if let Some(p) = self.prep_checked(z, req, pfn) {
                return Some(p);
            }
        }
    }

    /// Clears the zone's boost flag and wakes kswapd for its node, if the
    /// request may.
    #[cold]
    #[inline(never)]
    pub(crate) fn boosted(&self, z: &Zone, gfp: Gfp) {
        z.flags
            .fetch_and(!ZONE_BOOSTED_WATERMARK, Ordering::Relaxed);
        if gfp.contains(Gfp::KSWAPD_RECLAIM) {
            self.reclaim.wake(z.id.node);
        }
    }

    /// Only blocks already on this CPU's list, for a zone below its watermark (see
    /// `get_page_from_freelist`). Cold: kept out of the hot path's code.
    #[cold]
    #[inline(never)]
    fn rmqueue_cached(&self, z: &Zone, req: &Request, flags: AllocFlags) -> Option<Pfn> {
        loop {
            let pfn = self.rmqueue_pcplist(z, req, flags, false)?;
            if let Some(p) = self.prep_checked(z, req, pfn) {
                return Some(p);
            }
        }
    }

    /// The debug checks, then `prep_new_page`; `None` if the block was retired.
    #[inline]
    fn prep_checked(&self, z: &Zone, req: &Request, pfn: Pfn) -> Option<Pfn> {
        if !self.debug.alloc_check(&self.backend, z, pfn, req.order) {
            return None;
        }
        self.prep_new_page(z, pfn, req.order, req.gfp, req.mt, req.head);
        Some(pfn)
    }

    /// `rmqueue_pcplist()`: this CPU's list, if the order has one and its lock is
    /// free, refilled from the zone when empty if `refill`.
    #[inline]
    fn rmqueue_pcplist(
        &self,
        z: &Zone,
        req: &Request,
        flags: AllocFlags,
        refill: bool,
    ) -> Option<Pfn> {
        if !self.config.pcp.enabled || !pcp_allowed_order(req.order, z.pageblock_order) {
            return None;
        }
        z.pcp_trylock(req.cpu)?
            .rmqueue(req.order, req.mt, flags, &self.debug.faults, refill)
    }

    /// `rmqueue_buddy()`: a block from the buddy lists under the zone lock (if
    /// it is free now, for a `TRYLOCK` pass).
    fn rmqueue_buddy(&self, z: &Zone, req: &Request, flags: AllocFlags) -> Option<Pfn> {
        let mut zl = if flags.has(AllocFlags::TRYLOCK) {
            z.try_lock()?
        } else {
            z.lock()
        };
        let pfn = zl.rmqueue_one(req.order, req.mt, flags)?;
        drop(zl);
        z.events.pgalloc.inc(req.order.nr_pages());
        Some(pfn)
    }

    /// `prep_new_page()`: zero if asked, then publish the allocated state with the
    /// flags and references of `head`. A page_frag block's bias is stored in its bias
    /// slot first: the word's Release store publishes both, so a fragment free that
    /// sees `FLAG_FRAG` (with an Acquire load) also sees the bias beside it.
    #[inline]
    pub(crate) fn prep_new_page(
        &self,
        z: &Zone,
        pfn: Pfn,
        order: Order,
        gfp: Gfp,
        mt: Migratetype,
        head: Head,
    ) {
        if gfp.contains(Gfp::ZERO) {
            self.backend.zero_pages(pfn, order.nr_pages());
        }
        let idx = z.idx(pfn);
        if head.0.flags() & FLAG_FRAG != 0 {
            z.frames
                .bias_slot(idx)
                .store(head.0.refcount(), Ordering::Relaxed);
        }
        z.frames.set_word(idx, head.word(order, mt));
    }

    /// Releases one highatomic pageblock in the request's zones.
    fn unreserve_highatomic(&self, req: &Request, force: bool) -> bool {
        let mt = req.mt;
        self.zonelists[req.nid as usize]
            .iter()
            .map(|&zi| &self.zones[zi])
            .filter(|z| z.zone_type() <= req.highest)
            .any(|z| z.lock().unreserve_highatomic(mt, force))
    }
}

/// The allocation slow path's one call upward: direct compaction
/// (`__alloc_pages_direct_compact`). `compaction`, a layer above this one,
/// implements it for `ZoneAllocator`; the allocator names nothing of that layer
/// and keeps only its state (`compact_state`, below).
pub(crate) trait DirectCompact {
    /// Whether a request of `order` with `gfp` compacts before it fails: a costly
    /// order and a GFP that may block.
    fn compacts_directly(&self, gfp: Gfp, order: Order) -> bool;

    /// Compacts `zones` (the request's zonelist, filtered) in turn, each followed
    /// by the allocation attempt `retry`; the block `retry` got, if any. `cma`:
    /// the request may take pages of CMA pageblocks (a movable one).
    fn compact_for<'a>(
        &'a self,
        zones: impl Iterator<Item = &'a Zone>,
        highest: ZoneType,
        order: Order,
        cma: bool,
        retry: impl FnMut() -> Option<Pfn>,
    ) -> Option<Pfn>;
}

/// One allocation request, fixed for all of its passes.
struct Request {
    /// CPU whose lists to use.
    cpu: usize,
    nid: u16,
    gfp: Gfp,
    order: Order,
    highest: ZoneType,
    mt: Migratetype,
    /// The preferred zone: first eligible zone of the zonelist.
    first: usize,
    /// How the allocated head is published.
    head: Head,
}

/// The state an allocated block's head is published with: its flags and its
/// reference count, set by the one store that hands the block out. Kept as the
/// head word's bits (an allocated word of order 0 and migratetype 0), so that
/// publishing a block is one OR with its order and migratetype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head(Word);

impl Head {
    /// An ordinary block: no flag, one reference.
    pub(crate) const PLAIN: Head = Head::new(0, 1);
    /// A `PageBlock` guard's block (`FLAG_GUARDED`), one reference.
    pub(crate) const GUARDED: Head = Head::new(FLAG_GUARDED, 1);
    /// A vmalloc area's block (`FLAG_VMALLOC`), one reference.
    pub(crate) const VMALLOC: Head = Head::new(FLAG_VMALLOC, 1);

    /// A vmalloc area's block of `order`, split to order-0 pages from the start
    /// (lazily, `FLAG_LAZY`, for an order above 0): what `VMALLOC` and
    /// `split_page` would make of it, without the split's compare-and-swap.
    pub(crate) const fn vmalloc(order: Order) -> Head {
        if order.0 > 0 {
            Head::new(FLAG_VMALLOC | FLAG_LAZY, 1)
        } else {
            Head::VMALLOC
        }
    }

    /// A page_frag cache's block (`FLAG_FRAG`) with `bias` references, all the
    /// cache's (`bias` at least 1), and `bias` published in its bias slot.
    pub(crate) const fn frag(bias: u32) -> Head {
        Head::new(FLAG_FRAG, bias)
    }

    const fn new(flags: u8, refs: u32) -> Head {
        Head(Word::new(Tag::Alloc, 0, 0, refs).with_flags(flags))
    }

    /// The head word of an allocated block of `order` and migratetype `mt`
    /// (`Tag::Hole` is the tag whose bits are zero: the OR keeps `Alloc`).
    #[inline]
    fn word(self, order: Order, mt: Migratetype) -> Word {
        Word(self.0 .0 | Word::new(Tag::Hole, order.0, mt as u8, 0).0)
    }
}
