//! Where the per-frame metadata lives: Linux's `mem_map`, placed as
//! `SPARSEMEM_VMEMMAP` places it.
//!
//! Bottom layer, beside `frame`, which lays its tables out in the memory this
//! module finds. Each zone's frame table (`frame::FrameTable`, 16 bytes a frame)
//! is one run of address space, indexed by `pfn - zone_start_pfn`, so that a
//! frame's metadata is one addition away on every path. Only the *sections* of
//! that run (`SECTION_FRAMES` frames each, aligned on absolute frame numbers as
//! Linux's 128 MiB memory sections are) that hold present memory are backed by
//! memory; the rest reads as zeroes, which is a hole's state word, and costs
//! nothing. So a machine whose memory is scattered over a wide physical range
//! pays for the frames it has, not for the range.
//!
//! ```text
//!   zone span:   |  RAM   | hole ......................... |  RAM   |
//!   sections:    [ s0 ][ s1 ][ s2 ][ s3 ] ... [ sN-1 ][ sN ]
//!   table:       [ backed ][ reads as zero, no memory ][ backed ][sentinels]
//! ```
//!
//! Who provides the address space is a `MemMap`:
//! * a kernel maps it itself: a virtual range where every page is one shared,
//!   read-only zero frame, and fresh frames mapped over the sections that hold
//!   memory (Linux's `vmemmap_populate()`), taken from the memory being managed,
//!   as memblock takes them, so no heap is needed (`ZoneAllocator::with_memmap`);
//! * `StaticMemMap` carves tables from one region the caller gives (a
//!   `&'static mut` slice: a flat memory map, where holes cost their 16 bytes a
//!   frame like any other);
//! * with `std` on Linux the allocator maps its tables itself, `PROT_READ` over
//!   the whole run and read-write over the present sections (its default);
//! * elsewhere it allocates each table from the global heap, whole.

use core::ptr::NonNull;

use crate::types::ZoneId;

/// Frames in a memory section: the unit of address space the frame tables back
/// with memory or leave as zeroes (`PAGES_PER_SECTION` for x86-64's 128 MiB
/// sections of 4 KiB pages). Sections start at multiples of it in frame numbers.
pub const SECTION_FRAMES: u64 = 1 << 15;

/// Gives address space for frame tables and backs the parts that hold memory.
///
/// # Safety
/// * `reserve(zone, bytes)` returns `None`, or the start of `bytes` bytes aligned to
///   4096, valid for reads for as long as the allocator lives (a `'static`
///   region, or one the implementation never gives back while the allocator
///   exists), used by nothing else, and reading as zeroes.
/// * `populate(addr, bytes)` with a range inside a reservation returns `false`,
///   or `true` after making every byte of the range valid for reads and writes
///   (rounding out to whatever pages it maps): bytes it backs anew read as zero,
///   bytes already backed keep their contents. It may be called more than once
///   over the same bytes.
#[allow(unsafe_code)]
pub unsafe trait MemMap {
    /// `bytes` of address space for the frame table of `zone`, aligned to
    /// 4096, reading as zeroes. A NUMA kernel backs it (in `populate`) from
    /// `zone.node`'s memory.
    fn reserve(&mut self, zone: ZoneId, bytes: usize) -> Option<NonNull<u8>>;

    /// Backs `bytes` from `addr` (inside a reservation) with writable memory.
    fn populate(&mut self, addr: NonNull<u8>, bytes: usize) -> bool;
}

/// Frame tables carved one after another from a region the caller gives: a flat
/// memory map (every byte of a table is backed, holes included).
///
/// ```
/// use zonealloc::{Config, StaticMemMap, ZoneAllocator, AbstractFrames};
///
/// // 4 MiB of memory from the boot allocator (a kernel would carve it from the
/// // frames it manages, and leave it out of the configuration).
/// let region: &'static mut [u8] = Box::leak(vec![0u8; 4 << 20].into_boxed_slice());
/// let mut memmap = StaticMemMap::new(region);
/// let config = Config::with_bytes(256 << 20);
/// let za = ZoneAllocator::with_memmap(config, AbstractFrames, &mut memmap).unwrap();
/// assert!(memmap.used() <= 4 << 20);
/// assert_eq!(za.nr_free_pages() + za.nr_pcp_pages(), za.managed_pages());
/// ```
pub struct StaticMemMap {
    start: usize,
    len: usize,
    used: usize,
}

impl StaticMemMap {
    /// Tables from `region`. Its contents are overwritten as tables are carved.
    pub fn new(region: &'static mut [u8]) -> StaticMemMap {
        StaticMemMap {
            start: region.as_mut_ptr() as usize,
            len: region.len(),
            used: 0,
        }
    }

    /// Bytes handed out so far (with the alignment they needed).
    pub fn used(&self) -> usize {
        self.used
    }
}

// SAFETY: the region is `'static` and exclusively ours (`&'static mut`); each
// reservation is a distinct, 4096-aligned part of it, zeroed before it is handed
// out, and every byte is always backed, so `populate` has nothing to do.
#[allow(unsafe_code)]
unsafe impl MemMap for StaticMemMap {
    fn reserve(&mut self, _zone: ZoneId, bytes: usize) -> Option<NonNull<u8>> {
        let at = (self.start + self.used).checked_next_multiple_of(4096)?;
        let end = at.checked_add(bytes)?;
        if end > self.start + self.len {
            return None;
        }
        self.used = end - self.start;
        let p = at as *mut u8;
        // SAFETY: `[at, end)` lies inside the region (checked above), which we
        // own exclusively for `'static`.
        unsafe { p.write_bytes(0, bytes) };
        NonNull::new(p)
    }

    fn populate(&mut self, _addr: NonNull<u8>, _bytes: usize) -> bool {
        true
    }
}

/// The sections of the frames `[base, base + nr)` that hold present memory, as
/// runs of table indices `[first, end)`, in order, each a whole number of
/// sections clipped to the table. `present` lists the present frames as sorted,
/// disjoint absolute ranges `(start, end)`.
pub(crate) fn populated_runs(
    base: u64,
    nr: u64,
    present: &[(u64, u64)],
) -> impl Iterator<Item = (u64, u64)> + '_ {
    let end = base + nr;
    let mut last_end = base;
    present.iter().filter_map(move |&(s, e)| {
        let (s, e) = (s.max(base), e.min(end));
        if s >= e {
            return None;
        }
        let first = (s / SECTION_FRAMES * SECTION_FRAMES)
            .max(base)
            .max(last_end);
        let stop = e
            .div_ceil(SECTION_FRAMES)
            .saturating_mul(SECTION_FRAMES)
            .min(end);
        if first >= stop {
            return None;
        }
        last_end = stop;
        Some((first - base, stop - base))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn present_ranges_populate_whole_sections_once() {
        let s = SECTION_FRAMES;
        // A table from frame 100 over four sections: memory in the first and in
        // two ranges of the last, and a range that starts in the first section's
        // last frames and ends in the second.
        let present = [
            (100, 200),
            (s - 1, s + 1),
            (3 * s + 5, 3 * s + 9),
            (3 * s + 20, 4 * s - 7),
        ];
        let runs: alloc::vec::Vec<_> = populated_runs(100, 4 * s - 107, &present).collect();
        assert_eq!(
            runs,
            [
                (0, s - 100),
                (s - 100, 2 * s - 100),
                (3 * s - 100, 4 * s - 107)
            ]
        );
        // Nothing present: nothing populated.
        assert_eq!(populated_runs(0, 4 * s, &[]).count(), 0);
    }
}
