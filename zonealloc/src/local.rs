//! `LocalCache`: a caller's handle on the fast path, with blocks of its own where
//! the per-CPU stacks are missing.
//!
//! Public API here: `ZoneAllocator::local_cache`, `local_cache_on` and `LocalCache`.
//!
//! **With the per-CPU stacks** (`ZoneAllocator::uses_cpu_stacks`: x86-64 Linux
//! with glibc's rseq registration) `alloc_pages` and `free_pages` already run at
//! a cache's speed, without a lock, and everything they hold is on per-CPU stacks
//! that `drain_all_pages` and the allocation slow path empty. A `LocalCache` then
//! holds nothing: its calls are `alloc_pages(gfp, ..)` and `free_pages`, kept so
//! that code written against it keeps working.
//!
//! **Without them** (no rseq, `no_std`, the stacks turned off in `PcpConfig`) a
//! cache holds free blocks of its own in plain arrays, in front of the per-CPU
//! lists, whose generic path costs far more per call. The arrays sit behind a
//! lock only its owner takes in the ordinary course (one uncontended atomic
//! read-modify-write and one release store a call); the allocator knows every
//! cache (they are registered with it) and takes the same lock to empty one:
//! `drain_all_pages`, and so the allocation slow path before it answers
//! `NoMemory`, empties every cache, idle owners' included (so does
//! `alloc_contig_range` over a cached block), and `pcp_decay`
//! empties the caches whose owners made no call since the decay before. What
//! caches hold shows in `nr_cached_pages()` and vmstat's `nr_local_cache_pages`.
//!
//! The guarantees of the raw API hold unchanged. A block freed into the cache goes
//! `Alloc -> Cached` with the same compare-and-swap `free_pages` uses, so of two
//! racing frees of one block exactly one wins, and every later free, `get_page` or
//! `split_page` of a cached block is refused (`AlreadyFree`). Only the holder of
//! the cache's lock changes a `Cached` block's state again: to `Alloc` with a
//! release store when it hands the block out, to a free block under the zone lock
//! when it flushes.
//!
//! ```text
//!   alloc:  pop -> store Alloc          refill: `batch` blocks, this CPU's list first,
//!                                               the rest from the buddy (one zone lock,
//!                                               whole free blocks cut up)
//!   free:   CAS Alloc -> Cached -> push   flush: `batch` blocks to the buddy (one zone
//!                                               lock; what each merge reads first is
//!                                               prefetched before it)
//! ```
//!
//! A free flushes when the cache holds its limit of the order: two batches at
//! first, doubled (up to `LOCAL_CACHE_MAX_BATCHES`) each time a refill follows a
//! flush, halved after a run of flushes with no refill between them. An owner whose
//! working set swings wider than two batches would otherwise flush and refill
//! through the zone lock on every swing, and on many CPUs that one lock is what
//! stops the caches from scaling. A flush brings the cache down to a batch below
//! its limit.
//!
//! Refills grow the same way Linux's per-CPU refills do for a run of order-0
//! allocations with no free between them (`pcp->alloc_factor`): each refill takes
//! twice what the one before took, from one batch up to `LOCAL_CACHE_MAX_BATCHES`
//! batches, and a flush starts them at one batch again. An owner that fills
//! memory then takes the zone lock once every few hundred blocks, not every 32;
//! what the last refill of such a run leaves unused goes back with the first
//! flush.
//!
//! The cache serves orders up to `PAGE_ALLOC_COSTLY_ORDER` from one zone, the first
//! its `Gfp` may use, and only blocks whose pageblock type is the one its requests
//! draw from (so it never mixes mobility types); anything else goes through the
//! ordinary paths. Refills check the zone's low watermark for the whole batch. When
//! not even one batch passes, a refill takes what this CPU's list already holds (up
//! to a batch, and for orders above 0 only where the free count is what failed, as
//! `alloc_pages` does), and failing that the cache falls back to `alloc_pages` (slow
//! path, drains and all). A refill takes free blocks whole and cuts them up, the
//! smallest first as Linux's one-at-a-time refill would; where the zone stays above
//! the watermark with a second batch gone, it takes the last of them whole too, so a
//! refill may bring up to a batch less one more than asked and leaves no remnant for
//! the next to start from. In the zone's statistics a cached block counts as
//! allocated (to the cache); the debug modes poison a block when it enters the cache
//! and check it when it leaves.

