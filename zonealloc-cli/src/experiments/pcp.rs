//! `pcp`: what the per-CPU page lists buy, and whether the prefetching flush pays.
//!
//! Three comparisons, each interleaved in one process (see `harness`):
//!
//! 1. **Hot pair.** One thread allocates an order-0 page and frees it at once, many
//!    times: ns per pair with PCP off (every call takes the zone lock, Linux's boot
//!    pageset) against PCP on (the default). Target: ≤ 20 ns per pair with PCP on.
//! 2. **Throughput at 1, 2, 4 and N threads (`--threads`).** Each thread keeps a window of up to 64
//!    live order-0 pages and allocates or frees at random (a free takes the newest
//!    page 7 times in 8, a random one otherwise): total alloc+free calls per second,
//!    PCP off against on at each thread count, and each against its own 1-thread
//!    figure. Target: with PCP on, 2 threads ≥ 1.8× one thread.
//! 3. **Flush path: `prefetch_buddy` off against on.** Each thread allocates a burst
//!    of order-0 pages and then frees them all, in allocation order (what `munmap` of
//!    a faulted region does, seed (c)). A burst is twice the per-CPU `high_max`, so
//!    however far `high` auto-tunes, half of every burst overflows the lists and is
//!    flushed to the buddy lists (the figure is measured and printed). Run on a 16 GiB
//!    zone, whose frame table (64 MiB) is larger than the last-level cache, in two
//!    states: *fresh* (the bursts are carved from whole blocks, buddies adjacent) and
//!    *fragmented* (a churn left a quarter of the zone allocated in scattered pages,
//!    so the bursts get scattered pages whose buddies are in use: the buddy check on
//!    every flushed page is a cache miss, the case seed (c) says prefetching is for).
//!    As in seed (c), these threads are pinned, one per CPU.
//! 4. **Pinned hot pair: a kernel's path.** The hot pair on an allocator whose
//!    `Platform` can stop another CPU's stacks (`LinuxThreads`, standing in for a
//!    kernel: a thread pinned alone to a CPU is "preemption off"), on a thread
//!    that claimed its CPU (`LinuxThreads::pin`): `alloc_pages`/`free_pages`,
//!    which on such a platform take the per-CPU lists under the platform's lock
//!    (a kernel's path without the pinned stacks), against
//!    `alloc_pages_pinned`/`free_pages_pinned` (no lock, no atomic
//!    read-modify-write but the free's compare-and-swap). The restartable
//!    sequences' stacks (no platform) run beside them for reference. Target:
//!    ≤ 20 ns per pinned pair.
//!
//! Every thread calls `alloc_pages` / `free_pages`, which find the CPU the thread is
//! running on (rseq area or `sched_getcpu()`), as a user's threads would; threads are
//! not pinned. Frames are abstract (no memory behind them): what is timed is the
//! allocator's own work.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use zonealloc::{Config, Gfp, LinuxThreads, Order, PcpConfig, Pfn, ZoneAllocator, ZoneType};

use super::seed_util::{first_cpu, pinning_text, plural, Rng};
use super::{Experiment, ExperimentResult, Point, Scaling, Series, Target};
use crate::affinity;
use crate::harness::{
    secs_since, Ctx, Handles, Metric, Samples, Table, Variant, Variants, Workers,
};

/// The experiment.
pub struct Pcp;

/// Zone for the hot-pair and throughput runs: 1 GiB, where Linux's formulas give
/// `batch` 63, as on any zone of 1 GiB or more.
const SMALL_ZONE_PAGES: u64 = 1 << 18;
/// Zone for the flush runs: 16 GiB, a 64 MiB frame table.
const LARGE_ZONE_PAGES: u64 = 1 << 22;
/// Live pages per thread in the throughput runs.
const WINDOW: usize = 64;
/// Thread counts of the flush runs.
const FLUSH_THREADS: [usize; 2] = [1, 2];
/// Targets (issue: per-CPU lists).
const HOT_PAIR_TARGET_NS: f64 = 20.0;
const TWO_THREAD_SCALING_TARGET: f64 = 1.8;
const PINNED_PAIR_TARGET_NS: f64 = 20.0;

