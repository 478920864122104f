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
//! (M/s). Variants: 1, 2 and 4 threads and the machine's CPU count (`--threads`), each with `PcpConfig::prefetch_buddy` off
//! (the library default: a flush picks and merges its blocks under one zone-lock
//! hold, as Linux since 2022) and on (seed 001: pick outside the lock, prefetching
//! each buddy's metadata, then merge under the lock).
//!
//! The prefetch is on the flush path, so it matters only if frees overflow the
//! per-CPU lists. Two list setups:
//!
//! * **Linux 4.15** (seed 001's kernel): `batch` 31, `high` fixed at 6 x batch = 186.
//!   Nearly every freed page is flushed, as in the seed.
//! * **the library's defaults** (Linux 6.7+): `high` auto-tunes up to 1/8 of the zone
//!   per CPU; after the churn's refills it is high enough that most of a region's
//!   frees stay on the lists and are reallocated from there (the notes print the
//!   flushed share). This is what a user of the library gets.
//!
//! The prefetch can only help when the metadata misses the cache, so the zone's
//! frame table (16 B per frame) is made larger than the last-level cache and the
//! buddy state is scattered first (seed-benchmarks.md c.5: "run the sweep after a
//! warm-up churn"): the whole zone is allocated page by page and a random eighth
//! of it freed, so every region is built from scattered pages whose buddies are
//! mostly in use. Only touched pages take memory: at most that free eighth.
//!
//! One allocator per (setup, prefetch setting), shared by its three thread counts;
//! its per-CPU lists are drained (untimed) before every run, so each run starts
//! alike.

use std::cell::Cell;

use zonealloc::{Arena, ArenaOptions, Config, Gfp, Order, PcpConfig, Pfn, ZoneAllocator, ZoneType};

use super::seed_util::{
    bytes_text, llc_bytes, pinning_text, plural, round_speedups, rss_bytes, significance_text, Rng,
};
use super::{Experiment, ExperimentResult, Point, Scaling, Series, Target};
use crate::affinity;
use crate::harness::{Ctx, Handles, Metric, Samples, Table, Variants, Workers};

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
/// Seed 001 (v1): prefetch against "pick outside the lock", +1.1 % to +8.9 %.
const SEED_LO_PCT: f64 = 1.1;
const SEED_HI_PCT: f64 = 8.9;

impl Experiment for PageFault1 {
    fn name(&self) -> &'static str {
        "page_fault1"
    }

    fn description(&self) -> &'static str {
        "seed 001: will-it-scale page_fault1 (alloc order 0 + touch, then free) at 1/2/4/N \
         threads, prefetch_buddy off vs on, frame table larger than the LLC, Linux 4.15 \
         and default per-CPU lists"
    }

    fn run(&self, ctx: &mut Ctx) -> ExperimentResult {
        let mut res = ExperimentResult::new(self);
        let sizes = Sizes::new(ctx);
        sizes.record(&mut res);
        let cpus = affinity::allowed_cpus();
        res.param(
            "threads pinned",
            pinning_text(&cpus, |c| {
                format!("thread i on CPU i mod {} of {c:?}", c.len())
            }),
        );
        ctx.status("churning four zones");
        let zas = churned_allocators(sizes.zone_pages);
        record_churn(&mut res, &zas);
        let m = measure(ctx, &zas, &sizes, &cpus);
        flush_notes(&mut res, &m);
        res.notes.push(format!(
            "resident memory of the process after the runs: {} (only touched frames)",
            bytes_text(rss_bytes())
        ));
        let (full_threads, full_load) =
            prefetch_tables(&mut res, &m, sizes.region_bytes, cpus.len());
        verdict(&mut res, &m, full_threads, full_load);
        res.scaling = Some(scaling(&m));
        res
    }
}

/// How large a run is: regions, cycles, and a zone whose frame table outgrows the
/// last-level cache.
struct Sizes {
    region_bytes: u64,
    region_pages: usize,
    cycles: usize,
    /// Size of the last-level cache, if sysfs says.
    llc: Option<u64>,
    zone_pages: u64,
}

