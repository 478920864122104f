//! Memory offlining and onlining: taking a range of frames out of its zone
//! (what virtio-mem and memory hot-unplug ask of Linux's `offline_pages()`), and
//! giving it back (`online_pages()`).
//!
//! ```
//! use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator};
//!
//! let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
//! let before = za.managed_pages();
//! // Four pageblocks (8 MiB) from frame 4096 leave the zone...
//! za.offline_pages(Pfn(4096), 2048).unwrap();
//! assert_eq!(za.managed_pages(), before - 2048);
//! assert!(za.free_pages(Pfn(4096), Order(0)).is_err());
//! // ...and come back.
//! za.online_pages(Pfn(4096), 2048).unwrap();
//! assert_eq!(za.managed_pages(), before);
//! ```
//!
//! # Offlining
//!
//! The range must be whole pageblocks of one zone, with no hole and nothing
//! offline in it. Before anything changes, every allocated block in it must be
//! movable (an allocation of the movable type with no owner mark: no guard, no
//! vmalloc area, no page_frag cache) and a migrator must be registered when there
//! is one; otherwise the call is refused and nothing changes
//! (`OfflineError::NotMovable`, `NoMigrator`), as `has_unmovable_pages()` refuses
//! in Linux. Then, as `offline_pages()` does:
//!
//! 1. the range's pageblocks are isolated: no allocation takes memory from them;
//! 2. the per-CPU lists and stacks and the `LocalCache`s are drained;
//! 3. every allocated block in the range is moved out through the owner's
//!    `Migrate` callback, to a block allocated outside the range;
//! 4. once every frame is free (retried a few times, as frees of the range's
//!    frames may reach a per-CPU list meanwhile), the free blocks leave the lists
//!    and the frames become holes: the zone's present and managed pages fall by
//!    the range (zoneinfo's `present` and `managed` lines, `managed_pages()`).
//!
//! An owner that refuses or panics on a block, or a target that cannot be had,
//! ends the call with the range given back to the zone (`OwnerRefused`,
//! `OwnerPanicked`, `NoMemory`): blocks already moved stay moved, as in Linux,
//! and every frame is still exactly one of free or owned.
//!
//! # Onlining
//!
//! `online_pages()` gives an offline range back to the zone that spans it,
//! free: its pageblocks take their type again and its frames merge into the free
//! lists. Linux may online a range into `ZONE_MOVABLE` or the normal zone,
//! growing the zone's span to take it; here spans are fixed when the allocator is
//! built, so the range returns to the zone it was taken from (a hot-pluggable range
//! is configured inside a `Movable` zone to be onlined as movable memory).
//!
//! # Memory that arrives
//!
//! Two more ways for memory to join a zone after construction, as a kernel's
//! does while it boots and runs:
//! * **`free_reserved_area`** gives the allocator frames that were present but
//!   reserved at boot (`Config::reserved`: the kernel's init sections, boot
//!   information, firmware tables; Linux's `memblock_free_all()` and
//!   `free_reserved_area()`). They count in the zone's present pages from the
//!   start and in its managed pages from then on.
//! * **`add_memory`** adds memory where the zone's configuration had a hole (a
//!   hot-plugged DIMM, virtio-mem, a balloon deflating, a hypervisor adding
//!   guest memory; Linux's `add_memory()` then `online_pages()`). A kernel
//!   declares the span memory may arrive in as part of a zone, as firmware
//!   declares hot-pluggable ranges ahead; with sparse frame tables (see
//!   `memmap`) the holes cost nothing until memory arrives and its sections are
//!   backed.
//!
//! ```
//! use zonealloc::{Config, NodeConfig, Pfn, ZoneAllocator, ZoneConfig, ZoneType};
//!
//! // 256 MiB of span; 128 MiB present, 64 KiB of it reserved at boot.
//! let zone = ZoneConfig::new(ZoneType::Normal, Pfn(0), 65536).with_hole(Pfn(32768), 32768);
//! let config = Config {
//!     nodes: vec![NodeConfig { zones: vec![zone] }],
//!     reserved: vec![(Pfn(16), 16)],
//!     ..Config::default()
//! };
//! let za = ZoneAllocator::new(config).unwrap();
//! assert_eq!(za.managed_pages(), 32768 - 16);
//! za.free_reserved_area(Pfn(16), 16).unwrap();
//! za.add_memory(Pfn(32768), 32768, None).unwrap();
//! assert_eq!(za.managed_pages(), 65536);
//! ```
//!
//! All of these recompute `min_free_kbytes` (unless it was given, as Linux keeps
//! the administrator's) and the zones' watermarks, lowmem reserves and per-CPU
//! list sizes from their managed pages now.

