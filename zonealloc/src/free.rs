//! The free path and references: `free_pages`, `put_page`, `get_page`,
//! `split_page`, and the one compare-and-swap on a block's head word under each.
//!
//! A path of `ZoneAllocator` (allocator layer, beside `allocate`, `drain` and
//! `fast`). A block whose last reference goes is freed to this CPU's stack
//! (`fast`), to a CPU's list (`pcp`, under its try-lock) or to the buddy lists
//! (`buddy`, under the zone lock). Callers hold no lock; references take none
//! (the head's state word is the whole state of a block).
//!
//! # Freeing and references
//!
//! An allocated block's head carries a reference count (1 after allocation).
//! `get_page` adds one, `put_page` and `free_pages` drop one, and the block is freed
//! when the count reaches zero. Each of these checks the frame's state and changes the
//! count in one compare-and-swap, so a bad call is refused with nothing changed and two
//! racing frees of one block can never both succeed.

use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::error::FreeError;
use crate::frame::{
    FrameState, Tag, Word, FLAG_CMA, FLAG_FRAG, FLAG_GUARDED, FLAG_ISOLATED, FLAG_LAZY,
    FLAG_MIGRATING, FLAG_VMALLOC, MIGRATING_BASE, REFCOUNT_MAX,
};
use crate::pcp::{count_zone_free, pcp_allowed_order};
use crate::sync::backoff;
use crate::types::{Migratetype, Order, Pfn};
use crate::zone::Zone;

impl<B: Backend> ZoneAllocator<B> {
    // -------------------------------------------------------------------------
    // Freeing
    // -------------------------------------------------------------------------

    /// Drops one reference on the block of `2^order` frames at `pfn`; frees it when
    /// that was the last reference (`__free_pages`).
    ///
    /// # Errors
    /// A `FreeError` if `pfn` is not the head of an allocated block of exactly this
    /// order, or the block belongs to a live `PageBlock` (`Guarded`); nothing is
    /// changed then.
    #[inline]
    pub fn free_pages(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        if self.free_fast(pfn, order) {
            return Ok(());
        }
        self.free_pages_by(Via::Cpu(self.current_cpu()), pfn, order, Holder::Raw)
    }

    /// `free_pages` for the holder of a `PinnedCpu` token: a plain block freed to
    /// the token's CPU's pinned stack with its one compare-and-swap (see
    /// `alloc_pages_pinned`), anything else to that CPU's lists as `free_pages`.
    ///
    /// # Errors
    /// As `free_pages`.
    #[inline]
    pub fn free_pages_pinned(
        &self,
        pin: &crate::stacks::PinnedCpu,
        pfn: Pfn,
        order: Order,
    ) -> Result<(), FreeError> {
        let cpu = self.cpu_index(pin.cpu());
        if self.pinned && self.free_fast_on(pfn, order, crate::stacks::On::Pinned(cpu)) {
            return Ok(());
        }
        self.free_pages_by(Via::Cpu(cpu), pfn, order, Holder::Raw)
    }

    /// As `free_pages`, freeing to CPU `cpu`'s lists (taken modulo `nr_cpus`).
    ///
    /// # Errors
    /// As `free_pages`.
    pub fn free_pages_on(&self, cpu: usize, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        self.free_pages_by(Via::Cpu(self.cpu_index(cpu)), pfn, order, Holder::Raw)
    }

