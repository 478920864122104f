//! `reclaim`: allocations under memory pressure from an owner's cache, with and
//! without shrinkers.
//!
//! A buffer pool caches pages: it takes every page it can get without reclaim
//! (`GFP_NOWAIT`, down to the min watermark) and keeps taking one page per
//! request of the workload, as a page cache grows while files are read. Beside
//! it, the workload allocates blocks of order 0 to 3 with `GFP_KERNEL`, keeps a
//! window of 256 of them and frees a random one when the window is full. Four
//! ways to live with the pool, each over its own 256 MiB zone (64 MiB quick):
//!
//! * **no reclaim**: nothing gives the pool's pages back (the allocator alone, as
//!   before this feature and as every peer allocator): how many requests fail;
//! * **caller frees from the pool on failure**: what a program does without
//!   shrinkers, a real code path: on `NoMemory` it has the pool free 32 pages and
//!   retries, once;
//! * **shrinker, direct reclaim**: the pool is a registered `Shrinker`; the
//!   allocation slow path reclaims;
//! * **shrinker + kswapd**: the same with a `KswapdWorker` thread, which keeps the
//!   zone above its high watermark in the background.
//!
//! The timed value is ns per `GFP_KERNEL` allocation (failures included); the
//! share of requests that failed and the 99th percentile of a request's latency
//! come from the same rounds.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use zonealloc::reclaim::{KswapdWorker, ShrinkControl, Shrinker, ShrinkerConfig};
use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator, ZoneType};

use super::seed_util::Rng;
use super::{Experiment, ExperimentResult, Target};
use crate::harness::{median, Ctx, Metric, Samples, Table, Variant};

/// The experiment.
pub struct Reclaim;

const WINDOW: usize = 256;
/// Pages the caller has the pool free after a failed request (no shrinker).
const CALLER_FREES: usize = 32;

#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    None,
    Caller,
    Direct,
    Kswapd,
}

impl How {
    fn name(self) -> &'static str {
        match self {
            How::None => "no reclaim",
            How::Caller => "caller frees from the pool on failure",
            How::Direct => "shrinker, direct reclaim",
            How::Kswapd => "shrinker + kswapd thread",
        }
    }
}

/// The buffer pool.
struct Pool {
    za: Arc<ZoneAllocator>,
    cached: Mutex<Vec<Pfn>>,
}

impl Pool {
    /// Frees up to `n` of the oldest cached pages; returns how many.
    fn release(&self, n: usize) -> usize {
        let mut c = self.cached.lock().expect("pool lock");
        let n = n.min(c.len());
        for p in c.drain(..n) {
            self.za
                .free_pages(p, Order(0))
                .expect("the pool frees its own pages");
        }
        n
    }

    /// Caches one more page if the zone gives it without reclaim.
    fn grow(&self) {
        if let Ok(p) = self.za.alloc_pages(Gfp::NOWAIT, Order(0)) {
            self.cached.lock().expect("pool lock").push(p);
        }
    }
}

/// The pool as a shrinker (registered for the shrinker variants).
struct PoolShrinker(Arc<Pool>);

impl Shrinker for PoolShrinker {
    fn count(&self, _: &ShrinkControl) -> u64 {
        self.0.cached.lock().expect("pool lock").len() as u64
    }
    fn scan(&self, sc: &ShrinkControl) -> Option<u64> {
        Some(self.0.release(sc.nr_to_scan as usize) as u64)
    }
}

