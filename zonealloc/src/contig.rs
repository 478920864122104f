//! Contiguous and bulk paths: `free_contig_range`, `free_pages_bulk`,
//! `alloc_pages_bulk`, `alloc_contig_range` and `alloc_contig_pages`.
//!
//! Layer on top of the allocator's single-block paths. Takes the per-CPU and zone
//! locks through them; `alloc_contig_range` isolates pageblocks (see `isolate`).
//! Public API here: the five calls above.
//!
//! # Freeing a run of order-0 pages as large blocks (Linux 2026: `free_contig_range`, `vfree`)
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
//!
//! # No heap
//!
//! None of these calls uses the heap, however long the range or the array: a
//! kernel whose heap takes its pages from the allocator may call them. A
//! multi-page free records which pages its first phase took in a fixed `Claim`
//! (nothing while every page was taken, then a bit each for 512 entries, then a
//! tag in the taken pages' own words); its runs are found again by the second
//! phase rather than listed; an array that is not in ascending order is read a
//! window of 64 distinct pages at a time (`Entries`) instead of sorted in a copy.
//! `alloc_pages_bulk` fills the caller's slots 64 at a time under the CPU's lock,
//! and `alloc_contig_range` walks the free blocks covering its range twice under
//! one zone-lock hold instead of listing them.

use crate::allocate::Head;
use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::error::FreeError;
use crate::frame::{
    Tag, Word, CLAIM_TAG_MAX, FLAG_GUARDED, FLAG_ISOLATED, FLAG_LAZY, FLAG_MIGRATING, FLAG_VMALLOC,
};
use crate::free::{Holder, Via};
use crate::gfp::{AllocFlags, Gfp};
use crate::pcp::pcp_allowed_order;
use crate::sync::backoff;
use crate::types::Wmark;
use crate::types::{Migratetype, Order, Pfn};
use crate::zone::{chunks, Zone};