impl Experiment for Pcp {
    fn name(&self) -> &'static str {
        "pcp"
    }

    fn description(&self) -> &'static str {
        "per-CPU lists: hot order-0 pair and 1/2/4/N-thread throughput with PCP off vs on; \
         flush path with prefetch_buddy off vs on (seed (c))"
    }

    fn run(&self, ctx: &mut Ctx) -> ExperimentResult {
        let mut res = ExperimentResult::new(self);
        hot_pair(ctx, &mut res);
        throughput(ctx, &mut res);
        flush(ctx, &mut res);
        pinned_pair(ctx, &mut res);
        res
    }
}

/// A single Normal zone of `nr_pages` frames with per-CPU list settings `pcp`.
fn config(nr_pages: u64, pcp: PcpConfig) -> Config {
    Config {
        pcp,
        ..Config::single_zone(ZoneType::Normal, Pfn(0), nr_pages)
    }
}

fn pcp_off() -> PcpConfig {
    PcpConfig {
        enabled: false,
        ..PcpConfig::default()
    }
}

fn allocator(nr_pages: u64, pcp: PcpConfig) -> ZoneAllocator {
    ZoneAllocator::new(config(nr_pages, pcp)).expect("a single-zone configuration is valid")
}

/// Records the per-CPU list limits the allocator computed (Linux's formulas).
fn record_pcp_limits(res: &mut ExperimentResult, what: &str, za: &ZoneAllocator) {
    let zi = za.zoneinfo();
    if let Some(p) = zi.zones.iter().flat_map(|z| z.pagesets.first()).next() {
        res.param(
            &format!("{what}: pcp batch / high_min / high_max (pages, per CPU)"),
            format!("{} / {} / {}", p.batch, p.high_min, p.high_max),
        );
    }
}

// -----------------------------------------------------------------------------
// 1. Hot pair
// -----------------------------------------------------------------------------

/// ns per `alloc_pages` + `free_pages` pair of order 0, `n` pairs back to back.
fn hot_pairs(za: &ZoneAllocator, n: u64) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        let pfn = za
            .alloc_pages(Gfp::KERNEL, Order(0))
            .expect("the zone is nearly empty");
        za.free_pages(black_box(pfn), Order(0))
            .expect("freeing the page just allocated");
    }
    secs_since(t) * 1e9 / n as f64
}

fn hot_pair(ctx: &mut Ctx, res: &mut ExperimentResult) {
    let n: u64 = ctx.scale(1_000_000, 5_000_000);
    res.param("hot pair: pairs per run", n);
    let off = allocator(SMALL_ZONE_PAGES, pcp_off());
    let on = allocator(SMALL_ZONE_PAGES, PcpConfig::default());
    let mut variants = [
        Variant::new("PCP off", || hot_pairs(&off, n)),
        Variant::new("PCP on", || hot_pairs(&on, n)),
    ];
    let s = ctx.compare("hot order-0 pair", &mut variants);
    let table = Table::new(
        "hot-pair",
        "hot pair: ns per order-0 alloc_pages+free_pages pair, 1 thread, 1 GiB zone",
        Metric::lower("ns per order-0 alloc+free pair", "ns"),
        &[("PCP off", &s[0]), ("PCP on", &s[1])],
    )
    .labelled("hot order-0 pair, 1 thread: PCP on vs off");
    res.targets.push(
        Target::at_most(
            "hot order-0 pair, PCP on, 1 thread (median)",
            s[1].median(),
            HOT_PAIR_TARGET_NS,
            "ns",
        )
        .on_table("hot-pair"),
    );
    res.tables.push(table);
}

// -----------------------------------------------------------------------------
// 2. Throughput with a small live window
// -----------------------------------------------------------------------------

