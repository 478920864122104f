//! The handle C holds (`struct zonealloc`) and the guard every call runs in.
//!
//! Above `status`, below every exported function. A handle is a small shell that
//! is never freed; the allocator hangs off it:
//!
//! ```text
//!   struct zonealloc *  ──>  zonealloc { magic, inner }      16 bytes, never freed
//!                                             │
//!                                             └──> Inner     boxed, freed by destroy
//!                                                  Frames(ZoneAllocator<AbstractFrames>)
//!                                                | Arena(ZoneAllocator<Arena>)
//! ```
//!
//! `magic` reads `LIVE` from creation to `zonealloc_destroy`, then `DEAD` for
//! ever: destroy drops the allocator but leaves the shell, so a call through the
//! stale pointer reads `DEAD` (defined behaviour: the shell is still allocated)
//! and is refused with `ZONEALLOC_ERR_BAD_HANDLE`, as is NULL and a misaligned
//! pointer. What cannot be detected is a pointer that was never a handle, and a
//! destroy that overlaps another call on the same handle; the header makes both
//! the caller's duty.
//!
//! Every exported function runs its body in [`guard`]: a `catch_unwind` that turns
//! a panic into `ZONEALLOC_ERR_PANIC` (with the panic's message as the thread's
//! last error), so no unwinding ever reaches C. No lock is taken here; the
//! allocator takes its own.

use core::ffi::c_int;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use zonealloc_core::{AbstractFrames, Arena, ZoneAllocator};

use crate::status::{Failure, Status};

/// `magic` of a handle whose allocator is alive ("zonealoc").
const LIVE: u64 = 0x7a6f_6e65_616c_6f63;
/// `magic` of a destroyed handle ("destroyd").
const DEAD: u64 = 0x6465_7374_726f_7964;

/// The allocator behind a handle, over abstract frames or an mmap'd arena.
pub(crate) enum Inner {
    /// `ZoneAllocator::new`.
    Frames(ZoneAllocator<AbstractFrames>),
    /// `ZoneAllocator::with_arena`.
    Arena(ZoneAllocator<Arena>),
}

/// Evaluates `$body` with `$za` bound to the handle's `ZoneAllocator`, whichever
/// backend it has.
macro_rules! with_za {
    ($inner:expr, |$za:ident| $body:expr) => {
        match $inner {
            $crate::handle::Inner::Frames($za) => $body,
            $crate::handle::Inner::Arena($za) => $body,
        }
    };
}
pub(crate) use with_za;

// The header gives one handle to many threads at once, and lets any thread
// destroy it: what stands behind a handle must be `Sync` and `Send`.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Inner>();
};

/// The opaque `struct zonealloc` of the header.
///
/// Invariant: `magic` is `LIVE` and `inner` points to a live boxed `Inner`, or
/// `magic` is `DEAD` and `inner` is null. The shell is never freed.
#[allow(non_camel_case_types)]
pub struct zonealloc {
    magic: AtomicU64,
    inner: AtomicPtr<Inner>,
}

impl zonealloc {
    /// A new handle owning `inner`, for C to keep.
    pub(crate) fn create(inner: Inner) -> *mut zonealloc {
        let inner = Box::into_raw(Box::new(inner));
        Box::into_raw(Box::new(zonealloc {
            magic: AtomicU64::new(LIVE),
            inner: AtomicPtr::new(inner),
        }))
    }

    /// The allocator behind `za`, or `BadHandle` for NULL, a misaligned pointer
    /// or a destroyed handle.
    ///
    /// # Safety
    /// `za` is NULL, misaligned, or a value `zonealloc::create` returned (live or
    /// destroyed); if it is live, no `destroy` of it runs during `'a`.
    pub(crate) unsafe fn resolve<'a>(za: *const zonealloc) -> Result<&'a Inner, Failure> {
        if za.is_null() || !za.is_aligned() {
            return Err(Status::BadHandle.into());
        }
        // SAFETY: by the contract `za` came from `create`, and shells are never
        // freed, so it points to an initialised `zonealloc` for the life of the
        // process.
        let shell = unsafe { &*za };
        // Relaxed is enough for both loads: a handle reaches another thread only
        // through the caller's own synchronisation (a thread start, a mutex, a
        // release/acquire pair), which orders its creation before this call, and
        // a destroy may not overlap the call, so no store races with these loads.
        if shell.magic.load(Ordering::Relaxed) != LIVE {
            return Err(Status::BadHandle.into());
        }
        let inner = shell.inner.load(Ordering::Relaxed);
        if inner.is_null() {
            return Err(Status::BadHandle.into());
        }
        // SAFETY: `magic` is `LIVE`, so `inner` is the box `create` made, and by
        // the contract no destroy frees it during `'a`.
        Ok(unsafe { &*inner })
    }

