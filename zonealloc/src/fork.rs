//! Safety across `fork()`: what `ZoneAllocator::prefork` takes, what
//! `postfork_parent` and `postfork_child` give back, and (with `std` on Unix) the
//! registry of live allocators whose handlers `pthread_atfork` runs.
//!
//! Part of the unsafe island: locks are kept held past their guards from prefork
//! to postfork, and the registry reaches allocators through raw pointers.
//!
//! A child of `fork` has one thread, the one that forked, and a copy of every
//! other thread's memory as it was at that instant: a lock one of them held
//! stays held, a block one of them had taken off a list belongs to nobody. So
//! `prefork` takes every lock a child could need, in an order consistent with
//! the code's own nesting (a lock is taken only after every lock that is ever
//! held while it is taken):
//!
//! 1. `hotplug` (offlining, onlining, `add_memory`: it holds everything else);
//! 2. the reporting registration (held while the batch and the zone locks are
//!    taken);
//! 3. each CMA area's `contig` lock (a `cma_alloc` holds it while it compacts,
//!    drains and migrates);
//! 4. each zone's compaction lock (held for a zone's compaction run);
//! 5. the `LocalCache` registry, the shrinker registry and the migrator slot
//!    (short sections under which nothing of the allocator is taken);
//! 6. per zone, each CPU's pcp lock (stopping that CPU's stacks and moving their
//!    blocks onto its lists, as `Zone::pcp_lock` does), then the zone lock;
//! 7. leaves taken under zone locks or alone: the reporting batch, each CMA
//!    area's bitmap, the bad-page reports, kswapd's thread slot.
//!
//! A section that holds one of them runs to its end first; a thread that would
//! take one waits (in the parent) until `postfork_parent` releases them in the
//! reverse order and resumes the stacks it stopped.
//!
//! `postfork_child` clears the stacks' `stopped` and `busy` flags (the stoppers
//! and the pinned sections were other threads' or prefork's), releases every
//! lock, and then, with each zone's locks taken again, gives back what belonged
//! to threads that do not exist in the child: frees deferred by
//! `free_pages_nolock` are merged; a block `Frozen` (a free between its
//! compare-and-swap and its list, or a reporting pass's block) or with a
//! per-CPU state on no per-CPU list or stack (an allocation between its pop and
//! its handing out, or a free between its state and its push) goes to the buddy
//! lists, once; a page a multi-page free had claimed, or a lazily split block
//! half materialised, is left allocated (the free's outcome cannot be known).
//! Passes that counted themselves running (reporting, reclaim, shrinkers) are
//! counted out, and kswapd's thread slot is cleared so that the child may start
//! its own worker.

#![allow(unsafe_code)]

use alloc::sync::Weak;
use alloc::vec::Vec;

use crate::cma_state::CmaArea;
use crate::compact_state::CompactState;
use crate::debug::BadPageReport;
use crate::frame::{Tag, Word};
use crate::local_state::CacheShared;
use crate::reporting_state::ReportingState;
use crate::shrinker::ReclaimState;
use crate::stacks::Mode;
use crate::sync::{Lock, Ordering};
use crate::types::NR_PCP_LISTS;
use crate::zone::Zone;

/// The allocator's registry of `LocalCache`s.
pub(crate) type Caches = Lock<Vec<Weak<CacheShared>>>;

/// The parts of an allocator that fork's handlers lock and fix up, each at an
/// address that does not change while the allocator lives (on the heap).
pub(crate) struct ForkParts<'a> {
    pub zones: &'a [Zone],
    pub compact: &'a CompactState,
    pub reporting: &'a ReportingState,
    pub reclaim: &'a ReclaimState,
    pub cma: &'a [CmaArea],
    pub hotplug: &'a Lock<()>,
    pub caches: &'a Caches,
    pub bad_pages: &'a Lock<Vec<BadPageReport>>,
}

