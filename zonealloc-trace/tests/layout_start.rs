//! The warm start from a kernel's own layout, end to end, on a small machine built
//! here: a capture directory (zoneinfo, the page layout, buddyinfo and pagetypeinfo
//! at the start, the snapshots) and a trace of a few events whose effect on the
//! free lists is worked out by hand.
//!
//! The machine: one Normal zone of 4 sections (128 MiB each) from frame 65,536, of
//! which the first section is initialised; 2 CPUs.
//! * pageblock 0 (65,536..66,048): slab pages, and free frames 65,544..65,547 (an
//!   order-2 block);
//! * pageblocks 1 and 3: user memory, but for frames 67,072..67,076 blank (on
//!   CPU 0's per-CPU list); pageblock 2 free (an order-9 block);
//! * pageblocks 4..=61: free, 29 order-10 blocks from 67,584; 62 and 63 user
//!   memory;
//! * the next three sections: zeros, not initialised.
//!
//! The trace, after the layout's end (time 10.0 s):
//! 1. CPU 0 allocates frame 66,560 (from its list: a page the trace tells);
//! 2. CPU 0 frees frame 66,100 (user memory before the trace: an exact pre-trace
//!    free, onto CPU 0's list);
//! 3. CPU 1 frees an order-10 block at 98,304, never initialised: the kernel's
//!    deferred initialisation, which brings it online;
//! 4. at 11.0 s the snapshot; at 12.0 s the end.

use std::fmt::Write as _;
use std::path::PathBuf;

use zonealloc::ZoneType;
use zonealloc_trace::layout::ZoneLayout;
use zonealloc_trace::replay::{self, ReplayOptions, StartFiles};

const SECTION: u64 = 32768;
const START: u64 = 2 * SECTION;

fn zoneinfo() -> String {
    format!(
        "Node 0, zone   Normal\n  pages free     30000\n        min      256\n        low      320\n        high     384\n\
         spanned  {}\n        present  {}\n        managed  {}\n  pagesets\n    cpu: 0\n              count:    4\n\
         high:     600\n    cpu: 1\n              count:    0\n              high:     600\n  start_pfn:           {START}\n",
        4 * SECTION,
        4 * SECTION,
        SECTION
    )
}

/// The layout file: runs of masks (1 BUDDY, 10 SLAB, 40 LRU, 0 blank).
fn layout_text() -> String {
    let mut runs: Vec<(u64, u16)> = vec![
        (8, 0x10),
        (4, 0x1),
        (500, 0x10),
        // Pageblock 1: user memory, 66,100 among it.
        (512, 0x40),
        // Pageblock 2: free.
        (512, 0x1),
        // Pageblock 3: four blank frames, then user memory.
        (4, 0),
        (508, 0x40),
        // Pageblocks 4..=61: free (order-10 blocks from 67,584, 1024-aligned).
        (58 * 512, 0x1),
        // Pageblocks 62, 63: user memory.
        (1024, 0x40),
    ];
    // A section and a bit of zeros past the initialised part.
    runs.push((SECTION + 10, 0));
    let total: u64 = runs.iter().map(|r| r.0).sum();
    let mut s = String::from("# test layout\nbegin_time 9.000000\nend_time 10.000000\n");
    writeln!(s, "zone Normal {START} {total}").unwrap();
    for (n, m) in runs {
        writeln!(s, "{n} {m:x}").unwrap();
    }
    s
}

/// buddyinfo: order 2: 1, order 9: 1, order 10: 29.
fn buddyinfo(o2: u64, o9: u64, o10: u64) -> String {
    format!(
        "Node 0, zone   Normal      0      0 {o2:>6}      0      0      0      0      0      0 {o9:>6} {o10:>6} \n"
    )
}

