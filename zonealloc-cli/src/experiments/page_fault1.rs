//! `page_fault1`: will-it-scale's page_fault1 on real memory, buddy prefetch off
//! against on (seed 001).
//!
//! Each thread, pinned to CPU `i mod nr_cpus` as will-it-scale pins its tasks, loops:
//!
//! ```text
//!   "mmap":    nothing (the region is the list of frames it gets)
//!   fault in:  for each 4 KiB page of the region: alloc_pages(0), write one byte
//!              through the frame's address (the arena: real memory)
//!   "munmap":  free_pages(pfn, 0) for every page, in allocation order: the per-CPU
//!              lists overflow and flush to the buddy lists in batches
//! ```
//!
//! The metric is will-it-scale's: total pages faulted in per second, all threads
//! (M/s). Variants: 1, 2 and 4 threads, each with `PcpConfig::prefetch_buddy` off
//! (the library default: a flush picks and merges its blocks under one zone-lock
//! hold, as Linux since 2022) and on (seed 001: pick outside the lock, prefetching
//! each buddy's metadata, then merge under the lock).
//!
//! The prefetch can only help when the metadata misses the cache, so the zone's
//! frame table (16 B per frame) is made larger than the last-level cache and the
//! buddy state is scattered first (seed-benchmarks.md c.5: "run the sweep after a
//! warm-up churn"): the whole zone is allocated page by page and a random eighth
//! of it freed, so every region is built from scattered pages whose buddies are
//! mostly in use. Only touched pages take memory: at most that free eighth.
//!
//! One allocator per prefetch setting, shared by its three thread counts; its per-CPU
//! lists are drained (untimed) before every run, so each run starts alike.

use std::sync::Barrier;
use std::time::Instant;

use zonealloc::{Arena, ArenaOptions, Config, Gfp, Order, PcpConfig, Pfn, ZoneAllocator, ZoneType};

use super::seed_util::{bytes_text, llc_bytes, plural, round_speedups, rss_bytes, Rng};
use super::{Experiment, ExperimentResult, Point, Scaling, Series, Target};
use crate::affinity;
use crate::harness::{Ctx, Metric, Samples, Table, Variant};

/// The experiment.
pub struct PageFault1;

/// Bytes of frame metadata per frame (`zonealloc::frame`).
const META_BYTES_PER_FRAME: u64 = 16;
/// Smallest zone: 16 GiB (a 64 MiB frame table).
const MIN_ZONE_PAGES: u64 = 1 << 22;
/// Largest zone we are willing to reserve address space for: 64 GiB.
const MAX_ZONE_PAGES: u64 = 1 << 24;
/// One in this many pages is left free by the churn.
const FREE_ONE_IN: u64 = 8;
const THREADS: [usize; 3] = [1, 2, 4];
/// Seed 001 (v1): prefetch against "pick outside the lock", +1.1 % to +8.9 %.
const SEED_LO_PCT: f64 = 1.1;
const SEED_HI_PCT: f64 = 8.9;