impl ForkParts<'_> {
    /// Takes every lock, in the order of the module documentation, and keeps
    /// them held.
    pub(crate) fn prefork(&self) {
        self.hotplug.lock_kept();
        self.reporting.registered.lock_kept();
        for a in self.cma {
            a.contig.lock_kept();
        }
        for c in self.compact.zones.iter() {
            c.lock_kept();
        }
        self.caches.lock_kept();
        self.reclaim.shrinkers.lock_kept();
        self.compact.migrator.lock_kept();
        for z in self.zones {
            for cpu in 0..z.pcp.len() {
                let stopped = z.pcp_lock(cpu).keep_locked();
                z.pcp[cpu].fork_stopped.store(stopped, Ordering::Relaxed);
            }
            z.fork_lock();
        }
        self.reporting.batch.lock_kept();
        for a in self.cma {
            a.bitmap.lock_kept();
        }
        self.bad_pages.lock_kept();
        #[cfg(feature = "std")]
        self.reclaim.thread.lock_kept();
    }

    /// Releases every lock `prefork` took, in the reverse order: in the parent
    /// (`child` false) resuming the stacks prefork stopped; in the child
    /// leaving them to the caller, which has cleared every stop.
    ///
    /// # Safety
    /// `prefork` took them, in this process or in the parent that forked it,
    /// and they were not released since.
    unsafe fn release(&self, child: bool) {
        /// Releases a `Lock`: handing it to a parked thread in the parent,
        /// resetting it in the child (whose parked threads do not exist).
        ///
        /// # Safety
        /// As `release`.
        unsafe fn unlock<T>(l: &Lock<T>, child: bool) {
            // SAFETY: the caller's contract.
            unsafe {
                if child {
                    l.reset_in_child()
                } else {
                    l.force_unlock()
                }
            }
        }
        // SAFETY: for every release below, the caller's contract; each lock
        // is released once, and no guard of it is live.
        unsafe {
            #[cfg(feature = "std")]
            unlock(&self.reclaim.thread, child);
            unlock(self.bad_pages, child);
            for a in self.cma.iter().rev() {
                unlock(&a.bitmap, child);
            }
            unlock(&self.reporting.batch, child);
            for z in self.zones.iter().rev() {
                z.fork_unlock(child);
                for cpu in (0..z.pcp.len()).rev() {
                    if !child && z.pcp[cpu].fork_stopped.swap(false, Ordering::Relaxed) {
                        match z.stacks.mode() {
                            Mode::Pinned => z.stacks.resume_pinned(cpu),
                            _ => {
                                for i in (cpu..z.stacks.len()).step_by(z.pcp.len()) {
                                    z.stacks.resume(i);
                                }
                            }
                        }
                    }
                    z.pcp[cpu].force_unlock();
                }
            }
            unlock(&self.compact.migrator, child);
            if child {
                self.reclaim.shrinkers.reset_in_child();
            } else {
                self.reclaim.shrinkers.force_unlock();
            }
            unlock(self.caches, child);
            for c in self.compact.zones.iter().rev() {
                c.force_unlock();
            }
            for a in self.cma.iter().rev() {
                a.contig.force_unlock();
            }
            unlock(&self.reporting.registered, child);
            unlock(self.hotplug, child);
        }
    }

    /// In the parent: releases everything and resumes the stacks.
    ///
    /// # Safety
    /// `prefork` took the locks and they were not released since.
    pub(crate) unsafe fn postfork_parent(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.release(false) }
    }

    /// In the child: clears the other threads' marks, releases everything and
    /// gives back what those threads held (see the module documentation).
    ///
    /// # Safety
    /// `prefork` took the locks in the parent, which then forked this process
    /// from the thread calling this, and they were not released since.
    pub(crate) unsafe fn postfork_child(&self) {
        for z in self.zones {
            z.stacks.clear_after_fork();
            for s in z.pcp.iter() {
                s.fork_stopped.store(false, Ordering::Relaxed);
            }
        }
        // SAFETY: the caller's contract.
        unsafe { self.release(true) };
        self.reporting.running.store(false, Ordering::Relaxed);
        self.reclaim.running.store(0, Ordering::Relaxed);
        self.reclaim.shrinkers.forget_running();
        #[cfg(feature = "std")]
        {
            // The worker's thread does not exist here: dropping its handle
            // only counts a reference down.
            let gone: Option<std::thread::Thread> = self.reclaim.thread.lock().take();
            drop(gone);
        }
        for z in self.zones {
            give_back_orphans(z);
        }
    }
}

/// Marks a per-CPU block as on a list or stack (a reference count the `Pcp`
/// state never has), or clears the mark.
fn mark(z: &Zone, idx: u32, on: bool) {
    let w = z.frames.word(idx);
    debug_assert_eq!(w.tag(), Tag::Pcp);
    z.frames.set_word(idx, w.with_refcount(u32::from(on)));
}