/// Why a contiguous allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContigError {
    /// The range is empty, reversed, or in no zone.
    InvalidRange,
    /// The range crosses a zone boundary.
    CrossesZone(Pfn),
    /// A frame of the range is in use (allocated, a hole, or bad), or lies in a
    /// CMA area.
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

    /// `free_contig_range()`: drops one reference on each order-0 page of
    /// `[pfn, pfn + nr)`; the pages that reach zero are freed as the largest
    /// naturally aligned blocks (see the [module documentation](crate::contig)).
    ///
    /// # Errors
    /// If the range leaves its zone, or any page of it is not an allocated order-0
    /// page (free, a hole, a tail or head of a larger block, a guarded or page_frag
    /// block), nothing is changed and the first such page is reported. Of two calls
    /// racing to free one page, exactly one succeeds (see `free_pages_bulk`).
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
        self.free_contig_range_by(pfn, nr, 0, None)
    }

    /// `free_contig_range` as if called on CPU `cpu` (any number, taken modulo
    /// `Config::nr_cpus`): chunks of an order with per-CPU lists go to that CPU's
    /// lists, never to the calling thread's per-CPU stack. For a caller that
    /// simulates CPUs, as `alloc_pages_on` and `free_pages_on` do; a trace replay
    /// frees a block the kernel allocated before the trace this way, so that it
    /// lands where the kernel's free of it did (the per-CPU list of its order, or
    /// the buddy lists).
    ///
    /// # Errors
    /// As `free_contig_range`.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator};
    /// let mut config = Config::with_bytes(64 << 20);
    /// config.nr_cpus = 2;
    /// let za = ZoneAllocator::new(config).unwrap();
    /// let pfn = za.alloc_pages_on(1, Gfp::KERNEL, Order(4)).unwrap();
    /// za.split_page(pfn, Order(4)).unwrap();
    /// // One order-2 block onto CPU 1's order-2 list, and one order-3 block
    /// // (pfn + 8 is 8-aligned) onto its order-3 list.
    /// za.free_contig_range_on(1, Pfn(pfn.0 + 4), 12).unwrap();
    /// assert_eq!(za.pcp_stats()[0].cpus[1].count, 12);
    /// ```
    pub fn free_contig_range_on(&self, cpu: usize, pfn: Pfn, nr: u64) -> Result<(), FreeError> {
        self.free_contig_range_by(pfn, nr, 0, Some(cpu))
    }

    /// `free_contig_range` of pages that each carry head flags `owner` (0: the
    /// raw API's; `FLAG_CMA`: `cma_release`'s).
    pub(crate) fn free_contig_range_by(
        &self,
        pfn: Pfn,
        nr: u64,
        owner: u8,
        on: Option<usize>,
    ) -> Result<(), FreeError> {
        let z = self.zone_of_range(pfn, nr)?;
        // The CPU first: owner code (`Config::cpu_id`) runs before a page is taken.
        let via = match on {
            Some(cpu) => Via::Cpu(cpu % self.config.nr_cpus.max(1)),
            None => Via::Here(self.current_cpu()),
        };
        self.free_range_in(z, pfn, nr, owner, via)
    }

    /// Both phases over `[pfn, pfn + nr)`, which lies in zone `z`: one reference
    /// dropped on each page, the pages that reach zero freed as aligned blocks
    /// through `via`; on a bad page nothing is changed and its error returned.
    fn free_range_in(
        &self,
        z: &Zone,
        pfn: Pfn,
        nr: u64,
        owner: u8,
        via: Via,
    ) -> Result<(), FreeError> {
        // Exactly one lazily split block (what `vfree` and `free_contig_range`
        // of a block just split free): one compare-and-swap takes it, with no
        // claim record, and it is freed as one block.
        if nr > 1 {
            let idx = z.idx(pfn);
            let w = z.frames.word(idx);
            if w.is_lazy()
                && w.order().nr_pages() == nr
                && w.flags() & !FLAG_LAZY == owner
                && z.frames.cas_word(idx, w, Word::frozen(w.order())).is_ok()
            {
                self.release_frozen(z, pfn, w.order(), via);
                return Ok(());
            }
        }
        let mut claim = Claim::new();
        let pages = (0..nr).map(|i| (pfn.add(i), 1));
        let all = self.claim_pages(z, pages.clone(), &mut claim, 0, owner)?;
        self.commit_pages(z, pages, (!all).then_some((&claim, 0)), via, owner);
        Ok(())
    }

    /// Phase one of the multi-page frees: for each `(page, k)` in ascending pfn
    /// order, checks that the page is a plain allocated order-0 page with at least
    /// `k` references, and takes those that would reach zero (`Word::claimed`: a
    /// racing multi-page free stops at it, a racing single-page call waits until
    /// this call has freed or restored it). On the first bad page every page taken
    /// is restored and its error returned: nothing changed, and no single-page call
    /// was refused meanwhile.
    ///
    /// Taking pages in ascending order makes two racing calls meet first at their
    /// lowest common page: whoever takes it goes on, the other stops there, so of
    /// two frees of one page exactly one succeeds.
    /// `claim` records which pages were taken, page `i` of `pages` being entry
    /// `base + i` of the call (see `Claim`). `owner` is the owner flag every page
    /// must carry: 0 for the raw API, `FLAG_VMALLOC` for a vmalloc area's pages,
    /// `FLAG_CMA` for `cma_release`'s. Returns whether every page was taken (none
    /// keeps a reference).
    fn claim_pages(
        &self,
        z: &Zone,
        pages: impl Iterator<Item = (Pfn, u32)> + Clone,
        claim: &mut Claim,
        base: usize,
        owner: u8,
    ) -> Result<bool, FreeError> {
        let mut all = true;
        // The last word checked and found takeable with its `k`: the pages of a
        // split block all carry the same word, so the checks run once a block.
        let mut passed: Option<(Word, u32)> = None;
        let mut spins = 0;
        let mut it = pages.clone().enumerate();
        while let Some((i, (p, k))) = it.next() {
            let entry = base + i;
            let idx = z.idx(p);
            let mut w = z.frames.word(idx);
            let taken = loop {
                if passed != Some((w, k)) {
                    let mut refusal = None;
                    if w.tag() != Tag::Alloc || w.flags() & FLAG_LAZY != 0 {
                        match self.claim_lazy(z, p, k, w, owner, it.clone(), claim, entry) {
                            Lazy::Plain => {}
                            Lazy::Refused(e) => refusal = Some(e),
                            Lazy::Again => {
                                backoff(&mut spins);
                                w = z.frames.word(idx);
                                continue;
                            }
                            Lazy::Whole(n) => {
                                // Its tails are this call's now: skip them.
                                it.nth(n - 2);
                                break true;
                            }
                        }
                    }
                    if let Some(e) = refusal.or_else(|| self.claim_refusal(z, p, k, w, owner)) {
                        self.unclaim(z, pages.take(i), claim, base, owner);
                        return Err(e);
                    }
                    if w.refcount() > k {
                        break false;
                    }
                    passed = Some((w, k));
                }
                // `claimed` keeps the type byte, so the page can be restored as it
                // was; and it tells a racing single-page call on it to wait for the
                // outcome rather than answer `AlreadyFree` (see `Word::claimed`).
                let held = claim.word(entry, Word::claimed(w.aux()));
                match z.frames.cas_word(idx, w, held) {
                    Ok(_) => break true,
                    Err(cur) => w = cur,
                }
            };
            if taken {
                claim.took(entry);
            } else {
                all = false;
                claim.kept(entry);
            }
        }
        Ok(all)
    }

    /// `claim_pages`' step for page `p` (word `w`, `k` references to drop, entry
    /// `entry` of the call) where `w` may belong to a lazily split block (see
    /// `FLAG_LAZY`); `rest` yields the run's entries after `p`.
    ///
    /// * `p` heads such a block that the run covers, one reference a page, owned
    ///   by `owner`: the block is taken whole with one compare-and-swap
    ///   (`claimed_block`; racing single-page calls on its pages wait for the
    ///   outcome, as for a claimed page). `Whole(pages)`.
    /// * `p` lies in such a block otherwise: the block is materialised, or its
    ///   holder waited for, unless its pages would be refused anyway. `Again`:
    ///   read `p`'s word again.
    /// * `Refused`: such a block's page that the ordinary checks of its page
    ///   (`lazy_page`) refuse, with their error.
    /// * else `Plain`: the ordinary checks of `w` decide.
    #[allow(clippy::too_many_arguments)]
    fn claim_lazy(
        &self,
        z: &Zone,
        p: Pfn,
        k: u32,
        w: Word,
        owner: u8,
        rest: impl Iterator<Item = (usize, (Pfn, u32))>,
        claim: &mut Claim,
        entry: usize,
    ) -> Lazy {
        let (head, hw) = if w.is_lazy() || w.is_materializing() {
            (p, w)
        } else if w.tag() == Tag::Tail {
            match Self::lazy_block_of(z, p) {
                Some(b) => b,
                // Materialised since `w` was read (see `unlazy_tail`), or an
                // ordinary tail.
                None if z.frames.word(z.idx(p)) != Word::TAIL => return Lazy::Again,
                None => return Lazy::Plain,
            }
        } else {
            return Lazy::Plain;
        };
        if !hw.is_lazy() {
            // Held: a materialisation ends in a moment; a block another
            // multi-page free took is refused as a claimed page is.
            return if hw.is_materializing() {
                Lazy::Again
            } else {
                Lazy::Plain
            };
        }
        // Refused as its page would be: nothing to materialise.
        if let Some(e) = self.claim_refusal(z, p, k, hw.lazy_page(), owner) {
            return Lazy::Refused(e);
        }
        let n = hw.order().nr_pages() as usize;
        let whole = head == p
            && k == 1
            && rest
                .take(n - 1)
                .enumerate()
                .filter(|&(j, (_, (q, kq)))| q.0 == p.0 + 1 + j as u64 && kq == 1)
                .count()
                == n - 1;
        if whole {
            let held = claim.word(entry, Word::claimed_block(hw.order(), hw.aux()));
            if z.frames.cas_word(z.idx(p), hw, held).is_ok() {
                return Lazy::Whole(n);
            }
        } else {
            Self::materialize(z, head, hw);
        }
        Lazy::Again
    }

    /// Why `claim_pages` may not drop `k` references of page `p`, whose word is
    /// `w`, for `owner` (its owner flag): `None` if it may.
    fn claim_refusal(&self, z: &Zone, p: Pfn, k: u32, w: Word, owner: u8) -> Option<FreeError> {
        if w.tag() != Tag::Alloc {
            Some(self.classify(z, p, w))
        } else if w.order().0 != 0 {
            Some(FreeError::WrongOrder {
                pfn: p,
                given: Order(0),
                actual: w.order(),
            })
        } else if w.flags() & FLAG_GUARDED != 0 {
            Some(FreeError::Guarded(p))
        } else if w.flags() & !(FLAG_ISOLATED | FLAG_MIGRATING) != owner {
            // Another owner's page (a fragment block's, a vmalloc area's), or, for
            // vmalloc, a page that is not its own.
            Some(FreeError::Busy(p))
        } else if w.refcount() < k + isolated_ref(w) {
            Some(FreeError::AlreadyFree(p))
        } else {
            None
        }
    }

    /// Undoes `claim_pages` for the pages before the bad one (page `i` of `pages`
    /// being entry `base + i`).
    #[cold]
    fn unclaim(
        &self,
        z: &Zone,
        pages: impl Iterator<Item = (Pfn, u32)>,
        claim: &Claim,
        base: usize,
        owner: u8,
    ) {
        let mut it = pages.enumerate();
        while let Some((i, (p, k))) = it.next() {
            let idx = z.idx(p);
            let w = z.frames.word(idx);
            if claim.holds(base + i, w) {
                if w.order().0 > 0 {
                    // A lazily split block taken whole: its head restored, its
                    // tails (still `Tail`) left alone.
                    z.frames
                        .set_word(idx, Word::lazy(w.order(), w.aux(), owner));
                    it.nth(w.order().nr_pages() as usize - 2);
                    continue;
                }
                z.frames
                    .set_word(idx, Word::new(Tag::Alloc, 0, w.aux(), k).with_flags(owner));
            }
        }
    }

    /// Phase two: drops the references of the pages not taken (those that reach
    /// zero now are freed too) and frees every run of zero-reference pages as
    /// aligned blocks. `taken`: phase one's record and the bit of `pages`' first
    /// page in it, or `None` if phase one took every page; `pages` is then one
    /// run of consecutive frames (as every caller passes them), freed whole with
    /// no page looked at again.
    fn commit_pages(
        &self,
        z: &Zone,
        pages: impl Iterator<Item = (Pfn, u32)> + Clone,
        taken: Option<(&Claim, usize)>,
        via: Via,
        owner: u8,
    ) {
        let Some((claim, base)) = taken else {
            let mut it = pages.clone();
            if let Some((first, _)) = it.next() {
                let nr = 1 + it.count() as u64;
                debug_assert!(pages
                    .enumerate()
                    .all(|(i, (p, _))| p.0 == first.0 + i as u64));
                // Every page is the caller's now.
                self.free_run(z, first, nr, via);
            }
            return;
        };
        let mut run: Option<(u64, u64)> = None;
        // Entries before this one are the tails of a lazily split block taken
        // whole (see `claim_lazy`), this call's with their head.
        let mut tails_to = 0;
        for (i, (p, k)) in pages.enumerate() {
            // A claimed page keeps its word until `free_run` writes its chunk.
            let taken = i < tails_to || {
                let w = z.frames.word(z.idx(p));
                let held = claim.holds(base + i, w);
                if held && w.order().0 > 0 {
                    tails_to = i + w.order().nr_pages() as usize;
                }
                held
            };
            let zero = taken || self.put_order0(z, p, k, owner);
            if zero {
                match &mut run {
                    Some((s, n)) if *s + *n == p.0 => *n += 1,
                    _ => {
                        if let Some((s, n)) = run.replace((p.0, 1)) {
                            self.free_run(z, Pfn(s), n, via);
                        }
                    }
                }
            }
        }
        if let Some((s, n)) = run {
            self.free_run(z, Pfn(s), n, via);
        }
    }

    /// Drops `k` references on an order-0 page that had more than `k` when it was
    /// checked; `true` if it reached zero (then the page is the caller's). A page
    /// whose state changed under us (every other reference dropped by racing owners
    /// who held none of ours, or the page now another owner's) counts as still
    /// referenced.
    #[inline]
    fn put_order0(&self, z: &Zone, pfn: Pfn, k: u32, owner: u8) -> bool {
        let idx = z.idx(pfn);
        let mut w = z.frames.word(idx);
        loop {
            // An isolated page keeps compaction's reference (see `migrate`).
            if w.tag() != Tag::Alloc
                || w.order().0 != 0
                || w.flags() & !(FLAG_ISOLATED | FLAG_MIGRATING) != owner
                || w.refcount() < k + isolated_ref(w)
            {
                return false;
            }
            let last = w.refcount() == k;
            let new = if last {
                Word::TAIL
            } else {
                w.with_refcount(w.refcount() - k)
            };
            match z.frames.cas_word(idx, w, new) {
                Ok(_) => return last,
                Err(cur) => w = cur,
            }
        }
    }

    /// Frees a run of order-0 pages the caller owns (claimed, `Tail`, or a lazily
    /// split block taken whole) as aligned blocks.
    fn free_run(&self, z: &Zone, pfn: Pfn, nr: u64, via: Via) {
        for (p, order) in chunks(pfn, nr, z.max_order) {
            // The chunk's frozen head first, then its tails: a single-page call
            // waiting on a claimed page of the chunk, or on a lazily split block's
            // held head, reads again once the page is `Tail` and finds the chunk
            // free (`AlreadyFree`), never a tail with no block around it.
            let idx = z.idx(p);
            z.frames.set_word(idx, Word::frozen(order));
            z.frames
                .view()
                .set_words(idx + 1, order.nr_pages() as u32 - 1, 0, Word::TAIL);
            self.release_frozen(z, p, order, via);
        }
    }

    /// `free_pages_bulk()`: drops one reference on every page of `pages` (order-0
    /// pages, any order of entries), freeing runs of consecutive frames as large
    /// blocks with `free_contig_range`'s machinery. The pages are taken in
    /// ascending pfn order whatever order the array has.
    ///
    /// # Errors
    /// If any entry is not an allocated order-0 page, or a page appears more often
    /// than it has references, nothing is changed and the first bad page (in
    /// ascending pfn order) is reported. Of two calls racing to free one page with
    /// one reference, exactly one succeeds and the other is refused with nothing
    /// changed. Pages with several references are checked first and released
    /// afterwards: an owner who frees more references than it holds, racing with
    /// this call, can take the last one first (references have no owners).
    ///
    /// # Cost
    /// No heap call (see the [module documentation](crate::contig)). An array in
    /// ascending pfn order is read as it is; any other is read in windows of 64
    /// distinct pages, each found with one pass over the whole array, so an
    /// unsorted array of `n` pages costs about `n * n / 64` steps for each of the
    /// two phases: sort a large one first (vmalloc sorts its areas' arrays).
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
        self.free_pages_bulk_by(pages, Holder::Raw)
    }

    /// `free_pages_bulk` on behalf of `by`: the raw API, or a vmalloc space for
    /// the pages of one of its areas (each must carry `FLAG_VMALLOC`).
    pub(crate) fn free_pages_bulk_by(&self, pages: &[Pfn], by: Holder) -> Result<(), FreeError> {
        let owner = if by == Holder::Vmalloc {
            FLAG_VMALLOC
        } else {
            0
        };
        // One page (a one-page vmalloc area): nothing to take back if a later page
        // is bad, so no two phases; one compare-and-swap frees it.
        if let [p] = *pages {
            return self.free_single_page(p, owner);
        }
        // Distinct pages, ascending, each with how often it is listed.
        let ascending = pages.windows(2).all(|w| w[0] < w[1]);
        // One run of consecutive frames in one zone (a vmalloc area's array, as a
        // rule): freed as `free_contig_range` frees its range, which is what the
        // general path below would do with it, less its bookkeeping per run.
        if let (true, Some(&first), Some(&last)) = (ascending, pages.first(), pages.last()) {
            let n = pages.len() as u64;
            if last.0 - first.0 == n - 1 {
                if let Ok(z) = self.zone_of_range(first, n) {
                    // The CPU first, as below.
                    let via = Via::Here(self.current_cpu());
                    return self.free_range_in(z, first, n, owner, via);
                }
            }
        }
        // Distinct pages, ascending, each with how often it is listed: the array
        // itself when it is ascending, else chosen from it a window at a time
        // (see `Entries`); walked once for each phase.
        let entries = Entries::new(pages, ascending);
        // The CPU first: owner code (`Config::cpu_id`) runs before a page is taken.
        let cpu = self.current_cpu();
        // Phase one, run by run (runs of consecutive frames in one zone): take the
        // pages. Nothing is kept of the runs: both phases find them again.
        let mut claim = Claim::new();
        let mut e = entries;
        let mut i = 0;
        while let Some(run) = self.next_run(&e) {
            let taken = run.and_then(|(z, k)| {
                self.claim_pages(z, e.take(k), &mut claim, i, owner)
                    .map(|_| k)
            });
            match taken {
                Ok(k) => {
                    e.skip_entries(k);
                    i += k;
                }
                Err(err) => {
                    // The failed run gave back its own; the runs before it follow.
                    self.unclaim_runs(entries, i, &claim, owner);
                    return Err(err);
                }
            }
        }
        // Phase two: release them. A run that ends before the first page that
        // keeps references had every page taken: it goes whole.
        let mut e = entries;
        let mut i = 0;
        while let Some(Ok((z, k))) = self.next_run(&e) {
            let taken = (i + k > claim.first_kept()).then_some((&claim, i));
            self.commit_pages(z, e.take(k), taken, Via::Here(cpu), owner);
            e.skip_entries(k);
            i += k;
        }
        Ok(())
    }

    /// The run of `free_pages_bulk` at `e`'s next entry: its zone and its length
    /// (entries of consecutive frames, ending at the zone's end); `None` past
    /// the last entry; `OutOfRange` for a frame in no zone.
    fn next_run(&self, e: &Entries<'_>) -> Option<Result<(&Zone, usize), FreeError>> {
        let (start, _) = { *e }.next()?;
        let Some(z) = self.zone_of(start) else {
            return Some(Err(FreeError::OutOfRange(start)));
        };
        let in_zone = usize::try_from(z.start_pfn + z.spanned - start.0).unwrap_or(usize::MAX);
        Some(Ok((z, e.run_len(in_zone))))
    }

    /// Undoes phase one of `free_pages_bulk` for its runs before entry `end`
    /// (the failed run gave back its own pages).
    #[cold]
    fn unclaim_runs(&self, entries: Entries<'_>, end: usize, claim: &Claim, owner: u8) {
        let mut e = entries;
        let mut i = 0;
        while i < end {
            let Some(Ok((z, k))) = self.next_run(&e) else {
                return;
            };
            self.unclaim(z, e.take(k), claim, i, owner);
            e.skip_entries(k);
            i += k;
        }
    }

    /// `free_pages_bulk_by` of a one-page array: the checks of `claim_pages`, then
    /// one compare-and-swap that either drops a reference the page has to spare
    /// (as `put_order0`) or takes the last one and frees the page, as the commit
    /// phase would. Of two racing frees of the page, exactly one takes it; the
    /// other sees a free page and is refused.
    fn free_single_page(&self, p: Pfn, owner: u8) -> Result<(), FreeError> {
        // The CPU first, as in the multi-page path: owner code runs before the
        // page is taken.
        let cpu = self.current_cpu();
        let z = self.zone_of(p).ok_or(FreeError::OutOfRange(p))?;
        let idx = z.idx(p);
        let mut w = z.frames.word(idx);
        let mut spins = 0;
        loop {
            // A page of a lazily split block: one of its own first.
            if w.tag() != Tag::Alloc || w.flags() & FLAG_LAZY != 0 {
                match self.claim_lazy(z, p, 1, w, owner, core::iter::empty(), &mut Claim::new(), 0)
                {
                    Lazy::Again => {
                        backoff(&mut spins);
                        w = z.frames.word(idx);
                        continue;
                    }
                    Lazy::Refused(e) => return Err(e),
                    Lazy::Plain | Lazy::Whole(_) => {}
                }
            }
            if let Some(e) = self.claim_refusal(z, p, 1, w, owner) {
                return Err(e);
            }
            let last = w.refcount() == 1;
            let new = if last {
                Word::frozen(Order(0))
            } else {
                w.with_refcount(w.refcount() - 1)
            };
            match z.frames.cas_word(idx, w, new) {
                Ok(_) if last => break,
                Ok(_) => return Ok(()),
                Err(cur) => w = cur,
            }
        }
        self.release_frozen(z, p, Order(0), Via::Here(cpu));
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
        self.alloc_pages_bulk_as(gfp, pages, Head::PLAIN)
    }

    /// `alloc_pages_bulk` of pages published as `head` (a vmalloc area's pages
    /// come marked as its own).
    pub(crate) fn alloc_pages_bulk_as(
        &self,
        gfp: Gfp,
        pages: &mut [Option<Pfn>],
        head: Head,
    ) -> usize {
        if self
            .debug
            .faults
            .should_fail(crate::fault::FaultSite::Alloc)
        {
            return pages.iter().filter(|p| p.is_some()).count();
        }
        let filled = pages.iter().filter(|p| p.is_some()).count();
        let missing = pages.len() - filled;
        if missing == 0 {
            return filled;
        }
        let single = |slot: &mut Option<Pfn>| {
            *slot = self
                .alloc_pages_local(self.current_cpu(), gfp, Order(0), head)
                .ok();
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
        let flags = AllocFlags::checking(Wmark::Low).cma_for(gfp);
        let highest = gfp.highest_zone();
        // The first eligible zone with room for the whole request above its low mark.
        let zone = self.zonelist(self.cpu_to_node(cpu)).find(|z| {
            z.zone_type() <= highest
                && pcp_allowed_order(Order(0), z.pageblock_order)
                && z.watermark_fast(
                    Order(0),
                    z.wmark(Wmark::Low) + missing as u64,
                    highest,
                    flags,
                )
        });
        let Some(z) = zone else {
            return filled + single(&mut pages[first_empty]);
        };
        let Some(pcp) = z.pcp_trylock(cpu) else {
            return filled + single(&mut pages[first_empty]);
        };
        // Windows of up to `ALLOC_BULK_WINDOW` slots: the empty ones filled under
        // one hold of the CPU's lock (which ones, a bit each), then checked and
        // published with the lock dropped. The slots are the caller's, so no
        // list of the pages is kept.
        let mut pcp = Some(pcp);
        let mut n = filled;
        let mut taken = false;
        let mut i = 0;
        while i < pages.len() {
            let Some(mut lock) = pcp.take().or_else(|| z.pcp_trylock(cpu)) else {
                // The list is busy between two windows: the rest one at a time.
                for slot in pages[i..].iter_mut().filter(|p| p.is_none()) {
                    if single(slot) == 0 {
                        break;
                    }
                    n += 1;
                }
                return n;
            };
            let base = i;
            let mut mine = 0u64;
            let mut empty = false;
            while i < pages.len() && i - base < ALLOC_BULK_WINDOW {
                if pages[i].is_none() {
                    let Some(p) = lock.rmqueue(Order(0), mt, flags, &self.debug.faults, true)
                    else {
                        empty = true;
                        break;
                    };
                    pages[i] = Some(p);
                    mine |= 1 << (i - base);
                }
                i += 1;
            }
            drop(lock);
            taken |= mine != 0;
            while mine != 0 {
                let slot = base + mine.trailing_zeros() as usize;
                mine &= mine - 1;
                let p = pages[slot].expect("filled above");
                if self.debug.alloc_check(&self.backend, z, p, Order(0)) {
                    self.prep_new_page(z, p, Order(0), gfp, mt, head);
                    n += 1;
                } else {
                    pages[slot] = None;
                }
            }
            if empty {
                break;
            }
        }
        if !taken {
            return filled + single(&mut pages[first_empty]);
        }
        n
    }

    // -------------------------------------------------------------------------
    // Contiguous allocation
    // -------------------------------------------------------------------------

    /// `alloc_contig_range()`: allocates exactly the frames `[start, end)`, of any
    /// length, as independent order-0 pages with one reference each (free them with
    /// `free_contig_range`). The pageblocks covering the range are isolated while it
    /// works and this zone's per-CPU lists are drained into them, and every
    /// `LocalCache` too where one holds a frame of the range.
    ///
    /// # Errors
    /// `InvalidRange`, `CrossesZone`; `Isolated` if another caller is isolating a
    /// pageblock of the range; `Busy` with the first frame in use, or the first
    /// frame of the range in a CMA area (whose memory `cma_alloc` hands out).
    ///
    /// On error nothing is allocated, no frame changes owner, and every pageblock
    /// keeps its type. A range with an allocated frame, a hole or a bad frame in it
    /// (seen without the lock before anything is isolated) fails with `Busy` having
    /// changed nothing at all (`state_digest()` is unchanged). Only a frame that
    /// was free then and is taken by another thread while the range is isolated
    /// makes the call fail later; by then this zone's per-CPU lists have been drained
    /// into the buddy lists and the free blocks of the range's pageblocks may have
    /// been merged and moved within their lists, as Linux's failed
    /// `alloc_contig_range` leaves them.
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
        // Cheap lock-free pre-check: a frame that is allocated, a hole or bad now
        // fails the call before anything is isolated or drained. Frames a
        // `LocalCache` holds are free, and are drained below.
        let mut cached = false;
        for p in (start.0..end.0).map(Pfn) {
            match self.maybe_free(z, p) {
                Seen::Busy => return Err(ContigError::Busy(p)),
                Seen::Cached => cached = true,
                Seen::Free => {}
            }
        }
        let pb_nr = z.pageblock_order.nr_pages();
        let first_block = start.0 & !(pb_nr - 1);
        let blocks = (first_block..end.0).step_by(pb_nr as usize);
        // A CMA area's memory is had through `cma_alloc` alone (Linux's
        // `alloc_contig_range(MIGRATE_MOVABLE)` answers -EBUSY there).
        if let Some(b) = blocks
            .clone()
            .find(|&b| z.blocks.base_migratetype(Pfn(b)) == Migratetype::Cma)
        {
            return Err(ContigError::Busy(Pfn(b.max(start.0))));
        }
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
        //    isolated blocks (pcp lock before zone lock). So do the caches, where
        //    the pre-check saw one holding a frame of it (each cache's lock is
        //    taken in turn, an idle owner's too, as `drain_all_pages` does).
        if cached {
            self.drain_caches();
        }
        for cpu in 0..z.pcp.len() {
            z.pcp_lock(cpu).drain(self.config.pcp.prefetch_buddy);
        }
        // 3. Take the range if every frame is free, else undo the isolation.
        if let Err(b) = self.take_isolated_range(z, start, end) {
            let mut zl = z.lock();
            for blk in blocks {
                zl.undo_isolate_pageblock(Pfn(blk));
            }
            return Err(ContigError::Busy(b));
        }
        self.commit_contig(z, start, end, 0);
        Ok(())
    }

    /// The last step of `alloc_contig_range()`, with the pageblocks holding
    /// `[start, end)` isolated: under one zone-lock hold, checks that every frame
    /// of the range is free, takes the range off the lists, ends the isolation and
    /// gives back what of the covering free blocks lies outside the range. The
    /// range's frames are `Tail` then, the caller's. `Err` with the first frame in
    /// use, the pageblocks still isolated.
    pub(crate) fn take_isolated_range(&self, z: &Zone, start: Pfn, end: Pfn) -> Result<(), Pfn> {
        let pb_nr = z.pageblock_order.nr_pages();
        let blocks = (start.0 & !(pb_nr - 1)..end.0).step_by(pb_nr as usize);
        let mut zl = z.lock();
        // The free blocks that cover the range, walked twice under one hold: to
        // check that they do, then to take them off (no list of them kept).
        let mut p = start.0;
        while p < end.0 {
            let (head, order) = zl.free_block_containing(Pfn(p)).ok_or(Pfn(p))?;
            p = head.0 + order.nr_pages();
        }
        let (mut outer_start, mut outer_end) = (start.0, end.0);
        let mut p = start.0;
        while p < end.0 {
            let (head, order) = zl.free_block_containing(Pfn(p)).ok_or(Pfn(p))?;
            zl.del_from_free_list(head, order, Migratetype::Isolate);
            outer_start = outer_start.min(head.0);
            p = head.0 + order.nr_pages();
            outer_end = p;
        }
        for blk in blocks {
            zl.undo_isolate_pageblock(Pfn(blk));
        }
        for (p, order) in chunks(Pfn(outer_start), start.0 - outer_start, z.max_order)
            .chain(chunks(end, outer_end - end.0, z.max_order))
        {
            zl.free_block_locked(p, order, false);
        }
        Ok(())
    }

    /// Makes every frame of the taken range `[start, end)` an allocated order-0
    /// page with one reference and head flags `flags` (zeroed first under
    /// `init_on_alloc`), and counts them allocated.
    pub(crate) fn commit_contig(&self, z: &Zone, start: Pfn, end: Pfn, flags: u8) {
        if self.config.debug.init_on_alloc {
            self.backend.zero_pages(start, end.0 - start.0);
        }
        let w = Word::alloc(Order(0), Migratetype::Movable).with_flags(flags);
        for p in start.0..end.0 {
            z.frames.set_word(z.idx(Pfn(p)), w);
        }
        z.events.pgalloc.inc(end.0 - start.0);
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
            if nr > z.spanned {
                continue;
            }
            // `nr` fits in the zone, so neither the step nor the scan can overflow.
            let step = nr.next_power_of_two().min(z.pageblock_order.nr_pages());
            let mut p = z.start_pfn.next_multiple_of(step);
            while p + nr <= z.end_pfn() {
                if self.alloc_contig_range(Pfn(p), Pfn(p + nr)).is_ok() {
                    return Ok(Pfn(p));
                }
                p += step;
            }
        }
        Err(ContigError::NoMemory)
    }
}

