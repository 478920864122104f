//! `pagetypeinfo`: reading `/proc/pagetypeinfo` by walking the free lists under the
//! zone lock against reading per-(order, migratetype) counters (seed 004).
//!
//! Two parts:
//!
//! 1. **Read latency.** One `/proc/pagetypeinfo` dump, built as text: `pagetypeinfo_
//!    walked()` (Linux before seed 004: every free list walked under the zone lock,
//!    one order per hold, capped at 100,000 entries; pageblocks counted by a scan)
//!    against `pagetypeinfo()` (seed 004: counters, no zone lock). On a 4 GiB zone
//!    fresh (everything in max-order blocks, "just after boot") and fragmented (the
//!    whole zone allocated at order 0, the three ordinary migratetypes in turn, then
//!    every other page freed: the lists are as long as they get, "after a kernel
//!    build").
//! 2. **mmtests pagealloc-micro at order 4 with a monitor.** One thread, pinned:
//!
//!    ```text
//!    repeat inner times:
//!        t0; for k in 0..=batch: alloc_pages(GFP_KERNEL | __GFP_NOWARN, 4); alloc += now - t0
//!        t0; for k in 0..=batch: free_pages(block k, 4) (FIFO);             free  += now - t0
//!    sample = (alloc + free) / inner / batch      (batch + 1 blocks, divided by batch: the
//!                                                  original's off-by-one, kept)
//!    ```
//!
//!    Order 4 never goes through the per-CPU lists: every call takes the zone lock.
//!    Batch = 1, 2, 4, ..., 1024. Variants, interleaved: no monitor; a monitor thread
//!    on the other CPU that every 10 ms builds the pagetypeinfo text by walking
//!    (`pagetypeinfo_walked`); the same reading the counters (`pagetypeinfo`). The
//!    zone is 4 GiB of which the lower three quarters are fragmented as above, so
//!    the walks are long (the upper quarter stays in large blocks for the order-4
//!    allocations). A sample is one interleaved round, in ns per block (the seed
//!    reports TSC ticks); mmtests' 15 samples per point become the harness's rounds.
//!
//! Frames are abstract (no memory behind them): only the allocator's work is timed.

use std::cell::RefCell;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator, ZoneType};

use super::seed_util::speedup_text;
use super::{Experiment, ExperimentResult, Target};
use crate::affinity;
use crate::harness::{median, secs_since, Ctx, Metric, Table, Variant};

/// The experiment.
pub struct Pagetypeinfo;

/// 4 GiB of 4 KiB frames.
const ZONE_PAGES: u64 = 1 << 20;
const ORDER: Order = Order(4);
/// Batch sizes of pagealloc-micro at order 4 (`batch < (128 MiB / 4 KiB) >> 4`).
const BATCHES: [usize; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
/// The subset run in quick mode.
const QUICK_BATCHES: [usize; 4] = [1, 16, 128, 1024];
/// The monitor's period.
const MONITOR_PERIOD: Duration = Duration::from_millis(10);
/// Seed 004's read latencies, µs: (no-patch, with-patch) just after boot and after
/// a kernel build.
const SEED_FRESH_US: (f64, f64) = (700.9, 268.6);
const SEED_FRAGMENTED_US: (f64, f64) = (28_700.0, 269.8);
/// Seed 004: monitor overhead with the counters, "about 2 %".
const SEED_COUNTERS_OVERHEAD_PCT: f64 = 2.0;

/// What runs beside the micro benchmark.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Monitor {
    None,
    Walked,
    Counters,
}

impl Monitor {
    fn name(self) -> &'static str {
        match self {
            Monitor::None => "no monitor",
            Monitor::Walked => "monitor: walked lists (before)",
            Monitor::Counters => "monitor: counters (after)",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Monitor::None => "none",
            Monitor::Walked => "walked",
            Monitor::Counters => "counters",
        }
    }
}

const MONITORS: [Monitor; 3] = [Monitor::None, Monitor::Walked, Monitor::Counters];

