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
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Tells the processor (or loom's scheduler) that this thread is spinning.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// One wait of a retry loop whose other side is a few instructions of another
/// thread: spins 64 times, then yields the CPU (under `std`), in case that thread
/// was preempted; a kernel build keeps spinning.
#[inline]
pub(crate) fn backoff(spins: &mut u32) {
    *spins = spins.saturating_add(1);
    if *spins < 64 {
        spin_hint();
    } else {
        #[cfg(all(feature = "std", not(loom)))]
        std::thread::yield_now();
        #[cfg(any(loom, not(feature = "std")))]
        spin_hint();
    }
}

/// The interrupt guard a lock takes around its critical section: the allocator's
/// `Config::platform`, or `None` (no interrupts to keep out: today's locks).
pub(crate) type Irq = Option<&'static dyn crate::platform::Platform>;

/// A mutual-exclusion lock with `try_lock`, taken with interrupts disabled through
/// its platform (`spin_lock_irqsave`), so that an interrupt handler on the holder's
/// CPU never waits for it.
pub(crate) struct Lock<T> {
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
    #[cfg(all(not(loom), feature = "std"))]
    inner: parking_lot::Mutex<T>,
    #[cfg(all(not(loom), not(feature = "std")))]
    inner: spin::Mutex<T>,
    irq: Irq,
}

#[cfg(loom)]
type RawGuard<'a, T> = loom::sync::MutexGuard<'a, T>;
#[cfg(all(not(loom), feature = "std"))]
type RawGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(all(not(loom), not(feature = "std")))]
type RawGuard<'a, T> = spin::MutexGuard<'a, T>;

/// Proof that a `Lock` is held; dereferences to the protected data. Dropping it
/// releases the lock, then restores the interrupt state (fields drop in order).
pub(crate) struct LockGuard<'a, T> {
    inner: RawGuard<'a, T>,
    _irq: IrqSaved,
}

impl<T> core::ops::Deref for LockGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> core::ops::DerefMut for LockGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T> Lock<T> {
    /// A lock taken with interrupts disabled through `irq`: the allocator's
    /// platform for a lock that an interrupt handler's call may take, `None` for
    /// one only process context takes (see `platform`).
    pub(crate) fn new(value: T, irq: Irq) -> Lock<T> {
        Lock {
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
            #[cfg(all(not(loom), feature = "std"))]
            inner: parking_lot::Mutex::new(value),
            #[cfg(all(not(loom), not(feature = "std")))]
            inner: spin::Mutex::new(value),
            irq,
        }
    }

    /// Takes the lock, waiting for it, with interrupts disabled first.
    #[inline]
    pub(crate) fn lock(&self) -> LockGuard<'_, T> {
        let irq = IrqSaved::save(self.irq);
        #[cfg(loom)]
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        #[cfg(not(loom))]
        let inner = self.inner.lock();
        LockGuard { inner, _irq: irq }
    }

    /// Takes the lock if it is free now; never waits (with interrupts disabled
    /// for as long as it holds it).
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<LockGuard<'_, T>> {
        let irq = IrqSaved::save(self.irq);
        #[cfg(loom)]
        let inner = self.inner.try_lock().ok()?;
        #[cfg(not(loom))]
        let inner = self.inner.try_lock()?;
        Some(LockGuard { inner, _irq: irq })
    }
}

/// Fork support (`fork`): a lock kept held past its guard, and released later by
/// whoever took it that way. Not under loom, whose model has no `fork`.
#[cfg(not(loom))]
impl<T> LockGuard<'_, T> {
    /// Keeps the lock held after this guard is gone: interrupts are restored now,
    /// the lock stays taken until `Lock::force_unlock`.
    pub(crate) fn keep_locked(self) {
        let LockGuard { inner, _irq } = self;
        core::mem::forget(inner);
        drop(_irq);
    }
}

