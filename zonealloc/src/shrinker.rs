//! Shrinkers: owners' caches of allocated memory that the allocator may ask to
//! give some back (Linux's `struct shrinker` and `do_shrink_slab()`).
//!
//! Vocabulary layer, beside `hook`: this module calls owners' code and counts,
//! nothing more. The allocation slow path (`allocator`, direct reclaim) and the
//! background reclaimer (`reclaim`, kswapd) decide when to ask; this module decides
//! how much to ask each shrinker for, as Linux does:
//!
//! ```text
//!   freeable = count()                 pages the owner could free now
//!   delta    = (freeable >> priority) * 4 / seeks        (freeable / 2 for seeks 0)
//!   total    = min(deferred >> priority + delta, 2 * freeable)
//!   while total >= batch or total >= freeable:
//!       scan(min(batch, total))        the owner frees up to that many pages
//!       total -= that
//!   deferred = min(deferred + delta - scanned, 2 * freeable)   work left for later
//! ```
//!
//! Priority runs from `DEF_PRIORITY` (12: ask for 1/4096 of what is freeable,
//! times 4 / seeks) down to 0 (everything), each reclaim pass going one step
//! further while it falls short.
//!
//! Owners' shrinkers obey the rule of every hook (`hook`): one that panics is
//! caught (with `std`) and counts as having freed nothing, and is not called again
//! in that pass; one that lies about what it freed only misleads the counters (the
//! reclaimers judge progress by the zones' free pages and by attempts, never loop
//! on a claim), and one that overstates what it holds is taken at the node's
//! managed pages, its turn ending at its first `scan` that frees nothing; and one
//! that calls the allocator runs as from any thread, except
//! that its allocations do not reclaim in turn (Linux's `PF_MEMALLOC`: no
//! recursion into reclaim, so no shrinker is re-entered by its own work).

use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::counter::Counter;
use crate::gfp::Gfp;
use crate::sync::{AtomicU64, Lock, Ordering};

/// Linux's `DEF_PRIORITY`: a reclaim pass starts by asking for 1/4096.
pub const DEF_PRIORITY: u8 = 12;
/// Linux's `DEFAULT_SEEKS`: the cost of recreating what a shrinker frees.
pub const DEFAULT_SEEKS: u32 = 2;
/// Linux's `SHRINK_BATCH`: pages asked for in one `scan` call by default.
pub const SHRINK_BATCH: u64 = 128;

/// What a shrinker is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShrinkControl {
    /// The GFP of the allocation that caused the reclaim (`GFP_KERNEL` for kswapd).
    pub gfp: Gfp,
    /// The node short of memory.
    pub nid: u16,
    /// Pages to free in this `scan` call (0 in `count`).
    pub nr_to_scan: u64,
    /// The pass's priority, `DEF_PRIORITY` down to 0 (more urgent).
    pub priority: u8,
}

/// An owner's cache of allocated pages that it can give back on request.
pub trait Shrinker: Send + Sync {
    /// Pages the owner could free now (`count_objects`); 0 when it has none.
    fn count(&self, sc: &ShrinkControl) -> u64;

    /// Frees up to `sc.nr_to_scan` pages back to the allocator and returns how
    /// many it freed (`scan_objects`), or `None` to stop being asked in this
    /// pass (`SHRINK_STOP`: it cannot make progress now).
    fn scan(&self, sc: &ShrinkControl) -> Option<u64>;
}

/// A registered shrinker's handle (`unregister_shrinker`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShrinkerId(pub(crate) u64);

/// How a shrinker is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShrinkerConfig {
    /// The cost of recreating what it frees (`seeks`); 0 asks for half of what is
    /// freeable whatever the priority. [`DEFAULT_SEEKS`] by default.
    pub seeks: u32,
    /// Pages per `scan` call (`batch`); [`SHRINK_BATCH`] by default (0 means it).
    pub batch: u64,
}

impl Default for ShrinkerConfig {
    fn default() -> Self {
        ShrinkerConfig {
            seeks: DEFAULT_SEEKS,
            batch: SHRINK_BATCH,
        }
    }
}