impl Experiment for Pagetypeinfo {
    fn name(&self) -> &'static str {
        "pagetypeinfo"
    }

    fn description(&self) -> &'static str {
        "seed 004: /proc/pagetypeinfo by walking the lists under the zone lock vs from \
         counters: read latency, and order-4 pagealloc-micro with a 10 ms monitor"
    }

    fn run(&self, ctx: &mut Ctx) -> ExperimentResult {
        let mut res = ExperimentResult::new(self);
        res.param("zone", "4 GiB, abstract frames, PCP defaults");
        let cpus = affinity::allowed_cpus();
        let (micro_cpu, monitor_cpu) = match cpus.as_slice() {
            [a, b, ..] => (Some(*a), Some(*b)),
            [a] => (Some(*a), Some(*a)),
            [] => (None, None),
        };
        res.param(
            "micro thread / monitor thread CPUs",
            format!("{micro_cpu:?} / {monitor_cpu:?}"),
        );
        let idle_counters_us = latency(ctx, &mut res);
        micro(ctx, &mut res, micro_cpu, monitor_cpu, idle_counters_us);
        res
    }
}

fn allocator() -> ZoneAllocator {
    ZoneAllocator::new(Config::single_zone(ZoneType::Normal, Pfn(0), ZONE_PAGES))
        .expect("a single-zone configuration is valid")
}

/// Allocates the whole zone at order 0 (unmovable, movable, reclaimable in turn),
/// then frees every other page of the lowest `quarters_fragmented / 4` of the frames
/// (by pfn) and every page above them, and drains the per-CPU lists. Returns the pages still
/// allocated.
fn fragment(za: &ZoneAllocator, quarters_fragmented: u64) -> Vec<Pfn> {
    let gfps = [
        Gfp::KERNEL,
        Gfp::HIGHUSER_MOVABLE,
        Gfp::KERNEL | Gfp::RECLAIMABLE,
    ];
    let mut pages = Vec::new();
    let mut i = 0;
    while let Ok(p) = za.alloc_pages(gfps[i % 3], Order(0)) {
        pages.push(p);
        i += 1;
    }
    pages.sort_unstable();
    let limit = ZONE_PAGES * quarters_fragmented / 4;
    let mut kept = Vec::with_capacity(pages.len() / 2);
    for p in pages {
        if p.0 < limit && p.0 % 2 == 0 {
            kept.push(p);
        } else {
            za.free_pages(p, Order(0))
                .expect("freeing a fragmenter page");
        }
    }
    za.drain_all_pages();
    kept
}

/// Free blocks on all lists and the longest single list, from the counters.
fn list_lengths(za: &ZoneAllocator) -> (u64, u64) {
    let info = za.pagetypeinfo();
    let mut total = 0;
    let mut longest = 0;
    for z in &info.zones {
        for row in &z.nr_free {
            for &n in row.iter() {
                total += n;
                longest = longest.max(n);
            }
        }
    }
    (total, longest)
}

/// One dump as text, by walking or from the counters.
fn dump(za: &ZoneAllocator, walked: bool) -> usize {
    let info = if walked {
        za.pagetypeinfo_walked()
    } else {
        za.pagetypeinfo()
    };
    black_box(info.to_string()).len()
}

// -----------------------------------------------------------------------------
// 1. Read latency
// -----------------------------------------------------------------------------

/// Returns the median µs of a counters dump on the fragmented zone, idle.
fn latency(ctx: &mut Ctx, res: &mut ExperimentResult) -> f64 {
    let mut idle_counters_us = f64::NAN;
    for fragmented in [false, true] {
        let state = if fragmented { "fragmented" } else { "fresh" };
        ctx.status(&format!("building a {state} 4 GiB zone"));
        let za = allocator();
        let _kept = if fragmented {
            fragment(&za, 4)
        } else {
            Vec::new()
        };
        let (total, longest) = list_lengths(&za);
        res.param(
            &format!("latency, {state} zone: free blocks / longest list"),
            format!("{total} / {longest}"),
        );
        let reads: u32 = match (fragmented, ctx.quick) {
            (false, true) => 200,
            (false, false) => 2000,
            (true, true) => 10,
            (true, false) => 100,
        };
        res.param(&format!("latency, {state}: dumps per run"), reads);
        let za = &za;
        let mut variants = [
            Variant::new("walked lists (before)", move || read_us(za, true, reads)),
            Variant::new("counters (after)", move || read_us(za, false, reads)),
        ];
        let s = ctx.compare(&format!("pagetypeinfo read, {state} zone"), &mut variants);
        res.tables.push(Table::new(
            &format!("read-{state}"),
            &format!(
                "pagetypeinfo read latency, {state} 4 GiB zone: µs per dump \
                 (text built)"
            ),
            Metric::lower("µs per pagetypeinfo dump", "µs"),
            &[
                ("walked lists (before)", &s[0]),
                ("counters (after)", &s[1]),
            ],
        ));
        let (seed_b, seed_a) = if fragmented {
            SEED_FRAGMENTED_US
        } else {
            SEED_FRESH_US
        };
        res.notes.push(format!(
            "seed, {}: {seed_b} -> {seed_a} µs ({:.1}x); ours, {state}: {:.1} -> {:.2} µs, {}",
            if fragmented {
                "after building a kernel"
            } else {
                "just after boot"
            },
            seed_b / seed_a,
            s[0].median(),
            s[1].median(),
            speedup_text(&s[0], &s[1], true)
        ));
        if fragmented {
            idle_counters_us = s[1].median();
            res.targets.push(Target::at_least(
                "fragmented zone: walked / counters read latency (ratio of medians; \
                 seed after a kernel build: 106x)",
                s[0].median() / s[1].median(),
                SEED_FRAGMENTED_US.0 / SEED_FRAGMENTED_US.1,
                "x",
            ));
        }
    }
    idle_counters_us
}