#[cfg(not(loom))]
impl<T> Lock<T> {
    /// Releases a lock kept held by `LockGuard::keep_locked`.
    ///
    /// # Safety
    /// The lock is held through `keep_locked` (by this thread, or, in the child
    /// of a `fork`, by the thread that forked), and no guard of it is live.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn force_unlock(&self) {
        // SAFETY: the caller's contract: the lock is held and no guard will
        // release it a second time.
        unsafe { self.inner.force_unlock() }
    }

    /// In the child of a `fork`, releases a lock kept held by `keep_locked`
    /// before the fork. Unlike `force_unlock`, never hands the lock over:
    /// parking_lot's unlock may pass a lock straight to a thread parked on it
    /// (its fairness), and in the child that thread does not exist. The lock's
    /// state is set to "free, nobody parked".
    ///
    /// # Safety
    /// As `force_unlock`, and the calling thread is the only one of its process.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn reset_in_child(&self) {
        #[cfg(feature = "std")]
        {
            // parking_lot's raw mutex is one atomic byte (its state: locked and
            // parked bits); a one-byte struct of one field has it at offset 0.
            const _: () = assert!(core::mem::size_of::<parking_lot::RawMutex>() == 1);
            // SAFETY: the raw mutex is only read through, as its state byte:
            // the size check above makes that byte its one field, an atomic
            // (so writing through a shared reference is allowed).
            let state = unsafe {
                &*(self.inner.raw() as *const parking_lot::RawMutex
                    as *const core::sync::atomic::AtomicU8)
            };
            state.store(0, Ordering::Release);
        }
        #[cfg(not(feature = "std"))]
        // SAFETY: the caller's contract; a spinning lock hands nothing over.
        unsafe {
            self.inner.force_unlock()
        }
    }
}

#[cfg(not(loom))]
impl<T> TryLockGuard<'_, T> {
    /// Keeps the lock held after this guard is gone (as `LockGuard::keep_locked`).
    pub(crate) fn keep_locked(self) {
        let mut me = core::mem::ManuallyDrop::new(self);
        // SAFETY: the guard is never dropped (`ManuallyDrop`), so its interrupt
        // state is restored here once, and the lock stays held.
        #[allow(unsafe_code)]
        unsafe {
            core::mem::ManuallyDrop::drop(&mut me.irq)
        };
    }
}

#[cfg(not(loom))]
impl<T> TryLock<T> {
    /// Releases a lock kept held by `TryLockGuard::keep_locked`.
    ///
    /// # Safety
    /// As `Lock::force_unlock`.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn force_unlock(&self) {
        // Release: as a guard's drop.
        self.locked.store(false, Ordering::Release);
    }

    /// Takes the lock, waiting for it, and keeps it held past any guard (fork's
    /// `prefork`); `force_unlock` releases it.
    pub(crate) fn lock_kept(&self) {
        self.lock().keep_locked();
    }
}

#[cfg(not(loom))]
impl<T> Lock<T> {
    /// Takes the lock, waiting for it, and keeps it held past any guard (fork's
    /// `prefork`); `force_unlock` releases it.
    pub(crate) fn lock_kept(&self) {
        self.lock().keep_locked();
    }
}

/// A sequence counter: even when no write is in progress, odd during a write.
///
/// Writers (always serialised by a `Lock`) call `write_begin`/`write_end` around a
/// change; readers take `try_read_begin`, read relaxed atomics, and retry while
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
        // Acquire load in `try_read_begin`).
        self.0.store(s.wrapping_add(1), Ordering::Release);
    }

    /// The sequence to validate against, or `None` while a write is in progress.
    #[inline]
    pub(crate) fn try_read_begin(&self) -> Option<u32> {
        let s = self.0.load(Ordering::Acquire);
        (s & 1 == 0).then_some(s)
    }

    /// Whether a write overlapped the reads since `try_read_begin` returned `start`.
    #[inline]
    pub(crate) fn read_retry(&self, start: u32) -> bool {
        // Acquire fence: the data loads above are ordered before this re-read
        // (pairs with the Release fence in `write_begin`).
        fence(Ordering::Acquire);
        self.0.load(Ordering::Relaxed) != start
    }
}

