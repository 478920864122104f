//! `cma`: contiguous runs while movable memory is in use, with a CMA area and
//! without.
//!
//! One zone of abstract frames, 256 MiB (64 MiB quick). A workload fills it:
//! one allocation in 32 is an unmovable (`GFP_KERNEL`) page, the others movable
//! pages of an owner that moves them when asked; then the owner frees a random
//! half of its pages, so every pageblock keeps some and there is room to move
//! to. Then a driver asks for runs of 256 frames (1 MiB), one after another,
//! holding each, up to a quarter of the zone. Three ways to ask, each over its
//! own fresh zone:
//!
//! * **CMA area, `cma_alloc`**: a quarter of the zone is a CMA area; the
//!   owner's pages that borrowed it are moved out;
//! * **no CMA, `alloc_contig_pages`**: Linux's way for a driver without CMA: the
//!   first free 256-frame run of the zone (no migration);
//! * **no CMA, `alloc_pages` order 8**: the buddy allocator with direct
//!   compaction (`GFP_KERNEL`, which may block and compact), the other road a
//!   driver without CMA takes for a power-of-two run.
//!
//! The timed value is µs per request, failures included; the share of requests
//! that succeeded comes from the same rounds.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator, ZoneType};

use super::page_owner::Owner;
use super::seed_util::Rng;
use super::{Experiment, ExperimentResult, Target};
use crate::harness::{median, Ctx, Metric, Samples, Table, Variant};

/// The experiment.
pub struct Cma;

/// Frames per request (1 MiB).
const RUN: u64 = 256;
/// One allocation in `UNMOVABLE_ONE_IN` of the fill is unmovable.
const UNMOVABLE_ONE_IN: u64 = 4;
/// Passes of freeing half of every kind and filling again before the requests.
const CHURN: u32 = 10;

#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    Cma,
    Contig,
    Compact,
}

impl How {
    fn name(self) -> &'static str {
        match self {
            How::Cma => "CMA area, cma_alloc",
            How::Contig => "no CMA, alloc_contig_pages",
            How::Compact => "no CMA, alloc_pages order 8 (compaction)",
        }
    }
}

impl Experiment for Cma {
    fn name(&self) -> &'static str {
        "cma"
    }

    fn description(&self) -> &'static str {
        "1 MiB contiguous runs while movable and unmovable pages fill the zone: cma_alloc from a \
         CMA area vs alloc_contig_pages vs alloc_pages with compaction, without CMA"
    }

    fn run(&self, ctx: &mut Ctx) -> ExperimentResult {
        let mut res = ExperimentResult::new(self);
        let pages: u64 = ctx.scale(1 << 14, 1 << 16);
        let requests = pages / 4 / RUN;
        res.param(
            "zone",
            format!(
                "{} MiB of abstract 4 KiB frames; the CMA variant's area: the zone's third \
                 quarter ({} MiB)",
                pages >> 8,
                pages >> 10
            ),
        );
        res.param(
            "workload",
            format!(
                "fill with order-0 pages (1 in {UNMOVABLE_ONE_IN} unmovable, the rest movable and \
                 migratable), free a random half of the movable ones, then {requests} requests \
                 of {RUN} contiguous frames, each held"
            ),
        );
        let hows = [How::Cma, How::Contig, How::Compact];
        let ok: Vec<RefCell<Vec<f64>>> = hows.iter().map(|_| RefCell::new(Vec::new())).collect();
        let mut variants: Vec<Variant<'_>> = hows
            .iter()
            .zip(&ok)
            .map(|(&how, o)| {
                Variant::new(how.name(), move || {
                    let (us, pct) = round(how, pages, requests);
                    o.borrow_mut().push(pct);
                    us
                })
            })
            .collect();
        let s = ctx.compare("contiguous runs beside movable memory", &mut variants);
        drop(variants);
        let succeeded: Vec<Samples> = hows
            .iter()
            .zip(&ok)
            .map(|(h, v)| {
                let all = v.borrow();
                let skip = all.len().saturating_sub(ctx.rounds);
                Samples {
                    variant: h.name().to_owned(),
                    values: all[skip..].to_vec(),
                }
            })
            .collect();
        let table = |id: &str, title: &str, metric: Metric, v: &[Samples]| {
            let refs: Vec<(&str, &Samples)> = hows.iter().map(|h| h.name()).zip(v).collect();
            Table::new(id, title, metric, &refs)
        };
        res.tables.push(table(
            "success",
            "requests for 1 MiB that succeeded, % of requests",
            Metric::higher("% succeeded", "%"),
            &succeeded,
        ));
        // A way that satisfied no request has a time, but no result.
        let mut latency = table(
            "latency",
            "µs per 1 MiB request, failures included",
            Metric::lower("µs per request", "µs"),
            &s,
        );
        for (i, ok) in succeeded.iter().enumerate() {
            if median(&ok.values) == 0.0 {
                latency.mark_failed(i, "0 % of requests satisfied");
            }
        }
        res.tables.push(latency);
        res.notes.push(format!(
            "succeeded: {:.0}% with cma_alloc, {:.0}% with alloc_contig_pages, {:.0}% with \
             alloc_pages and compaction (medians of the measured rounds)",
            median(&succeeded[0].values),
            median(&succeeded[1].values),
            median(&succeeded[2].values)
        ));
        res.targets.push(
            Target::at_least(
                "1 MiB requests cma_alloc satisfied (%)",
                median(&succeeded[0].values),
                100.0,
                "%",
            )
            .on_table("success"),
        );
        res
    }
}

