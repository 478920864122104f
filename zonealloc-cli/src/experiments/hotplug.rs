//! `hotplug`: taking a range of memory offline (`offline_pages`) as the share of
//! it that an owner's movable pages occupy grows, and what moving them costs.
//!
//! One 1 GiB zone of abstract frames (256 MiB quick). Before each round an owner
//! of movable pages fills the zone and keeps one page in `k` (none, 1 in 8, 1 in
//! 2), so every pageblock holds some; then a 128 MiB range (32 MiB quick) is taken
//! offline, timed, and onlined again. The owner's `Migrate::relocate` moves each of
//! its pages when asked. The free range is the baseline: the other variants pay
//! for the moves (`pgmigrate_success`, printed per round).

use std::sync::Arc;
use std::time::Instant;

use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator, ZoneType};

use super::page_owner::Owner;
use super::{Experiment, ExperimentResult};
use crate::harness::{secs_since, Ctx, Metric, Table, Variant};

/// The experiment.
pub struct Hotplug;

/// Kept one page in `KEEP[i]` (0: none).
const KEEP: [u64; 3] = [0, 8, 2];

fn name(keep: u64) -> String {
    if keep == 0 {
        "free range".to_owned()
    } else {
        format!("1 page in {keep} movable")
    }
}

impl Experiment for Hotplug {
    fn name(&self) -> &'static str {
        "hotplug"
    }

    fn description(&self) -> &'static str {
        "offline_pages of a range that is free vs 1 in 8 vs 1 in 2 of its pages movable \
         (moved out through their owner): ms per offlining, pages moved"
    }

    fn run(&self, ctx: &mut Ctx) -> ExperimentResult {
        let mut res = ExperimentResult::new(self);
        let pages: u64 = ctx.scale(1 << 16, 1 << 18);
        let range: u64 = pages / 8;
        res.param(
            "zone",
            format!(
                "{} MiB of abstract 4 KiB frames; range offlined: {} MiB from the middle",
                pages >> 8,
                range >> 8
            ),
        );
        let moved: Vec<std::cell::Cell<u64>> =
            KEEP.iter().map(|_| std::cell::Cell::new(0)).collect();
        let mut variants: Vec<Variant<'_>> = KEEP
            .iter()
            .zip(&moved)
            .map(|(&keep, m)| {
                Variant::new(name(keep), move || {
                    let (ms, n) = round(pages, range, keep);
                    m.set(n);
                    ms
                })
            })
            .collect();
        let s = ctx.compare("offline a range", &mut variants);
        drop(variants);
        let names: Vec<String> = KEEP.iter().map(|&k| name(k)).collect();
        res.tables.push(Table::new(
            "offline",
            &format!("offline_pages of {} MiB: ms per call", range >> 8),
            Metric::lower("ms per offlining", "ms"),
            &[
                (names[0].as_str(), &s[0]),
                (names[1].as_str(), &s[1]),
                (names[2].as_str(), &s[2]),
            ],
        ));
        for (i, (n, m)) in names.iter().zip(&moved).enumerate() {
            let extra_us = (s[i].median() - s[0].median()) * 1e3;
            let per_page = if m.get() == 0 {
                String::new()
            } else {
                format!(
                    " ({:.2} µs per page moved, over the free range's time)",
                    extra_us / m.get() as f64
                )
            };
            res.notes.push(format!(
                "{n}: {} pages moved out per offlining{per_page}",
                m.get()
            ));
        }
        res
    }
}

/// One round: fill, keep one page in `keep`, offline `range` pages from the
/// middle (timed, ms), online them, free everything. Returns (ms, pages moved).
fn round(pages: u64, range: u64, keep: u64) -> (f64, u64) {
    let za = ZoneAllocator::new(Config::single_zone(ZoneType::Normal, Pfn(0), pages))
        .expect("a single-zone configuration");
    let owner = Arc::new(Owner::new());
    za.set_migrator(Some(owner.clone()));
    if keep > 0 {
        let mut all = Vec::new();
        while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NOWAIT, Order(0)) {
            all.push(p);
        }
        let mut kept = owner.0.lock().expect("owner lock");
        for p in all {
            if p.0 % keep == 0 {
                kept.insert(p);
            } else {
                za.free_pages(p, Order(0))
                    .expect("freeing a page just allocated");
            }
        }
    }
    let before = za.compaction_stats().pgmigrate_success;
    let start = Pfn(pages / 2);
    let t = Instant::now();
    za.offline_pages(start, range)
        .expect("every page of the range can move");
    let ms = secs_since(t) * 1e3;
    let moved = za.compaction_stats().pgmigrate_success - before;
    za.online_pages(start, range).expect("the range is offline");
    for p in owner.0.lock().expect("owner lock").drain() {
        za.free_pages(p, Order(0))
            .expect("the owner frees its pages");
    }
    (ms, moved)
}
