//! The page fragment cache: many small refcounted fragments carved out of one block.
//!
//! Layer on top of the allocator's reference counts (`mm/page_frag_cache.c`). A
//! `PageFragCache` belongs to one owner (a CPU, a network queue) and is used by one
//! thread at a time; fragments it hands out may be freed from any thread with
//! `ZoneAllocator::page_frag_free(addr)`.
//!
//! # The reference-bias trick
//!
//! Counting every fragment with an atomic increment would cost one locked
//! instruction per fragment. Instead, when the cache takes a fresh block it adds
//! `PAGE_FRAG_CACHE_MAX_SIZE` references in one go and remembers, in `pagecnt_bias`,
//! how many of the block's references it still owns itself:
//!
//! ```text
//!   refill:      refcount = 1 + 32768        bias = 32769     (one atomic add)
//!   carve x3:    refcount = 32769            bias = 32766     (no atomics)
//!   free x2:     refcount = 32767            bias = 32766     (each free: one put)
//!   exhausted:   refcount -= bias  ->  1     one fragment still out: abandon the
//!                                            block; its last free frees it
//! ```
//!
//! If the subtraction leaves zero, every fragment already came back and the block is
//! reused in place. Carving a fragment is an offset bump and a bias decrement.
//!
//! The cache refills with an order-3 block (32 KiB on 4 KiB pages) without trying
//! hard (`NORETRY | NOWARN`), falling back to an order-0 page. When a block's last
//! fragment is freed, the block goes back by the path `FragFreePath` selects: seed
//! 003 sends order-0 pages through the per-CPU lists instead of the zone lock.

use core::ptr::NonNull;

use crate::allocator::{Via, ZoneAllocator};
use crate::backend::Backend;
use crate::error::{AllocError, FreeError};
use crate::gfp::Gfp;
use crate::types::{Order, Pfn};

/// `PAGE_FRAG_CACHE_MAX_SIZE`: 32 KiB, the bias added at refill.
pub const PAGE_FRAG_CACHE_MAX_SIZE: u32 = 32768;

/// How a fragment block returns to the allocator when its last fragment is freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FragFreePath {
    /// Every block under the zone lock (`__free_pages_ok`): Linux before seed 003.
    Zone,
    /// Order-0 pages through the per-CPU lists, larger blocks under the zone lock:
    /// seed 003 (Linux 4.20).
    #[default]
    PcpOrder0,
    /// Every order the per-CPU lists take (0..=3) through them: Linux 6.14+
    /// (`free_frozen_pages`).
    PcpAll,
}

/// Why a fragment could not be carved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FragError {
    /// The backend gives frames no addresses (fragments need memory).
    NoAddresses,
    /// The fragment is larger than a page and does not fit in the current block.
    TooLarge,
    /// The alignment is not a power of two.
    BadAlign,
    /// The allocator had no page for a refill.
    NoMemory(AllocError),
}

impl core::fmt::Display for FragError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FragError::NoAddresses => f.write_str("backend has no addresses"),
            FragError::TooLarge => f.write_str("fragment larger than a page"),
            FragError::BadAlign => f.write_str("alignment not a power of two"),
            FragError::NoMemory(e) => write!(f, "refill failed: {e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for FragError {}

/// A page fragment cache (`struct page_frag_cache`). One owner at a time.
pub struct PageFragCache<'a, B: Backend> {
    za: &'a ZoneAllocator<B>,
    gfp: Gfp,
    refill_order: Order,
    /// Current block: head frame, order, address.
    block: Option<(Pfn, Order, NonNull<u8>)>,
    offset: usize,
    pagecnt_bias: u32,
    refills: u64,
    recycles: u64,
}

#[allow(unsafe_code)]
// SAFETY: `NonNull<u8>` is the only non-Send field; it addresses frames the cache
// owns references to, and the cache is used by one thread at a time (`&mut self`).
unsafe impl<B: Backend> Send for PageFragCache<'_, B> {}

impl<'a, B: Backend> PageFragCache<'a, B> {
    /// A cache refilling from `za` with `gfp` and order-3 blocks.
    pub fn new(za: &'a ZoneAllocator<B>, gfp: Gfp) -> Self {
        Self::with_refill_order(za, gfp, Order(3))
    }

    /// A cache whose refills try `refill_order` first (0 makes every block a page).
    pub fn with_refill_order(za: &'a ZoneAllocator<B>, gfp: Gfp, refill_order: Order) -> Self {
        PageFragCache {
            za,
            gfp,
            refill_order: refill_order.min(za.config().max_order),
            block: None,
            offset: 0,
            pagecnt_bias: 0,
            refills: 0,
            recycles: 0,
        }
    }

    /// Blocks taken from the allocator, and blocks reused in place.
    pub fn refill_counts(&self) -> (u64, u64) {
        (self.refills, self.recycles)
    }