use crate::platform::IrqSaved;
#[cfg(not(loom))]
use core::cell::UnsafeCell;
#[cfg(loom)]
use loom::cell::UnsafeCell;

/// A lock built for per-CPU data: `try_lock` is one compare-and-swap and `unlock` one
/// release store, so the uncontended fast path costs a single locked instruction.
/// Waiting (`lock`, used only by drains and statistics) spins, then yields the CPU
/// under `std`, since the holder may be a preempted thread. Under loom it is built
/// from loom's atomic and cell, so the model checker explores the lock itself.
pub(crate) struct TryLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
    irq: Irq,
}

// SAFETY: the lock hands out `&mut T` to one holder at a time, so sharing the lock
// between threads is sound whenever sending the value would be.
#[allow(unsafe_code)]
unsafe impl<T: Send> Sync for TryLock<T> {}
// SAFETY: owning the lock is owning the value.
#[allow(unsafe_code)]
unsafe impl<T: Send> Send for TryLock<T> {}

/// Proof that a `TryLock` is held; dereferences to the protected data.
pub(crate) struct TryLockGuard<'a, T> {
    lock: &'a TryLock<T>,
    /// Loom's record of this access, checked against concurrent ones.
    #[cfg(loom)]
    ptr: loom::cell::MutPtr<T>,
    /// Restored after the lock is released (see `Drop`).
    irq: core::mem::ManuallyDrop<IrqSaved>,
}

impl<T> TryLock<T> {
    /// A lock taken with interrupts disabled through `irq` (as `Lock::new`).
    pub(crate) fn new(value: T, irq: Irq) -> TryLock<T> {
        TryLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
            irq,
        }
    }

    /// Takes the lock if it is free now, with interrupts disabled first (and
    /// restored at once if it is not free).
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<TryLockGuard<'_, T>> {
        let irq = IrqSaved::save(self.irq);
        // Acquire on success: the holder sees everything the previous holder wrote
        // before its Release store in `drop`.
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| TryLockGuard {
                lock: self,
                #[cfg(loom)]
                ptr: self.value.get_mut(),
                irq: core::mem::ManuallyDrop::new(irq),
            })
    }

    pub(crate) fn lock(&self) -> TryLockGuard<'_, T> {
        let mut spins = 0u32;
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            // Relaxed: only a hint of when to retry the CAS above.
            while self.locked.load(Ordering::Relaxed) {
                backoff(&mut spins);
            }
        }
    }
}

impl<T> Drop for TryLockGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Release: publishes the holder's writes to the next Acquire in `try_lock`.
        self.lock.locked.store(false, Ordering::Release);
        // SAFETY: dropped once, here, after the lock is released: interrupts come
        // back only once nothing of the lock is held.
        #[allow(unsafe_code)]
        unsafe {
            core::mem::ManuallyDrop::drop(&mut self.irq)
        };
    }
}

impl<T> core::ops::Deref for TryLockGuard<'_, T> {
    type Target = T;
    #[inline]
    #[allow(unsafe_code)]
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while `locked` is held by its creator, so no
        // other reference to the value is live.
        #[cfg(not(loom))]
        return unsafe { &*self.lock.value.get() };
        // SAFETY: as above; loom tracks the access through `ptr`.
        #[cfg(loom)]
        return unsafe { &*self.ptr.deref() };
    }
}

impl<T> core::ops::DerefMut for TryLockGuard<'_, T> {
    #[inline]
    #[allow(unsafe_code)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only access.
        #[cfg(not(loom))]
        return unsafe { &mut *self.lock.value.get() };
        // SAFETY: as above; loom tracks the access through `ptr`.
        #[cfg(loom)]
        return unsafe { self.ptr.deref() };
    }
}
