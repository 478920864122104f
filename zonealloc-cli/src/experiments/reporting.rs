//! `reporting`: free page reporting over a real arena: the resident set after a
//! fill and a free, without reporting and with it, what a report costs, and what
//! it costs the refill that follows.
//!
//! Three allocators, each over its own anonymous arena (1 GiB; 256 MiB quick):
//!
//! * **no reporting** (before: what a program gets today, and what any peer
//!   allocator over an arena does: freed memory stays resident);
//! * **reported, `MADV_DONTNEED`** (`Reporter::Backend`, the arena's default
//!   discard);
//! * **reported, `MADV_FREE`** (`ArenaOptions::discard`).
//!
//! One round of each, interleaved with the others as every experiment's are:
//!
//! ```text
//!   fill      alloc_block(order 9) until the arena is full, write one byte per page
//!   free      drop every block, drain_all_pages()
//!   report    report_free_pages() (the reporting variants)
//!   measure   resident pages of the arena (mincore)
//! ```
//!
//! The timed value is the *fill*, in ns per page: after the first (warm-up) round
//! it refills memory the previous round freed, resident or given back, so it is
//! the refill cost reporting adds (a fault and a zeroed page per page given back
//! by `MADV_DONTNEED`). The resident set after the report and the pass's cost per
//! reported block are recorded from the same rounds.

use std::cell::RefCell;
use std::time::Instant;

use zonealloc::reporting::{Reporter, ReportingConfig};
use zonealloc::{
    Arena, ArenaOptions, Backend, Config, Discard, Gfp, Order, Pfn, ZoneAllocator, ZoneType,
};

use super::{Experiment, ExperimentResult, Target};
use crate::harness::{median, secs_since, Ctx, Metric, Samples, Table, Variant};

/// The experiment.
pub struct Reporting;

const ORDER: Order = Order(9);

/// How a variant's freed memory is (or is not) given back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    Kept,
    DontNeed,
    Free,
}

impl How {
    fn name(self) -> &'static str {
        match self {
            How::Kept => "no reporting",
            How::DontNeed => "reported, MADV_DONTNEED",
            How::Free => "reported, MADV_FREE",
        }
    }
}

impl Experiment for Reporting {
    fn name(&self) -> &'static str {
        "reporting"
    }

    fn description(&self) -> &'static str {
        "free page reporting over an arena: resident set after fill and free without and \
         with reporting (MADV_DONTNEED, MADV_FREE), cost per reported block, refill cost"
    }

    fn run(&self, ctx: &mut Ctx) -> ExperimentResult {
        let mut res = ExperimentResult::new(self);
        let pages: u64 = ctx.scale(1 << 16, 1 << 18);
        res.param(
            "arena",
            format!(
                "{} MiB, anonymous, 4 KiB frames, one zone; filled with order-9 blocks, one \
                 byte written per page",
                pages >> 8
            ),
        );
        res.param(
            "reporting",
            "Reporter::Backend, order 9 (pageblock order), 32 blocks per call",
        );
        let hows = [How::Kept, How::DontNeed, How::Free];
        let allocs: Vec<ZoneAllocator<Arena>> = hows.iter().map(|&h| allocator(pages, h)).collect();
        let resident: Vec<RefCell<Vec<f64>>> =
            hows.iter().map(|_| RefCell::new(Vec::new())).collect();
        let per_block: Vec<RefCell<Vec<f64>>> =
            hows.iter().map(|_| RefCell::new(Vec::new())).collect();
        let mut variants: Vec<Variant<'_>> = hows
            .iter()
            .zip(&allocs)
            .zip(resident.iter().zip(&per_block))
            .map(|((&how, za), (res_mib, cost))| {
                Variant::new(how.name(), move || {
                    let r = round(za, how != How::Kept);
                    res_mib.borrow_mut().push(r.resident_mib);
                    if let Some(c) = r.us_per_block {
                        cost.borrow_mut().push(c);
                    }
                    r.fill_ns_per_page
                })
            })
            .collect();
        let s = ctx.compare("fill, free, report", &mut variants);
        drop(variants);
        // The first (warm-up) round of each variant filled fresh memory; the
        // side figures keep only the measured rounds.
        let measured = |v: &RefCell<Vec<f64>>| -> Samples {
            let all = v.borrow();
            let skip = all.len().saturating_sub(ctx.rounds);
            Samples {
                variant: String::new(),
                values: all[skip..].to_vec(),
            }
        };
        let rs: Vec<Samples> = hows
            .iter()
            .zip(&resident)
            .map(|(h, v)| Samples {
                variant: h.name().to_owned(),
                ..measured(v)
            })
            .collect();
        res.tables.push(Table::new(
            "resident",
            "resident MiB of the arena after filling it, freeing everything and reporting",
            Metric::lower("resident MiB after free", "MiB"),
            &[
                (How::Kept.name(), &rs[0]),
                (How::DontNeed.name(), &rs[1]),
                (How::Free.name(), &rs[2]),
            ],
        ));
        res.tables.push(Table::new(
            "refill",
            "refilling the arena after the previous round's free (and report): ns per page, \
             one byte written per page",
            Metric::lower("ns per page refilled and touched", "ns"),
            &[
                (How::Kept.name(), &s[0]),
                (How::DontNeed.name(), &s[1]),
                (How::Free.name(), &s[2]),
            ],
        ));
        let costs: Vec<Samples> = hows[1..]
            .iter()
            .zip(&per_block[1..])
            .map(|(h, v)| Samples {
                variant: h.name().to_owned(),
                ..measured(v)
            })
            .collect();
        res.tables.push(Table::new(
            "pass",
            "report_free_pages() after the free: µs per reported order-9 block (2 MiB)",
            Metric::lower("µs per reported block", "µs"),
            &[
                (How::DontNeed.name(), &costs[0]),
                (How::Free.name(), &costs[1]),
            ],
        ));
        let arena_mib = (pages >> 8) as f64;
        let kept = rs[0].median();
        let given = rs[1].median();
        res.notes.push(format!(
            "resident after free: {kept:.0} MiB without reporting, {given:.0} MiB with \
             MADV_DONTNEED ({:.1}% of the {arena_mib:.0} MiB arena given back), {:.0} MiB with \
             MADV_FREE (given back only under memory pressure: until then the pages stay \
             resident, as LazyFree)",
            100.0 * (kept - given) / arena_mib,
            rs[2].median()
        ));
        res.notes.push(format!(
            "refill after reporting: {:.2}x the refill of resident memory with MADV_DONTNEED, \
             {:.2}x with MADV_FREE",
            s[1].median() / s[0].median(),
            s[2].median() / s[0].median()
        ));
        res.notes.push(format!(
            "reporting pass: {:.1} µs per 2 MiB block with MADV_DONTNEED, {:.1} with MADV_FREE \
             (medians of the measured rounds)",
            median(&costs[0].values),
            median(&costs[1].values)
        ));
        res.targets.push(Target::at_most(
            "resident set after fill, free and report (MADV_DONTNEED), share of the arena",
            given / arena_mib,
            0.05,
            "",
        ));
        res
    }
}

