//! Loom models of free page reporting's protocol: a pass takes free blocks off the
//! lists under the zone lock, calls the reporter with no lock held, and puts them
//! back (merging, marked reported) under the lock again, while another CPU
//! allocates, frees and merges beside it.
//!
//! Built only with `--cfg loom`, where every atomic and lock of the allocator is
//! loom's:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test --release -p zonealloc --test loom_reporting -- --nocapture
//! ```
//!
//! One zone of 16 frames, `max_order` 2, pageblocks of order 2, per-CPU lists off
//! (every call takes the zone lock, the only lock the pass shares with them), no
//! watermarks; reporting order 1, one block per call. The reporter checks, each
//! time it runs, that every block of its batch is frozen (the pass's alone: no
//! one else can hold a frame of it); each model ends with `check_invariants()`,
//! which proves every reported unit free, and an exact ledger.

#![cfg(loom)]

#[path = "support/figures.rs"]
mod figures;
#[path = "support/loom_model.rs"]
mod loom_model;

use loom::sync::Arc;
use loom::thread;

use zonealloc::reporting::{PageReporter, ReportRefused, Reporter, ReportingConfig};
use zonealloc::{FrameState, Gfp, Order, Pfn, ZoneAllocator};

const FRAMES: u64 = 16;

/// Checks each batch against the frame states, through the allocator it reports
/// for (set after registration; cleared to end the cycle before the model ends).
struct Checking {
    za: std::sync::Mutex<Option<Arc<ZoneAllocator>>>,
    blocks: std::sync::Mutex<Vec<(Pfn, Order)>>,
}

impl PageReporter for Checking {
    fn report(&self, blocks: &[(Pfn, Order)]) -> Result<(), ReportRefused> {
        let za = self.za.lock().unwrap().clone();
        if let Some(za) = za {
            for &(h, o) in blocks {
                assert_eq!(za.frame_state(h), Some(FrameState::Frozen { order: o }));
            }
        }
        self.blocks.lock().unwrap().extend_from_slice(blocks);
        Ok(())
    }
}

fn setup() -> (Arc<ZoneAllocator>, std::sync::Arc<Checking>) {
    let za = Arc::new(ZoneAllocator::new(loom_model::tiny_config(FRAMES)).expect("tiny config"));
    let rep = std::sync::Arc::new(Checking {
        za: std::sync::Mutex::new(Some(za.clone())),
        blocks: std::sync::Mutex::new(Vec::new()),
    });
    za.register_page_reporting(
        Reporter::Hook(rep.clone()),
        ReportingConfig {
            order: Some(Order(1)),
            capacity: 1,
        },
    )
    .unwrap();
    (za, rep)
}

/// Ends a model: nothing owned, every frame free and merged, the checker's ledger
/// whole, and a last pass leaves every free block reported.
fn finish(za: &ZoneAllocator, rep: &Checking) {
    let r = za
        .check_invariants()
        .unwrap_or_else(|v| panic!("check_invariants: {v}"));
    assert_eq!(r.free_pages, FRAMES, "frames lost");
    assert_eq!(r.reporting_pages, 0);
    assert!(r.reported_pages <= r.free_pages);
    za.report_free_pages().unwrap();
    assert_eq!(za.page_reporting_stats().reported_pages, FRAMES);
    za.check_invariants()
        .unwrap_or_else(|v| panic!("check_invariants: {v}"));
    *rep.za.lock().unwrap() = None;
}

/// (1) A pass reports while another CPU allocates a block and frees it again: the
/// allocation never gets a block the pass holds, and the free merges with
/// whatever the pass has put back.
#[test]
fn pass_vs_alloc_and_free() {
    loom_model::run("reporting_pass_vs_alloc_and_free", 2, 100_000, || {
        let (za, rep) = setup();
        let t = {
            let za = za.clone();
            thread::spawn(move || {
                let p = za.alloc_pages(Gfp::KERNEL, Order(1)).unwrap();
                za.free_pages(p, Order(1)).unwrap();
            })
        };
        // The pass may find a zone short of blocks while the other CPU holds one;
        // it never fails.
        za.report_free_pages().unwrap();
        t.join().unwrap();
        finish(&za, &rep);
    });
}

/// (2) A block allocated before the pass is freed during it: its free merges with
/// a buddy the pass may hold off the lists (it cannot: the buddy is frozen, so
/// the free stops short of merging, and the put-back merges the two).
#[test]
fn pass_vs_free_of_a_buddy() {
    loom_model::run("reporting_pass_vs_free_of_a_buddy", 2, 100_000, || {
        let (za, rep) = setup();
        let p = za.alloc_pages(Gfp::KERNEL, Order(1)).unwrap();
        let t = {
            let za = za.clone();
            thread::spawn(move || za.free_pages(p, Order(1)).unwrap())
        };
        za.report_free_pages().unwrap();
        t.join().unwrap();
        finish(&za, &rep);
    });
}