use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::frame::Word;
use crate::migrate::{Blocker, MoveOutError};
use crate::types::{Migratetype, Pfn};
use crate::zone::{chunks, Zone, ZoneLocked};

/// Why `offline_pages` or `online_pages` was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OfflineError {
    /// Empty, not whole pageblocks, or outside every zone.
    InvalidRange,
    /// The range runs past its zone's end (the first frame outside it).
    CrossesZone(Pfn),
    /// The range has a hole (offline memory included, for `offline_pages`).
    Hole(Pfn),
    /// `online_pages` of a range that is not wholly offline.
    NotOffline(Pfn),
    /// An allocated block that cannot move: not movable, or owned by a guard, a
    /// vmalloc area or a page_frag cache, or bad; or the first pageblock of a CMA
    /// area in the range (see `cma`). Nothing changed.
    NotMovable(Pfn),
    /// The range holds movable blocks and no migrator is registered. Nothing
    /// changed.
    NoMigrator,
    /// A pageblock of the range is isolated already (`alloc_contig_range` or
    /// another offlining under way). Nothing changed.
    Isolated(Pfn),
    /// The owner refused to move this block; the range is back in the zone.
    OwnerRefused(Pfn),
    /// The owner's callback panicked moving this block (caught, with `std`); the
    /// range is back in the zone.
    OwnerPanicked(Pfn),
    /// No block outside the range to move this one to; the range is back.
    NoMemory(Pfn),
    /// A frame of the range was still in use after the retries (another thread
    /// kept allocating or freeing into it); the range is back.
    Busy(Pfn),
    /// `free_reserved_area` of a frame that is not reserved. Nothing changed.
    NotReserved(Pfn),
    /// `add_memory` of a frame that is not a hole (present, reserved or offline).
    /// Nothing changed.
    NotHole(Pfn),
    /// `add_memory` found no memory for the range's frame metadata: the tables
    /// came from a `MemMap` and none was given, or it could not back them.
    /// Nothing changed.
    Metadata,
}

