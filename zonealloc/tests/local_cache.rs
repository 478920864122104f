//! `LocalCache`: the owner-local layer in front of the per-CPU lists. What it
//! hands out, what it refuses (each refusal changes nothing), what it gives back,
//! and an exact ledger of threads that allocate through their caches and free
//! through each other's.
//!
//! These tests build allocators without the per-CPU stacks (`PcpConfig::rseq`
//! off), where a cache holds blocks of its own; with the stacks a cache is a thin
//! layer over `alloc_pages`/`free_pages` (see `thin_caches_hold_nothing`).

use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};

use zonealloc::*;

#[path = "support/settled.rs"]
mod support;
use support::settled;

fn za(bytes: u64) -> ZoneAllocator {
    ZoneAllocator::new(Config {
        nr_cpus: 2,
        pcp: PcpConfig {
            rseq: false,
            ..PcpConfig::default()
        },
        ..Config::with_bytes(bytes)
    })
    .unwrap()
}

/// With the per-CPU stacks (where the process has them), a cache is
/// `alloc_pages`/`free_pages` by another name: it holds nothing, and a second
/// free is refused all the same.
#[test]
fn thin_caches_hold_nothing() {
    let za = ZoneAllocator::new(Config::with_bytes(16 << 20)).unwrap();
    let mut c = za.local_cache(Gfp::KERNEL).unwrap();
    let got: Vec<Pfn> = (0..1000).map(|_| c.alloc(Order(0)).unwrap()).collect();
    for &p in &got {
        c.free(p, Order(0)).unwrap();
    }
    assert_eq!(
        c.free(got[0], Order(0)),
        Err(FreeError::AlreadyFree(got[0]))
    );
    if za.uses_cpu_stacks() {
        assert_eq!(c.cached_pages(), 0);
        assert_eq!(c.flush(), 0);
    }
    drop(c);
    za.drain_all_pages();
    assert_eq!(za.nr_free_pages(), za.managed_pages());
    za.check_invariants().unwrap();
}

#[test]
fn blocks_round_trip_and_a_second_free_is_refused_everywhere() {
    let za = za(16 << 20);
    let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap();
    for o in 0..=PAGE_ALLOC_COSTLY_ORDER {
        let order = Order(o);
        let p = c.alloc(order).unwrap();
        assert!(p.is_aligned(order));
        assert_eq!(
            za.frame_state(p),
            Some(FrameState::Allocated { order, refcount: 1 })
        );
        c.free(p, order).unwrap();
        assert_eq!(za.frame_state(p), Some(FrameState::Cached { order }));
        let before = za.state_digest();
        assert_eq!(c.free(p, order), Err(FreeError::AlreadyFree(p)));
        assert_eq!(za.free_pages(p, order), Err(FreeError::AlreadyFree(p)));
        assert_eq!(za.put_page(p), Err(FreeError::AlreadyFree(p)));
        assert_eq!(za.get_page(p), Err(FreeError::AlreadyFree(p)));
        assert_eq!(za.split_page(p, order), Err(FreeError::AlreadyFree(p)));
        let mut other = za.local_cache_on(1, Gfp::KERNEL).unwrap();
        assert_eq!(other.free(p, order), Err(FreeError::AlreadyFree(p)));
        drop(other);
        assert_eq!(
            za.state_digest(),
            before,
            "a refused free changed the state"
        );
        // The same block comes back first: the cache is last in, first out.
        assert_eq!(c.alloc(order).unwrap(), p);
        c.free(p, order).unwrap();
    }
    let held = c.cached_pages();
    assert!(held > 0);
    let r = za.check_invariants().unwrap();
    assert_eq!(
        r.cached_pages, held,
        "the validator counts the cache's frames"
    );
    assert_eq!(r.allocated_pages, 0);
    drop(c);
    settled(&za);
}

