//! Loom models of the per-CPU list protocol (testing plan §3), the multi-page frees'
//! ascending claim, and page_frag's published bias.
//!
//! Built only with `--cfg loom`, where `crate::sync` swaps every atomic and lock of the
//! allocator for loom's, so loom explores the interleavings of two simulated CPUs
//! (the CPU is injected with the `_on(cpu)` calls) down to single atomic operations:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test --release -p zonealloc --test loom_pcp -- --nocapture
//! ```
//!
//! The preemption bound is 2 unless `LOOM_MAX_PREEMPTIONS` says otherwise;
//! `LOOM_CHECKPOINT_FILE` replays a failing interleaving.
//!
//! Every model uses one zone of 16 frames, `max_order` 2 (four blocks of order 2),
//! pageblocks of order 2, no mobility grouping, no watermarks, 2 CPUs, and per-CPU
//! lists with `batch` 1 and `high` 2, so one free can push a list over `high`. Each
//! model ends by joining, draining, `check_invariants()` and an exact ledger: the
//! harness's own record of who owns which frame, kept in plain `std` memory that loom
//! does not instrument (it is test bookkeeping, not part of the protocol under test).
//! Explored executions are counted with a `std` atomic and printed per model.

#![cfg(loom)]

#[path = "support/figures.rs"]
mod figures;
#[path = "support/loom_model.rs"]
mod loom_model;

use std::sync::Mutex;

use loom::sync::Arc;
use loom::thread;

use zonealloc::{Config, FrameState, FreeError, Gfp, Order, PcpConfig, Pfn, ZoneAllocator};

const FRAMES: u64 = 16;

fn tiny_config(pcp_enabled: bool) -> Config {
    Config {
        pcp: PcpConfig {
            enabled: pcp_enabled,
            batch: Some(1),
            high_min: Some(2),
            high_max: Some(2),
            ..PcpConfig::default()
        },
        ..loom_model::tiny_config(FRAMES)
    }
}

fn new_allocator(pcp_enabled: bool) -> Arc<ZoneAllocator> {
    Arc::new(ZoneAllocator::new(tiny_config(pcp_enabled)).expect("tiny config"))
}

/// Who owns each frame: 0 nobody, else a tag. Uninstrumented `std` memory.
struct Ledger(Mutex<Vec<u32>>);

impl Ledger {
    fn new() -> Arc<Ledger> {
        Arc::new(Ledger(Mutex::new(vec![0; FRAMES as usize])))
    }

    #[track_caller]
    fn claim(&self, pfn: Pfn, order: Order, tag: u32) {
        assert!(pfn.is_aligned(order) && pfn.0 + order.nr_pages() <= FRAMES);
        let mut v = self.0.lock().unwrap();
        for p in pfn.0..pfn.0 + order.nr_pages() {
            assert_eq!(
                v[p as usize], 0,
                "double allocation: frame {p} of {pfn} order {order} (tag {tag}) already owned"
            );
            v[p as usize] = tag;
        }
    }

    #[track_caller]
    fn release(&self, pfn: Pfn, order: Order, tag: u32) {
        let mut v = self.0.lock().unwrap();
        for p in pfn.0..pfn.0 + order.nr_pages() {
            assert_eq!(
                v[p as usize], tag,
                "frame {p} of {pfn} not owned by tag {tag}"
            );
            v[p as usize] = 0;
        }
    }

    fn owned(&self) -> u64 {
        self.0.lock().unwrap().iter().filter(|&&t| t != 0).count() as u64
    }
}

/// Allocates and records the block in the ledger.
#[track_caller]
fn alloc(za: &ZoneAllocator, l: &Ledger, cpu: usize, order: Order, tag: u32) -> Pfn {
    let pfn = za
        .alloc_pages_on(cpu, Gfp::KERNEL, order)
        .unwrap_or_else(|e| panic!("cpu {cpu}: order {order}: {e}"));
    l.claim(pfn, order, tag);
    pfn
}

/// Releases the block in the ledger, then frees it.
#[track_caller]
fn free(za: &ZoneAllocator, l: &Ledger, cpu: usize, pfn: Pfn, order: Order, tag: u32) {
    l.release(pfn, order, tag);
    za.free_pages_on(cpu, pfn, order)
        .unwrap_or_else(|e| panic!("cpu {cpu}: free {pfn} order {order}: {e}"));
}

