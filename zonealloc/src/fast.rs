//! The fast path of `alloc_pages` and `free_pages`: the per-CPU stacks (`rseq`),
//! refilled from and flushed to the buddy lists in batches.
//!
//! A path of `ZoneAllocator` (allocator layer, beside `allocate`, `free` and
//! `drain`), which `alloc_pages` and `free_pages` try first. It pops and pushes
//! the stacks (`rseq`), sizes each refill and flush by `stack_limits`, and
//! hands whatever it does not serve to the ordinary paths. Callers hold no
//! lock; a refill or a flush takes the CPU's pcp lock, then the zone lock.
//!
//! A pop hands out a block with one store of its state word; a free takes a block
//! with the one compare-and-swap that decides ownership (`Alloc -> Pcp`, so of two
//! racing frees exactly one wins) and pushes it. Neither checks a watermark or
//! tunes anything: a block on a stack is already outside the zone's free count,
//! as on Linux's per-CPU lists. The checks and the tuning run where a stack is
//! empty or full, under that CPU's pcp lock (which also keeps a remote stopper
//! out):
//! * **refill** takes `batch << alloc_factor` blocks if the zone stays above its
//!   low watermark with all of them gone (else the largest `batch << k` that
//!   does, else the ordinary path takes the call): first what the CPU's list
//!   holds, then whole free blocks cut up under one zone lock hold; a run of
//!   refills doubles each, up to `MAX_BATCHES` batches.
//! * **flush** pops the blocks above a batch below the limit (at least a batch)
//!   and merges them under one zone lock hold, their buddies' metadata
//!   prefetched first. The limit starts at two batches, doubles when a refill
//!   follows a flush (the working set swings wider than the stack holds) and
//!   halves after a run of flushes with no refill between them.
//!
//! Anything else (a debug mode, injected faults, a `Config::cpu_id` hook, an
//! isolated or highatomic pageblock, a block with references or an owner flag, a
//! stopped CPU) takes the ordinary path, unchanged.

use crate::allocate::Head;
use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::buf::Buf;
use crate::frame::{Tag, Word};
use crate::gfp::{AllocFlags, Gfp};
use crate::pcp::{order_to_pindex, pcp_allowed_order, pindex_to_order};
use crate::stack_limits::{
    batch_of, cap_of, factor_after_refill, limit_after_flush, limit_after_refill, stacks_of,
};
use crate::stacks::{Miss, On, STACK_CAP};
use crate::sync::Ordering;
use crate::types::{Migratetype, Order, Pfn, Wmark, NR_PCP_LISTS, PAGE_ALLOC_COSTLY_ORDER};
use crate::zone::Zone;

/// `order_to_pindex` for a per-CPU type given by its index (`pcp_type`).
#[inline(always)]
fn pcp_index(t: usize, order: Order, pageblock_order: Order) -> usize {
    if order.0 > PAGE_ALLOC_COSTLY_ORDER {
        debug_assert_eq!(order, pageblock_order);
        NR_PCP_LISTS - 2 + usize::from(t == Migratetype::Movable as usize)
    } else {
        crate::types::MIGRATE_PCPTYPES * order.idx() + t
    }
}

impl<B: Backend> ZoneAllocator<B> {
    /// `alloc_pages` from this CPU's stack; `None` sends the call to the ordinary
    /// path.
    #[inline(always)]
    pub(crate) fn alloc_fast(&self, gfp: Gfp, order: Order, head: Head) -> Option<Pfn> {
        if !self.fast_alloc.load(core::sync::atomic::Ordering::Relaxed)
            || order > self.config.max_order
        {
            return None;
        }
        let zi = if self.single_node {
            self.fast_zone[gfp.highest_zone().idx()]
        } else {
            self.local_fast_zone(gfp)
        };
        let z = self.zones.get(usize::from(zi))?;
        self.alloc_fast_in(z, gfp, gfp.migratetype(), order, head, On::Here)
    }

    /// The zone whose stacks `alloc_fast` pops from on a machine of several
    /// nodes: the preferred zone of the node of the CPU the thread runs on now
    /// (`u8::MAX`: none). A stale CPU only picks another node's zone to try.
    #[cold]
    fn local_fast_zone(&self, gfp: Gfp) -> u8 {
        let node = self.cpu_to_node(self.current_cpu());
        self.preferred
            .get(usize::from(node))
            .and_then(|p| p[gfp.highest_zone().idx()])
            .and_then(|(zi, _)| u8::try_from(zi).ok())
            .unwrap_or(u8::MAX)
    }

