//! Contiguous memory areas: Linux's CMA (`mm/cma.c`, and `MIGRATE_CMA` in the
//! buddy allocator).
//!
//! A device that needs large physically contiguous buffers now and then (a
//! camera, a video decoder, a device without an IOMMU; here also a hypervisor
//! handing a guest a contiguous run) cannot count on the buddy lists having one
//! after hours of fragmentation. Reserving the memory outright wastes it while
//! the device is idle. CMA does neither: an area, declared in the configuration
//! (`Config::cma`, `Config::with_cma`), is whole pageblocks of type `Cma` whose
//! free memory movable allocations may borrow. `cma_alloc` gets a run of the area
//! back by migrating the borrowers out through their owner's `Migrate` callback.
//!
//! ```
//! use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator};
//!
//! // 64 MiB with a 16 MiB area from frame 8192.
//! let za = ZoneAllocator::new(Config::with_bytes(64 << 20).with_cma("dma", Pfn(8192), 4096)).unwrap();
//! // 1 MiB, aligned to 1 MiB, from the area named "dma" (area 0).
//! let dma = za.cma_area("dma").unwrap();
//! let run = za.cma_alloc(dma, 256, Order(8)).unwrap();
//! assert!(run.0 >= 8192 && run.0 + 256 <= 12288 && run.0 % 256 == 0);
//! // The pages answer to `cma_release` alone.
//! assert!(za.free_pages(run, Order(0)).is_err());
//! za.cma_release(dma, run, 256).unwrap();
//! ```
//!
//! # Areas by name
//! The calls take an area's index: its place in `Config::cma`, in the order
//! `with_cma` added them. `cma_area(name)` finds an area's index by its name
//! (names are unique: `Config::validate` refuses two areas of one name), once,
//! at set-up or on each call (a comparison per area; no heap):
//! `za.cma_alloc(za.cma_area("dma")?, count, align)?` in a function that returns
//! `CmaError`.
//!
//! # Who may borrow (as Linux 6.x)
//! * Only movable requests (`Gfp::MOVABLE`, Linux's `ALLOC_CMA`) take pages of
//!   `Cma` pageblocks. Every other request's watermark check leaves the free CMA
//!   pages out (`nr_free_cma`), so an area never props up an unmovable request.
//! * A movable request takes CMA pages first when more than half of the zone's
//!   free pages are CMA pages (`__rmqueue()`'s balance), and otherwise after its
//!   own type's lists are empty and before it claims or steals from other types.
//! * `Cma` pageblocks never change type: no fallback claims or steals from them,
//!   and no highatomic reserve is made of them. A free block does not merge across
//!   the area's edge (`migratetype_is_mergeable()`).
//! * Freed CMA pages travel on the per-CPU movable lists, and go back to the CMA
//!   lists when the lists are flushed (the flush re-reads the pageblock's type).
//!   The per-CPU stacks (`rseq`) pass them by: a free of a CMA page takes the
//!   per-CPU lists' path.
//! * Compaction takes migration targets from `Cma` pageblocks as from movable
//!   ones (`is_migrate_movable()`), and counts a free CMA block as success for a
//!   movable request.
//!
//! # `cma_alloc` (Linux's `__cma_alloc`)
//! Each area keeps one bit per frame: set while `cma_alloc` holds or tries the
//! frame. A call reserves the first free run of `count` bits at the alignment,
//! then, under the area's lock (Linux's `cma_mutex`, one per area here):
//!
//! 1. looks at the run without a lock: a hole, a bad frame or an allocated block
//!    that cannot move (not movable, or another owner's) fails the run at once;
//!    movable blocks and no migrator registered fail it too;
//! 2. isolates the run's pageblocks, drains the per-CPU lists and stacks and the
//!    `LocalCache`s;
//! 3. moves every allocated block that overlaps the run out through the
//!    migrator, to blocks outside the run (any movable memory, CMA included);
//! 4. takes the run once every frame is free (retried a few times, as frees may
//!    reach a per-CPU list meanwhile) and gives back what of the covering free
//!    blocks lies outside it.
//!
//! A run that fails with a busy frame, an isolated pageblock, a refusal or no
//! migrator is given back and the next aligned run is tried, as Linux retries on
//! `-EBUSY`; a panicking owner or no memory to migrate to ends the call. Blocks
//! moved before a failure stay moved (a frame is still exactly one of free or
//! owned). The pages handed out are order-0 pages with one reference each,
//! flagged as the area's: `free_pages`, `put_page`, `free_contig_range` and the
//! caches refuse them (`Busy`), migration passes them by, and only
//! `cma_release` frees them.
//!
//! # Reentrancy
//! A migration callback that calls `cma_alloc` on the area whose call it serves
//! would wait for its own thread: a call from inside a callback that finds the
//! area's lock taken is answered `CmaError::Reentered` instead of waiting (as
//! compaction's `Reentered`). Any other call from a callback, `cma_release`
//! included, runs as from another thread.
//!
//! # Where it differs from Linux
//! * Areas are declared in the configuration, as `cma=` does at boot; there is
//!   no reservation from memblock, so an area is simply part of its zone.
//! * One bit per frame (Linux's `order_per_bit` 0).
//! * Offlining refuses CMA pageblocks (`OfflineError::NotMovable`), and
//!   `alloc_contig_range` refuses them (`ContigError::Busy`), as Linux's
//!   `has_unmovable_pages()` does for a request that is not the area's.
//! * Linux lets a movable request that will be pinned for long skip CMA
//!   (`memalloc_pin`); there is no pinning here.

