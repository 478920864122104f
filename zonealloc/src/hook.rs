//! Calling code an owner supplies: the one rule every hook obeys.
//!
//! Bottom layer, beside `sync`. The allocator calls an owner's code in two places:
//! the `Migrate` callback (compaction moving one of the owner's blocks) and
//! `Config::cpu_id` (which CPU's lists a call uses). A `Backend` is the third kind
//! of owner code; its own contract (an `unsafe trait`) covers it.
//!
//! # The rule
//! No hook can leave the allocator half done, whatever it does:
//! * **It may panic.** With `std` the allocator catches the unwind at the call
//!   (`call`) and finishes the step as if the hook had answered the safest thing:
//!   `cpu_id` reads as CPU 0 (any CPU is a valid answer), and a migration callback
//!   as a refusal, the block staying where it is; the compaction run then ends and
//!   the explicit calls answer `CompactError::OwnerPanicked`. The panic message
//!   still reaches the panic hook (standard error by default). Besides, `cpu_id` is
//!   read before a call takes anything, so even an unwind that nothing catches (a
//!   `no_std` build with unwinding) leaves no frame claimed. A `no_std` kernel
//!   builds with `panic = "abort"`, where none of this arises.
//! * **It may call the allocator.** Any call a callback makes runs as from any
//!   other thread, except the one that would wait for what the callback's own
//!   thread holds: explicit compaction (`compact_zone`, `compact_node`) of a zone
//!   being compacted. From inside a migration callback those take a zone only if
//!   its compaction lock is free at once, and otherwise answer
//!   `CompactError::Reentered` (`InCallback`); direct and proactive compaction
//!   already pass over a zone another run holds. So no callback waits on a lock,
//!   and no cycle of waits can form. The record of the callbacks a thread is in
//!   is a fixed array (entering a callback calls no heap): past
//!   `CALLBACK_NESTING` (8) callbacks nested in one another, such a call answers
//!   `Reentered` for any zone being compacted, its own allocator's or not.

use crate::sync::{AtomicU32, Ordering};

/// A hook unwound (with `std`; without it a panic is not caught).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Panicked;

/// Runs owner code `f`, catching its unwind with `std`.
#[inline]
pub(crate) fn call<R>(f: impl FnOnce() -> R) -> Result<R, Panicked> {
    #[cfg(feature = "std")]
    {
        // The payload is dropped here: the panic hook has already reported it.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|_| Panicked)
    }
    #[cfg(not(feature = "std"))]
    {
        Ok(f())
    }
}

/// Migration callbacks a thread's record holds, nested (see `INSIDE`): a callback
/// that compacts another allocator, whose callback compacts a third, and so on.
/// Past this depth a compaction call from inside answers `Reentered` rather
/// than wait, as the allocators of the deeper callbacks are not recorded.
#[cfg(feature = "std")]
pub(crate) const CALLBACK_NESTING: usize = 8;

/// The allocators (by the address of their compaction state) whose migration
/// callback a thread is inside, outermost first, and how many callbacks it is
/// inside (the first `CALLBACK_NESTING` recorded). A fixed array, so that
/// entering a callback never calls the heap.
#[cfg(feature = "std")]
#[derive(Clone, Copy)]
struct Inside {
    keys: [usize; CALLBACK_NESTING],
    depth: usize,
}

#[cfg(feature = "std")]
impl Inside {
    const NONE: Inside = Inside {
        keys: [0; CALLBACK_NESTING],
        depth: 0,
    };

    fn enter(mut self, key: usize) -> Inside {
        if let Some(k) = self.keys.get_mut(self.depth) {
            *k = key;
        }
        self.depth += 1;
        self
    }

    /// Leaves the innermost callback (guards end in the reverse order of their
    /// start, unwinding included).
    fn leave(mut self) -> Inside {
        self.depth -= 1;
        self
    }

    /// Whether a callback of allocator `key` may be one this thread is inside.
    fn holds(&self, key: usize) -> bool {
        self.depth > CALLBACK_NESTING || self.keys[..self.depth].contains(&key)
    }
}

#[cfg(all(feature = "std", not(loom)))]
std::thread_local! {
    /// The migration callbacks this thread is inside.
    static INSIDE: core::cell::Cell<Inside> = const { core::cell::Cell::new(Inside::NONE) };
}

#[cfg(loom)]
loom::thread_local! {
    static INSIDE: core::cell::Cell<Inside> = core::cell::Cell::new(Inside::NONE);
}

/// Marks the span of one migration callback of allocator `key`: this thread's
/// (with `std`), counted in `running` as well (any thread's, for `no_std`).
pub(crate) struct InCallback<'a> {
    running: &'a AtomicU32,
}