/// One thread's random alloc/free walk over a window of at most `WINDOW` pages,
/// until `stop`. Returns the calls made (allocations + frees).
fn window_walk(za: &ZoneAllocator, seed: u64, stop: &AtomicBool) -> u64 {
    let mut rng = Rng::new(seed);
    let mut live = [Pfn(0); WINDOW];
    let mut len = 0;
    let mut ops = 0u64;
    loop {
        if ops.is_multiple_of(256) && stop.load(Ordering::Relaxed) {
            break;
        }
        let r = rng.next();
        if len == 0 || (len < WINDOW && r & 1 == 0) {
            live[len] = za
                .alloc_pages(Gfp::KERNEL, Order(0))
                .expect("the zone holds far more than the windows");
            len += 1;
        } else {
            // LIFO-ish: the newest page 7 times in 8, a random live one otherwise.
            let i = if (r >> 1) & 7 == 0 {
                (r >> 8) as usize % len
            } else {
                len - 1
            };
            let pfn = live[i];
            live[i] = live[len - 1];
            len -= 1;
            za.free_pages(pfn, Order(0)).expect("freeing a live page");
        }
        ops += 1;
    }
    for &pfn in &live[..len] {
        za.free_pages(pfn, Order(0)).expect("freeing a live page");
    }
    ops
}

/// A shared-nothing loop (a multiply-add chain in registers) until `stop`: how well
/// this machine runs threads in parallel at the moment, with no allocator involved.
fn spin_until(stop: &AtomicBool) -> u64 {
    let mut x = 1u64;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..256 {
            x = black_box(x.wrapping_mul(0x5851_f42d_4c95_7f2d).wrapping_add(n));
            n += 1;
        }
    }
    n
}