fn allocator(pages: u64, how: How) -> ZoneAllocator<Arena> {
    let opts = ArenaOptions {
        discard: if how == How::Free {
            Discard::Free
        } else {
            Discard::DontNeed
        },
        ..ArenaOptions::default()
    };
    let za = ZoneAllocator::with_arena(Config::single_zone(ZoneType::Normal, Pfn(0), pages), opts)
        .expect("an arena of a single zone");
    if how != How::Kept {
        za.register_page_reporting(Reporter::Backend, ReportingConfig::default())
            .expect("an arena can discard");
    }
    za
}

/// What one round measured.
struct Round {
    fill_ns_per_page: f64,
    resident_mib: f64,
    us_per_block: Option<f64>,
}

/// Fills the arena with order-9 blocks (one byte written per page), frees them,
/// reports if `report`, and measures the arena's resident set.
fn round(za: &ZoneAllocator<Arena>, report: bool) -> Round {
    let t = Instant::now();
    let mut held = Vec::new();
    let mut pages = 0u64;
    while let Ok(mut b) = za.alloc_block(Gfp::KERNEL, ORDER) {
        let bytes = b.bytes_mut().expect("arena frames have contents");
        for i in (0..bytes.len()).step_by(4096) {
            bytes[i] = 1;
        }
        pages += ORDER.nr_pages();
        held.push(b);
    }
    let fill = secs_since(t) * 1e9 / pages.max(1) as f64;
    drop(held);
    za.drain_all_pages();
    let us_per_block = report.then(|| {
        let t = Instant::now();
        let s = za
            .report_free_pages()
            .expect("the backend reporter accepts");
        secs_since(t) * 1e6 / s.blocks.max(1) as f64
    });
    Round {
        fill_ns_per_page: fill,
        resident_mib: resident_bytes(za.backend()) as f64 / (1 << 20) as f64,
        us_per_block,
    }
}

/// Resident bytes of the arena's mapping: the `Rss:` of every mapping of
/// `/proc/self/smaps` that overlaps it (0 where the file cannot be read).
fn resident_bytes(arena: &Arena) -> u64 {
    let Some(base) = arena.page_address(arena.first_pfn()) else {
        return 0;
    };
    let lo = base.as_ptr() as u64;
    let hi = lo + arena.len_bytes() as u64;
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let mut inside = false;
    let mut kb = 0u64;
    for line in smaps.lines() {
        let mut f = line.split_whitespace();
        let Some(first) = f.next() else { continue };
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                inside = a < hi && lo < b;
                continue;
            }
        }
        if inside && first == "Rss:" {
            kb += f.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    kb << 10
}