/// Mean µs per dump over `n` dumps.
fn read_us(za: &ZoneAllocator, walked: bool, n: u32) -> f64 {
    let t = Instant::now();
    let mut bytes = 0;
    for _ in 0..n {
        bytes += dump(za, walked);
    }
    black_box(bytes);
    secs_since(t) * 1e6 / f64::from(n)
}

// -----------------------------------------------------------------------------
// 2. pagealloc-micro with a monitor
// -----------------------------------------------------------------------------

/// Inner iterations for `batch`: at least the seed's 10,000, and enough for a run to
/// span many monitor periods (our allocator is faster than the kernel's, so the
/// seed's count alone would end small-batch runs within one period): about 600,000
/// blocks per run in quick mode, 2,400,000 at full scale.
fn inner_loops(quick: bool, batch: usize) -> u64 {
    let blocks: u64 = if quick { 600_000 } else { 2_400_000 };
    let inner = blocks / (batch as u64 + 1);
    if quick {
        inner.max(20)
    } else {
        inner.max(10_000)
    }
}

/// What one micro run measured.
#[derive(Clone, Copy, Default)]
struct MicroRun {
    /// ns per block, allocation and free, as the original divides them.
    alloc_ns: f64,
    free_ns: f64,
    /// Dumps the monitor made during the run, and their mean time in µs.
    dumps: u64,
    dump_us: f64,
}

/// One micro run beside `monitor`, and the time of each of the monitor's dumps
/// (µs).
fn micro_run(
    za: &ZoneAllocator,
    batch: usize,
    inner: u64,
    monitor: Monitor,
    cpus: (Option<usize>, Option<usize>),
) -> (MicroRun, Vec<f64>) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let monitor_thread = (monitor != Monitor::None).then(|| {
            let stop = &stop;
            s.spawn(move || {
                if let Some(c) = cpus.1 {
                    affinity::pin_current_thread(c);
                }
                let walked = monitor == Monitor::Walked;
                let mut took_us = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    dump(za, walked);
                    let took = t.elapsed();
                    took_us.push(took.as_secs_f64() * 1e6);
                    if let Some(rest) = MONITOR_PERIOD.checked_sub(took) {
                        std::thread::sleep(rest);
                    }
                }
                took_us
            })
        });
        let run = s
            .spawn(|| {
                if let Some(c) = cpus.0 {
                    affinity::pin_current_thread(c);
                }
                let mut blocks = vec![Pfn(0); batch + 1];
                let (mut alloc, mut free) = (Duration::ZERO, Duration::ZERO);
                let gfp = Gfp::KERNEL | Gfp::NOWARN;
                for _ in 0..inner {
                    let t0 = Instant::now();
                    for b in blocks.iter_mut() {
                        *b = za
                            .alloc_pages(gfp, ORDER)
                            .expect("the unfragmented quarter holds every batch");
                    }
                    let t1 = Instant::now();
                    for &b in blocks.iter() {
                        za.free_pages(b, ORDER).expect("freeing a batch block");
                    }
                    free += t1.elapsed();
                    alloc += t1 - t0;
                }
                let per = (inner * batch as u64) as f64;
                MicroRun {
                    alloc_ns: alloc.as_nanos() as f64 / per,
                    free_ns: free.as_nanos() as f64 / per,
                    dumps: 0,
                    dump_us: 0.0,
                }
            })
            .join()
            .expect("micro thread");
        stop.store(true, Ordering::Relaxed);
        let took_us = monitor_thread
            .map(|h| h.join().expect("monitor thread"))
            .unwrap_or_default();
        let n = took_us.len() as u64;
        let run = MicroRun {
            dumps: n,
            dump_us: took_us.iter().sum::<f64>() / n.max(1) as f64,
            ..run
        };
        (run, took_us)
    })
}

