//! The page fragment cache: many small refcounted fragments carved out of one block.
//!
//! Layer on top of the allocator's reference counts (`mm/page_frag_cache.c`). A
//! `PageFragCache` belongs to one owner (a CPU, a network queue) and is used by one
//! thread at a time; fragments it hands out may be freed from any thread with
//! `ZoneAllocator::page_frag_free(addr)`. Public API here: `PageFragCache` and
//! `page_frag_free`.
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
//! # Refusing a fragment freed once too often
//!
//! Linux cannot tell a fragment's second free from another fragment's first: both
//! drop a reference, and the extra one eats into the cache's share. Here the cache
//! publishes its bias in the head frame's unused list link (a plain Release store
//! per carve, no locked instruction) while the head carries `FLAG_FRAG`, and a
//! fragment free refuses to drop the count to or below the published bias: that
//! would mean no fragment of the block is out. The published bias is never smaller
//! than the true one by a carve a legitimate free can depend on (the fragment was
//! carved, and its bias stored, before its address was handed to the freeing
//! thread), so a legitimate free is never refused. The cache gives up its share with
//! one compare-and-swap that also clears `FLAG_FRAG` (the block is then detached:
//! its count is exactly the fragments still out), or, when no fragment is out,
//! publishes the fresh bias *before* resetting the count, so that no free sees the
//! reset count beside the old bias. While the cache owns a block, the raw API
//! refuses it (`FreeError::Busy`).
//!
//! A refill takes its block already claimed: the allocation publishes the head with
//! `FLAG_FRAG` and the whole bias as its count, after storing the bias in the slot,
//! in the same store that hands any block out. No other thread can hold a reference
//! to a block before that store, so no compare-and-swap is needed to claim it.
//!
//! A fragment freed twice while other fragments of its block are still out remains
//! undetectable: its extra reference is indistinguishable from theirs.
//!
//! The cache refills with an order-3 block (32 KiB on 4 KiB pages) without trying
//! hard (`NORETRY | NOWARN`), falling back to an order-0 page. When a block's last
//! fragment is freed, the block goes back by the path `FragFreePath` selects: since
//! Linux 4.20, order-0 pages go through the per-CPU lists instead of the zone lock.

use core::ptr::NonNull;

use crate::allocate::Head;
use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::config::FragFreePath;
use crate::error::{AllocError, FreeError};
use crate::frame::{Tag, Word, FLAG_FRAG, FLAG_ISOLATED};
use crate::free::{Holder, Via};
use crate::gfp::Gfp;
use crate::sync::{AtomicU32, Ordering};
use crate::types::{Order, Pfn};

/// `PAGE_FRAG_CACHE_MAX_SIZE`: 32 KiB, the bias added at refill.
pub const PAGE_FRAG_CACHE_MAX_SIZE: u32 = 32768;

/// Why a fragment could not be carved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FragError {
    /// The backend gives frames no addresses (fragments need memory).
    NoAddresses,
    /// The fragment is larger than the cache's blocks, or larger than a page and
    /// does not fit in the current block.
    TooLarge,
    /// The alignment is not a power of two, or is larger than a page.
    BadAlign,
    /// The allocator had no page for a refill.
    NoMemory(AllocError),
}

impl core::fmt::Display for FragError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FragError::NoAddresses => f.write_str("backend has no addresses"),
            FragError::TooLarge => f.write_str("fragment too large for the cache's blocks"),
            FragError::BadAlign => f.write_str("alignment not a power of two up to a page"),
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
    /// Current block: head frame, order, address, and the head's bias slot.
    block: Option<CacheBlock<'a>>,
    offset: usize,
    /// References of the current block the cache holds itself (`pagecnt_bias`),
    /// mirrored in the head's bias slot.
    pagecnt_bias: u32,
    refills: u64,
    recycles: u64,
}

/// The block a cache carves from.
#[derive(Clone, Copy)]
struct CacheBlock<'a> {
    pfn: Pfn,
    order: Order,
    addr: NonNull<u8>,
    bias: &'a AtomicU32,
    /// The backend's page size, and the block's size in bytes.
    page_size: usize,
    bytes: usize,
}

#[allow(unsafe_code)]
// SAFETY: `NonNull<u8>` is the only non-Send field; it addresses frames the cache
// owns references to, and the cache is used by one thread at a time (`&mut self`).
unsafe impl<B: Backend> Send for PageFragCache<'_, B> {}

