//! Pageblocks: the migratetype of each `pageblock_nr_pages`-aligned group of frames.
//!
//! Layer above the frame table, below the buddy lists. Each pageblock has one byte:
//!
//! ```text
//!  bit 0-2: migratetype (Unmovable, Movable, Reclaimable, HighAtomic)
//!  bit 3:   isolated (Linux 6.16's standalone PB_migrate_isolate: un-isolating
//!           restores the type underneath)
//!  bit 4:   counted: the block's probe frame (`zone_start + k * pageblock_nr_pages`)
//!           lies in the zone and is not a hole, so /proc/pagetypeinfo's
//!           "Number of blocks type" section counts it
//!  bit 5:   whole: every frame of the block lies inside the zone (blocks straddling
//!           a zone edge are never moved between types wholesale)
//! ```
//!
//! Reads are lockless (a stale read is tolerated and re-read under the zone lock where
//! it matters, as in Linux); writes happen under the zone lock, which also keeps the
//! per-type block counters that pagetypeinfo prints without walking anything.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::sync::{AtomicU8, Ordering};
use crate::types::{Migratetype, Pfn};

const MT_MASK: u8 = 0x7;
const ISOLATE: u8 = 0x8;
pub(crate) const COUNTED: u8 = 0x10;
pub(crate) const WHOLE: u8 = 0x20;

/// The pageblock bytes of one zone.
pub(crate) struct PageblockTable {
    /// `pfn >> pageblock_order` of the zone's first block.
    first_block: u64,
    shift: u8,
    bytes: Box<[AtomicU8]>,
}

impl PageblockTable {
    /// All blocks `Movable` (as Linux's memmap init leaves them); `flags[i]` supplies
    /// the COUNTED/WHOLE bits of block `i`.
    /// `None` if the table's memory cannot be had.
    pub fn new(
        first_block: u64,
        shift: u8,
        flags: impl ExactSizeIterator<Item = u8>,
    ) -> Option<PageblockTable> {
        let mut v: Vec<AtomicU8> = Vec::new();
        v.try_reserve_exact(flags.len()).ok()?;
        v.extend(flags.map(|f| AtomicU8::new(f | Migratetype::Movable as u8)));
        Some(PageblockTable {
            first_block,
            shift,
            bytes: v.into_boxed_slice(),
        })
    }

    #[inline]
    pub fn index(&self, pfn: Pfn) -> usize {
        ((pfn.0 >> self.shift) - self.first_block) as usize
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    #[inline]
    pub fn first_pfn_of(&self, idx: usize) -> Pfn {
        Pfn((self.first_block + idx as u64) << self.shift)
    }

    #[inline]
    pub fn raw(&self, idx: usize) -> u8 {
        // Relaxed: pageblock bytes are advisory outside the zone lock and
        // authoritative under it, where the lock orders them.
        self.bytes[idx].load(Ordering::Relaxed)
    }

    /// The effective migratetype: `Isolate` if isolated, else the stored type.
    #[inline]
    pub fn migratetype(&self, pfn: Pfn) -> Migratetype {
        decode(self.raw(self.index(pfn)))
    }

    /// Whether the block holding `pfn` is of type `mt` and not isolated: one
    /// masked compare, for the fast paths.
    #[inline]
    pub fn is_type(&self, pfn: Pfn, mt: Migratetype) -> bool {
        is_type(self.raw(self.index(pfn)), mt)
    }

    /// The type of the block holding `pfn` if it is one of the per-CPU lists'
    /// (`Unmovable`, `Movable`, `Reclaimable`, as its index), not isolated, and
    /// the block holds memory (`COUNTED`: its frames' metadata is backed, see
    /// `memmap`, so a compare-and-swap on one of them is safe before its word
    /// is read): one masked compare, for the per-CPU fast path.
    #[inline]
    pub fn pcp_type(&self, pfn: Pfn) -> Option<usize> {
        let b = (self.raw(self.index(pfn)) & (MT_MASK | ISOLATE | COUNTED)) ^ COUNTED;
        (usize::from(b) < crate::types::MIGRATE_PCPTYPES).then_some(usize::from(b))
    }

    /// Whether the block holding `pfn` holds memory (`COUNTED`): its frames'
    /// metadata is backed (see `memmap`).
    #[inline]
    pub fn holds_memory(&self, pfn: Pfn) -> bool {
        self.raw(self.index(pfn)) & COUNTED != 0
    }

    /// The table as a `Pageblocks` view: what `is_type` reads, for a loop to
    /// keep in registers (see `Pageblocks`).
    #[inline]
    pub fn view(&self) -> Pageblocks<'_> {
        Pageblocks {
            bytes: &self.bytes,
            first_block: self.first_block,
            shift: self.shift,
        }
    }