/// An order-1 block allocated on CPU 0 and split: two order-0 pages with one
/// reference each (split lazily: only the head records it), left out of the
/// ledger for the model to claim as it needs.
fn split_pair(za: &ZoneAllocator, l: &Ledger) -> Pfn {
    let b = alloc(za, l, 0, Order(1), 1);
    za.split_page(b, Order(1)).unwrap();
    l.release(b, Order(1), 1);
    b
}

/// The end of every model, all threads joined: the validator passes, the allocator's
/// accounting matches the ledger exactly, and after a drain nothing is stranded.
#[track_caller]
fn finish(za: &ZoneAllocator, l: &Ledger) {
    let owned = l.owned();
    let managed = za.managed_pages();
    assert_eq!(
        za.nr_free_pages() + za.nr_pcp_pages() + owned,
        managed,
        "frames lost before the drain"
    );
    za.drain_all_pages();
    assert_eq!(za.nr_pcp_pages(), 0);
    let rep = za
        .check_invariants()
        .unwrap_or_else(|v| panic!("check_invariants: {v}"));
    assert_eq!(
        rep.allocated_pages, owned,
        "validator's allocated pages vs ledger"
    );
    assert_eq!(rep.pcp_pages, 0);
    assert_eq!(za.nr_free_pages() + owned, managed, "frames lost");
    if owned == 0 {
        // Everything merged back: four free blocks of order 2 and nothing else.
        assert_eq!(za.buddyinfo().zones[0].1, vec![0, 0, FRAMES >> 2]);
    }
}

/// Runs `f` under loom with preemption bound 2 (unless the environment sets one),
/// counting and printing the executions explored.
fn model<F>(name: &str, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    // Building the allocator and validating it are straight-line but long.
    loom_model::run(name, 2, 100_000, f);
}

/// (1) Both CPUs find their lists empty and refill from the zone at once, then each
/// frees what it got to its own list (the second free reaches `high` and flushes).
#[test]
fn alloc_vs_alloc_refill() {
    model("alloc_vs_alloc_refill", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let t: Vec<_> = (0..2)
            .map(|cpu| {
                let (za, l) = (za.clone(), l.clone());
                thread::spawn(move || {
                    let tag = 10 + cpu as u32;
                    let p = alloc(&za, &l, cpu, Order(0), tag);
                    let q = alloc(&za, &l, cpu, Order(0), tag);
                    free(&za, &l, cpu, p, Order(0), tag);
                    q
                })
            })
            .collect();
        let got: Vec<Pfn> = t.into_iter().map(|h| h.join().unwrap()).collect();
        assert_ne!(got[0], got[1]);
        finish(&za, &l);
        for (cpu, p) in got.into_iter().enumerate() {
            free(&za, &l, cpu, p, Order(0), 10 + cpu as u32);
        }
        finish(&za, &l);
    });
}

/// (2) A free on CPU 0 takes its list to `high` and flushes to the zone (merging)
/// while CPU 1 refills from the zone and frees.
#[test]
fn free_overflow_vs_alloc() {
    model("free_overflow_vs_alloc", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let a = alloc(&za, &l, 0, Order(0), 1);
        let b = alloc(&za, &l, 0, Order(0), 1);
        free(&za, &l, 0, a, Order(0), 1);
        assert_eq!(
            za.nr_pcp_pages(),
            1,
            "CPU 0's list holds one page, below high"
        );
        let t1 = {
            let (za, l) = (za.clone(), l.clone());
            // count 2 >= high 2: flush.
            thread::spawn(move || free(&za, &l, 0, b, Order(0), 1))
        };
        let t2 = {
            let (za, l) = (za.clone(), l.clone());
            thread::spawn(move || {
                let c = alloc(&za, &l, 1, Order(0), 2);
                let d = alloc(&za, &l, 1, Order(1), 2);
                free(&za, &l, 1, c, Order(0), 2);
                d
            })
        };
        t1.join().unwrap();
        let d = t2.join().unwrap();
        finish(&za, &l);
        free(&za, &l, 1, d, Order(1), 2);
        finish(&za, &l);
    });
}