    /// `alloc_fast` in zone `z` (the preferred zone of `gfp`), for requests of
    /// type `mt` (`gfp`'s): what a `LocalCache`, which knows both, calls. The
    /// caller has checked `fast_alloc` and the order against `max_order`.
    #[inline(always)]
    pub(crate) fn alloc_fast_in(
        &self,
        z: &Zone,
        gfp: Gfp,
        mt: Migratetype,
        order: Order,
        head: Head,
        on: On,
    ) -> Option<Pfn> {
        if !pcp_allowed_order(order, z.pageblock_order) {
            return None;
        }
        let p = order_to_pindex(mt, order);
        let idx = match z.stacks.pop_on(on, p) {
            Ok(idx) => idx,
            Err(Miss::Cpu(cpu)) => self.refill_stack(z, cpu, gfp, order, mt, p, on)?,
            Err(Miss::Off) => return None,
        };
        let pfn = z.pfn_of(idx);
        self.prep_new_page(z, pfn, order, gfp, mt, head);
        Some(pfn)
    }

    /// `free_pages` of a plain block (one reference, no owner flag) to this CPU's
    /// stack. `false` (nothing changed) sends the call to the ordinary path, which
    /// also answers every error.
    #[inline(always)]
    pub(crate) fn free_fast(&self, pfn: Pfn, order: Order) -> bool {
        if !self.fast {
            return false;
        }
        self.free_fast_on(pfn, order, On::Here)
    }

    /// `free_fast` to the stacks `on` names: the CPU the thread runs on (the
    /// caller checked `fast`), or a pinned token's (the caller checked
    /// `pinned`).
    #[inline(always)]
    pub(crate) fn free_fast_on(&self, pfn: Pfn, order: Order, on: On) -> bool {
        if order > self.config.max_order {
            return false;
        }
        // One zone (the common case): no lookup, one range check.
        let z = match &*self.zones {
            [z] if z.contains(pfn) => z,
            [_] => return false,
            _ => match self.zone_of(pfn) {
                Some(z) => z,
                None => return false,
            },
        };
        if !pcp_allowed_order(order, z.pageblock_order) || !pfn.is_aligned(order) {
            return false;
        }
        let Some(t) = z.blocks.pcp_type(pfn) else {
            return false;
        };
        let idx = z.idx(pfn);
        let pcp = Word::pcp(order, 0);
        // The one point that decides ownership: a racing free or `get_page` sees
        // the new word and is refused or retried. It expects the word an
        // allocation of the pageblock's own type publishes, so the common free
        // reads the word only in the compare-and-swap; any other plain head is
        // tried once more with the word that came back.
        let expect = Word::new(Tag::Alloc, order.0, t as u8, 1);
        if let Err(w) = z.frames.cas_word(idx, expect, pcp) {
            if w.tag() != Tag::Alloc
                || w.flags() != 0
                || w.refcount() != 1
                || w.order() != order
                || z.frames.cas_word(idx, w, pcp).is_err()
            {
                return false;
            }
        }
        let p = pcp_index(t, order, z.pageblock_order);
        if let Err(miss) = z.stacks.push_on(on, p, idx) {
            self.free_stack_slow(z, pfn, order, p, miss, on);
        }
        true
    }

    /// A block whose last reference the caller dropped (`Frozen`, the caller owns
    /// it), freed to the stack of the CPU the thread runs on (`page_frag_free`,
    /// `put_page`). `false`, nothing changed, where the stacks do not serve it.
    pub(crate) fn free_frozen_here(&self, z: &Zone, pfn: Pfn, order: Order) -> bool {
        if !self.fast || !pcp_allowed_order(order, z.pageblock_order) {
            return false;
        }
        let mt = z.blocks.migratetype(pfn);
        if mt.idx() >= crate::types::MIGRATE_PCPTYPES {
            return false;
        }
        let idx = z.idx(pfn);
        z.frames.set_word(idx, Word::pcp(order, 0));
        let p = order_to_pindex(mt, order);
        if let Err(miss) = z.stacks.push(p, idx) {
            self.free_stack_slow(z, pfn, order, p, miss, On::Here);
        }
        true
    }

