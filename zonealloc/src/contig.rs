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

use alloc::vec::Vec;

use crate::allocate::Head;
use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::error::FreeError;
use crate::frame::{
    Tag, Word, FLAG_GUARDED, FLAG_ISOLATED, FLAG_LAZY, FLAG_MIGRATING, FLAG_VMALLOC,
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
        let mut claim = Claim::default();
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
    /// `claim` records page `i` of `pages` as bit `base + i`. `owner` is the
    /// owner flag every page must carry: 0 for the raw API, `FLAG_VMALLOC` for a
    /// vmalloc area's pages, `FLAG_CMA` for `cma_release`'s. Returns whether every
    /// page was taken (none keeps a reference); then `claim` has no bit of them
    /// set, and a caller that undoes the call sets them first.
    fn claim_pages(
        &self,
        z: &Zone,
        pages: impl Iterator<Item = (Pfn, u32)> + Clone,
        claim: &mut Claim,
        base: usize,
        owner: u8,
    ) -> Result<bool, FreeError> {
        // Whether every page so far was taken: until one is not, `claim` is left
        // alone (its bits are set for all of them when one is not, or on error).
        let mut all = true;
        // The last word checked and found takeable with its `k`: the pages of a
        // split block all carry the same word, so the checks run once a block.
        let mut passed: Option<(Word, u32)> = None;
        let mut spins = 0;
        let mut it = pages.clone().enumerate();
        while let Some((i, (p, k))) = it.next() {
            let idx = z.idx(p);
            let mut w = z.frames.word(idx);
            // The pages this step took: 1, or a lazily split block's.
            let mut span = 1;
            let taken = loop {
                if passed != Some((w, k)) {
                    let mut refusal = None;
                    if w.tag() != Tag::Alloc || w.flags() & FLAG_LAZY != 0 {
                        match self.claim_lazy(z, p, k, w, owner, it.clone()) {
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
                                span = n;
                                break true;
                            }
                        }
                    }
                    if let Some(e) = refusal.or_else(|| self.claim_refusal(z, p, k, w, owner)) {
                        if all {
                            claim.set_range(base, base + i);
                        }
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
                match z.frames.cas_word(idx, w, Word::claimed(w.aux())) {
                    Ok(_) => break true,
                    Err(cur) => w = cur,
                }
            };
            if !taken && all {
                claim.set_range(base, base + i);
                all = false;
            } else if taken && !all {
                claim.set_range(base + i, base + i + span);
            }
        }
        Ok(all)
    }

    /// `claim_pages`' step for page `p` (word `w`, `k` references to drop) where
    /// `w` may belong to a lazily split block (see `FLAG_LAZY`); `rest` yields the
    /// run's entries after `p`.
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
    fn claim_lazy(
        &self,
        z: &Zone,
        p: Pfn,
        k: u32,
        w: Word,
        owner: u8,
        rest: impl Iterator<Item = (usize, (Pfn, u32))>,
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
            let held = Word::claimed_block(hw.order(), hw.aux());
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

    /// Undoes `claim_pages` for the pages before the bad one.
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
            if claim.get(base + i) {
                let idx = z.idx(p);
                let w = z.frames.word(idx);
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
        for (i, (p, k)) in pages.enumerate() {
            // A claimed page keeps its word until `free_run` writes its chunk.
            let zero = claim.get(base + i) || self.put_order0(z, p, k, owner);
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
        let mut sorted: Vec<(Pfn, u32)> = Vec::new();
        if !ascending {
            let mut v = pages.to_vec();
            v.sort_unstable();
            for g in v.chunk_by(|a, b| a == b) {
                sorted.push((g[0], u32::try_from(g.len()).unwrap_or(u32::MAX)));
            }
        }
        let list: &[(Pfn, u32)] = &sorted;
        let entry = |i: usize| -> (Pfn, u32) {
            if ascending {
                (pages[i], 1)
            } else {
                list[i]
            }
        };
        let n = if ascending { pages.len() } else { list.len() };
        // Entries `j..j + m`, a run of consecutive frames from `start`, each with its
        // count (1 when the array is ascending and so has no repeats).
        let run = |start: Pfn, j: usize, m: usize| {
            (0..m).map(move |t| {
                let count = if ascending { 1 } else { list[j + t].1 };
                (start.add(t as u64), count)
            })
        };
        // The CPU first: owner code (`Config::cpu_id`) runs before a page is taken.
        let cpu = self.current_cpu();
        // Phase one, run by run (runs of consecutive frames in one zone): take the
        // pages. A vmalloc array is usually one run, kept without allocating.
        let mut first: Option<(&Zone, usize, usize, bool)> = None;
        let mut more: Vec<(&Zone, usize, usize, bool)> = Vec::new();
        let mut claim = Claim::default();
        let mut i = 0;
        while i < n {
            let start = entry(i).0;
            let taken = match self.zone_of(start) {
                None => Err(FreeError::OutOfRange(start)),
                Some(z) => {
                    // Distinct pages in ascending order: the run is as long as the
                    // pfns stay one apart, and ends at the zone's end.
                    let in_zone = z.start_pfn + z.spanned - start.0;
                    let k = if ascending {
                        run_len(&pages[i..], |&p| p)
                    } else {
                        run_len(&list[i..], |e| e.0)
                    };
                    let k = k.min(usize::try_from(in_zone).unwrap_or(usize::MAX));
                    self.claim_pages(z, run(start, i, k), &mut claim, i, owner)
                        .map(|all| (z, i, k, all))
                }
            };
            match taken {
                Ok(run) => {
                    i += run.2;
                    if first.is_none() {
                        first = Some(run);
                    } else {
                        more.push(run);
                    }
                }
                Err(e) => {
                    for &(z, j, m, all) in first.iter().chain(&more) {
                        // A run whose pages were all taken left its bits unset.
                        if all {
                            claim.set_range(j, j + m);
                        }
                        self.unclaim(z, run(entry(j).0, j, m), &claim, j, owner);
                    }
                    return Err(e);
                }
            }
        }
        // Phase two: release them.
        for &(z, j, m, all) in first.iter().chain(&more) {
            let taken = (!all).then_some((&claim, j));
            self.commit_pages(z, run(entry(j).0, j, m), taken, Via::Here(cpu), owner);
        }
        Ok(())
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
                match self.claim_lazy(z, p, 1, w, owner, core::iter::empty()) {
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
        let Some(mut pcp) = z.pcp_trylock(cpu) else {
            return filled + single(&mut pages[first_empty]);
        };
        let mut got = Vec::new();
        for (i, slot) in pages.iter().enumerate() {
            if slot.is_some() {
                continue;
            }
            match pcp.rmqueue(Order(0), mt, flags, &self.debug.faults, true) {
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
            if self.debug.alloc_check(&self.backend, z, p, Order(0)) {
                self.prep_new_page(z, p, Order(0), gfp, mt, head);
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

/// Which pages of a multi-page free its first phase took (a bit per page): on the
/// stack for the first 512 pages, on the heap beyond, grown only as far as pages are
/// taken (a bad page early in a huge range costs no large bitmap).
#[derive(Default)]
struct Claim {
    inline: [u64; 8],
    heap: Vec<u64>,
}

impl Claim {
    #[inline]
    fn set(&mut self, i: usize) {
        let (w, bit) = (i / 64, 1u64 << (i % 64));
        match self.inline.get_mut(w) {
            Some(x) => *x |= bit,
            None => self.set_far(w - self.inline.len(), bit),
        }
    }

    /// Sets bits `from..to`.
    #[cold]
    fn set_range(&mut self, from: usize, to: usize) {
        for i in from..to {
            self.set(i);
        }
    }

    /// `set` past the first 512 pages: grows the heap part as needed.
    #[cold]
    #[inline(never)]
    fn set_far(&mut self, w: usize, bit: u64) {
        if self.heap.len() <= w {
            self.heap.resize(w + 1, 0);
        }
        self.heap[w] |= bit;
    }

    #[inline]
    fn get(&self, i: usize) -> bool {
        let w = i / 64;
        let word = match self.inline.get(w) {
            Some(&x) => x,
            None => self.heap.get(w - self.inline.len()).copied().unwrap_or(0),
        };
        word & (1 << (i % 64)) != 0
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
    use super::{run_len, Claim};
    use crate::Pfn;

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
    fn claim_bits_cross_from_the_stack_to_the_heap() {
        let mut c = Claim::default();
        // Small enough for Miri, which runs the unit tests.
        let set = [0usize, 63, 64, 511, 512, 513, 2047, 3000];
        for &i in &set {
            c.set(i);
        }
        for i in 0..3100 {
            assert_eq!(c.get(i), set.contains(&i), "bit {i}");
        }
        // Nothing beyond the last page taken was allocated.
        assert_eq!(c.heap.len(), (3000 - 512) / 64 + 1);
    }
}