#[test]
fn bad_frees_get_typed_errors_and_change_nothing() {
    let za = za(16 << 20);
    let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap();
    let p1 = c.alloc(Order(1)).unwrap();
    let guarded = za.alloc_block(Gfp::KERNEL, Order(0)).unwrap();
    let g = guarded.pfn();
    let max = za.config().max_order;
    let end = Pfn(za.managed_pages());
    let before = za.state_digest();
    let cached = c.cached_pages();
    assert_eq!(
        c.free(p1, Order(0)),
        Err(FreeError::WrongOrder {
            pfn: p1,
            given: Order(0),
            actual: Order(1)
        })
    );
    assert_eq!(
        c.free(p1.add(1), Order(0)),
        Err(FreeError::TailPage(p1.add(1)))
    );
    assert_eq!(c.free(g, Order(0)), Err(FreeError::Guarded(g)));
    assert_eq!(c.free(end, Order(0)), Err(FreeError::OutOfRange(end)));
    assert_eq!(
        c.free(Pfn(1), Order(1)),
        Err(FreeError::Misaligned {
            pfn: Pfn(1),
            order: Order(1)
        })
    );
    assert_eq!(
        c.free(Pfn(0), Order(max.0 + 1)),
        Err(FreeError::InvalidOrder(Order(max.0 + 1)))
    );
    assert_eq!(
        za.state_digest(),
        before,
        "a refused free changed the state"
    );
    assert_eq!(c.cached_pages(), cached, "a refused free reached the cache");
    c.free(p1, Order(1)).unwrap();
    drop(guarded);
    drop(c);
    settled(&za);
}

#[test]
fn a_shared_block_enters_the_cache_with_its_last_reference() {
    let za = za(16 << 20);
    let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap();
    let p = c.alloc(Order(0)).unwrap();
    za.get_page(p).unwrap();
    c.free(p, Order(0)).unwrap();
    assert_eq!(
        za.frame_state(p),
        Some(FrameState::Allocated {
            order: Order(0),
            refcount: 1
        }),
        "the first free drops a reference only"
    );
    c.free(p, Order(0)).unwrap();
    assert_eq!(
        za.frame_state(p),
        Some(FrameState::Cached { order: Order(0) })
    );
    drop(c);
    settled(&za);
}

#[test]
fn high_orders_and_foreign_zones_pass_through() {
    // DMA32 below 4 GiB (here: frames 0..4096) and Normal above.
    let za = ZoneAllocator::new(Config {
        nodes: vec![NodeConfig {
            zones: vec![
                ZoneConfig::new(ZoneType::Dma32, Pfn(0), 4096),
                ZoneConfig::new(ZoneType::Normal, Pfn(4096), 4096),
            ],
        }],
        nr_cpus: 1,
        min_free_kbytes: Some(0),
        ..Config::default()
    })
    .unwrap();
    let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap();
    // Above PAGE_ALLOC_COSTLY_ORDER: straight through alloc_pages and free_pages.
    let big = c.alloc(Order(5)).unwrap();
    c.free(big, Order(5)).unwrap();
    assert_eq!(c.cached_pages(), 0);
    assert!(!matches!(
        za.frame_state(big),
        Some(FrameState::Cached { .. } | FrameState::Allocated { .. })
    ));
    // A DMA32 page freed into a Normal cache goes back to its own zone.
    let low = za
        .alloc_pages_on(0, Gfp::KERNEL | Gfp::DMA32, Order(0))
        .unwrap();
    assert!(low.0 < 4096);
    c.free(low, Order(0)).unwrap();
    assert_eq!(c.cached_pages(), 0);
    assert!(!matches!(
        za.frame_state(low),
        Some(FrameState::Cached { .. } | FrameState::Allocated { .. })
    ));
    drop(c);
    settled(&za);
}

#[test]
fn frees_of_another_mobility_type_are_not_kept() {
    let za = za(64 << 20);
    let mut movable = za.local_cache_on(0, Gfp::HIGHUSER_MOVABLE).unwrap();
    let mut unmovable = za.local_cache_on(0, Gfp::KERNEL).unwrap();
    let m = movable.alloc(Order(0)).unwrap();
    let u = unmovable.alloc(Order(0)).unwrap();
    let m_cached = movable.cached_pages();
    let u_cached = unmovable.cached_pages();
    // Each freed into the other type's cache: handed on, not kept.
    unmovable.free(m, Order(0)).unwrap();
    movable.free(u, Order(0)).unwrap();
    assert_eq!(movable.cached_pages(), m_cached);
    assert_eq!(unmovable.cached_pages(), u_cached);
    drop((movable, unmovable));
    settled(&za);
}

#[test]
fn the_cache_holds_at_most_two_batches_and_flushes_the_rest() {
    let za = za(64 << 20);
    let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap().with_batch(8);
    let pages: Vec<Pfn> = (0..100).map(|_| c.alloc(Order(0)).unwrap()).collect();
    for &p in &pages {
        c.free(p, Order(0)).unwrap();
        assert!(c.cached_pages() < 16, "held {}", c.cached_pages());
    }
    let held = c.cached_pages();
    assert_eq!(c.flush(), held);
    assert_eq!(c.cached_pages(), 0);
    assert_eq!(za.check_invariants().unwrap().cached_pages, 0);
    drop(c);
    settled(&za);
}

