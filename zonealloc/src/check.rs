//! The O(n) validator: `check_invariants()` walks every frame and every list.
//! Public API here: `check_invariants` and `state_digest`.
//!
//! Third tier of checks (the first two being typed errors at the API and
//! `debug_assert!`s inside). Takes each zone's lock in turn; meaningful at quiescent
//! points, when no thread is between freezing a block and putting it on a list.
//!
//! What it proves, per zone:
//! * every frame is exactly one of: a hole, the head of a free block, the head of an
//!   allocated block, or a tail inside exactly one block (the frame walk);
//! * every block is aligned to its order and lies in the zone without holes;
//! * every free block is on exactly the list of its order and its pageblock's type,
//!   the lists are well linked, and each list's length equals its counter;
//! * no free block has a free buddy of its order that it was allowed to merge with;
//! * free-page, pageblock and per-type counters equal a recount;
//! * free plus allocated frames equal the present frames.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::frame::{Tag, Word, FLAG_CMA};
use crate::pageblock::COUNTED;
use crate::types::{Migratetype, Order, Pfn, MIGRATE_TYPES};
use crate::zone::ZoneLocked;

/// What `check_invariants()` looked at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InvariantReport {
    /// Frames visited.
    pub frames: u64,
    /// Free blocks on buddy lists.
    pub free_blocks: u64,
    /// Free frames on buddy lists.
    pub free_pages: u64,
    /// Free blocks on per-CPU lists.
    pub pcp_blocks: u64,
    /// Free frames on per-CPU lists.
    pub pcp_pages: u64,
    /// Free blocks held by `LocalCache`s.
    pub cached_blocks: u64,
    /// Free frames held by `LocalCache`s.
    pub cached_pages: u64,
    /// Allocated blocks.
    pub allocated_blocks: u64,
    /// Allocated frames.
    pub allocated_pages: u64,
    /// Frames taken out of circulation as bad.
    pub bad_pages: u64,
    /// Free frames reported (free page reporting) and not handed out since: a
    /// part of `free_pages`.
    pub reported_pages: u64,
    /// Free frames a reporting pass holds off the lists while its reporter runs
    /// (`Frozen` heads the pass owns); only seen from inside a reporter.
    pub reporting_pages: u64,
    /// Frames taken offline (`offline_pages`): holes until onlined.
    pub offline_pages: u64,
    /// Present frames reserved at boot (`Config::reserved`) and not released
    /// (`free_reserved_area`).
    pub reserved_pages: u64,
    /// Frames `cma_alloc` handed out: a part of `allocated_pages`.
    pub cma_pages: u64,
    /// Individual assertions evaluated.
    pub checks: u64,
}

/// The first broken invariant found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvariantViolation {
    /// The frame concerned, if one is.
    pub pfn: Option<Pfn>,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for InvariantViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pfn {
            Some(p) => write!(f, "pfn {p}: {}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for InvariantViolation {}

struct Checker<'r> {
    report: &'r mut InvariantReport,
}

impl Checker<'_> {
    #[inline]
    fn ensure(
        &mut self,
        ok: bool,
        pfn: Option<Pfn>,
        what: impl FnOnce() -> String,
    ) -> Result<(), InvariantViolation> {
        self.report.checks += 1;
        if ok {
            Ok(())
        } else {
            Err(InvariantViolation { pfn, what: what() })
        }
    }
}

impl<B: Backend> ZoneAllocator<B> {
    /// Walks every structure and returns what it checked, or the first violation.
    ///
    /// # Errors
    /// The first broken invariant.
    pub fn check_invariants(&self) -> Result<InvariantReport, InvariantViolation> {
        let mut report = InvariantReport::default();
        for z in self.zones.iter() {
            // Lock order: every CPU's pcp lock (ascending), then the zone lock.
            let pcps: Vec<_> = (0..z.pcp.len()).map(|cpu| z.pcp_lock(cpu)).collect();
            let mut zl = z.lock();
            // Frees deferred by `free_pages_nolock` are merged first: the check
            // sees every free block on the lists.
            zl.free_deferred();
            let mut census = Vec::new();
            let mut c = Checker {
                report: &mut report,
            };
            for p in &pcps {
                let before = census.len();
                p.census(&mut census);
                let pages: u64 = census[before..].iter().map(|&(_, o)| o.nr_pages()).sum();
                c.ensure(pages == p.pcp.count, None, || {
                    format!(
                        "{:?} cpu {}: count {} but lists hold {pages} pages",
                        z.id, p.cpu, p.pcp.count
                    )
                })?;
                c.ensure(p.slot.stats.count.get() == p.pcp.count, None, || {
                    "pcp count mirror out of date".into()
                })?;
            }
            census.sort_unstable();
            c.ensure(census.windows(2).all(|w| w[0].0 != w[1].0), None, || {
                "a block is on two per-CPU lists".into()
            })?;
            check_zone(&zl, &mut c, &census)?;
        }
        self.check_cma(&mut report)?;
        Ok(report)
    }