/// (3) A block allocated on CPU 0 is freed on CPU 1 (to CPU 1's list), which then
/// allocates from its list, while CPU 0 allocates and frees.
#[test]
fn remote_free_vs_local_alloc() {
    model("remote_free_vs_local_alloc", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let x = alloc(&za, &l, 0, Order(0), 1);
        let t1 = {
            let (za, l) = (za.clone(), l.clone());
            thread::spawn(move || {
                free(&za, &l, 1, x, Order(0), 1);
                let z = alloc(&za, &l, 1, Order(0), 3);
                free(&za, &l, 1, z, Order(0), 3);
            })
        };
        let t2 = {
            let (za, l) = (za.clone(), l.clone());
            thread::spawn(move || {
                let y = alloc(&za, &l, 0, Order(0), 2);
                free(&za, &l, 0, y, Order(0), 2);
            })
        };
        t1.join().unwrap();
        t2.join().unwrap();
        finish(&za, &l);
    });
}

/// (4) `drain_all_pages()` races with CPU 1 allocating and freeing and CPU 0 freeing;
/// nothing may be stranded on a list after the join and a drain.
#[test]
fn drain_all_vs_alloc_free() {
    model("drain_all_vs_alloc_free", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        // CPU 1's list holds a page before the race; CPU 0 holds a block.
        let y = alloc(&za, &l, 1, Order(0), 1);
        free(&za, &l, 1, y, Order(0), 1);
        let w = alloc(&za, &l, 0, Order(1), 1);
        assert_eq!(za.nr_pcp_pages(), 1);
        let t1 = {
            let za = za.clone();
            thread::spawn(move || {
                za.drain_all_pages();
            })
        };
        let t2 = {
            let (za, l) = (za.clone(), l.clone());
            thread::spawn(move || {
                let z = alloc(&za, &l, 1, Order(0), 2);
                free(&za, &l, 1, z, Order(0), 2);
            })
        };
        let t3 = {
            let (za, l) = (za.clone(), l.clone());
            thread::spawn(move || free(&za, &l, 0, w, Order(1), 1))
        };
        t1.join().unwrap();
        t2.join().unwrap();
        t3.join().unwrap();
        finish(&za, &l);
    });
}

/// (8) Two threads on the same CPU (a thread migrated, or a drain holds the list):
/// one gets the per-CPU lock, the other's `try_lock` fails and it goes to the zone.
#[test]
fn same_cpu_trylock_fallback() {
    model("same_cpu_trylock_fallback", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let t: Vec<_> = (0..2)
            .map(|k| {
                let (za, l) = (za.clone(), l.clone());
                thread::spawn(move || {
                    let tag = 20 + k;
                    let p = alloc(&za, &l, 0, Order(0), tag);
                    free(&za, &l, 0, p, Order(0), tag);
                })
            })
            .collect();
        for h in t {
            h.join().unwrap();
        }
        finish(&za, &l);
    });
}

/// (9) `pcp_decay()` (the vmstat worker) flushes CPU 0's list while CPU 0 frees and
/// allocates.
#[test]
fn decay_vs_free_alloc() {
    model("decay_vs_free_alloc", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let a = alloc(&za, &l, 0, Order(0), 1);
        let b = alloc(&za, &l, 0, Order(1), 1);
        free(&za, &l, 0, a, Order(0), 1);
        let t1 = {
            let za = za.clone();
            thread::spawn(move || {
                za.pcp_decay();
            })
        };
        let t2 = {
            let (za, l) = (za.clone(), l.clone());
            thread::spawn(move || {
                free(&za, &l, 0, b, Order(1), 1);
                let c = alloc(&za, &l, 0, Order(0), 2);
                free(&za, &l, 0, c, Order(0), 2);
            })
        };
        t1.join().unwrap();
        t2.join().unwrap();
        finish(&za, &l);
    });
}

/// (9b) A `LocalCache` (blocks of its own: loom builds have no per-CPU stacks)
/// whose owner frees into it and allocates from it while another thread empties
/// every cache with `drain_all_pages`, then decays them: the drain takes the
/// cache's lock, so it reaches the blocks of an owner between calls (idle) and
/// waits for one inside a call, and no block is lost or handed out twice.
#[test]
fn local_cache_vs_drain() {
    model("local_cache_vs_drain", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap().with_batch(1);
        let a = c.alloc(Order(0)).unwrap();
        l.claim(a, Order(0), 1);
        l.release(a, Order(0), 1);
        c.free(a, Order(0)).unwrap();
        assert_eq!(c.cached_pages(), 1);
        let t1 = {
            let za = za.clone();
            thread::spawn(move || {
                za.drain_all_pages();
                za.pcp_decay();
            })
        };
        let b = c.alloc(Order(0)).unwrap();
        l.claim(b, Order(0), 2);
        l.release(b, Order(0), 2);
        c.free(b, Order(0)).unwrap();
        t1.join().unwrap();
        finish(&za, &l);
        assert_eq!(
            c.cached_pages(),
            0,
            "the drain in `finish` reached the cache"
        );
    });
}

