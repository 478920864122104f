//! Synchronisation primitives, chosen per build: std, no_std, or loom model checking.
//!
//! The rest of the crate imports its atomics and its `Lock` from here so that one
//! `--cfg loom` build swaps every one of them for loom's instrumented versions.
//!
//! * `Lock<T>`: a mutex with `try_lock`. Under `std` it is parking_lot's (a short spin,
//!   then the thread parks: stress tests run more threads than cores, and a pure
//!   spinlock whose holder was preempted would burn the other core). Without `std` it
//!   is a spinlock, as in a kernel where lock holders are not preempted.
//! * `SeqCount`: the writer side is always inside a `Lock`; readers retry, never block
//!   the writer. Used so statistics read without the zone lock see no torn snapshot.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Tells the processor (or loom's scheduler) that this thread is spinning.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// A mutual-exclusion lock with `try_lock`.
pub(crate) struct Lock<T> {
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
    #[cfg(all(not(loom), feature = "std"))]
    inner: parking_lot::Mutex<T>,
    #[cfg(all(not(loom), not(feature = "std")))]
    inner: spin::Mutex<T>,
}

/// Proof that a `Lock` is held; dereferences to the protected data.
#[cfg(loom)]
pub(crate) type LockGuard<'a, T> = loom::sync::MutexGuard<'a, T>;
/// Proof that a `Lock` is held; dereferences to the protected data.
#[cfg(all(not(loom), feature = "std"))]
pub(crate) type LockGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
/// Proof that a `Lock` is held; dereferences to the protected data.
#[cfg(all(not(loom), not(feature = "std")))]
pub(crate) type LockGuard<'a, T> = spin::MutexGuard<'a, T>;

impl<T> Lock<T> {
    pub(crate) fn new(value: T) -> Lock<T> {
        Lock {
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
            #[cfg(all(not(loom), feature = "std"))]
            inner: parking_lot::Mutex::new(value),
            #[cfg(all(not(loom), not(feature = "std")))]
            inner: spin::Mutex::new(value),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> LockGuard<'_, T> {
        #[cfg(loom)]
        return self.inner.lock().unwrap_or_else(|e| e.into_inner());
        #[cfg(not(loom))]
        self.inner.lock()
    }

    #[inline]
    pub(crate) fn try_lock(&self) -> Option<LockGuard<'_, T>> {
        #[cfg(loom)]
        return self.inner.try_lock().ok();
        #[cfg(not(loom))]
        self.inner.try_lock()
    }
}

/// A sequence counter: even when no write is in progress, odd during a write.
///
/// Writers (always serialised by a `Lock`) call `write_begin`/`write_end` around a
/// change; readers take `read_begin`, read relaxed atomics, and retry while
/// `read_retry` says a write overlapped.
pub(crate) struct SeqCount(AtomicU32);

impl SeqCount {
    pub(crate) fn new() -> SeqCount {
        SeqCount(AtomicU32::new(0))
    }

    /// Marks the start of a write. Caller holds the lock that serialises writers.
    #[inline]
    pub(crate) fn write_begin(&self) {
        // Relaxed load: only writers store, and they are serialised by the lock.
        let s = self.0.load(Ordering::Relaxed);
        self.0.store(s.wrapping_add(1), Ordering::Relaxed);
        // Release fence: the odd value is visible before any data store that follows
        // (pairs with the Acquire fence in `read_retry`).
        fence(Ordering::Release);
    }

    /// Marks the end of a write.
    #[inline]
    pub(crate) fn write_end(&self) {
        let s = self.0.load(Ordering::Relaxed);
        // Release store: data stores happen-before the even value (pairs with the
        // Acquire load in `read_begin`).
        self.0.store(s.wrapping_add(1), Ordering::Release);
    }

    /// Waits for no write in progress and returns the sequence to validate against.
    #[inline]
    pub(crate) fn read_begin(&self) -> u32 {
        loop {
            let s = self.0.load(Ordering::Acquire);
            if s & 1 == 0 {
                return s;
            }
            spin_hint();
        }
    }

    /// Whether a write overlapped the reads since `read_begin` returned `start`.
    #[inline]
    pub(crate) fn read_retry(&self, start: u32) -> bool {
        // Acquire fence: the data loads above are ordered before this re-read
        // (pairs with the Release fence in `write_begin`).
        fence(Ordering::Acquire);
        self.0.load(Ordering::Relaxed) != start
    }
}