fn micro(
    ctx: &mut Ctx,
    res: &mut ExperimentResult,
    micro_cpu: Option<usize>,
    monitor_cpu: Option<usize>,
    idle_counters_us: f64,
) {
    ctx.status("building the micro benchmark's zone");
    let za = allocator();
    let _kept = fragment(&za, 3);
    let (total, longest) = list_lengths(&za);
    res.param(
        "micro zone: lower 3/4 fragmented; free blocks / longest list",
        format!("{total} / {longest}"),
    );
    res.param(
        "micro inner loops per run",
        if ctx.quick {
            "600000 / (batch + 1), at least 20".to_owned()
        } else {
            "2400000 / (batch + 1), at least the seed's 10000".to_owned()
        },
    );
    res.param("monitor period", "10 ms (a dump, then sleep the rest)");
    let za = &za;
    let cpus = (micro_cpu, monitor_cpu);
    // Per batch: per monitor, the samples' (alloc, free) split and monitor figures.
    let mut grid: Vec<(usize, Vec<MicroRun>)> = Vec::new();
    let mut overheads: Vec<(usize, f64, f64)> = Vec::new();
    // Every counters dump of the measured runs (µs), for the tail of the read.
    let mut counter_dumps: Vec<f64> = Vec::new();
    let batches: &[usize] = if ctx.quick { &QUICK_BATCHES } else { &BATCHES };
    res.param("micro batch sizes", format!("{batches:?}"));
    for &batch in batches {
        let inner = inner_loops(ctx.quick, batch);
        let logs: Vec<RefCell<Vec<MicroRun>>> =
            MONITORS.iter().map(|_| RefCell::new(Vec::new())).collect();
        // Each run's counters dumps (µs), warm-up runs first.
        let counter_log: RefCell<Vec<Vec<f64>>> = RefCell::new(Vec::new());
        let counter_log = &counter_log;
        let mut variants: Vec<Variant<'_>> = MONITORS
            .iter()
            .zip(&logs)
            .map(|(&m, log)| {
                Variant::new(m.name(), move || {
                    let (r, took_us) = micro_run(za, batch, inner, m, cpus);
                    log.borrow_mut().push(r);
                    if m == Monitor::Counters {
                        counter_log.borrow_mut().push(took_us);
                    }
                    r.alloc_ns + r.free_ns
                })
            })
            .collect();
        let s = ctx.compare(
            &format!("pagealloc-micro order 4, batch {batch}"),
            &mut variants,
        );
        drop(variants);
        res.tables.push(Table::new(
            &format!("micro-odr4-{batch}"),
            &format!(
                "pagealloc-micro, order 4, batch {batch} ({} blocks per step, {inner} \
                 steps): ns per block, alloc + free",
                batch + 1
            ),
            Metric::lower("ns per order-4 block, alloc + free", "ns"),
            &[
                (MONITORS[0].name(), &s[0]),
                (MONITORS[1].name(), &s[1]),
                (MONITORS[2].name(), &s[2]),
            ],
        ));
        let warm = ctx.warmup;
        for took_us in counter_log.borrow().iter().skip(warm) {
            counter_dumps.extend_from_slice(took_us);
        }
        let medians: Vec<MicroRun> = logs
            .iter()
            .map(|l| {
                let l = l.borrow();
                let m = &l[warm.min(l.len())..];
                let med = |f: fn(&MicroRun) -> f64| median(&m.iter().map(f).collect::<Vec<_>>());
                MicroRun {
                    alloc_ns: med(|r| r.alloc_ns),
                    free_ns: med(|r| r.free_ns),
                    dumps: m.iter().map(|r| r.dumps).sum(),
                    dump_us: med(|r| r.dump_us),
                }
            })
            .collect();
        grid.push((batch, medians));
        overheads.push((
            batch,
            (s[1].median() / s[0].median() - 1.0) * 100.0,
            (s[2].median() / s[0].median() - 1.0) * 100.0,
        ));
    }
    res.notes.push(micro_grid(&grid));
    let mean = |f: fn(&(usize, f64, f64)) -> f64| {
        overheads.iter().map(f).sum::<f64>() / overheads.len() as f64
    };
    let (walked, counters) = (mean(|o| o.1), mean(|o| o.2));
    res.notes.push(format!(
        "seed: with the counters the monitor costs about {SEED_COUNTERS_OVERHEAD_PCT} % \
         (walking: up to -17 % alloc, -86 % free per block in the seed's Min rows); ours, \
         mean over the {} batch sizes of the change in median ns per block: walked {walked:+.1} %, \
         counters {counters:+.1} %",
        batches.len()
    ));
    let dumps = |i: usize| -> (u64, f64) {
        let n: u64 = grid.iter().map(|(_, m)| m[i].dumps).sum();
        let us = median(&grid.iter().map(|(_, m)| m[i].dump_us).collect::<Vec<_>>());
        (n, us)
    };
    let (nw, uw) = dumps(1);
    let (nc, uc) = dumps(2);
    res.notes.push(format!(
        "monitor during the measured runs: walked {nw} dumps, median {uw:.0} µs each \
         (zone lock held for the walk); counters {nc} dumps, median {uc:.1} µs each"
    ));
    counter_dumps.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let n = counter_dumps.len();
        if n == 0 {
            f64::NAN
        } else {
            counter_dumps[((n - 1) as f64 * q).round() as usize]
        }
    };
    res.notes.push(format!(
        "counters dumps beside the micro benchmark, all {} of the measured runs: median \
         {:.1} µs, 90th percentile {:.1}, 99th {:.1}, longest {:.1}",
        counter_dumps.len(),
        median(&counter_dumps),
        at(0.9),
        at(0.99),
        at(1.0)
    ));
    res.notes.push(format!(
        "a counters dump took {idle_counters_us:.1} µs on an idle zone and {uc:.1} µs beside \
         the micro benchmark (the median of the runs' means): the library's snapshot \
         (stats.rs `snapshot`) rereads the counters while a write overlaps them, and \
         every order-4 alloc and free writes under the zone lock, so beside them a read \
         retries, up to {} tries, and then reads under the lock in one short hold \
         (Linux's seed 004 reads its counters once, without a retry, and may see them \
         torn)",
        zonealloc::SNAPSHOT_TRIES
    ));
    res.targets.push(Target::at_most(
        &format!(
            "monitor reading counters: mean overhead over the batch sizes (seed: about \
             {SEED_COUNTERS_OVERHEAD_PCT} %)"
        ),
        counters,
        SEED_COUNTERS_OVERHEAD_PCT,
        "%",
    ));
}

