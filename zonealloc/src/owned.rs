//! RAII ownership of allocated blocks for Rust callers.
//!
//! Public API here: `ZoneAllocator::alloc_block`, `LocalCache::alloc_block` and
//! `free_block`, and `PageBlock`.
//!
//! `PageBlock` owns an allocated block and frees it when it goes out of scope, beside
//! the raw pfn API for callers that manage lifetimes themselves. Because a guard hands
//! out the block's bytes as `&mut [u8]`, it must be the block's only owner: its head
//! carries `FLAG_GUARDED`, and every raw call that would free the block or change its
//! references (`free_pages`, `put_page`, `get_page`, `split_page`, the bulk and
//! contiguous frees, `page_frag_free`) is refused with `FreeError::Guarded` while
//! the guard lives. So safe code cannot free a guarded block behind its guard and have
//! it handed out again, nor build two guards over one block.

use core::fmt;

use crate::allocate::Head;
use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::error::{AllocError, FreeError};
use crate::free::{Holder, Via};
use crate::gfp::Gfp;
use crate::local::LocalCache;
use crate::types::{Order, Pfn};

/// An allocated block of `2^order` frames, owned exclusively, freed when dropped.
pub struct PageBlock<'a, B: Backend> {
    za: &'a ZoneAllocator<B>,
    pfn: Pfn,
    order: Order,
}

impl<'a, B: Backend> PageBlock<'a, B> {
    /// Wraps a block just allocated with `FLAG_GUARDED` set.
    pub(crate) fn new(za: &'a ZoneAllocator<B>, pfn: Pfn, order: Order) -> Self {
        PageBlock { za, pfn, order }
    }

    /// First frame of the block.
    pub fn pfn(&self) -> Pfn {
        self.pfn
    }

    /// Order of the block.
    pub fn order(&self) -> Order {
        self.order
    }

    /// Gives up the guard without freeing: the block's reference passes to the
    /// caller, and the raw API accepts the block again.
    pub fn into_raw(self) -> (Pfn, Order) {
        let r = (self.pfn, self.order);
        let cleared = self.za.set_guarded(self.pfn, self.order, false);
        // Only the guard changes a guarded head, so clearing cannot be refused.
        debug_assert!(
            cleared.is_ok(),
            "a guarded block lost its flag: {cleared:?}"
        );
        core::mem::forget(self);
        r
    }

    /// Takes exclusive ownership of an allocated block through a new guard.
    ///
    /// The block must be the head of an allocated block of exactly `order`, not
    /// already guarded and not a page_frag cache's; otherwise the `FreeError` says
    /// why and nothing changes. While the guard lives, the raw API refuses the block.
    ///
    /// # Errors
    /// As `free_pages` for a frame that is not such a head; `Guarded` if a guard
    /// already owns it; `Busy` for a page_frag block.
    ///
    /// # Safety
    /// The caller must own a reference to the block and hand it to the guard, and
    /// nothing may read or write the block's memory through other pointers (from
    /// `page_address`, a vmalloc or vmap mapping, page_frag fragments, or the owners
    /// of other references to the block) while the guard lives: the guard gives out
    /// the memory as `&mut [u8]`.
    #[allow(unsafe_code)]
    pub unsafe fn from_raw(
        za: &'a ZoneAllocator<B>,
        pfn: Pfn,
        order: Order,
    ) -> Result<Self, FreeError> {
        za.set_guarded(pfn, order, true)?;
        Ok(PageBlock { za, pfn, order })
    }

    /// The block's memory, if the backend gives frames addresses.
    #[allow(unsafe_code)]
    pub fn bytes(&self) -> Option<&[u8]> {
        let (p, len) = self.memory()?;
        // SAFETY: as in `bytes_mut`; `&self` makes the borrow shared, and no `&mut`
        // borrow of the guard can exist beside it.
        Some(unsafe { core::slice::from_raw_parts(p, len) })
    }

    /// The block's memory, writable, if the backend gives frames addresses.
    #[allow(unsafe_code)]
    pub fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        let (p, len) = self.memory()?;
        // SAFETY: `Backend` is an unsafe trait whose implementors promise that
        // `page_address` points at `page_size` writable bytes per frame, frames not
        // overlapping and consecutive frames of a zone contiguous; the block's
        // `2^order` frames lie in one zone, are allocated, and belong to this guard
        // alone (`FLAG_GUARDED` makes the raw API refuse them, and `from_raw`'s
        // contract excludes every other pointer), and `&mut self` makes the borrow
        // exclusive.
        Some(unsafe { core::slice::from_raw_parts_mut(p, len) })
    }

    fn memory(&self) -> Option<(*mut u8, usize)> {
        let p = self.za.backend().page_address(self.pfn)?;
        let len = self.za.backend().page_size()? << self.order.0;
        Some((p.as_ptr(), len))
    }
}

