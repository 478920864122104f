//! Per-frame metadata: the `struct page` analogue, 16 bytes a frame.
//!
//! Lowest layer of the allocator. Each zone owns one `PageMeta` per spanned frame,
//! holes included. A `PageMeta` is three atomics:
//!
//! ```text
//!  word (u64):  | refcount: u32 | flags: u8 | aux: u8 | order: u8 | tag: u8 |
//!
//!  flags (heads of allocated blocks only; cleared when the block is freed):
//!    FLAG_GUARDED  a `PageBlock` guard owns the block: the raw API refuses it
//!    FLAG_FRAG     a page_frag cache carves the block: fragment frees check the
//!                  cache's published bias (see `page_frag`)
//!    FLAG_ISOLATED compaction isolated the movable block to migrate it and holds
//!                  one of its references (see `migrate`)
//!    FLAG_MIGRATING (with FLAG_ISOLATED) a migration's target, whose refcount is
//!                  relative to MIGRATING_BASE and whose `next` names the old block
//!                  until compaction carries the old block's references over
//!    FLAG_VMALLOC  a page of a live vmalloc area: only `vfree` (and vmalloc's own
//!                  unwinding) frees it; the raw API, caches and guards refuse it
//!    FLAG_CMA      a page `cma_alloc` handed out: only `cma_release` frees it
//!    FLAG_LAZY     a block `split_page` split lazily: each of its pages is an
//!                  allocated order-0 page with one reference and the block's other
//!                  flags, but only the head says so; its other frames stay `Tail`
//!                  until a call on one page alone gives every page its own word
//!  prev (u32):  table slot of the previous entry on the list this head is on
//!               (where the entry sits in the table: see `FrameTable`)
//!  next (u32):  table slot of the next entry (NIL: none; off any list)
//! ```
//!
//! After the frames, on lines of their own, the table keeps one more entry for
//! each of the zone's buddy lists: the list's sentinel (`FreeList`, Linux's
//! `list_head` in `free_area`), through which the list runs in a circle. The
//! per-CPU lists (`FrameList`) end in `NIL` instead and keep their ends in the
//! CPU's own slot.
//!
//! Only the first frame of a block (its *head*) carries the block's state; every other
//! frame of a block is `Tail`. The state machine of a head, with the lock each
//! transition needs:
//!
//! ```text
//!            alloc (zone lock or pcp lock)          last put (CAS, no lock)
//!   Buddy ───────────────────────────────► Alloc ─────────────────────────► Frozen
//!     ▲  ▲                                  ▲                                 │
//!     │  └── merge/free (zone lock) ────────┼───────────────── Frozen ◄───────┘
//!     │                                     │ alloc (pcp lock)
//!     └── drain (pcp lock → zone lock) ─── Pcp ◄── free to pcp (pcp lock) ── Frozen
//!                                           ▲
//!              Alloc ── free to a LocalCache (CAS) ──► Cached ── flush (pcp lock)
//!                ▲                                       │
//!                └───── handed out by its cache (store) ─┘
//! ```
//!
//! * `Hole`: no memory behind the frame; never changes.
//! * `Tail`: not the head of any block (inside a free or an allocated block).
//! * `Buddy{order}`: head of a free block on `free_list[order][mt]` of its zone, `mt`
//!   being its pageblock's type. Changes only under the zone lock.
//! * `Pcp{order}`: head of a free block on a per-CPU list. Changes only under that
//!   CPU's pcp lock.
//! * `Alloc{order, mt}`: head of an allocated block, refcount >= 1. The refcount
//!   changes without a lock (compare-and-swap on the whole word).
//! * `Frozen{order}`: refcount reached 0; the thread that won the CAS owns the block
//!   until it puts it on a list. With a count of 1 (`Word::claimed`), an order-0
//!   page a multi-page free has taken while it checks the rest of its pages: it is
//!   freed or restored to `Alloc` in a moment, and the single-page paths wait for
//!   which rather than answer `AlreadyFree` for a page that may stay allocated.
//!   With a count of 1 at an order above 0, a lazily split block (`FLAG_LAZY`)
//!   one thread holds: a multi-page free that took it whole (`claimed_block`),
//!   or, with `FLAG_LAZY` kept, a call giving its pages their words
//!   (`materializing`); callers wait for either as for a claimed page.
//! * `Cached{order}`: head of a free block held by one `LocalCache` (see `local`).
//!   Entered from `Alloc` by the freeing CAS, as `Frozen` is; left by that cache
//!   alone, with a plain store (handed out: `Alloc`) or under a pcp lock (flushed:
//!   `Pcp`). No one else may change it, so a second free of it is refused.
//! * `Bad`: reported bad and taken out of circulation.
//!
//! The whole state lives in one 64-bit word so that "check the state, drop the
//! reference" is a single compare-and-swap: two threads freeing the same block cannot
//! both win, which is what makes double-free detection exact under concurrency.
//! The links are written with relaxed stores: they are read and written only by the
//! holder of the lock of the list the frame is on, which orders them.

use alloc::vec::Vec;
use core::ptr::NonNull;

use crate::memmap::SECTION_FRAMES;

use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::types::{Migratetype, Order, Pfn};

/// "No frame" in list links.
pub(crate) const NIL: u32 = u32::MAX;

/// What a frame is: the low byte of its state word (see the module documentation
/// for each state's meaning and the transitions between them).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum Tag {
    Hole = 0,
    Tail = 1,
    Buddy = 2,
    Pcp = 3,
    Alloc = 4,
    Frozen = 5,
    Bad = 6,
    Cached = 7,
}

/// Head flag: a `PageBlock` guard owns the block.
pub(crate) const FLAG_GUARDED: u8 = 1;
/// Head flag: the block is a page_frag cache's, with its bias published in `next`.
pub(crate) const FLAG_FRAG: u8 = 2;

/// Head flag: the page belongs to a live vmalloc area (see `vmalloc`). Every raw
/// path refuses it (`Busy`), compaction never isolates it, and only the area's
/// `vfree` frees it, so `vfree` frees exactly what it owns.
pub(crate) const FLAG_VMALLOC: u8 = 16;

/// Head flag: the page was handed out by `cma_alloc` (see `cma`): only
/// `cma_release` frees it; the raw API, caches and guards refuse it, and nothing
/// migrates it.
pub(crate) const FLAG_CMA: u8 = 32;

/// Head flag of an allocated block of order >= 1 with one reference that
/// `split_page` split lazily: its `1 << order` pages are allocated order-0 pages,
/// one reference each, with the block's other flags and type, but their frames
/// other than the head stay `Tail`. A free of exactly the block's pages (what
/// `free_contig_range` and `vfree` make of a block they took whole) frees it with
/// one compare-and-swap on the head; any call on one page of it alone first gives
/// every page its own word (`ZoneAllocator::materialize`). Until then a reader
/// that walks heads sees one allocated block of the whole order, which is what it
/// holds.
pub(crate) const FLAG_LAZY: u8 = 64;

/// Head flag: compaction isolated the block (a movable allocation with no other
/// flag) and holds one reference of its own on it, so the owner's frees only drop
/// the owner's references and the block cannot be freed under the migration; the
/// last reference compaction drops frees it (see `migrate`).
pub(crate) const FLAG_ISOLATED: u8 = 4;

/// Head flag, with `FLAG_ISOLATED`, of a migration's target from before the
/// owner's callback until compaction has carried the old block's references over
/// to it (see `migrate`). Its refcount is then `MIGRATING_BASE` plus the owner's
/// takes and drops on the target so far, and its `next` link names the old block.
pub(crate) const FLAG_MIGRATING: u8 = 8;

/// The most references an owner may hold on one block (`get_page` refuses more
/// with `RefcountOverflow`). Compaction's own reference on an isolated block
/// comes on top, and so may what a block gains while it moves (see `migrate`).
pub const REFCOUNT_MAX: u32 = 1 << 30;

/// The refcount a migrating target starts from. An owner's takes and drops on the
/// target move it up and down, at most `REFCOUNT_MAX` up (`get_page` refuses more)
/// and, for an owner that drops no more than it holds, at most `REFCOUNT_MAX + 1`
/// down: it stays far from both 1 (so no drop looks like the last) and `u32::MAX`.
pub(crate) const MIGRATING_BASE: u32 = 1 << 31;

/// The largest claim tag (`Word::with_claim_tag`): seven bits of a claimed
/// word's flags.
pub(crate) const CLAIM_TAG_MAX: u8 = 127;

/// A decoded copy of a frame's state word.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Word(pub u64);