/// What each refill of `allocs` order-0 allocations through `c` took: the jumps
/// of `cached_pages` (plus the block the allocation itself took).
fn refills(c: &mut LocalCache<'_, AbstractFrames>, allocs: usize, got: &mut Vec<Pfn>) -> Vec<u64> {
    let mut took = Vec::new();
    for _ in 0..allocs {
        let before = c.cached_pages();
        got.push(c.alloc(Order(0)).unwrap());
        if c.cached_pages() >= before {
            took.push(c.cached_pages() + 1 - before);
        }
    }
    took
}

#[test]
fn a_run_of_refills_doubles_each_refill_and_a_flush_starts_again_at_a_batch() {
    let za = za(64 << 20);
    let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap().with_batch(8);
    let mut got = Vec::new();
    let took = refills(&mut c, 600, &mut got);
    assert!(took.len() >= 6, "refills: {took:?}");
    for (i, &t) in took.iter().enumerate() {
        // One batch, then twice the one before, up to the largest limit; a refill
        // may take its last free block whole (less than twice what it asked).
        let asked = 8u64 << i.min(LOCAL_CACHE_MAX_BATCHES.trailing_zeros() as usize);
        assert!(
            (asked..2 * asked).contains(&t),
            "refill {i} took {t}, asked {asked}: {took:?}"
        );
    }
    // Frees past the limit (two batches, 16) flush, down to a batch below it at
    // once: what the last large refill left goes back with the first flush.
    let held = c.cached_pages();
    assert!(held >= 16, "the run's last refill left only {held}");
    c.free(got.pop().unwrap(), Order(0)).unwrap();
    assert_eq!(c.cached_pages(), 8, "held {held}, then freed one");
    // Every later flush, too, leaves a batch below the limit: never fewer.
    for p in got.drain(..) {
        c.free(p, Order(0)).unwrap();
        assert!(
            (8..16).contains(&c.cached_pages()),
            "held {}",
            c.cached_pages()
        );
    }
    // A second run doubles again; a flush of the whole cache, with no free in
    // between to flush it, starts the next run at one batch, doubling from there.
    let took = refills(&mut c, 40, &mut got);
    assert!(
        took.len() >= 2 && (8..16).contains(&took[0]) && (16..32).contains(&took[1]),
        "a second run: {took:?}"
    );
    c.flush();
    let took = refills(&mut c, 40, &mut got);
    assert!(
        took.len() >= 2 && (8..16).contains(&took[0]) && (16..32).contains(&took[1]),
        "refills after a flush: {took:?}"
    );
    for p in got {
        c.free(p, Order(0)).unwrap();
    }
    drop(c);
    settled(&za);
}

#[test]
fn a_refill_after_a_flush_raises_the_limit_and_flushes_in_a_row_lower_it() {
    // An owner whose working set swings between 0 and 40 blocks with a batch of
    // 8: at the first limit (16) every swing flushes and refills again; once the
    // limit has grown past the swing, the cache holds it without the zone.
    let za = za(64 << 20);
    let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap().with_batch(8);
    let held_at_most = |c: &LocalCache<'_, AbstractFrames>| c.cached_pages();
    let mut peak = 0;
    for round in 0..6 {
        let live: Vec<Pfn> = (0..40).map(|_| c.alloc(Order(0)).unwrap()).collect();
        for p in live {
            c.free(p, Order(0)).unwrap();
            peak = peak.max(held_at_most(&c));
        }
        if round == 0 {
            assert!(
                peak < 16,
                "the first swing flushes at two batches: held {peak}"
            );
        }
    }
    assert!(peak >= 32, "the limit never grew: held at most {peak}");
    assert!(
        peak < (LOCAL_CACHE_MAX_BATCHES * 8) as u64,
        "held {peak}, above the largest limit"
    );
    let grown = za.check_invariants().unwrap();
    assert_eq!(grown.cached_pages, c.cached_pages());
    // Frees with no allocation in between: two flushes in a row halve the limit,
    // down to two batches again.
    let many: Vec<Pfn> = (0..200)
        .map(|_| za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap())
        .collect();
    let mut last = 0;
    for p in many {
        c.free(p, Order(0)).unwrap();
        last = c.cached_pages();
    }
    assert!(last < 16, "still holding {last} after a run of frees");
    drop(c);
    settled(&za);
}

