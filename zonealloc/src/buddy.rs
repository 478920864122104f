//! The buddy algorithm: free lists, splitting, merging, fallback between migratetypes.
//!
//! Every function here is a method of `ZoneLocked`: the caller holds the zone lock.
//!
//! # The buddy system
//!
//! Free memory is kept as naturally aligned blocks of `2^order` frames, one free list
//! per (order, migratetype). The *buddy* of the block at `pfn` of order `o` is the
//! block at `pfn ^ (1 << o)`: the other half of the aligned block of order `o + 1`.
//!
//! *Allocation* (`rmqueue_smallest`) takes the smallest free block of at least the
//! requested order and splits it (`expand`): the upper half goes back on the list one
//! order down, until the lower part has the requested order. Halves are handed out
//! lowest address first.
//!
//! ```text
//!   order 3 block at 0:   [0 1 2 3 4 5 6 7]      request order 1
//!   expand:               [0 1 2 3][4 5 6 7]  -> 4..7 back as order 2
//!                         [0 1][2 3]          -> 2..3 back as order 1
//!   returned:             [0 1]
//! ```
//!
//! *Freeing* (`free_one_page_locked`) repeatedly looks at the buddy: while it is a free
//! block of the same order (and, at pageblock order and above, of a type that may
//! merge), the buddy leaves its list and the two become one block of the next order.
//! A block whose parent's buddy is also free goes to the list tail, so it is less
//! likely to be handed out before that larger merge can happen.
//!
//! # Migratetypes and fallback
//!
//! A free block always sits on the list of its pageblock's type. When the requested
//! type has nothing, `rmqueue` falls back as Linux 6.15+ does: first try to *claim* a
//! whole pageblock of another type, largest blocks first (retyping it when enough of
//! it is free or compatible); failing that, *steal* the smallest suitable block of
//! another type without retyping its pageblock.
//!
//! A request that may use CMA pages (`AllocFlags::CMA`: a movable one) takes them
//! before its own type's when more than half the zone's free pages are CMA pages,
//! and otherwise between its own type's lists and the claim; `Cma` pageblocks are
//! never claimed or stolen (see `cma`).

use crate::frame::{Frames, FreeList, Tag, Word};
use crate::gfp::AllocFlags;
use crate::pageblock::{COUNTED, WHOLE};
use crate::types::{Migratetype, Order, Pfn, NR_ORDERS_MAX};
use crate::zone::{chunks, Zone, ZoneLocked};

/// A zone's limits on merging, read once for a batch of frees: `max`, the
/// largest order, and `below`, where the merge leaves the block's own pageblock
/// (the smaller of `max` and pageblock order).
#[derive(Clone, Copy)]
struct MergeLimits {
    max: u8,
    below: u8,
}

impl MergeLimits {
    #[inline(always)]
    fn of(z: &Zone) -> MergeLimits {
        MergeLimits {
            max: z.max_order.0,
            below: z.max_order.0.min(z.pageblock_order.0),
        }
    }
}

/// `fallbacks[]`: the types each ordinary type borrows from, in order.
const FALLBACKS: [[Migratetype; 2]; 3] = [
    [Migratetype::Reclaimable, Migratetype::Movable],
    [Migratetype::Reclaimable, Migratetype::Unmovable],
    [Migratetype::Unmovable, Migratetype::Movable],
];

/// Which source `rmqueue` uses; remembered across one per-CPU refill so that a batch
/// does not repeat searches that already failed (`enum rmqueue_mode`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RmqueueMode {
    Normal,
    Cma,
    Claim,
    Steal,
}

enum Fallback {
    Found(Migratetype),
    Empty,
    NoClaim,
}

/// A net change to the zone's free-page counters, gathered over a multi-step list
/// operation and stored once. The counters are read without the zone lock (the
/// watermark checks), so an operation that takes pages off in one step and puts
/// them back in the next must not publish the dip in between: a reader would see
/// a zone short of pages it never lacked, and fail an allocation for it.
#[derive(Clone, Copy, Default)]
pub(crate) struct FreeDelta {
    free: i64,
    highatomic: i64,
    cma: i64,
}

impl FreeDelta {
    /// Adds `nr` pages (negative: removes) on lists of type `mt`; isolated pages do
    /// not count as free.
    #[inline]
    pub(crate) fn with(mut self, nr: i64, mt: Migratetype) -> FreeDelta {
        if mt != Migratetype::Isolate {
            self.free += nr;
        }
        if mt == Migratetype::HighAtomic {
            self.highatomic += nr;
        }
        if mt == Migratetype::Cma {
            self.cma += nr;
        }
        self
    }

    /// Stores the net change: one update per counter that changed.
    #[inline]
    pub(crate) fn apply(self, zl: &ZoneLocked<'_>) {
        let c = &zl.zone.counters;
        if self.free != 0 {
            c.nr_free_pages.add(self.free);
        }
        if self.highatomic != 0 {
            c.nr_free_highatomic.add(self.highatomic);
        }
        if self.cma != 0 {
            c.nr_free_cma.add(self.cma);
        }
    }
}

/// Net changes to the lengths of one migratetype's free lists, by order, kept
/// while a merge loop runs and stored once at its end (`ZoneLocked::apply_lists`):
/// the loop then writes no counter and no `nonempty` bit per list operation. The
/// zone lock is held throughout, so no one sees the lists and their counts
/// disagree.
pub(crate) struct ListDelta {
    mt: Migratetype,
    /// By order (the array a power of two long, so that indexing it by an order
    /// masked to its length needs no bounds check in the merge loop).
    n: [i32; LIST_DELTA_ORDERS],
    /// Pages freed onto the type's lists (a batch's own accounting; a single
    /// free's caller accounts its pages itself).
    pages: i64,
    /// A block of at least the reporting order went onto a list: free page
    /// reporting is told once, when the counts are stored.
    report: bool,
}

impl ListDelta {
    #[inline(always)]
    pub(crate) fn new(mt: Migratetype) -> ListDelta {
        ListDelta {
            mt,
            n: [0; LIST_DELTA_ORDERS],
            pages: 0,
            report: false,
        }
    }

    #[inline(always)]
    fn add(&mut self, order: Order, d: i32) {
        debug_assert!(order.idx() < NR_ORDERS_MAX);
        self.n[order.idx() & (LIST_DELTA_ORDERS - 1)] += d;
    }
}

/// `ListDelta`'s orders: `NR_ORDERS_MAX` rounded up to a power of two.
const LIST_DELTA_ORDERS: usize = NR_ORDERS_MAX.next_power_of_two();