impl Word {
    #[inline]
    pub const fn new(tag: Tag, order: u8, aux: u8, refcount: u32) -> Word {
        Word(tag as u64 | (order as u64) << 8 | (aux as u64) << 16 | (refcount as u64) << 32)
    }
    #[inline]
    pub const fn tag(self) -> Tag {
        // Only `Word::new` writes the byte, always from a `Tag`.
        match self.0 as u8 {
            0 => Tag::Hole,
            1 => Tag::Tail,
            2 => Tag::Buddy,
            3 => Tag::Pcp,
            4 => Tag::Alloc,
            5 => Tag::Frozen,
            7 => Tag::Cached,
            _ => Tag::Bad,
        }
    }
    #[inline]
    pub const fn order(self) -> Order {
        Order((self.0 >> 8) as u8)
    }
    #[inline]
    pub const fn aux(self) -> u8 {
        (self.0 >> 16) as u8
    }
    #[inline]
    pub const fn flags(self) -> u8 {
        (self.0 >> 24) as u8
    }
    #[inline]
    pub const fn with_flags(self, flags: u8) -> Word {
        Word((self.0 & !(0xff << 24)) | (flags as u64) << 24)
    }
    #[inline]
    pub const fn refcount(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// The word with its `aux` byte cleared: compares states that differ only
    /// in it (an allocated head's migratetype) with one masked compare.
    #[inline]
    pub const fn sans_aux(self) -> Word {
        Word(self.0 & !(0xff << 16))
    }
    #[inline]
    pub const fn with_refcount(self, r: u32) -> Word {
        Word((self.0 & 0xffff_ffff) | (r as u64) << 32)
    }

    pub const HOLE: Word = Word::new(Tag::Hole, 0, 0, 0);
    pub const TAIL: Word = Word::new(Tag::Tail, 0, 0, 0);
    /// A present frame reserved at boot (`Config::reserved`): a hole to every
    /// path until `free_reserved_area` gives it to the allocator.
    pub const RESERVED: Word = Word::new(Tag::Hole, 0, 1, 0);

    #[inline]
    pub const fn buddy(order: Order) -> Word {
        Word::new(Tag::Buddy, order.0, 0, 0)
    }
    #[inline]
    pub const fn pcp(order: Order, cpu: u8) -> Word {
        Word::new(Tag::Pcp, order.0, cpu, 0)
    }
    #[inline]
    pub const fn alloc(order: Order, mt: Migratetype) -> Word {
        Word::new(Tag::Alloc, order.0, mt as u8, 1)
    }
    #[inline]
    pub const fn alloc_flagged(order: Order, mt: Migratetype, flags: u8) -> Word {
        Word::alloc(order, mt).with_flags(flags)
    }
    #[inline]
    pub const fn frozen(order: Order) -> Word {
        Word::new(Tag::Frozen, order.0, 0, 0)
    }
    /// An order-0 page taken by a multi-page free that has not decided yet
    /// (`claim_pages`): `Frozen` with a count of 1, which no other frozen word has,
    /// and the page's type kept in `aux` so that it can be restored.
    #[inline]
    pub const fn claimed(aux: u8) -> Word {
        Word::new(Tag::Frozen, 0, aux, 1)
    }
    /// A `claimed` or `claimed_block` word carrying claim tag `tag` (1 to
    /// `CLAIM_TAG_MAX`) in its flags, which such a word has no other use for
    /// (`FLAG_LAZY` kept clear: a `materializing` word is a claimed word with
    /// it). A multi-page free whose record of the pages it took is full marks the
    /// pages it takes after that with a tag no other free holds at the moment
    /// (see `contig`'s `Claim`).
    #[inline]
    pub const fn with_claim_tag(self, tag: u8) -> Word {
        self.with_flags((tag & 0x3f) | (tag & 0x40) << 1)
    }
    /// The claim tag of a `claimed` or `claimed_block` word (0: none).
    #[inline]
    pub const fn claim_tag(self) -> u8 {
        (self.flags() & 0x3f) | (self.flags() & 0x80) >> 1
    }
    /// A migrating target's word (`FLAG_MIGRATING`, count relative to
    /// `MIGRATING_BASE`) with the old block's `held` references added and the flag
    /// cleared: what it settles to. At least 1, compaction's reference, even for an
    /// owner that dropped more than it held.
    #[inline]
    pub fn settled(self, held: u32) -> Word {
        let since = i64::from(self.refcount()) - i64::from(MIGRATING_BASE);
        let rc = (i64::from(held) + since).clamp(1, i64::from(u32::MAX)) as u32;
        self.with_refcount(rc)
            .with_flags(self.flags() & !FLAG_MIGRATING)
    }
    /// Whether this is a `claimed` word: its page is freed or restored in a moment,
    /// and a caller that would refuse it as free waits for which.
    #[inline]
    pub const fn is_claimed(self) -> bool {
        self.0 as u8 == Tag::Frozen as u8 && self.refcount() == 1
    }
    /// A lazily split block's head (see `FLAG_LAZY`): allocated, order `order`,
    /// one reference, type `aux`, flags `flags` and `FLAG_LAZY`.
    #[inline]
    pub const fn lazy(order: Order, aux: u8, flags: u8) -> Word {
        Word::new(Tag::Alloc, order.0, aux, 1).with_flags(flags | FLAG_LAZY)
    }
    /// Whether this is a lazily split block's head.
    #[inline]
    pub const fn is_lazy(self) -> bool {
        self.0 as u8 == Tag::Alloc as u8 && self.flags() & FLAG_LAZY != 0
    }
    /// A lazily split block's head while one thread gives its pages words of
    /// their own (`ZoneAllocator::materialize`): `claimed`'s form at the block's
    /// order, with `FLAG_LAZY`, so every caller that waits for a claimed page
    /// waits for this too, and a multi-page free waits rather than refusing.
    #[inline]
    pub const fn materializing(order: Order, aux: u8) -> Word {
        Word::new(Tag::Frozen, order.0, aux, 1).with_flags(FLAG_LAZY)
    }
    /// Whether this is a `materializing` head.
    #[inline]
    pub const fn is_materializing(self) -> bool {
        self.is_claimed() && self.flags() & FLAG_LAZY != 0
    }
    /// A lazily split block a multi-page free took whole (`claim_pages`):
    /// `claimed` at the block's order, its type kept so it can be restored.
    #[inline]
    pub const fn claimed_block(order: Order, aux: u8) -> Word {
        Word::new(Tag::Frozen, order.0, aux, 1)
    }
    /// What every page of lazily split head `self` stands for: an allocated
    /// order-0 page with one reference, the block's type and its other flags.
    #[inline]
    pub const fn lazy_page(self) -> Word {
        Word::new(Tag::Alloc, 0, self.aux(), 1).with_flags(self.flags() & !FLAG_LAZY)
    }
    #[inline]
    pub const fn cached(order: Order) -> Word {
        Word::new(Tag::Cached, order.0, 0, 0)
    }
}

/// What a frame is, as seen through the public API.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FrameState {
    /// No memory: a hole in its zone.
    Hole,
    /// Not the first frame of a block.
    Tail,
    /// Head of a free block on the buddy lists.
    Free {
        /// Order of the free block.
        order: Order,
    },
    /// Head of a free block sitting on a per-CPU list.
    PerCpu {
        /// Order of the block.
        order: Order,
    },
    /// Head of an allocated block.
    Allocated {
        /// Order of the block.
        order: Order,
        /// References held.
        refcount: u32,
    },
    /// Head of a block being freed by some thread right now.
    Frozen {
        /// Order of the block.
        order: Order,
    },
    /// Head of a free block held by a `LocalCache`: free, but only that cache
    /// hands it out (or gives it back when flushed or dropped).
    Cached {
        /// Order of the block.
        order: Order,
    },
    /// Reported bad and taken out of circulation.
    Bad,
}

impl From<Word> for FrameState {
    fn from(w: Word) -> FrameState {
        match w.tag() {
            Tag::Hole => FrameState::Hole,
            Tag::Tail => FrameState::Tail,
            Tag::Buddy => FrameState::Free { order: w.order() },
            Tag::Pcp => FrameState::PerCpu { order: w.order() },
            Tag::Alloc => FrameState::Allocated {
                order: w.order(),
                refcount: w.refcount(),
            },
            Tag::Frozen => FrameState::Frozen { order: w.order() },
            Tag::Cached => FrameState::Cached { order: w.order() },
            _ => FrameState::Bad,
        }
    }
}

/// One frame's metadata. See the module documentation for the layout and states.
pub(crate) struct PageMeta {
    pub word: AtomicU64,
    pub prev: AtomicU32,
    pub next: AtomicU32,
}

#[cfg(not(loom))]
const _: () = assert!(
    core::mem::size_of::<PageMeta>() <= 16,
    "PageMeta must stay within 16 bytes"
);