impl Experiment for PageFault1 {
    fn name(&self) -> &'static str {
        "page_fault1"
    }

    fn description(&self) -> &'static str {
        "seed 001: will-it-scale page_fault1 (alloc order 0 + touch, then free) at 1/2/4 \
         threads, prefetch_buddy off vs on, frame table larger than the LLC"
    }

    fn run(&self, ctx: &mut Ctx) -> ExperimentResult {
        let mut res = ExperimentResult::new(self);
        let region_bytes: u64 = ctx.scale(32 << 20, 128 << 20);
        let region_pages = (region_bytes >> 12) as usize;
        let cycles: usize = ctx.scale(40, 40);
        let llc = llc_bytes();
        let zone_pages = llc.map_or(MIN_ZONE_PAGES, |l| {
            (2 * l / META_BYTES_PER_FRAME)
                .next_power_of_two()
                .clamp(MIN_ZONE_PAGES, MAX_ZONE_PAGES)
        });
        let meta = zone_pages * META_BYTES_PER_FRAME;
        res.param(
            "region per thread per cycle (seed: 128 MiB)",
            format!("{} ({region_pages} pages)", bytes_text(region_bytes)),
        );
        res.param("cycles per thread per run", cycles);
        res.param(
            "zone",
            format!(
                "{}, anonymous arena (real memory), frame table {} vs last-level cache {} \
                 (/sys/devices/system/cpu/cpu0/cache/index3/size)",
                bytes_text(zone_pages << 12),
                bytes_text(meta),
                llc.map_or("unknown".to_owned(), bytes_text)
            ),
        );
        res.param(
            "churn before the runs",
            format!("whole zone allocated page by page, a random 1/{FREE_ONE_IN} freed"),
        );
        let cpus = affinity::allowed_cpus();
        res.param(
            "threads pinned",
            if cpus.is_empty() {
                "no (affinity unknown)".to_owned()
            } else {
                format!("thread i on CPU i mod {} of {cpus:?}", cpus.len())
            },
        );

        ctx.status("churning two zones");
        let zas: Vec<ZoneAllocator<Arena>> = [false, true]
            .iter()
            .map(|&prefetch| {
                let za = ZoneAllocator::with_arena(
                    Config {
                        pcp: PcpConfig {
                            prefetch_buddy: prefetch,
                            ..PcpConfig::default()
                        },
                        ..Config::single_zone(ZoneType::Normal, Pfn(0), zone_pages)
                    },
                    ArenaOptions::default(),
                )
                .expect("an anonymous arena of the zone's size");
                churn(&za, 0x5eed);
                za
            })
            .collect();
        if let Some(p) = zas[0]
            .zoneinfo()
            .zones
            .iter()
            .flat_map(|z| z.pagesets.first())
            .next()
        {
            res.param(
                "pcp batch / high_min / high_max (pages, per CPU)",
                format!("{} / {} / {}", p.batch, p.high_min, p.high_max),
            );
        }
        res.param(
            "free pages after the churn",
            format!("{} of {}", zas[0].nr_free_pages(), zas[0].managed_pages()),
        );

        let name = |t: usize, prefetch: bool| {
            format!(
                "{t} thread{}, prefetch {}",
                plural(t),
                if prefetch { "on" } else { "off" }
            )
        };
        let cpus = &cpus;
        let mut variants: Vec<Variant<'_>> = Vec::new();
        for &t in &THREADS {
            for (za, prefetch) in zas.iter().zip([false, true]) {
                variants.push(Variant::new(name(t, prefetch), move || {
                    za.drain_all_pages();
                    fault_run(za, t, region_pages, cycles, cpus)
                }));
            }
        }
        let s = ctx.compare("page_fault1, 1/2/4 threads", &mut variants);
        drop(variants);
        res.notes.push(format!(
            "resident memory of the process after the runs: {} (only touched frames)",
            bytes_text(rss_bytes())
        ));

        let find = |t: usize, p: bool| -> &Samples {
            s.iter()
                .find(|x| x.variant == name(t, p))
                .expect("every variant ran")
        };
        let mut pcts = Vec::new();
        for &t in &THREADS {
            let (off, on) = (find(t, false), find(t, true));
            res.tables.push(Table::new(
                &format!("page_fault1-{t}t"),
                &format!(
                    "page_fault1, {t} thread{}, {} regions: M pages faulted in per second, \
                     all threads",
                    plural(t),
                    bytes_text(region_bytes)
                ),
                Metric::higher("pages allocated + touched + freed per second", "M/s"),
                &[("prefetch_buddy off", off), ("prefetch_buddy on", on)],
            ));
            let (_, lo, hi) = round_speedups(off, on, false);
            let pct = (on.median() / off.median() - 1.0) * 100.0;
            pcts.push(pct);
            res.notes.push(format!(
                "seed: +{SEED_LO_PCT} % to +{SEED_HI_PCT} % (full load, 2-4 sockets); ours, \
                 {t} thread{}: {pct:+.1} % (per round {:+.1} % – {:+.1} %)",
                plural(t),
                (lo - 1.0) * 100.0,
                (hi - 1.0) * 100.0
            ));
        }
        res.notes.push(
            "the library's \"off\" picks and merges under one zone-lock hold; seed 001's \
             baseline already picked outside the lock, so \"on\" here bundles both of seed \
             001's steps (moving the pick out and the prefetch)"
                .to_owned(),
        );
        res.notes.push(
            "a frame's metadata is 16 B here (4 frames per cache line) against Linux's \
             64 B struct page, so an order-0 page's buddy (pfn ^ 1) shares its cache line: \
             the prefetch can only save misses for merges at order 2 and above"
                .to_owned(),
        );
        let full = pcts.last().copied().unwrap_or(f64::NAN);
        res.targets.push(Target::at_least(
            "prefetch on vs off, 4 threads (full load): change of median M/s (seed: +1.1 %)",
            full,
            SEED_LO_PCT,
            "%",
        ));
        res.scaling = Some(Scaling {
            title: "page_fault1: pages faulted in per second against threads".into(),
            y_label: "M pages/s, all threads".into(),
            series: [false, true]
                .iter()
                .map(|&p| Series {
                    name: format!("prefetch_buddy {}", if p { "on" } else { "off" }),
                    points: THREADS
                        .iter()
                        .map(|&t| {
                            let x = find(t, p);
                            Point {
                                threads: t as u32,
                                median: x.median(),
                                min: x.min(),
                                max: x.max(),
                            }
                        })
                        .collect(),
                })
                .collect(),
        });
        res
    }
}