impl Experiment for Reclaim {
    fn name(&self) -> &'static str {
        "reclaim"
    }

    fn description(&self) -> &'static str {
        "allocations beside a page-caching pool: no reclaim vs the caller freeing from the \
         pool on failure vs a shrinker with direct reclaim vs a shrinker with a kswapd thread"
    }

    fn run(&self, ctx: &mut Ctx) -> ExperimentResult {
        let mut res = ExperimentResult::new(self);
        let pages: u64 = ctx.scale(1 << 14, 1 << 16);
        let ops: u64 = ctx.scale(100_000, 400_000);
        res.param(
            "zone",
            format!(
                "{} MiB of abstract 4 KiB frames; the pool first caches every page above the min \
                 watermark, then one more per request",
                pages >> 8
            ),
        );
        res.param(
            "workload",
            format!(
                "{ops} GFP_KERNEL requests a round, orders 0-3, a window of {WINDOW} blocks, \
                 one thread"
            ),
        );
        let hows = [How::None, How::Caller, How::Direct, How::Kswapd];
        let failed: Vec<RefCell<Vec<f64>>> =
            hows.iter().map(|_| RefCell::new(Vec::new())).collect();
        let p99: Vec<RefCell<Vec<f64>>> = hows.iter().map(|_| RefCell::new(Vec::new())).collect();
        let mut variants: Vec<Variant<'_>> = hows
            .iter()
            .zip(failed.iter().zip(&p99))
            .map(|(&how, (f, p))| {
                Variant::new(how.name(), move || {
                    let r = round(how, pages, ops);
                    f.borrow_mut().push(r.failed_pct);
                    p.borrow_mut().push(r.p99_ns);
                    r.ns_per_request
                })
            })
            .collect();
        let s = ctx.compare("requests beside a caching pool", &mut variants);
        drop(variants);
        let measured = |v: &RefCell<Vec<f64>>, name: &str| -> Samples {
            let all = v.borrow();
            let skip = all.len().saturating_sub(ctx.rounds);
            Samples {
                variant: name.to_owned(),
                values: all[skip..].to_vec(),
            }
        };
        let fs: Vec<Samples> = hows
            .iter()
            .zip(&failed)
            .map(|(h, v)| measured(v, h.name()))
            .collect();
        let ps: Vec<Samples> = hows
            .iter()
            .zip(&p99)
            .map(|(h, v)| measured(v, h.name()))
            .collect();
        let rows = |v: &'_ [Samples]| -> Vec<(&'static str, Samples)> {
            hows.iter()
                .map(|h| h.name())
                .zip(v.iter().cloned())
                .collect()
        };
        let table = |id: &str, title: &str, metric: Metric, v: &[Samples]| {
            let r = rows(v);
            let refs: Vec<(&str, &Samples)> = r.iter().map(|(n, s)| (*n, s)).collect();
            Table::new(id, title, metric, &refs)
        };
        res.tables.push(table(
            "failed",
            "GFP_KERNEL requests that failed (NoMemory), % of requests",
            Metric::lower("% of requests failed", "%"),
            &fs,
        ));
        // A way that failed every request has a latency, but no result: its rows
        // in the time tables are marked failed.
        let mut timed = [
            table(
                "latency",
                "ns per GFP_KERNEL request, failures included",
                Metric::lower("ns per request", "ns"),
                &s,
            ),
            table(
                "p99",
                "99th percentile of a request's latency, ns",
                Metric::lower("ns at the 99th percentile of requests", "ns"),
                &ps,
            ),
        ];
        for (i, f) in fs.iter().enumerate() {
            if median(&f.values) >= 100.0 {
                for t in &mut timed {
                    t.mark_failed(i, "every request failed");
                }
            }
        }
        res.tables.extend(timed);
        res.notes.push(format!(
            "failed: {:.2}% with no reclaim, {:.2}% with the caller freeing on failure, {:.2}% \
             with direct reclaim, {:.2}% with kswapd (medians of the measured rounds)",
            median(&fs[0].values),
            median(&fs[1].values),
            median(&fs[2].values),
            median(&fs[3].values)
        ));
        res.targets.push(Target::at_most(
            "requests failed with a shrinker and direct reclaim (%)",
            median(&fs[2].values),
            0.0,
            "%",
        ));
        res
    }
}

/// What one round measured.
struct Round {
    ns_per_request: f64,
    failed_pct: f64,
    p99_ns: f64,
}

fn round(how: How, pages: u64, ops: u64) -> Round {
    let za = Arc::new(
        ZoneAllocator::new(Config::single_zone(ZoneType::Normal, Pfn(0), pages))
            .expect("a single-zone configuration"),
    );
    let pool = Arc::new(Pool {
        za: za.clone(),
        cached: Mutex::new(Vec::new()),
    });
    let id = (how == How::Direct || how == How::Kswapd).then(|| {
        za.register_shrinker(
            Arc::new(PoolShrinker(pool.clone())),
            ShrinkerConfig::default(),
        )
    });
    let worker = (how == How::Kswapd).then(|| KswapdWorker::spawn(&za).expect("one kswapd"));
    while let Ok(p) = za.alloc_pages(Gfp::NOWAIT, Order(0)) {
        pool.cached.lock().expect("pool lock").push(p);
    }
    let mut rng = Rng::new(0x5eed);
    let mut held: Vec<(Pfn, Order)> = Vec::with_capacity(WINDOW);
    let mut lat: Vec<u32> = Vec::with_capacity(ops as usize);
    let mut failed = 0u64;
    let t = Instant::now();
    for _ in 0..ops {
        pool.grow();
        if held.len() == WINDOW {
            let i = rng.range(0, WINDOW as u64 - 1) as usize;
            let (p, o) = held.swap_remove(i);
            za.free_pages(p, o).expect("freeing a held block");
        }
        let o = Order(rng.range(0, 3) as u8);
        let t0 = Instant::now();
        let mut r = za.alloc_pages(Gfp::KERNEL, o);
        if r.is_err() && how == How::Caller {
            pool.release(CALLER_FREES);
            r = za.alloc_pages(Gfp::KERNEL, o);
        }
        lat.push(t0.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
        match r {
            Ok(p) => held.push((p, o)),
            Err(_) => failed += 1,
        }
    }
    let ns = t.elapsed().as_secs_f64() * 1e9 / ops as f64;
    drop(worker);
    if let Some(id) = id {
        za.unregister_shrinker(id).expect("registered above");
    }
    for (p, o) in held {
        za.free_pages(p, o).expect("freeing a held block");
    }
    pool.release(usize::MAX);
    lat.sort_unstable();
    let p99 = lat[(lat.len() * 99 / 100).min(lat.len() - 1)];
    // The timed value includes the pool's growth and the window's frees: the
    // same work in every variant, so the ratio is the requests' difference.
    Round {
        ns_per_request: ns,
        failed_pct: 100.0 * failed as f64 / ops as f64,
        p99_ns: f64::from(p99),
    }
}
