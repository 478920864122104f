//! `page_frag`: Linux's page_frag_test, fragments carved on one CPU and freed on the
//! other, with the zone-lock free path against the per-CPU one (seed 003).
//!
//! ```text
//!   CPU a: producer                         CPU b: consumer
//!   PageFragCache::alloc(75 B)  --ring-->   page_frag_free(addr)
//!   (refills from CPU a's lists)  512 slots (the last free of a block returns it:
//!                                            FragFreePath decides how)
//! ```
//!
//! As `tools/testing/selftests/mm/page_frag/page_frag_test.c`: a push thread pinned
//! to one CPU carves `nr_test` fragments of 75 bytes (non-aligned mode) and pushes
//! them into a 512-slot ring; a pop thread pinned to the other CPU pops and frees
//! them. The ring here is a hand-rolled single-producer single-consumer ring (two
//! indices on their own cache lines, `AtomicPtr` slots; the kernel uses a
//! spinlocked `ptr_ring`): a full or empty ring is waited on by spinning, then
//! yielding, as the kernel threads `cond_resched()`. The metric is fragments per
//! second over the whole transfer (the kernel test prints µs for `nr_test`).
//!
//! Variants (each with its own 1 GiB arena; fragments take no memory until written,
//! and nothing writes them):
//!
//! * refill order 0 (every block is one page, as mlx5's page-pool pages in the seed):
//!   `FragFreePath::Zone` (before: every last free under the zone lock,
//!   `__free_pages_ok`) against `FragFreePath::PcpOrder0` (seed 003: order-0 pages to
//!   the freeing CPU's per-CPU list); with 75-byte fragments (54 per page) and again
//!   with 2048-byte ones (2 per page, seed-benchmarks.md d.5), where the free path
//!   is taken every second fragment;
//! * refill order 3 (the page_frag default, 32 KiB blocks): `Zone` (= `PcpOrder0`,
//!   which sends order 3 to the zone too) against `PcpAll` (Linux 6.14+: every
//!   per-CPU order through the lists).

use std::hint::spin_loop;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use zonealloc::{
    Arena, ArenaOptions, Config, FragFreePath, Gfp, Order, PageFragCache, Pfn, ZoneAllocator,
    ZoneType,
};

use super::seed_util::speedup_text;
use super::{Experiment, ExperimentResult, Target};
use crate::affinity;
use crate::harness::{Ctx, Metric, Table, Variant};

/// The experiment.
pub struct PageFrag;

/// 1 GiB of 4 KiB frames per variant.
const ZONE_PAGES: u64 = 1 << 18;
/// `ptr_ring` size of page_frag_test.
const RING_SLOTS: usize = 512;
/// `test_alloc_len` of test_page_frag.sh.
const FRAG_BYTES: usize = 75;
/// The large fragment of seed-benchmarks.md d.5: two per page, so the free path is
/// taken every second fragment.
const BIG_FRAG_BYTES: usize = 2048;
/// Seed 003: "a 7 % performance improvement using a micro benchmark".
const SEED_PCT: f64 = 7.0;

impl Experiment for PageFrag {
    fn name(&self) -> &'static str {
        "page_frag"
    }

    fn description(&self) -> &'static str {
        "seed 003: page_frag_test, 75-byte fragments carved on one CPU and freed on the \
         other through a 512-slot ring: zone-lock frees vs per-CPU frees"
    }

    fn run(&self, ctx: &mut Ctx) -> ExperimentResult {
        let mut res = ExperimentResult::new(self);
        let nr_test: u64 = ctx.scale(2_000_000, 10_000_000);
        res.param(
            "fragments per run (nr_test; module default 2000000, script 100000000)",
            nr_test,
        );
        res.param(
            "fragment",
            format!(
                "{FRAG_BYTES} bytes (test_page_frag.sh), and {BIG_FRAG_BYTES} bytes for a \
                 quarter as many; not aligned"
            ),
        );
        res.param(
            "cache gfp",
            "GFP_ATOMIC (as network drivers' fragment caches)",
        );
        res.param(
            "ring",
            format!("{RING_SLOTS} slots, hand-rolled SPSC ring (spin, then yield)"),
        );
        let cpus = affinity::allowed_cpus();
        let pair = match cpus.as_slice() {
            [a, b, ..] => Some((*a, *b)),
            _ => None,
        };
        res.param(
            "producer / consumer CPUs",
            pair.map_or(
                "unpinned (fewer than 2 CPUs allowed)".to_owned(),
                |(a, b)| format!("{a} / {b}"),
            ),
        );
        res.param("zone per variant", "1 GiB anonymous arena, PCP defaults");

        // (refill order, free path, label)
        let order0 = [
            (0u8, FragFreePath::Zone, "Zone (before seed 003)"),
            (0u8, FragFreePath::PcpOrder0, "PcpOrder0 (seed 003)"),
        ];
        let order3 = [
            (3u8, FragFreePath::Zone, "Zone (= PcpOrder0 at order 3)"),
            (3u8, FragFreePath::PcpAll, "PcpAll (Linux 6.14+)"),
        ];
        // (variants, fragment bytes, fragments per run, title, id)
        let comparisons = [
            (
                &order0,
                FRAG_BYTES,
                nr_test,
                "refill order 0 (one page per block)",
                "order0",
            ),
            (
                &order0,
                BIG_FRAG_BYTES,
                nr_test / 4,
                "refill order 0, 2048-byte fragments",
                "order0-2k",
            ),
            (
                &order3,
                FRAG_BYTES,
                nr_test,
                "refill order 3 (32 KiB blocks)",
                "order3",
            ),
        ];
        for (set, bytes, nr, title, id) in comparisons {
            let zas: Vec<ZoneAllocator<Arena>> = set
                .iter()
                .map(|&(_, path, _)| {
                    ZoneAllocator::with_arena(
                        Config {
                            frag_free_path: path,
                            ..Config::single_zone(ZoneType::Normal, Pfn(0), ZONE_PAGES)
                        },
                        ArenaOptions::default(),
                    )
                    .expect("an anonymous 1 GiB arena")
                })
                .collect();
            let mut variants: Vec<Variant<'_>> = set
                .iter()
                .zip(&zas)
                .map(|(&(order, _, label), za)| {
                    Variant::new(label, move || transfer(za, Order(order), bytes, nr, pair))
                })
                .collect();
            let s = ctx.compare(&format!("page_frag_test, {title}"), &mut variants);
            drop(variants);
            res.tables.push(Table::new(
                &format!("page_frag-{id}"),
                &format!(
                    "page_frag_test, {title}: {nr} fragments of {bytes} B pushed through the \
                     ring and freed on the other CPU, M fragments/s"
                ),
                Metric::higher("fragments carved, passed and freed per second", "M/s"),
                &[(set[0].2, &s[0]), (set[1].2, &s[1])],
            ));
            let pct = (s[1].median() / s[0].median() - 1.0) * 100.0;
            let per_block = (4096usize << set[0].0) / bytes;
            let what = format!(
                "{title} (a block freed every {per_block} fragments), {} over {}",
                set[1].2, set[0].2
            );
            if id == "order0" {
                res.notes.push(format!(
                    "seed: +{SEED_PCT:.0} % (Jesper's micro benchmark; +11 % in Ilias's \
                     64-byte packet test); ours, {what}: {pct:+.1} %, i.e. {}",
                    speedup_text(&s[0], &s[1], false)
                ));
                res.targets.push(
                    Target::at_least(
                        "order-0 blocks, 75 B: PcpOrder0 over Zone, change of median \
                     fragments/s (seed: +7 %)",
                        pct,
                        SEED_PCT,
                        "%",
                    )
                    .and_significant(&s[0], &s[1]),
                );
            } else {
                res.notes.push(format!(
                    "ours, {what}: {pct:+.1} %, i.e. {}",
                    speedup_text(&s[0], &s[1], false)
                ));
            }
        }
        res
    }
}