/// Slots `alloc_pages_bulk` fills under one hold of the CPU's lock before it
/// checks and publishes their pages with the lock dropped (a bit each in a word
/// on the stack). Linux holds the lock for the whole array and prepares each
/// page under it; here the page work (zeroing, the debug checks) runs without a
/// lock, as every other path's does.
const ALLOC_BULK_WINDOW: usize = 64;

/// The reference compaction holds on a page it isolated (see `migrate`): the
/// multi-page frees may drop the owner's references, never that one.
#[inline]
fn isolated_ref(w: Word) -> u32 {
    u32::from(w.flags() & FLAG_ISOLATED != 0)
}

/// What `claim_lazy` made of a page.
enum Lazy {
    /// No lazily split block to handle: the ordinary checks decide.
    Plain,
    /// Read the page's word again (the block was materialised, or is being).
    Again,
    /// A page of a lazily split block, refused as its own word would be.
    Refused(FreeError),
    /// The page headed a lazily split block of this many pages, now taken whole.
    Whole(usize),
}

/// Entries of a multi-page free whose claim `Claim` records a bit for, on the
/// stack (64 bytes): those from the first page that keeps references on.
const CLAIM_BITS: usize = 512;

/// Which entries (pages, in ascending pfn order) of a multi-page free its first
/// phase took, for the second phase and for an undo. Three tiers, none on the
/// heap, whatever the length of the call:
///
/// ```text
///   entries:  0 ........ first_kept ........ first_kept + 512 ........ end
///             all taken: nothing   a bit each       the page's claimed word
///             recorded             (`bits`)         carries this call's tag
/// ```
///
/// Until an entry keeps references (is not taken), every entry was taken, which
/// needs no record: a free of pages with one reference each records nothing.
/// Past the bits, the call tags the claimed words of the pages it takes with a
/// tag no other live call holds (`ClaimTag`): a page it passed over (and left
/// allocated) may be claimed meanwhile by another free dropping references its
/// caller does not hold, and the tag tells that claim from this call's own.
/// The tails of a lazily split block taken whole are this call's with their
/// head, which alone is recorded (see `claim_lazy`).
struct Claim {
    /// The first entry not taken; `usize::MAX` while every entry was.
    first_kept: usize,
    /// Entries `first_kept..first_kept + CLAIM_BITS`: a bit for each one taken.
    bits: [u64; CLAIM_BITS / 64],
    /// The tag of the claimed words past the bits; `None` until one is needed.
    tag: Option<ClaimTag>,
}

