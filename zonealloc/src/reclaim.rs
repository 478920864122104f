//! Reclaim: shrinkers, direct reclaim, kswapd and watermark boosting.
//!
//! zonealloc has no page cache and no LRU of its own: the memory it can reclaim
//! is what owners cache (a buffer pool, a page cache of their own, a slab) and
//! agree to give back. An owner registers a [`Shrinker`]
//! ([`ZoneAllocator::register_shrinker`]): asked how many pages it could free
//! (`count`), then to free some (`scan`), as Linux asks its shrinkers in
//! `shrink_slab()` (see the `shrinker` module's arithmetic, Linux's own).
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use zonealloc::reclaim::{ShrinkControl, Shrinker, ShrinkerConfig};
//! use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator};
//!
//! /// A pool that keeps freed pages for reuse, and gives them back on request.
//! struct Pool {
//!     za: Arc<ZoneAllocator>,
//!     cached: Mutex<Vec<Pfn>>,
//! }
//!
//! impl Shrinker for Pool {
//!     fn count(&self, _: &ShrinkControl) -> u64 {
//!         self.cached.lock().unwrap().len() as u64
//!     }
//!     fn scan(&self, sc: &ShrinkControl) -> Option<u64> {
//!         let mut c = self.cached.lock().unwrap();
//!         let n = (sc.nr_to_scan as usize).min(c.len());
//!         for p in c.drain(..n) {
//!             self.za.free_pages(p, Order(0)).unwrap();
//!         }
//!         Some(n as u64)
//!     }
//! }
//!
//! let za = Arc::new(ZoneAllocator::new(Config::with_bytes(16 << 20)).unwrap());
//! let pool = Arc::new(Pool { za: za.clone(), cached: Mutex::new(Vec::new()) });
//! let id = za.register_shrinker(pool.clone(), ShrinkerConfig::default());
//! // The pool caches every page there is...
//! // (`NOWAIT`: no direct reclaim, which would take from the pool itself.)
//! while let Ok(p) = za.alloc_pages(Gfp::NOWAIT, Order(0)) {
//!     pool.cached.lock().unwrap().push(p);
//! }
//! // ...and an allocation that may reclaim gets one back from it.
//! let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
//! assert!(za.vmstat().get("pgsteal_direct").unwrap() > 0);
//! za.free_pages(p, Order(0)).unwrap();
//! za.unregister_shrinker(id).unwrap();
//! ```
//!
//! # Who reclaims
//!
//! * **Direct reclaim.** An allocation whose GFP allows it (`__GFP_DIRECT_RECLAIM`,
//!   in `GFP_KERNEL`) that finds no memory at the min watermark, and that
//!   compaction did not serve, asks the shrinkers, from `DEF_PRIORITY` (12) down
//!   until one pass frees `SWAP_CLUSTER_MAX` (32) pages, then retries; while
//!   passes free something, up to 16 times (`MAX_RECLAIM_RETRIES`). Counted in
//!   vmstat as `allocstall_<zone>`, `pgscan_direct` (pages asked for) and
//!   `pgsteal_direct` (pages the shrinkers say they freed).
//! * **kswapd.** An allocation entering the slow path with
//!   `__GFP_KSWAPD_RECLAIM` wakes its node's kswapd when a zone of it is below
//!   its high watermark. [`ZoneAllocator::balance_node`] is kswapd's work
//!   (`balance_pgdat()`): shrinkers at falling priority until every zone of the
//!   node is above its high watermark (`pgscan_kswapd`, `pgsteal_kswapd`,
//!   `pageoutrun`). With `std`, [`KswapdWorker`] runs it on a thread of its own
//!   as Linux's kswapd does, naps 100 ms after each run and then sleeps until
//!   woken (`kswapd_low_wmark_hit_quickly`: woken during the nap;
//!   `kswapd_high_wmark_hit_quickly`: the node fell short again by the end of
//!   it). A `no_std` kernel calls `balance_node` from its own thread when
//!   [`ZoneAllocator::kswapd_pending`] says so.
//! * **Watermark boosting.** With `Config::watermark_boost_factor` set (Linux's
//!   default is 15000; zonealloc's is 0, because a boost is reset only by
//!   kswapd), each fallback that takes pages from a pageblock of another type
//!   raises the zone's watermarks by a pageblock, up to that share of the high
//!   watermark, and wakes kswapd. `balance_node` then reclaims to the boosted
//!   watermark, resets the boost and, with a migrator registered, compacts the
//!   node's zones to pageblock order (kcompactd's run, `compact_daemon_wake`).
//!   zoneinfo shows the boost on its `boost` line, and the `min`/`low`/`high`
//!   lines include it, as Linux's do.
//!
//! # Owners' shrinkers
//!
//! A shrinker that panics is caught (with `std`), counted as having freed
//! nothing, and asked nothing more in that pass; one that claims to have freed
//! what it did not only misleads the counters (passes are bounded and judged by
//! the zones' free pages); one that allocates from inside `scan` gets memory
//! without reclaim in turn (no recursion: Linux's `PF_MEMALLOC`, per thread
//! here), and may register or unregister shrinkers (itself included), which
//! takes effect for the next pass. `balance_node` called from inside a shrinker
//! answers [`ReclaimError::Reentered`].