/// One registered shrinker.
struct Entry {
    id: ShrinkerId,
    shrinker: Arc<dyn Shrinker>,
    cfg: ShrinkerConfig,
    /// Work asked for and not done (`nr_deferred`).
    deferred: AtomicU64,
    /// 0 while registered; once unregistered, one more than the passes begun by
    /// then (`Registry::begun`): those passes still ask it, later ones do not.
    /// Written under the registry's lock.
    gone: AtomicU64,
}

impl Entry {
    /// Whether the pass that began `begun`-th (counted from 0) asks this entry.
    fn asked_by(&self, begun: u64) -> bool {
        let gone = self.gone.load(Ordering::Relaxed);
        gone == 0 || begun < gone - 1
    }
}

/// What one round over the shrinkers did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Shrunk {
    /// Pages asked for (`nr_to_scan` summed).
    pub scanned: u64,
    /// Pages the shrinkers said they freed, each answer capped at what it was asked.
    pub freed: u64,
    /// Shrinkers that panicked.
    pub panicked: u64,
}

/// The registered shrinkers, behind one lock.
///
/// Invariant: `entries` are in increasing id order (ids are given out under the
/// lock, and an entry is appended as it gets its id); an entry with `gone` set
/// stays only while a pass may still ask it, that is while `running > 0`.
struct Registry {
    entries: Vec<Arc<Entry>>,
    /// The id the next shrinker gets.
    next_id: u64,
    /// Reclaim passes begun since the allocator was built, and passes under way.
    begun: u64,
    running: u32,
}

impl Registry {
    /// Drops the entries no pass can ask any more (none runs). Set-up and
    /// teardown only: dropping an entry may free its memory.
    fn purge(&mut self) {
        if self.running == 0 {
            self.entries.retain(|e| e.gone.load(Ordering::Relaxed) == 0);
        }
    }
}

/// The registered shrinkers, and counters of every call made to them.
pub(crate) struct Shrinkers {
    registry: Lock<Registry>,
    /// `slabs_scanned`.
    pub scanned: Counter,
    /// Shrinkers that panicked (caught).
    pub panicked: Counter,
}

impl Shrinkers {
    pub(crate) fn new() -> Shrinkers {
        Shrinkers {
            // Process context only: an interrupt's allocation never reclaims.
            registry: Lock::new(
                Registry {
                    entries: Vec::new(),
                    next_id: 1,
                    begun: 0,
                    running: 0,
                },
                None,
            ),
            scanned: Counter::new(),
            panicked: Counter::new(),
        }
    }

    /// Takes the registry's lock and keeps it held (fork's `prefork`).
    #[cfg(not(loom))]
    pub(crate) fn lock_kept(&self) {
        self.registry.lock_kept();
    }

