//! Loom models of compaction's isolate-migrate-putback protocol (see `migrate`):
//! a block being moved can be freed by its owner at any moment, and is then freed
//! exactly once; a migration target is never handed out to anyone else.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test --release -p zonealloc --test loom_compaction \
//!     --target-dir target/loom -- --nocapture
//! ```
//!
//! The preemption bound is 4 for the two-thread models and 2 for the three-thread
//! one (about a million executions and eight minutes at 4), unless
//! `LOOM_MAX_PREEMPTIONS` says otherwise.
//!
//! Every model uses one zone of 16 frames, `max_order` 2, pageblocks of order 2 (four
//! of them), no mobility grouping, no watermarks and no per-CPU lists, so that the
//! explored interleavings are those of the protocol: the owner's table lock, the
//! head words' compare-and-swaps, the zone lock. The owner's table is behind a loom
//! mutex (it is part of the protocol: the callback and the owner's frees serialize
//! on it); the exact ledger of who owns which frame is plain `std` memory that loom
//! does not instrument. Each model ends with `check_invariants()` and the ledger
//! compared with the allocator's accounting.

#![cfg(loom)]

#[path = "support/figures.rs"]
mod figures;
#[path = "support/loom_model.rs"]
mod loom_model;

use std::sync::atomic::{AtomicUsize, Ordering};

use loom::sync::{Arc, Mutex};
use loom::thread;

use zonealloc::{Gfp, Migrate, MigrateOutcome, Migration, Order, Pfn, ZoneAllocator};

const FRAMES: u64 = 16;
/// Preemption bound of the two-thread models, and of the three-thread one (whose
/// executions grow much faster: about a million at bound 4).
const BOUND_TWO_THREADS: usize = 4;
const BOUND_THREE_THREADS: usize = 2;

/// Executions, over a whole model, that ended each way (plain `std` counters).
static MOVED_1: AtomicUsize = AtomicUsize::new(0);
static FREED_1: AtomicUsize = AtomicUsize::new(0);
static REFUSED_1: AtomicUsize = AtomicUsize::new(0);
static MOVED_2: AtomicUsize = AtomicUsize::new(0);

fn tiny() -> Arc<ZoneAllocator> {
    Arc::new(ZoneAllocator::new(loom_model::tiny_config(FRAMES)).expect("tiny config"))
}

/// Who owns each frame: 0 nobody, else a tag. Uninstrumented `std` memory.
struct Ledger(std::sync::Mutex<Vec<u32>>);

impl Ledger {
    fn new() -> std::sync::Arc<Ledger> {
        std::sync::Arc::new(Ledger(std::sync::Mutex::new(vec![0; FRAMES as usize])))
    }

    #[track_caller]
    fn claim(&self, pfn: Pfn, tag: u32) {
        let mut v = self.0.lock().unwrap();
        assert_eq!(v[pfn.0 as usize], 0, "frame {pfn} handed out twice");
        v[pfn.0 as usize] = tag;
    }

    #[track_caller]
    fn release(&self, pfn: Pfn, tag: u32) {
        let mut v = self.0.lock().unwrap();
        assert_eq!(v[pfn.0 as usize], tag, "frame {pfn} not owned by {tag}");
        v[pfn.0 as usize] = 0;
    }

    fn owned(&self) -> u64 {
        self.0.lock().unwrap().iter().filter(|&&t| t != 0).count() as u64
    }
}

/// The owner of the movable pages: its table (pfn, tag) behind a loom mutex.
struct Owner {
    table: Mutex<Vec<(u64, u32)>>,
    ledger: std::sync::Arc<Ledger>,
}

impl Migrate for Owner {
    fn migrate(&self, m: &Migration<'_>) -> MigrateOutcome {
        let mut t = self.table.lock().unwrap();
        let Some(e) = t.iter_mut().find(|e| e.0 == m.source().0) else {
            return MigrateOutcome::Refused;
        };
        self.ledger.release(m.source(), e.1);
        self.ledger.claim(m.target(), e.1);
        e.0 = m.target().0;
        MigrateOutcome::Moved
    }
}