#[cfg(all(feature = "std", not(loom)))]
use alloc::sync::Arc;

use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::hook::InReclaim;
use crate::sync::Ordering;
use crate::types::Wmark;

pub use crate::shrinker::{
    ShrinkControl, Shrinker, ShrinkerConfig, ShrinkerId, DEFAULT_SEEKS, DEF_PRIORITY, SHRINK_BATCH,
};

/// Why a reclaim call was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReclaimError {
    /// No such node.
    NoNode,
    /// No shrinker has this id (never registered, or unregistered already).
    UnknownShrinker,
    /// Called from inside a reclaim pass (a shrinker's own call): nothing done.
    Reentered,
    /// A `KswapdWorker` runs for this allocator already.
    AlreadyRunning,
    /// The operating system would not start the worker's thread.
    Spawn,
}

impl core::fmt::Display for ReclaimError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ReclaimError::NoNode => "no such node",
            ReclaimError::UnknownShrinker => "no shrinker has this id",
            ReclaimError::Reentered => "called from inside a reclaim pass",
            ReclaimError::AlreadyRunning => "a kswapd worker runs already",
            ReclaimError::Spawn => "the worker thread could not be started",
        })
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ReclaimError {}

/// What one `balance_node` run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BalanceReport {
    /// Whether every zone of the node ended above its high watermark.
    pub balanced: bool,
    /// The lowest priority reached (`DEF_PRIORITY` if balanced at once).
    pub priority: u8,
    /// Pages asked of the shrinkers.
    pub scanned: u64,
    /// Pages the shrinkers said they freed.
    pub freed: u64,
    /// Whether a watermark boost was reset (and the node compacted, with a
    /// migrator).
    pub boost_reset: bool,
}

impl<B: Backend> ZoneAllocator<B> {
    /// `register_shrinker()`: from now on reclaim asks `s` for memory, as `cfg`
    /// says. Returns its id, for `unregister_shrinker`. A set-up call: it
    /// allocates the shrinker's entry on the heap (a reclaim pass never does).
    ///
    /// # The shrinker must be `'static`
    ///
    /// `s` is an `Arc<dyn Shrinker + 'static>` (what `Arc<dyn Shrinker>` means):
    /// the allocator keeps it after the call returns, and calls it from any
    /// thread that reclaims (an allocation's direct reclaim, kswapd) until
    /// `unregister_shrinker`, and even after that until a pass under way ends.
    /// Nothing ties that to a borrow, so the shrinker may hold no reference
    /// with a shorter life. In particular it cannot hold `&ZoneAllocator`: the
    /// allocator would keep a borrow of itself, and the compiler refuses it
    /// with E0597 (`za` does not live long enough: it would have to be borrowed
    /// for `'static`):
    ///
    /// ```compile_fail,E0597
    /// use std::sync::Arc;
    /// use zonealloc::reclaim::{ShrinkControl, Shrinker, ShrinkerConfig};
    /// use zonealloc::{Config, ZoneAllocator};
    ///
    /// struct Borrowing<'a> {
    ///     za: &'a ZoneAllocator,
    /// }
    /// impl Shrinker for Borrowing<'_> {
    ///     fn count(&self, _: &ShrinkControl) -> u64 {
    ///         self.za.nr_free_pages()
    ///     }
    ///     fn scan(&self, _: &ShrinkControl) -> Option<u64> {
    ///         None
    ///     }
    /// }
    ///
    /// let za = ZoneAllocator::new(Config::with_bytes(16 << 20)).unwrap();
    /// za.register_shrinker(Arc::new(Borrowing { za: &za }), ShrinkerConfig::default());
    /// ```
    ///
    /// What works: the shrinker owns what it needs. It holds the data it frees
    /// (behind its own `Arc`, shared with the code that fills it) and reaches
    /// the allocator through an `Arc<ZoneAllocator>` or, to keep no cycle
    /// between the two (an `Arc` one is broken only by `unregister_shrinker`),
    /// a `Weak` it upgrades in `scan`:
    ///
    /// ```
    /// use std::sync::{Arc, Mutex, Weak};
    /// use zonealloc::reclaim::{ShrinkControl, Shrinker, ShrinkerConfig};
    /// use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator};
    ///
    /// struct Pool {
    ///     za: Weak<ZoneAllocator>,
    ///     cached: Mutex<Vec<Pfn>>,
    /// }
    /// impl Shrinker for Pool {
    ///     fn count(&self, _: &ShrinkControl) -> u64 {
    ///         self.cached.lock().unwrap().len() as u64
    ///     }
    ///     fn scan(&self, sc: &ShrinkControl) -> Option<u64> {
    ///         let za = self.za.upgrade()?; // gone: nothing to give back to
    ///         let mut c = self.cached.lock().unwrap();
    ///         let n = (sc.nr_to_scan as usize).min(c.len());
    ///         for p in c.drain(..n) {
    ///             za.free_pages(p, Order(0)).unwrap();
    ///         }
    ///         Some(n as u64)
    ///     }
    /// }
    ///
    /// let za = Arc::new(ZoneAllocator::new(Config::with_bytes(16 << 20)).unwrap());
    /// let pool = Arc::new(Pool { za: Arc::downgrade(&za), cached: Mutex::new(Vec::new()) });
    /// let id = za.register_shrinker(pool.clone(), ShrinkerConfig::default());
    /// pool.cached.lock().unwrap().push(za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap());
    /// za.unregister_shrinker(id).unwrap();
    /// ```
    ///
    /// An allocator that is itself a `static` (a kernel's) may be held as
    /// `&'static ZoneAllocator`.
    pub fn register_shrinker(
        &self,
        s: alloc::sync::Arc<dyn Shrinker + 'static>,
        cfg: ShrinkerConfig,
    ) -> ShrinkerId {
        self.reclaim.shrinkers.register(s, cfg)
    }