/// What a cache's release of its share did to the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Released {
    /// No fragment was out: the cache keeps the block with a fresh bias.
    Recycled,
    /// Fragments are still out: the block is theirs; the last one frees it.
    Detached,
    /// No fragment was out: the block was freed.
    Freed,
}

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
        let page_size = self
            .za
            .backend()
            .page_size()
            .ok_or(FragError::NoAddresses)?;
        if self
            .za
            .debug
            .faults
            .should_fail(crate::fault::FaultSite::FragRefill)
        {
            return Err(FragError::NoMemory(AllocError::NoMemory {
                order: self.refill_order,
            }));
        }
        // The block comes claimed: `FLAG_FRAG`, the bias as its count and in its slot.
        let head = Head::frag(PAGE_FRAG_CACHE_MAX_SIZE + 1);
        let cpu = self.za.current_cpu();
        let mut got = None;
        if self.refill_order.0 > 0 {
            let gfp = (self.gfp & !Gfp::DIRECT_RECLAIM)
                | Gfp::COMP
                | Gfp::NOWARN
                | Gfp::NORETRY
                | Gfp::NOMEMALLOC;
            got = self
                .za
                .alloc_pages_local(cpu, gfp, self.refill_order, head)
                .ok()
                .map(|p| (p, self.refill_order));
        }
        let (pfn, order) = match got {
            Some(g) => g,
            None => (
                self.za
                    .alloc_pages_local(cpu, self.gfp, Order(0), head)
                    .map_err(FragError::NoMemory)?,
                Order(0),
            ),
        };
        let bias = self
            .za
            .frag_bias_slot(pfn)
            .expect("an allocated block lies in a zone");
        let Some(addr) = self.za.page_address(pfn) else {
            // No fragment is out: giving up the whole bias frees the block.
            let _ = self
                .za
                .frag_release(pfn, bias, PAGE_FRAG_CACHE_MAX_SIZE + 1, None);
            return Err(FragError::NoAddresses);
        };
        self.block = Some(CacheBlock {
            pfn,
            order,
            addr,
            bias,
            page_size,
            bytes: page_size << order.0,
        });
        self.pagecnt_bias = PAGE_FRAG_CACHE_MAX_SIZE + 1;
        self.offset = 0;
        self.refills += 1;
        Ok(())
    }

    /// `page_frag_alloc_align()`: a fragment of `size` bytes aligned to `align`.
    /// Free it with `ZoneAllocator::page_frag_free`.
    ///
    /// # Errors
    /// `NoAddresses` on a backend without memory, `BadAlign` for an alignment that is
    /// not a power of two or exceeds a page, `TooLarge` for a fragment larger than the
    /// cache's blocks, or above a page and not fitting in the current block: nothing
    /// changes then. `NoMemory` when a refill fails; the exhausted block was given up
    /// first, as in Linux.
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
    /// // A fragment freed once too often is refused.
    /// assert!(za.page_frag_free(b.as_ptr()).is_err());
    /// ```
    #[inline]
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<NonNull<u8>, FragError> {
        // The common case inline: the fragment fits in the current block. Every check
        // of `alloc_slow` passes then (a block is at most `page_size << refill_order`
        // bytes), and it would carve the same fragment.
        if let Some(b) = self.block {
            if align.is_power_of_two() && align <= b.page_size && self.pagecnt_bias > 1 {
                let fits = self
                    .offset
                    .checked_next_multiple_of(align)
                    .filter(|&o| o < b.bytes && size <= b.bytes - o);
                if let Some(offset) = fits {
                    return Ok(self.carve(b, offset, size));
                }
            }
        }
        self.alloc_slow(size, align)
    }

    /// Hands out `size` bytes at `offset` of the current block `b`, which fit there,
    /// with a reference of the cache's bias (more than one is left).
    #[inline]
    fn carve(&mut self, b: CacheBlock<'a>, offset: usize, size: usize) -> NonNull<u8> {
        self.pagecnt_bias -= 1;
        // Release: a free of this fragment, which happens after its address was
        // handed over, sees the bias that counts it.
        b.bias.store(self.pagecnt_bias, Ordering::Release);
        self.offset = offset + size;
        // `offset < b.bytes`: the pointer is inside the block.
        let p = b.addr.as_ptr().wrapping_add(offset);
        NonNull::new(p).expect("inside the block")
    }

    /// `alloc` with every check, and the exhausted block's release and the refill.
    #[cold]
    #[inline(never)]
    fn alloc_slow(&mut self, size: usize, align: usize) -> Result<NonNull<u8>, FragError> {
        let page_size = self
            .za
            .backend()
            .page_size()
            .ok_or(FragError::NoAddresses)?;
        // Blocks are page-aligned at least, so an offset aligned to at most a page is
        // an address aligned as much.
        if !align.is_power_of_two() || align > page_size {
            return Err(FragError::BadAlign);
        }
        if size > page_size << self.refill_order.0 {
            return Err(FragError::TooLarge);
        }
        loop {
            if let Some(b) = self.block {
                let block_bytes = page_size << b.order.0;
                // The fragment starts inside the block and ends by its end; the bias
                // keeps one reference for the cache itself.
                let fits = self
                    .offset
                    .checked_next_multiple_of(align)
                    .filter(|&o| o < block_bytes && size <= block_bytes - o);
                if let Some(offset) = fits.filter(|_| self.pagecnt_bias > 1) {
                    return Ok(self.carve(b, offset, size));
                }
                if size > page_size {
                    return Err(FragError::TooLarge);
                }
                // Exhausted: give back our unused share; reuse the block if every
                // fragment already came back, else leave it to its last fragment.
                if self.release(true) == Released::Recycled {
                    self.recycles += 1;
                    continue;
                }
            }
            self.refill()?;
        }
    }

    /// Gives up the cache's share of its block. A block with fragments still out is
    /// left to them; one with none out is kept with a fresh bias if `recycle`, else
    /// freed. Never fails: a block whose state is not what the cache left (only a bug
    /// elsewhere can do that) is simply let go.
    fn release(&mut self, recycle: bool) -> Released {
        let Some(b) = self.block else {
            return Released::Detached;
        };
        let reset = PAGE_FRAG_CACHE_MAX_SIZE + 1;
        let r = self
            .za
            .frag_release(b.pfn, b.bias, self.pagecnt_bias, recycle.then_some(reset))
            .unwrap_or(Released::Detached);
        if r == Released::Recycled {
            self.pagecnt_bias = reset;
            self.offset = 0;
        } else {
            self.block = None;
        }
        r
    }

    /// `page_frag_cache_drain()`: drops the cache's share of its current block,
    /// freeing it if no fragment is still out.
    pub fn drain(&mut self) {
        self.release(false);
    }

    /// As `alloc`, the fragment owned by the returned `Fragment`, which frees it
    /// (`page_frag_free`) when dropped.
    ///
    /// # Errors
    /// As `alloc`.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{ArenaOptions, Config, Gfp, PageFragCache, ZoneAllocator};
    /// let za = ZoneAllocator::with_arena(Config::with_bytes(16 << 20), ArenaOptions::default())
    ///     .unwrap();
    /// let mut cache = PageFragCache::new(&za, Gfp::ATOMIC);
    /// let frag = cache.alloc_frag(1500, 64).unwrap(); // a packet buffer
    /// assert_eq!(frag.as_ptr().as_ptr() as usize % 64, 0);
    /// assert_eq!(frag.len(), 1500);
    /// drop(frag); // frees it
    /// ```
    pub fn alloc_frag(&mut self, size: usize, align: usize) -> Result<Fragment<'a, B>, FragError> {
        let ptr = self.alloc(size, align)?;
        Ok(Fragment {
            za: self.za,
            ptr,
            len: size,
        })
    }
}

