//! Contiguous and bulk paths: `free_contig_range`, `free_pages_bulk`,
//! `alloc_pages_bulk`, `alloc_contig_range` and `alloc_contig_pages`.
//!
//! Layer on top of the allocator's single-block paths. Takes the per-CPU and zone
//! locks through them; `alloc_contig_range` isolates pageblocks (see `isolate`).
//!
//! # Freeing a run of order-0 pages as large blocks (seeds 000 and 002)
//!
//! Freeing `n` order-0 pages one by one costs `n` trips through the per-CPU lists and,
//! when they flush, `n` merge chains in the buddy. But a run of consecutive pages is
//! already a union of naturally aligned power-of-two blocks, and each can be freed
//! in one step. `free_contig_range` drops one reference on each page; pages that
//! reach zero form runs (a page still referenced ends a run), and each run is cut
//! greedily, left to right, into the largest block that (1) is aligned at the current
//! frame, (2) fits in what is left and (3) is at most `max_order`:
//!
//! ```text
//!   pfn 4099, 1024 pages:  4099:0 4100:2 4104:3 4112:4 4128:5 4160:6 4224:7
//!                          4352:8 4608:9 5120:1 5122:0
//! ```
//!
//! Each block then takes the ordinary free path for its order: orders 1–3 and the
//! pageblock order to this CPU's lists, the others to the buddy under the zone lock.
//! `free_pages_bulk` (what `vfree` uses) finds runs of consecutive frames in a page
//! array and frees each with the same machinery.

use alloc::vec::Vec;

use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::error::FreeError;
use crate::frame::{Word, TAG_ALLOC};
use crate::gfp::{AllocFlags, Gfp};
use crate::pcp::pcp_allowed_order;
use crate::types::{Migratetype, Order, Pfn};
use crate::zone::{chunks, Zone, ZoneEvents, WMARK_LOW};

/// Why a contiguous allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContigError {
    /// The range is empty, reversed, or in no zone.
    InvalidRange,
    /// The range crosses a zone boundary.
    CrossesZone(Pfn),
    /// A frame of the range is in use (allocated, a hole, or bad).
    Busy(Pfn),
    /// A pageblock of the range is already isolated by another caller.
    Isolated(Pfn),
    /// No eligible zone had such a free run.
    NoMemory,
}

