//! Replays excerpts cut from the real Linux 6.18 trace and checks every count exactly.
//!
//! `tests/data/cargo-build-first2000.perf.txt` is the trace's first 2,000 lines;
//! `cargo-build-lines279001-281000.perf.txt` is lines 279,001–281,000, a stretch with
//! per-CPU refills, high-order allocations and COMMs with spaces. The expected figures
//! were counted independently of this crate, from the text (a pfn map of
//! `mm_page_alloc` heads; `mm_page_free` of a mapped head of the same order is a
//! replayed free, of an unmapped pfn a pre-trace free).

use std::io::Write;
use std::path::{Path, PathBuf};

use zonealloc::ZoneType;
use zonealloc_trace::event::EventKind;
use zonealloc_trace::layout::{HoleModel, ZoneLayout};
use zonealloc_trace::reader::ReadOptions;
use zonealloc_trace::replay::{self, ReplayOptions, ReplayReport};
use zonealloc_trace::TraceError;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// A 256 MiB Normal zone where the traced machine's Normal zone starts: room for the
/// excerpts, quick to build.
fn small() -> ReplayOptions {
    ReplayOptions {
        layout: ZoneLayout::single(ZoneType::Normal, 1 << 20, 1 << 16),
        ..ReplayOptions::default()
    }
}

struct Expect {
    lines: u64,
    alloc: u64,
    free: u64,
    free_batched: u64,
    zone_locked: u64,
    frees_replayed: u64,
    frees_pretrace: u64,
    kernel_refill_blocks: u64,
    kernel_zone_locked_other: u64,
    live_blocks: u64,
    live_pages: u64,
}

#[track_caller]
fn check(r: &ReplayReport, e: &Expect) {
    let p = &r.parse;
    assert_eq!(p.lines, e.lines);
    assert_eq!(p.malformed, 0);
    assert_eq!(p.events.total(), e.lines);
    assert!(
        p.unknown_gfp_symbols.is_empty(),
        "{:?}",
        p.unknown_gfp_symbols
    );
    assert_eq!(r.events.get(EventKind::Alloc), e.alloc);
    assert_eq!(r.events.get(EventKind::Free), e.free);
    assert_eq!(r.events.get(EventKind::FreeBatched), e.free_batched);
    assert_eq!(r.events.get(EventKind::AllocZoneLocked), e.zone_locked);
    assert_eq!(r.events.get(EventKind::PcpuDrain), 0);
    assert_eq!(r.events.get(EventKind::AllocExtfrag), 0);
    assert_eq!(r.events, p.events);
    let c = &r.counts;
    assert_eq!(c.allocs, e.alloc);
    assert_eq!(c.alloc_failures, 0);
    assert_eq!(c.kernel_failed_allocs, 0);
    assert_eq!(c.implicit_frees, 0);
    assert_eq!(c.frees, e.frees_replayed);
    assert_eq!(c.frees_pretrace, e.frees_pretrace);
    assert_eq!(c.frees + c.frees_pretrace, e.free);
    assert_eq!(c.split_frees, 0);
    assert_eq!(c.free_order_mismatch, 0);
    assert_eq!(c.frees_of_failed_allocs, 0);
    assert_eq!(c.free_errors, 0);
    assert_eq!(c.free_batched, e.free_batched);
    assert_eq!(c.allocator_calls, e.alloc + e.frees_replayed);
    assert_eq!(r.pcp.kernel_refill_blocks, e.kernel_refill_blocks);
    assert_eq!(r.pcp.kernel_zone_locked_other, e.kernel_zone_locked_other);
    assert_eq!(r.pcp.kernel_drain_blocks, 0);
    assert_eq!(r.fallback.kernel_extfrag, 0);
    assert_eq!(r.nr_cpus, 2);
    assert_eq!(r.timing.events, e.lines);
    assert!(r.timing.ns_per_event > 0.0);
    let end = &r.end;
    assert_eq!(end.live_blocks, e.live_blocks);
    assert_eq!(end.live_pages, e.live_pages);
    // The ledger: every managed page is free, on a per-CPU list, or held for the trace.
    assert_eq!(
        end.nr_free_pages + end.nr_pcp_pages + end.live_pages,
        r.managed_pages
    );
    // Samples: one before the first event and one after the last.
    assert_eq!(r.samples.first().map(|s| s.event), Some(0));
    assert_eq!(r.samples.last().map(|s| s.event), Some(e.lines));
}