impl<'a> InCallback<'a> {
    /// Enters a callback of allocator `key`, whose running callbacks `running`
    /// counts.
    pub(crate) fn enter(key: usize, running: &'a AtomicU32) -> InCallback<'a> {
        #[cfg(feature = "std")]
        INSIDE.with(|v| v.set(v.get().enter(key)));
        #[cfg(not(feature = "std"))]
        let _ = key;
        running.fetch_add(1, Ordering::Relaxed);
        InCallback { running }
    }

    /// Whether a compaction call of allocator `key` made now may wait for a zone's
    /// compaction lock: not from inside one of that allocator's migration callbacks
    /// on this thread (with `std`), not while any runs at all (without `std`,
    /// where threads cannot be told apart).
    pub(crate) fn may_wait(key: usize, running: &AtomicU32) -> bool {
        #[cfg(feature = "std")]
        {
            let _ = running;
            !INSIDE.with(|v| v.get().holds(key))
        }
        #[cfg(not(feature = "std"))]
        {
            let _ = key;
            running.load(Ordering::Relaxed) == 0
        }
    }
}

impl Drop for InCallback<'_> {
    fn drop(&mut self) {
        #[cfg(feature = "std")]
        INSIDE.with(|v| {
            debug_assert!(v.get().depth > 0);
            v.set(v.get().leave());
        });
        self.running.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(all(feature = "std", not(loom)))]
std::thread_local! {
    /// Reclaim passes (direct reclaim, kswapd's) this thread is inside.
    static RECLAIMING: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

#[cfg(loom)]
loom::thread_local! {
    static RECLAIMING: core::cell::Cell<u32> = core::cell::Cell::new(0);
}

/// Marks the span of a reclaim pass (the shrinkers it calls run inside it):
/// this thread's (with `std`), counted in `running` as well (any thread's, for
/// `no_std`). Linux's `PF_MEMALLOC`.
pub(crate) struct InReclaim<'a> {
    running: &'a AtomicU32,
}

impl<'a> InReclaim<'a> {
    pub(crate) fn enter(running: &'a AtomicU32) -> InReclaim<'a> {
        #[cfg(feature = "std")]
        RECLAIMING.with(|c| c.set(c.get() + 1));
        running.fetch_add(1, Ordering::Relaxed);
        InReclaim { running }
    }

    /// Whether an allocation made now may reclaim: not from inside a reclaim
    /// pass on this thread (with `std`), not while any runs (without `std`).
    pub(crate) fn may_reclaim(running: &AtomicU32) -> bool {
        #[cfg(feature = "std")]
        {
            let _ = running;
            RECLAIMING.with(|c| c.get() == 0)
        }
        #[cfg(not(feature = "std"))]
        {
            running.load(Ordering::Relaxed) == 0
        }
    }
}

impl Drop for InReclaim<'_> {
    fn drop(&mut self) {
        #[cfg(feature = "std")]
        RECLAIMING.with(|c| c.set(c.get() - 1));
        self.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A background thread of the allocator's (the reporting worker, kswapd): it
/// runs its body until the body returns or the handle is dropped, which sets
/// the stop flag the body polls, unparks the thread and joins it.
#[cfg(all(feature = "std", not(loom)))]
pub(crate) struct Background {
    stop: alloc::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The process that started the thread: in a child of `fork` the thread
    /// does not exist, and is neither woken nor joined.
    pid: u32,
}

#[cfg(all(feature = "std", not(loom)))]
impl Background {
    /// Starts thread `name` running `body(stop)`; the body returns once `stop`
    /// reads `true` after a wake-up.
    pub(crate) fn spawn(
        name: &str,
        body: impl FnOnce(&std::sync::atomic::AtomicBool) + Send + 'static,
    ) -> std::io::Result<Background> {
        let stop = alloc::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(&s))?;
        Ok(Background {
            stop,
            thread: Some(thread),
            pid: std::process::id(),
        })
    }

    /// Whether the thread was started by this process (not a parent of a
    /// `fork` child) and has not ended.
    pub(crate) fn is_running(&self) -> bool {
        self.spawned_here() && self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Whether this process started the thread (`false` in a `fork` child).
    pub(crate) fn spawned_here(&self) -> bool {
        self.pid == std::process::id()
    }

    /// The thread, to unpark.
    pub(crate) fn thread(&self) -> Option<&std::thread::Thread> {
        self.thread.as_ref().map(|t| t.thread())
    }
}

#[cfg(all(feature = "std", not(loom)))]
impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(t) = self.thread.take() {
            if !self.spawned_here() {
                // A `fork` child's copy of the handle: its thread never
                // existed here, and joining it would wait forever.
                core::mem::forget(t);
                return;
            }
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(all(test, feature = "std", not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_caught_and_a_value_passes_through() {
        assert_eq!(call(|| 7), Ok(7));
        let r: Result<u32, Panicked> = call(|| panic!("owner code"));
        assert_eq!(r, Err(Panicked));
    }

    #[test]
    fn only_the_callbacks_own_thread_and_allocator_are_refused_a_wait() {
        let running = AtomicU32::new(0);
        assert!(InCallback::may_wait(1, &running));
        {
            let _outer = InCallback::enter(1, &running);
            let _inner = InCallback::enter(2, &running);
            assert!(!InCallback::may_wait(1, &running));
            assert!(!InCallback::may_wait(2, &running));
            assert!(InCallback::may_wait(3, &running));
            let other = std::thread::spawn(|| InCallback::may_wait(1, &AtomicU32::new(0)));
            assert!(other.join().unwrap(), "another thread may wait");
        }
        assert!(InCallback::may_wait(1, &running));
        assert_eq!(running.load(Ordering::Relaxed), 0);
        // A callback that unwinds leaves the mark as it found it.
        let r = call(|| {
            let _g = InCallback::enter(1, &running);
            panic!("owner code");
        });
        assert_eq!(r, Err(Panicked));
        assert!(InCallback::may_wait(1, &running));
    }

    #[test]
    fn callbacks_nested_past_the_record_refuse_every_wait() {
        let running = AtomicU32::new(0);
        let keys = 10..10 + CALLBACK_NESTING;
        let guards: Vec<_> = keys
            .clone()
            .map(|k| InCallback::enter(k, &running))
            .collect();
        assert!(keys.clone().all(|k| !InCallback::may_wait(k, &running)));
        assert!(InCallback::may_wait(1, &running), "not one of them");
        let deeper = InCallback::enter(99, &running);
        assert!(
            !InCallback::may_wait(1, &running),
            "unrecorded: any may be it"
        );
        drop(deeper);
        assert!(InCallback::may_wait(1, &running));
        drop(guards);
        assert!(keys.clone().all(|k| InCallback::may_wait(k, &running)));
    }
}
