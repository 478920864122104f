//! Loom models of CMA: `cma_alloc` moving a borrower out while its owner frees
//! it, `cma_release` racing `cma_alloc` over the area's bitmap, and two releases
//! of one run.
//!
//! Built only with `--cfg loom`, where every atomic and lock of the allocator is
//! loom's, and so is the owner's own lock:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test --release -p zonealloc --test loom_cma -- --nocapture
//! ```
//!
//! One zone of 16 frames, `max_order` and pageblocks of order 2, per-CPU lists
//! off, no watermarks; frames 8..16 are a CMA area (two pageblocks). Each model
//! ends with `check_invariants()` and an exact ledger: every frame is free, the
//! owner's, or `cma_alloc`'s.

#![cfg(loom)]

#[path = "support/figures.rs"]
mod figures;
#[path = "support/loom_model.rs"]
mod loom_model;

use loom::sync::{Arc, Mutex};
use loom::thread;

use zonealloc::{Gfp, Migrate, MigrateOutcome, Order, Pfn, ZoneAllocator};

const FRAMES: u64 = 16;
const BASE: u64 = 8;

/// The owner of movable pages, by frame.
struct Owner(Mutex<Vec<Pfn>>);

impl Migrate for Owner {
    fn relocate(&self, old: Pfn, new: Pfn, _order: Order) -> MigrateOutcome {
        let mut p = self.0.lock().unwrap();
        match p.iter().position(|&q| q == old) {
            Some(i) => {
                p[i] = new;
                MigrateOutcome::Moved
            }
            None => MigrateOutcome::Refused,
        }
    }
}

fn allocator() -> Arc<ZoneAllocator> {
    let config = loom_model::tiny_config(FRAMES).with_cma("loom", Pfn(BASE), FRAMES - BASE);
    Arc::new(ZoneAllocator::new(config).expect("tiny config"))
}

fn finish(za: &ZoneAllocator, owned: u64, cma: u64) {
    let r = za
        .check_invariants()
        .unwrap_or_else(|v| panic!("check_invariants: {v}"));
    assert_eq!(
        r.allocated_pages,
        owned + cma,
        "allocated = owner's + cma_alloc's"
    );
    assert_eq!(r.cma_pages, cma);
    assert_eq!(r.free_pages + r.allocated_pages, FRAMES, "frames lost");
}

/// (1) `cma_alloc` of the pageblock holding the owner's page while the owner
/// frees that page: the page is moved out or freed under the migration, never
/// both or neither; where the owner, having let go of the page, refuses its
/// move, the other pageblock of the area is had instead.
#[test]
fn cma_alloc_vs_the_owner_freeing_its_page() {
    loom_model::run("cma_alloc_vs_owner_free", 3, 100_000, || {
        let za = allocator();
        let owner = std::sync::Arc::new(Owner(Mutex::new(Vec::new())));
        za.set_migrator(Some(owner.clone()));
        // Every frame movable; the owner keeps frame 8's page, the rest go back.
        let mut all = Vec::new();
        while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NOWAIT, Order(0)) {
            all.push(p);
        }
        for p in all {
            if p == Pfn(BASE) {
                owner.0.lock().unwrap().push(p);
            } else {
                za.free_pages(p, Order(0)).unwrap();
            }
        }
        let t = {
            let (za, owner) = (za.clone(), owner.clone());
            thread::spawn(move || {
                let p = owner.0.lock().unwrap().pop().unwrap();
                za.free_pages(p, Order(0)).unwrap();
            })
        };
        let p = za.cma_alloc(0, 4, Order(2)).unwrap();
        t.join().unwrap();
        assert!(p == Pfn(BASE) || p == Pfn(BASE + 4), "{p}");
        finish(&za, 0, 4);
        za.cma_release(0, p, 4).unwrap();
        finish(&za, 0, 0);
    });
}

/// (2) A release of one run while `cma_alloc` reserves another from the same
/// bitmap: the new run is either pageblock, never the held one.
#[test]
fn cma_release_vs_cma_alloc() {
    loom_model::run("cma_release_vs_cma_alloc", 3, 100_000, || {
        let za = allocator();
        let first = za.cma_alloc(0, 4, Order(2)).unwrap();
        assert_eq!(first, Pfn(BASE));
        let t = {
            let za = za.clone();
            thread::spawn(move || za.cma_release(0, first, 4).unwrap())
        };
        let second = za.cma_alloc(0, 4, Order(2)).unwrap();
        t.join().unwrap();
        assert!(second == Pfn(BASE) || second == Pfn(BASE + 4));
        finish(&za, 0, 4);
        za.cma_release(0, second, 4).unwrap();
        finish(&za, 0, 0);
    });
}

/// (3) Two releases of one run: exactly one succeeds, the other is refused with
/// nothing changed.
#[test]
fn two_releases_of_one_run() {
    loom_model::run("cma_two_releases", 3, 100_000, || {
        let za = allocator();
        let run = za.cma_alloc(0, 2, Order(0)).unwrap();
        let t = {
            let za = za.clone();
            thread::spawn(move || za.cma_release(0, run, 2).is_ok())
        };
        let a = za.cma_release(0, run, 2).is_ok();
        let b = t.join().unwrap();
        assert!(a != b, "exactly one release succeeds ({a}, {b})");
        finish(&za, 0, 0);
    });
}
