//! Single blocks: `alloc_pages`, `alloc_pages_node`, `free_pages`, the reference
//! calls (`get_page`, `put_page`, `page_count`, `split_page`) and
//! `page_address`.
//!
//! Above `handle`, `ptr` and `status`: each function checks its out pointers,
//! resolves the handle, calls the `ZoneAllocator` method of the same name and
//! stores the answer. The allocator takes its own locks (or none, on the per-CPU
//! fast path); nothing here adds one, so these calls scale as the core's do.

use core::ffi::{c_int, c_void};

use zonealloc_core::{FreeError, Gfp, Pfn};

use crate::config::to_order;
use crate::handle::{on_handle, with_za, zonealloc, Inner};
use crate::ptr::Out;
use crate::status::Status;

/// Allocates a block of `2^order` frames with `gfp`; its first frame goes to
/// `*pfn`.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed; `pfn`
/// is NULL or valid for a write of a `u64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_alloc_pages(
    za: *mut zonealloc,
    gfp: u32,
    order: u32,
    pfn: *mut u64,
) -> c_int {
    let body = |inner: &Inner| {
        let out = Out::required(pfn)?;
        let p = with_za!(inner, |za| za
            .alloc_pages(Gfp::from_bits(gfp), to_order(order)))?;
        // SAFETY: `pfn` is valid for the write by the contract.
        unsafe { out.write(p.0) };
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}

/// As `zonealloc_alloc_pages`, starting from node `nid`'s zonelist.
///
/// # Safety
/// As `zonealloc_alloc_pages`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_alloc_pages_node(
    za: *mut zonealloc,
    nid: u32,
    gfp: u32,
    order: u32,
    pfn: *mut u64,
) -> c_int {
    let body = |inner: &Inner| {
        let out = Out::required(pfn)?;
        // A node number past `u16` names no node: the core refuses its
        // saturated value as `InvalidNode`.
        let nid = u16::try_from(nid).unwrap_or(u16::MAX);
        let p = with_za!(inner, |za| za.alloc_pages_node(
            nid,
            Gfp::from_bits(gfp),
            to_order(order)
        ))?;
        // SAFETY: `pfn` is valid for the write by the contract.
        unsafe { out.write(p.0) };
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}

/// Drops a reference on the block of `2^order` frames at `pfn`, freeing it at
/// zero.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_free_pages(za: *mut zonealloc, pfn: u64, order: u32) -> c_int {
    let body = |inner: &Inner| {
        with_za!(inner, |za| za.free_pages(Pfn(pfn), to_order(order)))?;
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}

/// Adds a reference to the allocated block headed by `pfn`.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_get_page(za: *mut zonealloc, pfn: u64) -> c_int {
    let body = |inner: &Inner| {
        with_za!(inner, |za| za.get_page(Pfn(pfn)))?;
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}

/// Drops a reference on the block headed by `pfn`; `*freed` (if not NULL) says
/// whether that freed it.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed;
/// `freed` is NULL or valid for a write of a `c_int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_put_page(
    za: *mut zonealloc,
    pfn: u64,
    freed: *mut c_int,
) -> c_int {
    let body = |inner: &Inner| {
        let out = Out::optional(freed)?;
        let was_last = with_za!(inner, |za| za.put_page(Pfn(pfn)))?;
        if let Some(out) = out {
            // SAFETY: `freed` is valid for the write by the contract.
            unsafe { out.write(c_int::from(was_last)) };
        }
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}

/// The reference count of the allocated block headed by `pfn`, into `*count`.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed;
/// `count` is NULL or valid for a write of a `u32`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_page_count(
    za: *const zonealloc,
    pfn: u64,
    count: *mut u32,
) -> c_int {
    let body = |inner: &Inner| {
        let out = Out::required(count)?;
        let n = with_za!(inner, |za| za.page_count(Pfn(pfn)))?;
        // SAFETY: `count` is valid for the write by the contract.
        unsafe { out.write(n) };
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}

/// Splits the allocated block of `2^order` frames at `pfn` into order-0 pages.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_split_page(za: *mut zonealloc, pfn: u64, order: u32) -> c_int {
    let body = |inner: &Inner| {
        with_za!(inner, |za| za.split_page(Pfn(pfn), to_order(order)))?;
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}

/// The address of frame `pfn`'s page, into `*addr`, for an allocator over an
/// arena.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed;
/// `addr` is NULL or valid for a write of a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_page_address(
    za: *const zonealloc,
    pfn: u64,
    addr: *mut *mut c_void,
) -> c_int {
    let body = |inner: &Inner| {
        let out = Out::required(addr)?;
        let p = Pfn(pfn);
        let found = with_za!(inner, |za| {
            za.zone_id_of(p).ok_or(FreeError::OutOfRange(p))?;
            za.page_address(p)
        });
        let a = found.ok_or(Status::NoAddress)?;
        // SAFETY: `addr` is valid for the write by the contract.
        unsafe { out.write(a.as_ptr().cast()) };
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}