use alloc::string::String;

use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::cma_state::CmaArea;
use crate::error::FreeError;
use crate::frame::FLAG_CMA;
use crate::hook::InCallback;
use crate::migrate::{Blocker, MoveOutError};
use crate::migrator::Migrate;
use crate::types::{Order, Pfn};
use crate::zone::Zone;

/// Why `cma_alloc` or `cma_release` was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmaError {
    /// No area has this index.
    NoArea(usize),
    /// `cma_area`: no area has this name.
    NoAreaNamed,
    /// `count` is zero or larger than the area, the alignment is 64 or more, or
    /// (`cma_release`) the range is not inside the area.
    InvalidRequest,
    /// Called from inside a migration callback while a `cma_alloc` of the same
    /// area is under way: waiting could be waiting for the callback's own thread,
    /// and a callback never waits. Nothing changed.
    Reentered,
    /// No run of `count` frames at the alignment is left that `cma_alloc` does
    /// not hold already. Nothing changed.
    NoSpace,
    /// Every run tried held a frame that could not be had: a hole, a bad frame, a
    /// block that cannot move, or one that stayed in use.
    Busy(Pfn),
    /// The runs tried held movable blocks and no migrator is registered.
    NoMigrator,
    /// The owner refused to move this block, in the last run tried.
    OwnerRefused(Pfn),
    /// The owner's callback panicked moving this block (caught, with `std`); the
    /// call ended there.
    OwnerPanicked(Pfn),
    /// No memory outside the run to move this block to; the call ended there.
    NoMemory(Pfn),
    /// `cma_release` of a frame `cma_alloc` did not hand out. Nothing changed.
    NotAllocated(Pfn),
    /// `cma_release` of a range `cma_alloc` handed out, one of whose pages is no
    /// longer as it was handed out (the free's error). Nothing changed.
    Free(FreeError),
}