impl Claim {
    fn new() -> Claim {
        Claim {
            first_kept: usize::MAX,
            bits: [0; CLAIM_BITS / 64],
            tag: None,
        }
    }

    /// The first entry not taken (`usize::MAX`: none yet).
    #[inline]
    fn first_kept(&self) -> usize {
        self.first_kept
    }

    /// Where `entry` (taken or not) lies past `first_kept`; `None` before it.
    #[inline]
    fn past_first_kept(&self, entry: usize) -> Option<usize> {
        entry.checked_sub(self.first_kept)
    }

    /// The claimed word `w` (`claimed` or `claimed_block`) that taking `entry`
    /// writes: tagged past the bits (taking a tag the first time).
    #[inline]
    fn word(&mut self, entry: usize, w: Word) -> Word {
        match self.past_first_kept(entry) {
            Some(d) if d >= CLAIM_BITS => {
                let tag = self.tag.get_or_insert_with(ClaimTag::take).0;
                w.with_claim_tag(tag)
            }
            _ => w,
        }
    }

    /// `entry` was taken (with the word `word` gave it).
    #[inline]
    fn took(&mut self, entry: usize) {
        if let Some(d) = self.past_first_kept(entry).filter(|&d| d < CLAIM_BITS) {
            self.bits[d / 64] |= 1 << (d % 64);
        }
    }