/// Frames whose metadata fills one 64-byte cache line.
pub(crate) const PER_LINE: usize = 4;

/// One cache line of the table: the metadata of `PER_LINE` frames, aligned to the
/// line, so that the frames of a naturally aligned block of up to `PER_LINE`
/// frames share a line with no other block's (a buddy pair at order 0 is one
/// line). A plain slice of `PageMeta` would start wherever the global allocator
/// puts it: glibc's malloc puts a large table 16 bytes past a page boundary,
/// where half the order-0 pairs straddle two lines and every order-1 block does.
/// (Under loom the atomics are larger and the alignment is left out: only the
/// layout matters there, and `view` needs the lines to hold nothing but frames.)
#[cfg_attr(not(loom), repr(C, align(64)))]
#[cfg_attr(loom, repr(C))]
pub(crate) struct Line([PageMeta; PER_LINE]);

#[cfg(not(loom))]
const _: () = assert!(
    core::mem::size_of::<Line>() == 64,
    "a Line is one cache line of PageMeta"
);
// `zone_metadata_bytes` counts the table in lines of four frames.
const _: () = assert!(
    PER_LINE == 4,
    "zone_metadata_bytes assumes four frames a line"
);
const _: () = assert!(
    core::mem::size_of::<Line>() == PER_LINE * core::mem::size_of::<PageMeta>(),
    "a Line holds its frames and no padding"
);

/// The metadata of every frame of one zone, indexed by `pfn - zone_start_pfn`,
/// in whole lines (the last line's entries past the zone are never used), then
/// the sentinels of the zone's buddy lists on lines of their own (see
/// `FreeList`): entry `sentinel(i)` is list `i`'s. Entry `idx` sits at `slot(idx)`:
/// after every `SKEW_GROUP` entries the table leaves a line unused.
///
/// The lines are one run of address space (see `memmap`): only the sections
/// that hold present frames, and the last lines (padding and sentinels), are
/// backed by memory. The rest reads as zeroes, a hole's word, and nothing writes
/// it: every writer works on a present frame.
pub(crate) struct FrameTable {
    lines: NonNull<Line>,
    /// Lines in the run (backed or not).
    nr_lines: usize,
    /// Who owns the run, and how it is given back.
    storage: Storage,
    /// Frames in the table.
    len: usize,
    /// Index of the first sentinel: `len` rounded up to whole lines.
    sentinels: usize,
    /// Entries in the table: frames, padding and sentinels.
    entries: usize,
    /// The zone's first frame number: frame `idx` is `base + idx`.
    base: u64,
    /// Bytes of the run backed by memory (a heap table counts whole). Changed
    /// under the zone lock (or before the table is shared).
    backed: core::sync::atomic::AtomicUsize,
    /// One bit a section (counted from the one holding `base`): backed. Changed
    /// under the zone lock (or before the table is shared).
    populated: alloc::boxed::Box<[core::sync::atomic::AtomicU64]>,
}

// SAFETY: the table is lines of atomics, shared by reference only; the storage
// is owned by the table (or `'static`) and freed only on drop.
#[allow(unsafe_code)]
unsafe impl Send for FrameTable {}
// SAFETY: as above: every access goes through the atomics.
#[allow(unsafe_code)]
unsafe impl Sync for FrameTable {}

/// Where a table's lines come from, and how they are given back.
enum Storage {
    /// Lines built one by one (loom's atomics cannot start as zeroed memory).
    #[cfg(loom)]
    Boxed(#[allow(dead_code)] alloc::boxed::Box<[Line]>),
    /// Zeroed memory from the global heap, the whole run backed (where the
    /// allocator cannot map its own: no `std`, not Linux, or under Miri).
    #[cfg(not(loom))]
    #[cfg_attr(all(feature = "std", target_os = "linux", not(miri)), allow(dead_code))]
    Heap(core::alloc::Layout),
    /// A `MemMap`'s reservation, never given back.
    #[cfg(not(loom))]
    Given,
    /// An anonymous mapping of the whole run, `PROT_READ` but over the backed
    /// parts; unmapped on drop.
    #[cfg(all(feature = "std", target_os = "linux", not(any(loom, miri))))]
    Mapped,
}

/// Where a zone's frame table gets its memory (see `memmap`).
pub(crate) enum TableSource<'a> {
    /// The allocator's own: a sparse anonymous mapping with `std` on Linux, else
    /// the global heap.
    Own,
    /// The caller's `MemMap`.
    Given(#[cfg_attr(loom, allow(dead_code))] &'a mut dyn crate::memmap::MemMap),
}

/// A zone's buddy lists: one per order and migratetype, each with a sentinel
/// entry in the zone's frame table after the frames.
pub(crate) const ZONE_LISTS: usize = crate::types::NR_ORDERS_MAX * crate::types::MIGRATE_TYPES;

/// Bytes of the frame table of a zone spanning `spanned` frames (saturating): 16
/// a frame in 64-byte lines of four, then the `ZONE_LISTS` sentinels on lines of
/// their own, and one unused line after every `SKEW_GROUP` entries (the layout
/// `geometry` gives).
pub(crate) fn zone_metadata_bytes(spanned: u64) -> u64 {
    let entries = spanned
        .div_ceil(4)
        .saturating_mul(4)
        .saturating_add(ZONE_LISTS as u64);
    entries
        .div_ceil(4)
        .saturating_add(entries / SKEW_GROUP as u64)
        .saturating_mul(64)
}

/// The geometry of a table of `nr` frames and `lists` sentinels: (sentinels'
/// first index, entries, lines), `None` when its slots would pass `u32`.
fn geometry(nr: usize, lists: usize) -> Option<(usize, usize, usize)> {
    let sentinels = nr.checked_next_multiple_of(PER_LINE)?;
    let entries = sentinels.checked_add(lists)?;
    // Entries whose slots pass `u32` could not be linked (`NIL` is `u32::MAX`).
    if slot(entries) >= NIL as usize {
        return None;
    }
    // Whole lines of entries, and the line each whole skew group leaves unused.
    let lines = entries.div_ceil(PER_LINE) + entries / SKEW_GROUP;
    Some((sentinels, entries, lines))
}

/// The table entries of section `k` of a table of `nr` frames from `base`
/// (sections counted from the one holding `base`), clipped to the frames.
fn section_entries(base: u64, nr: usize, k: usize) -> (usize, usize) {
    let first_section = base / SECTION_FRAMES;
    let start = ((first_section + k as u64) * SECTION_FRAMES).saturating_sub(base);
    let end = ((first_section + k as u64 + 1) * SECTION_FRAMES - base).min(nr as u64);
    (start as usize, end as usize)
}

/// The byte at which the line holding entry `idx` starts.
fn line_start(idx: usize) -> usize {
    slot(idx) / PER_LINE * core::mem::size_of::<Line>()
}

/// Sections of a table of `nr` frames from `base`.
fn nr_sections(base: u64, nr: usize) -> usize {
    if nr == 0 {
        return 0;
    }
    ((base + nr as u64 - 1) / SECTION_FRAMES - base / SECTION_FRAMES + 1) as usize
}

/// The first entry of the table's tail: the last line of frames (with the
/// padding after the last frame), then the sentinels; always backed.
fn tail_first(sentinels: usize) -> usize {
    sentinels.saturating_sub(PER_LINE)
}

/// The bytes of the run section `k` owns: from the line of its first entry to
/// that of the next section's (the skew lines between them included), the last
/// section up to the tail; the sections and the tail tile the run.
fn section_bytes(base: u64, nr: usize, sentinels: usize, k: usize) -> (usize, usize) {
    let tail = line_start(tail_first(sentinels));
    let from = line_start(section_entries(base, nr, k).0).min(tail);
    let to = if k + 1 < nr_sections(base, nr) {
        line_start(section_entries(base, nr, k + 1).0).min(tail)
    } else {
        tail
    };
    (from, to.max(from))
}

/// The index of the section holding table entry `idx`.
fn section_of(base: u64, idx: usize) -> usize {
    ((base + idx as u64) / SECTION_FRAMES - base / SECTION_FRAMES) as usize
}

/// Bytes of memory a zone's table of `nr` frames from `base` backs when its
/// present frames are `present` (sorted, disjoint absolute ranges): the sections
/// holding present frames and the tail (see `FrameTable::build`); all of it when
/// every section holds memory. Saturating.
pub(crate) fn table_backed_bytes(base: u64, nr: u64, present: &[(u64, u64)]) -> u64 {
    let Some((sentinels, _, lines)) = usize::try_from(nr)
        .ok()
        .and_then(|nr| geometry(nr, ZONE_LISTS))
    else {
        return zone_metadata_bytes(nr);
    };
    let nr = nr as usize;
    let tail = line_start(tail_first(sentinels));
    let mut bytes = (lines * core::mem::size_of::<Line>() - tail) as u64;
    let mut last = usize::MAX;
    for (a, b) in crate::memmap::populated_runs(base, nr as u64, present) {
        for k in section_of(base, a as usize)..=section_of(base, b as usize - 1) {
            if k != last {
                last = k;
                let (from, to) = section_bytes(base, nr, sentinels, k);
                bytes += (to - from) as u64;
            }
        }
    }
    bytes
}

impl FrameTable {
    /// A table of `nr` frames from frame number `base`, all present, in state
    /// `Tail` with no links, and `lists` sentinels, each an empty list, from the
    /// allocator's own memory; `None` if the memory cannot be had.
    #[cfg(test)]
    pub fn new(base: u64, nr: usize, lists: usize) -> Option<FrameTable> {
        let all = [(base, base + nr as u64)];
        let zone = crate::types::ZoneId {
            node: 0,
            zone_type: crate::types::ZoneType::Normal,
        };
        FrameTable::build(zone, base, nr, lists, &all, &mut TableSource::Own)
    }