impl ZoneLocked<'_> {
    // ---------------------------------------------------------------------------
    // Free lists and their counters
    // ---------------------------------------------------------------------------

    /// `account_freepages()`: free-page counters, isolated pages excluded.
    #[inline]
    pub(crate) fn account_freepages(&self, nr: i64, mt: Migratetype) {
        FreeDelta::default().with(nr, mt).apply(self);
    }

    #[inline]
    fn count_list(&mut self, order: Order, mt: Migratetype, d: i64) {
        let c = &self.zone.counters;
        c.nr_free[order.idx()][mt.idx()].add(d);
        if order >= self.zone.pageblock_order && mt != Migratetype::Isolate {
            c.nr_free_pages_blocks.add(d * order.nr_pages() as i64);
        }
        if d > 0 {
            self.area.nonempty[mt.idx()] |= 1 << order.0;
        } else if self.area.lists[order.idx()][mt.idx()].is_empty(self.zone.frames.view()) {
            self.area.nonempty[mt.idx()] &= !(1 << order.0);
        }
    }

    /// Stores what a merge loop kept in `lists` (see `ListDelta`): each order's
    /// net change through `count_list` (an order whose list length came back to
    /// where it was keeps its counts and its `nonempty` bit), and the pages freed
    /// into `d`.
    #[inline]
    pub(crate) fn apply_lists(&mut self, lists: &ListDelta, d: &mut FreeDelta) {
        // Which orders changed, gathered without a branch per order (whether one
        // did is a coin toss in a shuffled free), then visited bit by bit.
        let mut changed = 0u32;
        for (o, &n) in lists.n.iter().enumerate() {
            changed |= ((n != 0) as u32) << o;
        }
        while changed != 0 {
            let o = changed.trailing_zeros() as u8;
            changed &= changed - 1;
            self.count_list(Order(o), lists.mt, lists.n[o as usize] as i64);
        }
        if lists.report {
            self.notify_report();
        }
        *d = d.with(lists.pages, lists.mt);
    }

    /// `__add_to_free_list()`: makes `pfn` the head of a free block of `order` on
    /// `free_list[order][mt]`, at the tail or the head.
    #[inline(always)]
    pub(crate) fn add_to_free_list(&mut self, pfn: Pfn, order: Order, mt: Migratetype, tail: bool) {
        self.add_free_in(self.zone.frames.view(), pfn, order, mt, tail);
    }

    /// `add_to_free_list` through a view the caller holds (see `Frames`).
    #[inline(always)]
    fn add_free_in(&mut self, t: Frames<'_>, pfn: Pfn, order: Order, mt: Migratetype, tail: bool) {
        self.push_free_in(t, pfn, order, mt, tail);
        self.count_list(order, mt, 1);
    }

    /// `add_free_in`'s list operation, leaving the counts to the caller.
    #[inline(always)]
    fn push_free_in(&mut self, t: Frames<'_>, pfn: Pfn, order: Order, mt: Migratetype, tail: bool) {
        debug_assert_eq!(
            self.zone.blocks.migratetype(pfn),
            mt,
            "free block on a foreign list"
        );
        debug_assert!(pfn.is_aligned(order));
        let idx = t.idx(pfn);
        t.set_word(idx, Word::buddy(order));
        self.area.lists[order.idx()][mt.idx()].push(t, idx, tail);
    }

    /// `__del_page_from_free_list()`: takes the free block at `pfn` off its list; the
    /// head becomes `Tail` until the caller gives it a new state.
    #[inline(always)]
    pub(crate) fn del_from_free_list(&mut self, pfn: Pfn, order: Order, mt: Migratetype) {
        self.del_free_in(self.zone.frames.view(), pfn, order, mt);
        // Every way out of the free lists but a merge passes here: a block taken
        // off is no longer reported (`__ClearPageReported()`).
        if order.0 >= self.area.report.order {
            self.unreport(pfn, order);
        }
    }

    /// Marks the units of block `(pfn, order)` unreported (see `ReportArea`).
    #[inline(never)]
    fn unreport(&mut self, pfn: Pfn, order: Order) {
        let z = self.zone;
        let n = self.area.report.clear(z.start_pfn, pfn, order);
        if n > 0 {
            z.counters
                .nr_reported
                .add(-((n << self.area.report.order) as i64));
        }
    }

    /// `page_reporting_notify_free()`: a free left a block of at least the
    /// reporting order on the lists.
    #[inline(never)]
    fn notify_report(&self) {
        let p = &self.zone.counters.report_pending;
        if !p.load(crate::sync::Ordering::Relaxed) {
            p.store(true, crate::sync::Ordering::Relaxed);
        }
    }

    /// `del_from_free_list` through a view the caller holds (see `Frames`).
    #[inline(always)]
    fn del_free_in(&mut self, t: Frames<'_>, pfn: Pfn, order: Order, mt: Migratetype) {
        self.unlink_free_in(t, pfn, order);
        self.count_list(order, mt, -1);
    }

    /// `del_free_in`'s list operation, leaving the counts to the caller.
    #[inline(always)]
    fn unlink_free_in(&mut self, t: Frames<'_>, pfn: Pfn, order: Order) {
        self.unlink_free_idx(t, t.idx(pfn), order);
    }

    /// `unlink_free_in` by table index.
    #[inline(always)]
    fn unlink_free_idx(&mut self, t: Frames<'_>, idx: u32, order: Order) {
        debug_assert_eq!(t.word(idx), Word::buddy(order));
        FreeList::unlink(t, idx);
        t.set_word(idx, Word::TAIL);
    }

    /// `move_to_free_list()`: moves a free block to the tail of another type's list.
    pub(crate) fn move_to_free_list(
        &mut self,
        pfn: Pfn,
        order: Order,
        old: Migratetype,
        new: Migratetype,
    ) {
        let z = self.zone;
        let idx = z.idx(pfn);
        let t = z.frames.view();
        FreeList::unlink(t, idx);
        self.count_list(order, old, -1);
        self.area.lists[order.idx()][new.idx()].push(t, idx, true);
        self.count_list(order, new, 1);
        let n = order.nr_pages() as i64;
        FreeDelta::default().with(-n, old).with(n, new).apply(self);
    }

    /// The head of `free_list[order][mt]`, if any.
    #[inline]
    pub(crate) fn first_free(&self, order: Order, mt: Migratetype) -> Option<Pfn> {
        let l = &self.area.lists[order.idx()][mt.idx()];
        l.first(self.zone.frames.view())
            .map(|h| self.zone.pfn_of(h))
    }

    /// `page_is_buddy()`: `pfn` is in this zone and heads a free block of `order`.
    #[inline]
    fn is_free_block(&self, pfn: Pfn, order: Order) -> bool {
        self.word_or_hole(self.zone.frames.view(), pfn) == Word::buddy(order)
    }

    // ---------------------------------------------------------------------------
    // Pageblock types
    // ---------------------------------------------------------------------------

    /// Sets the type of the pageblock holding `pfn`, keeping the per-type block
    /// counters. Free blocks inside must be moved by the caller.
    pub(crate) fn set_pageblock_type(&self, pfn: Pfn, mt: Migratetype) {
        let z = self.zone;
        let counted = z.blocks.flags(pfn) & COUNTED != 0;
        let (old, new) = z.blocks.set_locked(pfn, mt);
        if counted && old != new {
            z.counters.nr_blocks[old.idx()].add(-1);
            z.counters.nr_blocks[new.idx()].add(1);
        }
    }

    /// Clears the isolation of the pageblock holding `pfn`, keeping the counters.
    pub(crate) fn unisolate_pageblock(&self, pfn: Pfn) -> Migratetype {
        let z = self.zone;
        let counted = z.blocks.flags(pfn) & COUNTED != 0;
        let new = z.blocks.unisolate_locked(pfn);
        if counted && new != Migratetype::Isolate {
            z.counters.nr_blocks[Migratetype::Isolate.idx()].add(-1);
            z.counters.nr_blocks[new.idx()].add(1);
        }
        new
    }

    /// `change_pageblock_range()`: retypes every pageblock covered by the block.
    pub(crate) fn change_pageblock_range(&self, pfn: Pfn, order: Order, mt: Migratetype) {
        let pb = self.zone.pageblock_order;
        let nr_blocks = if order >= pb {
            1u64 << (order.0 - pb.0)
        } else {
            1
        };
        for i in 0..nr_blocks {
            self.set_pageblock_type(pfn.add(i << pb.0), mt);
        }
    }

    /// `prep_move_freepages_block()`: for the pageblock holding `pfn`, if it lies wholly
    /// in the zone, its first frame, its free pages and its movable allocated pages.
    fn pageblock_census(&self, pfn: Pfn) -> Option<(Pfn, u64, u64)> {
        let z = self.zone;
        if z.blocks.flags(pfn) & WHOLE == 0 {
            return None;
        }
        let pb_nr = z.pageblock_order.nr_pages();
        let start = Pfn(pfn.0 & !(pb_nr - 1));
        let (mut free, mut movable) = (0, 0);
        let mut p = start.0;
        while p < start.0 + pb_nr {
            let w = z.frames.word(z.idx(Pfn(p)));
            let n = w.order().nr_pages();
            match w.tag() {
                Tag::Buddy => {
                    free += n;
                    p += n;
                }
                Tag::Alloc => {
                    if w.aux() == Migratetype::Movable as u8 {
                        movable += n;
                    }
                    p += n;
                }
                Tag::Pcp | Tag::Frozen | Tag::Cached => p += n,
                _ => p += 1,
            }
        }
        Some((start, free, movable))
    }

    /// `__move_freepages_block()`: moves every free block of the pageblock starting at
    /// `start` from `old`'s lists to `new`'s, then retypes the block. Returns the pages
    /// moved.
    fn move_freepages_block_from(&mut self, start: Pfn, old: Migratetype, new: Migratetype) -> u64 {
        let z = self.zone;
        let pb_nr = z.pageblock_order.nr_pages();
        let mut moved = 0;
        let mut p = start.0;
        while p < start.0 + pb_nr {
            let w = z.frames.word(z.idx(Pfn(p)));
            if w.tag() == Tag::Buddy {
                self.move_to_free_list(Pfn(p), w.order(), old, new);
                moved += w.order().nr_pages();
                p += w.order().nr_pages();
            } else {
                p += 1;
            }
        }
        self.set_pageblock_type(start, new);
        self.remerge(start, z.pageblock_order, new);
        moved
    }

    /// After a retype, a free block of at least pageblock order may now merge with a
    /// buddy it was kept apart from (a buddy of another type that the new type may
    /// merge with: the same type, or both ordinary types): free it again so it does.
    /// Linux does this when un-isolating; doing it on every retype keeps "no free
    /// buddies left unmerged where merging is allowed" an invariant.
    pub(crate) fn remerge(&mut self, pfn: Pfn, order: Order, mt: Migratetype) {
        if order >= self.zone.max_order || !self.is_free_block(pfn, order) {
            return;
        }
        let buddy = pfn.buddy(order);
        if !self.is_free_block(buddy, order) {
            return;
        }
        let buddy_mt = self.zone.blocks.migratetype(buddy);
        if buddy_mt != mt && !(mt.is_mergeable() && buddy_mt.is_mergeable()) {
            return;
        }
        // The block stays free throughout: only a change of type is accounted.
        self.del_from_free_list(pfn, order, mt);
        let mut d = FreeDelta::default();
        self.merge_free(pfn, order, mt, true, &mut d);
        d.apply(self);
    }

    /// `move_freepages_block()`: as above for the pageblock holding `pfn`; `None` if
    /// the block straddles the zone's edge.
    pub(crate) fn move_freepages_block(
        &mut self,
        pfn: Pfn,
        old: Migratetype,
        new: Migratetype,
    ) -> Option<u64> {
        let (start, _, _) = self.pageblock_census(pfn)?;
        Some(self.move_freepages_block_from(start, old, new))
    }

    // ---------------------------------------------------------------------------
    // Freeing
    // ---------------------------------------------------------------------------

    /// `__free_one_page()`: puts the block at `pfn` (owned by the caller, state
    /// `Frozen` or `Tail`) on the free lists of type `mt`, merging with free buddies.
    pub(crate) fn free_one_page_locked(
        &mut self,
        pfn: Pfn,
        order: Order,
        mt: Migratetype,
        to_tail: bool,
    ) {
        let mut d = FreeDelta::default().with(order.nr_pages() as i64, mt);
        self.merge_free(pfn, order, mt, to_tail, &mut d);
        d.apply(self);
    }

    /// `free_one_page_locked` without its own accounting: merges the block and puts
    /// it on the lists, adding any change of type to `d` for the caller to apply.
    pub(crate) fn merge_free(
        &mut self,
        pfn: Pfn,
        order: Order,
        mt: Migratetype,
        to_tail: bool,
        d: &mut FreeDelta,
    ) {
        let mut lists = ListDelta::new(mt);
        let lim = MergeLimits::of(self.zone);
        self.merge_free_inline(
            self.zone.frames.view(),
            lim,
            pfn,
            order,
            to_tail,
            d,
            &mut lists,
        );
        self.apply_lists(&lists, d);
    }

    /// The blocks of `order` at `blocks`, owned by the caller (state `Cached`,
    /// `Frozen` or `Tail`), merged and put on the free lists of their pageblocks'
    /// types: a flush's locked part, with the free counters updated once for the
    /// whole batch.
    pub(crate) fn free_batch_locked(&mut self, blocks: &[Pfn], order: Order) {
        if order > self.zone.pageblock_order {
            return self.free_each_locked(blocks, order);
        }
        self.free_blocks_locked(blocks.iter().map(|&pfn| (pfn, order)));
    }

    /// `free_batch_locked` of blocks larger than a pageblock (only where a
    /// pageblock is smaller than the cache's largest order): one at a time, each
    /// pageblock's part to its own type's lists. Kept out of line, away from the
    /// batch loop.
    #[cold]
    #[inline(never)]
    fn free_each_locked(&mut self, blocks: &[Pfn], order: Order) {
        for &pfn in blocks {
            self.free_block_locked(pfn, order, false);
        }
    }

    /// `free_batch_locked` for blocks of mixed orders, none above pageblock order:
    /// what `free_block_locked(pfn, order, false)` on each in turn would do, with
    /// one update of the free counters.
    #[inline(always)]
    pub(crate) fn free_blocks_locked(&mut self, blocks: impl Iterator<Item = (Pfn, Order)>) {
        let z = self.zone;
        let t = z.frames.view();
        let mut d = FreeDelta::default();
        // Consecutive blocks are mostly of one pageblock type: one masked compare
        // confirms the last type, and only a change decodes the byte in full (and
        // stores the list counts kept for the type before).
        let mut lists = ListDelta::new(Migratetype::Unmovable);
        let types = z.blocks.view();
        let lim = MergeLimits::of(z);
        for (pfn, order) in blocks {
            debug_assert!(order <= z.pageblock_order);
            if !types.is_type(pfn, lists.mt) {
                self.apply_lists(&lists, &mut d);
                lists = ListDelta::new(z.blocks.migratetype(pfn));
            }
            lists.pages += order.nr_pages() as i64;
            self.merge_free_inline(t, lim, pfn, order, false, &mut d, &mut lists);
        }
        self.apply_lists(&lists, &mut d);
        d.apply(self);
    }

    /// `merge_free`'s body, inlined into the batch free.
    ///
    /// Below pageblock order a buddy lies in the block's own pageblock, so when it
    /// is free it is on a list of the block's type: that part of the merge runs
    /// on table indices with no type to look up. The buddy's index is its frame
    /// number's (`pfn ^ 2^order`) minus the zone's first, so a zone may start at
    /// any frame; the merged block's head is the lower of the two. Merges at
    /// pageblock order and above, where two pageblocks' types meet, go on in
    /// `merge_across_pageblocks`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn merge_free_inline(
        &mut self,
        t: Frames<'_>,
        lim: MergeLimits,
        pfn: Pfn,
        order: Order,
        to_tail: bool,
        d: &mut FreeDelta,
        lists: &mut ListDelta,
    ) {
        let mt = lists.mt;
        let MergeLimits { max, below } = lim;
        let base = t.base();
        // The block's head stops being a head if it merges downwards.
        let mut idx = t.idx(pfn);
        t.set_word(idx, Word::TAIL);
        let mut order = order.0;
        let mut merging = true;
        while order < below {
            // Past the frames (a buddy beyond the zone's end) `word_any` reads
            // padding, a sentinel or nothing: never a free head.
            let b = ((base + idx as u64) ^ (1u64 << order)).wrapping_sub(base);
            if t.word_any(b) != Word::buddy(Order(order)) {
                merging = false;
                break;
            }
            let b = b as u32;
            self.unlink_free_idx(t, b, Order(order));
            lists.add(Order(order), -1);
            idx = idx.min(b);
            order += 1;
        }
        // The first step up is tested here, so that a block whose buddy is not
        // free (half of a shuffled free at pageblock order) makes no call.
        if merging
            && order < max
            && t.word_any(((base + idx as u64) ^ (1u64 << order)).wrapping_sub(base))
                == Word::buddy(Order(order))
        {
            let (p, o) =
                self.merge_across_pageblocks(t, Pfn(base + idx as u64), Order(order), d, lists);
            (idx, order) = (t.idx(p), o.0);
        }
        // `buddy_merge_likely()`: when the block one order up is free, this one
        // may soon merge with it too, so it goes to the tail. (The parent's
        // buddy: the frame number with bit `order` cleared and bit `order + 1`
        // flipped.)
        let mut tail = to_tail;
        if order + 1 < max {
            let p = base + idx as u64;
            let q = ((p & !(1u64 << order)) ^ (2u64 << order)).wrapping_sub(base);
            tail |= t.word_any(q) == Word::buddy(Order(order + 1));
        }
        lists.report |= order >= self.area.report.order;
        let order = Order(order);
        self.push_free_in(t, Pfn(base + idx as u64), order, mt, tail);
        lists.add(order, 1);
    }

    /// The merge from pageblock order up (see `merge_free_inline`): each buddy's
    /// own pageblock type decides whether the two may merge (mergeable types do,
    /// the result taking the block's type). Returns the merged block.
    #[inline(never)]
    fn merge_across_pageblocks(
        &mut self,
        t: Frames<'_>,
        pfn: Pfn,
        order: Order,
        d: &mut FreeDelta,
        lists: &mut ListDelta,
    ) -> (Pfn, Order) {
        let mt = lists.mt;
        let z = self.zone;
        let (mut pfn, mut order) = (pfn, order);
        while order < z.max_order {
            let buddy = pfn.buddy(order);
            if self.word_or_hole(t, buddy) != Word::buddy(order) {
                break;
            }
            let buddy_mt = z.blocks.migratetype(buddy);
            if buddy_mt == mt {
                self.unlink_free_in(t, buddy, order);
                lists.add(order, -1);
            } else if mt.is_mergeable() && buddy_mt.is_mergeable() {
                self.del_free_in(t, buddy, order, buddy_mt);
                // Two mergeable types met at pageblock order: the result takes ours.
                let n = order.nr_pages() as i64;
                *d = d.with(-n, buddy_mt).with(n, mt);
                self.change_pageblock_range(buddy, order, mt);
            } else {
                break;
            }
            pfn = Pfn(pfn.0 & buddy.0);
            order = Order(order.0 + 1);
        }
        (pfn, order)
    }

    /// The state word of frame `pfn`, `Hole` outside the zone: a plain word, so
    /// the merge loop compares it without first testing an `Option` (which
    /// measured slower there).
    #[inline(always)]
    fn word_or_hole(&self, t: Frames<'_>, pfn: Pfn) -> Word {
        t.word_of(pfn).unwrap_or(Word::HOLE)
    }

    /// Merges the blocks whose free found the zone lock taken (see
    /// `Zone::defer_free`); returns how many.
    pub(crate) fn free_deferred(&mut self) -> u64 {
        let z = self.zone;
        // Acquire: pairs with the Release of each push, so every link and frozen
        // word of the list is seen.
        let mut idx = z
            .deferred
            .swap(crate::frame::NIL, crate::sync::Ordering::Acquire);
        let t = z.frames.view();
        let mut n = 0;
        while idx != crate::frame::NIL {
            let next = t.prev(idx);
            t.set_prev(idx, crate::frame::NIL);
            let order = t.word(idx).order();
            debug_assert_eq!(t.word(idx), Word::frozen(order));
            self.free_block_locked(z.pfn_of(idx), order, false);
            z.events.pgfree.inc(order.nr_pages());
            z.undefer_pages(order.nr_pages());
            n += 1;
            idx = next;
        }
        n
    }

    /// Frees every present frame in the largest naturally aligned chunks
    /// (`__free_pages_core` with `FPI_TO_TAIL`): the zone's construction, which
    /// also sizes its offline bitmap for every pageblock (`FreeArea::size_offline`).
    pub(crate) fn release_initial_frames(&mut self, present: &[(u64, u64)]) {
        let nr_blocks = self.zone.blocks.len();
        self.area.size_offline(nr_blocks);
        for &(a, b) in present {
            self.release_frames(a.max(self.zone.start_pfn), b.min(self.zone.end_pfn()));
        }
    }

    /// Frees the frames of `[start, end)` that are taken (`Tail`), as the largest
    /// aligned blocks; holes and reserved frames stay as they are.
    pub(crate) fn release_frames(&mut self, start: u64, end: u64) {
        let z = self.zone;
        let mut p = start;
        while p < end {
            if z.frames.word(z.idx(Pfn(p))) != Word::TAIL {
                p += 1;
                continue;
            }
            let mut q = p;
            while q < end && z.frames.word(z.idx(Pfn(q))) == Word::TAIL {
                q += 1;
            }
            for (pfn, order) in chunks(Pfn(p), q - p, z.max_order) {
                self.free_block_locked(pfn, order, true);
            }
            p = q;
        }
    }

    /// `split_large_buddy()`: frees a block owned by the caller, one pageblock at a
    /// time when it is larger than a pageblock, each part on its own block's type.
    pub(crate) fn free_block_locked(&mut self, pfn: Pfn, order: Order, to_tail: bool) {
        let z = self.zone;
        let pb = z.pageblock_order;
        if order <= pb {
            let mt = z.blocks.migratetype(pfn);
            self.free_one_page_locked(pfn, order, mt, to_tail);
            return;
        }
        for i in 0..1u64 << (order.0 - pb.0) {
            let p = pfn.add(i << pb.0);
            let mt = z.blocks.migratetype(p);
            self.free_one_page_locked(p, pb, mt, to_tail);
        }
    }

    // ---------------------------------------------------------------------------
    // Allocation
    // ---------------------------------------------------------------------------

    /// `expand()`: splits the block of order `high` at `pfn` down to `low`, putting the
    /// upper halves back on `mt`'s lists. Returns the pages put back.
    fn expand(&mut self, pfn: Pfn, low: Order, high: Order, mt: Migratetype) -> u64 {
        let mut high = high.0;
        let mut put_back = 0;
        while high > low.0 {
            high -= 1;
            let half = pfn.add(1 << high);
            self.add_to_free_list(half, Order(high), mt, false);
            put_back += 1u64 << high;
        }
        put_back
    }

    /// `page_del_and_expand()`: takes the free block at `pfn` of order `high` and
    /// keeps its first `2^low` frames, returning the rest to `mt`'s lists.
    fn del_and_expand(&mut self, pfn: Pfn, low: Order, high: Order, mt: Migratetype) {
        self.del_from_free_list(pfn, high, mt);
        let put_back = self.expand(pfn, low, high, mt);
        self.account_freepages(-((high.nr_pages() - put_back) as i64), mt);
    }

    /// `__rmqueue_smallest()`: the smallest free block of type `mt` of at least
    /// `order`, split down to `order`. The returned head is in state `Tail`; the caller
    /// gives it its allocated state.
    pub(crate) fn rmqueue_smallest(&mut self, order: Order, mt: Migratetype) -> Option<Pfn> {
        let mask = self.area.nonempty[mt.idx()] >> order.0;
        if mask == 0 {
            return None;
        }
        let cur = Order(order.0 + mask.trailing_zeros() as u8);
        let pfn = self.first_free(cur, mt)?;
        self.del_and_expand(pfn, order, cur, mt);
        Some(pfn)
    }

    /// The free-list type a request for `mt` draws from: `Unmovable` for every
    /// request when the zone does not group by mobility.
    #[inline]
    fn request_type(&self, mt: Migratetype) -> Migratetype {
        if self.zone.mobility_disabled {
            Migratetype::Unmovable
        } else {
            mt
        }
    }

    /// `rmqueue_buddy()`'s locked part: one block of `order` for a request of type
    /// `mt`, with the highatomic reserve used and grown as `flags` allow.
    pub(crate) fn rmqueue_one(
        &mut self,
        order: Order,
        mt: Migratetype,
        flags: AllocFlags,
    ) -> Option<Pfn> {
        let mut page = None;
        if flags.has(AllocFlags::HIGHATOMIC) {
            page = self.rmqueue_smallest(order, Migratetype::HighAtomic);
        }
        if page.is_none() {
            let mut mode = RmqueueMode::Normal;
            page = self.rmqueue(order, self.request_type(mt), flags, &mut mode);
            if page.is_none() && flags.has(AllocFlags::OOM | AllocFlags::NON_BLOCK) {
                page = self.rmqueue_smallest(order, Migratetype::HighAtomic);
            }
        }
        let pfn = page?;
        if flags.has(AllocFlags::HIGHATOMIC) && order.0 > 0 {
            self.reserve_highatomic(pfn, order);
        }
        Some(pfn)
    }

    /// `rmqueue_bulk()`'s locked part: up to `count` blocks of `order` for a request
    /// of type `mt`, handed to `put` as runs (`put(first, n)`: `n` blocks of `order`
    /// at ascending addresses from `first`), one fallback mode kept across the
    /// batch. Returns how many were taken.
    ///
    /// Linux takes the blocks one `__rmqueue()` at a time. From its own type's lists
    /// that always splits the smallest free block, and the halves a split puts back
    /// are the smallest blocks at the next call, so a run of calls empties one free
    /// block, lowest address first, before it touches another. This takes the same
    /// blocks a free block at a time: the whole block when the rest of the batch
    /// covers it, else its first power-of-two part, the rest put back as `expand`
    /// would. One list operation or a few per free block instead of one or more per
    /// block handed out; the blocks, their order and the lists left behind are those
    /// of the one-at-a-time walk. The fallbacks to other types go block by block.
    ///
    /// With `whole`, a free block of at most `count` blocks is taken whole even when
    /// less of the batch is left, so the batch may end up to `count - 1` blocks over:
    /// a refill that never splits a small block leaves no remnant below the batch's
    /// size for the next refill to start from, so that refill takes one block where
    /// the exact count would take the remnants of every order below it.
    pub(crate) fn rmqueue_bulk(
        &mut self,
        order: Order,
        mt: Migratetype,
        flags: AllocFlags,
        count: u64,
        whole: bool,
        mut put: impl FnMut(Pfn, u64),
    ) -> u64 {
        let mt = self.request_type(mt);
        let mut mode = RmqueueMode::Normal;
        let mut got = 0;
        while got < count {
            // A run from CMA lists first where `rmqueue` would take its block
            // there (see `cma_first`), else from the request's own type.
            let src = if self.cma_first(order, flags) {
                Migratetype::Cma
            } else {
                mt
            };
            let mask = self.area.nonempty[src.idx()] >> order.0;
            if mode == RmqueueMode::Normal && mask != 0 {
                let cur = Order(order.0 + mask.trailing_zeros() as u8);
                let Some(pfn) = self.first_free(cur, src) else {
                    break;
                };
                let size = u32::from(cur.0 - order.0);
                let k = if whole && 1u64 << size <= count {
                    size
                } else {
                    crate::types::ilog2(count - got).min(size)
                };
                self.del_and_expand(pfn, Order(order.0 + k as u8), cur, src);
                put(pfn, 1 << k);
                got += 1 << k;
                continue;
            }
            let Some(pfn) = self.rmqueue(order, mt, flags, &mut mode) else {
                break;
            };
            put(pfn, 1);
            got += 1;
        }
        got
    }

    /// `__rmqueue()`: a block of `order` for type `mt`, falling back to other types
    /// as `mode` allows (see the module documentation).
    fn rmqueue(
        &mut self,
        order: Order,
        mt: Migratetype,
        flags: AllocFlags,
        mode: &mut RmqueueMode,
    ) -> Option<Pfn> {
        if self.cma_first(order, flags) {
            if let Some(p) = self.rmqueue_smallest(order, Migratetype::Cma) {
                return Some(p);
            }
        }
        if *mode == RmqueueMode::Normal {
            if let Some(p) = self.rmqueue_smallest(order, mt) {
                return Some(p);
            }
            *mode = RmqueueMode::Cma;
        }
        if *mode == RmqueueMode::Cma {
            if flags.has(AllocFlags::CMA) {
                if let Some(p) = self.rmqueue_smallest(order, Migratetype::Cma) {
                    return Some(p);
                }
            }
            *mode = RmqueueMode::Claim;
        }
        if *mode == RmqueueMode::Claim {
            if let Some(p) = self.rmqueue_claim(order, mt, flags) {
                *mode = RmqueueMode::Normal;
                return Some(p);
            }
            *mode = RmqueueMode::Steal;
        }
        if !flags.has(AllocFlags::NOFRAGMENT) {
            if let Some(p) = self.rmqueue_steal(order, mt) {
                return Some(p);
            }
        }
        None
    }

    /// Whether a request that may use CMA pages takes them before its own type's
    /// (`__rmqueue()`'s balance): when more than half the zone's free pages are
    /// CMA pages, so that movable allocations spread over the areas instead of
    /// leaving them idle while the rest of the zone runs out.
    #[inline]
    fn cma_first(&self, order: Order, flags: AllocFlags) -> bool {
        let c = &self.zone.counters;
        flags.has(AllocFlags::CMA)
            && self.area.nonempty[Migratetype::Cma.idx()] >> order.0 != 0
            && c.nr_free_cma.get() > c.nr_free_pages.get() / 2
    }

    /// `should_try_claim_block()`: small movable requests only borrow.
    fn should_try_claim_block(&self, order: Order, mt: Migratetype) -> bool {
        let pb = self.zone.pageblock_order.0;
        order.0 >= pb
            || order.0 >= pb / 2
            || mt == Migratetype::Reclaimable
            || mt == Migratetype::Unmovable
            || self.zone.mobility_disabled
    }

    /// `find_suitable_fallback()`.
    fn find_suitable_fallback(&self, order: Order, mt: Migratetype, claimable: bool) -> Fallback {
        if claimable && !self.should_try_claim_block(order, mt) {
            return Fallback::NoClaim;
        }
        let Some(row) = FALLBACKS.get(mt.idx()) else {
            return Fallback::Empty;
        };
        for &f in row {
            if self.area.nonempty[f.idx()] & (1 << order.0) != 0 {
                return Fallback::Found(f);
            }
        }
        Fallback::Empty
    }

    /// `__rmqueue_claim()`: take over a pageblock of another type, largest free
    /// blocks first.
    fn rmqueue_claim(&mut self, order: Order, mt: Migratetype, flags: AllocFlags) -> Option<Pfn> {
        let pb = self.zone.pageblock_order;
        let min_order = if flags.has(AllocFlags::NOFRAGMENT) && order < pb {
            pb
        } else {
            order
        };
        let mut cur = self.zone.max_order.0 as i32;
        while cur >= min_order.0 as i32 {
            let c = Order(cur as u8);
            cur -= 1;
            let fallback = match self.find_suitable_fallback(c, mt, true) {
                Fallback::Empty => continue,
                Fallback::NoClaim => break,
                Fallback::Found(f) => f,
            };
            let head = self.first_free(c, fallback)?;
            if let Some(p) = self.try_to_claim_block(head, c, order, mt, fallback) {
                self.zone.events.extfrag.inc(1);
                return Some(p);
            }
        }
        None
    }

    /// `try_to_claim_block()`.
    fn try_to_claim_block(
        &mut self,
        pfn: Pfn,
        cur: Order,
        order: Order,
        start: Migratetype,
        block: Migratetype,
    ) -> Option<Pfn> {
        let z = self.zone;
        let pb = z.pageblock_order;
        if cur >= pb {
            // The free block covers whole pageblocks: take them all.
            self.del_from_free_list(pfn, cur, block);
            self.change_pageblock_range(pfn, cur, start);
            let added = self.expand(pfn, order, cur, start);
            FreeDelta::default()
                .with(-(cur.nr_pages() as i64), block)
                .with(added as i64, start)
                .apply(self);
            z.events.claims.inc(1);
            return Some(pfn);
        }
        // Boost the watermarks so that reclaim makes room before the next
        // fallback (`boost_watermark()`), and have kswapd woken.
        if self.boost_watermark() {
            z.flags.fetch_or(
                crate::zone::ZONE_BOOSTED_WATERMARK,
                crate::sync::Ordering::Relaxed,
            );
        }
        let (bstart, free, movable) = self.pageblock_census(pfn)?;
        let pb_nr = pb.nr_pages();
        let alike = if start == Migratetype::Movable {
            movable
        } else if block == Migratetype::Movable {
            pb_nr - free - movable
        } else {
            0
        };
        if free + alike >= pb_nr / 2 || z.mobility_disabled {
            self.move_freepages_block_from(bstart, block, start);
            z.events.claims.inc(1);
            return self.rmqueue_smallest(order, start);
        }
        None
    }

    /// `boost_watermark()`: raises the zone's watermark boost by a pageblock, up
    /// to `watermark_boost_factor` of the high watermark (at least a pageblock);
    /// `false` where boosting is off or the zone too small for it.
    fn boost_watermark(&self) -> bool {
        let z = self.zone;
        if z.boost_factor == 0 {
            return false;
        }
        let pb_nr = z.pageblock_order.nr_pages();
        // Linux leaves zones of fewer than four pageblocks alone, and zones
        // whose high watermark is not set yet.
        if pb_nr * 4 > z.managed {
            return false;
        }
        let high =
            z.watermark[crate::types::Wmark::High as usize].load(crate::sync::Ordering::Relaxed);
        let max = high.saturating_mul(z.boost_factor) / 10_000;
        if max == 0 {
            return false;
        }
        let max = max.max(pb_nr);
        let b = z.watermark_boost.load(crate::sync::Ordering::Relaxed);
        z.watermark_boost
            .store((b + pb_nr).min(max), crate::sync::Ordering::Relaxed);
        true
    }

    /// `__rmqueue_steal()`: borrow the smallest suitable block of another type; its
    /// pageblock keeps its type.
    fn rmqueue_steal(&mut self, order: Order, mt: Migratetype) -> Option<Pfn> {
        for c in order.0..=self.zone.max_order.0 {
            let c = Order(c);
            if let Fallback::Found(f) = self.find_suitable_fallback(c, mt, false) {
                let pfn = self.first_free(c, f)?;
                self.del_and_expand(pfn, order, c, f);
                self.zone.events.extfrag.inc(1);
                return Some(pfn);
            }
        }
        None
    }

    // ---------------------------------------------------------------------------
    // HighAtomic reserves
    // ---------------------------------------------------------------------------

    /// `reserve_highatomic_pageblock()`: after a high-order atomic allocation at
    /// `pfn`, turn its pageblock into a HighAtomic reserve (up to ~1% of the zone).
    pub(crate) fn reserve_highatomic(&mut self, pfn: Pfn, order: Order) {
        let z = self.zone;
        let pb_nr = z.pageblock_order.nr_pages();
        if z.managed / 100 < pb_nr {
            return;
        }
        let max = (z.managed / 100).div_ceil(pb_nr) * pb_nr;
        if self.area.nr_reserved_highatomic >= max {
            return;
        }
        let mt = z.blocks.migratetype(pfn);
        if !mt.is_mergeable() {
            return;
        }
        let added = if order < z.pageblock_order {
            if self
                .move_freepages_block(pfn, mt, Migratetype::HighAtomic)
                .is_none()
            {
                return;
            }
            pb_nr
        } else {
            self.change_pageblock_range(pfn, order, Migratetype::HighAtomic);
            order.nr_pages()
        };
        self.set_reserved_highatomic(self.area.nr_reserved_highatomic + added);
        z.events.highatomic_reserve.inc(1);
    }

    fn set_reserved_highatomic(&mut self, v: u64) {
        self.area.nr_reserved_highatomic = v;
        let c = &self.zone.counters.nr_reserved_highatomic;
        c.set(v);
    }

    /// `unreserve_highatomic_pageblock()` for this zone: give one reserved block with
    /// free memory back to `mt`. Unless `force`, keep the last reserved block.
    pub(crate) fn unreserve_highatomic(&mut self, mt: Migratetype, force: bool) -> bool {
        let z = self.zone;
        let pb = z.pageblock_order;
        if !force && self.area.nr_reserved_highatomic <= pb.nr_pages() {
            return false;
        }
        for o in 0..=z.max_order.0 {
            let order = Order(o);
            let Some(pfn) = self.first_free(order, Migratetype::HighAtomic) else {
                continue;
            };
            let size = pb
                .nr_pages()
                .max(order.nr_pages())
                .min(self.area.nr_reserved_highatomic);
            self.set_reserved_highatomic(self.area.nr_reserved_highatomic - size);
            let moved = if order < pb {
                self.move_freepages_block(pfn, Migratetype::HighAtomic, mt)
                    .is_some()
            } else {
                self.move_to_free_list(pfn, order, Migratetype::HighAtomic, mt);
                self.change_pageblock_range(pfn, order, mt);
                self.remerge(pfn, order, mt);
                true
            };
            if moved {
                z.events.highatomic_unreserve.inc(1);
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, PcpConfig};
    use crate::gfp::Gfp;
    use crate::{AbstractFrames, ZoneAllocator};
    use alloc::format;
    use alloc::vec::Vec;

    /// A zone of `mib` MiB without per-CPU lists, filled at order 0 and then given
    /// back in part, in an order and a pattern set by `seed`: free blocks of every
    /// order, on lists in no particular order.
    fn fragmented(mib: u64, seed: u64) -> ZoneAllocator<AbstractFrames> {
        let za = ZoneAllocator::new(Config {
            min_free_kbytes: Some(0),
            pcp: PcpConfig {
                enabled: false,
                ..PcpConfig::default()
            },
            ..Config::with_bytes(mib << 20)
        })
        .unwrap();
        let mut held = Vec::new();
        while let Ok(p) = za.alloc_pages(Gfp::KERNEL, Order(0)) {
            held.push(p);
        }
        let mut x = seed | 1;
        for i in (1..held.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            held.swap(i, (x % (i as u64 + 1)) as usize);
        }
        // Three pages in four back, the rest kept: remnants at every order.
        for (i, &p) in held.iter().enumerate() {
            if i % 4 != 0 {
                za.free_pages(p, Order(0)).unwrap();
            }
        }
        za
    }

    /// The free lists, heads in list order, and every counter they keep.
    fn lists(zl: &ZoneLocked<'_>) -> (Vec<Vec<u32>>, Vec<u32>, Vec<u64>, u64) {
        let z = zl.zone;
        let mut heads = Vec::new();
        let mut counts = Vec::new();
        for (o, row) in zl.area.lists.iter().enumerate() {
            for (m, l) in row.iter().enumerate() {
                heads.push(l.iter(&z.frames).collect());
                counts.push(z.counters.nr_free[o][m].get());
            }
        }
        let nonempty = zl.area.nonempty.to_vec();
        (heads, nonempty, counts, z.counters.nr_free_pages.get())
    }

    // A check of the walk's logic, not of memory or atomics: too slow for Miri,
    // which runs this crate's unit tests in the CI (allocator.rs's small ones
    // cover the same code there).
    #[test]
    #[cfg_attr(miri, ignore)]
    fn bulk_takes_what_the_one_at_a_time_walk_takes() {
        for seed in [1, 2, 3] {
            for order in 0..=3u8 {
                // Movable requests of a zone whose blocks are all Unmovable take
                // the fallback paths too.
                for mt in [Migratetype::Unmovable, Migratetype::Movable] {
                    for (count, whole) in [1, 5, 31, 63, 500]
                        .into_iter()
                        .flat_map(|c| [(c, false), (c, true)])
                    {
                        let (a, b) = (fragmented(16, seed), fragmented(16, seed));
                        let order = Order(order);
                        let flags = AllocFlags::fast(Gfp::KERNEL, order.0);
                        let mut bulk = Vec::new();
                        let mut za = a.zones[0].lock();
                        let got = za.rmqueue_bulk(order, mt, flags, count, whole, |p, n| {
                            bulk.extend((0..n).map(|i| p.add(i << order.0)));
                        });
                        assert_eq!(got, bulk.len() as u64);
                        // Exactly `count` blocks, or with `whole` fewer than twice as
                        // many: the walk's first ones, as if it had gone on.
                        if whole {
                            assert!(got < 2 * count);
                        } else {
                            assert!(got <= count);
                        }
                        let mut walk = Vec::new();
                        let mut zb = b.zones[0].lock();
                        let rt = zb.request_type(mt);
                        let mut mode = RmqueueMode::Normal;
                        while (walk.len() as u64) < got.max(count) {
                            match zb.rmqueue(order, rt, flags, &mut mode) {
                                Some(p) => walk.push(p),
                                None => break,
                            }
                        }
                        assert!(!walk.is_empty());
                        let at = format!(
                            "seed {seed} order {order:?} {mt:?} count {count} whole {whole}"
                        );
                        assert_eq!(bulk, walk, "{at}");
                        assert_eq!(lists(&za), lists(&zb), "lists left behind differ: {at}");
                    }
                }
            }
        }
    }

    /// Blocks of orders 0 to 3 allocated from `za` until `n` are held or none is
    /// left, the order cycling with the count.
    fn mixed_blocks(za: &ZoneAllocator<AbstractFrames>, n: usize) -> Vec<(Pfn, Order)> {
        let mut held = Vec::new();
        for i in 0..n {
            let order = Order((i % 4) as u8);
            if let Ok(p) = za.alloc_pages(Gfp::KERNEL, order) {
                held.push((p, order));
            }
        }
        held
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_batch_free_leaves_what_one_at_a_time_frees_leave() {
        for seed in [1, 2] {
            let (a, b) = (fragmented(8, seed), fragmented(8, seed));
            let (ha, hb) = (mixed_blocks(&a, 600), mixed_blocks(&b, 600));
            assert_eq!(ha, hb);
            assert!(ha.len() > 100, "seed {seed}: {} blocks", ha.len());
            assert!(ha.iter().all(|&(_, o)| o <= a.zones[0].pageblock_order));
            a.zones[0].lock().free_blocks_locked(ha.iter().copied());
            let mut zb = b.zones[0].lock();
            for &(p, order) in &hb {
                zb.free_block_locked(p, order, false);
            }
            assert_eq!(lists(&a.zones[0].lock()), lists(&zb), "seed {seed}");
            drop(zb);
            a.check_invariants().unwrap();
            b.check_invariants().unwrap();
        }
    }

    #[test]
    fn a_batch_free_splits_a_block_larger_than_a_pageblock_by_type() {
        // Two-page pageblocks: an order-3 block spans four of them. The third is
        // retyped while the blocks are out, so none can go back whole on the lists
        // of its first pageblock's type.
        let config = Config {
            max_order: Order(4),
            pageblock_order: Order(1),
            min_free_kbytes: Some(0),
            pcp: PcpConfig {
                enabled: false,
                ..PcpConfig::default()
            },
            ..Config::with_bytes(1 << 20)
        };
        let (a, b) = (
            ZoneAllocator::new(config.clone()).unwrap(),
            ZoneAllocator::new(config).unwrap(),
        );
        let mut held = Vec::new();
        for za in [&a, &b] {
            let mut mine = Vec::new();
            for _ in 0..3 {
                let p = za.alloc_pages(Gfp::KERNEL, Order(3)).unwrap();
                let zl = za.zones[0].lock();
                let mt = za.zones[0].blocks.migratetype(p);
                let other = if mt == Migratetype::Movable {
                    Migratetype::Unmovable
                } else {
                    Migratetype::Movable
                };
                zl.set_pageblock_type(p.add(4), other);
                mine.push(p);
            }
            held.push(mine);
        }
        assert_eq!(held[0], held[1]);
        a.zones[0].lock().free_batch_locked(&held[0], Order(3));
        let mut zb = b.zones[0].lock();
        for &p in &held[1] {
            zb.free_block_locked(p, Order(3), false);
        }
        drop(zb);
        a.check_invariants().unwrap();
        b.check_invariants().unwrap();
        assert_eq!(lists(&a.zones[0].lock()), lists(&b.zones[0].lock()));
    }
}