    /// Releases the lock `lock_kept` took.
    ///
    /// # Safety
    /// As `Lock::force_unlock`.
    #[cfg(not(loom))]
    #[allow(unsafe_code)]
    pub(crate) unsafe fn force_unlock(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.registry.force_unlock() }
    }

    /// `Lock::reset_in_child` of the registry's lock.
    ///
    /// # Safety
    /// As `Lock::reset_in_child`.
    #[cfg(not(loom))]
    #[allow(unsafe_code)]
    pub(crate) unsafe fn reset_in_child(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.registry.reset_in_child() }
    }

    /// In a `fork` child: no pass runs (the parent's ran on other threads), so
    /// unregistered entries may be freed again.
    #[cfg(not(loom))]
    pub(crate) fn forget_running(&self) {
        self.registry.lock().running = 0;
    }

    /// Registers `s`. Set-up: allocates its entry (and may grow the registry).
    pub(crate) fn register(&self, s: Arc<dyn Shrinker>, cfg: ShrinkerConfig) -> ShrinkerId {
        let cfg = ShrinkerConfig {
            batch: if cfg.batch == 0 {
                SHRINK_BATCH
            } else {
                cfg.batch
            },
            ..cfg
        };
        let mut r = self.registry.lock();
        r.purge();
        let id = ShrinkerId(r.next_id);
        r.next_id += 1;
        r.entries.push(Arc::new(Entry {
            id,
            shrinker: s,
            cfg,
            deferred: AtomicU64::new(0),
            gone: AtomicU64::new(0),
        }));
        id
    }

    /// Unregisters shrinker `id`; `false` if it is not registered. Passes under
    /// way still ask it (and may finish their call to it); later ones do not.
    /// Teardown: frees the entry, or, while a pass runs, leaves that to the next
    /// registration call made while none does.
    pub(crate) fn unregister(&self, id: ShrinkerId) -> bool {
        let mut r = self.registry.lock();
        let begun = r.begun;
        let Some(e) = r
            .entries
            .iter()
            .find(|e| e.id == id && e.gone.load(Ordering::Relaxed) == 0)
        else {
            return false;
        };
        e.gone.store(begun + 1, Ordering::Relaxed);
        r.purge();
        true
    }

    /// Whether no shrinker is registered.
    pub(crate) fn is_empty(&self) -> bool {
        let r = self.registry.lock();
        r.entries
            .iter()
            .all(|e| e.gone.load(Ordering::Relaxed) != 0)
    }

    /// `shrink_slab()`: asks every shrinker at `priority`, for node `nid`, whose
    /// managed pages are `managed` (no shrinker can hold more: a larger `count`
    /// is taken as that).
    ///
    /// Shrinkers are called without the registry's lock: they may register and
    /// unregister (themselves included) from inside, which takes effect for the
    /// next pass. So the pass asks the shrinkers registered when it began, in the
    /// order they were registered, walking the registry by id and taking the lock
    /// only to find the next one and take a reference to it: no copy of the
    /// list, and no heap call (an entry unregistered meanwhile stays in the
    /// registry until no pass runs; see `Registry`).
    pub(crate) fn shrink(&self, gfp: Gfp, nid: u16, priority: u8, managed: u64) -> Shrunk {
        let (begun, end) = {
            let mut r = self.registry.lock();
            r.begun += 1;
            r.running += 1;
            (r.begun - 1, r.next_id)
        };
        let mut after = 0;
        let mut out = Shrunk::default();
        loop {
            let e = {
                let r = self.registry.lock();
                let from = r.entries.partition_point(|e| e.id.0 <= after);
                match r.entries[from..]
                    .iter()
                    .take_while(|e| e.id.0 < end)
                    .find(|e| e.asked_by(begun))
                {
                    Some(e) => e.clone(),
                    None => break,
                }
            };
            after = e.id.0;
            let r = shrink_one(&e, gfp, nid, priority, managed);
            out.scanned += r.scanned;
            out.freed += r.freed;
            out.panicked += r.panicked;
        }
        self.registry.lock().running -= 1;
        self.scanned.inc(out.scanned);
        self.panicked.inc(out.panicked);
        out
    }
}

/// `do_shrink_slab()` for one shrinker. Two guards Linux does without, for
/// owners that lie: `count` is capped at the node's managed pages, and a `scan`
/// that frees nothing ends the shrinker's turn, as `SHRINK_STOP` does.
fn shrink_one(e: &Entry, gfp: Gfp, nid: u16, priority: u8, managed: u64) -> Shrunk {
    let mut sc = ShrinkControl {
        gfp,
        nid,
        nr_to_scan: 0,
        priority,
    };
    let mut out = Shrunk::default();
    let s = &e.shrinker;
    let freeable = match crate::hook::call(|| s.count(&sc)) {
        Ok(n) => n.min(managed),
        Err(_) => {
            out.panicked = 1;
            return out;
        }
    };
    if freeable == 0 {
        return out;
    }
    let shift = u32::from(priority.min(63));
    let nr = e.deferred.swap(0, Ordering::Relaxed);
    let delta = if e.cfg.seeks == 0 {
        freeable / 2
    } else {
        (freeable >> shift).saturating_mul(4) / u64::from(e.cfg.seeks)
    };
    let cap = freeable.saturating_mul(2);
    let mut total = (nr >> shift).saturating_add(delta).min(cap);
    let batch = e.cfg.batch;
    while total >= batch || total >= freeable {
        sc.nr_to_scan = batch.min(total);
        match crate::hook::call(|| s.scan(&sc)) {
            Ok(Some(0)) => {
                out.scanned += sc.nr_to_scan;
                break;
            }
            Ok(Some(freed)) => out.freed += freed.min(sc.nr_to_scan),
            Ok(None) => break,
            Err(_) => {
                out.panicked = 1;
                break;
            }
        }
        total -= sc.nr_to_scan;
        out.scanned += sc.nr_to_scan;
        if total == 0 {
            break;
        }
    }
    let next = nr
        .saturating_add(delta)
        .saturating_sub(out.scanned)
        .min(cap);
    e.deferred.fetch_add(next, Ordering::Relaxed);
    out
}