const FIRST: Expect = Expect {
    lines: 2000,
    alloc: 804,
    free: 609,
    free_batched: 587,
    zone_locked: 0,
    frees_replayed: 560,
    frees_pretrace: 49,
    kernel_refill_blocks: 0,
    kernel_zone_locked_other: 0,
    live_blocks: 244,
    live_pages: 244,
};

const MIDDLE: Expect = Expect {
    lines: 2000,
    alloc: 1577,
    free: 152,
    free_batched: 140,
    zone_locked: 131,
    frees_replayed: 119,
    frees_pretrace: 33,
    kernel_refill_blocks: 126,
    kernel_zone_locked_other: 5,
    live_blocks: 1458,
    live_pages: 1613,
};

#[test]
fn first_2000_lines_replay_exactly() {
    let r = replay::run(&data("cargo-build-first2000.perf.txt"), &small()).unwrap();
    check(&r, &FIRST);
}

#[test]
fn refill_stretch_replays_exactly() {
    let r = replay::run(&data("cargo-build-lines279001-281000.perf.txt"), &small()).unwrap();
    check(&r, &MIDDLE);
    // zonealloc refilled its per-CPU lists from the buddy lists too.
    assert!(r.pcp.zonealloc.refill_blocks > 0);
}

#[test]
fn full_machine_layout_from_zoneinfo_replays_the_same_counts() {
    let zoneinfo = data("linux-6.18-zoneinfo.txt");
    let layout = ZoneLayout::from_zoneinfo(&zoneinfo).unwrap();
    assert_eq!(layout, ZoneLayout::linux_6_18_trace_machine());
    let opts = ReplayOptions {
        layout,
        holes: HoleModel::Managed,
        ..ReplayOptions::default()
    };
    let r = replay::run(&data("cargo-build-lines279001-281000.perf.txt"), &opts).unwrap();
    check(&r, &MIDDLE);
    assert_eq!(r.managed_pages, 3840 + 772_917 + 524_288);
}

#[test]
fn xz_and_plain_replay_alike() {
    let plain = data("cargo-build-first2000.perf.txt");
    let text = std::fs::read(&plain).unwrap();
    let xz_path = std::env::temp_dir().join(format!(
        "zonealloc-trace-test-{}.perf.txt.xz",
        std::process::id()
    ));
    let mut enc = liblzma::write::XzEncoder::new(Vec::new(), 6);
    enc.write_all(&text).unwrap();
    std::fs::write(&xz_path, enc.finish().unwrap()).unwrap();
    let r = replay::run(&xz_path, &small()).unwrap();
    std::fs::remove_file(&xz_path).unwrap();
    assert!(r.parse.xz);
    check(&r, &FIRST);
}

#[test]
fn chunked_streaming_gives_the_same_replay() {
    let opts = ReplayOptions {
        chunk_events: 97,
        ..small()
    };
    let r = replay::run(&data("cargo-build-lines279001-281000.perf.txt"), &opts).unwrap();
    check(&r, &MIDDLE);
}

/// A trace_pipe trace written for the corner cases: a lost free (implicit free), a
/// split block freed page by page (the first free splits it, the second is a plain
/// order-0 free), a kernel-failed allocation, a zonealloc failure
/// and its free, a malformed line, an unknown gfp symbol, a pre-trace free.
const CORNERS: &str = "\
# tracer: nop
#
           <...>-1     [000] d..1.   1.000001: mm_page_alloc: page=0x1 pfn=0x1000 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
           <...>-1     [000] d..1.   1.000002: mm_page_alloc: page=0x1 pfn=0x1000 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
 my comm [x]-7     [001] d..1.   1.000003: mm_page_alloc: page=0x1 pfn=0x2000 order=2 migratetype=0 gfp_flags=GFP_KERNEL|__GFP_FROB
           <...>-1     [001] ..... 1.000004: mm_page_free: page=0x1 pfn=0x2001 order=0
           <...>-1     [001] ..... 1.000005: mm_page_free: page=0x1 pfn=0x2000 order=0