impl Sizes {
    /// The sizes at `ctx`'s scale on this machine.
    fn new(ctx: &Ctx) -> Sizes {
        let region_bytes: u64 = ctx.scale(32 << 20, 128 << 20);
        let llc = llc_bytes();
        Sizes {
            region_bytes,
            region_pages: (region_bytes >> 12) as usize,
            cycles: ctx.scale(40, 40),
            llc,
            zone_pages: llc.map_or(MIN_ZONE_PAGES, |l| {
                (2 * l / META_BYTES_PER_FRAME)
                    .next_power_of_two()
                    .clamp(MIN_ZONE_PAGES, MAX_ZONE_PAGES)
            }),
        }
    }

    /// The sizes as parameters of the result.
    fn record(&self, res: &mut ExperimentResult) {
        res.param(
            "region per thread per cycle (seed: 128 MiB)",
            format!(
                "{} ({} pages)",
                bytes_text(self.region_bytes),
                self.region_pages
            ),
        );
        res.param("cycles per thread per run", self.cycles);
        res.param(
            "zone",
            format!(
                "{}, anonymous arena (real memory), frame table {} vs last-level cache {} \
                 (/sys/devices/system/cpu/cpu0/cache/index3/size)",
                bytes_text(self.zone_pages << 12),
                bytes_text(self.zone_pages * META_BYTES_PER_FRAME),
                self.llc.map_or("unknown".to_owned(), bytes_text)
            ),
        );
        res.param(
            "churn before the runs",
            format!("whole zone allocated page by page, a random 1/{FREE_ONE_IN} freed"),
        );
    }
}

/// One allocator per (setup, prefetch setting), each churned alike.
type Churned = Vec<(Setup, bool, ZoneAllocator<Arena>)>;

/// Builds and churns the four allocators over zones of `zone_pages`.
fn churned_allocators(zone_pages: u64) -> Churned {
    SETUPS
        .iter()
        .flat_map(|&setup| [(setup, false), (setup, true)])
        .map(|(setup, prefetch)| {
            let za = ZoneAllocator::with_arena(
                Config {
                    pcp: setup.pcp(prefetch),
                    ..Config::single_zone(ZoneType::Normal, Pfn(0), zone_pages)
                },
                ArenaOptions::default(),
            )
            .expect("an anonymous arena of the zone's size");
            churn(&za, 0x5eed);
            (setup, prefetch, za)
        })
        .collect()
}

/// The per-CPU list limits of each setup and the free pages after the churn.
fn record_churn(res: &mut ExperimentResult, zas: &Churned) {
    for (setup, _, za) in zas.iter().step_by(2) {
        let sets: Vec<String> = za
            .zoneinfo()
            .zones
            .iter()
            .flat_map(|z| z.pagesets.iter())
            .map(|p| format!("CPU {}: {} / {} / {}", p.cpu, p.batch, p.high, p.high_max))
            .collect();
        res.param(
            &format!(
                "{}: pcp batch / high / high_max after the churn",
                setup.name()
            ),
            sets.join("; "),
        );
    }
    res.param(
        "free pages after the churn",
        format!(
            "{} of {}",
            zas[0].2.nr_free_pages(),
            zas[0].2.managed_pages()
        ),
    );
}

/// One measured variant: a list setup, a thread count, a prefetch setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Case {
    setup: Setup,
    threads: usize,
    prefetch: bool,
}

impl Case {
    /// Every case, in the order the variants run.
    fn all(thread_counts: &[usize]) -> impl Iterator<Item = Case> + '_ {
        SETUPS.into_iter().flat_map(move |setup| {
            thread_counts.iter().flat_map(move |&threads| {
                [false, true].map(|prefetch| Case {
                    setup,
                    threads,
                    prefetch,
                })
            })
        })
    }

    /// "2 threads, prefetch on": the label within its setup.
    fn within_setup(self) -> String {
        format!(
            "{} thread{}, prefetch {}",
            self.threads,
            plural(self.threads),
            if self.prefetch { "on" } else { "off" }
        )
    }

    /// "4.15 PCP, 2 threads, prefetch on": the variant's label.
    fn label(self) -> String {
        format!("{}, {}", self.setup.short(), self.within_setup())
    }
}

/// What the comparison measured: every case's samples, and the pages each case
/// freed and flushed to the buddy lists over its timed runs.
struct Measured {
    /// Thread counts measured, ascending.
    threads: Vec<usize>,
    samples: Vec<Samples>,
    ids: Handles<Case>,
    flushed: Vec<(Case, (u64, u64))>,
}