impl core::fmt::Display for CmaError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CmaError::NoArea(a) => write!(f, "no CMA area {a}"),
            CmaError::NoAreaNamed => f.write_str("no CMA area of that name"),
            CmaError::InvalidRequest => f.write_str("invalid CMA request"),
            CmaError::Reentered => {
                f.write_str("called from inside a migration callback of the area")
            }
            CmaError::NoSpace => f.write_str("no free run left in the area"),
            CmaError::Busy(p) => write!(f, "frame {p} could not be had"),
            CmaError::NoMigrator => f.write_str("movable blocks and no migrator"),
            CmaError::OwnerRefused(p) => write!(f, "the owner refused to move {p}"),
            CmaError::OwnerPanicked(p) => write!(f, "the owner panicked moving {p}"),
            CmaError::NoMemory(p) => write!(f, "no memory to move {p} to"),
            CmaError::NotAllocated(p) => write!(f, "frame {p} was not handed out by cma_alloc"),
            CmaError::Free(e) => write!(f, "{e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for CmaError {}

impl From<MoveOutError> for CmaError {
    fn from(e: MoveOutError) -> CmaError {
        match e {
            MoveOutError::NotMovable(p) => CmaError::Busy(p),
            MoveOutError::NoMigrator => CmaError::NoMigrator,
            MoveOutError::OwnerRefused(p) => CmaError::OwnerRefused(p),
            MoveOutError::OwnerPanicked(p) => CmaError::OwnerPanicked(p),
            MoveOutError::NoMemory(p) => CmaError::NoMemory(p),
        }
    }
}

/// One area's figures (Linux's `/sys/kernel/mm/cma/<name>/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmaAreaInfo {
    /// The area's name.
    pub name: String,
    /// First frame.
    pub base: Pfn,
    /// Frames.
    pub count: u64,
    /// Frames `cma_alloc` has handed out and `cma_release` not taken back.
    pub allocated: u64,
    /// `alloc_pages_success`: pages handed out.
    pub alloc_pages_success: u64,
    /// `alloc_pages_fail`: pages asked for by calls that failed.
    pub alloc_pages_fail: u64,
    /// `release_pages_success`: pages taken back.
    pub release_pages_success: u64,
}

/// Passes of drain, migrate and take over one run before `cma_alloc` gives the
/// run up as busy.
const CMA_TRIES: u32 = 8;

/// Whether bit `i` of `bits` is set.
#[inline]
fn bit(bits: &[u64], i: u64) -> bool {
    bits[(i / 64) as usize] & (1 << (i % 64)) != 0
}