/// Allocates the whole zone page by page (untouched: no memory is used), frees a
/// random `1 / FREE_ONE_IN` of it and drains the per-CPU lists: the free pages are
/// scattered singletons and small blocks whose buddies are mostly in use.
fn churn(za: &ZoneAllocator<Arena>, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut freed = Vec::new();
    while let Ok(pfn) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(0)) {
        if rng.next() % FREE_ONE_IN == 0 {
            freed.push(pfn);
        }
    }
    for pfn in freed {
        za.free_pages(pfn, Order(0)).expect("freeing a churn page");
    }
    za.drain_all_pages();
}

/// `threads` pinned threads each running `cycles` cycles of page_fault1 over
/// `region_pages` pages. Returns millions of pages per second, all threads.
fn fault_run(
    za: &ZoneAllocator<Arena>,
    threads: usize,
    region_pages: usize,
    cycles: usize,
    cpus: &[usize],
) -> f64 {
    // Each thread times itself from the shared start to its own end: a run lasts from
    // the first start to the last end (the caller may be descheduled while they run).
    let start = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let start = &start;
                let cpu = (!cpus.is_empty()).then(|| cpus[i % cpus.len()]);
                s.spawn(move || {
                    if let Some(cpu) = cpu {
                        affinity::pin_current_thread(cpu);
                    }
                    let mut region: Vec<Pfn> = Vec::with_capacity(region_pages);
                    start.wait();
                    let t0 = Instant::now();
                    for _ in 0..cycles {
                        for _ in 0..region_pages {
                            let mut page = za
                                .alloc_block(Gfp::HIGHUSER_MOVABLE, Order(0))
                                .expect("the free eighth of the zone holds every region");
                            if let Some(b) = page.bytes_mut() {
                                b[0] = 1;
                            }
                            region.push(page.into_raw().0);
                        }
                        for pfn in region.drain(..) {
                            za.free_pages(pfn, Order(0)).expect("freeing a region page");
                        }
                    }
                    (t0, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("page_fault1 thread"))
            .collect()
    });
    let first = spans
        .iter()
        .map(|s| s.0)
        .min()
        .expect("at least one thread");
    let last = spans
        .iter()
        .map(|s| s.1)
        .max()
        .expect("at least one thread");
    (threads * cycles * region_pages) as f64 / (last - first).as_secs_f64() / 1e6
}