/// The seed-style grid: per batch, alloc and free ns per block with no monitor and
/// the change each monitor causes.
fn micro_grid(grid: &[(usize, Vec<MicroRun>)]) -> String {
    let mut s = String::from(
        "pagealloc-micro order 4, medians of ns per block (the seed's off-by-one kept), \
         change against no monitor (< 0 is slower):\n",
    );
    s.push_str(&format!(
        "    {:<16} {:>9} {:>9} {:>9}   {:>9} {:>9} {:>9}\n",
        "batch",
        "alloc",
        MONITORS[1].short(),
        MONITORS[2].short(),
        "free",
        MONITORS[1].short(),
        MONITORS[2].short()
    ));
    // mmtests' change: (base - x) / base.
    let pct = |base: f64, x: f64| format!("{:+.1}%", (base - x) / base * 100.0);
    for (batch, m) in grid {
        s.push_str(&format!(
            "    {:<16} {:>9.1} {:>9} {:>9}   {:>9.1} {:>9} {:>9}\n",
            format!("odr4-{batch}"),
            m[0].alloc_ns,
            pct(m[0].alloc_ns, m[1].alloc_ns),
            pct(m[0].alloc_ns, m[2].alloc_ns),
            m[0].free_ns,
            pct(m[0].free_ns, m[1].free_ns),
            pct(m[0].free_ns, m[2].free_ns),
        ));
    }
    s.pop();
    s
}
