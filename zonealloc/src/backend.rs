//! Memory backends: what, if anything, stands behind a frame number.
//!
//! The allocator manages frame numbers; a backend gives them addresses. Two are
//! provided: `AbstractFrames` (nothing behind the numbers: device memory, guest
//! frames, GPU pages) and, with `std`, `Arena` (an mmap'd region whose pages a program
//! can write to). A kernel supplies its own backend over its direct map.

use core::ptr::NonNull;

use crate::types::Pfn;

/// What stands behind the frames. Called without any allocator lock held.
///
/// Unlike a `Migrate` callback or a `Config::cpu_id` hook, a backend's calls are
/// not guarded against unwinding (they sit on the allocation and free paths, with
/// a block in hand): its methods must not panic, or that block is lost.
///
/// # Safety
/// If `page_address` and `page_size` return `Some`, the address of each frame must
/// point at `page_size` bytes valid for reads and writes for as long as the backend
/// lives, frames must not overlap, and consecutive frames of a zone must be
/// contiguous in memory: safe code (`PageBlock::bytes_mut`) builds slices from them.
#[allow(unsafe_code)]
pub unsafe trait Backend: Send + Sync {
    /// The address of frame `pfn`, if frames have addresses.
    fn page_address(&self, pfn: Pfn) -> Option<NonNull<u8>>;

    /// Fills `nr` frames from `pfn` with zeroes (`__GFP_ZERO`, `init_on_alloc`).
    /// The frames are owned by the caller.
    fn zero_pages(&self, pfn: Pfn, nr: u64);

    /// Fills `nr` frames from `pfn` with `byte` (page poisoning). The frames are
    /// owned by the caller.
    fn fill_pages(&self, _pfn: Pfn, _nr: u64, _byte: u8) {}

    /// The first byte of the `nr` frames from `pfn` that is not `byte`, as (offset,
    /// value); `None` if all match or frames have no contents.
    fn find_mismatch(&self, _pfn: Pfn, _nr: u64, _byte: u8) -> Option<(usize, u8)> {
        None
    }

    /// Whether every frame reads as zeroes when the backend is new (fresh anonymous
    /// memory does).
    fn initially_zero(&self) -> bool {
        false
    }

    /// The frame whose page holds address `addr`, if any.
    fn pfn_of_addr(&self, _addr: *const u8) -> Option<Pfn> {
        None
    }

    /// Page size in bytes, if frames have contents.
    fn page_size(&self) -> Option<usize> {
        None
    }

    /// Copies the contents of the `nr` frames from `from` to the `nr` frames from
    /// `to` (compaction moving a block); `false` if frames have no contents. The
    /// caller owns both ranges for the copy, and they do not overlap.
    fn copy_pages(&self, _from: Pfn, _to: Pfn, _nr: u64) -> bool {
        false
    }

    /// Whether `discard_pages` can give memory back (free page reporting's
    /// `Reporter::Backend` needs it).
    fn can_discard(&self) -> bool {
        false
    }

    /// Gives the memory of the `nr` free frames from `pfn` back to whatever stands
    /// behind them (free page reporting); their contents read as zeroes when they
    /// are next used. The frames are free and reserved for the call: no one reads
    /// or writes them meanwhile. `false` if nothing was given back.
    fn discard_pages(&self, _pfn: Pfn, _nr: u64) -> bool {
        false
    }
}

/// Frames with nothing behind them: the allocator only hands out numbers.
#[derive(Clone, Copy, Debug, Default)]
pub struct AbstractFrames;

// SAFETY: no frame has an address, so there is nothing to promise.
#[allow(unsafe_code)]
unsafe impl Backend for AbstractFrames {
    #[inline]
    fn page_address(&self, _pfn: Pfn) -> Option<NonNull<u8>> {
        None
    }

    #[inline]
    fn zero_pages(&self, _pfn: Pfn, _nr: u64) {}
}