/// Sets (or clears) bits `[from, from + n)`.
fn set_bits(bits: &mut [u64], from: u64, n: u64, on: bool) {
    for i in from..from + n {
        let w = &mut bits[(i / 64) as usize];
        if on {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }
}

impl CmaArea {
    /// `bitmap_find_next_zero_area_off()` then `bitmap_set()`: reserves the
    /// first run of `count` clear bits at or after `from` whose frame is a
    /// multiple of `2^align`. Returns its first bit.
    fn reserve(&self, from: u64, count: u64, align: Order) -> Option<u64> {
        let mut b = self.bitmap.lock();
        let bits = &mut b.bits;
        let mask = (1u64 << align.0) - 1;
        // The first bit at or after `i` whose frame is aligned.
        let aligned = |i: u64| ((self.base.0 + i + mask) & !mask) - self.base.0;
        let mut i = aligned(from);
        while i.checked_add(count)? <= self.count {
            match (i..i + count).rev().find(|&j| bit(bits, j)) {
                None => {
                    set_bits(bits, i, count, true);
                    return Some(i);
                }
                Some(j) => i = aligned(j + 1),
            }
        }
        None
    }

    /// Clears bits `[from, from + count)`; `released`: frames handed out
    /// come back (else a failed try gives its run up).
    fn unreserve(&self, from: u64, count: u64, released: bool) {
        let mut b = self.bitmap.lock();
        set_bits(&mut b.bits, from, count, false);
        if released {
            b.allocated -= count;
        }
    }

    /// The first frame of `[from, from + count)` whose bit is clear.
    fn first_unreserved(&self, from: u64, count: u64) -> Option<u64> {
        let b = self.bitmap.lock();
        (from..from + count).find(|&i| !bit(&b.bits, i))
    }
}

impl<B: Backend> ZoneAllocator<B> {
    /// The number of CMA areas configured.
    pub fn nr_cma_areas(&self) -> usize {
        self.cma.areas.len()
    }

    /// The index of the area named `name` (its `Config::cma` entry, as
    /// `with_cma` names it), for `cma_alloc`, `cma_release` and
    /// `cma_area_info`. Names are unique (`Config::validate`), so an index found
    /// once stays right for the allocator's life. Compares `name` with each
    /// area's; calls no heap.
    ///
    /// # Errors
    /// `NoAreaNamed` if no area has that name (names are compared exactly).
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{CmaError, Config, Order, Pfn, ZoneAllocator};
    ///
    /// let config = Config::with_bytes(64 << 20)
    ///     .with_cma("dma", Pfn(8192), 2048)
    ///     .with_cma("video", Pfn(10240), 2048);
    /// let za = ZoneAllocator::new(config).unwrap();
    /// assert_eq!(za.cma_area("video"), Ok(1));
    /// assert_eq!(za.cma_area("Video"), Err(CmaError::NoAreaNamed));
    ///
    /// // By name, with `?` in a function that returns `CmaError`.
    /// fn frame_buffer(za: &ZoneAllocator) -> Result<Pfn, CmaError> {
    ///     za.cma_alloc(za.cma_area("video")?, 512, Order(9))
    /// }
    /// let fb = frame_buffer(&za).unwrap();
    /// assert!(fb.0 >= 10240);
    /// za.cma_release(za.cma_area("video").unwrap(), fb, 512).unwrap();
    /// ```
    pub fn cma_area(&self, name: &str) -> Result<usize, CmaError> {
        self.cma
            .areas
            .iter()
            .position(|a| a.name == name)
            .ok_or(CmaError::NoAreaNamed)
    }

    /// Area `area`'s figures, if it exists.
    pub fn cma_area_info(&self, area: usize) -> Option<CmaAreaInfo> {
        let a = self.cma.areas.get(area)?;
        Some(CmaAreaInfo {
            name: a.name.clone(),
            base: a.base,
            count: a.count,
            allocated: a.bitmap.lock().allocated,
            alloc_pages_success: a.alloc_pages_success.get(),
            alloc_pages_fail: a.alloc_pages_fail.get(),
            release_pages_success: a.release_pages_success.get(),
        })
    }

    /// `cma_alloc()`: `count` contiguous frames of area `area` (an index; by
    /// name: `cma_area`), the first a multiple of `2^align`, emptied of the
    /// movable blocks borrowing them. See the [module documentation](crate::cma).
    ///
    /// # Errors
    /// `NoArea`, `InvalidRequest`, `Reentered`, `NoSpace` with nothing changed;
    /// `Busy`, `NoMigrator`, `OwnerRefused` when no run could be had;
    /// `OwnerPanicked`, `NoMemory` where the call ended. Blocks moved before a
    /// failure stay moved.
    pub fn cma_alloc(&self, area: usize, count: u64, align: Order) -> Result<Pfn, CmaError> {
        let a = self.cma.areas.get(area).ok_or(CmaError::NoArea(area))?;
        if count == 0 || count > a.count || align.0 >= 64 {
            return Err(CmaError::InvalidRequest);
        }
        let _serial = match a.contig.try_lock() {
            Some(g) => g,
            None if InCallback::may_wait(self.compact_key(), &self.compact.callbacks) => {
                a.contig.lock()
            }
            None => return Err(CmaError::Reentered),
        };
        let z = &self.zones[a.zone];
        let m = self.migrator();
        let mut from = 0;
        let mut last = None;
        let outcome = loop {
            let Some(i) = a.reserve(from, count, align) else {
                break Err(last.unwrap_or(CmaError::NoSpace));
            };
            let start = a.base.add(i);
            match self.cma_take_run(a, z, start, start.add(count), m.as_deref()) {
                Ok(()) => break Ok(start),
                Err(e) => {
                    a.unreserve(i, count, false);
                    if matches!(e, CmaError::OwnerPanicked(_) | CmaError::NoMemory(_)) {
                        break Err(e);
                    }
                    last = Some(e);
                    // The next aligned run after this one's start, as Linux.
                    from = i + 1;
                }
            }
        };
        match outcome {
            Ok(_) => {
                a.alloc_pages_success.inc(count);
                self.cma.alloc_success.inc(1);
            }
            Err(_) => {
                a.alloc_pages_fail.inc(count);
                self.cma.alloc_fail.inc(1);
            }
        }
        outcome
    }

    /// One try of `cma_alloc` at the reserved run `[start, end)`: the steps of
    /// the module documentation. On error the run's pageblocks are as they were.
    fn cma_take_run(
        &self,
        a: &CmaArea,
        z: &Zone,
        start: Pfn,
        end: Pfn,
        m: Option<&dyn Migrate>,
    ) -> Result<(), CmaError> {
        // 1. Lock-free look: what can never be had fails the run at once.
        let movable = Self::movable_precheck(z, start.0, end.0).map_err(|b| match b {
            Blocker::Hole(p) | Blocker::Pinned(p) => CmaError::Busy(p),
        })?;
        if movable && m.is_none() {
            return Err(CmaError::NoMigrator);
        }
        // 2. Isolate the run's pageblocks.
        let pb = z.pageblock_order.nr_pages();
        let blocks = (start.0 & !(pb - 1)..end.0).step_by(pb as usize).map(Pfn);
        {
            let mut zl = z.lock();
            for (k, b) in blocks.clone().enumerate() {
                if !zl.isolate_pageblock(b) {
                    for undo in blocks.clone().take(k) {
                        zl.undo_isolate_pageblock(undo);
                    }
                    return Err(CmaError::Busy(b.max(start)));
                }
            }
        }
        // 3-4. Drain, move out, take; a few times.
        let mut outcome = Err(CmaError::Busy(start));
        for _ in 0..CMA_TRIES {
            self.drain_caches();
            for cpu in 0..z.pcp.len() {
                z.pcp_lock(cpu).drain(self.config.pcp.prefetch_buddy);
            }
            if let Err(e) = self.migrate_range_out(z, start.0, end.0, m) {
                outcome = Err(e.into());
                break;
            }
            match self.take_isolated_range(z, start, end) {
                Ok(()) => {
                    // Counted before the pages carry the area's flag, so that a
                    // release (which needs the flag) never finds the count short.
                    a.bitmap.lock().allocated += end.0 - start.0;
                    self.commit_contig(z, start, end, FLAG_CMA);
                    return Ok(());
                }
                Err(p) => outcome = Err(CmaError::Busy(p)),
            }
        }
        let mut zl = z.lock();
        for b in blocks {
            zl.undo_isolate_pageblock(b);
        }
        outcome
    }

    /// `cma_release()`: gives back `[pfn, pfn + count)`, which `cma_alloc` of
    /// area `area` (an index; by name: `cma_area`) handed out (whole or in
    /// part), to the area's free memory.
    ///
    /// # Errors
    /// `NoArea`; `InvalidRequest` for an empty range or one not inside the area;
    /// `NotAllocated` for a frame `cma_alloc` does not hold; `Free` for a page
    /// that is not as `cma_alloc` handed it out (already given back by a racing
    /// release, say). Nothing changes then.
    pub fn cma_release(&self, area: usize, pfn: Pfn, count: u64) -> Result<(), CmaError> {
        let a = self.cma.areas.get(area).ok_or(CmaError::NoArea(area))?;
        let inside = pfn >= a.base
            && pfn
                .0
                .checked_add(count)
                .is_some_and(|e| e <= a.base.0 + a.count);
        if count == 0 || !inside {
            return Err(CmaError::InvalidRequest);
        }
        let i = pfn.0 - a.base.0;
        if let Some(j) = a.first_unreserved(i, count) {
            return Err(CmaError::NotAllocated(a.base.add(j)));
        }
        self.free_contig_range_by(pfn, count, FLAG_CMA, None)
            .map_err(CmaError::Free)?;
        a.unreserve(i, count, true);
        a.release_pages_success.inc(count);
        Ok(())
    }
}