/// A fragment owned by a guard (`PageFragCache::alloc_frag`), freed when dropped.
///
/// It hands out a pointer, not a slice. Reading and writing the `len` bytes at
/// `as_ptr` is the owner's `unsafe` business, as with `alloc`: sound while no one
/// but the guard frees the fragment.
///
/// # Why there is no safe slice accessor
///
/// The guard holds one reference on its block, but nothing records which
/// reference is whose: the fragments of a block are only its reference count
/// (less the cache's bias), and `ZoneAllocator::page_frag_free` is a safe call
/// that drops one reference of whatever block an address falls in. So safe code
/// can take the guard's reference while the guard lives:
/// `za.page_frag_free(frag.as_ptr().as_ptr())`, or a second free of a
/// neighbouring fragment's address. The check against a fragment freed once too
/// often refuses a free only when no fragment of the block is left out, so it
/// does not catch these. The block's count then reaches the cache's bias and the
/// cache recycles the block, carving the same bytes into new fragments; or, once
/// the cache has let the block go, the last free gives it back to the
/// allocator, which hands it out again (to a `PageBlock`, whose `bytes_mut` is
/// safe, say). A `&mut [u8]` borrowed from the guard would then alias memory
/// another owner writes, with no `unsafe` in sight. A safe slice would need the
/// guard's reference to be one no free by address can take (a mark per fragment,
/// as `FLAG_GUARDED` marks a `PageBlock`'s head, or an `unsafe` `page_frag_free`);
/// the one count per block (Linux's design, and what keeps a carve free of
/// atomics) has no room for it. For memory safe code writes, use a `PageBlock`
/// (`ZoneAllocator::alloc_block`, `bytes_mut`) or an `OwnedVmArea`
/// (`VmallocSpace::vmalloc_owned`, `bytes_mut`).
pub struct Fragment<'a, B: Backend> {
    za: &'a ZoneAllocator<B>,
    ptr: NonNull<u8>,
    len: usize,
}

