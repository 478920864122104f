//! What the allocator keeps of each `LocalCache` (see `local`): the cache's
//! blocks and tuning behind its lock, and the page count anyone may read.
//!
//! Below the allocator so that the allocator can own its registry of caches
//! without reaching up; `local` (above) does the work on them. `Held` is behind
//! the cache's `TryLock`, which its owner takes on every call and the allocator
//! to empty the cache; `CacheShared::pages` is written by that lock's holder and
//! read by anyone.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ops::{Deref, RangeTo};

use crate::stack_limits::MAX_BATCHES;
use crate::sync::TryLock;
use crate::types::{Order, Pfn, PAGE_ALLOC_COSTLY_ORDER};

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
    /// Per order, the cached blocks, oldest first (see `BlockStack`).
    pub(crate) stacks: [BlockStack; LOCAL_ORDERS],
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

/// The room a cache's stack of `order` needs for a batch of `batch` blocks (of
/// order 0; halved per order, at least 1) in a zone spanning `spanned` frames:
/// sixteen batches (`2 * MAX_BATCHES`), or every block of the order the zone
/// could hold, whichever is less.
///
/// Sixteen batches bound the stack. A refill finds it empty and takes at most
/// `MAX_BATCHES` batches, which its last free block taken whole may overshoot
/// by one less than that (`rmqueue_bulk`'s `whole`): under sixteen. A free
/// pushes one block onto a stack below its flush limit (at most `MAX_BATCHES`
/// batches) or below what the last refill left, and one that reaches the limit
/// flushes before it returns. And no stack can hold more distinct blocks of an
/// order than the zone spans.
pub(crate) fn stack_room(batch: usize, order: Order, spanned: u64) -> usize {
    let per_batch = (batch >> order.0).max(1);
    let in_zone = usize::try_from((spanned >> order.0) + 1).unwrap_or(usize::MAX);
    per_batch
        .saturating_mul(2 * MAX_BATCHES as usize)
        .min(in_zone)
}

/// One order's cached blocks, oldest first: a stack whose room is allocated
/// when the cache is made or given a larger batch (`with_batch`), set-up calls
/// both, and never grown by a push, so the cache's allocations, frees, refills
/// and flushes make no heap call. Reads as the slice of its blocks.
pub(crate) struct BlockStack {
    blocks: Box<[Pfn]>,
    len: usize,
}

impl BlockStack {
    /// No room, no block; allocates nothing.
    pub(crate) fn new() -> BlockStack {
        BlockStack {
            blocks: Box::default(),
            len: 0,
        }
    }

    /// Makes room for at least `room` blocks, keeping those held. Set-up: it
    /// allocates when the room grows.
    pub(crate) fn make_room(&mut self, room: usize) {
        if room <= self.blocks.len() {
            return;
        }
        let mut v = Vec::with_capacity(room);
        v.extend_from_slice(&self.blocks[..self.len]);
        v.resize(room, Pfn(0));
        self.blocks = v.into_boxed_slice();
    }

    /// Adds a block on top.
    ///
    /// # Panics
    /// If the stack is full, which the cache's limits rule out (`stack_room`).
    #[inline(always)]
    pub(crate) fn push(&mut self, p: Pfn) {
        self.blocks[self.len] = p;
        self.len += 1;
    }

    /// Adds blocks on top, as `push`.
    pub(crate) fn extend(&mut self, blocks: impl IntoIterator<Item = Pfn>) {
        for p in blocks {
            self.push(p);
        }
    }

    /// Takes the top block.
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<Pfn> {
        self.len = self.len.checked_sub(1)?;
        Some(self.blocks[self.len])
    }

    /// Takes the `..n` oldest blocks off (they were handed on: see
    /// `Held::flush_order`); the rest move down.
    pub(crate) fn drain(&mut self, r: RangeTo<usize>) {
        let n = r.end.min(self.len);
        self.blocks.copy_within(n..self.len, 0);
        self.len -= n;
    }
}

impl Default for BlockStack {
    fn default() -> BlockStack {
        BlockStack::new()
    }
}

impl Deref for BlockStack {
    type Target = [Pfn];

    #[inline(always)]
    fn deref(&self) -> &[Pfn] {
        &self.blocks[..self.len]
    }
}