this line is not a trace line
           <...>-1     [000] d..1.   1.000006: mm_page_alloc: page=(nil) pfn=0xffffffffffffffff order=9 migratetype=1 gfp_flags=GFP_TRANSHUGE
           <...>-1     [000] d..1.   1.000007: mm_page_alloc: page=0x1 pfn=0x4000 order=10 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
           <...>-1     [000] ..... 1.000008: mm_page_free: page=0x1 pfn=0x4000 order=10
           <...>-1     [000] ..... 1.000009: mm_page_free: page=0x1 pfn=0x9999 order=0
           <...>-1     [000] ..... 1.000010: mm_page_free_batched: page=0x1 pfn=0x9999 order=0
";

fn corners_file() -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "zonealloc-trace-corners-{}.txt",
        std::process::id()
    ));
    std::fs::write(&p, CORNERS).unwrap();
    p
}

#[test]
fn trace_pipe_corner_cases() {
    let path = corners_file();
    // 1024 frames: an order-10 request cannot pass the watermarks.
    let opts = ReplayOptions {
        layout: ZoneLayout::single(ZoneType::Normal, 0, 1024),
        ..ReplayOptions::default()
    };
    let r = replay::run(&path, &opts);
    let strict = replay::run(
        &path,
        &ReplayOptions {
            read: ReadOptions {
                strict: true,
                ..ReadOptions::default()
            },
            ..opts.clone()
        },
    );
    std::fs::remove_file(&path).unwrap();
    let r = r.unwrap();
    assert_eq!(r.parse.lines, 13);
    assert_eq!(r.parse.blank_lines, 2);
    assert_eq!(r.parse.malformed, 1);
    assert_eq!(r.parse.malformed_examples[0].line, 8);
    assert_eq!(r.parse.unknown_gfp_symbols.get("__GFP_FROB"), Some(&1));
    let c = &r.counts;
    assert_eq!(c.allocs, 4);
    assert_eq!(c.implicit_frees, 1);
    assert_eq!(c.split_frees, 1);
    assert_eq!(c.frees, 1);
    assert_eq!(c.kernel_failed_allocs, 1);
    assert_eq!(c.alloc_failures, 1);
    assert_eq!(c.alloc_failures_by_order[10], 1);
    assert_eq!(c.frees_of_failed_allocs, 1);
    assert_eq!(c.frees_pretrace, 1);
    assert_eq!(c.free_batched, 1);
    assert_eq!(c.free_errors, 0);
    // Left held: the second 0x1000 page and pages 2..4 of the split block.
    assert_eq!(r.end.live_blocks, 3);
    assert_eq!(r.end.live_pages, 3);
    assert_eq!(r.nr_cpus, 2);
    match strict {
        Err(replay::ReplayError::Trace(TraceError::Malformed { line, .. })) => {
            assert_eq!(line.line, 8)
        }
        other => panic!("strict replay did not stop at line 8: {other:?}"),
    }
}

#[test]
fn report_prints_and_serializes() {
    let r = replay::run(&data("cargo-build-first2000.perf.txt"), &small()).unwrap();
    let text = r.to_string();
    for needle in [
        "mm_page_alloc",
        "ns/event",
        "refill blocks",
        "buddyinfo:",
        "unusable_index:",
        "claimed the pageblock); pageblock types:",
    ] {
        assert!(text.contains(needle), "report lacks {needle}:\n{text}");
    }
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["counts"]["allocs"], 804);
    assert_eq!(json["events"]["mm_page_free_batched"], 587);
    assert_eq!(json["layout"]["zones"][0]["zone_type"], "Normal");
    // Every pageblock starts Movable, so each Unmovable or Reclaimable block at the
    // end was claimed by a fallback, and every claim is counted as one.
    let claimed_blocks: u64 = r
        .fallback
        .pageblock_types
        .iter()
        .flat_map(|z| z.at_end.iter())
        .filter(|(name, _)| *name == "Unmovable" || *name == "Reclaimable")
        .map(|(_, n)| *n)
        .sum();
    assert!(r.fallback.zonealloc_extfrag.unwrap() >= r.fallback.zonealloc_claimed);
    assert!(r.fallback.zonealloc_claimed >= claimed_blocks.min(1));
}