    /// `__page_frag_cache_refill()`: a fresh block with the bias in place.
    fn refill(&mut self) -> Result<(), FragError> {
        self.za
            .backend()
            .page_size()
            .ok_or(FragError::NoAddresses)?;
        if self.za.should_fail(crate::debug::FaultSite::FragRefill) {
            return Err(FragError::NoMemory(AllocError::NoMemory {
                order: self.refill_order,
            }));
        }
        let mut got = None;
        if self.refill_order.0 > 0 {
            let gfp = (self.gfp & !Gfp::DIRECT_RECLAIM)
                | Gfp::COMP
                | Gfp::NOWARN
                | Gfp::NORETRY
                | Gfp::NOMEMALLOC;
            got = self
                .za
                .alloc_pages(gfp, self.refill_order)
                .ok()
                .map(|p| (p, self.refill_order));
        }
        let (pfn, order) = match got {
            Some(g) => g,
            None => (
                self.za
                    .alloc_pages(self.gfp, Order(0))
                    .map_err(FragError::NoMemory)?,
                Order(0),
            ),
        };
        let addr = self.za.page_address(pfn).ok_or(FragError::NoAddresses)?;
        // The block is ours with one reference; add the bias in one atomic step.
        self.za
            .page_ref_add(pfn, PAGE_FRAG_CACHE_MAX_SIZE)
            .expect("a freshly allocated block takes references");
        self.block = Some((pfn, order, addr));
        self.pagecnt_bias = PAGE_FRAG_CACHE_MAX_SIZE + 1;
        self.offset = 0;
        self.refills += 1;
        Ok(())
    }

    /// `page_frag_alloc_align()`: a fragment of `size` bytes aligned to `align`.
    /// Free it with `ZoneAllocator::page_frag_free`.
    ///
    /// # Errors
    /// `NoAddresses` on a backend without memory, `BadAlign`, `TooLarge` for a
    /// fragment above a page that does not fit, `NoMemory` when a refill fails.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{ArenaOptions, Config, Gfp, PageFragCache, ZoneAllocator};
    /// let za = ZoneAllocator::with_arena(Config::with_bytes(16 << 20), ArenaOptions::default()).unwrap();
    /// let mut cache = PageFragCache::new(&za, Gfp::ATOMIC);
    /// let a = cache.alloc(100, 64).unwrap();
    /// let b = cache.alloc(100, 64).unwrap();
    /// assert_eq!(b.as_ptr() as usize - a.as_ptr() as usize, 128);
    /// za.page_frag_free(a.as_ptr()).unwrap();
    /// za.page_frag_free(b.as_ptr()).unwrap();
    /// ```
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<NonNull<u8>, FragError> {
        if !align.is_power_of_two() {
            return Err(FragError::BadAlign);
        }
        let page_size = self
            .za
            .backend()
            .page_size()
            .ok_or(FragError::NoAddresses)?;
        if self.block.is_none() {
            self.refill()?;
        }
        loop {
            let (pfn, order, addr) = self.block.expect("refilled above");
            let block_bytes = page_size << order.0;
            let offset = self.offset.next_multiple_of(align);
            if offset + size <= block_bytes {
                self.pagecnt_bias -= 1;
                self.offset = offset + size;
                // The offset stays inside the block (checked above).
                let p = addr.as_ptr().wrapping_add(offset);
                return Ok(NonNull::new(p).expect("inside the block"));
            }
            if size > page_size {
                return Err(FragError::TooLarge);
            }
            // Exhausted: give back our unused share; reuse the block if every
            // fragment already came back, else leave it to its last fragment.
            let reset = PAGE_FRAG_CACHE_MAX_SIZE + 1;
            let recycled = self
                .za
                .page_ref_sub_or_reset(pfn, self.pagecnt_bias, reset)
                .expect("the cache holds references on its block");
            if recycled {
                self.pagecnt_bias = reset;
                self.offset = 0;
                self.recycles += 1;
            } else {
                self.block = None;
                self.refill()?;
            }
        }
    }

    /// `page_frag_cache_drain()`: drops the cache's share of its current block,
    /// freeing it if no fragment is still out.
    pub fn drain(&mut self) {
        if let Some((pfn, _, _)) = self.block.take() {
            let freed = self
                .za
                .page_ref_sub_or_reset(pfn, self.pagecnt_bias, 1)
                .expect("the cache holds references on its block");
            if freed {
                // The count reached zero and was reset to our single reference:
                // release it through the ordinary path.
                let _ = self.za.page_frag_put(pfn);
            }
        }
    }
}

impl<B: Backend> Drop for PageFragCache<'_, B> {
    fn drop(&mut self) {
        self.drain();
    }
}

impl<B: Backend> ZoneAllocator<B> {
    /// `page_frag_free()`: drops the reference a fragment holds on its block; the
    /// last one frees the block (by `Config::frag_free_path`). Any thread may call it.
    ///
    /// # Errors
    /// `ForeignAddress` if `addr` is not in this allocator's memory, or the
    /// `FreeError` of its frame if that is not inside an allocated block (a fragment
    /// freed after its block was already freed).
    pub fn page_frag_free(&self, addr: *const u8) -> Result<(), FreeError> {
        let pfn = self
            .backend()
            .pfn_of_addr(addr)
            .ok_or(FreeError::ForeignAddress(addr as usize))?;
        let (head, _) = self.block_of(pfn)?;
        self.page_frag_put(head).map(|_| ())
    }

    /// Drops one reference on a fragment block, freeing by the configured path.
    fn page_frag_put(&self, head: Pfn) -> Result<bool, FreeError> {
        let z = self.zone_of(head).ok_or(FreeError::OutOfRange(head))?;
        let cpu = self.current_cpu();
        match self.config().frag_free_path {
            FragFreePath::PcpAll => self.put_and_free(z, head, None, Via::Cpu(cpu)),
            path => {
                let order = self.block_of(head)?.1;
                let via = if path == FragFreePath::PcpOrder0 && order.0 == 0 {
                    Via::Cpu(cpu)
                } else {
                    Via::Zone
                };
                self.put_and_free(z, head, None, via)
            }
        }
    }
}