    /// `entry` was not taken: it keeps references.
    #[inline]
    fn kept(&mut self, entry: usize) {
        self.first_kept = self.first_kept.min(entry);
    }

    /// Whether `entry` was taken (the head, for a lazily split block taken
    /// whole), its page's word now being `w`.
    #[inline]
    fn holds(&self, entry: usize, w: Word) -> bool {
        match self.past_first_kept(entry) {
            None => true,
            Some(d) if d < CLAIM_BITS => self.bits[d / 64] & (1 << (d % 64)) != 0,
            Some(_) => self
                .tag
                .as_ref()
                .is_some_and(|t| w.is_claimed() && w.claim_tag() == t.0),
        }
    }
}

/// A claim tag (1 to `CLAIM_TAG_MAX`) held by one multi-page free, given back
/// when it is dropped (with the call's `Claim`): no two live calls hold the same.
/// The tags are a bitmap shared by every allocator of the process; a call past
/// its `CLAIM_BITS` takes one, and one that finds all taken (127 such calls at
/// once) waits for one to be given back. Plain core atomics: no loom model frees
/// that many pages.
struct ClaimTag(u8);

/// The claim tags held now, a bit each (bit 0, tag 0, stands for none).
static CLAIM_TAGS: [core::sync::atomic::AtomicU64; 2] = [
    core::sync::atomic::AtomicU64::new(1),
    core::sync::atomic::AtomicU64::new(0),
];