/// In a `fork` child, with no other thread: gives back to the buddy lists every
/// block of zone `z` that a thread of the parent held between two states.
/// Takes the locks one at a time (no other thread can take them; none stops
/// the stacks, whose stops were cleared and which no other thread uses).
fn give_back_orphans(z: &Zone) {
    // 1. Mark every block on a per-CPU list or stack.
    for_each_pcp_block(z, |idx| mark(z, idx, true));
    // 2. Give back the unmarked per-CPU blocks and the frozen ones.
    {
        let mut zl = z.lock();
        zl.free_deferred();
        z.reset_deferred_pages();
        // A reporting pass's blocks are given back with the other frozen ones.
        zl.area.report.in_flight.clear();
        let t = z.frames.view();
        let n = z.frames.len() as u32;
        // Blocks a thread took off the buddy lists under the zone lock and had
        // not yet published when the process forked: their head still reads
        // `Tail` (unlinking a free block makes it one), so no block covers
        // them. Each such run of tails is marked frozen first, in the largest
        // aligned chunks, before anything below merges (a merge makes tails of
        // heads, which the walk must not take for such a run).
        let mut i = 0u32;
        while i < n {
            let w = t.word(i);
            match w.tag() {
                Tag::Hole => i += 1,
                Tag::Tail => {
                    let mut q = i;
                    while q < n && t.word(q) == Word::TAIL {
                        q += 1;
                    }
                    for (pfn, order) in
                        crate::zone::chunks(z.pfn_of(i), u64::from(q - i), z.max_order)
                    {
                        t.set_word(z.idx(pfn), Word::frozen(order));
                    }
                    i = q.max(i + 1);
                }
                _ => i += w.order().nr_pages() as u32,
            }
        }
        let mut i = 0u32;
        while i < n {
            let w = t.word(i);
            let nr = match w.tag() {
                Tag::Hole | Tag::Tail => 1,
                _ => w.order().nr_pages() as u32,
            };
            let orphan = match w.tag() {
                Tag::Pcp => w.refcount() == 0,
                Tag::Frozen if w.is_materializing() => {
                    // Finish the materialisation: every page its own allocated
                    // page, as the block's lazy pages stand for.
                    let page = Word::lazy(w.order(), w.aux(), 0).lazy_page();
                    for k in 0..nr {
                        t.set_word(i + k, page);
                    }
                    false
                }
                Tag::Frozen if w.is_claimed() => {
                    // Left allocated: restored with one reference.
                    if w.order().0 > 0 {
                        t.set_word(i, Word::lazy(w.order(), w.aux(), 0));
                    } else {
                        t.set_word(i, Word::new(Tag::Alloc, 0, w.aux(), 1));
                    }
                    false
                }
                Tag::Frozen => true,
                _ => false,
            };
            if orphan {
                let order = w.order();
                t.set_word(i, Word::frozen(order));
                zl.free_block_locked(z.pfn_of(i), order, false);
                z.events.pgfree.inc(order.nr_pages());
            }
            i += nr.max(1);
        }
    }
    // 3. Clear the marks.
    for_each_pcp_block(z, |idx| mark(z, idx, false));
}

/// Calls `f` with every block on a per-CPU list or stack of zone `z`, taking
/// each CPU's pcp lock in turn.
fn for_each_pcp_block(z: &Zone, mut f: impl FnMut(u32)) {
    for (cpu, slot) in z.pcp.iter().enumerate() {
        let l = slot.lock(z, cpu);
        for list in l.pcp.lists.iter() {
            for idx in list.iter(&z.frames) {
                f(idx);
            }
        }
    }
    for c in 0..z.stacks.len() {
        let Some(cs) = z.stacks.cpu(c) else { continue };
        for p in 0..NR_PCP_LISTS {
            let len = cs.len(p) as usize;
            for s in &cs.slots[p][..len] {
                f(s.load(core::sync::atomic::Ordering::Relaxed));
            }
        }
    }
}

/// Raw pointers to an allocator's `ForkParts`: what the registry keeps.
#[derive(Clone, Copy)]
pub(crate) struct ForkPtrs {
    zones: *const [Zone],
    compact: *const CompactState,
    reporting: *const ReportingState,
    reclaim: *const ReclaimState,
    cma: *const [CmaArea],
    hotplug: *const Lock<()>,
    caches: *const Caches,
    bad_pages: *const Lock<Vec<BadPageReport>>,
}

// SAFETY: the pointees are `Sync` parts of an allocator that is `Sync`; the
// registry uses them only while the allocator lives (it unregisters first
// when dropped).
unsafe impl Send for ForkPtrs {}

impl ForkPtrs {
    /// The pointers of `p`'s parts.
    pub(crate) fn of(p: &ForkParts<'_>) -> ForkPtrs {
        ForkPtrs {
            zones: p.zones,
            compact: p.compact,
            reporting: p.reporting,
            reclaim: p.reclaim,
            cma: p.cma,
            hotplug: p.hotplug,
            caches: p.caches,
            bad_pages: p.bad_pages,
        }
    }

    /// The parts again.
    ///
    /// # Safety
    /// The allocator they were taken from is alive, and its parts are where
    /// they were (each on the heap, owned by it).
    #[allow(dead_code)]
    unsafe fn parts(&self) -> ForkParts<'_> {
        // SAFETY: the caller's contract.
        unsafe {
            ForkParts {
                zones: &*self.zones,
                compact: &*self.compact,
                reporting: &*self.reporting,
                reclaim: &*self.reclaim,
                cma: &*self.cma,
                hotplug: &*self.hotplug,
                caches: &*self.caches,
                bad_pages: &*self.bad_pages,
            }
        }
    }
}

