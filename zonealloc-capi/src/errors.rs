//! Reading errors from C: `zonealloc_strerror`, `zonealloc_last_error` and
//! `zonealloc_last_error_message`.
//!
//! Above `status` and `ptr`. These calls take no handle and no lock: they read
//! static text or the calling thread's last error. They never change the last
//! error, even when they fail themselves (a NULL buffer with a capacity, a
//! misaligned `info`): their own failure is only their answer, so that reading
//! an error cannot lose it.

use core::ffi::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::handle::panic_message;
use crate::ptr::{Out, TextBuf};
use crate::status::{self, with_last, zonealloc_error_info, Failure, Status};

/// Runs `body` as `handle::guard_len` does, but without recording a failure as
/// the thread's last error.
fn quietly<T>(body: impl FnOnce() -> Result<T, Failure>) -> Result<T, c_int> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(f)) => Err(f.status().code()),
        Err(payload) => {
            // Dropped with the care `guard` takes: its destructor may panic.
            drop(panic_message(payload));
            Err(Status::Panic.code())
        }
    }
}

/// A static, NUL-terminated description of status code `code` (a fixed text for
/// codes the library does not have). Never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn zonealloc_strerror(code: c_int) -> *const c_char {
    catch_unwind(|| status::strerror(code)).unwrap_or(status::UNKNOWN_CODE.as_ptr())
}

/// The code of the calling thread's last failing call (`ZONEALLOC_OK` if none
/// failed yet); `*info` (if not NULL) gets the code and its error's payload.
///
/// # Safety
/// `info` is NULL or valid for a write of a `zonealloc_error_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_last_error(info: *mut zonealloc_error_info) -> c_int {
    quietly(|| {
        let out = Out::optional(info)?;
        let i = with_last(|f| f.map_or(zonealloc_error_info::none(Status::Ok), Failure::info));
        if let Some(out) = out {
            // SAFETY: `info` is valid for the write by the contract.
            unsafe { out.write(i) };
        }
        Ok(i.code)
    })
    .unwrap_or_else(|code| code)
}

/// The calling thread's last error as the core words it (with its frame, order
/// or value), into `buf` as `snprintf` does; answers the full length.
///
/// # Safety
/// `buf` is valid for writes of `cap` bytes (may be NULL when `cap` is 0) that
/// nothing else accesses during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_last_error_message(buf: *mut c_char, cap: usize) -> i64 {
    quietly(|| {
        // SAFETY: `buf` is valid for `cap` bytes by the contract.
        let tb = unsafe { TextBuf::new(buf, cap) }?;
        with_last(|f| match f {
            Some(f) => tb.put(f),
            None => tb.put("no error"),
        })
    })
    .map_or_else(i64::from, |n| i64::try_from(n).unwrap_or(i64::MAX))
}