#[test]
fn every_page_can_still_be_had_through_a_cache() {
    // No reserve: every page of the zone, through the cache's refills and then the
    // ordinary path's drains once the watermark stops the refills.
    let za = ZoneAllocator::new(Config {
        nr_cpus: 2,
        min_free_kbytes: Some(0),
        pcp: PcpConfig {
            rseq: false,
            ..PcpConfig::default()
        },
        ..Config::with_bytes(8 << 20)
    })
    .unwrap();
    let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap();
    let mut got = Vec::new();
    while let Ok(p) = c.alloc(Order(0)) {
        got.push(p);
    }
    assert_eq!(got.len() as u64, za.managed_pages());
    let mut sorted = got.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), got.len(), "a page was handed out twice");
    for p in got {
        c.free(p, Order(0)).unwrap();
    }
    drop(c);
    settled(&za);
}

#[test]
fn near_the_watermark_a_refill_takes_what_this_cpus_list_holds_at_once() {
    // Fewer pages above the low watermark than a batch, so the cache cannot refill
    // from the zone, while CPU 0's list holds blocks its last refill took: the
    // cache takes them all in one refill instead of an `alloc_pages` call each,
    // and the zone's free count does not move.
    let za = za(8 << 20);
    let (id, ..) = za.zones().next().unwrap();
    let [_, low, ..] = za.watermarks(id).unwrap();
    let batch = LOCAL_CACHE_BATCH as u64;
    let mut got = Vec::new();
    while !(za.nr_free_pages() < low + batch && za.nr_pcp_pages() >= 2) {
        assert!(
            za.nr_free_pages() > low / 2,
            "never below low + a batch with a list"
        );
        got.push(za.alloc_pages_on(0, Gfp::KERNEL, Order(0)).unwrap());
    }
    let (free, listed) = (za.nr_free_pages(), za.nr_pcp_pages());
    let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap();
    got.push(c.alloc(Order(0)).unwrap());
    assert_eq!(
        c.cached_pages(),
        listed.min(batch) - 1,
        "the list held {listed}"
    );
    // The lists gave what the cache took (their pages and the cache's both count
    // in `nr_pcp_pages`).
    assert_eq!(
        za.nr_pcp_pages() - za.nr_cached_pages(),
        listed - listed.min(batch)
    );
    assert_eq!(za.nr_free_pages(), free, "the zone gave nothing");
    assert_eq!(
        za.check_invariants().unwrap().cached_pages,
        c.cached_pages()
    );
    for p in got {
        c.free(p, Order(0)).unwrap();
    }
    drop(c);
    settled(&za);
}

#[test]
fn a_batch_larger_than_any_zone_is_not_an_overflow() {
    // A refill asks the watermark for batch-many blocks; a batch no zone can hold
    // fails that check (the cache then takes what this CPU's list holds, or goes
    // through `alloc_pages`) instead of overflowing into a check that passes.
    let za = za(64 << 20);
    for batch in [usize::MAX, 1 << 62, 1 << 40] {
        let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap().with_batch(batch);
        let got: Vec<Pfn> = (0..100).map(|_| c.alloc(Order(0)).unwrap()).collect();
        let more = c.alloc(Order(3)).unwrap();
        c.free(more, Order(3)).unwrap();
        for p in got {
            c.free(p, Order(0)).unwrap();
        }
        drop(c);
        settled(&za);
    }
}

#[test]
fn alloc_contig_range_drains_the_caches_holding_its_frames() {
    let za = za(16 << 20);
    let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap();
    let p = c.alloc(Order(0)).unwrap();
    c.free(p, Order(0)).unwrap();
    assert!(za.nr_cached_pages() > 0);
    let start = Pfn(p.0 & !511);
    // The cache's owner is idle (it holds the cache but makes no call): the range
    // is taken all the same, the cached frames drained into it.
    za.alloc_contig_range(start, start.add(512)).unwrap();
    assert_eq!(za.nr_cached_pages(), 0);
    assert!(za.check_invariants().is_ok());
    // Every frame of the range is the caller's now: a cached copy of one would
    // make this free refuse it.
    za.free_contig_range(start, 512).unwrap();
    // The cache goes on working.
    let q = c.alloc(Order(0)).unwrap();
    c.free(q, Order(0)).unwrap();
    drop(c);
    settled(&za);
}