    /// `unregister_shrinker()`. A pass under way may still ask it (it asks the
    /// shrinkers registered when it began); later passes do not. A teardown
    /// call: it frees the shrinker's entry, or, while a pass runs, leaves that
    /// to the next `register_shrinker`/`unregister_shrinker` made while none does
    /// (until then the entry keeps its reference to `s`).
    ///
    /// # Errors
    /// `UnknownShrinker`.
    pub fn unregister_shrinker(&self, id: ShrinkerId) -> Result<(), ReclaimError> {
        if self.reclaim.shrinkers.unregister(id) {
            Ok(())
        } else {
            Err(ReclaimError::UnknownShrinker)
        }
    }

    /// Whether an allocation woke node `nid`'s kswapd since its last
    /// `balance_node` (for a kernel's own kswapd thread).
    pub fn kswapd_pending(&self, nid: u16) -> bool {
        self.reclaim
            .pending
            .get(nid as usize)
            .is_some_and(|p| p.load(Ordering::Acquire))
    }

    /// Whether every populated zone of node `nid` is above its high watermark,
    /// boost included, free CMA pages left out (`pgdat_balanced()`, whose
    /// watermark test has no `ALLOC_CMA`).
    fn node_balanced(&self, nid: u16) -> bool {
        self.zones
            .iter()
            .filter(|z| z.id.node == nid && z.present_now() > 0)
            .all(|z| z.nr_free_pages_no_cma() > z.wmark(Wmark::High))
    }

    /// kswapd's `balance_pgdat()` for node `nid`: asks the shrinkers for memory at
    /// falling priority (`DEF_PRIORITY` down to 1) until every zone of the node is
    /// above its high watermark (boost included). Then, if a zone was boosted,
    /// resets its boost and, with a migrator registered, compacts the node's zones
    /// to pageblock order (kcompactd's run).
    ///
    /// # Errors
    /// `NoNode`; `Reentered` from inside a shrinker.
    pub fn balance_node(&self, nid: u16) -> Result<BalanceReport, ReclaimError> {
        let r = &self.reclaim;
        let pending = r.pending.get(nid as usize).ok_or(ReclaimError::NoNode)?;
        if !InReclaim::may_reclaim(&r.running) {
            return Err(ReclaimError::Reentered);
        }
        pending.store(false, Ordering::Release);
        r.pageoutrun.inc(1);
        let boosted = self
            .zones
            .iter()
            .any(|z| z.id.node == nid && z.watermark_boost.load(Ordering::Relaxed) > 0);
        let mut rep = BalanceReport {
            priority: DEF_PRIORITY,
            ..BalanceReport::default()
        };
        {
            let _g = InReclaim::enter(&r.running);
            for priority in (1..=DEF_PRIORITY).rev() {
                rep.priority = priority;
                if self.node_balanced(nid) {
                    break;
                }
                let s = r.shrinkers.shrink(
                    crate::gfp::Gfp::KERNEL,
                    nid,
                    priority,
                    self.node_managed(nid),
                );
                r.pgscan_kswapd.inc(s.scanned);
                r.pgsteal_kswapd.inc(s.freed);
                rep.scanned += s.scanned;
                rep.freed += s.freed;
                // Pages the shrinkers freed may sit on per-CPU lists.
                if s.freed > 0 {
                    self.drain_all_pages();
                }
            }
        }
        rep.balanced = self.node_balanced(nid);
        if boosted {
            for z in self.zones.iter().filter(|z| z.id.node == nid) {
                let _zl = z.lock();
                z.watermark_boost.store(0, Ordering::Relaxed);
            }
            rep.boost_reset = true;
            if let Some(m) = self.migrator() {
                r.compact_daemon_wake.inc(1);
                let pb = self.config.pageblock_order;
                // A zone another run compacts is passed over, as kcompactd does.
                let _ = self.compact_node(nid, Some(pb), &*m);
            }
        }
        Ok(rep)
    }
}