/// A bounded single-producer single-consumer ring of pointers.
///
/// `tail` is written only by the producer, `head` only by the consumer; each sits on
/// its own cache line. A slot is written by the producer before it publishes `tail`
/// (Release) and read by the consumer after it loads `tail` (Acquire); the consumer
/// publishes `head` (Release) after reading the slot, and the producer loads `head`
/// (Acquire) before reusing it.
struct Ring {
    slots: Box<[AtomicPtr<u8>]>,
    head: Padded,
    tail: Padded,
}

#[repr(align(128))]
struct Padded(AtomicUsize);

impl Ring {
    fn new(n: usize) -> Ring {
        Ring {
            slots: (0..n)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            head: Padded(AtomicUsize::new(0)),
            tail: Padded(AtomicUsize::new(0)),
        }
    }
}

/// Waits a little: spins first, yields the CPU after a while.
fn backoff(spins: &mut u32) {
    if *spins < 64 {
        spin_loop();
        *spins += 1;
    } else {
        std::thread::yield_now();
    }
}

/// One run: `nr` fragments of `bytes` carved by a producer with refill order
/// `order` and freed by a consumer on the other CPU. Returns millions of fragments
/// per second, from the producer's start to the consumer's last free.
fn transfer(
    za: &ZoneAllocator<Arena>,
    order: Order,
    bytes: usize,
    nr: u64,
    cpus: Option<(usize, usize)>,
) -> f64 {
    let ring = Ring::new(RING_SLOTS);
    let n = RING_SLOTS;
    let start = Barrier::new(2);
    let (t0, t1) = std::thread::scope(|s| {
        let producer = s.spawn(|| {
            if let Some((a, _)) = cpus {
                affinity::pin_current_thread(a);
            }
            let mut cache = PageFragCache::with_refill_order(za, Gfp::ATOMIC, order);
            let mut head = 0usize;
            start.wait();
            let t0 = Instant::now();
            for tail in 0..nr as usize {
                let p = cache
                    .alloc(bytes, 1)
                    .expect("the 1 GiB zone has room for the ring's fragments");
                let mut spins = 0;
                while tail - head >= n {
                    head = ring.head.0.load(Ordering::Acquire);
                    if tail - head >= n {
                        backoff(&mut spins);
                    }
                }
                ring.slots[tail % n].store(p.as_ptr(), Ordering::Relaxed);
                ring.tail.0.store(tail + 1, Ordering::Release);
            }
            t0
        });
        let consumer = s.spawn(|| {
            if let Some((_, b)) = cpus {
                affinity::pin_current_thread(b);
            }
            let mut tail = 0usize;
            start.wait();
            for head in 0..nr as usize {
                let mut spins = 0;
                while head == tail {
                    tail = ring.tail.0.load(Ordering::Acquire);
                    if head == tail {
                        backoff(&mut spins);
                    }
                }
                let p = ring.slots[head % n].load(Ordering::Relaxed);
                ring.head.0.store(head + 1, Ordering::Release);
                za.page_frag_free(p).expect("freeing a fragment");
            }
            Instant::now()
        });
        (
            producer.join().expect("producer thread"),
            consumer.join().expect("consumer thread"),
        )
    });
    nr as f64 / (t1 - t0).as_secs_f64() / 1e6
}