/// Allocates order-0 pages, one in `UNMOVABLE_ONE_IN` unmovable, until the
/// movable requests stop (at the min watermark).
fn fill(za: &ZoneAllocator, rng: &mut Rng, unmovable: &mut Vec<Pfn>, movable: &mut Vec<Pfn>) {
    loop {
        let kernel = rng.range(0, UNMOVABLE_ONE_IN - 1) == 0;
        let gfp = if kernel {
            Gfp::KERNEL
        } else {
            Gfp::HIGHUSER_MOVABLE
        };
        match za.alloc_pages(gfp | Gfp::NOWAIT, Order(0)) {
            Ok(p) if kernel => unmovable.push(p),
            Ok(p) => movable.push(p),
            // The unmovable requests stop first where an area is left out of
            // their free pages: go on with movable ones until those stop too.
            Err(_) if kernel => {}
            Err(_) => break,
        }
    }
}

/// One round: a fresh zone, the fill, then `requests` runs asked for `how`.
/// Returns (µs per request, % of requests that succeeded).
fn round(how: How, pages: u64, requests: u64) -> (f64, f64) {
    let mut config = Config::single_zone(ZoneType::Normal, Pfn(0), pages);
    if how == How::Cma {
        config = config.with_cma("bench", Pfn(pages / 2), pages / 4);
    }
    let za = ZoneAllocator::new(config).expect("a single-zone configuration");
    let owner = Arc::new(Owner::new());
    za.set_migrator(Some(owner.clone()));
    let mut rng = Rng::new(0xc3a);
    let mut unmovable = Vec::new();
    let mut movable = Vec::new();
    for pass in 0..=CHURN {
        fill(&za, &mut rng, &mut unmovable, &mut movable);
        if pass == CHURN {
            break;
        }
        // Churn: free a random half of every kind, then fill again, so that the
        // unmovable pages spread as a long-running system's do.
        for v in [&mut unmovable, &mut movable] {
            let mut i = 0;
            while i < v.len() {
                if rng.range(0, 1) == 0 {
                    za.free_pages(v.swap_remove(i), Order(0))
                        .expect("freeing a held page");
                } else {
                    i += 1;
                }
            }
        }
    }
    {
        let mut kept = owner.0.lock().expect("owner lock");
        for p in movable {
            if rng.range(0, 1) == 0 {
                kept.insert(p);
            } else {
                za.free_pages(p, Order(0))
                    .expect("freeing a page just allocated");
            }
        }
    }
    let mut got: Vec<Pfn> = Vec::new();
    let t = Instant::now();
    for _ in 0..requests {
        let r = match how {
            How::Cma => za.cma_alloc(0, RUN, Order(0)).ok(),
            How::Contig => za.alloc_contig_pages(RUN, Gfp::KERNEL, 0).ok(),
            How::Compact => za.alloc_pages(Gfp::KERNEL, Order(8)).ok(),
        };
        if let Some(p) = r {
            got.push(p);
        }
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / requests as f64;
    let pct = got.len() as f64 * 100.0 / requests as f64;
    for p in got {
        match how {
            How::Cma => za.cma_release(0, p, RUN).expect("releasing a run"),
            How::Contig => za.free_contig_range(p, RUN).expect("freeing a run"),
            How::Compact => za.free_pages(p, Order(8)).expect("freeing a block"),
        }
    }
    for p in owner.0.lock().expect("owner lock").drain() {
        za.free_pages(p, Order(0))
            .expect("the owner frees its pages");
    }
    for p in unmovable {
        za.free_pages(p, Order(0))
            .expect("freeing an unmovable page");
    }
    (us, pct)
}