    /// Drops the allocator behind `za` and marks the shell dead. Of two destroys
    /// of one handle, racing or not, exactly one succeeds; the other gets
    /// `BadHandle`.
    ///
    /// # Safety
    /// As `resolve`, and no other call on `za` runs or starts while this one runs.
    pub(crate) unsafe fn destroy(za: *mut zonealloc) -> Result<(), Failure> {
        if za.is_null() || !za.is_aligned() {
            return Err(Status::BadHandle.into());
        }
        // SAFETY: as in `resolve`: a value from `create`, whose shell is never freed.
        let shell = unsafe { &*za };
        // One compare-and-swap decides which destroy owns the allocator. Relaxed:
        // the winner alone touches `inner` afterwards, and the caller's contract
        // keeps every other call off the handle, so nothing else is published.
        if shell
            .magic
            .compare_exchange(LIVE, DEAD, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return Err(Status::BadHandle.into());
        }
        let inner = shell.inner.swap(ptr::null_mut(), Ordering::Relaxed);
        if !inner.is_null() {
            // SAFETY: `inner` is the box `create` made; this destroy won the
            // compare-and-swap and took the pointer, so nothing else frees it,
            // and by the contract no other call is using it.
            drop(unsafe { Box::from_raw(inner) });
        }
        Ok(())
    }
}

// -----------------------------------------------------------------------------
// The guard
// -----------------------------------------------------------------------------

/// Runs an exported function's body: `ZONEALLOC_OK`, the failure's code (kept as
/// the thread's last error), or `ZONEALLOC_ERR_PANIC` if the body panicked.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Failure>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => Status::Ok.code(),
        Ok(Err(f)) => f.record(),
        Err(payload) => Failure::Panic(panic_message(payload)).record(),
    }
}

/// `guard` for a call that answers a length: the length, or the negative code.
pub(crate) fn guard_len(body: impl FnOnce() -> Result<usize, Failure>) -> i64 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(n)) => i64::try_from(n).unwrap_or(i64::MAX),
        Ok(Err(f)) => f.record().into(),
        Err(payload) => i64::from(Failure::Panic(panic_message(payload)).record()),
    }
}

/// `guard` for a call on a handle: resolves it first.
///
/// # Safety
/// `za` as `zonealloc::resolve` requires.
pub(crate) unsafe fn on_handle(
    za: *const zonealloc,
    body: impl FnOnce(&Inner) -> Result<(), Failure>,
) -> c_int {
    guard(|| {
        // SAFETY: passed on from this function's contract.
        let inner = unsafe { zonealloc::resolve(za) }?;
        body(inner)
    })
}

/// `guard_len` for a call on a handle.
///
/// # Safety
/// `za` as `zonealloc::resolve` requires.
pub(crate) unsafe fn on_handle_len(
    za: *const zonealloc,
    body: impl FnOnce(&Inner) -> Result<usize, Failure>,
) -> i64 {
    guard_len(|| {
        // SAFETY: passed on from this function's contract.
        let inner = unsafe { zonealloc::resolve(za) }?;
        body(inner)
    })
}

/// A panic payload's message. The payload is dropped inside a `catch_unwind` of
/// its own, since its destructor may panic too.
pub(crate) fn panic_message(payload: Box<dyn Any + Send>) -> String {
    let msg = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    };
    let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::with_last;

    #[test]
    fn a_panicking_body_answers_the_panic_code_with_its_message() {
        let code = guard(|| panic!("deliberate {}", 42));
        assert_eq!(code, Status::Panic.code());
        let msg = with_last(|f| f.map(ToString::to_string)).unwrap();
        assert!(msg.contains("deliberate 42"), "{msg}");
        assert_eq!(
            guard_len(|| panic!("again")),
            i64::from(Status::Panic.code())
        );
    }

    #[test]
    fn null_misaligned_and_destroyed_handles_are_refused() {
        // SAFETY: NULL and a misaligned pointer are never dereferenced.
        unsafe {
            assert!(zonealloc::resolve(ptr::null()).is_err());
            assert!(zonealloc::resolve(ptr::dangling::<u8>().wrapping_add(1).cast()).is_err());
        }
        let za = zonealloc::create(Inner::Frames(
            ZoneAllocator::new(zonealloc_core::Config::with_bytes(4 << 20)).unwrap(),
        ));
        // SAFETY: `za` came from `create`; nothing else uses it.
        unsafe {
            assert!(zonealloc::resolve(za).is_ok());
            assert!(zonealloc::destroy(za).is_ok());
            assert!(zonealloc::resolve(za).is_err());
            assert!(zonealloc::destroy(za).is_err());
        }
    }
}
