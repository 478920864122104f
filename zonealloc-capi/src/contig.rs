//! Contiguous and bulk paths: `alloc_contig_range`, `alloc_contig_pages`,
//! `free_contig_range`, `alloc_pages_bulk`, `free_pages_bulk`.
//!
//! Beside `pages`, over the core's `contig` module. C passes frame arrays as
//! `uint64_t` frame numbers, with `ZONEALLOC_PFN_NONE` for an empty slot of a
//! bulk allocation. A bulk allocation goes to the core in chunks of
//! `BULK_CHUNK` slots held on the stack, so it allocates nothing on the heap; a
//! bulk free hands the core the whole array at once, so that it stays all or
//! nothing, and copies it into one heap vector for that.

use core::ffi::c_int;

use zonealloc_core::{Gfp, Pfn};

use crate::consts::ZONEALLOC_PFN_NONE;
use crate::handle::{on_handle, with_za, zonealloc, Inner};
use crate::ptr::{slice, slice_mut, Out};
use crate::status::Status;

/// Slots of a bulk allocation passed to the core per call.
const BULK_CHUNK: usize = 256;

/// Allocates exactly the frames `[start, end)` as order-0 pages.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_alloc_contig_range(
    za: *mut zonealloc,
    start: u64,
    end: u64,
) -> c_int {
    let body = |inner: &Inner| {
        with_za!(inner, |za| za.alloc_contig_range(Pfn(start), Pfn(end)))?;
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}

/// Finds and allocates `nr_pages` contiguous frames on node `nid`; the first
/// goes to `*pfn`.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed; `pfn`
/// is NULL or valid for a write of a `u64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_alloc_contig_pages(
    za: *mut zonealloc,
    nr_pages: u64,
    gfp: u32,
    nid: u32,
    pfn: *mut u64,
) -> c_int {
    let body = |inner: &Inner| {
        let out = Out::required(pfn)?;
        // A node number past `u16` names no node: the core refuses its
        // saturated value as an invalid range.
        let nid = u16::try_from(nid).unwrap_or(u16::MAX);
        let p = with_za!(inner, |za| za.alloc_contig_pages(
            nr_pages,
            Gfp::from_bits(gfp),
            nid
        ))?;
        // SAFETY: `pfn` is valid for the write by the contract.
        unsafe { out.write(p.0) };
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}

/// Drops a reference on each order-0 page of `[pfn, pfn + nr_pages)`, freeing
/// those that reach zero as the largest aligned blocks.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_free_contig_range(
    za: *mut zonealloc,
    pfn: u64,
    nr_pages: u64,
) -> c_int {
    let body = |inner: &Inner| {
        with_za!(inner, |za| za.free_contig_range(Pfn(pfn), nr_pages))?;
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}

/// Fills the `ZONEALLOC_PFN_NONE` slots of `pfns[0..nr]` with order-0 pages;
/// `*nr_filled` gets the filled slots, pre-filled ones included.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed; `pfns`
/// is valid for reads and writes of `nr` `u64`s (NULL when `nr` is 0) that
/// nothing else accesses during the call; `nr_filled` is NULL or valid for a
/// write of a `usize`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_alloc_pages_bulk(
    za: *mut zonealloc,
    gfp: u32,
    pfns: *mut u64,
    nr: usize,
    nr_filled: *mut usize,
) -> c_int {
    let body = |inner: &Inner| {
        let out = Out::required(nr_filled)?;
        // SAFETY: `pfns` is valid for `nr` elements by the contract.
        let pfns = unsafe { slice_mut(pfns, nr) }?;
        let gfp = Gfp::from_bits(gfp);
        let (mut filled, mut short) = (0, false);
        for chunk in pfns.chunks_mut(BULK_CHUNK) {
            if short {
                // Memory ran low: count the rest's pre-filled slots only.
                filled += chunk.iter().filter(|&&p| p != ZONEALLOC_PFN_NONE).count();
                continue;
            }
            let mut slots = [None; BULK_CHUNK];
            let slots = &mut slots[..chunk.len()];
            for (s, &p) in slots.iter_mut().zip(chunk.iter()) {
                *s = (p != ZONEALLOC_PFN_NONE).then_some(Pfn(p));
            }
            let n = with_za!(inner, |za| za.alloc_pages_bulk(gfp, slots));
            for (c, s) in chunk.iter_mut().zip(slots.iter()) {
                *c = s.map_or(ZONEALLOC_PFN_NONE, |p| p.0);
            }
            filled += n;
            short = n < chunk.len();
        }
        // SAFETY: `nr_filled` is valid for the write by the contract.
        unsafe { out.write(filled) };
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}

/// Drops a reference on each order-0 page of `pfns[0..nr]`, all or nothing.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed; `pfns`
/// is valid for reads of `nr` `u64`s (NULL when `nr` is 0) that nothing writes
/// during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_free_pages_bulk(
    za: *mut zonealloc,
    pfns: *const u64,
    nr: usize,
) -> c_int {
    let body = |inner: &Inner| {
        // SAFETY: `pfns` is valid for `nr` elements by the contract.
        let pfns = unsafe { slice(pfns, nr) }?;
        let mut pages = Vec::new();
        pages
            .try_reserve_exact(pfns.len())
            .map_err(|_| Status::HostMemory)?;
        pages.extend(pfns.iter().map(|&p| Pfn(p)));
        with_za!(inner, |za| za.free_pages_bulk(&pages))?;
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}