/// Two threads free the same order-1 block (on CPU 0 and CPU 1); returns both results.
/// The winner's free fills CPU 0's or 1's list to `high` (2 pages), so it is flushed
/// and merged with the block's free buddies at once.
fn race_two_frees() -> (Pfn, Vec<Result<(), FreeError>>) {
    let za = new_allocator(true);
    let l = Ledger::new();
    let b = alloc(&za, &l, 0, Order(1), 1);
    l.release(b, Order(1), 1);
    let t: Vec<_> = (0..2)
        .map(|cpu| {
            let za = za.clone();
            thread::spawn(move || za.free_pages_on(cpu, b, Order(1)))
        })
        .collect();
    let r: Vec<Result<(), FreeError>> = t.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(
        r.iter().filter(|x| x.is_ok()).count(),
        1,
        "both frees of one block returned {r:?}"
    );
    finish(&za, &l);
    (b, r)
}

/// (5) Two threads free the same block: exactly one succeeds, the other is refused,
/// and the block is freed exactly once (the ledger and validator agree).
#[test]
fn double_free_race() {
    model("double_free_race", || {
        race_two_frees();
    });
}

/// (5, strict) The refused free of (5) must say `AlreadyFree`, as it does without a
/// race.
///
/// Bug: `ZoneAllocator::classify` (allocator.rs) reads frame words without the zone
/// lock, but `ZoneLocked::free_one_page_locked` (buddy.rs) sets the freed head to
/// `Tail` *before* the merged block's head is published by `add_to_free_list`. A
/// second free that reads the head inside that window finds a `Tail` frame with no
/// free block around it and returns `TailPage(pfn)` instead of `AlreadyFree(pfn)`.
/// Interleaving: T0 `free_pages_on(0, b, 1)` freezes b, puts it on CPU 0's list,
/// which reaches `high` and flushes: zone lock, `free_one_page_locked` sets b's
/// word to `Tail`; T1 `free_pages_on(1, b, 1)` reads `Tail`, `classify` walks
/// orders 1..=2 and finds no free head: `TailPage`; T0 then merges and publishes
/// `Buddy{2}`.
#[test]
fn double_free_race_reports_already_free() {
    model("double_free_race_reports_already_free", || {
        let (b, r) = race_two_frees();
        for x in &r {
            if let Err(e) = x {
                assert_eq!(*e, FreeError::AlreadyFree(b), "the losing free: {r:?}");
            }
        }
    });
}

/// (6a) Two references, dropped at once by `put_page` and `free_pages_on`: exactly one
/// drop frees the block.
#[test]
fn put_page_vs_free() {
    model("put_page_vs_free", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let b = alloc(&za, &l, 0, Order(0), 1);
        za.get_page(b).unwrap();
        l.release(b, Order(0), 1);
        let t1 = {
            let za = za.clone();
            thread::spawn(move || za.put_page(b).unwrap())
        };
        let t2 = {
            let za = za.clone();
            thread::spawn(move || za.free_pages_on(1, b, Order(0)).unwrap())
        };
        t1.join().unwrap();
        t2.join().unwrap();
        assert!(
            !matches!(za.frame_state(b), Some(FrameState::Allocated { .. })),
            "block still allocated after both references were dropped"
        );
        finish(&za, &l);
    });
}