#[test]
fn poison_is_written_on_the_way_in_and_checked_on_the_way_out() {
    let za = ZoneAllocator::with_arena(
        Config {
            nr_cpus: 1,
            debug: DebugConfig {
                poison: true,
                ..DebugConfig::default()
            },
            ..Config::with_bytes(8 << 20)
        },
        ArenaOptions::default(),
    )
    .unwrap();
    let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap();
    let p = c.alloc(Order(0)).unwrap();
    let addr = za.page_address(p).unwrap();
    c.free(p, Order(0)).unwrap();
    // SAFETY: the arena maps the page; it is free, so nothing else uses it, and the
    // write is the use-after-free the poison check exists to catch.
    unsafe { *addr.as_ptr().add(100) = 0x42 };
    let q = c.alloc(Order(0)).unwrap();
    assert_ne!(q, p, "a corrupted page was handed out again");
    let reports = za.bad_page_reports();
    assert_eq!(reports.len(), 1);
    assert_eq!((reports[0].pfn, reports[0].offset), (p, 100));
    c.free(q, Order(0)).unwrap();
    drop(c);
    za.drain_all_pages();
    let r = za.check_invariants().unwrap();
    assert_eq!(r.bad_pages, 1);
    assert_eq!(r.allocated_pages, 0);
}

/// Threads allocate through their own caches and free half of what they hold
/// through another thread's cache (and some through `free_pages`), with racing
/// double frees thrown in; a shared ledger records who owns which page, and at the
/// end the allocator's accounting matches it exactly.
#[test]
fn threads_with_caches_keep_an_exact_ledger() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 50_000;
    let za = Arc::new(za(32 << 20));
    // Pages handed from thread to thread: (page, allocating thread).
    let mailbox: Arc<Vec<Mutex<Vec<Pfn>>>> =
        Arc::new((0..THREADS).map(|_| Mutex::new(Vec::new())).collect());
    let ledger: Arc<Mutex<HashMap<Pfn, usize>>> = Arc::new(Mutex::new(HashMap::new()));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (za, mailbox, ledger, barrier) =
                (za.clone(), mailbox.clone(), ledger.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut c = za.local_cache_on(t, Gfp::KERNEL).unwrap().with_batch(16);
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
                let mut live: Vec<Pfn> = Vec::new();
                let mut refused = 0u64;
                barrier.wait();
                for _ in 0..ROUNDS {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    match rng % 8 {
                        // At most 256 live pages a thread: 4 x 256 of the 8,192.
                        0..=3 if live.len() < 256 => {
                            let p = c.alloc(Order(0)).unwrap();
                            assert!(ledger.lock().unwrap().insert(p, t).is_none(), "{p} twice");
                            live.push(p);
                        }
                        0..=5 if !live.is_empty() => {
                            let p = live.swap_remove(rng as usize % live.len());
                            ledger.lock().unwrap().remove(&p).unwrap();
                            c.free(p, Order(0)).unwrap();
                            // A stale second free, through the cache or the raw API,
                            // while the page is still in this cache (only this thread
                            // can take it out, so the free must be refused).
                            if za.frame_state(p) == Some(FrameState::Cached { order: Order(0) }) {
                                let again = if rng & 64 == 0 {
                                    c.free(p, Order(0))
                                } else {
                                    za.free_pages_on(t, p, Order(0))
                                };
                                assert_eq!(again, Err(FreeError::AlreadyFree(p)));
                                refused += 1;
                            }
                        }
                        // To the next thread, unless it has enough waiting (it may
                        // have finished its rounds).
                        6 if !live.is_empty() => {
                            let mut next = mailbox[(t + 1) % THREADS].lock().unwrap();
                            if next.len() < 64 {
                                next.push(live.swap_remove(rng as usize % live.len()));
                            }
                        }
                        _ => {
                            let got: Vec<Pfn> = std::mem::take(&mut *mailbox[t].lock().unwrap());
                            for p in got {
                                ledger.lock().unwrap().remove(&p).unwrap();
                                c.free(p, Order(0)).unwrap();
                            }
                        }
                    }
                }
                (live, refused)
            })
        })
        .collect();
    let mut owned = 0u64;
    let mut refused = 0u64;
    let mut lives = Vec::new();
    for h in handles {
        let (live, r) = h.join().unwrap();
        owned += live.len() as u64;
        refused += r;
        lives.push(live);
    }
    // Pages still in the mailboxes: owned, on their way to another thread.
    for m in mailbox.iter() {
        let left = std::mem::take(&mut *m.lock().unwrap());
        owned += left.len() as u64;
        lives.push(left);
    }
    assert_eq!(owned, ledger.lock().unwrap().len() as u64);
    za.drain_all_pages();
    let r = za.check_invariants().unwrap();
    assert_eq!(r.cached_pages, 0, "every cache gave its pages back");
    assert_eq!(
        r.allocated_pages, owned,
        "allocated pages against the ledger"
    );
    assert_eq!(
        za.nr_free_pages() + owned,
        za.managed_pages(),
        "frames lost"
    );
    assert!(refused > 0, "no stale free was tried");
    for live in lives {
        for p in live {
            za.free_pages(p, Order(0)).unwrap();
        }
    }
    settled(&za);
}