impl Owner {
    /// The owner's free path: take the entry out under the table lock, then free
    /// the page it names (outside the lock, as a real owner would).
    fn free(&self, za: &ZoneAllocator, tag: u32) {
        let pfn = {
            let mut t = self.table.lock().unwrap();
            let i = t.iter().position(|e| e.1 == tag).expect("owned");
            let (p, _) = t.swap_remove(i);
            self.ledger.release(Pfn(p), tag);
            Pfn(p)
        };
        za.free_pages(pfn, Order(0))
            .unwrap_or_else(|e| panic!("owner's free of {pfn} refused: {e}"));
    }
}

/// Movable pages at frames 1 and 13 (tags 1 and 2), everything else free: the
/// migration scanner finds frame 1 in the first pageblock and the free scanner
/// offers frames 12, 14-15 in the last.
fn setup() -> (Arc<ZoneAllocator>, Arc<Owner>, std::sync::Arc<Ledger>) {
    let za = tiny();
    let ledger = Ledger::new();
    let pages: Vec<Pfn> = (0..FRAMES)
        .map(|_| za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(0)).unwrap())
        .collect();
    let mut table = Vec::new();
    for p in pages {
        match p.0 {
            1 => table.push((1, 1)),
            13 => table.push((13, 2)),
            _ => {
                za.free_pages(p, Order(0)).unwrap();
                continue;
            }
        }
        ledger.claim(p, table.last().unwrap().1);
    }
    let owner = Arc::new(Owner {
        table: Mutex::new(table),
        ledger: ledger.clone(),
    });
    (za, owner, ledger)
}

/// All threads joined: the validator passes and the allocator agrees exactly with
/// the ledger and the owner's table.
#[track_caller]
fn finish(za: &ZoneAllocator, owner: &Owner, ledger: &Ledger) {
    let rep = za
        .check_invariants()
        .unwrap_or_else(|v| panic!("check_invariants: {v}"));
    let owned = ledger.owned();
    assert_eq!(rep.allocated_pages, owned, "validator vs ledger");
    assert_eq!(
        za.nr_free_pages() + owned,
        za.managed_pages(),
        "frames lost"
    );
    for &(p, _) in owner.table.lock().unwrap().iter() {
        assert!(matches!(
            za.frame_state(Pfn(p)),
            Some(zonealloc::FrameState::Allocated { refcount: 1, .. })
        ));
    }
}

fn model<F>(name: &str, bound: usize, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    loom_model::run(name, bound, 200_000, f);
}

/// (1) The owner frees the page compaction is moving, at any point of the
/// protocol: before isolation (nothing to move), while isolated (putback frees
/// it), during the callback (the callback finds no entry and refuses), or after the
/// move (the owner frees the new page). Every free succeeds, the page is freed
/// exactly once, and nothing leaks.
#[test]
fn owner_free_vs_migration() {
    model("owner_free_vs_migration", BOUND_TWO_THREADS, || {
        let (za, owner, ledger) = setup();
        let id = za.zone_id_of(Pfn(0)).unwrap();
        let c = {
            let (za, owner) = (za.clone(), owner.clone());
            thread::spawn(move || za.compact_zone(id, None, &*owner).unwrap())
        };
        owner.free(&za, 1);
        let r = c.join().unwrap();
        assert!(r.pages_moved + r.pages_freed + r.pages_refused <= 2);
        for (n, k) in [
            (r.pages_moved, &MOVED_1),
            (r.pages_freed, &FREED_1),
            (r.pages_refused, &REFUSED_1),
        ] {
            if n > 0 {
                k.fetch_add(1, Ordering::Relaxed);
            }
        }
        finish(&za, &owner, &ledger);
        owner.free(&za, 2);
        finish(&za, &owner, &ledger);
        assert_eq!(za.nr_free_pages(), FRAMES);
    });
    // The model reached each ending of the protocol: moved, freed while isolated
    // (putback), refused by a callback that found the entry gone.
    let seen = [&MOVED_1, &FREED_1, &REFUSED_1].map(|k| k.load(Ordering::Relaxed));
    println!("  executions that moved / freed under isolation / refused: {seen:?}");
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
}