/// (6b) `get_page` races with the last free: it either takes a reference before the
/// free (and then drops it, freeing the block) or is refused; never a reference on a
/// free block.
#[test]
fn get_page_vs_last_free() {
    model("get_page_vs_last_free", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let b = alloc(&za, &l, 0, Order(0), 1);
        l.release(b, Order(0), 1);
        let t1 = {
            let za = za.clone();
            thread::spawn(move || match za.get_page(b) {
                Ok(()) => {
                    // Our reference keeps the block allocated until we drop it.
                    assert!(matches!(
                        za.frame_state(b),
                        Some(FrameState::Allocated { .. })
                    ));
                    za.put_page(b).unwrap();
                    true
                }
                Err(FreeError::AlreadyFree(p)) => {
                    assert_eq!(p, b);
                    false
                }
                Err(e) => panic!("get_page on a block being freed: {e}"),
            })
        };
        let t2 = {
            let za = za.clone();
            thread::spawn(move || za.free_pages_on(1, b, Order(0)).unwrap())
        };
        t1.join().unwrap();
        t2.join().unwrap();
        finish(&za, &l);
    });
}

/// Reads one zone snapshot with `free_counts()` and checks it in itself: the
/// per-order, per-type block counts add up to the free-page counter of the same
/// snapshot, and that counter lies in `[managed - at_most_allocated, managed]`.
fn check_snapshot(za: &ZoneAllocator, at_most_allocated: u64) {
    let managed = za.managed_pages();
    let z = &za.free_counts()[0];
    // Types 0..=3: every type but Isolate (index 4).
    let pages_at = |o: usize| z.nr_free[o][..4].iter().sum::<u64>() << o;
    let listed: u64 = (0..z.nr_free.len()).map(pages_at).sum();
    assert_eq!(
        listed, z.nr_free_pages,
        "torn snapshot: lists hold {listed} pages, counter says {}",
        z.nr_free_pages
    );
    // Pageblock order is 2 = max_order: only order-2 blocks count.
    assert_eq!(pages_at(2), z.nr_free_pages_blocks, "torn snapshot: {z:?}");
    assert!(z.nr_free_pages <= managed && z.nr_free_pages >= managed - at_most_allocated);
}

/// (7a) A lock-free statistics reader runs while a free merges two levels up
/// (0 + 1 -> order 1, + 2..3 -> order 2): its snapshot is never torn.
#[test]
fn stats_snapshot_vs_merge() {
    model("stats_snapshot_vs_merge", || {
        // Per-CPU lists off: the free goes straight to the buddy lists and merges.
        let za = new_allocator(false);
        let l = Ledger::new();
        let a = alloc(&za, &l, 0, Order(0), 1);
        let t1 = {
            let (za, l) = (za.clone(), l.clone());
            thread::spawn(move || free(&za, &l, 0, a, Order(0), 1))
        };
        let t2 = {
            let za = za.clone();
            thread::spawn(move || check_snapshot(&za, 1))
        };
        t1.join().unwrap();
        t2.join().unwrap();
        finish(&za, &l);
    });
}

/// (7b) The same reader while an allocation splits an order-2 block in two levels
/// (`expand`), through a per-CPU refill.
#[test]
fn stats_snapshot_vs_split() {
    model("stats_snapshot_vs_split", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let t1 = {
            let (za, l) = (za.clone(), l.clone());
            thread::spawn(move || alloc(&za, &l, 0, Order(0), 1))
        };
        let t2 = {
            let za = za.clone();
            // The refill may take up to `batch` = 1 block: one page off the lists.
            thread::spawn(move || check_snapshot(&za, 1))
        };
        let a = t1.join().unwrap();
        t2.join().unwrap();
        finish(&za, &l);
        free(&za, &l, 0, a, Order(0), 1);
        finish(&za, &l);
    });
}

/// (7c) The free-page counter alone, read without the zone lock as the watermark
/// checks read it, while an unmovable allocation claims a whole movable pageblock
/// (mobility grouping on, per-CPU lists off): the claim retypes the block and
/// splits it, and the reader sees the count before or after that one page, never
/// a dip in between. A dip to 12 of 16 here is, at full size, a zone that reads
/// as empty to a watermark check and fails an allocation it could serve.
#[test]
fn free_counter_vs_claim() {
    model("free_counter_vs_claim", || {
        let za = Arc::new(
            ZoneAllocator::new(Config {
                mobility_grouping: true,
                pcp: PcpConfig {
                    enabled: false,
                    ..PcpConfig::default()
                },
                ..tiny_config(false)
            })
            .expect("tiny config"),
        );
        let l = Ledger::new();
        let t1 = {
            let (za, l) = (za.clone(), l.clone());
            thread::spawn(move || alloc(&za, &l, 0, Order(0), 1))
        };
        let t2 = {
            let za = za.clone();
            thread::spawn(move || {
                let free = za.nr_free_pages();
                assert!(
                    free == FRAMES || free == FRAMES - 1,
                    "free-page counter read {free}, neither before nor after the claim"
                );
            })
        };
        let a = t1.join().unwrap();
        t2.join().unwrap();
        free(&za, &l, 0, a, Order(0), 1);
        finish(&za, &l);
    });
}