    /// A table of `nr` frames from frame number `base`: the frames in `present`
    /// (sorted, disjoint absolute ranges `(start, end)`) in state `Tail` with no
    /// links, every other frame a hole (`Word::HOLE`), and `lists` sentinels, each
    /// an empty list. Only the sections holding present frames are backed (see
    /// `memmap`), except from the heap, which backs the whole table. `None` if the
    /// memory cannot be had (every source is fallible, never an abort).
    pub fn build(
        zone: crate::types::ZoneId,
        base: u64,
        nr: usize,
        lists: usize,
        present: &[(u64, u64)],
        src: &mut TableSource<'_>,
    ) -> Option<FrameTable> {
        let (sentinels, entries, nr_lines) = geometry(nr, lists)?;
        let (lines, storage) = Self::reserve(zone, nr_lines, src)?;
        let words = nr_sections(base, nr).div_ceil(64);
        let mut populated = Vec::new();
        populated.try_reserve_exact(words).ok()?;
        populated.resize_with(words, || core::sync::atomic::AtomicU64::new(0));
        let table = FrameTable {
            lines,
            nr_lines,
            storage,
            len: nr,
            sentinels,
            entries,
            base,
            backed: core::sync::atomic::AtomicUsize::new(0),
            populated: populated.into_boxed_slice(),
        };
        // Back the tail, and the sections that hold present frames.
        let (tail, end) = (
            line_start(tail_first(sentinels)),
            nr_lines * core::mem::size_of::<Line>(),
        );
        if !table.populate(tail, end, src) {
            return None;
        }
        table
            .backed
            .store(end - tail, core::sync::atomic::Ordering::Relaxed);
        for (a, b) in crate::memmap::populated_runs(base, nr as u64, present) {
            if !table.populate_sections(a as usize, b as usize, src) {
                return None;
            }
        }
        // Present frames take `Tail` with no links; the rest of a backed section
        // keeps (or, under loom, takes) the hole's zeroes, with no links.
        let t = table.view();
        let mut covered = 0usize;
        let init = |from: usize, to: usize, w: Word| {
            for i in from..to {
                let m = t.meta(i as u32);
                m.word.store(w.0, Ordering::Relaxed);
                m.prev.store(NIL, Ordering::Relaxed);
                m.next.store(NIL, Ordering::Relaxed);
            }
        };
        for (a, b) in crate::memmap::populated_runs(base, nr as u64, present) {
            let (a, b) = (a as usize, b as usize);
            init(a.max(covered), b, Word::HOLE);
            covered = covered.max(b);
        }
        for &(s, e) in present {
            let (s, e) = (s.max(base), e.min(base + nr as u64));
            if s < e {
                init((s - base) as usize, (e - base) as usize, Word::TAIL);
            }
        }
        // Padding after the last frame reads as a tail, as it always has.
        init(nr, sentinels, Word::TAIL);
        for i in 0..lists {
            let s = table.sentinel(i);
            t.meta(s).word.store(Word::HOLE.0, Ordering::Relaxed);
            t.set_prev(s, s);
            t.set_next(s, s);
        }
        Some(table)
    }

    /// Address space for `nr_lines` lines from `src`, reading as zeroes (built
    /// entries under loom).
    #[allow(unsafe_code)]
    fn reserve(
        zone: crate::types::ZoneId,
        nr_lines: usize,
        src: &mut TableSource<'_>,
    ) -> Option<(NonNull<Line>, Storage)> {
        #[cfg(loom)]
        {
            let _ = (zone, src);
            let mut v = Vec::new();
            v.try_reserve_exact(nr_lines).ok()?;
            v.resize_with(nr_lines, || {
                Line(core::array::from_fn(|_| PageMeta {
                    word: AtomicU64::new(Word::HOLE.0),
                    prev: AtomicU32::new(NIL),
                    next: AtomicU32::new(NIL),
                }))
            });
            let mut b = v.into_boxed_slice();
            let p = NonNull::new(b.as_mut_ptr())?;
            Some((p, Storage::Boxed(b)))
        }
        #[cfg(not(loom))]
        {
            let bytes = nr_lines
                .checked_mul(core::mem::size_of::<Line>())?
                .max(4096);
            match src {
                TableSource::Given(m) => {
                    let p = m.reserve(zone, bytes)?;
                    debug_assert!((p.as_ptr() as usize).is_multiple_of(4096));
                    Some((p.cast(), Storage::Given))
                }
                TableSource::Own => {
                    #[cfg(all(feature = "std", target_os = "linux", not(miri)))]
                    {
                        // SAFETY: a fresh anonymous mapping; no address is given.
                        let p = unsafe {
                            libc::mmap(
                                core::ptr::null_mut(),
                                bytes,
                                libc::PROT_READ,
                                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                                -1,
                                0,
                            )
                        };
                        if p == libc::MAP_FAILED {
                            return None;
                        }
                        Some((NonNull::new(p.cast())?, Storage::Mapped))
                    }
                    #[cfg(not(all(feature = "std", target_os = "linux", not(miri))))]
                    {
                        let layout = core::alloc::Layout::from_size_align(bytes, 4096).ok()?;
                        // SAFETY: the layout's size is non-zero (at least 4096).
                        let p = unsafe { alloc::alloc::alloc_zeroed(layout) };
                        Some((NonNull::new(p.cast())?, Storage::Heap(layout)))
                    }
                }
            }
        }
    }

    /// Backs bytes `[from, to)` of the run with writable memory.
    #[allow(unsafe_code)]
    #[cfg(not(loom))]
    fn populate(&self, from: usize, to: usize, src: &mut TableSource<'_>) -> bool {
        let Some(start) = NonNull::new(self.lines.as_ptr().cast::<u8>().wrapping_add(from)) else {
            return false;
        };
        match (&self.storage, src) {
            (Storage::Given, TableSource::Given(m)) => m.populate(start, to - from),
            #[cfg(all(feature = "std", target_os = "linux", not(miri)))]
            (Storage::Mapped, _) => {
                let first = from / 4096 * 4096;
                let end = to.next_multiple_of(4096);
                // SAFETY: `[first, end)` lies inside our own mapping (the run is
                // a whole number of 4096-byte pages, at least one).
                let r = unsafe {
                    libc::mprotect(
                        self.lines.as_ptr().cast::<u8>().add(first).cast(),
                        end - first,
                        libc::PROT_READ | libc::PROT_WRITE,
                    )
                };
                r == 0
            }
            _ => true,
        }
    }

    /// Under loom every line is built: nothing to back.
    #[cfg(loom)]
    fn populate(&self, _from: usize, _to: usize, _src: &mut TableSource<'_>) -> bool {
        true
    }

    /// Whether backing more of the table needs the caller's `MemMap` (the table
    /// came from one).
    pub fn needs_memmap(&self) -> bool {
        #[cfg(not(loom))]
        return matches!(self.storage, Storage::Given);
        #[cfg(loom)]
        false
    }

