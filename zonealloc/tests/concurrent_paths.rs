//! The exact ledger over the contiguous, bulk and page_frag paths under real
//! threads: bulk allocations freed in bulk by other threads, split blocks freed as
//! ranges, contiguous allocations racing ordinary ones, fragments carved on one
//! thread and freed on another (Linux's page_frag_test).

#[path = "support/figures.rs"]
mod figures;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};

use zonealloc::*;

/// Every frame is owned by at most one thread: CAS 0 -> tid+1 on allocation and
/// back on free; a failed CAS is a frame handed out twice or freed by a non-owner.
struct Ledger(Vec<AtomicU32>);

impl Ledger {
    fn take(&self, pfn: Pfn, nr: u64, tid: u32) {
        for p in pfn.0..pfn.0 + nr {
            let r = self.0[p as usize].compare_exchange(
                0,
                tid + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            assert!(r.is_ok(), "frame {p:#x} handed out twice (owner {:?})", r);
        }
    }

    fn give(&self, pfn: Pfn, nr: u64) {
        for p in pfn.0..pfn.0 + nr {
            let prev = self.0[p as usize].swap(0, Ordering::AcqRel);
            assert_ne!(prev, 0, "frame {p:#x} freed but owned by nobody");
        }
    }
}

fn step(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn bulk_contig_and_frag_paths_keep_the_ledger_exact() {
    const FRAMES: u64 = 1 << 15; // 128 MiB
    const THREADS: u32 = 4;
    let iters: u64 = std::env::var("ZONEALLOC_PATHS_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let za = ZoneAllocator::with_arena(
        Config {
            nr_cpus: 2,
            ..Config::single_zone(ZoneType::Normal, Pfn(0), FRAMES)
        },
        ArenaOptions::default(),
    )
    .unwrap();
    let ledger = Ledger((0..FRAMES).map(|_| AtomicU32::new(0)).collect());
    let exchange: Mutex<Vec<Vec<Pfn>>> = Mutex::new(Vec::new());
    let cross = AtomicU64::new(0);
    let ops = AtomicU64::new(0);
    let (tx, rx) = mpsc::sync_channel::<usize>(512);
    let rx = Mutex::new(rx);
    std::thread::scope(|s| {
        for tid in 0..THREADS {
            let (za, ledger, exchange, cross, ops, tx, rx) =
                (&za, &ledger, &exchange, &cross, &ops, tx.clone(), &rx);
            s.spawn(move || {
                let mut x = 0x9e37_79b9 ^ ((tid as u64 + 1) * 0x1234_5678_9abc);
                let mut cache =
                    PageFragCache::with_refill_order(za, Gfp::ATOMIC, Order((tid % 2 * 3) as u8));
                for _ in 0..iters {
                    ops.fetch_add(1, Ordering::Relaxed);
                    match step(&mut x) % 6 {
                        0 => {
                            // Bulk allocation; hand half the arrays to another thread.
                            let mut pages = vec![None; 1 + (step(&mut x) % 64) as usize];
                            za.alloc_pages_bulk(Gfp::KERNEL, &mut pages);
                            let got: Vec<Pfn> = pages.into_iter().flatten().collect();
                            for &p in &got {
                                ledger.take(p, 1, tid);
                            }
                            if step(&mut x).is_multiple_of(2) {
                                exchange.lock().unwrap().push(got);
                            } else {
                                for &p in &got {
                                    ledger.give(p, 1);
                                }
                                za.free_pages_bulk(&got).unwrap();
                            }
                        }
                        1 => {
                            // Free another thread's array (any order).
                            let theirs = exchange.lock().unwrap().pop();
                            if let Some(mut v) = theirs {
                                if step(&mut x).is_multiple_of(2) {
                                    v.reverse();
                                }
                                for &p in &v {
                                    ledger.give(p, 1);
                                }
                                za.free_pages_bulk(&v).unwrap();
                                cross.fetch_add(v.len() as u64, Ordering::Relaxed);
                            }
                        }
                        2 => {
                            // High-order block, split, freed as one range.
                            let order = Order((step(&mut x) % 10) as u8);
                            if let Ok(p) = za.alloc_pages(Gfp::KERNEL, order) {
                                ledger.take(p, order.nr_pages(), tid);
                                za.split_page(p, order).unwrap();
                                ledger.give(p, order.nr_pages());
                                za.free_contig_range(p, order.nr_pages()).unwrap();
                            }
                        }
                        3 => {
                            // A contiguous run of any length, racing everything else.
                            let nr = 1 + step(&mut x) % 700;
                            if let Ok(p) = za.alloc_contig_pages(nr, Gfp::KERNEL, 0) {
                                ledger.take(p, nr, tid);
                                ledger.give(p, nr);
                                za.free_contig_range(p, nr).unwrap();
                            }
                        }
                        _ => {
                            // Fragments: carve here, free wherever a receiver is.
                            let size = 64 + (step(&mut x) % 3000) as usize;
                            if let Ok(f) = cache.alloc(size, 64) {
                                // A full ring (every thread carving) is freed here.
                                if tx.try_send(f.as_ptr() as usize).is_err() {
                                    za.page_frag_free(f.as_ptr()).unwrap();
                                }
                            }
                            let got = rx.lock().unwrap().try_recv();
                            if let Ok(a) = got {
                                za.page_frag_free(a as *const u8).unwrap();
                                cross.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
            });
        }
        drop(tx);
    });
    for a in rx.into_inner().unwrap().try_iter() {
        za.page_frag_free(a as *const u8).unwrap();
    }
    for v in exchange.into_inner().unwrap() {
        for &p in &v {
            ledger.give(p, 1);
        }
        za.free_pages_bulk(&v).unwrap();
    }
    za.drain_all_pages();
    let r = za.check_invariants().unwrap();
    assert_eq!(
        r.allocated_pages, 0,
        "frames still allocated after every owner freed"
    );
    assert!(ledger.0.iter().all(|o| o.load(Ordering::Relaxed) == 0));
    assert_eq!(za.nr_free_pages(), za.managed_pages());
    let ops = ops.load(Ordering::Relaxed);
    let cross = cross.load(Ordering::Relaxed);
    println!("concurrent paths: {THREADS} threads, {ops} operations, {cross} cross-thread frees, ledger violations 0, frames lost 0");
    figures::record(
        "concurrent-paths",
        env!("CARGO_MANIFEST_DIR"),
        &[
            ("operations".into(), ops),
            ("threads".into(), THREADS as u64),
            ("cross_thread_frees".into(), cross),
            ("invariant_checks".into(), 1),
            ("violations".into(), 0),
            ("frames_lost".into(), 0),
        ],
    );
}