#[test]
fn refills_use_small_free_blocks_before_splitting_a_large_one() {
    let za = ZoneAllocator::new(Config {
        nr_cpus: 1,
        min_free_kbytes: Some(0),
        pcp: PcpConfig {
            rseq: false,
            ..PcpConfig::default()
        },
        ..Config::with_bytes(16 << 20)
    })
    .unwrap();
    // 1,024 unmovable pages, then every odd one whose buddy is also held freed:
    // free order-0 blocks on the unmovable lists that cannot merge.
    let held: Vec<Pfn> = (0..1024)
        .map(|_| za.alloc_pages_on(0, Gfp::KERNEL, Order(0)).unwrap())
        .collect();
    let set: std::collections::HashSet<Pfn> = held.iter().copied().collect();
    let holes: std::collections::HashSet<Pfn> = held
        .iter()
        .copied()
        .filter(|p| p.0 % 2 == 1 && set.contains(&Pfn(p.0 ^ 1)))
        .collect();
    assert!(holes.len() >= 2 * LOCAL_CACHE_BATCH);
    for &p in &holes {
        za.free_pages(p, Order(0)).unwrap();
    }
    za.drain_all_pages();
    let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap();
    let got: Vec<Pfn> = (0..LOCAL_CACHE_BATCH)
        .map(|_| c.alloc(Order(0)).unwrap())
        .collect();
    assert!(
        got.iter().all(|p| holes.contains(p)),
        "a refill split a large block while order-0 blocks were free: {got:?}"
    );
    for p in got {
        c.free(p, Order(0)).unwrap();
    }
    drop(c);
    for p in held.into_iter().filter(|p| !holes.contains(p)) {
        za.free_pages(p, Order(0)).unwrap();
    }
    settled(&za);
}

/// Threads that each take their own cache in, allocate guarded blocks, write them
/// without `unsafe`, check them, and free them: the pattern a thread pool uses.
#[test]
fn threads_move_their_caches_in_and_write_through_guards() {
    let za = ZoneAllocator::with_arena(
        Config {
            nr_cpus: 4,
            ..Config::with_bytes(32 << 20)
        },
        ArenaOptions::default(),
    )
    .unwrap();
    std::thread::scope(|s| {
        for cpu in 0..4u8 {
            let mut cache = za.local_cache_on(usize::from(cpu), Gfp::KERNEL).unwrap();
            s.spawn(move || {
                let mut held = Vec::new();
                for i in 0..2000u32 {
                    let order = Order((i % 3) as u8);
                    let mut b = cache.alloc_block(order).unwrap();
                    let bytes = b.bytes_mut().unwrap();
                    assert_eq!(bytes.len(), 4096 << order.0, "the whole block, contiguous");
                    bytes.fill(cpu + 1);
                    held.push(b);
                    if held.len() > 40 {
                        let b = held.swap_remove((i as usize * 7) % held.len());
                        assert!(b.bytes().unwrap().iter().all(|&x| x == cpu + 1));
                        // A guarded block is the guard's alone.
                        assert_eq!(
                            za_of(&cache).free_pages(b.pfn(), b.order()),
                            Err(FreeError::Guarded(b.pfn()))
                        );
                        cache.free_block(b).unwrap();
                    }
                }
                for b in held {
                    assert!(b.bytes().unwrap().iter().all(|&x| x == cpu + 1));
                    cache.free_block(b).unwrap();
                }
            });
        }
    });
    settled(&za);
}

/// The allocator a cache draws from.
fn za_of<'a, B: Backend>(c: &LocalCache<'a, B>) -> &'a ZoneAllocator<B> {
    c.allocator()
}