impl ClaimTag {
    /// Takes a tag no other live call holds.
    fn take() -> ClaimTag {
        use core::sync::atomic::Ordering as O;
        const _: () = assert!(CLAIM_TAG_MAX as usize == 2 * 64 - 1);
        let mut spins = 0;
        loop {
            for (k, word) in CLAIM_TAGS.iter().enumerate() {
                // Relaxed: a hint of which bit to try.
                let free = !word.load(O::Relaxed);
                if free == 0 {
                    continue;
                }
                let bit = free.trailing_zeros();
                // Acquire: pairs with `drop`'s Release, so that a page word the
                // tag's last holder wrote (a claimed word of its restored or
                // freed) is seen by this holder, which then cannot take the old
                // claim for its own.
                if word.fetch_or(1 << bit, O::Acquire) & (1 << bit) == 0 {
                    return ClaimTag((k * 64) as u8 + bit as u8);
                }
            }
            backoff(&mut spins);
        }
    }
}

impl Drop for ClaimTag {
    fn drop(&mut self) {
        let (k, bit) = (usize::from(self.0) / 64, self.0 % 64);
        // Release: see `take`.
        CLAIM_TAGS[k].fetch_and(!(1 << bit), core::sync::atomic::Ordering::Release);
    }
}

/// Distinct pages an array that is not in ascending order has sorted at a
/// time by `free_pages_bulk`, on the stack (1 KiB).
const BULK_WINDOW: usize = 64;

