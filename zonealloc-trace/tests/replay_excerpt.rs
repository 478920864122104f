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
    /// Pages those pre-trace frees free (some are of order > 0).
    pretrace_pages: u64,
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
    // Each pre-trace free is one `free_contig_range_on` of an aligned run of pool
    // pages; each pool block costs an allocation and a split.
    assert_eq!(c.frees_pretrace_replayed, e.frees_pretrace);
    assert_eq!(
        c.pretrace_pool_blocks,
        e.pretrace_pages.div_ceil(1 << 10),
        "one max-order block per 1,024 pre-trace pages"
    );
    assert_eq!(
        c.allocator_calls,
        e.alloc + e.frees_replayed + e.frees_pretrace + 2 * c.pretrace_pool_blocks
    );
    // No frame of these excerpts is reused unseen.
    assert_eq!(
        (
            c.overlap_frees,
            c.lost_frees_at_zone_locked,
            c.lost_frees_at_drain
        ),
        (0, 0, 0)
    );
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
    // The ledger: every managed page is free, on a per-CPU list, held for the
    // trace, or in the pre-trace pool.
    assert_eq!(
        end.nr_free_pages + end.nr_pcp_pages + end.live_pages + end.pool_pages,
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
    pretrace_pages: 49,
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
    pretrace_pages: 47,
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

/// Frees lost by perf, noticed when the kernel reuses the frames (trace_pipe text):
/// a held page drained from a per-CPU list, a held page taken by a refill, an
/// allocation inside a held order-2 block, and an allocation at a held head.
const LOST: &str = "\
 cc-1 [000] d..1. 1.000001: mm_page_alloc: page=0x1 pfn=0x1000 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
 cc-1 [000] d..1. 1.000002: mm_page_alloc: page=0x1 pfn=0x2000 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
 cc-1 [001] d..1. 1.000003: mm_page_alloc: page=0x1 pfn=0x3000 order=2 migratetype=0 gfp_flags=GFP_KERNEL
 cc-1 [000] d..1. 1.000004: mm_page_alloc: page=0x1 pfn=0x4000 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
 cc-1 [000] d..1. 1.000005: mm_page_pcpu_drain: page=0x1 pfn=0x1000 order=0 migratetype=1
 cc-1 [000] d..1. 1.000006: mm_page_alloc_zone_locked: page=0x1 pfn=0x2000 order=0 migratetype=1 percpu_refill=1
 cc-1 [001] d..1. 1.000007: mm_page_alloc: page=0x1 pfn=0x3002 order=0 migratetype=0 gfp_flags=GFP_KERNEL
 cc-1 [000] d..1. 1.000008: mm_page_alloc: page=0x1 pfn=0x4000 order=1 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
 cc-1 [000] d..1. 1.000009: mm_page_pcpu_drain: page=0x1 pfn=0x5000 order=0 migratetype=1
";

#[test]
fn frees_lost_by_perf_are_made_when_the_kernel_reuses_the_frames() {
    let path =
        std::env::temp_dir().join(format!("zonealloc-trace-lost-{}.txt", std::process::id()));
    std::fs::write(&path, LOST).unwrap();
    let r = replay::run(&path, &small());
    std::fs::remove_file(&path).unwrap();
    let r = r.unwrap();
    let c = &r.counts;
    assert_eq!(c.allocs, 6);
    assert_eq!(c.lost_frees_at_drain, 1, "0x1000, drained while held");
    assert_eq!(
        c.lost_frees_at_zone_locked, 1,
        "0x2000, refilled while held"
    );
    assert_eq!(
        c.overlap_frees, 1,
        "0x3002 falls inside the order-2 block at 0x3000"
    );
    assert_eq!(c.implicit_frees, 1, "0x4000 allocated again");
    assert_eq!(c.free_errors, 0);
    // Held at the end: 0x3002 (order 0) and 0x4000 (order 1).
    assert_eq!((r.end.live_blocks, r.end.live_pages), (2, 3));
    assert_eq!(r.pcp.kernel_drain_blocks, 2);
    assert_eq!(r.pcp.kernel_refill_blocks, 1);
    // Per CPU and list order: both drains and the refill are CPU 0's, order 0.
    assert_eq!(r.pcp.kernel_drain_blocks_by_cpu_order[0], [2, 0, 0, 0, 0]);
    assert_eq!(r.pcp.kernel_refill_blocks_by_cpu_order[0], [1, 0, 0, 0, 0]);
    assert_eq!(r.pcp.kernel_refill_blocks_by_cpu_order[1], [0; 5]);
    for cpu in 0..2 {
        assert_eq!(
            r.pcp.zonealloc_refill_blocks_by_cpu_order[cpu]
                .iter()
                .sum::<u64>(),
            r.pcp.zonealloc_refill_blocks_by_cpu[cpu]
        );
    }
    assert!(r.to_string().contains("      order 0 "), "{r}");
    // zonealloc's frees for the trace: the four lost ones.
    assert_eq!(r.pcp.zonealloc_frees, 4);
    assert_eq!(
        r.end.nr_free_pages + r.end.nr_pcp_pages + r.end.live_pages + r.end.pool_pages,
        r.managed_pages
    );
}

#[test]
fn cold_replay_skips_pretrace_frees_and_warm_replays_them() {
    let file = data("cargo-build-first2000.perf.txt");
    let cold = replay::run(
        &file,
        &ReplayOptions {
            warm: false,
            ..small()
        },
    )
    .unwrap();
    assert_eq!(cold.counts.frees_pretrace, 49);
    assert_eq!(cold.counts.frees_pretrace_replayed, 0);
    assert_eq!(cold.counts.pretrace_pool_blocks, 0);
    assert_eq!(cold.end.pool_pages, 0);
    let warm = replay::run(&file, &small()).unwrap();
    assert_eq!(warm.counts.frees_pretrace_replayed, 49);
    // The 49 pages went to the per-CPU lists: zonealloc's free count is the trace's.
    assert_eq!(warm.pcp.zonealloc_frees, warm.pcp.kernel_frees);
    assert_eq!(warm.end.pool_pages, 1024 - 49);
}

/// Frees of blocks allocated before the trace, of four orders, on CPU 1.
const PRETRACE: &str = "\
 cc-1 [001] ..... 1.000001: mm_page_free: page=0x1 pfn=0x100010 order=0
 cc-1 [001] ..... 1.000002: mm_page_free: page=0x1 pfn=0x100020 order=2
 cc-1 [001] ..... 1.000003: mm_page_free: page=0x1 pfn=0x100040 order=4
 cc-1 [001] ..... 1.000004: mm_page_free: page=0x1 pfn=0x100200 order=9
";

#[test]
fn a_pretrace_free_lands_where_the_kernel_put_a_block_of_its_order() {
    let path = std::env::temp_dir().join(format!(
        "zonealloc-trace-pretrace-{}.txt",
        std::process::id()
    ));
    std::fs::write(&path, PRETRACE).unwrap();
    // 2 GiB: each CPU's `high` holds an order-9 block without a flush.
    let opts = ReplayOptions {
        layout: ZoneLayout::single(ZoneType::Normal, 1 << 20, 1 << 19),
        ..ReplayOptions::default()
    };
    let r = replay::run_with_state(&path, &opts);
    std::fs::remove_file(&path).unwrap();
    let (r, rp) = r.unwrap();
    let c = &r.counts;
    assert_eq!((c.frees_pretrace, c.frees_pretrace_replayed), (4, 4));
    assert_eq!(c.free_errors, 0);
    assert_eq!(c.pretrace_pool_blocks, 1);
    // 1 + 4 + 16 + 512 pages left the pool, as four aligned blocks.
    assert_eq!(r.end.pool_pages, 1024 - 533);
    // Orders 0, 2 and 9 have per-CPU lists (Linux's `pcp_allowed_order()`), order 4
    // does not: CPU 1's lists gained 1 + 4 + 512 pages, not 533 order-0 pages.
    let stats = rp.allocator().pcp_stats();
    let cpu1 = stats[0].cpus[1];
    let warm1 = r.counts.warm_pcp_pages - stats[0].cpus[0].count;
    assert_eq!(cpu1.count - warm1, 517);
    assert_eq!(r.pcp.zonealloc.refill_blocks, 0);
    assert_eq!(r.pcp.zonealloc.drain_blocks, 0);
    assert_eq!(
        r.end.nr_free_pages + r.end.nr_pcp_pages + r.end.live_pages + r.end.pool_pages,
        r.managed_pages
    );
}

#[test]
fn the_traced_machine_starts_warm() {
    // The built-in machine: 3,978 and 3,539 pages on the Normal zone's lists.
    let r = replay::run(
        &data("cargo-build-lines279001-281000.perf.txt"),
        &ReplayOptions::default(),
    )
    .unwrap();
    let c = &r.counts;
    assert!(
        c.warm_pcp_pages > 0 && c.warm_pcp_pages <= 3978 + 3539,
        "{c:?}"
    );
    // The report counts what the trace did, not the warm start.
    assert!(r.pcp.zonealloc.refill_blocks < 3978 + 3539);
    assert_eq!(
        r.end.nr_free_pages + r.end.nr_pcp_pages + r.end.live_pages + r.end.pool_pages,
        r.managed_pages
    );
}

#[test]
fn warm_state_reads_each_list_from_the_first_refill() {
    use zonealloc_trace::event::{Event, Record};
    use zonealloc_trace::replay::warm_state;
    let rec = |cpu: u32, event| Record {
        line: 0,
        cpu,
        time_ns: 0,
        event,
    };
    let alloc = |order| Event::Alloc {
        pfn: Some(1),
        order,
        gfp: zonealloc::Gfp::HIGHUSER_MOVABLE,
        migratetype: Some(zonealloc::Migratetype::Movable),
    };
    let refill = |order| Event::AllocZoneLocked {
        pfn: 1,
        order,
        migratetype: Some(zonealloc::Migratetype::Movable),
        percpu_refill: true,
    };
    let mut first = Vec::new();
    // CPU 0: 5 order-0 allocations, one free, then a refill. The list fell 5 below
    // its start before the free, so it held at least 5 (a refill finding it one
    // above that means an event is missing from the trace: the deeper point
    // counts).
    first.extend((0..5).map(|_| rec(0, alloc(0))));
    first.push(rec(0, Event::Free { pfn: 9, order: 0 }));
    first.push(rec(0, refill(0)));
    first.extend((0..3).map(|_| rec(0, alloc(0))));
    // CPU 0: 2 order-1 allocations, never refilled: at least 2 blocks.
    first.extend((0..2).map(|_| rec(0, alloc(1))));
    // CPU 1: no refill: zoneinfo's whole count is order-0.
    first.push(rec(1, alloc(0)));
    let w = warm_state(&[2000, 700], &[9000, 800], &first, 2, 9);
    assert_eq!(w[0].blocks, [5, 2, 0, 0]);
    // 2,000 - 5 - 2x2 = 1,991 pages left over: three pageblocks (the one type
    // CPU 0 allocated at order 0 was refilled).
    assert_eq!(w[0].pageblock_blocks, 3);
    assert_eq!(w[0].high, 9000);
    assert_eq!(w[1].blocks, [700, 0, 0, 0]);
    assert_eq!(w[1].pageblock_blocks, 0);
    assert_eq!(w[0].by_type[0], [0, 5, 0]);
    assert_eq!(w[0].by_type[1], [0, 2, 0]);
    assert_eq!(w[1].by_type[0], [0, 700, 0]);
    // A deficit larger than the count is cut to it.
    let w = warm_state(&[3], &[0], &first, 1, 9);
    assert_eq!(
        w[0].blocks
            .iter()
            .zip([1u64, 2, 4, 8])
            .map(|(b, p)| b * p)
            .sum::<u64>(),
        3
    );
}

#[test]
fn warm_state_keeps_each_type_s_order_0_list_apart() {
    use zonealloc::Migratetype;
    use zonealloc_trace::event::{Event, Record};
    use zonealloc_trace::replay::warm_state;
    let rec = |event| Record {
        line: 0,
        cpu: 0,
        time_ns: 0,
        event,
    };
    let alloc = |pfn, mt| Event::Alloc {
        pfn: Some(pfn),
        order: 0,
        gfp: zonealloc::Gfp::KERNEL,
        migratetype: Some(mt),
    };
    let refill = |mt| Event::AllocZoneLocked {
        pfn: 1,
        order: 0,
        migratetype: Some(mt),
        percpu_refill: true,
    };
    let mut first = Vec::new();
    // Movable: 10 allocations, then a refill: 10 pages at the start.
    first.extend((0..10).map(|i| rec(alloc(0x10000 + i, Migratetype::Movable))));
    first.push(rec(refill(Migratetype::Movable)));
    // Unmovable (pageblock 0x20000 >> 9): 6 allocations, 2 frees of pages of that
    // pageblock (its list), 3 allocations, then a refill: the list went 6 below its
    // start before the frees, 4 after them, 7 at the refill: 7 pages.
    first.extend((0..4).map(|i| rec(alloc(0x20000 + i, Migratetype::Unmovable))));
    first.extend((0..2).map(|i| rec(alloc(0x20010 + i, Migratetype::Unmovable))));
    first.extend((0..2).map(|i| {
        rec(Event::Free {
            pfn: 0x20000 + i,
            order: 0,
        })
    }));
    first.extend((0..3).map(|i| rec(alloc(0x20020 + i, Migratetype::Unmovable))));
    first.push(rec(refill(Migratetype::Unmovable)));
    // Reclaimable: 5 allocations and no refill: at least 5, and it takes what
    // zoneinfo's count leaves over, not the pageblock-order list.
    first.extend((0..5).map(|i| rec(alloc(0x30000 + i, Migratetype::Reclaimable))));
    let w = warm_state(&[1000], &[4000], &first, 1, 9);
    assert_eq!(w[0].by_type[0], [7, 10, 1000 - 17]);
    assert_eq!(w[0].blocks, [1000, 0, 0, 0]);
    assert_eq!(w[0].pageblock_blocks, 0);
    // A refill that finds the list at a balance above its deepest point (perf lost
    // an event, or a free went to another list): the list held at least the
    // deepest deficit.
    let mut odd = vec![rec(alloc(0x40000, Migratetype::Movable)); 8];
    odd.extend((0..5).map(|i| {
        rec(Event::Free {
            pfn: 0x40000 + i,
            order: 0,
        })
    }));
    odd.push(rec(refill(Migratetype::Movable)));
    let w = warm_state(&[8], &[4000], &odd, 1, 9);
    assert_eq!(w[0].by_type[0], [0, 8, 0]);
}

#[test]
fn warm_start_puts_each_type_s_pages_on_its_own_list() {
    use zonealloc::{Config, Migratetype, MIGRATE_TYPES};
    use zonealloc_trace::replay::{Replayer, WarmCpu};
    let warm = WarmCpu {
        blocks: [1150, 0, 3, 0],
        by_type: [[100, 1000, 50], [0; 3], [3, 0, 0], [0; 3]],
        pageblock_blocks: 0,
        high: 0,
    };
    // The mix says every allocation was unmovable: the per-type counts, where the
    // warm state has them, win over it for every type.
    let mut mix = [0u64; MIGRATE_TYPES];
    mix[Migratetype::Unmovable.idx()] = 1;
    let mut config = Config::with_bytes(256 << 20);
    config.nr_cpus = 1;
    let mut rp = Replayer::new(config, 0).unwrap();
    // And three unmovable order-2 blocks.
    assert_eq!(rp.warm_start(&[warm], &mix), 1150 + 3 * 4);
}

/// CPU 0 allocates 3,000 pages and frees them in a burst (its list grows far
/// above its minimum `high`), then is idle for five seconds of trace time; CPU 1
/// records one kernel drain.
fn burst_then_idle() -> String {
    let mut t = String::new();
    for i in 0..3000u64 {
        t += &format!(
            " cc-1 [000] d..1. 1.{:06}: mm_page_alloc: page=0x1 pfn={:#x} order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE\n",
            i,
            0x10000 + i
        );
    }
    for i in 0..3000u64 {
        t += &format!(
            " cc-1 [000] d..1. 1.{:06}: mm_page_free: page=0x1 pfn={:#x} order=0\n",
            3000 + i,
            0x10000 + i
        );
    }
    t += " cc-1 [001] d..1. 1.100000: mm_page_pcpu_drain: page=0x1 pfn=0x30000 order=0 migratetype=1\n";
    t += " cc-1 [001] d..1. 2.050000: mm_page_free_batched: page=0x1 pfn=0x30001 order=0\n";
    t += " cc-1 [000] d..1. 6.000000: mm_page_alloc: page=0x1 pfn=0x20000 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE\n";
    t
}

#[test]
fn an_idle_cpu_s_list_decays_at_whole_seconds_of_trace_time() {
    let path =
        std::env::temp_dir().join(format!("zonealloc-trace-decay-{}.txt", std::process::id()));
    std::fs::write(&path, burst_then_idle()).unwrap();
    let run = |decay| replay::run(&path, &ReplayOptions { decay, ..small() });
    let (on, off) = (run(true), run(false));
    std::fs::remove_file(&path).unwrap();
    let (on, off) = (on.unwrap(), off.unwrap());
    // The worker runs at whole seconds of trace time, when the CPU next runs: CPU
    // 0 (records at 1.0 s, then 6.0 s) decays once, at its record of 6.0 s; CPU 1
    // (1.1 s, 2.05 s) once, at 2.05 s, not a second after its first record.
    assert_eq!(on.counts.decays, 2);
    assert_eq!(off.counts.decays, 0);
    let drained = |r: &replay::ReplayReport| r.pcp.zonealloc_drain_blocks_by_cpu[0];
    assert!(
        drained(&on) > drained(&off),
        "the decay flushed part of CPU 0's list: {} against {}",
        drained(&on),
        drained(&off)
    );
    // Per CPU, both sides; the raw ratio is drains over drains.
    assert_eq!(on.pcp.kernel_drain_blocks_by_cpu, vec![0, 1]);
    assert_eq!(
        on.pcp.zonealloc_drain_blocks_by_cpu.iter().sum::<u64>(),
        on.pcp.zonealloc.drain_blocks
    );
    assert_eq!(
        on.pcp.drain_ratio_raw,
        Some(on.pcp.zonealloc.drain_blocks as f64)
    );
    let text = on.to_string();
    assert!(text.contains("drain blocks, raw:"), "{text}");
    assert!(text.contains("    CPU 1 "), "{text}");
}