    /// The stored type, ignoring isolation.
    #[inline]
    pub fn base_migratetype(&self, pfn: Pfn) -> Migratetype {
        Migratetype::from_idx((self.raw(self.index(pfn)) & MT_MASK) as usize)
            .unwrap_or(Migratetype::Movable)
    }

    #[inline]
    pub fn flags(&self, pfn: Pfn) -> u8 {
        self.raw(self.index(pfn))
    }

    /// Sets the type (or isolation, for `Isolate`) of the block holding `pfn` and
    /// returns the effective type before and after. Caller holds the zone lock.
    pub fn set_locked(&self, pfn: Pfn, mt: Migratetype) -> (Migratetype, Migratetype) {
        let i = self.index(pfn);
        let old = self.raw(i);
        let new = match mt {
            Migratetype::Isolate => old | ISOLATE,
            _ => (old & !(MT_MASK | ISOLATE)) | mt as u8,
        };
        self.bytes[i].store(new, Ordering::Relaxed);
        (decode(old), decode(new))
    }

    /// Marks the block holding `pfn` counted (it holds memory now: hot-added);
    /// returns whether it was not. Caller holds the zone lock.
    pub fn set_counted_locked(&self, pfn: Pfn) -> bool {
        let i = self.index(pfn);
        let old = self.raw(i);
        self.bytes[i].store(old | COUNTED, Ordering::Relaxed);
        old & COUNTED == 0
    }

    /// Clears the isolation of the block holding `pfn`; returns the restored type.
    pub fn unisolate_locked(&self, pfn: Pfn) -> Migratetype {
        let i = self.index(pfn);
        let new = self.raw(i) & !ISOLATE;
        self.bytes[i].store(new, Ordering::Relaxed);
        decode(new)
    }
}

/// A borrowed view of a `PageblockTable` for `is_type` in a loop: the zone
/// holds atomics, so the compiler reloads the table's fields from the zone after
/// every store to a frame unless a loop takes them into a view first (as
/// `Frames` does for the frame table).
#[derive(Clone, Copy)]
pub(crate) struct Pageblocks<'a> {
    bytes: &'a [AtomicU8],
    first_block: u64,
    shift: u8,
}

impl Pageblocks<'_> {
    /// `PageblockTable::is_type`.
    #[inline]
    pub fn is_type(&self, pfn: Pfn, mt: Migratetype) -> bool {
        let i = ((pfn.0 >> self.shift) - self.first_block) as usize;
        // Relaxed: as `PageblockTable::raw`.
        is_type(self.bytes[i].load(Ordering::Relaxed), mt)
    }
}

/// Whether a pageblock byte says type `mt`, not isolated: one masked compare.
#[inline]
fn is_type(b: u8, mt: Migratetype) -> bool {
    b & (MT_MASK | ISOLATE) == mt as u8
}

#[inline]
fn decode(b: u8) -> Migratetype {
    if b & ISOLATE != 0 {
        Migratetype::Isolate
    } else {
        Migratetype::from_idx((b & MT_MASK) as usize).unwrap_or(Migratetype::Movable)
    }
}