impl<B: Backend> ZoneAllocator<B> {
    /// Allocates a block owned by the returned guard, which frees it when dropped.
    ///
    /// # Errors
    /// As `alloc_pages`.
    pub fn alloc_block(&self, gfp: Gfp, order: Order) -> Result<PageBlock<'_, B>, AllocError> {
        let pfn = self.alloc_pages_local(self.current_cpu(), gfp, order, Head::GUARDED)?;
        Ok(PageBlock::new(self, pfn, order))
    }
}

/// On an arena every block has memory: its bytes without an `Option`.
#[cfg(feature = "std")]
impl PageBlock<'_, crate::arena::Arena> {
    /// The block's `2^order` pages, contiguous from the first byte.
    pub fn data(&self) -> &[u8] {
        // An arena gives every frame of its zones an address.
        self.bytes().unwrap_or_default()
    }

    /// The block's `2^order` pages, writable (see `data`).
    ///
    /// ```
    /// use zonealloc::{ArenaOptions, Config, Gfp, Order, ZoneAllocator};
    /// let za = ZoneAllocator::with_arena(Config::with_bytes(16 << 20), ArenaOptions::default())
    ///     .unwrap();
    /// let mut block = za.alloc_block(Gfp::KERNEL, Order(2)).unwrap();
    /// block.data_mut().fill(7);
    /// assert_eq!(block.data().len(), 4 * 4096);
    /// ```
    pub fn data_mut(&mut self) -> &mut [u8] {
        self.bytes_mut().unwrap_or_default()
    }
}

/// How often `LocalCache::alloc_block` tries to guard a fresh block that
/// compaction isolated first.
const GUARD_TRIES: u32 = 4;

/// Guards for a cache's blocks.
impl<'a, B: Backend> LocalCache<'a, B> {
    /// As `alloc`, with the block owned by a guard (`PageBlock`): safe code writes
    /// its bytes through `bytes_mut` (on an arena, whose frames have addresses;
    /// the block's `2^order` pages are contiguous from its first byte). Give the
    /// guard back with `free_block` to keep the block in this cache; dropping it
    /// frees the block as `free_pages` does. The guard costs one compare-and-swap
    /// each way on top of the cache's own path.
    ///
    /// # Errors
    /// As `alloc`; `NoMemory` also if compaction kept taking the blocks of a
    /// movable cache before they could be guarded (a few tries).
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{ArenaOptions, Config, Gfp, Order, ZoneAllocator};
    ///
    /// let za = ZoneAllocator::with_arena(Config::with_bytes(16 << 20), ArenaOptions::default())
    ///     .unwrap();
    /// std::thread::scope(|s| {
    ///     for cpu in 0..2 {
    ///         // Each thread takes its own cache in.
    ///         let mut cache = za.local_cache_on(cpu, Gfp::KERNEL).unwrap();
    ///         s.spawn(move || {
    ///             let mut block = cache.alloc_block(Order(1)).unwrap();
    ///             block.bytes_mut().unwrap().fill(cpu as u8 + 1); // 8 KiB, no unsafe
    ///             cache.free_block(block).unwrap();
    ///         });
    ///     }
    /// });
    /// ```
    pub fn alloc_block(&mut self, order: Order) -> Result<PageBlock<'a, B>, AllocError> {
        for _ in 0..GUARD_TRIES {
            let pfn = self.alloc(order)?;
            if self.allocator().set_guarded(pfn, order, true).is_ok() {
                return Ok(PageBlock::new(self.allocator(), pfn, order));
            }
            // Compaction isolated the fresh movable block before the guard could
            // take it: its free drops our reference and compaction's putback
            // frees the block.
            let _ = self.free(pfn, order);
        }
        Err(AllocError::NoMemory { order })
    }

    /// Frees a block `alloc_block` handed out back into this cache (or as `free`
    /// does, for a block the cache does not keep).
    ///
    /// # Errors
    /// As `free`.
    pub fn free_block(&mut self, block: PageBlock<'a, B>) -> Result<(), FreeError> {
        let (pfn, order) = block.into_raw();
        self.free(pfn, order)
    }
}

impl<B: Backend> Drop for PageBlock<'_, B> {
    fn drop(&mut self) {
        let cpu = self.za.current_cpu();
        let r = self
            .za
            .free_pages_by(Via::Cpu(cpu), self.pfn, self.order, Holder::Guard);
        // Nothing but the guard can change a guarded block, so the free succeeds.
        debug_assert!(r.is_ok(), "PageBlock could not free its block: {r:?}");
    }
}

impl<B: Backend> fmt::Debug for PageBlock<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageBlock")
            .field("pfn", &self.pfn)
            .field("order", &self.order)
            .finish()
    }
}