use alloc::sync::Arc;

use crate::allocate::Head;
use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::error::{AllocError, FreeError};
use crate::fault::FaultSite;
use crate::frame::{Tag, Word, FLAG_ISOLATED};
use crate::free::{Holder, Via};
use crate::gfp::{AllocFlags, Gfp};
use crate::local_state::{stack_room, CacheShared, Held, LOCAL_ORDERS};
use crate::pcp::{pcp_allowed_order, PcpLocked};
use crate::stack_limits::MIN_BATCHES;
use crate::sync::{TryLock, TryLockGuard};
use crate::types::{Migratetype, Order, Pfn, Wmark};
use crate::zone::Zone;

/// Blocks a refill takes and a flush gives back, by default.
pub const LOCAL_CACHE_BATCH: usize = 32;

/// The most batches of one order a cache holds. It starts at two and doubles
/// each time a refill follows a flush (the flush gave back what was wanted
/// again: the owner's working set swings further than the cache holds), up to
/// this; a run of flushes longer than the limit in batches, with no refill
/// between them, halves it again (see `LocalCache::free`). It also bounds a
/// refill: a run of refills doubles each from one batch up to this many.
pub const LOCAL_CACHE_MAX_BATCHES: usize = crate::stack_limits::MAX_BATCHES as usize;

/// A caller's handle on the fast path for orders up to `PAGE_ALLOC_COSTLY_ORDER`:
/// `alloc_pages`/`free_pages` where the per-CPU stacks serve them, else free
/// blocks of its own that the allocator can always reach (see the [module
/// documentation](crate::local) for what it costs and guarantees). Dropping it
/// gives every block back.
///
/// # Examples
/// ```
/// use zonealloc::{Config, Gfp, Order, ZoneAllocator};
/// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
/// let mut cache = za.local_cache(Gfp::KERNEL).unwrap();
/// let p = cache.alloc(Order(0)).unwrap();
/// cache.free(p, Order(0)).unwrap();
/// assert!(cache.free(p, Order(0)).is_err(), "a second free is refused");
/// drop(cache);
/// za.drain_all_pages();
/// assert_eq!(za.nr_free_pages(), za.managed_pages());
/// ```
pub struct LocalCache<'a, B: Backend> {
    za: &'a ZoneAllocator<B>,
    zone: &'a Zone,
    cpu: usize,
    gfp: Gfp,
    /// The type the cache's requests draw from, and the only pageblock type it
    /// takes frees of (any ordinary type when the zone does not group by mobility).
    mt: Migratetype,
    /// Neither a debug mode nor `__GFP_ZERO` touches the pages: handing a block out
    /// is one store, and taking one back needs no page work either.
    plain: bool,
    /// The allocator's per-CPU stacks serve `alloc_pages` and `free_pages`
    /// (`ZoneAllocator::uses_cpu_stacks`): the cache holds nothing of its own and
    /// calls them (see the module docs).
    thin: bool,
    batch: usize,
    /// The blocks, shared with the allocator's registry (absent when `thin`).
    shared: Option<Arc<CacheShared>>,
}

type HeldGuard<'g> = TryLockGuard<'g, Held>;

