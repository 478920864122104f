//! Loom models of direct reclaim: allocations on two CPUs find the zone empty,
//! each asks the shrinker (an owner's pool, freeing its pages through the
//! allocator) and retries, while the other does the same or frees.
//!
//! Built only with `--cfg loom`, where every atomic and lock of the allocator is
//! loom's, and so is the pool's own lock:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test --release -p zonealloc --test loom_reclaim -- --nocapture
//! ```
//!
//! One zone of 16 frames, `max_order` 2, per-CPU lists off, no watermarks. The
//! pool caches every frame; its shrinker frees one page a call (`batch` 1,
//! `seeks` 0: half of what it holds per pass). Each model ends with
//! `check_invariants()` and an exact ledger: every frame is free, in the pool, or
//! held by a thread.

#![cfg(loom)]

#[path = "support/figures.rs"]
mod figures;
#[path = "support/loom_model.rs"]
mod loom_model;

use loom::sync::{Arc, Mutex};
use loom::thread;

use zonealloc::reclaim::{ShrinkControl, Shrinker, ShrinkerConfig};
use zonealloc::{Gfp, Order, Pfn, ZoneAllocator};

const FRAMES: u64 = 16;

struct Pool {
    za: Mutex<Option<Arc<ZoneAllocator>>>,
    cached: Mutex<Vec<Pfn>>,
}

impl Shrinker for Pool {
    fn count(&self, _: &ShrinkControl) -> u64 {
        self.cached.lock().unwrap().len() as u64
    }

    fn scan(&self, sc: &ShrinkControl) -> Option<u64> {
        let za = self.za.lock().unwrap().clone()?;
        let mut freed = 0;
        while freed < sc.nr_to_scan {
            let Some(p) = self.cached.lock().unwrap().pop() else {
                break;
            };
            za.free_pages(p, Order(0)).unwrap();
            freed += 1;
        }
        Some(freed)
    }
}

fn setup() -> (Arc<ZoneAllocator>, std::sync::Arc<Pool>) {
    let za = Arc::new(ZoneAllocator::new(loom_model::tiny_config(FRAMES)).expect("tiny config"));
    let pool = std::sync::Arc::new(Pool {
        za: Mutex::new(Some(za.clone())),
        cached: Mutex::new(Vec::new()),
    });
    while let Ok(p) = za.alloc_pages(Gfp::NOWAIT, Order(0)) {
        pool.cached.lock().unwrap().push(p);
    }
    assert_eq!(pool.cached.lock().unwrap().len() as u64, FRAMES);
    za.register_shrinker(pool.clone(), ShrinkerConfig { seeks: 0, batch: 1 });
    (za, pool)
}

fn finish(za: &ZoneAllocator, pool: &Pool, held: u64) {
    let r = za
        .check_invariants()
        .unwrap_or_else(|v| panic!("check_invariants: {v}"));
    let cached = pool.cached.lock().unwrap().len() as u64;
    assert_eq!(r.allocated_pages, cached + held, "allocated = pool + held");
    assert_eq!(r.free_pages + r.allocated_pages, FRAMES, "frames lost");
    *pool.za.lock().unwrap() = None;
}

/// (1) Two CPUs allocate from an empty zone at once: both reclaim from the pool
/// and both get a page; no page is handed out twice or lost.
#[test]
fn two_direct_reclaims() {
    loom_model::run("reclaim_two_direct_reclaims", 2, 100_000, || {
        let (za, pool) = setup();
        let t = {
            let za = za.clone();
            thread::spawn(move || za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap())
        };
        let a = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
        let b = t.join().unwrap();
        assert_ne!(a, b);
        finish(&za, &pool, 2);
    });
}

/// (2) One CPU reclaims while the other frees a page it held: the reclaim's
/// retry may find that page or the pool's; either way the ledger holds.
#[test]
fn direct_reclaim_vs_free() {
    loom_model::run("reclaim_direct_reclaim_vs_free", 2, 100_000, || {
        let (za, pool) = setup();
        // One page out of the pool into a thread's hands.
        let held = pool.cached.lock().unwrap().pop().unwrap();
        let t = {
            let za = za.clone();
            thread::spawn(move || za.free_pages(held, Order(0)).unwrap())
        };
        let a = za.alloc_pages(Gfp::KERNEL, Order(1)).unwrap();
        t.join().unwrap();
        finish(&za, &pool, 2);
        let _ = a;
    });
}