// -----------------------------------------------------------------------------
// LocalCache: a free into an owner's cache against every other free
// -----------------------------------------------------------------------------

/// (9a) One thread frees a block into its `LocalCache` while another frees it with
/// `free_pages_on`: exactly one wins; the cache's drop gives its block back.
#[test]
fn local_cache_free_vs_free() {
    model("local_cache_free_vs_free", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let b = alloc(&za, &l, 0, Order(0), 1);
        l.release(b, Order(0), 1);
        let t1 = {
            let za = za.clone();
            thread::spawn(move || {
                let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap();
                c.free(b, Order(0)).is_ok()
            })
        };
        let t2 = {
            let za = za.clone();
            thread::spawn(move || za.free_pages_on(1, b, Order(0)).is_ok())
        };
        let wins = t1.join().unwrap() as u32 + t2.join().unwrap() as u32;
        assert_eq!(wins, 1, "both or neither free of one block won");
        finish(&za, &l);
    });
}

/// (9b) A cache hands its one block out and frees it again while a stale free of
/// the same block races it: the stale free is refused while the block is cached
/// and wins once it is handed out (then the owner's free is refused); either way
/// exactly one free succeeds and the block ends free once.
#[test]
fn local_cache_hand_out_vs_stale_free() {
    model("local_cache_hand_out_vs_stale_free", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let b = alloc(&za, &l, 0, Order(0), 1);
        l.release(b, Order(0), 1);
        // The stale free starts once the block sits in the cache.
        let cached = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let t1 = {
            let (za, cached) = (za.clone(), cached.clone());
            thread::spawn(move || {
                let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap();
                c.free(b, Order(0)).unwrap();
                cached.store(true, loom::sync::atomic::Ordering::Release);
                let p = c.alloc(Order(0)).unwrap();
                assert_eq!(p, b, "the cache's only block");
                c.free(p, Order(0)).is_ok()
            })
        };
        let t2 = {
            let za = za.clone();
            thread::spawn(move || {
                while !cached.load(loom::sync::atomic::Ordering::Acquire) {
                    thread::yield_now();
                }
                za.free_pages_on(1, b, Order(0)).is_ok()
            })
        };
        let wins = t1.join().unwrap() as u32 + t2.join().unwrap() as u32;
        assert_eq!(
            wins, 1,
            "the block was freed {wins} times after its hand-out"
        );
        finish(&za, &l);
    });
}

// -----------------------------------------------------------------------------
// Multi-page frees: pages taken in ascending order, restored on failure
// -----------------------------------------------------------------------------

/// (8) `free_contig_range` and `free_pages_bulk` (listing the pages backwards) free
/// the same two order-0 pages at once: exactly one succeeds, the loser changes
/// nothing, and both pages are freed exactly once.
#[test]
fn contig_vs_bulk_double_free() {
    model("contig_vs_bulk_double_free", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let b = split_pair(&za, &l);
        let t1 = {
            let za = za.clone();
            thread::spawn(move || za.free_contig_range(b, 2).is_ok())
        };
        let t2 = {
            let za = za.clone();
            thread::spawn(move || za.free_pages_bulk(&[b.add(1), b]).is_ok())
        };
        let wins = t1.join().unwrap() as u32 + t2.join().unwrap() as u32;
        assert_eq!(wins, 1, "both or neither multi-page free won");
        finish(&za, &l);
    });
}