impl<B: Backend> ZoneAllocator<B> {
    /// A `LocalCache` for requests of `gfp`, refilled first from the list of the CPU
    /// the caller runs on now.
    ///
    /// A set-up call: where the cache holds blocks of its own (no per-CPU stacks)
    /// it allocates its shared part and its stacks' room on the heap and
    /// registers itself with the allocator; its `alloc`, `free` and `flush` never
    /// call the heap, and dropping it (teardown) frees what this allocated.
    ///
    /// # Errors
    /// `NoEligibleZone` when no zone of node 0 may serve `gfp`.
    pub fn local_cache(&self, gfp: Gfp) -> Result<LocalCache<'_, B>, AllocError> {
        self.local_cache_on(self.current_cpu(), gfp)
    }

    /// As `local_cache`, refilled first from CPU `cpu`'s list (taken modulo
    /// `nr_cpus`; without effect where the per-CPU stacks serve the cache, which
    /// then uses the CPU each call runs on).
    ///
    /// # Errors
    /// As `local_cache`.
    pub fn local_cache_on(&self, cpu: usize, gfp: Gfp) -> Result<LocalCache<'_, B>, AllocError> {
        let highest = gfp.highest_zone();
        let zone = self
            .zonelist(self.cpu_to_node(cpu))
            .find(|z| z.zone_type() <= highest && z.present > 0)
            .ok_or(AllocError::NoEligibleZone)?;
        let shared = (!self.fast).then(|| {
            let shared = Arc::new(CacheShared {
                // A drain on an interrupt's slow path may try it.
                held: TryLock::new(
                    Held {
                        zone: zone.index,
                        stacks: Default::default(),
                        pages: 0,
                        used: true,
                        limit: [MIN_BATCHES; LOCAL_ORDERS],
                        flush_run: [0; LOCAL_ORDERS],
                        alloc_factor: [0; LOCAL_ORDERS],
                        flush_at: [0; LOCAL_ORDERS],
                    },
                    self.config.platform,
                ),
                pages: crate::counter::Counter::new(),
                zone: zone.index,
                cpu: cpu % self.config.nr_cpus.max(1),
            });
            let mut reg = self.caches.lock();
            reg.retain(|w| w.strong_count() > 0);
            reg.push(Arc::downgrade(&shared));
            shared
        });
        Ok(LocalCache {
            za: self,
            zone,
            cpu: cpu % self.config.nr_cpus.max(1),
            gfp,
            mt: gfp.migratetype(),
            plain: !self.debug.touches_pages() && !gfp.contains(Gfp::ZERO),
            thin: self.fast,
            batch: LOCAL_CACHE_BATCH,
            shared,
        }
        .with_batch(LOCAL_CACHE_BATCH))
    }
}

