//! What the allocator keeps of its contiguous memory areas (see `cma`): each
//! area's span, zone, bitmap and counters, and the `Cma` pageblocks they are
//! marked with while the allocator is built.
//!
//! Below the allocator so that the allocator can own it without reaching up;
//! `cma` (above) does the work on it, and `check` and `stats` read it. An area's
//! bitmap has its own lock; `mark_areas` takes each zone's lock in turn, before
//! the zones' frames are released onto the free lists.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use crate::config::CmaConfig;
use crate::counter::Counter;
use crate::sync::{Lock, TryLock};
use crate::types::{Migratetype, Pfn};
use crate::zone::Zone;

/// One contiguous memory area.
pub(crate) struct CmaArea {
    pub name: String,
    pub base: Pfn,
    pub count: u64,
    /// The zone holding it (index into the allocator's zones).
    pub zone: usize,
    /// Which frames `cma_alloc` holds or tries, and how many it has handed out.
    pub bitmap: Lock<CmaBits>,
    /// Serialises the isolate-migrate-take step of this area's calls.
    pub contig: TryLock<()>,
    pub alloc_pages_success: Counter,
    pub alloc_pages_fail: Counter,
    pub release_pages_success: Counter,
}

/// An area's bitmap and count, under one lock.
pub(crate) struct CmaBits {
    /// One bit per frame, set while `cma_alloc` holds or tries the frame.
    pub bits: Vec<u64>,
    /// Frames `cma_alloc` has handed out and `cma_release` not taken back.
    pub allocated: u64,
}

/// The allocator's CMA state: its areas and the vmstat events.
pub(crate) struct CmaState {
    pub areas: Box<[CmaArea]>,
    /// `cma_alloc_success`, `cma_alloc_fail`: calls.
    pub alloc_success: Counter,
    pub alloc_fail: Counter,
}

impl CmaState {
    /// The areas of `cma` (a validated configuration), each in the zone among
    /// `zones` that holds it.
    pub(crate) fn new(cma: &[CmaConfig], zones: &[Zone]) -> CmaState {
        let areas = cma
            .iter()
            .map(|c| CmaArea {
                name: c.name.clone(),
                base: c.base,
                count: c.nr_pages,
                zone: zones
                    .iter()
                    .position(|z| z.contains(c.base))
                    .expect("a validated area lies in a zone"),
                // Process context only (`cma_alloc`, `cma_release`).
                bitmap: Lock::new(
                    CmaBits {
                        bits: alloc::vec![0; c.nr_pages.div_ceil(64) as usize],
                        allocated: 0,
                    },
                    None,
                ),
                contig: TryLock::new((), None),
                alloc_pages_success: Counter::new(),
                alloc_pages_fail: Counter::new(),
                release_pages_success: Counter::new(),
            })
            .collect();
        CmaState {
            areas,
            alloc_success: Counter::new(),
            alloc_fail: Counter::new(),
        }
    }

    /// Whether any area is configured (the kernel-format outputs then print
    /// what a kernel built with CMA prints).
    pub(crate) fn enabled(&self) -> bool {
        !self.areas.is_empty()
    }
}

/// Marks the pageblocks of every area `Cma`, before the zones' frames are
/// released onto the free lists.
pub(crate) fn mark_areas(cma: &[CmaConfig], zones: &mut [Zone]) {
    for c in cma {
        let Some(z) = zones.iter_mut().find(|z| z.contains(c.base)) else {
            continue;
        };
        z.cma_pages += c.nr_pages;
        let pb = z.pageblock_order.nr_pages();
        let zl = z.lock();
        for b in (c.base.0..c.base.0 + c.nr_pages).step_by(pb as usize) {
            zl.set_pageblock_type(Pfn(b), Migratetype::Cma);
        }
    }
}