/// (2) Another thread allocates while the free scanner takes migration targets off
/// the free lists: no frame is both a target and someone's allocation (the ledger
/// would see it claimed twice), and the migrated page stays the owner's.
#[test]
fn allocation_vs_free_scanner() {
    model("allocation_vs_free_scanner", BOUND_TWO_THREADS, || {
        let (za, owner, ledger) = setup();
        let id = za.zone_id_of(Pfn(0)).unwrap();
        let c = {
            let (za, owner) = (za.clone(), owner.clone());
            thread::spawn(move || za.compact_zone(id, None, &*owner).unwrap())
        };
        let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
        ledger.claim(p, 9);
        let r = c.join().unwrap();
        if r.pages_moved > 0 {
            MOVED_2.fetch_add(1, Ordering::Relaxed);
        }
        finish(&za, &owner, &ledger);
        ledger.release(p, 9);
        za.free_pages(p, Order(0)).unwrap();
        owner.free(&za, 1);
        owner.free(&za, 2);
        finish(&za, &owner, &ledger);
        assert_eq!(za.nr_free_pages(), FRAMES);
    });
    assert!(
        MOVED_2.load(Ordering::Relaxed) > 0,
        "no execution moved the page"
    );
}

/// (3) Three threads: compaction, and two owner threads each freeing one of the
/// two pages, at any point of the protocol. Both frees succeed, both pages are
/// freed exactly once, and the zone ends whole.
#[test]
fn two_owner_frees_vs_migration() {
    model("two_owner_frees_vs_migration", BOUND_THREE_THREADS, || {
        let (za, owner, ledger) = setup();
        let id = za.zone_id_of(Pfn(0)).unwrap();
        let c = {
            let (za, owner) = (za.clone(), owner.clone());
            thread::spawn(move || za.compact_zone(id, None, &*owner).unwrap())
        };
        let f = {
            let (za, owner) = (za.clone(), owner.clone());
            thread::spawn(move || owner.free(&za, 2))
        };
        owner.free(&za, 1);
        f.join().unwrap();
        c.join().unwrap();
        finish(&za, &owner, &ledger);
        assert_eq!(ledger.owned(), 0);
        assert_eq!(za.nr_free_pages(), FRAMES);
    });
}

static MOVED_4: AtomicUsize = AtomicUsize::new(0);

/// (4) The owner takes a second reference on page 1 and drops it again, each under
/// its table lock (with its callback, the only thing the contract serialises),
/// while compaction moves the page. A reference taken after compaction looked at
/// the old page but before the callback ran arrives on the new page; the drop
/// through the table's pfn, old or new, leaves the page with the one reference
/// the owner holds, and no frame is freed under it.
#[test]
fn owner_reference_changes_vs_migration() {
    model(
        "owner_reference_changes_vs_migration",
        BOUND_TWO_THREADS,
        || {
            let (za, owner, ledger) = setup();
            let id = za.zone_id_of(Pfn(0)).unwrap();
            let c = {
                let (za, owner) = (za.clone(), owner.clone());
                thread::spawn(move || za.compact_zone(id, None, &*owner).unwrap())
            };
            let page = |t: &[(u64, u32)]| Pfn(t.iter().find(|e| e.1 == 1).expect("owned").0);
            {
                let t = owner.table.lock().unwrap();
                let p = page(&t);
                za.get_page(p).unwrap();
                // The owner's two, and compaction's while it holds the page.
                let n = za.page_count(p).unwrap();
                assert!(n == 2 || n == 3, "page_count {n}");
            }
            {
                let t = owner.table.lock().unwrap();
                assert_eq!(za.put_page(page(&t)), Ok(false));
            }
            let r = c.join().unwrap();
            if r.pages_moved > 0 {
                MOVED_4.fetch_add(1, Ordering::Relaxed);
            }
            finish(&za, &owner, &ledger);
            owner.free(&za, 1);
            owner.free(&za, 2);
            finish(&za, &owner, &ledger);
            assert_eq!(za.nr_free_pages(), FRAMES);
        },
    );
    assert!(
        MOVED_4.load(Ordering::Relaxed) > 0,
        "no execution moved the page"
    );
}