    /// Bytes of the table backed by memory (see `memmap`); a heap table counts
    /// whole.
    pub fn backed_bytes(&self) -> usize {
        match self.storage {
            #[cfg(not(loom))]
            Storage::Heap(_) => self.nr_lines * core::mem::size_of::<Line>(),
            _ => self.backed.load(core::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Backs the sections holding table entries `[first, end)` that are not
    /// backed yet.
    fn populate_sections(&self, first: usize, end: usize, src: &mut TableSource<'_>) -> bool {
        use core::sync::atomic::Ordering::Relaxed;
        if first >= end {
            return true;
        }
        for k in section_of(self.base, first)..=section_of(self.base, end - 1) {
            // Relaxed: the bits and the count change under the zone lock only.
            if self.populated[k / 64].load(Relaxed) & (1 << (k % 64)) != 0 {
                continue;
            }
            let (from, to) = section_bytes(self.base, self.len, self.sentinels, k);
            if !self.populate(from, to, src) {
                return false;
            }
            self.populated[k / 64].fetch_or(1 << (k % 64), Relaxed);
            self.backed.fetch_add(to - from, Relaxed);
        }
        true
    }

    /// Backs the metadata of frames `[first, end)` (table indices) if it is not
    /// yet: memory about to arrive where there was a hole (see `hotplug`). The
    /// caller serialises the callers of this (`ZoneAllocator`'s hot-plug lock);
    /// it holds no allocator lock, since a kernel's `MemMap::populate` may need
    /// every CPU to take an interrupt (a TLB flush).
    pub fn back(&self, first: usize, end: usize, src: &mut TableSource<'_>) -> bool {
        debug_assert!(first <= end && end <= self.len);
        self.populate_sections(first, end, src)
    }

    /// Gives the frames `[first, end)`, backed (`back`), `Tail` with no links:
    /// memory arriving where there was a hole. The caller owns the frames'
    /// states (they were holes, and it holds the zone lock).
    pub fn make_present(&self, first: usize, end: usize) {
        debug_assert!(first <= end && end <= self.len);
        let t = self.view();
        for i in first..end {
            let m = t.meta(i as u32);
            m.prev.store(NIL, Ordering::Relaxed);
            m.next.store(NIL, Ordering::Relaxed);
            m.word.store(Word::TAIL.0, Ordering::Release);
        }
    }

    /// The index of list `i`'s sentinel (`i` below the `lists` given to `new`).
    #[inline]
    pub fn sentinel(&self, i: usize) -> u32 {
        debug_assert!(self.sentinels + i < self.entries);
        (self.sentinels + i) as u32
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The state word of frame `idx`.
    #[inline]
    pub fn word(&self, idx: u32) -> Word {
        self.view().word(idx)
    }

    /// Sets the state word of frame `idx` (see `Frames::set_word`).
    #[inline]
    pub fn set_word(&self, idx: u32, w: Word) {
        self.view().set_word(idx, w)
    }

    /// Replaces the state word if it still equals `old`.
    #[inline]
    pub fn cas_word(&self, idx: u32, old: Word, new: Word) -> Result<Word, Word> {
        self.view().cas_word(idx, old, new)
    }

    #[inline]
    pub fn next(&self, idx: u32) -> u32 {
        self.view().next(idx)
    }

    #[inline]
    pub fn prev(&self, idx: u32) -> u32 {
        self.view().prev(idx)
    }

    /// The table as a `Frames` view: a slice a loop can keep in registers.
    #[inline]
    #[allow(unsafe_code)]
    pub fn view(&self) -> Frames<'_> {
        debug_assert!(self.len <= self.entries && slot(self.entries) <= self.nr_lines * PER_LINE);
        // SAFETY: a `Line` is `repr(C)` with one field, an array of `PER_LINE`
        // `PageMeta`, and its size is exactly theirs (asserted above), so the
        // run is `nr_lines * PER_LINE` aligned `PageMeta` one after another, from
        // the pointer to the first line, valid for reads for as long as the table
        // lives (see `Storage`); zeroed memory is a valid `PageMeta` (atomics of
        // zero), and under loom every entry was built. `build` sizes the run for
        // the lines `slot` places `entries` entries on, and nothing changes
        // either. Only shared references are made, to atomics, borrowed from
        // `self`. Writes reach only backed lines: every writer works on a present
        // frame, a sentinel or the last line, all backed (see `build`).
        let metas = unsafe {
            core::slice::from_raw_parts(
                self.lines.as_ptr().cast::<PageMeta>(),
                self.nr_lines * PER_LINE,
            )
        };
        Frames {
            metas,
            nr: self.len,
            entries: self.entries,
            base: self.base,
        }
    }

    /// The old block a migrating target (`FLAG_MIGRATING`) names in its `next`
    /// link. Acquire: pairs with `set_migration_link`'s Release, so a reader that
    /// sees the link restored sees the target's settled word too.
    #[inline]
    pub fn migration_link(&self, idx: u32) -> u32 {
        self.view().meta(idx).next.load(Ordering::Acquire)
    }

    /// Sets a migration target's `next` link (see `migration_link`). Release:
    /// stores made before it (the settled word) are seen by a reader that loads
    /// this value.
    #[inline]
    pub fn set_migration_link(&self, idx: u32, v: u32) {
        self.view().meta(idx).next.store(v, Ordering::Release);
    }

    /// The bias slot of an allocated block's head: its `next` link, unused while the
    /// block is allocated, where a page_frag cache publishes how many of the block's
    /// references it still holds itself (see `page_frag`). Release stores by the
    /// cache pair with the Acquire loads of fragment frees.
    #[inline]
    pub fn bias_slot(&self, idx: u32) -> &AtomicU32 {
        &self.view().meta(idx).next
    }
}

impl Drop for FrameTable {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        let _bytes = (self.nr_lines * core::mem::size_of::<Line>()).max(4096);
        match &self.storage {
            #[cfg(loom)]
            Storage::Boxed(_) => {}
            #[cfg(not(loom))]
            Storage::Heap(layout) => {
                // SAFETY: allocated by `reserve` with this layout, freed once.
                unsafe { alloc::alloc::dealloc(self.lines.as_ptr().cast(), *layout) }
            }
            #[cfg(not(loom))]
            Storage::Given => {}
            #[cfg(all(feature = "std", target_os = "linux", not(any(loom, miri))))]
            Storage::Mapped => {
                // SAFETY: our own mapping of `_bytes`, unmapped once; no view
                // outlives the table.
                unsafe { libc::munmap(self.lines.as_ptr().cast(), _bytes) };
            }
        }
    }
}

#[inline(always)]
#[allow(unsafe_code)]
fn prefetch_read(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: `_mm_prefetch` is a hint; it never faults and reads nothing the program
    // observes, and SSE is part of the x86-64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = p;
}

/// A borrowed view of a `FrameTable`: the same accessors over a plain slice. A
/// loop that takes one view keeps the slice's address and length in registers,
/// where the table's own accessors reload them from the zone after every store
/// to a frame (the compiler cannot tell that such a store leaves them alone).
#[derive(Clone, Copy)]
pub(crate) struct Frames<'a> {
    /// Every entry, each at its `slot`: the frames, then padding and the lists'
    /// sentinels.
    metas: &'a [PageMeta],
    /// Frames: entries `..nr`.
    nr: usize,
    /// Entries: frames, padding and sentinels.
    entries: usize,
    base: u64,
}

/// Entries a skew group holds: the table leaves one line unused after each
/// group, so that group `k`'s entries sit `k` lines further on than a plain
/// array would put them.
pub(crate) const SKEW_GROUP: usize = 512;

/// Where entry `idx` sits in the table's lines: `idx` plus one line for each
/// whole group before it. Without the skew the heads of pageblock-sized blocks,
/// 512 entries of 16 bytes (8 KiB) apart, would all map to one set of a
/// first-level cache whose ways are 4 KiB (64 sets of 64 bytes), which then
/// holds as many of them as it has ways (12 on the development machine) however
/// many the zone has: a merge at pageblock order missed on its buddy and its
/// buddy's list neighbours. With it, consecutive groups fall in consecutive sets.
/// A group is a whole number of lines, so the entries of a line stay together.
#[inline(always)]
const fn slot(idx: usize) -> usize {
    idx + (idx / SKEW_GROUP) * PER_LINE
}

impl<'a> From<&'a FrameTable> for Frames<'a> {
    #[inline]
    fn from(t: &'a FrameTable) -> Frames<'a> {
        t.view()
    }
}

impl<'a> Frames<'a> {
    /// Whether frame `pfn` is in the table (in the zone's span).
    #[inline]
    pub fn contains(&self, pfn: Pfn) -> bool {
        pfn.0.wrapping_sub(self.base) < self.nr as u64
    }

    /// Entry `idx`'s metadata: a frame's, or a list sentinel's.
    #[inline]
    fn meta(&self, idx: u32) -> &'a PageMeta {
        &self.metas[slot(idx as usize)]
    }

