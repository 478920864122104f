//! RAII ownership of allocated blocks for Rust callers.
//!
//! `PageBlock` owns one reference to an allocated block and drops it when it goes out
//! of scope, beside the raw pfn API for callers that manage lifetimes themselves.

use core::fmt;

use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::types::{Order, Pfn};

/// An allocated block of `2^order` frames that is freed when dropped.
pub struct PageBlock<'a, B: Backend> {
    za: &'a ZoneAllocator<B>,
    pfn: Pfn,
    order: Order,
}

impl<'a, B: Backend> PageBlock<'a, B> {
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

    /// Gives up ownership without freeing: the caller now owns the reference.
    pub fn into_raw(self) -> (Pfn, Order) {
        let r = (self.pfn, self.order);
        core::mem::forget(self);
        r
    }

    /// Takes ownership of one reference to an allocated block.
    ///
    /// The caller must own that reference; if it does not, dropping the guard
    /// reports the misuse through `free_pages`' checks (debug builds panic there).
    pub fn from_raw(za: &'a ZoneAllocator<B>, pfn: Pfn, order: Order) -> Self {
        PageBlock { za, pfn, order }
    }

    /// The block's memory, if the backend gives frames addresses.
    #[allow(unsafe_code)]
    pub fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        let p = self.za.backend().page_address(self.pfn)?;
        let len = self.za.backend().page_size()? << self.order.0;
        // SAFETY: `Backend` is an unsafe trait whose implementors promise that
        // `page_address` points at `page_size` writable bytes per frame, consecutive
        // frames being contiguous; the block's `2^order` frames are allocated and this
        // guard owns them, and `&mut self` makes the borrow exclusive.
        Some(unsafe { core::slice::from_raw_parts_mut(p.as_ptr(), len) })
    }
}

impl<B: Backend> Drop for PageBlock<'_, B> {
    fn drop(&mut self) {
        let r = self.za.free_pages(self.pfn, self.order);
        debug_assert!(r.is_ok(), "PageBlock dropped a block it did not own: {r:?}");
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