pub(crate) use registry::Registration;

/// The registry of live allocators and the `pthread_atfork` handlers.
#[cfg(all(feature = "std", unix, not(miri)))]
mod registry {
    use super::ForkPtrs;
    use alloc::vec::Vec;
    use core::sync::atomic::{AtomicU64, Ordering};

    /// The live allocators, by registration number. Its lock is held from the
    /// prefork handler to the postfork ones, so the list cannot change between.
    static LIST: parking_lot::Mutex<Vec<(u64, ForkPtrs)>> = parking_lot::const_mutex(Vec::new());
    static NEXT: AtomicU64 = AtomicU64::new(1);
    static ATFORK: std::sync::Once = std::sync::Once::new();

    /// An allocator's place in the registry; dropping it (first of the
    /// allocator's fields) removes it.
    pub(crate) struct Registration(u64);

    impl Registration {
        /// Registers the parts at `p` (set-up: the list may grow), and the
        /// process's handlers the first time.
        pub(crate) fn new(p: ForkPtrs) -> Registration {
            ATFORK.call_once(|| {
                // SAFETY: the handlers are `extern "C"` functions without
                // arguments that never unwind (they call nothing that panics but
                // on a broken invariant, and abort then: see `guarded`).
                let r = unsafe { libc::pthread_atfork(Some(prefork), Some(parent), Some(child)) };
                if r != 0 {
                    std::eprintln!("zonealloc: pthread_atfork failed ({r}); fork is not handled");
                }
            });
            let id = NEXT.fetch_add(1, Ordering::Relaxed);
            LIST.lock().push((id, p));
            Registration(id)
        }
    }

    impl Drop for Registration {
        fn drop(&mut self) {
            let mut l = LIST.lock();
            if let Some(k) = l.iter().position(|e| e.0 == self.0) {
                l.swap_remove(k);
            }
        }
    }

    /// Runs `f`, aborting the process if it panics (a handler must not unwind
    /// into C).
    fn guarded(f: impl FnOnce()) {
        struct Abort;
        impl Drop for Abort {
            fn drop(&mut self) {
                std::process::abort();
            }
        }
        let a = Abort;
        f();
        core::mem::forget(a);
    }

    /// Sets `m`'s lock to free, nobody parked (as `Lock::reset_in_child`).
    ///
    /// # Safety
    /// As `Lock::reset_in_child`.
    unsafe fn reset<T>(m: &parking_lot::Mutex<T>) {
        // SAFETY: as in `Lock::reset_in_child` (the size is checked there).
        let state = unsafe {
            &*(m.raw() as *const parking_lot::RawMutex as *const core::sync::atomic::AtomicU8)
        };
        state.store(0, Ordering::Release);
    }

    extern "C" fn prefork() {
        guarded(|| {
            let l = LIST.lock();
            for (_, p) in l.iter() {
                // SAFETY: registered allocators are alive: their drop waits
                // for this lock to unregister.
                unsafe { p.parts() }.prefork();
            }
            core::mem::forget(l);
        });
    }

    extern "C" fn parent() {
        guarded(|| {
            // SAFETY: `prefork` holds the list's lock (kept past its guard):
            // nothing changes the list until it is released below.
            let l = unsafe { &*LIST.data_ptr() };
            for (_, p) in l.iter().rev() {
                // SAFETY: alive (as in `prefork`), and `prefork` locked them.
                unsafe { p.parts().postfork_parent() };
            }
            // SAFETY: held since `prefork`, released once.
            unsafe { LIST.force_unlock() };
        });
    }

    extern "C" fn child() {
        guarded(|| {
            // SAFETY: as in `parent`: the parent's prefork held the lock when
            // this process was forked from the thread now running.
            let l = unsafe { &*LIST.data_ptr() };
            for (_, p) in l.iter().rev() {
                // SAFETY: as in `parent`.
                unsafe { p.parts().postfork_child() };
            }
            // SAFETY: as in `parent`; the list's lock is reset rather than
            // handed to a thread parked on it (none exists here).
            unsafe { reset(&LIST) };
        });
    }
}

/// Without an operating system's `fork` (no `std`, not Unix, Miri): no
/// registry; a host that forks calls the allocator's `prefork` and `postfork_*`
/// itself.
#[cfg(not(all(feature = "std", unix, not(miri))))]
mod registry {
    use super::ForkPtrs;

    pub(crate) struct Registration;

    impl Registration {
        pub(crate) fn new(_: ForkPtrs) -> Registration {
            Registration
        }
    }
}