fn throughput(ctx: &mut Ctx, res: &mut ExperimentResult) {
    let dur = Duration::from_millis(ctx.scale(150, 500));
    res.param("throughput: run length (ms)", dur.as_millis());
    res.param("throughput: live window per thread (pages)", WINDOW);
    let threads = ctx.threads.clone();
    let cpus = ctx.cpus.clone();
    // One allocator per variant, so no variant inherits another's list state.
    let allocs: Vec<(bool, usize, ZoneAllocator)> = threads
        .iter()
        .flat_map(|&t| {
            [
                (false, t, allocator(SMALL_ZONE_PAGES, pcp_off())),
                (true, t, allocator(SMALL_ZONE_PAGES, PcpConfig::default())),
            ]
        })
        .collect();
    record_pcp_limits(res, "1 GiB zone", &allocs[1].2);
    let name = |on: bool, t: usize| {
        format!(
            "PCP {}, {t} thread{}",
            if on { "on" } else { "off" },
            plural(t)
        )
    };
    let cpus: &[usize] = &cpus;
    let mut variants = Variants::new();
    let ids: Handles<(bool, usize)> = allocs
        .iter()
        .zip(0u64..)
        .map(|(&(on, t, ref za), v)| {
            let mut round = 0u64;
            let id = variants.add(name(on, t), move || {
                round += 1;
                let seed = (v << 16) ^ round;
                Workers::timed(t, dur, cpus).throughput(
                    |_| (),
                    |i, _, stop| window_walk(za, seed ^ ((i as u64 + 1) << 32), stop),
                )
            });
            ((on, t), id)
        })
        .collect();
    let ceiling = [1, 2].map(|t| {
        variants.add(
            format!("shared-nothing loop, {t} thread{}", plural(t)),
            move || Workers::timed(t, dur, cpus).throughput(|_| (), |_, _, stop| spin_until(stop)),
        )
    });
    let s = ctx.compare("threaded throughput", &mut variants);
    let by = |on: bool, t: usize| ids.get((on, t)).of(&s);
    let metric = || Metric::higher("alloc+free calls per second, all threads", "M ops/s");
    for &t in &threads {
        res.tables.push(
            Table::new(
                &format!("throughput-{t}t"),
                &format!(
                    "throughput, {t} thread{}, window of {WINDOW} pages each: M alloc+free calls/s",
                    plural(t)
                ),
                metric(),
                &[("PCP off", by(false, t)), ("PCP on", by(true, t))],
            )
            .labelled(format!(
                "throughput, {t} thread{}: PCP on vs off",
                plural(t)
            )),
        );
    }
    for on in [true, false] {
        let rows: Vec<(String, &Samples)> = threads
            .iter()
            .map(|&t| (format!("{t} thread{}", plural(t)), by(on, t)))
            .collect();
        let rows: Vec<(&str, &Samples)> = rows.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        res.tables.push(
            Table::new(
                &format!("scaling-pcp-{}", if on { "on" } else { "off" }),
                &format!(
                    "thread scaling, PCP {}: throughput against 1 thread",
                    if on { "on" } else { "off" }
                ),
                metric(),
                &rows,
            )
            .labelled(format!(
                "PCP {}: {} vs 1 thread",
                if on { "on" } else { "off" },
                threads
                    .iter()
                    .filter(|&&t| t > 1)
                    .map(|t| format!("{t} threads"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        );
    }
    let (c1, c2) = (ceiling[0].of(&s), ceiling[1].of(&s));
    res.tables.push(
        Table::new(
            "machine-ceiling",
            "machine ceiling, same rounds: a shared-nothing register loop (no allocator), \
         2 threads against 1 (M iterations/s)",
            Metric::higher("loop iterations per second, all threads", "M it/s"),
            &[("1 thread", c1), ("2 threads", c2)],
        )
        .labelled(
            "no allocator, a register loop: 2 threads vs 1 (the most 2 threads can \
         gain on this machine, in the same rounds)",
        ),
    );
    res.notes.push(format!(
        "in the same rounds a shared-nothing loop ran {:.2}x faster on 2 threads than on 1: \
         the most any 2-thread figure could scale on this machine during this run",
        c2.median() / c1.median()
    ));
    let ratio = by(true, 2).median() / by(true, 1).median();
    res.targets.push(
        Target::at_least(
            "PCP on: 2-thread / 1-thread throughput (ratio of medians)",
            ratio,
            TWO_THREAD_SCALING_TARGET,
            "x",
        )
        .on_table("scaling-pcp-on"),
    );
    res.scaling = Some(Scaling {
        title: "pcp: alloc+free throughput against threads (window of 64 pages)".into(),
        y_label: "M alloc+free calls/s".into(),
        series: [false, true]
            .iter()
            .map(|&on| Series {
                name: format!("PCP {}", if on { "on" } else { "off" }),
                baseline: !on,
                points: threads.iter().map(|&t| Point::of(t, by(on, t))).collect(),
            })
            .collect(),
    });
}

// -----------------------------------------------------------------------------
// 3. Flush path: prefetch_buddy off vs on
// -----------------------------------------------------------------------------

/// `threads` threads each running `cycles` cycles of: allocate `burst` order-0 pages,
/// free them in allocation order. Thread `i` is pinned to `cpus[i % len]` when `cpus`
/// is not empty. Returns millions of alloc+free calls per second.
fn burst_throughput(
    za: &ZoneAllocator,
    threads: usize,
    burst: usize,
    cycles: usize,
    cpus: &[usize],
) -> f64 {
    Workers::pinned(threads, cpus).throughput(
        |_| Vec::with_capacity(burst),
        |_, pages, _| {
            for _ in 0..cycles {
                for _ in 0..burst {
                    pages.push(
                        za.alloc_pages(Gfp::KERNEL, Order(0))
                            .expect("the zone holds every burst"),
                    );
                }
                for pfn in pages.drain(..) {
                    za.free_pages(pfn, Order(0)).expect("freeing a burst page");
                }
            }
            (cycles * burst * 2) as u64
        },
    )
}

/// Leaves about a quarter of the zone allocated in scattered order-0 pages: allocates
/// half of it page by page, frees a random half of those, and drains the per-CPU
/// lists. Returns the pages kept.
fn fragment(za: &ZoneAllocator, seed: u64) -> Vec<Pfn> {
    let n = (za.managed_pages() / 2) as usize;
    let mut pages: Vec<Pfn> = (0..n)
        .map(|_| {
            za.alloc_pages(Gfp::KERNEL, Order(0))
                .expect("half the zone is free")
        })
        .collect();
    let mut rng = Rng::new(seed);
    for i in (1..pages.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        pages.swap(i, j);
    }
    for pfn in pages.drain(n / 2..) {
        za.free_pages(pfn, Order(0))
            .expect("freeing a fragmenter page");
    }
    za.drain_all_pages();
    pages
}

/// Flushed pages and freed pages so far, all CPUs.
fn flush_counts(za: &ZoneAllocator) -> (u64, u64, u64) {
    za.pcp_stats()
        .iter()
        .flat_map(|z| z.cpus.iter())
        .fold((0, 0, 0), |(f, d, n), c| {
            (f + c.pgfree, d + c.drain_blocks, n + c.drains)
        })
}

fn flush(ctx: &mut Ctx, res: &mut ExperimentResult) {
    // One thread per CPU, pinned, as seed (c)'s will-it-scale runs its tasks: a thread
    // that wandered to the other CPU would free into lists another thread allocates
    // from, and the two variants would no longer flush the same amount.
    let cpus = affinity::allowed_cpus();
    res.param(
        "flush: threads pinned to CPUs",
        pinning_text(&cpus, |c| format!("{c:?}, thread i on the i-th")),
    );
    let cpus = &cpus;
    for fragmented in [false, true] {
        let state = if fragmented { "fragmented" } else { "fresh" };
        // A fragmented zone runs about 5x slower per page (a cache miss per step).
        let cycles: usize = if fragmented {
            ctx.scale(1, 3)
        } else {
            ctx.scale(3, 8)
        };
        ctx.status(&format!("flush: building {state} 16 GiB zones"));
        // One allocator per variant; a fragmented one keeps its fragmenter's pages.
        let mut allocs = Vec::new();
        for (i, &t) in FLUSH_THREADS.iter().enumerate() {
            for prefetch in [false, true] {
                let za = allocator(
                    LARGE_ZONE_PAGES,
                    // The lists' flush: without the per-CPU stacks, which
                    // would take these calls and always prefetch.
                    PcpConfig {
                        prefetch_buddy: prefetch,
                        rseq: false,
                        ..PcpConfig::default()
                    },
                );
                let kept = if fragmented {
                    fragment(&za, 7 + i as u64)
                } else {
                    Vec::new()
                };
                allocs.push((t, prefetch, za, kept));
            }
        }
        let high_max = allocs[0]
            .2
            .zoneinfo()
            .zones
            .iter()
            .flat_map(|z| z.pagesets.first())
            .map(|p| p.high_max)
            .next()
            .unwrap_or(0);
        let burst = (2 * high_max).max(1024) as usize;
        if !fragmented {
            record_pcp_limits(res, "16 GiB zone", &allocs[0].2);
            res.param("flush: burst per thread (pages, = 2 x high_max)", burst);
        }
        res.param(
            &format!("flush, {state}: bursts per thread per run"),
            cycles,
        );
        let name = |t: usize, prefetch: bool| {
            format!(
                "{t} thread{}, prefetch {}",
                plural(t),
                if prefetch { "on" } else { "off" }
            )
        };
        let before: Vec<_> = allocs.iter().map(|a| flush_counts(&a.2)).collect();
        let mut variants = Variants::new();
        let ids: Handles<(usize, bool)> = allocs
            .iter()
            .map(|&(t, prefetch, ref za, _)| {
                let id = variants.add(name(t, prefetch), move || {
                    burst_throughput(za, t, burst, cycles, cpus)
                });
                ((t, prefetch), id)
            })
            .collect();
        let s = ctx.compare(&format!("flush path, {state} zone"), &mut variants);
        drop(variants);
        for (a, b) in allocs.iter().zip(&before) {
            let (f, d, n) = flush_counts(&a.2);
            let (freed, flushed, flushes) = (f - b.0, d - b.1, n - b.2);
            res.notes.push(format!(
                "flush, {state}, {}: {:.0} % of freed pages flushed to the buddy lists \
                 ({flushes} flushes, {:.0} pages each on average)",
                name(a.0, a.1),
                100.0 * flushed as f64 / freed.max(1) as f64,
                flushed as f64 / flushes.max(1) as f64
            ));
        }
        for &t in &FLUSH_THREADS {
            let (off, on) = (ids.get((t, false)).of(&s), ids.get((t, true)).of(&s));
            res.tables.push(
                Table::new(
                    &format!("flush-{state}-{t}t"),
                    &format!(
                        "flush path, {state} 16 GiB zone, {t} thread{}: bursts of {burst} pages \
                     allocated then freed, M alloc+free calls/s",
                        plural(t)
                    ),
                    Metric::higher("alloc+free calls per second, all threads", "M ops/s"),
                    &[("prefetch_buddy off", off), ("prefetch_buddy on", on)],
                )
                .labelled(format!(
                    "flush of bursts, {state} 16 GiB zone, {t} thread{}: prefetch_buddy on vs off",
                    plural(t)
                )),
            );
        }
    }
}

// -----------------------------------------------------------------------------
// 4. Pinned hot pair
// -----------------------------------------------------------------------------

/// The platform of the pinned runs: threads that claim their CPU.
static THREADS: LinuxThreads = LinuxThreads;

/// ns per order-0 pair, `n` pairs, on a thread that claimed CPU `cpu` (spawned
/// for the run, so that no claim outlives it): through the claimed CPU's pinned
/// stacks (`alloc_pages_pinned`/`free_pages_pinned`) when `pinned`, else the
/// hot pair's own calls (`hot_pairs`), whichever path the allocator gives them.
fn pinned_pairs(za: &ZoneAllocator, pinned: bool, cpu: usize, n: u64) -> f64 {
    std::thread::scope(|s| {
        s.spawn(move || {
            let pin = LinuxThreads::pin(cpu).expect("the CPU was claimable when the run began");
            if !pinned {
                return hot_pairs(za, n);
            }
            let t = Instant::now();
            for _ in 0..n {
                let pfn = za
                    .alloc_pages_pinned(pin.token(), Gfp::KERNEL, Order(0))
                    .expect("the zone is nearly empty");
                za.free_pages_pinned(pin.token(), black_box(pfn), Order(0))
                    .expect("freeing the page just allocated");
            }
            secs_since(t) * 1e9 / n as f64
        })
        .join()
        .expect("benchmark thread")
    })
}

fn pinned_pair(ctx: &mut Ctx, res: &mut ExperimentResult) {
    let n: u64 = ctx.scale(1_000_000, 5_000_000);
    let platform = ZoneAllocator::new(Config {
        platform: Some(&THREADS),
        ..config(SMALL_ZONE_PAGES, PcpConfig::default())
    })
    .expect("a single-zone configuration is valid");
    let Some(cpu) = first_cpu() else {
        res.notes
            .push("pinned pair: skipped (this process's CPUs are unknown)".to_owned());
        return;
    };
    // Claimed on a thread of its own: a claim pins the thread that makes it.
    let claimable = std::thread::scope(|s| {
        s.spawn(|| LinuxThreads::pin(cpu).is_ok())
            .join()
            .unwrap_or(false)
    });
    if !platform.pinned_available() || !claimable {
        res.notes.push(format!(
            "pinned pair: skipped (no pinned stacks here: membarrier refused, or CPU {cpu} \
             cannot be claimed)"
        ));
        return;
    }
    let rseq = allocator(SMALL_ZONE_PAGES, PcpConfig::default());
    res.param(
        "pinned pair: pairs per run, thread",
        format!("{n}, claims CPU {cpu}"),
    );
    let mut variants = vec![
        Variant::new("per-CPU lists (platform lock)", || {
            pinned_pairs(&platform, false, cpu, n)
        }),
        Variant::new("pinned stacks", || pinned_pairs(&platform, true, cpu, n)),
    ];
    let with_rseq = rseq.uses_cpu_stacks();
    if with_rseq {
        variants.push(Variant::new("rseq stacks (no platform)", || {
            pinned_pairs(&rseq, false, cpu, n)
        }));
    }
    let s = ctx.compare("pinned hot order-0 pair", &mut variants);
    drop(variants);
    let mut rows = vec![
        ("per-CPU lists (platform lock)", &s[0]),
        ("pinned stacks", &s[1]),
    ];
    if with_rseq {
        rows.push(("rseq stacks (no platform)", &s[2]));
    }
    let table = Table::new(
        "pinned-pair",
        "pinned pair: ns per order-0 alloc+free pair on a thread that claimed its CPU, \
         1 GiB zone, a platform that can stop another CPU's stacks",
        Metric::lower("ns per order-0 alloc+free pair", "ns"),
        &rows,
    )
    .labelled("pinned order-0 pair: pinned stacks vs the platform's per-CPU lists");
    res.targets.push(
        Target::at_most(
            "pinned order-0 pair, alloc_pages_pinned (median)",
            s[1].median(),
            PINNED_PAIR_TARGET_NS,
            "ns",
        )
        .on_table("pinned-pair"),
    );
    res.tables.push(table);
}
