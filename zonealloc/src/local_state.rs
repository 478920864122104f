//! What the allocator keeps of each `LocalCache` (see `local`): the cache's
//! blocks and tuning behind its lock, and the page count anyone may read.
//!
//! Below the allocator so that the allocator can own its registry of caches
//! without reaching up; `local` (above) does the work on them. `Held` is behind
//! the cache's `TryLock`, which its owner takes on every call and the allocator
//! to empty the cache; `CacheShared::pages` is written by that lock's holder and
//! read by anyone.

use alloc::vec::Vec;

use crate::sync::TryLock;
use crate::types::{Pfn, PAGE_ALLOC_COSTLY_ORDER};

/// Orders a cache holds: `0..=PAGE_ALLOC_COSTLY_ORDER`.
pub(crate) const LOCAL_ORDERS: usize = PAGE_ALLOC_COSTLY_ORDER as usize + 1;

/// What the allocator can reach of a cache: its blocks behind their lock, and how
/// many pages they are (written by the lock's holder, read by anyone).
pub(crate) struct CacheShared {
    pub(crate) held: TryLock<Held>,
    pub(crate) pages: crate::counter::Counter,
    /// The zone (its index) and the CPU whose lists the cache refills from: its
    /// pages count with that CPU's per-CPU pages.
    pub(crate) zone: usize,
    pub(crate) cpu: usize,
}

/// A cache's blocks and tuning, behind its lock.
pub(crate) struct Held {
    /// Index of the cache's zone in the allocator.
    pub(crate) zone: usize,
    pub(crate) stacks: [Vec<Pfn>; LOCAL_ORDERS],
    /// Pages on `stacks`.
    pub(crate) pages: u64,
    /// A call since the last `pcp_decay` (see `ZoneAllocator::decay_caches`).
    pub(crate) used: bool,
    /// Per order: batches held before a free flushes (`MIN_BATCHES` to
    /// `LOCAL_CACHE_MAX_BATCHES`), and flushes since the last refill.
    pub(crate) limit: [u8; LOCAL_ORDERS],
    pub(crate) flush_run: [u8; LOCAL_ORDERS],
    /// Per order: a refill takes `batch << alloc_factor` blocks. Each refill
    /// raises it by one (up to `LOCAL_CACHE_MAX_BATCHES` batches a refill), a
    /// flush sets it back to 0: Linux's `pcp->alloc_factor`, which grows the
    /// same way over a run of refills (Linux also halves it on every free; here
    /// only a flush resets it, so the free path writes nothing more).
    pub(crate) alloc_factor: [u8; LOCAL_ORDERS],
    /// Per order: the stack length at which a free flushes, `limit` batches
    /// (kept up to date by `set_flush_at`, so a free compares one number).
    pub(crate) flush_at: [usize; LOCAL_ORDERS],
}

impl CacheShared {
    /// Publishes the pages the holder's `Held` holds.
    #[inline(always)]
    pub(crate) fn publish(&self, h: &Held) {
        self.pages.set(h.pages);
    }
}