    /// Frame `idx`'s metadata, for its state word. A sentinel's word is `HOLE` and
    /// padding's `TAIL` from the start, and nothing changes them, so an index past
    /// the frames is a bug in the caller: checked in debug builds (a release build
    /// would reach that entry's word).
    #[inline]
    fn frame_meta(&self, idx: u32) -> &'a PageMeta {
        debug_assert!(
            (idx as usize) < self.nr,
            "frame index {idx} past {} frames",
            self.nr
        );
        self.meta(idx)
    }

    /// Frame number `pfn`'s metadata, `None` outside the table's frames.
    #[inline]
    fn meta_of(&self, pfn: Pfn) -> Option<&'a PageMeta> {
        let i = usize::try_from(pfn.0.wrapping_sub(self.base)).ok()?;
        // No subslice of the frames: under Miri a reference to a slice costs as
        // much as the slice is long, and this runs on every frame lookup.
        if i < self.nr {
            self.metas.get(slot(i))
        } else {
            None
        }
    }

    /// The state word of entry `idx` of the whole table (frames, padding and
    /// sentinels), `HOLE` past its end: one bounds check. Padding's word is `TAIL`
    /// and a sentinel's `HOLE` from the start, and nothing changes them, so a
    /// caller that compares the word with a head state (`Word::buddy`) needs no
    /// check of its own that `idx` is a frame.
    #[inline]
    pub fn word_any(&self, idx: u64) -> Word {
        usize::try_from(idx)
            .ok()
            .filter(|&i| i < self.entries)
            .and_then(|i| self.metas.get(slot(i)))
            .map_or(Word::HOLE, |m| Word(m.word.load(Ordering::Acquire)))
    }

    /// The state word of frame `pfn`, `None` outside the table: one bounds
    /// check for both questions.
    #[inline]
    pub fn word_of(&self, pfn: Pfn) -> Option<Word> {
        let m = self.meta_of(pfn)?;
        Some(Word(m.word.load(Ordering::Acquire)))
    }

    /// Hints the processor to bring frame `pfn`'s metadata into cache; nothing
    /// for a frame outside the table.
    #[inline]
    pub fn prefetch(&self, pfn: Pfn) {
        if let Some(m) = self.meta_of(pfn) {
            prefetch_read(m as *const PageMeta as *const u8);
        }
    }

    /// The zone's first frame number: frame `idx` is `base() + idx`.
    #[inline]
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The index of frame `pfn`. Caller checked `contains(pfn)`.
    #[inline]
    pub fn idx(&self, pfn: Pfn) -> u32 {
        debug_assert!(self.contains(pfn));
        (pfn.0 - self.base) as u32
    }

    /// The state word of frame `idx`.
    #[inline]
    pub fn word(&self, idx: u32) -> Word {
        // Acquire: a reader that sees a state also sees the writes that preceded the
        // Release that published it (the zeroing of an allocated block, for example).
        Word(self.frame_meta(idx).word.load(Ordering::Acquire))
    }

    /// Sets the state word of frame `idx`. Caller owns the frame's state (holds the
    /// lock of the list it is moving to or from, or won the CAS that froze it).
    #[inline]
    pub fn set_word(&self, idx: u32, w: Word) {
        self.frame_meta(idx).word.store(w.0, Ordering::Release);
    }

    /// Sets the state words of the `count` frames `first`, `first + 2^shift`, ...
    /// (the heads of a run of blocks of order `shift`); none past the frames.
    /// Caller owns the frames' states, as for `set_word`.
    #[inline]
    pub fn set_words(&self, first: u32, count: u32, shift: u8, w: Word) {
        debug_assert!(count == 0 || (first as usize + ((count as usize - 1) << shift)) < self.nr);
        for j in 0..count as usize {
            let i = first as usize + (j << shift);
            if i >= self.nr {
                break;
            }
            self.metas[slot(i)].word.store(w.0, Ordering::Release);
        }
    }

    /// Replaces the state word if it still equals `old`.
    #[inline]
    pub fn cas_word(&self, idx: u32, old: Word, new: Word) -> Result<Word, Word> {
        // AcqRel: the winner sees every write before the state it replaced and
        // publishes its own; pairs with the Acquire in `word`.
        self.frame_meta(idx)
            .word
            .compare_exchange(old.0, new.0, Ordering::AcqRel, Ordering::Acquire)
            .map(Word)
            .map_err(Word)
    }

    /// The entry at table slot `s` (a link's value).
    #[inline(always)]
    fn at(&self, s: u32) -> &'a PageMeta {
        &self.metas[s as usize]
    }

    /// The slot of entry `idx` (below `entries`), as links hold it.
    #[inline(always)]
    fn slot32(idx: u32) -> u32 {
        slot(idx as usize) as u32
    }

    /// The entry at slot `s` (`NIL` stays `NIL`): `slot`'s inverse.
    #[inline]
    fn entry_at(s: u32) -> u32 {
        if s == NIL {
            NIL
        } else {
            s - s / (SKEW_GROUP + PER_LINE) as u32 * PER_LINE as u32
        }
    }

    /// The slot a link to entry `v` holds (`NIL` stays `NIL`).
    #[inline]
    fn link_to(v: u32) -> u32 {
        if v == NIL {
            NIL
        } else {
            Self::slot32(v)
        }
    }

    /// The entry after `idx` on its list, `NIL` if none.
    #[inline]
    pub fn next(&self, idx: u32) -> u32 {
        // Relaxed: links are only touched under the lock of the list (see module docs).
        Self::entry_at(self.meta(idx).next.load(Ordering::Relaxed))
    }

    /// The entry before `idx` on its list, `NIL` if none.
    #[inline]
    pub fn prev(&self, idx: u32) -> u32 {
        Self::entry_at(self.meta(idx).prev.load(Ordering::Relaxed))
    }

    #[inline]
    pub fn set_next(&self, idx: u32, v: u32) {
        self.meta(idx)
            .next
            .store(Self::link_to(v), Ordering::Relaxed);
    }

    #[inline]
    pub fn set_prev(&self, idx: u32, v: u32) {
        self.meta(idx)
            .prev
            .store(Self::link_to(v), Ordering::Relaxed);
    }

    // The lists' own operations work on slots: a link holds its target's slot,
    // so following one needs no arithmetic.

    #[inline(always)]
    fn next_at(&self, s: u32) -> u32 {
        self.at(s).next.load(Ordering::Relaxed)
    }

    #[inline(always)]
    fn prev_at(&self, s: u32) -> u32 {
        self.at(s).prev.load(Ordering::Relaxed)
    }

    #[inline(always)]
    fn set_next_at(&self, s: u32, v: u32) {
        self.at(s).next.store(v, Ordering::Relaxed);
    }

    #[inline(always)]
    fn set_prev_at(&self, s: u32, v: u32) {
        self.at(s).prev.store(v, Ordering::Relaxed);
    }
}

/// An intrusive doubly linked list of block heads, by frame index, ending in
/// `NIL` at both ends: a per-CPU list.
///
/// The list head itself is plain data owned by whatever lock protects the list (a
/// CPU's slot, under its lock); the links live in the `FrameTable`. (The buddy
/// lists are `FreeList`s, circular through a sentinel.)
#[derive(Clone, Copy, Debug)]
pub(crate) struct FrameList {
    pub head: u32,
    pub tail: u32,
}

impl FrameList {
    pub const EMPTY: FrameList = FrameList {
        head: NIL,
        tail: NIL,
    };

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head == NIL
    }

    #[inline]
    pub fn push_head<'a>(&mut self, t: impl Into<Frames<'a>>, idx: u32) {
        let t = t.into();
        let i = Frames::slot32(idx);
        t.set_prev_at(i, NIL);
        t.set_next_at(i, Frames::link_to(self.head));
        if self.head == NIL {
            self.tail = idx;
        } else {
            t.set_prev_at(Frames::slot32(self.head), i);
        }
        self.head = idx;
    }

    #[inline]
    pub fn push_tail<'a>(&mut self, t: impl Into<Frames<'a>>, idx: u32) {
        let t = t.into();
        let i = Frames::slot32(idx);
        t.set_next_at(i, NIL);
        t.set_prev_at(i, Frames::link_to(self.tail));
        if self.tail == NIL {
            self.head = idx;
        } else {
            t.set_next_at(Frames::slot32(self.tail), i);
        }
        self.tail = idx;
    }

    #[inline]
    pub fn unlink<'a>(&mut self, t: impl Into<Frames<'a>>, idx: u32) {
        let t = t.into();
        let i = Frames::slot32(idx);
        let p = t.prev_at(i);
        let n = t.next_at(i);
        if p == NIL {
            debug_assert_eq!(self.head, idx);
            self.head = Frames::entry_at(n);
        } else {
            t.set_next_at(p, n);
        }
        if n == NIL {
            debug_assert_eq!(self.tail, idx);
            self.tail = Frames::entry_at(p);
        } else {
            t.set_prev_at(n, p);
        }
        t.set_prev_at(i, NIL);
        t.set_next_at(i, NIL);
    }

    /// Iterates the heads on the list, first to last.
    pub fn iter<'a>(&self, t: &'a FrameTable) -> impl Iterator<Item = u32> + 'a {
        walk(t, self.head, NIL)
    }
}