    /// Each CMA area: its pageblocks are `Cma`, and (unless a `cma_alloc` of it
    /// is under way) its frames held in the bitmap are exactly its `cma_alloc`
    /// pages, as many as its `allocated` count.
    fn check_cma(&self, report: &mut InvariantReport) -> Result<(), InvariantViolation> {
        let mut c = Checker { report };
        let mut in_areas = 0;
        for (k, a) in self.cma.areas.iter().enumerate() {
            let z = &self.zones[a.zone];
            let pb = z.pageblock_order.nr_pages();
            for b in (a.base.0..a.base.0 + a.count).step_by(pb as usize) {
                c.ensure(
                    z.blocks.base_migratetype(Pfn(b)) == Migratetype::Cma,
                    Some(Pfn(b)),
                    || format!("pageblock of CMA area {k} is not of type CMA"),
                )?;
            }
            let Some(_serial) = a.contig.try_lock() else {
                continue;
            };
            let b = a.bitmap.lock();
            let bits = &b.bits;
            let mut held = 0;
            for i in 0..a.count {
                let p = a.base.add(i);
                let w = z.frames.word(z.idx(p));
                let is_cma = w.tag() == Tag::Alloc && w.flags() & FLAG_CMA != 0;
                let bit = bits[(i / 64) as usize] & (1 << (i % 64)) != 0;
                c.ensure(bit == is_cma, Some(p), || {
                    format!("CMA area {k}: bitmap says {bit}, the frame is {w:?}")
                })?;
                held += u64::from(bit);
            }
            c.ensure(held == b.allocated, None, || {
                format!(
                    "CMA area {k}: {held} frames held, allocated says {}",
                    b.allocated
                )
            })?;
            in_areas += held;
        }
        // Every `cma_alloc` page lies in an area (counted by the frame walk).
        if self.cma.areas.iter().all(|a| a.contig.try_lock().is_some()) {
            let walked = c.report.cma_pages;
            c.ensure(walked == in_areas, None, || {
                format!("{walked} cma_alloc pages, {in_areas} held by the areas")
            })?;
        }
        Ok(())
    }

    /// A hash of every frame's state and links, every list head, every counter and
    /// every pageblock byte. Two equal digests mean (with overwhelming probability)
    /// bit-for-bit equal allocator state; tests use it to prove that a refused call
    /// changed nothing. Takes each zone's lock in turn.
    pub fn state_digest(&self) -> u64 {
        let mut h = Fnv::new();
        for z in self.zones.iter() {
            let pcps: Vec<_> = (0..z.pcp.len()).map(|cpu| z.pcp_lock(cpu)).collect();
            let zl = z.lock();
            for p in &pcps {
                h.add(p.pcp.count);
                h.add(p.pcp.high);
                for l in &p.pcp.lists {
                    h.add(((l.head as u64) << 32) | l.tail as u64);
                }
            }
            let t = &z.frames;
            let mut i = 0;
            while i < t.len() as u32 {
                // A lazily split block's frames read as the pages they stand
                // for: the digest does not change when one is materialised.
                let w = t.word(i);
                let (w, n) = if w.is_lazy() {
                    (w.lazy_page(), w.order().nr_pages() as u32)
                } else {
                    (w, 1)
                };
                for j in i..i + n {
                    h.add(w.0);
                    h.add(((t.prev(j) as u64) << 32) | t.next(j) as u64);
                }
                i += n;
            }
            for row in &zl.area.lists {
                for &l in row {
                    let s = l.sentinel();
                    h.add(((t.prev(s) as u64) << 32) | t.next(s) as u64);
                }
            }
            for m in zl.area.nonempty {
                h.add(m as u64);
            }
            h.add(zl.area.nr_reserved_highatomic);
            let rep = &zl.area.report;
            h.add(rep.order as u64);
            h.add(rep.units);
            h.add(rep.in_flight.len() as u64);
            for &w in &rep.reported {
                h.add(w);
            }
            for &w in &zl.area.offline {
                h.add(w);
            }
            h.add(z.counters.nr_free_cma.get());
            h.add(z.counters.nr_offline.get());
            for b in 0..z.blocks.len() {
                h.add(z.blocks.raw(b) as u64);
            }
            let c = &z.counters;
            for row in &c.nr_free {
                for v in row {
                    h.add(v.get());
                }
            }
            for v in &c.nr_blocks {
                h.add(v.get());
            }
            for v in [
                &c.nr_free_pages,
                &c.nr_free_highatomic,
                &c.nr_free_pages_blocks,
                &c.nr_reserved_highatomic,
                &c.nr_reported,
            ] {
                h.add(v.get());
            }
        }
        for a in self.cma.areas.iter() {
            let b = a.bitmap.lock();
            for &w in &b.bits {
                h.add(w);
            }
            h.add(b.allocated);
        }
        h.0
    }
}