fn pagetypeinfo(u2: u64, m9: u64, m10: u64, blocks_m: u64) -> String {
    let row = |t: &str, v: [u64; 11]| {
        let mut s = format!("Node    0, zone   Normal, type {t:>12} ");
        for x in v {
            write!(s, "{x:>6} ").unwrap();
        }
        s + "\n"
    };
    let mut s = String::from(
        "Page block order: 9\nPages per block:  512\n\n\
         Free pages count per migrate type at order       0      1      2      3      4      5      6      7      8      9     10 \n",
    );
    s += &row("Unmovable", [0, 0, u2, 0, 0, 0, 0, 0, 0, 0, 0]);
    s += &row("Movable", [0, 0, 0, 0, 0, 0, 0, 0, 0, m9, m10]);
    s += &row("Reclaimable", [0; 11]);
    s += &row("HighAtomic", [0; 11]);
    s += "\nNumber of blocks type     Unmovable      Movable  Reclaimable   HighAtomic \n";
    writeln!(
        s,
        "Node 0, zone   Normal {:>12} {:>12} {:>12} {:>12} ",
        1, blocks_m, 0, 0
    )
    .unwrap();
    s
}

fn line(cpu: u32, t: &str, what: &str) -> String {
    format!("          python3  4242 [{cpu:03}] {t}: {what}\n")
}

fn trace() -> String {
    let mut s = String::new();
    // Before the layout's end: not replayed.
    s += &line(
        0,
        "9.500000",
        &format!(
            "kmem:mm_page_alloc: page=0x{0:x} pfn=0x{0:x} order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE",
            START + 2000
        ),
    );
    s += &line(
        0,
        "10.100000",
        &format!(
            "kmem:mm_page_alloc: page=0x{0:x} pfn=0x{0:x} order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE",
            START + 1536
        ),
    );
    s += &line(
        0,
        "10.200000",
        &format!(
            "kmem:mm_page_free: page=0x{0:x} pfn=0x{0:x} order=0",
            66_100
        ),
    );
    s += &line(
        1,
        "10.300000",
        &format!(
            "kmem:mm_page_free: page=0x{0:x} pfn=0x{0:x} order=10",
            3 * SECTION
        ),
    );
    s
}

fn capture_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "zonealloc-layout-start-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let w = |f: &str, s: String| std::fs::write(dir.join(f), s).unwrap();
    w("zoneinfo.txt", zoneinfo());
    w("layout.txt", layout_text());
    w("buddyinfo.txt", buddyinfo(1, 1, 29));
    w("pagetypeinfo.txt", pagetypeinfo(1, 1, 29, 63));
    // At 11 s: the order-0 free at 66,100 sits on CPU 0's list (not in buddyinfo);
    // the onlined order-10 block is free, its two pageblocks counted. At the end
    // the same.
    let snap = |n: u32, t: &str| {
        format!(
            "=== snapshot {n} time={t}\n{}{}",
            buddyinfo(1, 1, 30),
            pagetypeinfo(1, 1, 30, 65)
        )
    };
    let mut snaps = String::from("# test\n");
    snaps += &snap(1, "11.000000");
    snaps += &format!(
        "=== end time=12.000000\n{}{}=== zoneinfo\n{}=== vmstat\nnr_free_pages 1\n",
        buddyinfo(1, 1, 30),
        pagetypeinfo(1, 1, 30, 65),
        zoneinfo()
    );
    w("snapshots.txt", snaps);
    w("test.perf.txt", trace());
    dir
}

