//! Per-CPU drains, page counts, the `/proc` texts and the invariant check.
//!
//! Above `handle` and `ptr`. The counts are the core's lock-free counters; the
//! texts are its `Display` output (`/proc/buddyinfo`, `/proc/pagetypeinfo`,
//! `/proc/zoneinfo`, `/proc/vmstat`), streamed into the caller's buffer in
//! `snprintf`'s convention without an intermediate string; the drains and
//! `check_invariants` take the per-CPU and zone locks the core takes for them.

use core::ffi::{c_char, c_int};

use crate::handle::{on_handle, on_handle_len, with_za, zonealloc, Inner};
use crate::ptr::{Out, TextBuf};
use crate::status::Failure;

/// Empties the calling thread's CPU's per-CPU lists; `*nr_drained` (if not NULL)
/// gets the pages returned to the buddy lists.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed;
/// `nr_drained` is NULL or valid for a write of a `u64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_drain_local_pages(
    za: *mut zonealloc,
    nr_drained: *mut u64,
) -> c_int {
    // SAFETY: `za` and `nr_drained` as this function's contract states.
    unsafe {
        count(za, nr_drained, false, |inner| {
            with_za!(inner, |za| za.drain_local_pages())
        })
    }
}

/// Empties every CPU's per-CPU lists (and the per-CPU stacks); `*nr_drained` (if
/// not NULL) gets the pages returned to the buddy lists.
///
/// # Safety
/// As `zonealloc_drain_local_pages`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_drain_all_pages(
    za: *mut zonealloc,
    nr_drained: *mut u64,
) -> c_int {
    // SAFETY: `za` and `nr_drained` as this function's contract states.
    unsafe {
        count(za, nr_drained, false, |inner| {
            with_za!(inner, |za| za.drain_all_pages())
        })
    }
}

/// Free frames on the buddy lists, into `*nr`.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed; `nr`
/// is NULL or valid for a write of a `u64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_nr_free_pages(za: *const zonealloc, nr: *mut u64) -> c_int {
    // SAFETY: `za` and `nr` as this function's contract states.
    unsafe {
        count(za, nr, true, |inner| {
            with_za!(inner, |za| za.nr_free_pages())
        })
    }
}

/// Frames the allocator manages, into `*nr`.
///
/// # Safety
/// As `zonealloc_nr_free_pages`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_managed_pages(za: *const zonealloc, nr: *mut u64) -> c_int {
    // SAFETY: `za` and `nr` as this function's contract states.
    unsafe {
        count(za, nr, true, |inner| {
            with_za!(inner, |za| za.managed_pages())
        })
    }
}

/// Free frames held on per-CPU lists and stacks, into `*nr`.
///
/// # Safety
/// As `zonealloc_nr_free_pages`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_nr_pcp_pages(za: *const zonealloc, nr: *mut u64) -> c_int {
    // SAFETY: `za` and `nr` as this function's contract states.
    unsafe {
        count(za, nr, true, |inner| {
            with_za!(inner, |za| za.nr_pcp_pages())
        })
    }
}

/// Runs `f` on the handle and stores its answer in `*out` (`required`: `out`
/// may not be NULL).
///
/// # Safety
/// `za` as `handle::zonealloc::resolve` requires; `out` is NULL or valid for a
/// write of a `u64`.
unsafe fn count(
    za: *const zonealloc,
    out: *mut u64,
    required: bool,
    f: impl FnOnce(&Inner) -> u64,
) -> c_int {
    let body = |inner: &Inner| {
        let out = if required {
            Some(Out::required(out)?)
        } else {
            Out::optional(out)?
        };
        let n = f(inner);
        if let Some(out) = out {
            // SAFETY: `out` is valid for the write by the contract.
            unsafe { out.write(n) };
        }
        Ok(())
    };
    // SAFETY: `za` passed on from the contract.
    unsafe { on_handle(za, body) }
}

/// Which `/proc` text to write.
#[derive(Clone, Copy)]
enum Text {
    BuddyInfo,
    PageTypeInfo,
    ZoneInfo,
    VmStat,
}

/// Writes text `which` into `buf` (`cap` bytes) as `snprintf` does; answers its
/// full length or the negative code.
///
/// # Safety
/// `za` as `handle::zonealloc::resolve` requires; `buf` is valid for writes of
/// `cap` bytes (NULL when `cap` is 0) that nothing else accesses meanwhile.
unsafe fn text(za: *const zonealloc, buf: *mut c_char, cap: usize, which: Text) -> i64 {
    let body = |inner: &Inner| {
        // SAFETY: `buf` is valid for `cap` bytes by the contract.
        let tb = unsafe { TextBuf::new(buf, cap) }?;
        with_za!(inner, |za| match which {
            Text::BuddyInfo => tb.put(za.buddyinfo()),
            Text::PageTypeInfo => tb.put(za.pagetypeinfo()),
            Text::ZoneInfo => tb.put(za.zoneinfo()),
            Text::VmStat => tb.put(za.vmstat()),
        })
    };
    // SAFETY: `za` passed on from the contract.
    unsafe { on_handle_len(za, body) }
}

/// `/proc/buddyinfo` into `buf`, `snprintf`-style.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed; `buf`
/// is valid for writes of `cap` bytes (may be NULL when `cap` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_buddyinfo(
    za: *const zonealloc,
    buf: *mut c_char,
    cap: usize,
) -> i64 {
    // SAFETY: passed on from this function's contract.
    unsafe { text(za, buf, cap, Text::BuddyInfo) }
}

/// `/proc/pagetypeinfo` into `buf`, `snprintf`-style.
///
/// # Safety
/// As `zonealloc_buddyinfo`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_pagetypeinfo(
    za: *const zonealloc,
    buf: *mut c_char,
    cap: usize,
) -> i64 {
    // SAFETY: passed on from this function's contract.
    unsafe { text(za, buf, cap, Text::PageTypeInfo) }
}

/// `/proc/zoneinfo` into `buf`, `snprintf`-style.
///
/// # Safety
/// As `zonealloc_buddyinfo`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_zoneinfo(
    za: *const zonealloc,
    buf: *mut c_char,
    cap: usize,
) -> i64 {
    // SAFETY: passed on from this function's contract.
    unsafe { text(za, buf, cap, Text::ZoneInfo) }
}

/// `/proc/vmstat` into `buf`, `snprintf`-style.
///
/// # Safety
/// As `zonealloc_buddyinfo`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_vmstat(
    za: *const zonealloc,
    buf: *mut c_char,
    cap: usize,
) -> i64 {
    // SAFETY: passed on from this function's contract.
    unsafe { text(za, buf, cap, Text::VmStat) }
}

/// Walks every structure of the allocator; `ZONEALLOC_OK` if every invariant
/// holds, and then `*nr_checks` (if not NULL) gets the assertions evaluated.
///
/// # Safety
/// `za` is NULL or a handle from `zonealloc_create*` not being destroyed;
/// `nr_checks` is NULL or valid for a write of a `u64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_check_invariants(
    za: *const zonealloc,
    nr_checks: *mut u64,
) -> c_int {
    let body = |inner: &Inner| {
        let out = Out::optional(nr_checks)?;
        let report = with_za!(inner, |za| za.check_invariants()).map_err(Failure::Invariant)?;
        if let Some(out) = out {
            // SAFETY: `nr_checks` is valid for the write by the contract.
            unsafe { out.write(report.checks) };
        }
        Ok(())
    };
    // SAFETY: `za` as this function's contract states.
    unsafe { on_handle(za, body) }
}