/// kswapd: a thread that runs `balance_node` for each node an allocation woke,
/// naps 100 ms, and sleeps until woken again. Stops (and joins its thread) when
/// dropped, or when the allocator is gone.
#[cfg(all(feature = "std", not(loom)))]
pub struct KswapdWorker {
    thread: Option<crate::hook::Background>,
    /// Frees the allocator's worker slot, so that another may start.
    release: Option<alloc::boxed::Box<dyn FnOnce() + Send>>,
}

#[cfg(all(feature = "std", not(loom)))]
impl KswapdWorker {
    /// Starts kswapd for `za`. It holds only a weak reference: dropping the last
    /// `Arc` of the allocator ends it.
    ///
    /// # Errors
    /// `AlreadyRunning` when a worker runs for `za` already; `Spawn` when the
    /// thread cannot be started.
    pub fn spawn<B: Backend + 'static>(
        za: &Arc<ZoneAllocator<B>>,
    ) -> Result<KswapdWorker, ReclaimError> {
        let mut slot = za.reclaim.thread.lock();
        if slot.is_some() {
            return Err(ReclaimError::AlreadyRunning);
        }
        let weak = Arc::downgrade(za);
        let w = weak.clone();
        let thread = crate::hook::Background::spawn("kswapd", move |stop| kswapd_loop(w, stop))
            .map_err(|_| ReclaimError::Spawn)?;
        *slot = thread.thread().cloned();
        Ok(KswapdWorker {
            thread: Some(thread),
            release: Some(alloc::boxed::Box::new(move || {
                if let Some(za) = weak.upgrade() {
                    *za.reclaim.thread.lock() = None;
                }
            })),
        })
    }

    /// Whether the worker's thread runs: `false` once it has ended, and in the
    /// child of a `fork` (which has no copy of it; the child's allocator has
    /// forgotten it, so the child may `spawn` its own).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| t.is_running())
    }
}

/// kswapd's loop (`kswapd()` and `kswapd_try_to_sleep()`).
#[cfg(all(feature = "std", not(loom)))]
fn kswapd_loop<B: Backend>(
    weak: alloc::sync::Weak<ZoneAllocator<B>>,
    stop: &std::sync::atomic::AtomicBool,
) {
    use std::sync::atomic::Ordering as O;
    const NAP: std::time::Duration = std::time::Duration::from_millis(100);
    let mut nap = false;
    loop {
        if nap {
            std::thread::park_timeout(NAP);
        } else {
            std::thread::park();
        }
        if stop.load(O::Acquire) {
            return;
        }
        let Some(za) = weak.upgrade() else { return };
        let nodes = za.config.nodes.len() as u16;
        let mut todo: alloc::vec::Vec<u16> = (0..nodes).filter(|&n| za.kswapd_pending(n)).collect();
        if nap {
            if !todo.is_empty() {
                // Woken again during the nap.
                za.reclaim.low_wmark_hit_quickly.inc(1);
            } else {
                todo = (0..nodes).filter(|&n| !za.node_balanced(n)).collect();
                if !todo.is_empty() {
                    // Short of memory again by the end of the nap.
                    za.reclaim.high_wmark_hit_quickly.inc(1);
                }
            }
        }
        let mut progress = false;
        for &n in &todo {
            if let Ok(r) = za.balance_node(n) {
                progress |= r.freed > 0 || r.balanced;
            }
        }
        // A run that freed nothing sleeps until the next wake-up rather than
        // retry every nap (Linux stops kswapd after failed runs likewise).
        nap = !todo.is_empty() && progress;
    }
}

#[cfg(all(feature = "std", not(loom)))]
impl Drop for KswapdWorker {
    fn drop(&mut self) {
        // Stopped and joined first, then the slot freed; in a `fork` child
        // (no thread to join) the slot is the child's own, left alone.
        let here = self.thread.as_ref().is_none_or(|t| t.spawned_here());
        drop(self.thread.take());
        if let Some(r) = self.release.take().filter(|_| here) {
            r();
        }
    }
}