/// (9) A refused multi-page free beside the owner of its first page:
/// `free_contig_range(b, 2)` where `b + 1` is already free takes `b` for a moment
/// (a claimed word) and gives it back; the owner's `get_page`, `put_page` and free
/// of `b` meanwhile all succeed (they wait for the claim's outcome instead of
/// answering `AlreadyFree`), and the call is refused, changing nothing.
#[test]
fn refused_contig_free_vs_owner() {
    model("refused_contig_free_vs_owner", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let b = split_pair(&za, &l);
        l.claim(b, Order(0), 1);
        za.free_pages_on(0, b.add(1), Order(0)).unwrap();
        let t = {
            let za = za.clone();
            thread::spawn(move || za.free_contig_range(b, 2))
        };
        za.get_page(b).unwrap();
        assert_eq!(za.put_page(b), Ok(false));
        free(&za, &l, 1, b, Order(0), 1);
        // Refused at `b + 1`, or at `b` once the owner has freed it.
        let r = t.join().unwrap();
        assert!(
            matches!(r, Err(FreeError::AlreadyFree(p)) if p == b || p == b.add(1)),
            "{r:?}"
        );
        finish(&za, &l);
    });
}

/// (10) A lazily split block (`split_page` of a block with one reference records
/// the split in the head alone): `free_contig_range` of the whole block, which
/// takes it with one compare-and-swap on the head, races a free of its second
/// page, which first gives each page its own word. Exactly one wins: either the
/// block goes whole and the page's free is refused as already free, or the page
/// goes alone and the whole free is refused at it, changing nothing; every frame
/// is freed once.
#[test]
fn lazy_split_whole_free_vs_page_free() {
    model("lazy_split_whole_free_vs_page_free", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let b = split_pair(&za, &l);
        let t = {
            let za = za.clone();
            thread::spawn(move || za.free_contig_range(b, 2))
        };
        let single = za.free_pages_on(1, b.add(1), Order(0));
        let whole = t.join().unwrap();
        match (whole, single) {
            (Ok(()), Err(FreeError::AlreadyFree(p))) if p == b.add(1) => {}
            (Err(FreeError::AlreadyFree(p)), Ok(())) if p == b.add(1) => {
                za.free_pages_on(0, b, Order(0)).unwrap();
            }
            other => panic!("whole free and page free: {other:?}"),
        }
        finish(&za, &l);
    });
}

/// (11) Two single-page calls on the two pages of a lazily split block, each of
/// which would give the block's pages their words: one materialises, the other
/// waits for it or finds it done; `get_page` on the head and a free of the tail
/// both succeed, and the head keeps exactly its two references.
#[test]
fn lazy_split_two_page_calls() {
    model("lazy_split_two_page_calls", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let b = split_pair(&za, &l);
        l.claim(b, Order(0), 1);
        let t = {
            let za = za.clone();
            thread::spawn(move || za.free_pages_on(1, b.add(1), Order(0)))
        };
        za.get_page(b).unwrap();
        t.join().unwrap().unwrap();
        assert_eq!(za.page_count(b), Ok(2));
        assert_eq!(za.put_page(b), Ok(false));
        free(&za, &l, 0, b, Order(0), 1);
        finish(&za, &l);
    });
}

/// (12) A multi-page free that takes a lazily split block whole and is then
/// refused at a free page after it gives the block back as it was, lazy; the
/// owner's free of the block's second page meanwhile waits for that outcome (or
/// goes first) and succeeds either way, and the refusal names a free page.
#[test]
fn lazy_split_refused_bulk_vs_owner() {
    model("lazy_split_refused_bulk_vs_owner", || {
        let za = new_allocator(true);
        let l = Ledger::new();
        let b = split_pair(&za, &l);
        let c = b.add(2);
        assert!(matches!(
            za.frame_state(c),
            Some(FrameState::Free { .. } | FrameState::PerCpu { .. })
        ));
        l.claim(b, Order(0), 1);
        let t = {
            let za = za.clone();
            thread::spawn(move || za.free_pages_bulk(&[b, b.add(1), c]))
        };
        za.free_pages_on(1, b.add(1), Order(0)).unwrap();
        let r = t.join().unwrap();
        assert!(
            matches!(r, Err(FreeError::AlreadyFree(p)) if p == c || p == b.add(1)),
            "{r:?}"
        );
        free(&za, &l, 0, b, Order(0), 1);
        finish(&za, &l);
    });
}

// -----------------------------------------------------------------------------
// page_frag: the published bias
// -----------------------------------------------------------------------------

/// Frames with memory for the fragment models: a leaked buffer (loom runs each model
/// many times; the fragments never touch it).
struct Buf {
    base: usize,
}

const PAGE: usize = 4096;