impl core::fmt::Display for OfflineError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            OfflineError::InvalidRange => f.write_str("not whole pageblocks of a zone"),
            OfflineError::CrossesZone(p) => write!(f, "range crosses its zone's end at {p}"),
            OfflineError::Hole(p) => write!(f, "hole at {p}"),
            OfflineError::NotOffline(p) => write!(f, "frame {p} is not offline"),
            OfflineError::NotMovable(p) => write!(f, "block at {p} cannot move"),
            OfflineError::NoMigrator => f.write_str("movable blocks and no migrator"),
            OfflineError::Isolated(p) => write!(f, "pageblock at {p} is isolated already"),
            OfflineError::OwnerRefused(p) => write!(f, "the owner refused to move {p}"),
            OfflineError::OwnerPanicked(p) => write!(f, "the owner panicked moving {p}"),
            OfflineError::NoMemory(p) => write!(f, "no memory to move {p} to"),
            OfflineError::Busy(p) => write!(f, "frame {p} stayed in use"),
            OfflineError::NotReserved(p) => write!(f, "frame {p} is not reserved"),
            OfflineError::NotHole(p) => write!(f, "frame {p} is not a hole"),
            OfflineError::Metadata => f.write_str("no memory for the frame metadata"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for OfflineError {}

/// Passes over the range looking for allocated blocks to move, and drains, before
/// `offline_pages` gives up on a frame that stays in use.
const OFFLINE_TRIES: u32 = 8;

impl<B: Backend> ZoneAllocator<B> {
    /// The zone holding all of `[start, start + nr)`, whole pageblocks.
    fn hotplug_zone(&self, start: Pfn, nr: u64) -> Result<&Zone, OfflineError> {
        let z = self.zone_of(start).ok_or(OfflineError::InvalidRange)?;
        let pb = z.pageblock_order.nr_pages();
        if nr == 0 || !start.0.is_multiple_of(pb) || !nr.is_multiple_of(pb) {
            return Err(OfflineError::InvalidRange);
        }
        let end = start.0.checked_add(nr).ok_or(OfflineError::InvalidRange)?;
        if end > z.end_pfn() {
            return Err(OfflineError::CrossesZone(Pfn(z.end_pfn())));
        }
        Ok(z)
    }

    /// `offline_pages()`: takes `[start, start + nr)` (whole pageblocks of one
    /// zone) out of the allocator, moving its movable blocks out first. See the
    /// [module documentation](crate::hotplug).
    ///
    /// # Errors
    /// `InvalidRange`, `CrossesZone`, `Hole`, `NotMovable`, `NoMigrator`,
    /// `Isolated` with nothing changed; `OwnerRefused`, `OwnerPanicked`,
    /// `NoMemory`, `Busy` with the range back in the zone and the blocks moved so
    /// far moved.
    pub fn offline_pages(&self, start: Pfn, nr: u64) -> Result<(), OfflineError> {
        let z = self.hotplug_zone(start, nr)?;
        let end = start.0 + nr;
        // Lock-free pre-check: holes, and blocks that could never move.
        let movable = Self::movable_precheck(z, start.0, end).map_err(|b| match b {
            Blocker::Hole(p) => OfflineError::Hole(p),
            Blocker::Pinned(p) => OfflineError::NotMovable(p),
        })?;
        let pb = z.pageblock_order.nr_pages();
        // A CMA area's memory stays where its area is: Linux's
        // `has_unmovable_pages()` refuses its pageblocks to offlining.
        if let Some(b) = (start.0..end)
            .step_by(pb as usize)
            .find(|&b| z.blocks.base_migratetype(Pfn(b)) == Migratetype::Cma)
        {
            return Err(OfflineError::NotMovable(Pfn(b)));
        }
        let m = self.migrator();
        if movable && m.is_none() {
            return Err(OfflineError::NoMigrator);
        }
        let blocks = (start.0..end).step_by(pb as usize).map(Pfn);
        {
            let mut zl = z.lock();
            for (k, b) in blocks.clone().enumerate() {
                if !zl.isolate_pageblock(b) {
                    for undo in blocks.clone().take(k) {
                        zl.undo_isolate_pageblock(undo);
                    }
                    return Err(OfflineError::Isolated(b));
                }
            }
        }
        let undo = |e: OfflineError| {
            let mut zl = z.lock();
            for b in blocks.clone() {
                zl.undo_isolate_pageblock(b);
            }
            Err(e)
        };
        let mut outcome = Err(OfflineError::Busy(start));
        for _ in 0..OFFLINE_TRIES {
            self.drain_caches();
            for cpu in 0..z.pcp.len() {
                z.pcp_lock(cpu).drain(self.config.pcp.prefetch_buddy);
            }
            if let Err(e) = self.migrate_range_out(z, start.0, end, m.as_deref()) {
                outcome = Err(match e {
                    MoveOutError::NotMovable(p) => OfflineError::NotMovable(p),
                    MoveOutError::NoMigrator => OfflineError::NoMigrator,
                    MoveOutError::OwnerRefused(p) => OfflineError::OwnerRefused(p),
                    MoveOutError::OwnerPanicked(p) => OfflineError::OwnerPanicked(p),
                    MoveOutError::NoMemory(p) => OfflineError::NoMemory(p),
                });
                break;
            }
            match self.take_range_offline(z, start.0, end) {
                Ok(()) => {
                    outcome = Ok(());
                    break;
                }
                Err(p) => outcome = Err(OfflineError::Busy(p)),
            }
        }
        match outcome {
            Ok(()) => {
                self.resize_watermarks();
                Ok(())
            }
            Err(e) => undo(e),
        }
    }

    /// Under the zone lock: if every frame of `[start, end)` is free, takes the
    /// free blocks off the isolate lists, makes the frames holes and marks the
    /// pageblocks offline; else returns the first frame in use.
    fn take_range_offline(&self, z: &Zone, start: u64, end: u64) -> Result<(), Pfn> {
        let mut zl = z.lock();
        // The free blocks that cover the range, walked twice under one hold: to
        // check that they do, then to take them off (no list of them kept).
        let covering = |zl: &ZoneLocked<'_>, p: u64| match zl.free_block_containing(Pfn(p)) {
            Some((head, order)) if head.0 >= start && head.0 + order.nr_pages() <= end => {
                Ok((head, order))
            }
            _ => Err(Pfn(p)),
        };
        let mut p = start;
        while p < end {
            let (head, order) = covering(&zl, p)?;
            p = head.0 + order.nr_pages();
        }
        let mut p = start;
        while p < end {
            let (head, order) = covering(&zl, p)?;
            zl.del_from_free_list(head, order, Migratetype::Isolate);
            p = head.0 + order.nr_pages();
        }
        let t = &z.frames;
        for q in start..end {
            t.set_word(z.idx(Pfn(q)), Word::HOLE);
        }
        let pb = z.pageblock_order.nr_pages();
        for b in (start..end).step_by(pb as usize) {
            zl.set_offline(Pfn(b), true);
        }
        z.counters.nr_offline.add((end - start) as i64);
        Ok(())
    }

    /// `online_pages()`: gives the offline range `[start, start + nr)` back to its
    /// zone, free. See the [module documentation](crate::hotplug).
    ///
    /// # Errors
    /// `InvalidRange`, `CrossesZone`, `NotOffline` (a pageblock of the range is
    /// not offline); nothing changes then.
    pub fn online_pages(&self, start: Pfn, nr: u64) -> Result<(), OfflineError> {
        let z = self.hotplug_zone(start, nr)?;
        let end = start.0 + nr;
        let pb = z.pageblock_order.nr_pages();
        let mut zl = z.lock();
        let blocks = (start.0..end).step_by(pb as usize).map(Pfn);
        if let Some(b) = blocks.clone().find(|&b| !zl.is_offline(b)) {
            return Err(OfflineError::NotOffline(b));
        }
        for b in blocks {
            zl.set_offline(b, false);
        }
        z.counters.nr_offline.add(-(nr as i64));
        let t = &z.frames;
        for q in start.0..end {
            t.set_word(z.idx(Pfn(q)), Word::TAIL);
        }
        for b in (start.0..end).step_by(pb as usize) {
            zl.undo_isolate_pageblock(Pfn(b));
        }
        for (p, o) in chunks(start, nr, z.max_order) {
            zl.free_block_locked(p, o, true);
        }
        drop(zl);
        self.resize_watermarks();
        Ok(())
    }

    /// The zone holding all of `[start, start + nr)` (any frames, not only whole
    /// pageblocks).
    fn arrival_zone(&self, start: Pfn, nr: u64) -> Result<&Zone, OfflineError> {
        let z = self.zone_of(start).ok_or(OfflineError::InvalidRange)?;
        let end = start.0.checked_add(nr).ok_or(OfflineError::InvalidRange)?;
        if nr == 0 {
            return Err(OfflineError::InvalidRange);
        }
        if end > z.end_pfn() {
            return Err(OfflineError::CrossesZone(Pfn(z.end_pfn())));
        }
        Ok(z)
    }

    /// `free_reserved_area()` (and `memblock_free_all()` for a whole range):
    /// gives frames reserved at boot (`Config::reserved`: the kernel's init
    /// sections, boot information, firmware tables it is done with) to the
    /// allocator, free. Any range of one zone whose frames are all reserved;
    /// the zone's managed pages grow by it, and the watermarks and per-CPU sizes
    /// follow (as after `online_pages`). Returns the frames released.
    ///
    /// # Errors
    /// `InvalidRange` (empty, or outside every zone), `CrossesZone`, or
    /// `NotReserved` naming the first frame that is not reserved; nothing
    /// changed then.
    pub fn free_reserved_area(&self, start: Pfn, nr: u64) -> Result<u64, OfflineError> {
        let z = self.arrival_zone(start, nr)?;
        let end = start.0 + nr;
        let mut zl = z.lock();
        let t = z.frames.view();
        if let Some(p) = (start.0..end).find(|&p| t.word(z.idx(Pfn(p))) != Word::RESERVED) {
            return Err(OfflineError::NotReserved(Pfn(p)));
        }
        for p in start.0..end {
            t.set_word(z.idx(Pfn(p)), Word::TAIL);
        }
        zl.release_frames(start.0, end);
        z.counters.nr_released.add(nr as i64);
        drop(zl);
        self.resize_watermarks();
        Ok(nr)
    }

    /// `add_memory()` and `online_pages()` in one: memory that arrives where
    /// the zone had a hole (a hot-plugged DIMM, a balloon or virtio-mem device
    /// plugging a range, guest memory a hypervisor adds). The range must lie in
    /// one zone's span and be holes of its configuration (not reserved, not
    /// offline): a kernel declares the span that memory may arrive in as the
    /// zone's, with holes there, as firmware declares hot-pluggable ranges
    /// ahead (the ACPI SRAT); with sparse metadata those holes cost nothing.
    /// The frame metadata of the range's sections is backed first, with no
    /// allocator lock held: from the allocator's own mapping, or from `memmap`
    /// where the tables came from one (`ZoneAllocator::with_memmap`). Then the
    /// frames are free, the zone's present and managed pages grow by them, and
    /// the watermarks and per-CPU sizes follow.
    ///
    /// # Errors
    /// `InvalidRange`, `CrossesZone`; `NotHole` naming the first frame that is
    /// not a hole; `Metadata` when the metadata cannot be backed (or the tables
    /// need a `MemMap` and none was given). Nothing changed then.
    pub fn add_memory(
        &self,
        start: Pfn,
        nr: u64,
        memmap: Option<&mut dyn crate::memmap::MemMap>,
    ) -> Result<(), OfflineError> {
        let z = self.arrival_zone(start, nr)?;
        let end = start.0 + nr;
        // Memory arriving, one call at a time: the holes checked here stay
        // holes until this call makes them memory (offlining and onlining
        // refuse ranges with holes, and need no part of this).
        let _hotplug = self.hotplug.lock();
        {
            let zl = z.lock();
            let t = z.frames.view();
            if let Some(p) = (start.0..end)
                .find(|&p| t.word(z.idx(Pfn(p))) != Word::HOLE || zl.is_offline(Pfn(p)))
            {
                return Err(OfflineError::NotHole(Pfn(p)));
            }
        }
        let mut src = match memmap {
            Some(m) => crate::frame::TableSource::Given(m),
            None if z.frames.needs_memmap() => return Err(OfflineError::Metadata),
            None => crate::frame::TableSource::Own,
        };
        let (first, last) = (z.idx(start) as usize, z.idx(Pfn(end - 1)) as usize + 1);
        // With no allocator lock held: a kernel's `populate` may need every CPU
        // to take an interrupt (to flush its TLB).
        if !z.frames.back(first, last, &mut src) {
            return Err(OfflineError::Metadata);
        }
        let mut zl = z.lock();
        z.frames.make_present(first, last);
        // Pageblocks that held no memory before count now.
        let pb = z.pageblock_order.nr_pages();
        let mut b = start.0 / pb * pb;
        while b < end {
            if z.blocks.set_counted_locked(Pfn(b.max(z.start_pfn))) {
                let mt = z.blocks.base_migratetype(Pfn(b.max(z.start_pfn)));
                z.counters.nr_blocks[mt.idx()].add(1);
            }
            b += pb;
        }
        zl.release_frames(start.0, end);
        z.counters.nr_added.add(nr as i64);
        drop(zl);
        self.resize_watermarks();
        Ok(())
    }
}