impl Measured {
    /// The samples of `case`.
    fn of(&self, case: Case) -> &Samples {
        self.ids.get(case).of(&self.samples)
    }
}

/// Runs every case interleaved, each on its setup's allocator with the per-CPU lists
/// drained (untimed) before every run.
fn measure(ctx: &mut Ctx, zas: &Churned, sizes: &Sizes, cpus: &[usize]) -> Measured {
    let threads = ctx.threads.clone();
    let logs: Vec<(Case, Cell<(u64, u64)>)> = Case::all(&threads)
        .map(|c| (c, Cell::new((0, 0))))
        .collect();
    let mut variants = Variants::new();
    let ids: Handles<Case> = logs
        .iter()
        .map(|(case, log)| {
            let (_, _, za) = zas
                .iter()
                .find(|z| (z.0, z.1) == (case.setup, case.prefetch))
                .expect("an allocator per setup and prefetch setting");
            let case = *case;
            let id = variants.add(case.label(), move || {
                za.drain_all_pages();
                let before = flush_counts(za);
                let r = fault_run(za, case.threads, sizes.region_pages, sizes.cycles, cpus);
                let after = flush_counts(za);
                let (f, d) = log.get();
                log.set((f + after.0 - before.0, d + after.1 - before.1));
                r
            });
            (case, id)
        })
        .collect();
    let samples = ctx.compare("page_fault1, threaded, two PCP setups", &mut variants);
    drop(variants);
    Measured {
        threads,
        samples,
        ids,
        flushed: logs.into_iter().map(|(c, log)| (c, log.get())).collect(),
    }
}

/// Per setup: the share of freed pages that the runs flushed to the buddy lists.
fn flush_notes(res: &mut ExperimentResult, m: &Measured) {
    for setup in SETUPS {
        let shares: Vec<String> = m
            .flushed
            .iter()
            .filter(|(c, _)| c.setup == setup)
            .map(|&(c, (freed, flushed))| {
                format!(
                    "{} {:.0} %",
                    c.within_setup(),
                    100.0 * flushed as f64 / freed.max(1) as f64
                )
            })
            .collect();
        res.notes.push(format!(
            "{}: pages flushed from the per-CPU lists to the buddy lists (the path the \
             prefetch is on) as a share of the pages freed during the runs (refilled \
             pages flushed unused count too): {}",
            setup.name(),
            shares.join("; ")
        ));
    }
}

/// A table per setup and thread count, prefetch off against on, each with its note
/// against the seed. Returns full load's thread count and the change there (Linux
/// 4.15 lists), percent. Full load is will-it-scale's: one task per CPU, so the
/// most threads measured that do not outnumber the `nr_cpus` CPUs (more share the
/// CPUs, and their rounds swing with the scheduler).
fn prefetch_tables(
    res: &mut ExperimentResult,
    m: &Measured,
    region_bytes: u64,
    nr_cpus: usize,
) -> (usize, f64) {
    let full_threads = m
        .threads
        .iter()
        .copied()
        .filter(|&t| t <= nr_cpus.max(1))
        .max()
        .or_else(|| m.threads.first().copied())
        .unwrap_or(1);
    let mut full_load = f64::NAN;
    for setup in SETUPS {
        for &t in &m.threads {
            let case = |prefetch| Case {
                setup,
                threads: t,
                prefetch,
            };
            let (off, on) = (m.of(case(false)), m.of(case(true)));
            res.tables.push(Table::new(
                &format!("{}-{t}t", setup.id()),
                &format!(
                    "page_fault1, {}, {t} thread{}, {} regions: M pages faulted in \
                     per second, all threads",
                    setup.name(),
                    plural(t),
                    bytes_text(region_bytes)
                ),
                Metric::higher("pages allocated + touched + freed per second", "M/s"),
                &[("prefetch_buddy off", off), ("prefetch_buddy on", on)],
            ));
            let (_, lo, hi) = round_speedups(off, on, false);
            let pct = (on.median() / off.median() - 1.0) * 100.0;
            if setup == Setup::Linux415 && t == full_threads {
                full_load = pct;
            }
            res.notes.push(format!(
                "seed: +{SEED_LO_PCT} % to +{SEED_HI_PCT} % (full load, 2-4 sockets); \
                 ours, {}, {t} thread{}: {pct:+.1} % (per round {:+.1} % – {:+.1} %; {})",
                setup.name(),
                plural(t),
                (lo - 1.0) * 100.0,
                (hi - 1.0) * 100.0,
                significance_text(off, on)
            ));
        }
    }
    (full_threads, full_load)
}