impl<'a, B: Backend> LocalCache<'a, B> {
    /// Sets how many blocks a refill takes and a flush gives back (at least 1; a
    /// run of refills with no flush between them doubles each, up to
    /// `LOCAL_CACHE_MAX_BATCHES` batches; a refill well above the watermark may
    /// take up to one less than twice what it asks, so as to take its last free
    /// block whole; the cache holds twice a batch of each order before a free
    /// flushes, at most `LOCAL_CACHE_MAX_BATCHES` times as many once its limit
    /// has grown). No effect where the per-CPU stacks serve the cache.
    ///
    /// A set-up call, like `local_cache`: a larger batch than the cache had
    /// makes room for it on the heap (sixteen batches of each order, or what
    /// the zone could hold), so that no later call needs to.
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        if let Some(mut h) = self.lock() {
            for o in 0..LOCAL_ORDERS {
                let order = Order(o as u8);
                h.stacks[o].make_room(stack_room(self.batch, order, self.zone.spanned));
                self.set_flush_at(&mut h, order);
            }
        }
        self
    }

    /// The allocator the cache draws from.
    pub fn allocator(&self) -> &'a ZoneAllocator<B> {
        self.za
    }

    /// The cache's blocks, locked (the owner's calls find the lock free unless a
    /// drain holds it); `None` for a thin cache.
    #[inline(always)]
    fn lock(&self) -> Option<HeldGuard<'_>> {
        self.shared.as_ref().map(|s| s.held.lock())
    }

    /// Frames held free by the cache now.
    pub fn cached_pages(&self) -> u64 {
        self.shared.as_ref().map_or(0, |s| s.pages.get())
    }

    /// A block of `2^order` frames: from the cache when it holds one, else refilled
    /// with a batch (see `refill`); orders above `PAGE_ALLOC_COSTLY_ORDER` go
    /// to `alloc_pages`. Where the per-CPU stacks serve the cache, `alloc_pages`.
    ///
    /// # Errors
    /// As `alloc_pages`.
    #[inline(always)]
    pub fn alloc(&mut self, order: Order) -> Result<Pfn, AllocError> {
        let Some(shared) = &self.shared else {
            let za = self.za;
            if za.fast_alloc.load(core::sync::atomic::Ordering::Relaxed)
                && order <= za.config.max_order
            {
                let z = self.zone;
                if let Some(p) = za.alloc_fast_in(
                    z,
                    self.gfp,
                    self.mt,
                    order,
                    Head::PLAIN,
                    crate::stacks::On::Here,
                ) {
                    return Ok(p);
                }
            }
            return self.alloc_slow(order);
        };
        if order.idx() < LOCAL_ORDERS {
            let mut h = shared.held.lock();
            h.used = true;
            if let Some(pfn) = h.stacks[order.idx()].pop() {
                h.pages -= order.nr_pages();
                shared.publish(&h);
                drop(h);
                if let Some(p) = self.hand_out(pfn, order) {
                    return Ok(p);
                }
            }
        }
        self.alloc_slow(order)
    }

    /// Publishes a cached block as allocated (after the debug modes' checks);
    /// `None` if the checks retired it.
    #[inline(always)]
    fn hand_out(&self, pfn: Pfn, order: Order) -> Option<Pfn> {
        if self.plain {
            let z = self.zone;
            z.frames.set_word(z.idx(pfn), Word::alloc(order, self.mt));
            return Some(pfn);
        }
        self.hand_out_checked(pfn, order)
    }

    /// `hand_out` with page work: the debug modes' checks, zeroing.
    #[cold]
    #[inline(never)]
    fn hand_out_checked(&self, pfn: Pfn, order: Order) -> Option<Pfn> {
        let (za, z) = (self.za, self.zone);
        if !za.debug.alloc_check(&za.backend, z, pfn, order) {
            return None;
        }
        za.prep_new_page(z, pfn, order, self.gfp, self.mt, Head::PLAIN);
        Some(pfn)
    }

    /// Pops a block of `order` (locked), handing it out; `None` when the stack is
    /// empty or the debug checks retired every block on it.
    fn take_one(&self, h: &mut HeldGuard<'_>, order: Order) -> Option<Pfn> {
        while let Some(pfn) = h.stacks[order.idx()].pop() {
            h.pages -= order.nr_pages();
            if let Some(p) = self.hand_out(pfn, order) {
                return Some(p);
            }
        }
        None
    }

    /// Empty stack (or a retired block, or an order the cache does not hold).
    #[cold]
    #[inline(never)]
    fn alloc_slow(&mut self, order: Order) -> Result<Pfn, AllocError> {
        let za = self.za;
        if self.thin {
            return za.alloc_pages(self.gfp, order);
        }
        if order.idx() < LOCAL_ORDERS {
            if let Some(shared) = &self.shared {
                let mut h = shared.held.lock();
                let mut got = self.take_one(&mut h, order);
                if got.is_none() {
                    if self.refill(&mut h, order) {
                        grow_after_refill(&mut h, order);
                    }
                    self.set_flush_at(&mut h, order);
                    got = self.take_one(&mut h, order);
                }
                shared.publish(&h);
                if let Some(p) = got {
                    return Ok(p);
                }
            }
        }
        za.alloc_pages_local(self.cpu, self.gfp, order, Head::PLAIN)
    }

    /// Takes `batch << alloc_factor` blocks of `order` (up to one less than twice
    /// that, see `rmqueue_bulk`'s `whole`), if the zone stays above its low
    /// watermark with all of them gone, else the largest of `batch << k` (k below
    /// `alloc_factor`) that leaves it so: first what this CPU's list holds, then
    /// the rest straight from the buddy lists under one zone lock hold (the
    /// per-CPU list would only pass them through). Raises `alloc_factor` for the
    /// next refill. Where the zone cannot spare one batch, see `take_listed`.
    /// Returns whether it took any.
    fn refill(&self, h: &mut Held, order: Order) -> bool {
        let (za, z) = (self.za, self.zone);
        if !za.config.pcp.enabled
            || !pcp_allowed_order(order, z.pageblock_order)
            || za.debug.faults.should_fail(FaultSite::Alloc)
        {
            return false;
        }
        let base = (self.batch >> order.0).max(1);
        let flags = AllocFlags::fast(self.gfp, order.0);
        let highest = self.gfp.highest_zone();
        // A run of refills takes more each time; near the watermark, as much of
        // that as the zone can spare, down to one batch.
        let low = z.wmark(Wmark::Low);
        let mut factor = h.alloc_factor[order.idx()];
        let (n, need) = loop {
            let n = base.saturating_mul(1 << factor);
            // Saturating: a batch set past what any zone holds fails the check.
            let need = low.saturating_add((n as u64).saturating_mul(order.nr_pages()));
            if z.watermark_fast(order, need, highest, flags) {
                break (n, need);
            }
            if factor == 0 {
                return self.take_listed(h, order, base, low, flags);
            }
            factor -= 1;
        };
        let Some(mut pcp) = z.pcp_trylock(self.cpu) else {
            return false;
        };
        let o = order.idx();
        h.alloc_factor[o] = crate::stack_limits::factor_after_refill(factor, h.alloc_factor[o]);
        let got = self.take_from_list(h, &mut pcp, order, flags, n);
        let stack = &mut h.stacks[order.idx()];
        if got < n {
            // Whole free blocks cut into blocks of `order` (each its own head, as
            // `split_page` leaves pages): a list operation or a few per free block,
            // not per block taken; and the last block whole even when it overshoots
            // the batch (see `rmqueue_bulk`), where the zone stays above its low
            // watermark with a second batch gone too.
            let more = (n as u64).saturating_mul(order.nr_pages());
            let whole = z.watermark_fast(order, need.saturating_add(more), highest, flags);
            let mut zl = z.lock();
            let t = z.frames.view();
            let taken = zl.rmqueue_bulk(order, self.mt, flags, (n - got) as u64, whole, |p, k| {
                t.set_words(t.idx(p), k as u32, order.0, Word::cached(order));
                stack.extend((0..k).map(|i| p.add(i << order.0)));
            });
            drop(zl);
            let pages = taken << order.0;
            z.events.pgalloc.inc(pages);
            h.pages += pages;
        }
        drop(pcp);
        !h.stacks[order.idx()].is_empty()
    }

    /// A refill the zone cannot spare a batch for: the blocks this CPU's list
    /// already holds, up to a batch. They left the zone's free count when the list
    /// took them, and `alloc_pages` hands them out below the watermark too, one call
    /// each; here they come to the cache at once, so the last blocks near the
    /// watermark do not cost an `alloc_pages` call each. As there, only where the
    /// zone's free-page count is what failed: an order the buddy lists lack a block
    /// of goes on to `alloc_pages`' slow path and its drain. Returns whether it took
    /// any.
    #[cold]
    #[inline(never)]
    fn take_listed(
        &self,
        h: &mut Held,
        order: Order,
        base: usize,
        low: u64,
        flags: AllocFlags,
    ) -> bool {
        let z = self.zone;
        if !z.short_of_pages(order, low, self.gfp.highest_zone(), flags) {
            return false;
        }
        let Some(mut pcp) = z.pcp_trylock(self.cpu) else {
            return false;
        };
        self.take_from_list(h, &mut pcp, order, flags, base) > 0
    }

    /// Moves up to `n` blocks of `order` from this CPU's list (locked) to the
    /// cache, `Cached`. Returns how many it moved.
    fn take_from_list(
        &self,
        h: &mut Held,
        pcp: &mut PcpLocked<'_>,
        order: Order,
        flags: AllocFlags,
        n: usize,
    ) -> usize {
        let (za, z) = (self.za, self.zone);
        let stack = &mut h.stacks[order.idx()];
        let mut got = 0;
        while got < n {
            match pcp.rmqueue(order, self.mt, flags, &za.debug.faults, false) {
                Some(p) => {
                    z.frames.set_word(z.idx(p), Word::cached(order));
                    stack.push(p);
                    got += 1;
                }
                None => break,
            }
        }
        h.pages += (got as u64) << order.0;
        got
    }

    /// Frees a block: into the cache when it holds blocks of this order, of this
    /// zone and of its pageblock type, else as `free_pages` does. A cache that
    /// then holds its limit of the order (twice its batch at first) gives its
    /// oldest batch back. A run of flushes with no refill between them that is
    /// longer than the limit in batches halves the limit (down to two batches):
    /// the owner is giving memory back, not swinging. Where the per-CPU stacks
    /// serve the cache, `free_pages`.
    ///
    /// # Errors
    /// As `free_pages`; nothing is changed then.
    #[inline(always)]
    pub fn free(&mut self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        if self.thin {
            if self.za.free_fast(pfn, order) {
                return Ok(());
            }
            return self.za.free_pages(pfn, order);
        }
        let (za, z) = (self.za, self.zone);
        let local = order.idx() < LOCAL_ORDERS
            && order <= za.config.max_order
            && z.contains(pfn)
            && pfn.is_aligned(order)
            // The compare-and-swap below comes before any read of the frame's
            // word: its metadata must be backed.
            && z.blocks.holds_memory(pfn)
            && (z.blocks.is_type(pfn, self.mt) || self.takes(z.blocks.migratetype(pfn)));
        if !local {
            return za.free_pages_by(Via::Cpu(self.cpu), pfn, order, Holder::Raw);
        }
        // The common case, inline: a plain allocated head of this order (no flag)
        // with its last reference. The compare-and-swap expects the state this
        // cache hands out (its own type), so the common free reads the frame's
        // word once, in the compare-and-swap itself; a block allocated with
        // another type is tried once more with the word that came back. It is the
        // same compare-and-swap `update_head` makes, so a racing free still has
        // exactly one winner.
        let idx = z.idx(pfn);
        let expect = Word::alloc(order, self.mt);
        let w = match z.frames.cas_word(idx, expect, Word::cached(order)) {
            Ok(_) => {
                self.keep(pfn, order);
                return Ok(());
            }
            Err(w) => w,
        };
        if w.sans_aux() == expect.sans_aux()
            && z.frames.cas_word(idx, w, Word::cached(order)).is_ok()
        {
            self.keep(pfn, order);
            return Ok(());
        }
        self.free_checked(pfn, order)
    }

    /// `free` of a block the inline check did not settle: a guard, a fragment
    /// cache, compaction or other references may hold it, or it is not an
    /// allocated head at all (the error says which).
    #[cold]
    #[inline(never)]
    fn free_checked(&mut self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let (za, z) = (self.za, self.zone);
        let (_, new) = za.update_head(z, pfn, Holder::Raw, |w| {
            let actual = w.order();
            if actual != order {
                Err(FreeError::WrongOrder {
                    pfn,
                    given: order,
                    actual,
                })
            } else if w.refcount() <= 1 && w.flags() & FLAG_ISOLATED != 0 {
                // Compaction holds the last reference (see `migrate`).
                Err(FreeError::AlreadyFree(pfn))
            } else if w.refcount() <= 1 {
                Ok(Word::cached(order))
            } else {
                Ok(w.with_refcount(w.refcount() - 1))
            }
        })?;
        if new.tag() == Tag::Cached {
            self.keep(pfn, order);
        }
        Ok(())
    }

    /// Puts a block this cache just took `Cached` on its stack, flushing the oldest
    /// batch when the stack reaches its limit.
    #[inline(always)]
    fn keep(&mut self, pfn: Pfn, order: Order) {
        let za = self.za;
        if !self.plain {
            za.debug.free_prepare(&za.backend, pfn, order);
        }
        let Some(shared) = &self.shared else {
            return;
        };
        let mut h = shared.held.lock();
        h.used = true;
        h.pages += order.nr_pages();
        let stack = &mut h.stacks[order.idx()];
        stack.push(pfn);
        if stack.len() >= h.flush_at[order.idx()] {
            self.flush_overflow(&mut h, order);
        }
        shared.publish(&h);
    }

    /// Whether a freed block of pageblock type `bt` may stay in this cache.
    #[inline]
    fn takes(&self, bt: Migratetype) -> bool {
        bt == self.mt || (self.zone.mobility_disabled && bt.is_mergeable())
    }

    /// `free`'s flush of the oldest batch, and the limit's tuning.
    #[cold]
    #[inline(never)]
    fn flush_overflow(&self, h: &mut Held, order: Order) {
        let batch = (self.batch >> order.0).max(1);
        let o = order.idx();
        h.alloc_factor[o] = 0;
        (h.limit[o], h.flush_run[o]) =
            crate::stack_limits::limit_after_flush(h.limit[o], h.flush_run[o]);
        self.set_flush_at(h, order);
        // Down to a batch below the limit: one batch, unless a large refill left
        // more than that unused (then its oldest blocks go back batch by batch).
        let keep = h.flush_at[o].saturating_sub(batch);
        while h.stacks[o].len() > keep {
            let n = (h.stacks[o].len() - keep).min(batch);
            h.flush_order(self.za, order, n);
        }
    }

    /// Recomputes the stack length at which a free of `order` flushes, after a
    /// change of the limit or the batch.
    fn set_flush_at(&self, h: &mut Held, order: Order) {
        let o = order.idx();
        let batch = (self.batch >> order.0).max(1);
        h.flush_at[o] = batch.saturating_mul(h.limit[o] as usize);
    }

    /// Gives every block back to the buddy lists. Returns the blocks given back.
    pub fn flush(&mut self) -> u64 {
        let Some(shared) = &self.shared else {
            return 0;
        };
        let mut h = shared.held.lock();
        h.alloc_factor = [0; LOCAL_ORDERS];
        let n = (0..LOCAL_ORDERS)
            .map(|o| h.flush_order(self.za, Order(o as u8), usize::MAX))
            .sum();
        shared.publish(&h);
        n
    }
}

/// A refill right after a flush: the flush gave back blocks the owner wanted
/// again, so the cache holds more before the next one (Linux raises a per-CPU
/// list's `high` for the same pattern).
fn grow_after_refill(h: &mut Held, order: Order) {
    let o = order.idx();
    h.limit[o] = crate::stack_limits::limit_after_refill(h.limit[o], h.flush_run[o]);
    h.flush_run[o] = 0;
}

impl<B: Backend> Drop for LocalCache<'_, B> {
    fn drop(&mut self) {
        self.flush();
    }
}

impl<B: Backend> core::fmt::Debug for LocalCache<'_, B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LocalCache")
            .field("zone", &self.zone.id)
            .field("cpu", &self.cpu)
            .field("migratetype", &self.mt)
            .field("batch", &self.batch)
            .field("thin", &self.thin)
            .field("cached_pages", &self.cached_pages())
            .finish()
    }
}