impl<B: Backend> Fragment<'_, B> {
    /// The fragment's first byte.
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Gives up the guard without freeing: free the fragment with
    /// `ZoneAllocator::page_frag_free`.
    pub fn into_raw(self) -> NonNull<u8> {
        let p = self.ptr;
        core::mem::forget(self);
        p
    }
}

impl<B: Backend> Drop for Fragment<'_, B> {
    fn drop(&mut self) {
        // The fragment's reference is the guard's; its free cannot be refused unless
        // someone freed it behind the guard, and a drop has no one to tell.
        let _ = self.za.page_frag_free(self.ptr.as_ptr());
    }
}

impl<B: Backend> core::fmt::Debug for Fragment<'_, B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Fragment")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
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
    /// `ForeignAddress` if `addr` is not in this allocator's memory; the `FreeError`
    /// of its frame if that is not inside an allocated block (a fragment freed after
    /// its block was already freed); `AlreadyFree` if the block is still a cache's
    /// and none of its fragments is out (a fragment freed once too often);
    /// `Guarded` inside a `PageBlock`'s block. Nothing changes on error.
    pub fn page_frag_free(&self, addr: *const u8) -> Result<(), FreeError> {
        let pfn = self
            .backend()
            .pfn_of_addr(addr)
            .ok_or(FreeError::ForeignAddress(addr as usize))?;
        let (head, _) = self.block_of(pfn)?;
        let z = self.zone_of(head).ok_or(FreeError::OutOfRange(head))?;
        // The CPU first: owner code (`Config::cpu_id`) runs before the block is
        // taken.
        let cpu = self.current_cpu();
        let bias = z.frames.bias_slot(z.idx(head));
        let (old, new) = self.update_head(z, head, Holder::Frag, |w| {
            // Acquire: pairs with the cache's Release store of the bias.
            if w.flags() & FLAG_FRAG != 0 && w.refcount() <= bias.load(Ordering::Acquire) {
                return Err(FreeError::AlreadyFree(pfn));
            }
            // An isolated block's last reference is compaction's (see `migrate`):
            // refused here as `free_pages` refuses it.
            if w.refcount() <= 1 && w.flags() & FLAG_ISOLATED != 0 {
                return Err(FreeError::AlreadyFree(pfn));
            }
            Ok(if w.refcount() <= 1 {
                Word::frozen(w.order())
            } else {
                w.with_refcount(w.refcount() - 1)
            })
        })?;
        if new.tag() == Tag::Frozen {
            self.release_frozen(z, head, old.order(), self.frag_via(old.order(), cpu));
        }
        Ok(())
    }

    /// Where a fragment block goes when its last reference is dropped, freed on
    /// CPU `cpu`.
    fn frag_via(&self, order: Order, cpu: usize) -> Via {
        let cpu = Via::Here(cpu);
        match self.config().frag_free_path {
            FragFreePath::PcpAll => cpu,
            FragFreePath::PcpOrder0 if order.0 == 0 => cpu,
            _ => Via::Zone,
        }
    }

    /// The bias slot of the block headed by `head`.
    fn frag_bias_slot(&self, head: Pfn) -> Option<&AtomicU32> {
        let z = self.zone_of(head)?;
        Some(z.frames.bias_slot(z.idx(head)))
    }

    /// Gives up a cache's `bias` references on its block `head` (see the module
    /// documentation). With fragments still out the block is detached: its count
    /// becomes theirs and `FLAG_FRAG` is cleared. With none out it is recycled with
    /// `reset` as the new count and bias, or freed when `reset` is `None`.
    fn frag_release(
        &self,
        head: Pfn,
        slot: &AtomicU32,
        bias: u32,
        reset: Option<u32>,
    ) -> Result<Released, FreeError> {
        let z = self.zone_of(head).ok_or(FreeError::OutOfRange(head))?;
        let cpu = self.current_cpu();
        let (old, new) = self.update_head(z, head, Holder::Frag, |w| {
            if w.flags() & FLAG_FRAG == 0 {
                return Err(FreeError::Busy(head));
            }
            let r = w.refcount();
            if r > bias {
                return Ok(w.with_refcount(r - bias).with_flags(0));
            }
            // No fragment is out, so no free can succeed now (the count is at the
            // bias). Publish the new bias before the count grows to it.
            Ok(match reset {
                Some(n) => {
                    slot.store(n, Ordering::Release);
                    w.with_refcount(n)
                }
                None => Word::frozen(w.order()),
            })
        })?;
        if new.tag() == Tag::Frozen {
            self.release_frozen(z, head, old.order(), self.frag_via(old.order(), cpu));
            return Ok(Released::Freed);
        }
        if new.flags() & FLAG_FRAG == 0 {
            return Ok(Released::Detached);
        }
        Ok(Released::Recycled)
    }
}