/// One of a zone's buddy lists (`free_area[order].free_list[mt]`): Linux's
/// `list_head`, circular through a sentinel entry of the frame table (a
/// `FrameTable::sentinel`, never a frame), so the list is empty when the
/// sentinel links to itself.
///
/// ```text
///   sentinel <-> first <-> ... <-> last <-> (back to the sentinel)
/// ```
///
/// With no end to test, adding a block at the head or the tail and taking one
/// off anywhere write the same four links whatever the list looks like: the
/// buddy's merge, which adds each freed block at the head or the tail as
/// `buddy_merge_likely()` says and takes off buddies at random places, runs
/// without a branch on the list's shape. The lists are protected by the zone
/// lock; the links are relaxed atomics for that reason (see the module
/// documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreeList {
    sentinel: u32,
}

impl FreeList {
    /// List `i` of `t` (its `FrameTable::sentinel(i)`).
    pub fn new(t: &FrameTable, i: usize) -> FreeList {
        FreeList {
            sentinel: t.sentinel(i),
        }
    }

    /// The table entry the list runs through.
    #[inline]
    pub fn sentinel(self) -> u32 {
        self.sentinel
    }

    #[inline]
    pub fn is_empty(self, t: Frames<'_>) -> bool {
        let s = Frames::slot32(self.sentinel);
        t.next_at(s) == s
    }

    /// The first block's head, if any.
    #[inline]
    pub fn first(self, t: Frames<'_>) -> Option<u32> {
        let s = Frames::slot32(self.sentinel);
        let n = t.next_at(s);
        (n != s).then(|| Frames::entry_at(n))
    }

    /// Adds `idx` at the tail when `tail`, else at the head.
    #[inline]
    pub fn push(self, t: Frames<'_>, idx: u32, tail: bool) {
        let s = Frames::slot32(self.sentinel);
        let i = Frames::slot32(idx);
        // Both of the sentinel's links are read (one line) and one is chosen, so
        // that the choice is a select, not a branch: `buddy_merge_likely()`'s
        // answer is a coin toss in a shuffled free.
        let (last, first) = (t.prev_at(s), t.next_at(s));
        let p = if tail { last } else { s };
        let n = if tail { s } else { first };
        t.set_prev_at(i, p);
        t.set_next_at(i, n);
        t.set_next_at(p, i);
        t.set_prev_at(n, i);
    }

    /// Takes `idx` off the list it is on: only its neighbours' links change, the
    /// sentinel's among them when it is first or last. A circular list's
    /// neighbours are all the unlink needs, so which list it is need not be
    /// known.
    #[inline(always)]
    pub fn unlink(t: Frames<'_>, idx: u32) {
        let i = Frames::slot32(idx);
        let p = t.prev_at(i);
        let n = t.next_at(i);
        t.set_next_at(p, n);
        t.set_prev_at(n, p);
        t.set_prev_at(i, NIL);
        t.set_next_at(i, NIL);
    }

    /// Iterates the heads on the list, first to last.
    pub fn iter<'a>(self, t: &'a FrameTable) -> impl Iterator<Item = u32> + 'a {
        walk(t, t.next(self.sentinel), self.sentinel)
    }
}