/// A `free_pages_bulk` array's entries, in ascending pfn order with how often
/// each is listed, without a copy of the array: an ascending array is read as
/// it is (each entry listed once); any other is read in windows of the
/// `BULK_WINDOW` smallest distinct pages above the last window's, each found
/// with one pass over the array. Sorting a copy would call the heap; this costs
/// a pass per window instead, so a large array is best handed over sorted.
#[derive(Clone, Copy)]
struct Entries<'a> {
    pages: &'a [Pfn],
    ascending: bool,
    /// Ascending: the next entry's index in `pages`; else the next one's in
    /// `window`.
    at: usize,
    /// Not ascending: the window's distinct pages, ascending, with counts.
    window: [(Pfn, u32); BULK_WINDOW],
    len: usize,
    /// Not ascending: the largest page of the windows before, if any.
    after: Option<Pfn>,
    /// Not ascending: the last window was filled, and held nothing.
    done: bool,
}

impl<'a> Entries<'a> {
    fn new(pages: &'a [Pfn], ascending: bool) -> Entries<'a> {
        Entries {
            pages,
            ascending,
            at: 0,
            window: [(Pfn(0), 0); BULK_WINDOW],
            len: 0,
            after: None,
            done: ascending,
        }
        .filled()
    }

    /// The entries with a window ready to read, if one is due: copies then
    /// share it instead of each filling its own.
    fn filled(mut self) -> Self {
        if !self.done && self.at == self.len {
            self.refill();
        }
        self
    }

    /// Fills the window with the smallest distinct pages above the last
    /// window's, counting how often each is listed.
    fn refill(&mut self) {
        let w = &mut self.window;
        let mut len = 0;
        for &p in self.pages {
            if self.after.is_some_and(|a| p <= a) {
                continue;
            }
            match w[..len].binary_search_by_key(&p, |e| e.0) {
                Ok(i) => w[i].1 = w[i].1.saturating_add(1),
                Err(i) if i < BULK_WINDOW => {
                    // The largest falls off a full window.
                    let end = (len + 1).min(BULK_WINDOW);
                    w.copy_within(i..end - 1, i + 1);
                    w[i] = (p, 1);
                    len = end;
                }
                Err(_) => {}
            }
        }
        self.len = len;
        self.at = 0;
        match len {
            0 => self.done = true,
            _ => self.after = Some(w[len - 1].0),
        }
    }

    /// Passes over `n` entries.
    fn skip_entries(&mut self, n: usize) {
        if self.ascending {
            self.at += n;
        } else {
            for _ in self.by_ref().take(n) {}
            *self = self.filled();
        }
    }

    /// How many entries from the next one on are consecutive frames, at most
    /// `max`: a binary search over an ascending array, a walk over windows.
    fn run_len(&self, max: usize) -> usize {
        if self.ascending {
            return run_len(&self.pages[self.at..], |&p| p).min(max);
        }
        let mut it = *self;
        let Some((first, _)) = it.next() else {
            return 0;
        };
        1 + it
            .take(max.saturating_sub(1))
            .enumerate()
            .take_while(|&(j, (p, _))| p.0 == first.0 + 1 + j as u64)
            .count()
    }
}

impl Iterator for Entries<'_> {
    type Item = (Pfn, u32);

    fn next(&mut self) -> Option<(Pfn, u32)> {
        if self.ascending {
            let p = *self.pages.get(self.at)?;
            self.at += 1;
            return Some((p, 1));
        }
        if self.at == self.len && !self.done {
            self.refill();
        }
        let e = *self.window[..self.len].get(self.at)?;
        self.at += 1;
        Some(e)
    }
}