impl core::fmt::Display for ContigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ContigError::InvalidRange => f.write_str("invalid range"),
            ContigError::CrossesZone(p) => write!(f, "range crosses a zone boundary at {p}"),
            ContigError::Busy(p) => write!(f, "frame {p} is in use"),
            ContigError::Isolated(p) => write!(f, "pageblock at {p} is already isolated"),
            ContigError::NoMemory => f.write_str("no free contiguous range"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ContigError {}

impl<B: Backend> ZoneAllocator<B> {
    // -------------------------------------------------------------------------
    // Freeing runs
    // -------------------------------------------------------------------------

    /// The zone holding all of `[pfn, pfn + nr)`.
    fn zone_of_range(&self, pfn: Pfn, nr: u64) -> Result<&Zone, FreeError> {
        let z = self.zone_of(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        let end = pfn.0.checked_add(nr).ok_or(FreeError::CrossesZone(pfn))?;
        if end > z.end_pfn() {
            return Err(FreeError::CrossesZone(pfn));
        }
        Ok(z)
    }

    /// Checks that `pfn` is a plain order-0 allocated page (not a block head of a
    /// higher order, not a tail, not free).
    #[inline]
    fn check_order0(&self, z: &Zone, pfn: Pfn) -> Result<(), FreeError> {
        let w = z.frames.word(z.idx(pfn));
        if w.tag() != TAG_ALLOC {
            return Err(self.classify(z, pfn, w));
        }
        if w.order().0 != 0 {
            return Err(FreeError::WrongOrder {
                pfn,
                given: Order(0),
                actual: w.order(),
            });
        }
        Ok(())
    }

    /// `free_contig_range()`: drops one reference on each order-0 page of
    /// `[pfn, pfn + nr)`; the pages that reach zero are freed as the largest
    /// naturally aligned blocks (see the module documentation).
    ///
    /// # Errors
    /// If the range leaves its zone, or any page of it is not an allocated order-0
    /// page (free, a hole, a tail or head of a larger block), nothing is changed and
    /// the first such page is reported.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, Gfp, Order, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let pfn = za.alloc_pages(Gfp::KERNEL, Order(9)).unwrap();
    /// za.split_page(pfn, Order(9)).unwrap();
    /// za.free_contig_range(pfn, 512).unwrap(); // one order-9 free, not 512
    /// ```
    pub fn free_contig_range(&self, pfn: Pfn, nr: u64) -> Result<(), FreeError> {
        let z = self.zone_of_range(pfn, nr)?;
        for i in 0..nr {
            self.check_order0(z, pfn.add(i))?;
        }
        self.free_contig_range_checked(z, pfn, nr, self.current_cpu());
        Ok(())
    }

    /// The work of `free_contig_range` on a range already checked.
    fn free_contig_range_checked(&self, z: &Zone, pfn: Pfn, nr: u64, cpu: usize) {
        let mut run_start: Option<u64> = None;
        for i in 0..nr {
            let p = pfn.add(i);
            if self.put_order0(z, p) {
                run_start.get_or_insert(p.0);
            } else if let Some(s) = run_start.take() {
                self.free_run(z, Pfn(s), p.0 - s, cpu);
            }
        }
        if let Some(s) = run_start {
            self.free_run(z, Pfn(s), pfn.0 + nr - s, cpu);
        }
    }

    /// Drops one reference on an order-0 page; `true` if it reached zero (the page is
    /// now frozen and owned by the caller). A page whose state changed under us (a
    /// racing free by another owner) counts as still referenced.
    #[inline]
    fn put_order0(&self, z: &Zone, pfn: Pfn) -> bool {
        let idx = z.idx(pfn);
        let mut w = z.frames.word(idx);
        loop {
            if w.tag() != TAG_ALLOC || w.order().0 != 0 {
                return false;
            }
            let last = w.refcount() <= 1;
            let new = if last {
                Word::TAIL
            } else {
                w.with_refcount(w.refcount() - 1)
            };
            match z.frames.cas_word(idx, w, new) {
                Ok(_) => return last,
                Err(cur) => w = cur,
            }
        }
    }

    /// Frees a run of frozen order-0 pages as aligned blocks.
    fn free_run(&self, z: &Zone, pfn: Pfn, nr: u64, cpu: usize) {
        for (p, order) in chunks(pfn, nr, z.max_order) {
            // Interior frames are already `Tail` (set when each page froze); the head
            // becomes the frozen head of the whole chunk.
            z.frames.set_word(z.idx(p), Word::frozen(order));
            self.free_prepare(p, order);
            self.free_frozen(z, p, order, cpu);
        }
    }

    /// `free_pages_bulk()`: drops one reference on every page of `pages` (order-0
    /// pages, any order of entries), freeing runs of consecutive frames as large
    /// blocks with `free_contig_range`. Ascending arrays (what vmalloc builds) give
    /// the longest runs.
    ///
    /// # Errors
    /// If any entry is not an allocated order-0 page, or a page appears more often
    /// than it has references, nothing is changed and the first bad page is
    /// reported.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, Gfp, Order, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let head = za.alloc_pages(Gfp::KERNEL, Order(4)).unwrap();
    /// za.split_page(head, Order(4)).unwrap();
    /// let pages: Vec<_> = (0..16).map(|i| head.add(i)).collect();
    /// za.free_pages_bulk(&pages).unwrap(); // one run, freed as one order-4 block
    /// assert!(za.free_pages_bulk(&pages).is_err()); // already free: nothing changes
    /// ```
    pub fn free_pages_bulk(&self, pages: &[Pfn]) -> Result<(), FreeError> {
        let mut ascending = true;
        for (i, &p) in pages.iter().enumerate() {
            let z = self.zone_of(p).ok_or(FreeError::OutOfRange(p))?;
            self.check_order0(z, p)?;
            if i > 0 && pages[i - 1] >= p {
                ascending = false;
            }
        }
        if !ascending {
            // Duplicates are legal only while references last.
            let mut sorted: Vec<Pfn> = pages.to_vec();
            sorted.sort_unstable();
            for group in sorted.chunk_by(|a, b| a == b) {
                let p = group[0];
                let z = self.zone_of(p).ok_or(FreeError::OutOfRange(p))?;
                let refs = z.frames.word(z.idx(p)).refcount() as usize;
                if group.len() > refs {
                    return Err(FreeError::AlreadyFree(p));
                }
            }
        }
        let cpu = self.current_cpu();
        let mut i = 0;
        while i < pages.len() {
            let start = pages[i];
            let Some(z) = self.zone_of(start) else { break };
            let mut k = 1;
            while i + k < pages.len()
                && pages[i + k].0 == start.0 + k as u64
                && z.contains(pages[i + k])
            {
                k += 1;
            }
            self.free_contig_range_checked(z, start, k as u64, cpu);
            i += k;
        }
        Ok(())
    }

    // -------------------------------------------------------------------------
    // Bulk allocation
    // -------------------------------------------------------------------------

    /// `alloc_pages_bulk()`: fills the empty (`None`) slots of `pages` with order-0
    /// pages, taking them from this CPU's list under one lock hold (refilled from
    /// the buddy as needed) and falling back to single allocations as Linux does.
    /// Returns the number of filled slots, pre-filled ones included; a short count
    /// means memory ran low.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, Gfp, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let mut pages = vec![None; 100];
    /// assert_eq!(za.alloc_pages_bulk(Gfp::KERNEL, &mut pages), 100);
    /// let pfns: Vec<_> = pages.into_iter().flatten().collect();
    /// za.free_pages_bulk(&pfns).unwrap();
    /// ```
    pub fn alloc_pages_bulk(&self, gfp: Gfp, pages: &mut [Option<Pfn>]) -> usize {
        if self.should_fail(crate::debug::FaultSite::Alloc) {
            return pages.iter().filter(|p| p.is_some()).count();
        }
        let filled = pages.iter().filter(|p| p.is_some()).count();
        let missing = pages.len() - filled;
        if missing == 0 {
            return filled;
        }
        let single = |slot: &mut Option<Pfn>| {
            *slot = self.alloc_pages(gfp, Order(0)).ok();
            slot.is_some() as usize
        };
        let first_empty = pages.iter().position(|p| p.is_none()).unwrap_or(0);
        if missing == 1 || !self.config.pcp.enabled {
            let mut n = filled;
            for slot in pages.iter_mut().filter(|p| p.is_none()) {
                if single(slot) == 0 {
                    break;
                }
                n += 1;
            }
            return n;
        }
        let cpu = self.current_cpu();
        let mt = gfp.migratetype();
        let flags = AllocFlags(AllocFlags::WMARK_LOW);
        let highest = gfp.highest_zone();
        // The first eligible zone with room for the whole request above its low mark.
        let zone = self.zonelist(0).find(|z| {
            z.zone_type() <= highest
                && pcp_allowed_order(Order(0), z.pageblock_order)
                && z.watermark_fast(
                    Order(0),
                    z.wmark(WMARK_LOW) + missing as u64,
                    highest,
                    flags,
                )
        });
        let Some(z) = zone else {
            return filled + single(&mut pages[first_empty]);
        };
        let Some(mut pcp) = z.pcp_trylock(cpu) else {
            return filled + single(&mut pages[first_empty]);
        };
        let mut got = Vec::new();
        for (i, slot) in pages.iter().enumerate() {
            if slot.is_some() {
                continue;
            }
            match pcp.rmqueue(Order(0), mt, flags, &self.debug.faults) {
                Some(p) => got.push((i, p)),
                None => break,
            }
        }
        drop(pcp);
        if got.is_empty() {
            return filled + single(&mut pages[first_empty]);
        }
        let mut n = filled;
        for &(i, p) in &got {
            if self.alloc_check(z, p, Order(0)) {
                self.prep_new_page(z, p, Order(0), gfp, mt);
                pages[i] = Some(p);
                n += 1;
            }
        }
        n
    }

    // -------------------------------------------------------------------------
    // Contiguous allocation
    // -------------------------------------------------------------------------

    /// `alloc_contig_range()`: allocates exactly the frames `[start, end)`, of any
    /// length, as independent order-0 pages with one reference each (free them with
    /// `free_contig_range`). The pageblocks covering the range are isolated while it
    /// works and this zone's per-CPU lists are drained into them.
    ///
    /// # Errors
    /// `InvalidRange`, `CrossesZone`; `Isolated` if another caller is isolating a
    /// pageblock of the range; `Busy` with the first frame in use. On error every
    /// pageblock is restored and nothing is allocated.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, Pfn, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// za.alloc_contig_range(Pfn(1000), Pfn(1700)).unwrap();
    /// za.free_contig_range(Pfn(1000), 700).unwrap();
    /// ```
    pub fn alloc_contig_range(&self, start: Pfn, end: Pfn) -> Result<(), ContigError> {
        if end <= start {
            return Err(ContigError::InvalidRange);
        }
        let z = self.zone_of(start).ok_or(ContigError::InvalidRange)?;
        if end.0 > z.end_pfn() {
            return Err(ContigError::CrossesZone(Pfn(z.end_pfn())));
        }
        let pb_nr = z.pageblock_order.nr_pages();
        let first_block = start.0 & !(pb_nr - 1);
        let blocks = (first_block..end.0).step_by(pb_nr as usize);
        // 1. Isolate every pageblock, undoing on conflict.
        {
            let mut zl = z.lock();
            for (k, b) in blocks.clone().enumerate() {
                if !zl.isolate_pageblock(Pfn(b)) {
                    for undo in blocks.clone().take(k) {
                        zl.undo_isolate_pageblock(Pfn(undo));
                    }
                    return Err(ContigError::Isolated(Pfn(b)));
                }
            }
        }
        // 2. Per-CPU lists may hold frames of the range: flush them into the
        //    isolated blocks (pcp lock before zone lock).
        for cpu in 0..z.pcp.len() {
            z.pcp_lock(cpu).drain(self.config.pcp.prefetch_buddy);
        }
        // 3. Under one zone-lock hold: check every frame is free, take the range,
        //    restore the pageblocks, give back what lies outside the range.
        let mut zl = z.lock();
        let mut covering = Vec::new();
        let mut p = start.0;
        let mut busy = None;
        while p < end.0 {
            match zl.free_block_containing(Pfn(p)) {
                Some((head, order)) => {
                    covering.push((head, order));
                    p = head.0 + order.nr_pages();
                }
                None => {
                    busy = Some(Pfn(p));
                    break;
                }
            }
        }
        if let Some(b) = busy {
            for blk in blocks {
                zl.undo_isolate_pageblock(Pfn(blk));
            }
            return Err(ContigError::Busy(b));
        }
        for &(head, order) in &covering {
            zl.del_from_free_list(head, order, Migratetype::Isolate);
        }
        for blk in blocks {
            zl.undo_isolate_pageblock(Pfn(blk));
        }
        let outer_start = covering.first().map_or(start.0, |c| c.0 .0);
        let outer_end = covering.last().map_or(end.0, |c| c.0 .0 + c.1.nr_pages());
        for (p, order) in chunks(Pfn(outer_start), start.0 - outer_start, z.max_order)
            .chain(chunks(end, outer_end - end.0, z.max_order))
        {
            zl.free_block_locked(p, order, false);
        }
        drop(zl);
        if self.config.debug.init_on_alloc {
            self.backend.zero_pages(start, end.0 - start.0);
        }
        for p in start.0..end.0 {
            z.frames
                .set_word(z.idx(Pfn(p)), Word::alloc(Order(0), Migratetype::Movable));
        }
        ZoneEvents::inc(&z.events.pgalloc, end.0 - start.0);
        Ok(())
    }

    /// `alloc_contig_pages()`: finds and allocates `nr` contiguous frames in the
    /// zones `gfp` allows, on node `nid`, scanning each zone for a free run. The run
    /// starts at a multiple of `nr` rounded up to a power of two (at most a
    /// pageblock). Free with `free_contig_range`.
    ///
    /// # Errors
    /// `NoMemory` if no free run was found; `InvalidRange` for `nr == 0` or a node
    /// that does not exist.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, Gfp, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let start = za.alloc_contig_pages(1000, Gfp::KERNEL, 0).unwrap(); // not a power of two
    /// za.free_contig_range(start, 1000).unwrap();
    /// ```
    pub fn alloc_contig_pages(&self, nr: u64, gfp: Gfp, nid: u16) -> Result<Pfn, ContigError> {
        if nr == 0 || nid as usize >= self.config.nodes.len() {
            return Err(ContigError::InvalidRange);
        }
        let highest = gfp.highest_zone();
        for z in self.zonelist(nid) {
            if z.zone_type() > highest || (gfp.contains(Gfp::THISNODE) && z.id.node != nid) {
                continue;
            }
            let step = nr.next_power_of_two().min(z.pageblock_order.nr_pages());
            let mut p = z.start_pfn.next_multiple_of(step);
            while p + nr <= z.end_pfn() {
                // Cheap lock-free pre-check before isolating anything.
                let plausible = (p..p + nr).all(|q| {
                    let w = z.frames.word(z.idx(Pfn(q)));
                    !matches!(w.tag(), TAG_ALLOC) && w != Word::HOLE
                });
                if plausible && self.alloc_contig_range(Pfn(p), Pfn(p + nr)).is_ok() {
                    return Ok(Pfn(p));
                }
                p += step;
            }
        }
        Err(ContigError::NoMemory)
    }
}