impl Buf {
    fn new() -> Buf {
        let v: &'static mut [u8] = vec![0u8; FRAMES as usize * PAGE + PAGE].leak();
        Buf {
            base: (v.as_mut_ptr() as usize).next_multiple_of(PAGE),
        }
    }
}

// SAFETY: every frame maps to its own page of a leaked buffer that lives forever;
// frames are contiguous and do not overlap.
#[allow(unsafe_code)]
unsafe impl zonealloc::Backend for Buf {
    fn page_address(&self, pfn: Pfn) -> Option<std::ptr::NonNull<u8>> {
        (pfn.0 < FRAMES).then(|| {
            std::ptr::NonNull::new((self.base + pfn.0 as usize * PAGE) as *mut u8).unwrap()
        })
    }
    fn zero_pages(&self, _pfn: Pfn, _nr: u64) {}
    fn pfn_of_addr(&self, addr: *const u8) -> Option<Pfn> {
        let off = (addr as usize).checked_sub(self.base)?;
        (off < FRAMES as usize * PAGE).then_some(Pfn((off / PAGE) as u64))
    }
    fn page_size(&self) -> Option<usize> {
        Some(PAGE)
    }
}

fn frag_allocator() -> Arc<ZoneAllocator<Buf>> {
    Arc::new(ZoneAllocator::with_backend(tiny_config(true), Buf::new()).expect("tiny config"))
}

/// The end of a fragment model: every frame free again, nothing stranded.
#[track_caller]
fn frag_finish(za: &ZoneAllocator<Buf>) {
    za.drain_all_pages();
    let rep = za
        .check_invariants()
        .unwrap_or_else(|v| panic!("check_invariants: {v}"));
    assert_eq!(
        rep.allocated_pages, 0,
        "a fragment block is still allocated"
    );
    assert_eq!(za.nr_free_pages(), za.managed_pages(), "frames lost");
}

/// (9) A fragment freed twice on one thread while the owner frees the other fragment
/// and drains the cache: of the three frees exactly two (the fragments carved) are
/// accepted, whatever the order, and the block is freed exactly once.
#[test]
fn frag_over_free_vs_drain() {
    model("frag_over_free_vs_drain", || {
        let za = frag_allocator();
        let mut cache = zonealloc::PageFragCache::with_refill_order(&za, Gfp::ATOMIC, Order(0));
        let f1 = cache.alloc(64, 8).unwrap().as_ptr() as usize;
        let f2 = cache.alloc(64, 8).unwrap().as_ptr() as usize;
        let t = {
            let za = za.clone();
            thread::spawn(move || {
                let a = za.page_frag_free(f1 as *const u8).is_ok() as u32;
                a + za.page_frag_free(f1 as *const u8).is_ok() as u32
            })
        };
        let mine = za.page_frag_free(f2 as *const u8).is_ok() as u32;
        drop(cache);
        let theirs = t.join().unwrap();
        assert_eq!(
            mine + theirs,
            2,
            "frees accepted: mine {mine}, theirs {theirs}"
        );
        frag_finish(&za);
    });
}

/// (10) A legitimate fragment free races with the owner carving more fragments,
/// exhausting the block (recycling or detaching it) and refilling: the free is never
/// refused, and everything comes back.
#[test]
fn frag_free_vs_carve_and_recycle() {
    model("frag_free_vs_carve_and_recycle", || {
        let za = frag_allocator();
        let mut cache = zonealloc::PageFragCache::with_refill_order(&za, Gfp::ATOMIC, Order(0));
        let f1 = cache.alloc(2048, 8).unwrap().as_ptr() as usize;
        let t = {
            let za = za.clone();
            thread::spawn(move || za.page_frag_free(f1 as *const u8))
        };
        let f2 = cache.alloc(2048, 8).unwrap().as_ptr() as usize;
        // The block is full: this one recycles it (if f1 and f2 are back, which f2
        // is not) or detaches it and refills.
        let f3 = cache.alloc(2048, 8).unwrap().as_ptr() as usize;
        za.page_frag_free(f2 as *const u8).unwrap();
        za.page_frag_free(f3 as *const u8).unwrap();
        drop(cache);
        assert_eq!(
            t.join().unwrap(),
            Ok(()),
            "a legitimate fragment free was refused"
        );
        frag_finish(&za);
    });
}