#[test]
fn a_replay_from_the_kernel_s_layout_ends_with_its_shape() {
    let dir = capture_dir("shape");
    let start = StartFiles::in_dir(&dir)
        .unwrap()
        .expect("a layout is there");
    assert_eq!(start.page.end_ns, Some(10_000_000_000));
    let opts = ReplayOptions {
        layout: ZoneLayout::from_zoneinfo(&dir.join("zoneinfo.txt")).unwrap(),
        start: Some(start),
        ..ReplayOptions::default()
    };
    let r = replay::run(&dir.join("test.perf.txt"), &opts).unwrap();
    let st = r.start.as_ref().expect("a warm start from the layout");
    // Three sections offline; the initialised one less its 29 * 1024 + 512 + 4
    // free frames allocated for the kernel.
    assert_eq!(st.offline_frames, 3 * SECTION);
    assert_eq!(st.allocated_frames, SECTION);
    assert_eq!(st.free_blocks, 31);
    assert_eq!(st.free_pages, 4 + 512 + 29 * 1024);
    assert_eq!(st.free_errors, 0);
    // Pageblock 0 is unmovable (its slab pages and pagetypeinfo's count).
    assert_eq!(st.inferred_types[0] + st.named_types[0], 1);
    assert_eq!(st.retype_failures, 0);
    // CPU 0's list: the four blank frames zoneinfo counted (one the trace uses,
    // three fillers).
    assert_eq!(st.pcp_pages, vec![4, 0]);
    let c = &r.counts;
    assert_eq!(c.before_start, 1);
    assert_eq!(c.pretrace_frees_exact, 1);
    assert_eq!(c.onlined_pages, 1024);
    assert_eq!(c.pretrace_frees_partial, 0);
    let sh = r.shape.as_ref().expect("snapshots: a comparison");
    let start = sh.start.as_ref().unwrap();
    assert_eq!(
        start.zonealloc.zones[0].free, start.kernel.zones[0].free,
        "zonealloc's free lists are the kernel's at the start"
    );
    assert_eq!(sh.seconds.len(), 1);
    let end = sh.end.as_ref().unwrap();
    assert_eq!(end.kernel.zones[0].free[10], 30);
    assert_eq!(end.zonealloc.zones[0].free, end.kernel.zones[0].free);
    assert!(sh.acceptance.end_ok() && sh.acceptance.seconds_ok());
    assert!(sh.acceptance.blocks_ok(), "{:?}", sh.acceptance.blocks);
    // The rebuilt kernel state agrees too.
    assert_eq!(
        sh.rebuilt.last().unwrap().zones[0].free,
        end.kernel.zones[0].free
    );
    let text = r.to_string();
    assert!(
        text.contains("warm start from the kernel's layout"),
        "{text}"
    );
    assert!(
        text.contains("verdict: end ok, over time ok, pageblocks ok"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_shape_that_strays_is_reported() {
    // The same capture, but the kernel's snapshots claim a block zonealloc cannot
    // have: 42 order-10 blocks.
    let dir = capture_dir("stray");
    let mut snaps = String::from("=== snapshot 1 time=11.000000\n");
    snaps += &buddyinfo(1, 1, 42);
    snaps += &format!("=== end time=12.000000\n{}", buddyinfo(1, 1, 42));
    std::fs::write(dir.join("snapshots.txt"), snaps).unwrap();
    let opts = ReplayOptions {
        layout: ZoneLayout::from_zoneinfo(&dir.join("zoneinfo.txt")).unwrap(),
        start: StartFiles::in_dir(&dir).unwrap(),
        ..ReplayOptions::default()
    };
    let r = replay::run(&dir.join("test.perf.txt"), &opts).unwrap();
    let a = &r.shape.as_ref().unwrap().acceptance;
    let o10 = a.orders.iter().find(|o| o.order == 10).unwrap();
    assert_eq!((o10.kernel, o10.zonealloc, o10.end_ok), (42, 30, false));
    assert_eq!((o10.seconds_ok, o10.seconds_counted), (0, 1));
    assert!(!a.end_ok() && !a.seconds_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_directory_without_a_layout_has_no_start_files() {
    let dir = std::env::temp_dir().join(format!("zonealloc-no-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert!(StartFiles::in_dir(&dir).unwrap().is_none());
    std::fs::write(dir.join("layout.txt"), "zone Normal 0 4\n3 1\n").unwrap();
    let e = StartFiles::in_dir(&dir).unwrap_err();
    assert!(e.contains("layout.txt"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = ZoneType::Normal;
}