/// The entries from `first` along the `next` links, up to (not including) `end`.
fn walk(t: &FrameTable, first: u32, end: u32) -> impl Iterator<Item = u32> + '_ {
    let mut cur = first;
    core::iter::from_fn(move || {
        (cur != end).then(|| {
            let c = cur;
            cur = t.next(c);
            c
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The zone the tests' tables are for.
    const ZONE: crate::types::ZoneId = crate::types::ZoneId {
        node: 0,
        zone_type: crate::types::ZoneType::Normal,
    };

    #[test]
    fn claim_tags_round_trip_and_leave_lazy_alone() {
        for tag in 0..=CLAIM_TAG_MAX {
            for w in [Word::claimed(3), Word::claimed_block(Order(4), 1)] {
                let t = w.with_claim_tag(tag);
                assert_eq!(t.claim_tag(), tag);
                assert!(t.is_claimed() && !t.is_materializing());
                assert_eq!((t.order(), t.aux()), (w.order(), w.aux()));
            }
        }
    }

    #[test]
    fn word_round_trips_its_fields() {
        let w = Word::new(Tag::Alloc, 9, 2, 7);
        assert_eq!(w.tag(), Tag::Alloc);
        assert_eq!(w.order(), Order(9));
        assert_eq!(w.aux(), 2);
        assert_eq!(w.refcount(), 7);
        assert_eq!(w.with_refcount(1).refcount(), 1);
        assert_eq!(w.with_refcount(1).order(), Order(9));
    }

    #[test]
    #[cfg(not(loom))]
    fn a_zone_table_is_the_size_the_config_counts() {
        for nr in [
            0usize,
            1,
            3,
            4,
            5,
            255,
            256,
            1023,
            1024,
            4096,
            100_000,
            3 * 32_768 + 17,
        ] {
            if cfg!(miri) && nr > 4096 {
                // Miri's cost grows faster than a table: the arithmetic is the
                // same at every size, and the native run covers the large ones.
                continue;
            }
            let t = FrameTable::new(0, nr, ZONE_LISTS).unwrap();
            let bytes = (t.nr_lines * core::mem::size_of::<Line>()) as u64;
            assert_eq!(bytes, zone_metadata_bytes(nr as u64), "{nr} frames");
            // All present: the sections and the tail back the whole table.
            let all = [(0, nr as u64)];
            assert_eq!(table_backed_bytes(0, nr as u64, &all), bytes, "{nr} frames");
            assert_eq!(t.backed_bytes() as u64, bytes, "{nr} frames");
        }
    }

    /// A sparse map: memory in a few sections of a wide span. Only those
    /// sections (and the tail) are backed, every other frame reads as a hole,
    /// and memory arriving later backs its section then.
    #[test]
    #[cfg(all(feature = "std", target_os = "linux", not(any(loom, miri))))]
    fn a_sparse_table_backs_the_sections_that_hold_memory() {
        use ZONE_LISTS;
        let s = SECTION_FRAMES;
        // From frame 1000: half a section of memory, then a section and a half
        // from section 40, in a span of 100 sections.
        let (base, nr) = (1000u64, 100 * s as usize - 1000);
        let present = [(1000, s / 2), (40 * s, 41 * s + s / 2)];
        let t =
            FrameTable::build(ZONE, base, nr, ZONE_LISTS, &present, &mut TableSource::Own).unwrap();
        let v = t.view();
        let present_frames = (s / 2 - 1000) + s + s / 2;
        let per_frame = core::mem::size_of::<PageMeta>() as u64;
        let backed = t.backed_bytes() as u64;
        // Three sections backed (0 from the table's first frame, 40 and 41),
        // a little over 16 bytes a frame with their skew lines, and the tail.
        let frames = 3 * s - 1000;
        assert!(
            backed >= frames * per_frame && backed < frames * per_frame * 102 / 100,
            "{backed}"
        );
        assert!(backed < present_frames * per_frame * 2);
        assert_eq!(backed, table_backed_bytes(base, nr as u64, &present));
        for pfn in [1000, s / 2 - 1, 40 * s, 41 * s + s / 2 - 1] {
            assert_eq!(v.word_of(Pfn(pfn)), Some(Word::TAIL), "{pfn}");
        }
        for pfn in [s / 2, s, 20 * s, 39 * s + 7, 41 * s + s / 2, 99 * s] {
            assert_eq!(v.word_of(Pfn(pfn)), Some(Word::HOLE), "{pfn}");
        }
        // Memory arrives in section 70: it is backed now, and only it.
        let first = (70 * s - base) as usize;
        assert!(t.back(first, first + 512, &mut TableSource::Own));
        t.make_present(first, first + 512);
        assert_eq!(
            t.backed_bytes() as u64 - backed,
            table_backed_bytes(base, nr as u64, &[(70 * s, 70 * s + 1)])
                - table_backed_bytes(base, nr as u64, &[])
        );
        let v = t.view();
        v.set_word(first as u32 + 3, Word::buddy(Order(0)));
        assert_eq!(v.word_of(Pfn(70 * s + 3)), Some(Word::buddy(Order(0))));
        assert_eq!(v.word_of(Pfn(70 * s + 512)), Some(Word::HOLE));
        assert_eq!(v.word_of(Pfn(71 * s)), Some(Word::HOLE));
    }

    /// Tables carved from a region the caller gives: one after another,
    /// aligned, and refused once the region is used up.
    #[test]
    #[cfg(not(loom))]
    #[allow(unsafe_code)]
    fn a_static_region_holds_tables_until_it_is_used_up() {
        use crate::memmap::StaticMemMap;
        let whole = Box::into_raw(alloc::vec![0xa5u8; 3 << 20].into_boxed_slice());
        // SAFETY: a fresh box, given back below once nothing borrows it.
        let region: &'static mut [u8] = unsafe { &mut *whole };
        let mut m = StaticMemMap::new(region);
        let all = |n: u64| [(0, n)];
        let a = FrameTable::build(
            ZONE,
            0,
            65_536,
            ZONE_LISTS,
            &all(65_536),
            &mut TableSource::Given(&mut m),
        )
        .unwrap();
        let used = m.used();
        assert!((65_536 * 16..65_536 * 17).contains(&used));
        let b = FrameTable::build(
            ZONE,
            0,
            4096,
            ZONE_LISTS,
            &all(4096),
            &mut TableSource::Given(&mut m),
        )
        .unwrap();
        assert_eq!(a.view().word(65_535), Word::TAIL);
        assert_eq!(b.view().word(0), Word::TAIL);
        assert_eq!(b.lines.as_ptr() as usize % 4096, 0);
        // 2 MiB more does not fit in what is left of 3 MiB.
        assert!(FrameTable::build(
            ZONE,
            0,
            131_072,
            ZONE_LISTS,
            &all(131_072),
            &mut TableSource::Given(&mut m)
        )
        .is_none());
        // The region back (Miri counts a leak as an error): the tables in it go
        // first, and a table in given memory frees nothing of it.
        drop((a, b, m));
        // SAFETY: `whole` is the box, and nothing borrows it any more.
        drop(unsafe { Box::from_raw(whole) });
    }

    /// The skew gives every entry its own slot inside the table, keeps a
    /// line's four entries on one line, and spreads the heads of 64 consecutive
    /// pageblocks over all 64 sets of a cache with 4 KiB ways.
    #[test]
    fn skewed_slots_are_distinct_and_spread_pageblock_heads() {
        let nr = 3 * SKEW_GROUP + 7;
        let t = FrameTable::new(0, nr, 5).unwrap();
        let slots = t.nr_lines * PER_LINE;
        let mut seen = vec![false; slots];
        for i in 0..t.entries {
            let s = slot(i);
            assert!(s < slots && !seen[s], "entry {i} at slot {s}");
            seen[s] = true;
            assert_eq!(s / PER_LINE, slot(i - i % PER_LINE) / PER_LINE);
        }
        let sets: std::collections::BTreeSet<usize> =
            (0..64).map(|k| slot(k * 512) * 16 / 64 % 64).collect();
        assert_eq!(sets.len(), 64);
        // Every entry reached through a view is the one written.
        let v = t.view();
        for i in 0..nr as u32 {
            v.set_word(i, Word::buddy(Order((i % 7) as u8)));
            v.set_next(i, i ^ 1);
        }
        for i in 0..nr as u32 {
            assert_eq!(v.word(i), Word::buddy(Order((i % 7) as u8)));
            assert_eq!(v.next(i), i ^ 1);
        }
        // Links hold slots; the lists answer in entries, across groups too.
        for i in 0..t.entries as u32 {
            assert_eq!(Frames::entry_at(Frames::slot32(i)), i);
        }
        assert_eq!(Frames::entry_at(Frames::link_to(NIL)), NIL);
        let last = nr as u32 - 1;
        let l = FreeList::new(&t, 4);
        for (k, h) in [0u32, 511, 512, 1030, last].into_iter().enumerate() {
            l.push(v, h, k % 2 == 1);
        }
        assert_eq!(l.iter(&t).collect::<Vec<_>>(), [last, 512, 0, 511, 1030]);
        assert_eq!(l.first(v), Some(last));
        FreeList::unlink(v, 512);
        assert_eq!(l.iter(&t).collect::<Vec<_>>(), [last, 0, 511, 1030]);
        let mut pl = FrameList::EMPTY;
        for h in [1u32, 513, 1031, last - 1] {
            pl.push_tail(&t, h);
        }
        pl.unlink(&t, 1);
        pl.unlink(&t, last - 1);
        assert_eq!(pl.iter(&t).collect::<Vec<_>>(), [513, 1031]);
        assert_eq!((pl.head, pl.tail), (513, 1031));
        assert_eq!((v.prev(513), v.next(1031), v.next(1)), (NIL, NIL, NIL));
        // A run of heads across a group's end, and one cut at the last frame.
        v.set_words(508, 3, 2, Word::pcp(Order(2), 1));
        for i in [508, 512, 516] {
            assert_eq!(v.word(i), Word::pcp(Order(2), 1));
        }
        assert_eq!(v.word(509), Word::buddy(Order((509 % 7) as u8)));
        if !cfg!(debug_assertions) {
            // The run's second head would be padding: nothing past the frames
            // changes (debug builds refuse the call instead).
            v.set_words(last - 1, 4, 1, Word::pcp(Order(1), 0));
            assert_eq!(v.word(last - 1), Word::pcp(Order(1), 0));
            assert_eq!(v.word_any(nr as u64), Word::TAIL);
            assert_eq!(v.word_any(t.sentinels as u64 + 1), Word::HOLE);
        }
    }

    /// The merge loop compares `word_any` past the frames with a free head's
    /// word and relies on padding and sentinels never matching one, with lists
    /// in use.
    #[test]
    fn past_the_frames_no_entry_reads_as_a_free_head() {
        for nr in [1usize, 3, 5, 8] {
            let t = FrameTable::new(100, nr, 3).unwrap();
            let v = t.view();
            FreeList::new(&t, 0).push(v, 0, false);
            v.set_word(0, Word::buddy(Order(0)));
            let last = nr as u32 - 1;
            if last > 0 {
                FreeList::new(&t, 2).push(v, last, true);
                v.set_word(last, Word::buddy(Order(0)));
            }
            let past = (t.nr_lines * PER_LINE) as u64;
            for idx in (nr as u64..past + 4).chain([u32::MAX as u64, u64::MAX]) {
                let w = v.word_any(idx);
                assert!(
                    w == Word::TAIL || w == Word::HOLE,
                    "{nr} frames: entry {idx} reads {w:?}"
                );
            }
            assert_eq!(v.word_any(0), Word::buddy(Order(0)));
        }
    }

    #[test]
    fn list_push_and_unlink_keep_links_consistent() {
        let t = FrameTable::new(0, 8, 0).unwrap();
        let mut l = FrameList::EMPTY;
        l.push_head(&t, 3);
        l.push_tail(&t, 5);
        l.push_head(&t, 1);
        assert_eq!(l.iter(&t).collect::<Vec<_>>(), [1, 3, 5]);
        l.unlink(&t, 3);
        assert_eq!(l.iter(&t).collect::<Vec<_>>(), [1, 5]);
        l.unlink(&t, 1);
        l.unlink(&t, 5);
        assert!(l.is_empty());
        assert_eq!(l.tail, NIL);
    }

    #[test]
    fn free_lists_push_at_either_end_and_unlink_anywhere() {
        let t = FrameTable::new(0, 8, 2).unwrap();
        let (a, b) = (FreeList::new(&t, 0), FreeList::new(&t, 1));
        assert_ne!(a, b);
        let v = t.view();
        assert!(a.is_empty(v) && b.is_empty(v));
        assert_eq!(a.first(v), None);
        a.push(v, 3, false);
        a.push(v, 5, true);
        a.push(v, 1, false);
        b.push(v, 6, true);
        assert_eq!(a.iter(&t).collect::<Vec<_>>(), [1, 3, 5]);
        assert_eq!((a.first(v), v.prev(a.sentinel())), (Some(1), 5));
        assert_eq!(b.iter(&t).collect::<Vec<_>>(), [6]);
        FreeList::unlink(v, 3);
        assert_eq!(a.iter(&t).collect::<Vec<_>>(), [1, 5]);
        FreeList::unlink(v, 5);
        assert_eq!((a.first(v), v.prev(a.sentinel())), (Some(1), 1));
        FreeList::unlink(v, 1);
        FreeList::unlink(v, 6);
        assert!(a.is_empty(v) && b.is_empty(v));
        // The sentinels are no frames: frame numbers past the zone stay outside.
        assert!(!v.contains(Pfn(8)) && v.word_of(Pfn(8)).is_none());
    }
}