    /// The zone of `pfn` as the head of a block of `order`: the checks every call
    /// naming a block by its head and order makes before touching its word.
    #[inline]
    pub(crate) fn head_zone(&self, pfn: Pfn, order: Order) -> Result<&Zone, FreeError> {
        if order > self.config.max_order {
            return Err(FreeError::InvalidOrder(order));
        }
        let z = self.zone_of(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        if !pfn.is_aligned(order) {
            return Err(FreeError::Misaligned { pfn, order });
        }
        Ok(z)
    }

    /// `free_pages` on behalf of `by`, the way `via` says (`Via::Cpu`: that CPU's
    /// lists; `Via::Here`: the stack of the CPU the thread runs on where the
    /// stacks serve the block, as `free_pages`).
    #[inline]
    pub(crate) fn free_pages_by(
        &self,
        via: Via,
        pfn: Pfn,
        order: Order,
        by: Holder,
    ) -> Result<(), FreeError> {
        let z = self.head_zone(pfn, order)?;
        self.put_and_free(z, pfn, Some(order), via, by).map(|_| ())
    }

    /// Drops one reference on the block whose head is `pfn`, freeing it at zero.
    /// Returns whether the block was freed.
    ///
    /// # Errors
    /// A `FreeError` if `pfn` is not the head of an allocated block.
    pub fn put_page(&self, pfn: Pfn) -> Result<bool, FreeError> {
        let z = self.zone_of(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        self.put_and_free(z, pfn, None, Via::Here(self.current_cpu()), Holder::Raw)
    }

    /// Changes the state word of the allocated block headed by `pfn` with one
    /// compare-and-swap: `f` maps the current word (always an allocated head) to
    /// the new one or refuses. Returns the old and new words.
    #[inline]
    pub(crate) fn update_head(
        &self,
        z: &Zone,
        pfn: Pfn,
        by: Holder,
        f: impl Fn(Word) -> Result<Word, FreeError>,
    ) -> Result<(Word, Word), FreeError> {
        let idx = z.idx(pfn);
        let mut w = z.frames.word(idx);
        let mut spins = 0;
        loop {
            if w.tag() != Tag::Alloc {
                // A page a multi-page free has taken but may still give back.
                if w.is_claimed() {
                    backoff(&mut spins);
                    w = z.frames.word(idx);
                    continue;
                }
                // A tail of a lazily split block: a page of its own once the block
                // is materialised.
                if w.tag() == Tag::Tail && Self::unlazy_tail(z, pfn, &mut spins) {
                    w = z.frames.word(idx);
                    continue;
                }
                return Err(self.classify(z, pfn, w));
            }
            // The common case, one test: a block no layer owns, changed by the raw
            // API.
            if w.flags() & (OWNER_FLAGS | FLAG_LAZY) != 0 || by != Holder::Raw {
                if w.is_lazy() {
                    // The head of a lazily split block: its page is `lazy_page`,
                    // checked and changed as any page; if `f` takes it, the block
                    // is materialised with the head's new word in the same hold.
                    let page = w.lazy_page();
                    owner_check(page, by, pfn)?;
                    let new = f(page)?;
                    if Self::materialize_to(z, pfn, w, new) {
                        return Ok((page, new));
                    }
                    w = z.frames.word(idx);
                    continue;
                }
                owner_check(w, by, pfn)?;
            }
            let new = f(w)?;
            match z.frames.cas_word(idx, w, new) {
                Ok(_) => return Ok((w, new)),
                Err(cur) => w = cur,
            }
        }
    }

    /// The lazily split block (`FLAG_LAZY`) whose tail frame `pfn` is, with its
    /// head's word: lazy, or held by a thread (`materializing`, or
    /// `claimed_block`). `None` if `pfn`'s enclosing head is anything else.
    pub(crate) fn lazy_block_of(z: &Zone, pfn: Pfn) -> Option<(Pfn, Word)> {
        let (h, hw) = z.head_of_tail(pfn)?;
        (hw.is_lazy() || (hw.is_claimed() && hw.order().0 > 0)).then_some((h, hw))
    }

    /// Gives every page of the lazily split block at `head`, whose head word was
    /// `w`, a state word of its own: what an eager split writes (`lazy_page`).
    /// Changes nothing if the head is no longer `w` (another thread materialised
    /// or freed the block, or is doing so): the caller reads its page again.
    pub(crate) fn materialize(z: &Zone, head: Pfn, w: Word) {
        Self::materialize_to(z, head, w, w.lazy_page());
    }

    /// `materialize`, with `head_word` for the head page's own word instead of
    /// `lazy_page` (a change a single-page call makes to the head page, in the
    /// same hold). Returns whether it held the block (`false`: the head was no
    /// longer `w`, nothing changed).
    pub(crate) fn materialize_to(z: &Zone, head: Pfn, w: Word, head_word: Word) -> bool {
        let idx = z.idx(head);
        let held = Word::materializing(w.order(), w.aux());
        if z.frames.cas_word(idx, w, held).is_err() {
            return false;
        }
        let page = w.lazy_page();
        // The tails from the last down, each with Release: a thread that read
        // page `p` as `Tail` and then finds a page below it written has `p`'s
        // word visible when it reads `p` again, so a search for `p`'s head never
        // stops at a written page while `p` itself still reads `Tail`.
        let t = z.frames.view();
        for i in (idx + 1..idx + w.order().nr_pages() as u32).rev() {
            t.set_word(i, page);
        }
        // After the tails: whoever sees the head's new word and then reads a
        // tail sees the tail's.
        z.frames.set_word(idx, head_word);
        true
    }

    /// For a call on frame `pfn` alone, whose word it read as `Tail`: if `pfn`
    /// lies in a lazily split block, materialises it (or waits once for the
    /// thread holding its head) and returns `true`, and the caller reads the
    /// page's word again; also `true` if the block was materialised since that
    /// read (the page has a word of its own now); `false` for an ordinary tail.
    pub(crate) fn unlazy_tail(z: &Zone, pfn: Pfn, spins: &mut u32) -> bool {
        match Self::lazy_block_of(z, pfn) {
            Some((h, hw)) if hw.is_lazy() => Self::materialize(z, h, hw),
            Some(_) => backoff(spins),
            // The head's word was read with Acquire after the page's: a
            // materialisation it saw finished has written the page's word too.
            None => return z.frames.word(z.idx(pfn)) != Word::TAIL,
        }
        true
    }

    /// Drops a reference; the winner of the last reference frees the block through
    /// `via`. Returns whether the block was freed.
    #[inline]
    pub(crate) fn put_and_free(
        &self,
        z: &Zone,
        pfn: Pfn,
        order: Option<Order>,
        via: Via,
        by: Holder,
    ) -> Result<bool, FreeError> {
        let (old, new) = self.update_head(z, pfn, by, |w| {
            let actual = w.order();
            match order {
                Some(given) if given != actual => Err(FreeError::WrongOrder { pfn, given, actual }),
                // An isolated block's last reference is compaction's (see `migrate`).
                _ if w.refcount() <= 1 && w.flags() & FLAG_ISOLATED != 0 => {
                    Err(FreeError::AlreadyFree(pfn))
                }
                _ if w.refcount() <= 1 => Ok(Word::frozen(actual)),
                // A guard gives the block back to the raw API with its last drop.
                _ => Ok(w
                    .with_refcount(w.refcount() - 1)
                    .with_flags(w.flags() & !FLAG_GUARDED)),
            }
        })?;
        let last = new.tag() == Tag::Frozen;
        if last {
            self.release_frozen(z, pfn, old.order(), via);
        }
        Ok(last)
    }

    /// Frees a block whose last reference the caller dropped (its head is `Frozen`
    /// and the caller owns it) through `via`, after the debug modes' free hooks.
    #[inline]
    pub(crate) fn release_frozen(&self, z: &Zone, pfn: Pfn, order: Order, via: Via) {
        self.debug.free_prepare(&self.backend, pfn, order);
        match via {
            Via::TryOnly(cpu) => self.free_frozen_nolock(z, pfn, order, cpu),
            Via::Cpu(cpu) => self.free_frozen(z, pfn, order, cpu),
            Via::Here(cpu) => {
                if !self.free_frozen_here(z, pfn, order) {
                    self.free_frozen(z, pfn, order, cpu)
                }
            }
            Via::Zone => self.free_one_page(z, pfn, order),
        }
    }

    /// Adds `nr` references to the block headed by `pfn` (`page_ref_add`).
    pub(crate) fn page_ref_add(&self, pfn: Pfn, nr: u32) -> Result<(), FreeError> {
        let z = self.zone_of(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        self.update_head(z, pfn, Holder::Raw, |w| {
            let r = w
                .refcount()
                .checked_add(nr)
                .ok_or(FreeError::RefcountOverflow(pfn))?;
            // The owner's references: a migrating target's count is relative to
            // `MIGRATING_BASE` (what it gained since its move began), an isolated
            // block's includes compaction's one.
            let owner = if w.flags() & FLAG_MIGRATING != 0 {
                r.saturating_sub(MIGRATING_BASE)
            } else {
                r - u32::from(w.flags() & FLAG_ISOLATED != 0)
            };
            if owner > REFCOUNT_MAX {
                return Err(FreeError::RefcountOverflow(pfn));
            }
            Ok(w.with_refcount(r))
        })
        .map(|_| ())
    }

    /// `__free_frozen_pages()`: frees a block the caller froze, to CPU `cpu`'s list
    /// where its order has one and its pageblock is not isolated, else to the buddy
    /// lists under the zone lock.
    #[inline]
    pub(crate) fn free_frozen(&self, z: &Zone, pfn: Pfn, order: Order, cpu: usize) {
        if self.config.pcp.enabled && pcp_allowed_order(order, z.pageblock_order) {
            let mut mt = z.blocks.migratetype(pfn);
            if !mt.is_mergeable() {
                if mt == Migratetype::Isolate {
                    return self.free_one_page(z, pfn, order);
                }
                // HighAtomic blocks travel on the movable list; the flush re-reads
                // the pageblock's type.
                mt = Migratetype::Movable;
            }
            if let Some(mut pcp) = z.pcp_trylock(cpu) {
                pcp.free(pfn, order, mt, self.config.pcp.prefetch_buddy);
                return;
            }
        }
        self.free_one_page(z, pfn, order);
    }

    /// Gives blocks of `order` held `Cached` by a `LocalCache` back to the buddy
    /// lists, under one zone lock hold, with the metadata each merge reads first
    /// prefetched before the lock is taken (see `prefetch_merge`).
    pub(crate) fn free_cached(&self, z: &Zone, order: Order, blocks: &[Pfn]) {
        for &pfn in blocks {
            prefetch_merge(z, pfn, order);
        }
        z.lock().free_batch_locked(blocks, order);
        z.events.pgfree.inc((blocks.len() as u64) << order.0);
    }

    /// `free_one_page()`: the zone-lock path; merges the frees that were
    /// deferred meanwhile too (`free_pages_nolock`).
    pub(crate) fn free_one_page(&self, z: &Zone, pfn: Pfn, order: Order) {
        let mut zl = z.lock();
        zl.free_block_locked(pfn, order, false);
        if z.has_deferred() {
            zl.free_deferred();
        }
        drop(zl);
        count_zone_free(z, order);
    }

    /// `free_pages_nolock()`: as `free_pages`, from any context (an interrupt
    /// handler, a handler interrupting the allocator itself, code that may not
    /// wait): it never waits for a lock. The block goes to this CPU's stack or
    /// list where that takes no wait, else to the buddy lists if the zone lock is
    /// free, else onto the zone's deferred list, which the next free under the
    /// zone lock merges (Linux's `trylock_free_pages`). Debug modes that touch
    /// pages (poisoning, `init_on_free`) still do.
    ///
    /// # Errors
    /// As `free_pages`; nothing changed then.
    pub fn free_pages_nolock(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let z = self.head_zone(pfn, order)?;
        let cpu = self.current_cpu();
        self.put_and_free(z, pfn, Some(order), Via::TryOnly(cpu), Holder::Raw)
            .map(|_| ())
    }

    /// The free of `free_pages_nolock` for a frozen block the caller owns.
    fn free_frozen_nolock(&self, z: &Zone, pfn: Pfn, order: Order, cpu: usize) {
        if self.push_frozen_here(z, pfn, order) {
            return;
        }
        if self.config.pcp.enabled && pcp_allowed_order(order, z.pageblock_order) {
            let mt = z.blocks.migratetype(pfn);
            if mt.is_mergeable() {
                if let Some(mut pcp) = z.pcp_trylock(cpu) {
                    pcp.trylock = true;
                    pcp.free(pfn, order, mt, false);
                    return;
                }
            }
        }
        if let Some(mut zl) = z.try_lock() {
            zl.free_block_locked(pfn, order, false);
            if z.has_deferred() {
                zl.free_deferred();
            }
            drop(zl);
            count_zone_free(z, order);
            return;
        }
        z.defer_free(z.idx(pfn));
    }

    // -------------------------------------------------------------------------
    // References and the state of a frame
    // -------------------------------------------------------------------------

    /// Adds a reference to the allocated block whose head is `pfn`.
    ///
    /// # Errors
    /// A `FreeError` if `pfn` is not the head of an allocated block;
    /// `RefcountOverflow` if the block would have more than `REFCOUNT_MAX`
    /// references.
    pub fn get_page(&self, pfn: Pfn) -> Result<(), FreeError> {
        self.page_ref_add(pfn, 1)
    }

    /// The reference count of the allocated block whose head is `pfn`.
    ///
    /// # Errors
    /// A `FreeError` if `pfn` is not the head of an allocated block.
    pub fn page_count(&self, pfn: Pfn) -> Result<u32, FreeError> {
        let z = self.zone_of(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        let w = Self::head_word(z, z.idx(pfn));
        if w.tag() != Tag::Alloc {
            return Err(self.classify(z, pfn, w));
        }
        Ok(w.refcount())
    }

    /// The state of frame `pfn`, or `None` if it is in no zone.
    pub fn frame_state(&self, pfn: Pfn) -> Option<FrameState> {
        let z = self.zone_of(pfn)?;
        Some(Self::head_word(z, z.idx(pfn)).into())
    }

    /// Frame `idx`'s state word as its owner sees it: a migration's target
    /// (`FLAG_MIGRATING`, see `migrate`) with the reference count it stands for,
    /// the old block's plus the takes and drops on the target since, and without
    /// that flag; a page a multi-page free has claimed once it is freed or restored
    /// (see `Word::claimed`).
    fn head_word(z: &Zone, idx: u32) -> Word {
        let mut w = z.frames.word(idx);
        let mut spins = 0;
        loop {
            if w.is_claimed() {
                // Freed or restored in a moment (see `Word::claimed`).
                backoff(&mut spins);
                w = z.frames.word(idx);
                continue;
            }
            // A page of a lazily split block is what its head stands for.
            if w.is_lazy() {
                return w.lazy_page();
            }
            if w.tag() == Tag::Tail {
                match Self::lazy_block_of(z, z.pfn_of(idx)) {
                    Some((_, hw)) if hw.is_lazy() => return hw.lazy_page(),
                    Some(_) => {
                        backoff(&mut spins);
                        w = z.frames.word(idx);
                        continue;
                    }
                    None => {
                        // Materialised between the two reads: the page's own word,
                        // which the head's (Acquire) makes visible now.
                        let again = z.frames.word(idx);
                        if again == w {
                            return w;
                        }
                        w = again;
                        continue;
                    }
                }
            }
            if w.tag() != Tag::Alloc || w.flags() & FLAG_MIGRATING == 0 {
                return w;
            }
            let old = z
                .frames
                .view()
                .word_any(u64::from(z.frames.migration_link(idx)));
            let again = z.frames.word(idx);
            // Between seizing the old block and settling the target, compaction
            // holds neither count where this can read it: look again.
            if again == w
                && old.tag() == Tag::Alloc
                && old.flags() & FLAG_ISOLATED != 0
                && old.order() == w.order()
            {
                return w.settled(old.refcount());
            }
            backoff(&mut spins);
            w = again;
        }
    }

    /// `split_page()`: turns the allocated block of `2^order` frames at `pfn` into
    /// `2^order` independent order-0 pages, each with one reference (the head keeps
    /// the references it had).
    ///
    /// A block with one reference split by its only owner splits lazily, in one
    /// compare-and-swap: only the head records the split, and the first call on
    /// one of its pages alone gives every page its own state. Until then a free
    /// of exactly its pages (`free_contig_range`, `free_pages_bulk`, a vmalloc
    /// area's `vfree`) takes the block back with one compare-and-swap. Either way
    /// every page reads, and is checked, as a page of its own.
    ///
    /// # Errors
    /// A `FreeError` if `pfn` is not the head of an allocated block of this order.
    pub fn split_page(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let z = self.head_zone(pfn, order)?;
        // A block with one reference (the raw API's own, so with no flag once
        // the checks pass) splits lazily: only its head changes (see
        // `FLAG_LAZY`).
        let lazy = |w: Word| order.0 > 0 && w.refcount() == 1;
        let (old, _) = self.update_head(z, pfn, Holder::Raw, |w| {
            if w.order() != order {
                return Err(FreeError::WrongOrder {
                    pfn,
                    given: order,
                    actual: w.order(),
                });
            }
            if w.flags() & FLAG_ISOLATED != 0 {
                return Err(FreeError::Busy(pfn));
            }
            if lazy(w) {
                return Ok(Word::lazy(order, w.aux(), w.flags()));
            }
            Ok(Word::new(Tag::Alloc, 0, w.aux(), w.refcount()).with_flags(w.flags()))
        })?;
        if lazy(old) {
            return Ok(());
        }
        let idx = z.idx(pfn);
        let w = old;
        let mt = Migratetype::from_idx(w.aux() as usize).unwrap_or(Migratetype::Unmovable);
        let page = Word::alloc_flagged(Order(0), mt, w.flags());
        z.frames
            .view()
            .set_words(idx + 1, order.nr_pages() as u32 - 1, 0, page);
        Ok(())
    }

    /// The allocated block containing frame `pfn`: its head and order (Linux's
    /// `compound_head`, for any block).
    ///
    /// # Errors
    /// The `FreeError` of the frame if it is in no allocated block.
    pub fn block_of(&self, pfn: Pfn) -> Result<(Pfn, Order), FreeError> {
        let z = self.zone_of(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        let mut spins = 0;
        loop {
            let w = z.frames.word(z.idx(pfn));
            // A page a multi-page free has taken but may still give back, or one
            // of a lazily split block a thread holds.
            if w.is_claimed()
                || (w.tag() == Tag::Tail
                    && Self::lazy_block_of(z, pfn).is_some_and(|(_, hw)| hw.is_claimed()))
            {
                backoff(&mut spins);
                continue;
            }
            match self.block_of_in(z, pfn) {
                Err(_) if z.frames.word(z.idx(pfn)) != w => {}
                r => return r,
            }
        }
    }

    /// `block_of` in zone `z`, answering at once for a claimed page.
    fn block_of_in(&self, z: &Zone, pfn: Pfn) -> Result<(Pfn, Order), FreeError> {
        let w = z.frames.word(z.idx(pfn));
        let head = match w.tag() {
            Tag::Alloc => Some((pfn, w)),
            Tag::Tail => z.head_of_tail(pfn),
            _ => None,
        };
        match head {
            // A page of a lazily split block is a block of its own.
            Some((_, hw)) if hw.is_lazy() => Ok((pfn, Order(0))),
            Some((head, hw)) if hw.tag() == Tag::Alloc => Ok((head, hw.order())),
            _ => Err(self.classify(z, pfn, w)),
        }
    }

    /// Names what is wrong with using `pfn` as the head of an allocated block.
    #[cold]
    pub(crate) fn classify(&self, z: &Zone, pfn: Pfn, w: Word) -> FreeError {
        match w.tag() {
            Tag::Hole => FreeError::Hole(pfn),
            Tag::Buddy | Tag::Pcp | Tag::Frozen | Tag::Cached => FreeError::AlreadyFree(pfn),
            Tag::Bad => FreeError::BadPage(pfn),
            Tag::Alloc => FreeError::Busy(pfn),
            _ => {
                // A tail: inside a free block (already free) or an allocated one.
                // A merge in progress hides the enclosing free block for a moment
                // (its heads are tails until the merged head is published), so an
                // answer of "tail" is confirmed under the zone lock, where no merge
                // is half-done. The path is cold: only bad calls reach it.
                if self.inside_free_block(z, pfn) {
                    return FreeError::AlreadyFree(pfn);
                }
                let _zl = z.lock();
                if self.inside_free_block(z, pfn) {
                    FreeError::AlreadyFree(pfn)
                } else {
                    FreeError::TailPage(pfn)
                }
            }
        }
    }

    /// Whether tail frame `pfn` lies in a free block (on the buddy or a per-CPU list,
    /// or being freed), judged from the heads at each aligned position below it.
    fn inside_free_block(&self, z: &Zone, pfn: Pfn) -> bool {
        // From order 0: a merge marks a block's head a tail before it publishes the
        // merged head, so a free that read the tail may find the block itself free
        // again (its buddy allocated, the merge undone) by the time it looks.
        for o in 0..=z.max_order.0 {
            let head = Pfn(pfn.0 & !((1u64 << o) - 1));
            if !z.contains(head) {
                break;
            }
            let hw = z.frames.word(z.idx(head));
            if matches!(hw.tag(), Tag::Buddy | Tag::Pcp | Tag::Frozen | Tag::Cached)
                && hw.order().0 >= o
            {
                return true;
            }
            if hw.tag() == Tag::Alloc && hw.order().0 >= o {
                break;
            }
        }
        false
    }

    /// Sets or clears `FLAG_GUARDED` on the allocated block of `order` at `pfn`, which
    /// must be in the opposite state (and, to become guarded, carry no other flag).
    pub(crate) fn set_guarded(&self, pfn: Pfn, order: Order, on: bool) -> Result<(), FreeError> {
        let z = self.head_zone(pfn, order)?;
        let by = if on { Holder::Raw } else { Holder::Guard };
        self.update_head(z, pfn, by, |w| {
            if w.order() != order {
                return Err(FreeError::WrongOrder {
                    pfn,
                    given: order,
                    actual: w.order(),
                });
            }
            if on && w.flags() != 0 {
                return Err(FreeError::Busy(pfn));
            }
            Ok(w.with_flags(w.flags() ^ FLAG_GUARDED))
        })
        .map(|_| ())
    }
}

/// The head flags that name a block's owner (a guard, a page_frag cache, a
/// vmalloc area): a block carrying one answers to that owner alone.
const OWNER_FLAGS: u8 = FLAG_GUARDED | FLAG_FRAG | FLAG_VMALLOC | FLAG_CMA;

/// Whether `by` may change the allocated head word `w` (of the block at `pfn`):
/// a guarded block answers to its guard alone and a guard only to it; a page_frag
/// cache's block answers to the fragment paths alone; a vmalloc area's page
/// answers to vmalloc alone, and vmalloc only to its own pages; a `cma_alloc`
/// page to none of them.
#[inline]
fn owner_check(w: Word, by: Holder, pfn: Pfn) -> Result<(), FreeError> {
    if (w.flags() & FLAG_GUARDED != 0) != (by == Holder::Guard) {
        return Err(FreeError::Guarded(pfn));
    }
    if w.flags() & FLAG_FRAG != 0 && by != Holder::Frag {
        return Err(FreeError::Busy(pfn));
    }
    if (w.flags() & FLAG_VMALLOC != 0) != (by == Holder::Vmalloc) {
        return Err(FreeError::Busy(pfn));
    }
    // A `cma_alloc` page answers to `cma_release` alone, which frees it through
    // the multi-page path, never through a head-word update.
    if w.flags() & FLAG_CMA != 0 {
        return Err(FreeError::Busy(pfn));
    }
    Ok(())
}

/// Who changes a block's head word: a caller of the raw pfn API, or the `PageBlock`
/// guard that owns the block (`FLAG_GUARDED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holder {
    Raw,
    Guard,
    /// The page_frag paths, for blocks a cache carves (`FLAG_FRAG`) and fragments.
    Frag,
    /// A vmalloc space, for the pages of its areas (`FLAG_VMALLOC`).
    Vmalloc,
}

/// Where a block whose last reference was dropped goes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Via {
    /// The ordinary path: that CPU's lists where the order has one, else the zone.
    Cpu(usize),
    /// The CPU the thread runs on: its stack where the per-CPU stacks serve the
    /// call (see `fast`), else as `Cpu` with the CPU given (read before the
    /// block was taken).
    Here(usize),
    /// Straight to the buddy lists under the zone lock (`__free_pages_ok`).
    Zone,
    /// Never wait for a lock (`free_pages_nolock`): this CPU's stack, or its
    /// list if its lock is free, or the zone if its lock is free, else the zone's
    /// deferred list.
    TryOnly(usize),
}

/// The order of the blocks that fill a cache line of frame metadata (the table is
/// laid out in whole lines): the buddies of smaller blocks share their line.
const LINE_ORDER: u8 = crate::frame::PER_LINE.trailing_zeros() as u8;

/// Prefetches the frame metadata a merge of the block at `pfn` of `order` reads
/// first: the block's buddy, and the buddies of the two blocks it forms next on
/// lines of their own (the merge reads one when it gets that far,
/// `buddy_merge_likely()` when it stops one order short). Below `LINE_ORDER`
/// the buddy shares the block's own line, so that line is the one prefetched:
/// the block's free wrote it, but a batch of frees and a flush later it is
/// often out of the first-level cache again. At order 0 the next two are the
/// lines beyond it, which a shuffled free reads about half and a quarter of the
/// time. Issued for a whole batch before the
/// zone lock is taken, the misses overlap each other instead of coming one
/// after another inside it. That pays where other work has pushed the table out
/// of the caches since the blocks were handed out; where it is still cached, the
/// prefetches cost a few instructions a block.
#[inline(always)]
pub(crate) fn prefetch_merge(z: &Zone, pfn: Pfn, order: Order) {
    let t = z.frames.view();
    if order.0 >= LINE_ORDER {
        t.prefetch(pfn.buddy(order));
    } else {
        t.prefetch(pfn);
    }
    // The buddy of the block of order `k` that holds this one.
    let buddy_at = |k: u8| Pfn(pfn.0 & !((1u64 << k) - 1)).buddy(Order(k));
    let k = (order.0 + 1).max(LINE_ORDER);
    // Merges stop below the zone's largest order: nothing reads a buddy there.
    if k < z.max_order.0 {
        t.prefetch(buddy_at(k));
    }
    if k + 1 < z.max_order.0 {
        t.prefetch(buddy_at(k + 1));
    }
}