/// The allocator's reclaim state: the shrinkers, the counters Linux's vmstat
/// shows for reclaim, and kswapd's wake-up flags.
pub(crate) struct ReclaimState {
    pub shrinkers: Shrinkers,
    /// Reclaim passes running (see `hook::InReclaim`).
    pub running: crate::sync::AtomicU32,
    /// `allocstall_<zone>`: direct reclaims, by the zone type of the request's
    /// preferred zone.
    pub allocstall: [Counter; crate::types::MAX_NR_ZONES],
    pub pgscan_direct: Counter,
    pub pgsteal_direct: Counter,
    pub pgscan_kswapd: Counter,
    pub pgsteal_kswapd: Counter,
    pub low_wmark_hit_quickly: Counter,
    pub high_wmark_hit_quickly: Counter,
    /// kswapd's balancing runs (`pageoutrun`).
    pub pageoutrun: Counter,
    /// Compaction runs kswapd started after a watermark boost (`compact_daemon_wake`).
    pub compact_daemon_wake: Counter,
    /// Per node: kswapd was woken and has not run since.
    pub pending: alloc::boxed::Box<[crate::sync::AtomicBool]>,
    /// The kswapd worker's thread, to wake (with `std`).
    #[cfg(all(feature = "std", not(loom)))]
    pub thread: Lock<Option<std::thread::Thread>>,
}

impl ReclaimState {
    pub(crate) fn new(nr_nodes: usize, irq: crate::sync::Irq) -> ReclaimState {
        #[cfg(not(all(feature = "std", not(loom))))]
        let _ = irq;
        ReclaimState {
            shrinkers: Shrinkers::new(),
            running: crate::sync::AtomicU32::new(0),
            allocstall: crate::counter::counters(),
            pgscan_direct: Counter::new(),
            pgsteal_direct: Counter::new(),
            pgscan_kswapd: Counter::new(),
            pgsteal_kswapd: Counter::new(),
            low_wmark_hit_quickly: Counter::new(),
            high_wmark_hit_quickly: Counter::new(),
            pageoutrun: Counter::new(),
            compact_daemon_wake: Counter::new(),
            pending: (0..nr_nodes)
                .map(|_| crate::sync::AtomicBool::new(false))
                .collect(),
            // An interrupt's allocation wakes kswapd (`Gfp::ATOMIC` has
            // `KSWAPD_RECLAIM`): taken with interrupts disabled.
            #[cfg(all(feature = "std", not(loom)))]
            thread: Lock::new(None, irq),
        }
    }

    /// `wakeup_kswapd()`: marks node `nid` for kswapd and wakes its thread, if any.
    pub(crate) fn wake(&self, nid: u16) {
        if let Some(p) = self.pending.get(nid as usize) {
            if !p.load(Ordering::Relaxed) {
                p.store(true, Ordering::Release);
            }
        }
        #[cfg(all(feature = "std", not(loom)))]
        if let Some(t) = self.thread.lock().as_ref() {
            t.unpark();
        }
    }
}