/// How many entries of `entries` (whose frames, `pfn` of each, are distinct and
/// ascending) from the first on are consecutive frames: a binary search, since
/// for ascending distinct pfns `pfn(m) - pfn(0) == m` holds for every `m` below
/// the run's length and for none past it.
fn run_len<T>(entries: &[T], pfn: impl Fn(&T) -> Pfn) -> usize {
    let Some(first) = entries.first().map(&pfn) else {
        return 0;
    };
    let (mut lo, mut hi) = (1, entries.len());
    // Invariant: the run has at least `lo` entries and at most `hi`.
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if pfn(&entries[mid - 1]).0 - first.0 == (mid - 1) as u64 {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

impl<B: Backend> ZoneAllocator<B> {
    /// What a lock-free look sees of frame `pfn` (which a racing allocation can
    /// make stale): busy if it is, or lies in, an allocated block, a hole or a
    /// bad frame; cached if a `LocalCache` holds its block; free otherwise.
    fn maybe_free(&self, z: &Zone, pfn: Pfn) -> Seen {
        let seen = |w: Word| match w.tag() {
            Tag::Alloc | Tag::Hole | Tag::Bad => Seen::Busy,
            Tag::Cached => Seen::Cached,
            _ => Seen::Free,
        };
        let w = z.frames.word(z.idx(pfn));
        match w.tag() {
            // Judged by the head of its block. A head whose order does not reach
            // the frame (a merge or split under way) may be free; the locked steps
            // decide.
            Tag::Tail => z.head_of_tail(pfn).map_or(Seen::Free, |(_, h)| seen(h)),
            _ => seen(w),
        }
    }
}

/// `maybe_free`'s answer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Seen {
    Free,
    /// Free, in a `LocalCache`: a drain brings it back.
    Cached,
    Busy,
}

#[cfg(test)]
mod tests {
    use super::{run_len, Claim, Entries, CLAIM_BITS};
    use crate::frame::{Word, CLAIM_TAG_MAX};
    use crate::{Order, Pfn};

    #[test]
    fn run_len_finds_where_the_frames_stop_being_consecutive() {
        let pfns = |v: &[u64]| v.iter().map(|&p| Pfn(p)).collect::<Vec<_>>();
        let run_len = |v: &[Pfn]| run_len(v, |&p| p);
        assert_eq!(run_len(&[]), 0);
        assert_eq!(run_len(&pfns(&[7])), 1);
        assert_eq!(run_len(&pfns(&[7, 9])), 1);
        assert_eq!(run_len(&pfns(&[7, 8, 9, 10])), 4);
        assert_eq!(run_len(&pfns(&[7, 8, 9, 11, 12])), 3);
        // Entries with a count, as an unsorted array's de-duplicated list.
        let counted: Vec<(Pfn, u32)> = [5, 6, 7, 9].iter().map(|&p| (Pfn(p), 2)).collect();
        assert_eq!(super::run_len(&counted, |e| e.0), 3);
        // Every cut point of a 40-page run followed by a gap, against a linear scan.
        for cut in 1..40u64 {
            let v: Vec<Pfn> = (0..40)
                .map(|i| Pfn(100 + i + u64::from(i >= cut) * 5))
                .collect();
            let linear = 1 + v.windows(2).take_while(|w| w[1].0 == w[0].0 + 1).count();
            assert_eq!(run_len(&v), linear, "cut at {cut}");
            assert_eq!(run_len(&v), cut as usize);
        }
    }

    #[test]
    fn claim_records_bits_then_tags_past_the_first_kept_page() {
        let mut c = Claim::new();
        let plain = Word::claimed(1);
        // All taken so far: nothing recorded, every entry held.
        for e in 0..700 {
            assert_eq!(c.word(e, plain), plain);
            c.took(e);
        }
        assert!(c.holds(699, Word::TAIL) && c.tag.is_none());
        c.kept(700);
        // Bits for the next 512 entries, no tag.
        for e in (701..700 + CLAIM_BITS).step_by(3) {
            assert_eq!(c.word(e, plain), plain);
            c.took(e);
        }
        assert!(c.tag.is_none());
        assert!(c.holds(701, plain) && !c.holds(702, plain) && !c.holds(700, plain));
        // Past them, the claimed word carries the call's tag, and only a word
        // with that tag is the call's.
        let far = 700 + CLAIM_BITS + 5;
        let w = c.word(far, plain);
        let tag = c.tag.as_ref().unwrap().0;
        assert!(tag > 0 && w.claim_tag() == tag && w.is_claimed());
        c.took(far);
        assert!(c.holds(far, w));
        assert!(!c.holds(far, plain), "another call's untagged claim");
        assert!(!c.holds(far, plain.with_claim_tag(tag % CLAIM_TAG_MAX + 1)));
        assert!(!c.holds(far, Word::alloc(Order(0), crate::Migratetype::Movable)));
        // A second live call gets another tag; a dropped call's tag comes back.
        let mut d = Claim::new();
        d.kept(0);
        let other = d.word(CLAIM_BITS, plain).claim_tag();
        assert_ne!(other, tag);
        drop(c);
        drop(d);
    }

    /// A page the first phase passed over (it keeps references) that another
    /// free claims before the second phase, far past the bits: the second phase
    /// must leave that claim alone (the tag tells it from its own), and free
    /// the pages it took.
    #[test]
    fn a_page_claimed_by_another_free_past_the_bits_is_not_taken_for_ours() {
        use crate::config::Config;
        use crate::free::Via;
        use crate::{Gfp, ZoneAllocator};
        // Small, as the other tests Miri runs: Miri's cost grows faster than
        // the frame table (64 MiB took it over an hour to build).
        let za = ZoneAllocator::new(Config {
            nr_cpus: 2,
            min_free_kbytes: Some(0),
            max_order: Order(7),
            pageblock_order: Order(5),
            ..Config::with_bytes(4 << 20)
        })
        .unwrap();
        let nr = 640u64;
        let start = za.alloc_contig_pages(nr, Gfp::KERNEL, 0).unwrap();
        let z = za.zone_of(start).unwrap();
        // The first page and one past the bits (512 entries) keep a reference.
        let other = start.add(600);
        za.get_page(start).unwrap();
        za.get_page(other).unwrap();
        let pages = (0..nr).map(|i| (start.add(i), 1));
        let mut claim = Claim::new();
        assert!(!za.claim_pages(z, pages.clone(), &mut claim, 0, 0).unwrap());
        assert!(claim.tag.is_some(), "past the bits: tagged");
        // Another free (dropping a reference its caller does not hold) claims
        // the page passed over.
        let idx = z.idx(other);
        let w = z.frames.word(idx);
        let theirs = Word::claimed(w.aux());
        z.frames.cas_word(idx, w, theirs).unwrap();
        za.commit_pages(z, pages, Some((&claim, 0)), Via::Cpu(0), 0);
        assert_eq!(z.frames.word(idx), theirs, "their claim left alone");
        // The other free's outcome: the page restored with its one reference.
        z.frames.set_word(idx, w.with_refcount(1));
        drop(claim);
        for p in [start, other] {
            assert_eq!(za.page_count(p), Ok(1));
            za.free_pages(p, Order(0)).unwrap();
        }
        za.drain_all_pages();
        let r = za.check_invariants().unwrap();
        assert_eq!(r.allocated_pages, 0);
        assert_eq!(za.nr_free_pages(), za.managed_pages());
    }

    #[test]
    fn entries_of_an_unsorted_array_come_ascending_with_counts() {
        // More distinct pages than a window, some listed twice or three times.
        let mut v: Vec<Pfn> = (0..300u64).map(|i| Pfn(i * 7 % 307 + 1000)).collect();
        v.extend([Pfn(1005), Pfn(1200), Pfn(1200)]);
        let got: Vec<(Pfn, u32)> = Entries::new(&v, false).collect();
        let mut want: Vec<(Pfn, u32)> = Vec::new();
        let mut sorted = v.clone();
        sorted.sort_unstable();
        for g in sorted.chunk_by(|a, b| a == b) {
            want.push((g[0], g.len() as u32));
        }
        assert_eq!(got, want);
        // Runs and skips across windows.
        let mut e = Entries::new(&v, false);
        e.skip_entries(60);
        assert_eq!(e.clone().next(), Some(want[60]));
        let n = e.run_len(usize::MAX);
        let linear = 1 + want[60..]
            .windows(2)
            .take_while(|w| w[1].0 .0 == w[0].0 .0 + 1)
            .count();
        assert_eq!(n, linear);
        assert_eq!(e.run_len(5), 5.min(linear));
    }
}