/// FNV-1a over 64-bit words.
pub(crate) struct Fnv(pub u64);

impl Fnv {
    pub(crate) fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    #[inline]
    pub(crate) fn add(&mut self, v: u64) {
        for b in v.to_le_bytes() {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }
}

fn check_zone(
    zl: &ZoneLocked<'_>,
    c: &mut Checker<'_>,
    pcp: &[(u32, Order)],
) -> Result<(), InvariantViolation> {
    let z = zl.zone;
    let t = &z.frames;
    let max = z.max_order;
    let pb = z.pageblock_order;
    let mut free_per = [[0u64; MIGRATE_TYPES]; crate::types::NR_ORDERS_MAX];
    let (mut free_pages, mut highatomic, mut blocks_pages) = (0u64, 0u64, 0u64);
    let mut cma_free = 0u64;
    let mut present = 0u64;
    let mut frames_in_blocks = 0u64;
    let pcp_blocks_before = c.report.pcp_blocks;
    let mut reported_units = 0u64;

    // Frame walk: heads and their tails, in address order.
    let mut i = 0u32;
    let n = t.len() as u32;
    let mut offline = 0u64;
    while i < n {
        let pfn = z.pfn_of(i);
        let w = t.word(i);
        c.report.frames += 1;
        let off = zl.is_offline(pfn);
        if off {
            c.ensure(w.tag() == Tag::Hole, Some(pfn), || {
                "a frame of an offline pageblock is not a hole".into()
            })?;
            offline += 1;
            i += 1;
            continue;
        }
        match w.tag() {
            Tag::Hole => {
                // A reserved frame is present memory the allocator does not own.
                if w == Word::RESERVED {
                    present += 1;
                    c.report.reserved_pages += 1;
                }
                i += 1;
                continue;
            }
            Tag::Tail => {
                return Err(InvariantViolation {
                    pfn: Some(pfn),
                    what: "tail frame outside any block".into(),
                })
            }
            _ => {}
        }
        let order = w.order();
        c.ensure(order <= max, Some(pfn), || {
            format!("order {order} above max")
        })?;
        c.ensure(pfn.is_aligned(order), Some(pfn), || {
            format!("head misaligned for order {order}")
        })?;
        let nr = order.nr_pages();
        c.ensure(i as u64 + nr <= n as u64, Some(pfn), || {
            "block runs past the zone".into()
        })?;
        for k in 1..nr as u32 {
            let tw = t.word(i + k);
            c.ensure(tw == Word::TAIL, Some(z.pfn_of(i + k)), || {
                format!(
                    "frame inside block at {pfn} of order {order} is {:?}",
                    crate::frame::FrameState::from(tw)
                )
            })?;
        }
        present += nr;
        frames_in_blocks += nr;
        c.report.frames += nr - 1;
        match w.tag() {
            Tag::Buddy => {
                let mt = z.blocks.migratetype(pfn);
                if order > pb {
                    for b in 0..1u64 << (order.0 - pb.0) {
                        let bp = pfn.add(b << pb.0);
                        c.ensure(z.blocks.migratetype(bp) == mt, Some(bp), || {
                            "free block spans pageblocks of different types".into()
                        })?;
                    }
                }
                free_per[order.idx()][mt.idx()] += 1;
                if mt != Migratetype::Isolate {
                    free_pages += nr;
                    if order >= pb {
                        blocks_pages += nr;
                    }
                }
                if mt == Migratetype::HighAtomic {
                    highatomic += nr;
                }
                if mt == Migratetype::Cma {
                    cma_free += nr;
                }
                c.report.free_blocks += 1;
                c.report.free_pages += nr;
                let rep = &zl.area.report;
                if order.0 >= rep.order {
                    let r = rep.order as u32;
                    let first = ((pfn.0 >> r) - (z.start_pfn >> r)) as usize;
                    reported_units += (first..first + (1usize << (order.0 as u32 - r)))
                        .filter(|&u| rep.is_set(u))
                        .count() as u64;
                }
                // Unmerged buddies.
                if order < max {
                    let b = pfn.buddy(order);
                    if z.contains(b) && t.word(z.idx(b)) == Word::buddy(order) {
                        let bmt = z.blocks.migratetype(b);
                        let allowed = bmt == mt || (mt.is_mergeable() && bmt.is_mergeable());
                        c.ensure(!allowed, Some(pfn), || {
                            format!("free buddies at order {order} left unmerged ({mt} / {bmt})")
                        })?;
                    }
                }
            }
            Tag::Pcp => {
                let found = pcp
                    .binary_search_by_key(&i, |&(h, _)| h)
                    .is_ok_and(|k| pcp[k].1 == order);
                c.ensure(found, Some(pfn), || {
                    "per-CPU state but on no per-CPU list".into()
                })?;
                c.report.pcp_blocks += 1;
                c.report.pcp_pages += nr;
            }
            Tag::Alloc => {
                c.ensure(w.refcount() >= 1, Some(pfn), || {
                    "allocated with refcount 0".into()
                })?;
                // A lazily split block is one allocated page a frame.
                if w.is_lazy() {
                    c.ensure(order.0 > 0 && w.refcount() == 1, Some(pfn), || {
                        "a lazily split block of order 0 or with several references".into()
                    })?;
                    c.report.allocated_blocks += nr;
                } else {
                    c.report.allocated_blocks += 1;
                }
                c.report.allocated_pages += nr;
                if w.flags() & FLAG_CMA != 0 {
                    c.ensure(
                        order.0 == 0 && z.blocks.base_migratetype(pfn) == Migratetype::Cma,
                        Some(pfn),
                        || "a cma_alloc page outside a CMA pageblock, or not order 0".into(),
                    )?;
                    c.report.cma_pages += 1;
                }
            }
            Tag::Cached => {
                c.report.cached_blocks += 1;
                c.report.cached_pages += nr;
            }
            Tag::Frozen if zl.area.report.in_flight.contains(&i) => {
                c.report.reporting_pages += nr;
            }
            Tag::Frozen => {
                return Err(InvariantViolation {
                    pfn: Some(pfn),
                    what: "block frozen (being freed) at a quiescent point".into(),
                })
            }
            _ => c.report.bad_pages += 1,
        }
        i += nr as u32;
    }
    c.ensure(
        c.report.pcp_blocks - pcp_blocks_before == pcp.len() as u64,
        None,
        || "a per-CPU list holds a block not in the per-CPU state".into(),
    )?;
    c.ensure(offline == z.counters.nr_offline.get(), None, || {
        format!(
            "{:?}: {offline} frames in offline pageblocks, nr_offline {}",
            z.id,
            z.counters.nr_offline.get()
        )
    })?;
    c.ensure(present == z.present_now(), None, || {
        format!(
            "{:?}: {present} frames in blocks, {} present",
            z.id,
            z.present_now()
        )
    })?;
    c.report.offline_pages += offline;
    let _ = frames_in_blocks;

    // Free page reporting: every reported unit inside a free block of at least
    // the reporting order, and the counts agree.
    let rep = &zl.area.report;
    let set: u64 = rep.reported.iter().map(|w| w.count_ones() as u64).sum();
    c.ensure(set == reported_units, None, || {
        format!(
            "{:?}: {set} units marked reported, {reported_units} of them inside free blocks",
            z.id
        )
    })?;
    c.ensure(rep.units == set, None, || {
        format!(
            "{:?}: reported unit count {} != {set} bits",
            z.id, rep.units
        )
    })?;
    let pages = if rep.order == crate::zone::ReportArea::OFF {
        0
    } else {
        set << rep.order
    };
    c.ensure(z.counters.nr_reported.get() == pages, None, || {
        format!(
            "{:?}: nr_reported {} != {pages}",
            z.id,
            z.counters.nr_reported.get()
        )
    })?;
    c.report.reported_pages += pages;

    // Lists: links, states, types, counts.
    for o in 0..=max.idx() {
        for mt in 0..MIGRATE_TYPES {
            let s = zl.area.lists[o][mt].sentinel();
            let mut len = 0u64;
            let mut prev = s;
            let mut cur = t.next(s);
            while cur != s {
                c.ensure((cur as usize) < t.len(), None, || {
                    format!("free_list[{o}][{mt}] links to {cur}, outside the zone's frames")
                })?;
                let pfn = z.pfn_of(cur);
                c.ensure(len < z.spanned, Some(pfn), || "list cycle".into())?;
                c.ensure(t.prev(cur) == prev, Some(pfn), || "broken prev link".into())?;
                c.ensure(
                    t.word(cur) == Word::buddy(Order(o as u8)),
                    Some(pfn),
                    || format!("on free_list[{o}][{mt}] but not a free block of that order"),
                )?;
                c.ensure(z.blocks.migratetype(pfn).idx() == mt, Some(pfn), || {
                    format!(
                        "on free_list[{o}][{mt}] but its pageblock is {}",
                        z.blocks.migratetype(pfn)
                    )
                })?;
                prev = cur;
                cur = t.next(cur);
                len += 1;
            }
            c.ensure(t.prev(s) == prev, None, || {
                format!("free_list[{o}][{mt}] tail mismatch")
            })?;
            c.ensure(len == free_per[o][mt], None, || {
                format!(
                    "free_list[{o}][{mt}] has {len} entries, frame walk found {}",
                    free_per[o][mt]
                )
            })?;
            let counted = z.counters.nr_free[o][mt].get();
            c.ensure(counted == len, None, || {
                format!("nr_free[{o}][{mt}] = {counted}, list length {len}")
            })?;
            let bit = zl.area.nonempty[mt] & (1 << o) != 0;
            c.ensure(bit == (len > 0), None, || {
                format!("nonempty bit of [{o}][{mt}] wrong")
            })?;
        }
    }

    // Counters.
    let zc = &z.counters;
    c.ensure(zc.nr_free_pages.get() == free_pages, None, || {
        format!(
            "nr_free_pages {} != recount {free_pages}",
            zc.nr_free_pages.get()
        )
    })?;
    c.ensure(zc.nr_free_highatomic.get() == highatomic, None, || {
        "nr_free_highatomic != recount".into()
    })?;
    c.ensure(zc.nr_free_cma.get() == cma_free, None, || {
        format!("nr_free_cma {} != recount {cma_free}", zc.nr_free_cma.get())
    })?;
    let cma_blocks = (0..z.blocks.len())
        .filter(|&b| z.blocks.base_migratetype(z.blocks.first_pfn_of(b)) == Migratetype::Cma)
        .count() as u64;
    c.ensure(cma_blocks << pb.0 == z.cma_pages, None, || {
        format!(
            "{:?}: {cma_blocks} CMA pageblocks, cma_pages {}",
            z.id, z.cma_pages
        )
    })?;
    c.ensure(zc.nr_free_pages_blocks.get() == blocks_pages, None, || {
        "nr_free_pages_blocks != recount".into()
    })?;
    let mut blocks = [0u64; MIGRATE_TYPES];
    for b in 0..z.blocks.len() {
        if z.blocks.raw(b) & COUNTED != 0 {
            blocks[z.blocks.migratetype(z.blocks.first_pfn_of(b)).idx()] += 1;
        }
    }
    for (mt, &n) in blocks.iter().enumerate() {
        let got = zc.nr_blocks[mt].get();
        c.ensure(got == n, None, || {
            format!("nr_blocks[{mt}] = {got}, recount {n}")
        })?;
    }
    c.ensure(
        zc.nr_reserved_highatomic.get() == zl.area.nr_reserved_highatomic,
        None,
        || "reserved highatomic mirror out of date".into(),
    )?;
    Ok(())
}