    /// `free_frozen_here` without the slow path: pushes the frozen block on this
    /// CPU's stack if it has room; `false` (the block still frozen and the
    /// caller's) otherwise. Takes no lock.
    pub(crate) fn push_frozen_here(&self, z: &Zone, pfn: Pfn, order: Order) -> bool {
        if !self.fast || !pcp_allowed_order(order, z.pageblock_order) {
            return false;
        }
        let mt = z.blocks.migratetype(pfn);
        if mt.idx() >= crate::types::MIGRATE_PCPTYPES {
            return false;
        }
        let idx = z.idx(pfn);
        z.frames.set_word(idx, Word::pcp(order, 0));
        if z.stacks.push(order_to_pindex(mt, order), idx).is_ok() {
            return true;
        }
        z.frames.set_word(idx, Word::frozen(order));
        false
    }

    /// A pop found CPU `cpu`'s stack `p` empty: takes a batch for it (see the
    /// module docs) and pops again. `None` if the zone cannot spare one batch,
    /// the CPU's lock is taken, or the thread lost its stack meanwhile.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn refill_stack(
        &self,
        z: &Zone,
        cpu: usize,
        gfp: Gfp,
        order: Order,
        mt: Migratetype,
        p: usize,
        on: On,
    ) -> Option<u32> {
        let nofragment = self.preferred[usize::from(z.id.node)][gfp.highest_zone().idx()]
            .is_some_and(|(_, n)| n);
        let mut pcp = z.pcp_trylock(cpu % z.pcp.len())?;
        let cs = z.stacks.cpu(cpu)?;
        let tune = &cs.tune[p];
        let base = batch_of(p, z.pageblock_order);
        let mut flags = AllocFlags::fast(gfp, order.0);
        if nofragment {
            flags = flags | AllocFlags::NOFRAGMENT;
        }
        let highest = gfp.highest_zone();
        let low = z.wmark(Wmark::Low);
        let cap = cap_of(pcp.pcp.high_max, order);
        let base = base.min(cap);
        let mut factor = tune.alloc_factor.load(Ordering::Relaxed);
        let (n, need) = loop {
            let n = (base << factor).min(cap);
            let need = low + (n as u64) * order.nr_pages();
            if z.watermark_fast(order, need, highest, flags) {
                break (n, need);
            }
            if factor == 0 {
                return None;
            }
            factor -= 1;
        };
        // A refill right after a flush: the flush gave back what was wanted again.
        let old = tune.limit.load(Ordering::Relaxed);
        let limit = limit_after_refill(old, tune.flush_run.load(Ordering::Relaxed));
        if limit != old {
            tune.limit.store(limit, Ordering::Relaxed);
            cs.set_lim(p, (base * limit as usize).min(cap) as u32);
        }
        tune.flush_run.store(0, Ordering::Relaxed);
        let next = factor_after_refill(factor, tune.alloc_factor.load(Ordering::Relaxed));
        tune.alloc_factor.store(next, Ordering::Relaxed);
        let mut buf = Buf::<u32, STACK_CAP>::new();
        // What the CPU's list holds first (blocks freed through the lists), then
        // whole free blocks cut up, the last one whole where the zone can spare a
        // second batch too (at most `2n - 1 < STACK_CAP` blocks in all).
        pcp.take_listed(p, n, &mut buf);
        if buf.len() < n {
            let more = (n as u64) * order.nr_pages();
            let whole = 2 * n <= cap && z.watermark_fast(order, need + more, highest, flags);
            let t = z.frames.view();
            let word = Word::pcp(order, pcp.cpu as u8);
            let mut zl = z.lock();
            zl.rmqueue_bulk(
                order,
                mt,
                flags,
                (n - buf.len()) as u64,
                whole,
                |first, k| {
                    let i = t.idx(first);
                    t.set_words(i, k as u32, order.0, word);
                    for j in 0..k as u32 {
                        buf.push(i + (j << order.0));
                    }
                },
            );
        }
        let got = buf.len();
        if got == 0 {
            return None;
        }
        pcp.slot
            .stats
            .count_refill(order, z.pageblock_order, got as u64);
        // One for this call, the rest on the stack of the CPU the thread runs on now.
        let (&mine, rest) = buf.as_slice().split_last()?;
        if !rest.is_empty() {
            match z.stacks.push_all_on(on, p, rest) {
                Some(c) => {
                    if let Some(cs) = z.stacks.cpu(c) {
                        cs.count_in(p, rest.len() as u64);
                    }
                }
                None => {
                    // Stopped or full meanwhile: they go back to the buddy lists.
                    let mut pfns = Buf::<Pfn, STACK_CAP>::new();
                    for &i in rest {
                        pfns.push(z.pfn_of(i));
                    }
                    z.lock().free_batch_locked(pfns.as_slice(), order);
                }
            }
        }
        drop(pcp);
        z.events.pgalloc.inc(order.nr_pages());
        if z.flags.load(Ordering::Relaxed) & crate::zone::ZONE_BOOSTED_WATERMARK != 0 {
            self.boosted(z, gfp);
        }
        Some(mine)
    }

    /// A free whose push did not happen; the caller holds the block (`Pcp`, on no
    /// list). A full stack is flushed (see the module docs); otherwise, or when the
    /// CPU's lock is taken, the block goes the ordinary way.
    #[cold]
    #[inline(never)]
    fn free_stack_slow(&self, z: &Zone, pfn: Pfn, order: Order, p: usize, miss: Miss, on: On) {
        let idx = z.idx(pfn);
        let locked = match miss {
            Miss::Cpu(cpu) => z.pcp_trylock(cpu % z.pcp.len()).zip(z.stacks.cpu(cpu)),
            Miss::Off => None,
        };
        let Some((pcp, cs)) = locked else {
            z.frames.set_word(idx, Word::frozen(order));
            let cpu = match on {
                On::Pinned(cpu) => cpu,
                On::Here => self.current_cpu(),
            };
            return self.free_frozen(z, pfn, order, cpu);
        };
        let tune = &cs.tune[p];
        let cap = cap_of(pcp.pcp.high_max, order);
        let base = batch_of(p, z.pageblock_order).min(cap);
        tune.alloc_factor.store(0, Ordering::Relaxed);
        let (limit, run) = limit_after_flush(
            tune.limit.load(Ordering::Relaxed),
            tune.flush_run.load(Ordering::Relaxed),
        );
        tune.limit.store(limit, Ordering::Relaxed);
        tune.flush_run.store(run, Ordering::Relaxed);
        let lim = (base * limit as usize).min(cap);
        cs.set_lim(p, lim as u32);
        // Down to a batch below the limit: one batch, or what a large refill left.
        let keep = lim.saturating_sub(base);
        let want = (cs.len(p) as usize).saturating_sub(keep).max(base);
        let mut buf = Buf::<u32, STACK_CAP>::new();
        // SAFETY: `pop_many` writes the first `n` entries of the slice it is given.
        #[allow(unsafe_code)]
        let (c, n) = unsafe { buf.extend_with(want, |out| z.stacks.pop_many_on(on, p, out)) }
            .unwrap_or((0, 0));
        if n > 0 {
            if let Some(cs) = z.stacks.cpu(c) {
                cs.count_out(p, n as u64);
            }
        }
        let mut pfns = Buf::<Pfn, { STACK_CAP + 1 }>::new();
        for &i in buf.as_slice() {
            let d = z.pfn_of(i);
            crate::free::prefetch_merge(z, d, order);
            pfns.push(d);
        }
        pfns.push(pfn);
        z.lock().free_batch_locked(pfns.as_slice(), order);
        let mut by_order = [0; crate::pcp::PCP_ORDER_SLOTS];
        by_order[crate::pcp::pcp_order_slot(order, z.pageblock_order)] = n as u64 + 1;
        pcp.slot.stats.count_drain(&by_order);
        drop(pcp);
        crate::pcp::count_zone_free(z, order);
    }

    /// Pages on CPU stacks, all zones (free, counted with the per-CPU lists).
    pub(crate) fn nr_stacked_pages(&self) -> u64 {
        self.zones
            .iter()
            .map(|z| (0..z.pcp.len()).map(|cpu| stack_pages(z, cpu)).sum::<u64>())
            .sum()
    }
}

/// Pages allocated and freed through zone `z`'s stacks of CPU `cpu`: (pops,
/// pushes), exact once quiet.
pub(crate) fn stack_events(z: &Zone, cpu: usize) -> (u64, u64) {
    stacks_of(z, cpu).fold((0, 0), |acc, cs| {
        (0..NR_PCP_LISTS).fold(acc, |(a, f), p| {
            let shift = pindex_to_order(p, z.pageblock_order).0;
            (a + (cs.pops(p) << shift), f + (cs.pushes(p) << shift))
        })
    })
}

/// Pages on zone `z`'s stacks of CPU `cpu` (lock-free).
pub(crate) fn stack_pages(z: &Zone, cpu: usize) -> u64 {
    stacks_of(z, cpu)
        .map(|cs| {
            (0..NR_PCP_LISTS)
                .map(|p| cs.len(p) << pindex_to_order(p, z.pageblock_order).0)
                .sum::<u64>()
        })
        .sum()
}