/// What the comparison cannot show, and the target at full load (`threads`, one
/// per CPU; `full_load`: the change of the median there, percent), which must
/// also be significant.
fn verdict(res: &mut ExperimentResult, m: &Measured, threads: usize, full_load: f64) {
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
    let case = |prefetch| Case {
        setup: Setup::Linux415,
        threads,
        prefetch,
    };
    res.targets.push(
        Target::at_least(
            &format!(
                "Linux 4.15 PCP, full load ({threads} thread{}, one per CPU): prefetch on vs \
             off, change of median M/s (seed: +1.1 % to +8.9 %)",
                plural(threads)
            ),
            full_load,
            SEED_LO_PCT,
            "%",
        )
        .and_significant(m.of(case(false)), m.of(case(true))),
    );
}

/// Pages faulted in per second against threads, a series per setup and prefetch
/// setting.
fn scaling(m: &Measured) -> Scaling {
    Scaling {
        title: "page_fault1: pages faulted in per second against threads".into(),
        y_label: "M pages/s".into(),
        series: SETUPS
            .iter()
            .flat_map(|&setup| [(setup, false), (setup, true)])
            .map(|(setup, prefetch)| Series {
                name: format!(
                    "{}, prefetch {}",
                    setup.short(),
                    if prefetch { "on" } else { "off" }
                ),
                baseline: !prefetch,
                points: m
                    .threads
                    .iter()
                    .map(|&threads| {
                        let case = Case {
                            setup,
                            threads,
                            prefetch,
                        };
                        Point::of(threads, m.of(case))
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The per-CPU list settings the runs are made with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setup {
    /// Seed 001's kernel (4.15): `batch` 31 and `high` fixed at 6 x batch, so almost
    /// every freed page is flushed to the buddy lists.
    Linux415,
    /// The library's defaults (Linux 6.7+): `high` auto-tuned between `high_min` and
    /// `high_max`; a region's frees may stay on the lists.
    Defaults,
}

const SETUPS: [Setup; 2] = [Setup::Linux415, Setup::Defaults];

impl Setup {
    fn name(self) -> &'static str {
        match self {
            Setup::Linux415 => "Linux 4.15 PCP (batch 31, high 186)",
            Setup::Defaults => "default PCP (high auto-tuned)",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Setup::Linux415 => "4.15 PCP",
            Setup::Defaults => "default PCP",
        }
    }

    fn id(self) -> &'static str {
        match self {
            Setup::Linux415 => "pcp415",
            Setup::Defaults => "pcpdefault",
        }
    }

    fn pcp(self, prefetch_buddy: bool) -> PcpConfig {
        match self {
            // Linux's lists alone: the per-CPU stacks would take every call (and
            // their flush prefetches whatever `prefetch_buddy` says).
            Setup::Linux415 => PcpConfig {
                batch: Some(31),
                high_min: Some(186),
                high_max: Some(186),
                prefetch_buddy,
                rseq: false,
                ..PcpConfig::default()
            },
            Setup::Defaults => PcpConfig {
                prefetch_buddy,
                ..PcpConfig::default()
            },
        }
    }
}

/// Pages freed to the per-CPU lists and pages flushed from them so far, all CPUs.
fn flush_counts(za: &ZoneAllocator<Arena>) -> (u64, u64) {
    za.pcp_stats()
        .iter()
        .flat_map(|z| z.cpus.iter())
        .fold((0, 0), |(f, d), c| (f + c.pgfree, d + c.drain_blocks))
}

/// Allocates the whole zone page by page (untouched: no memory is used), frees a
/// random `1 / FREE_ONE_IN` of it and drains the per-CPU lists: the free pages are
/// scattered singletons and small blocks whose buddies are mostly in use.
fn churn(za: &ZoneAllocator<Arena>, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut freed = Vec::new();
    while let Ok(pfn) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(0)) {
        if rng.next().is_multiple_of(FREE_ONE_IN) {
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
    Workers::pinned(threads, cpus).throughput(
        |_| Vec::<Pfn>::with_capacity(region_pages),
        |_, region, _| {
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
            (cycles * region_pages) as u64
        },
    )
}
