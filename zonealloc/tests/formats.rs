//! Golden tests of the `/proc` text formats against files read on a real Linux 6.18 machine.
//!
//! `tests/golden/` holds that machine's `/proc/buddyinfo`, `/proc/pagetypeinfo` and
//! `/proc/zoneinfo` (copied from the shared traces, x86-64, 2 CPUs, 4 KiB pages). The
//! tests build an allocator laid out like that machine and compare:
//!
//! * **layout**, line by line, through `shape()`: same lines, same column widths, same
//!   trailing spaces, same headers byte for byte;
//! * **values the layout alone determines**: pageblock counts, `spanned`, `present`,
//!   `start_pfn`, the free blocks right after start-up, and the watermarks and
//!   `protection` computed here, independently, from Linux's formulas (reference §2.5);
//! * the **fragmentation indices** against values worked out by hand (reference §8.5).
//!
//! Two layouts are used. `traced()` has the machine's zones, holes and present frames
//! (DMA 3998 present, DMA32 782336), with the Normal zone cut to 512 Ki frames so the
//! frame table stays small (25 MB, built once). `managed()` has as many frames as the
//! machine *manages* (DMA 3840, DMA32 772917, Normal 524288) and the machine's
//! `min_free_kbytes`, so its watermark and protection lines must equal the real ones.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use zonealloc::{
    fragmentation_index, unusable_free_index, Config, FragmentationIndex, NodeConfig, Pfn,
    ZoneAllocator, ZoneConfig, ZoneId, ZoneType,
};

const REAL_BUDDYINFO: &str = include_str!("golden/linux-6.18-buddyinfo.txt");
const REAL_PAGETYPEINFO: &str = include_str!("golden/linux-6.18-pagetypeinfo.txt");
const REAL_ZONEINFO: &str = include_str!("golden/linux-6.18-zoneinfo.txt");

/// Frames of the Normal zone in both layouts: the real machine's managed Normal pages.
/// (Its Normal zone spans 5505024 frames: 84 MiB of frame table, too slow for a test.)
const NORMAL_FRAMES: u64 = 524_288;

/// The real machine's `min_free_kbytes`. Not `calculate_min_free_kbytes()` but THP's
/// `set_recommended_min_free_kbytes()`, which raised it: 3 populated zones up to Normal,
/// `pageblock_nr_pages * nr_zones * (2 + MIGRATE_PCPTYPES^2)` = 512 * 3 * 11 pages.
const REAL_MIN_FREE_KBYTES: u64 = 512 * 3 * 11 * 4;

// -----------------------------------------------------------------------------
// Layouts
// -----------------------------------------------------------------------------

/// Node 0 as on the traced machine: the BIOS hole in DMA (pfns 159..256), the PCI hole
/// at the top of DMA32 (3 GiB..4 GiB), a smaller Normal zone, an empty Movable zone.
fn traced_config() -> Config {
    let zones = vec![
        ZoneConfig::new(ZoneType::Dma, Pfn(1), 4095).with_hole(Pfn(159), 97),
        ZoneConfig::new(ZoneType::Dma32, Pfn(4096), 1_044_480).with_hole(Pfn(786_432), 262_144),
        ZoneConfig::new(ZoneType::Normal, Pfn(1_048_576), NORMAL_FRAMES),
        ZoneConfig::new(ZoneType::Movable, Pfn(0), 0),
    ];
    Config {
        nodes: vec![NodeConfig { zones }],
        ..Config::default()
    }
}

/// As `traced_config()` but with present frames equal to the machine's managed pages
/// (more holes), its `min_free_kbytes` and its 2 CPUs.
fn managed_config() -> Config {
    let zones = vec![
        // 4095 - 3840 = 255 frames of holes: everything below pfn 256.
        ZoneConfig::new(ZoneType::Dma, Pfn(1), 4095).with_hole(Pfn(1), 255),
        // 1044480 - 772917 = 271563 frames of holes, ending at the top of the zone.
        ZoneConfig::new(ZoneType::Dma32, Pfn(4096), 1_044_480)
            .with_hole(Pfn(1_048_576 - 271_563), 271_563),
        ZoneConfig::new(ZoneType::Normal, Pfn(1_048_576), NORMAL_FRAMES),
        ZoneConfig::new(ZoneType::Movable, Pfn(0), 0),
    ];
    Config {
        nodes: vec![NodeConfig { zones }],
        min_free_kbytes: Some(REAL_MIN_FREE_KBYTES),
        nr_cpus: 2,
        ..Config::default()
    }
}

fn traced() -> &'static ZoneAllocator {
    static ZA: OnceLock<ZoneAllocator> = OnceLock::new();
    ZA.get_or_init(|| ZoneAllocator::new(traced_config()).expect("traced layout"))
}

fn managed() -> &'static ZoneAllocator {
    static ZA: OnceLock<ZoneAllocator> = OnceLock::new();
    ZA.get_or_init(|| ZoneAllocator::new(managed_config()).expect("managed layout"))
}

// -----------------------------------------------------------------------------
// Layout comparison
// -----------------------------------------------------------------------------

/// A line's layout with its numbers abstracted away.
///
/// A number followed by a space ends a fixed-width column (`"%6lu "`, `"%12lu "`): it
/// becomes `#` over the whole column, its left padding included, so `"     1"` and
/// `"   752"` have the same shape but `"  752"` does not. Any other number is free-width
/// (`"%lu"` after literal spaces, list items): it becomes `N` and its padding is kept.
/// Digits inside a word (`DMA32`) are text.
fn shape(line: &str) -> String {
    let b = line.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let starts_number = b[i].is_ascii_digit()
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'));
        if !starts_number {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        let mut pad = 0;
        while out.last() == Some(&b' ') {
            out.pop();
            pad += 1;
        }
        if b.get(j) == Some(&b' ') {
            out.resize(out.len() + pad + j - i, b'#');
        } else {
            out.resize(out.len() + pad, b' ');
            out.push(b'N');
        }
        i = j;
    }
    String::from_utf8(out).unwrap()
}

/// Splits into lines, keeping a final line's missing newline visible.
#[track_caller]
fn lines(text: &str) -> Vec<&str> {
    assert!(text.ends_with('\n'), "text does not end with a newline");
    text[..text.len() - 1].split('\n').collect()
}

/// Asserts both texts have the same lines up to numbers (see `shape`).
#[track_caller]
fn assert_same_layout(ours: &str, real: &str) {
    let (o, r) = (lines(ours), lines(real));
    assert_eq!(
        o.len(),
        r.len(),
        "line count differs\n--- ours\n{ours}--- real\n{real}"
    );
    for (k, (a, b)) in o.iter().zip(&r).enumerate() {
        assert_eq!(
            shape(a),
            shape(b),
            "line {} differs in layout\nours: {a:?}\nreal: {b:?}",
            k + 1
        );
    }
}

#[test]
fn shape_keeps_column_widths_and_free_width_padding() {
    assert_eq!(
        shape("zone      DMA      1    752 "),
        "zone      DMA############## "
    );
    assert_ne!(shape("x      1 "), shape("x     12345 "));
    assert_eq!(
        shape("  pages free     3840"),
        shape("  pages free     20247")
    );
    assert_ne!(
        shape("  pages free     3840"),
        shape("  pages free    3840")
    );
    assert_eq!(
        shape("protection: (0, 3019, 5067)"),
        "protection: (N, N, N)"
    );
    assert_eq!(shape("Node 0, zone    DMA32"), "Node N, zone    DMA32");
}

// -----------------------------------------------------------------------------
// /proc/buddyinfo
// -----------------------------------------------------------------------------

/// Free blocks per order right after start-up: each run of present frames is freed in
/// the largest naturally aligned blocks, at most order 10.
///
/// DMA: `[1, 159)` gives 1, 2, 4, ..., 64 frames (orders 0..=6), then 31 frames from
/// 128 as 16 + 8 + 4 + 2 + 1; `[256, 4096)` gives orders 8, 9, 10, 10, 10.
/// DMA32: `[4096, 786432)` is 764 blocks of order 10. Normal: 512 of order 10.
const BOOT_DMA: [u64; 11] = [2, 2, 2, 2, 2, 1, 1, 0, 1, 1, 3];
const BOOT_DMA32: [u64; 11] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 764];
const BOOT_NORMAL: [u64; 11] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512];

#[test]
fn buddyinfo_layout_matches_linux() {
    let ours = traced().buddyinfo().to_string();
    assert_same_layout(&ours, REAL_BUDDYINFO);
}

#[test]
fn buddyinfo_after_boot_is_the_greedy_decomposition() {
    let bi = traced().buddyinfo();
    let id = |t| ZoneId {
        node: 0,
        zone_type: t,
    };
    let expect = vec![
        (id(ZoneType::Dma), BOOT_DMA.to_vec()),
        (id(ZoneType::Dma32), BOOT_DMA32.to_vec()),
        (id(ZoneType::Normal), BOOT_NORMAL.to_vec()),
    ];
    assert_eq!(bi.zones, expect, "empty Movable must not be listed");
    assert_eq!(
        BOOT_DMA
            .iter()
            .enumerate()
            .map(|(o, n)| n << o)
            .sum::<u64>(),
        3998
    );
    // The real DMA zone still has its top blocks (orders 8, 9, 10) as at start-up.
    let real_dma: Vec<u64> = lines(REAL_BUDDYINFO)[0]
        .split_whitespace()
        .skip(4)
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(real_dma[8..], BOOT_DMA[8..]);
}

// -----------------------------------------------------------------------------
// /proc/pagetypeinfo
// -----------------------------------------------------------------------------

#[test]
fn pagetypeinfo_layout_matches_linux() {
    let ours = traced().pagetypeinfo().to_string();
    assert_same_layout(&ours, REAL_PAGETYPEINFO);
}

#[test]
fn pagetypeinfo_headers_are_byte_exact() {
    let ours = traced().pagetypeinfo().to_string();
    let (o, r) = (lines(&ours), lines(REAL_PAGETYPEINFO));
    assert_eq!(o[0], "Page block order: 9");
    assert_eq!(o[1], "Pages per block:  512");
    assert_eq!(o[2], "");
    for k in 0..4 {
        assert_eq!(o[k], r[k], "header line {}", k + 1);
    }
    let blocks_hdr = |ls: &[&str]| {
        let k = ls
            .iter()
            .position(|l| l.starts_with("Number of blocks type"))
            .expect("blocks header");
        (k, ls[k].to_string())
    };
    let (ko, ho) = blocks_hdr(&o);
    let (kr, hr) = blocks_hdr(&r);
    assert_eq!((ko, &ho), (kr, &hr));
    assert_eq!(
        ho,
        "Number of blocks type     Unmovable      Movable  Reclaimable   HighAtomic      Isolate "
    );
    assert_eq!(o[ko - 1], "", "blank line before the blocks section");
}

/// The "Number of blocks type" rows as `zone name -> counts`.
fn block_rows(text: &str) -> BTreeMap<String, Vec<u64>> {
    let ls = lines(text);
    let k = ls
        .iter()
        .position(|l| l.starts_with("Number of blocks type"))
        .unwrap();
    ls[k + 1..]
        .iter()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (
                w[3].to_string(),
                w[4..].iter().map(|s| s.parse().unwrap()).collect(),
            )
        })
        .collect()
}

#[test]
fn pageblock_counts_match_linux_where_the_layout_decides() {
    let za = traced();
    let ours = block_rows(&za.pagetypeinfo().to_string());
    let real = block_rows(REAL_PAGETYPEINFO);
    // Right after start-up every pageblock is Movable.
    assert_eq!(ours["DMA"], [0, 8, 0, 0, 0]);
    assert_eq!(ours["DMA32"], [0, 1528, 0, 0, 0]);
    assert_eq!(ours["Normal"], [0, NORMAL_FRAMES / 512, 0, 0, 0]);
    // DMA: 8 blocks in all (Linux has since taken one for Unmovable). DMA32: the PCI
    // hole has no memory sections, so only 782336 / 512 blocks count, all Movable.
    let total = |v: &Vec<u64>| v.iter().sum::<u64>();
    assert_eq!(total(&ours["DMA"]), total(&real["DMA"]));
    assert_eq!(ours["DMA32"], real["DMA32"]);
    // The walked version (Linux's way) agrees with the counters.
    assert_eq!(za.pagetypeinfo(), za.pagetypeinfo_walked());
}

#[test]
fn pagetypeinfo_free_counts_after_boot_are_movable() {
    let pti = traced().pagetypeinfo();
    for (z, boot) in pti.zones.iter().zip([BOOT_DMA, BOOT_DMA32, BOOT_NORMAL]) {
        for (o, row) in z.nr_free.iter().enumerate() {
            assert_eq!(row, &[0, boot[o], 0, 0, 0, 0], "{:?} order {o}", z.id);
        }
    }
}

// -----------------------------------------------------------------------------
// /proc/zoneinfo
// -----------------------------------------------------------------------------

/// `int_sqrt()`.
fn int_sqrt(n: u64) -> u64 {
    let mut r = (n as f64).sqrt() as u64;
    while r * r > n {
        r -= 1;
    }
    while (r + 1) * (r + 1) <= n {
        r += 1;
    }
    r
}

/// Linux's `__setup_per_zone_wmarks()` and `setup_per_zone_lowmem_reserve()` for one
/// node whose zones have `managed` pages (indexed DMA, DMA32, Normal, HighMem, Movable),
/// written from reference §2.5: `([min, low, high, promo], protection)` per zone.
fn linux_watermarks(managed: [u64; 5], min_free_kbytes: Option<u64>) -> Vec<([u64; 4], [u64; 5])> {
    const RATIO: [u64; 5] = [256, 256, 32, 0, 0];
    let lowmem: u64 = managed[..3].iter().sum();
    // calculate_min_free_kbytes() at boot: nr_free_buffer_pages() is every managed
    // lowmem page, as no watermark is set yet.
    let mfk = min_free_kbytes.unwrap_or_else(|| int_sqrt(lowmem * 4 * 16).clamp(128, 262_144));
    let pages_min = mfk / 4;
    (0..5)
        .map(|i| {
            let m = managed[i];
            let tmp = pages_min * m / lowmem;
            let min = if i >= 3 {
                (m / 1024).clamp(32, 128)
            } else {
                tmp
            };
            let gap = (tmp / 4).max(m * 10 / 10_000);
            let wm = [min, min + gap, min + 2 * gap, min + 3 * gap];
            let mut prot = [0; 5];
            for (j, p) in prot.iter_mut().enumerate().skip(i + 1) {
                if RATIO[i] != 0 && m != 0 {
                    *p = managed[i + 1..=j].iter().sum::<u64>() / RATIO[i];
                }
            }
            (wm, prot)
        })
        .collect()
}

/// One zone of a zoneinfo text: its name and `key -> value` for every line of the form
/// `key value` or `key: value` (later keys of the same name, e.g. per-CPU ones, are
/// dropped).
fn zoneinfo_zones(text: &str) -> Vec<(String, BTreeMap<String, String>)> {
    let mut zones: Vec<(String, BTreeMap<String, String>)> = Vec::new();
    for l in lines(text) {
        if let Some(rest) = l.strip_prefix("Node 0, zone ") {
            zones.push((rest.trim().to_string(), BTreeMap::new()));
            continue;
        }
        let t = l.trim();
        let (k, v) = match t.split_once(": ") {
            Some((k, v)) => (k.trim(), v.trim()),
            None => match t.rsplit_once(' ') {
                Some((k, v)) => (k.trim(), v.trim()),
                None => continue,
            },
        };
        let z = &mut zones.last_mut().unwrap().1;
        z.entry(k.to_string()).or_insert_with(|| v.to_string());
    }
    zones
}

#[test]
fn zoneinfo_layout_is_linux_minus_what_zonealloc_omits() {
    let ours = traced().zoneinfo().to_string();
    // What zonealloc does not print, by design: the per-node statistics block, the
    // LRU / mlock / zsmalloc / NUMA zone counters, and ZONE_DEVICE (which the buddy
    // allocator does not manage). Per-CPU pagesets are compared on their own.
    let omitted = |l: &str, in_node_stats: bool, in_device: bool| {
        let k = l.trim_start();
        in_node_stats
            || in_device
            || k.starts_with("per-node stats")
            || k.starts_with("nr_zone_")
            || k.starts_with("nr_mlock ")
            || k.starts_with("nr_zspages ")
            || k.starts_with("numa_")
    };
    let is_pageset = |l: &str| {
        let k = l.trim_start();
        [
            "cpu:",
            "count:",
            "high:",
            "batch:",
            "high_min:",
            "high_max:",
            "vm stats",
        ]
        .iter()
        .any(|p| k.starts_with(p))
    };
    let mut expect = Vec::new();
    let mut real_pageset = Vec::new();
    let (mut in_node_stats, mut in_device) = (false, false);
    for l in lines(REAL_ZONEINFO) {
        if l.starts_with("Node ") {
            in_device = l.ends_with("Device");
        }
        if l.trim_start().starts_with("per-node stats") {
            in_node_stats = true;
        }
        if l.starts_with("  pages free") {
            in_node_stats = false;
        }
        if is_pageset(l) {
            real_pageset.push(shape(l));
        } else if !omitted(l, in_node_stats, in_device) {
            expect.push((shape(l), l));
        }
    }
    let ours_lines = lines(&ours);
    let got: Vec<String> = ours_lines
        .iter()
        .filter(|l| !is_pageset(l))
        .map(|l| shape(l))
        .collect();
    for (k, ((e, real_line), g)) in expect.iter().zip(&got).enumerate() {
        assert_eq!(
            g,
            e,
            "zoneinfo line {} (omitted lines skipped) differs in layout; real: {real_line:?}",
            k + 1
        );
    }
    assert_eq!(got.len(), expect.len(), "zoneinfo line count\n{ours}");
    // Every per-CPU entry printed has the real file's seven lines, in its order.
    let ours_pageset: Vec<String> = ours_lines
        .iter()
        .filter(|l| is_pageset(l))
        .map(|l| shape(l))
        .collect();
    assert_eq!(ours_pageset.len() % 7, 0, "per-CPU entries are 7 lines");
    for chunk in ours_pageset.chunks(7) {
        assert_eq!(chunk, &real_pageset[..7]);
    }
    // The zone counters it prints use "%-12s %lu" after six spaces, as Linux does.
    assert!(ours_lines.contains(&"      nr_free_pages 3998"), "{ours}");
    assert!(ours_lines.contains(&"      nr_free_cma  0"), "{ours}");
    assert!(REAL_ZONEINFO.contains("\n      nr_free_pages 3840\n"));
    assert!(REAL_ZONEINFO.contains("\n      nr_free_cma  0\n"));
}

#[test]
fn zoneinfo_geometry_matches_linux() {
    let ours = zoneinfo_zones(&traced().zoneinfo().to_string());
    let real = zoneinfo_zones(REAL_ZONEINFO);
    let names: Vec<&str> = ours.iter().map(|z| z.0.as_str()).collect();
    assert_eq!(names, ["DMA", "DMA32", "Normal", "Movable"]);
    for (o, r) in ours.iter().zip(&real).take(2) {
        assert_eq!(o.0, r.0);
        for key in ["spanned", "present", "start_pfn", "boost", "cma"] {
            assert_eq!(o.1[key], r.1[key], "zone {} {key}", o.0);
        }
    }
    assert_eq!(ours[2].1["start_pfn"], real[2].1["start_pfn"]);
    assert_eq!(ours[2].1["spanned"], NORMAL_FRAMES.to_string());
    // Movable is empty in both: its section stops after "protection".
    assert_eq!(ours[3].1["spanned"], "0");
    assert_eq!(ours[3].1["present"], "0");
    assert!(!ours[3].1.contains_key("start_pfn"));
    // Free pages right after start-up: every present page, and the pages in blocks of
    // pageblock order or more (DMA: 512 + 3 * 1024, which the real DMA zone still has).
    let present = [3998u64, 782_336, NORMAL_FRAMES];
    let blocks = [3584u64, 782_336, NORMAL_FRAMES];
    for (k, z) in ours.iter().take(3).enumerate() {
        assert_eq!(z.1["pages free"], present[k].to_string());
        assert_eq!(z.1["managed"], present[k].to_string(), "managed == present");
        assert_eq!(z.1["nr_free_pages"], present[k].to_string());
        assert_eq!(z.1["nr_free_pages_blocks"], blocks[k].to_string());
    }
    assert_eq!(real[0].1["nr_free_pages_blocks"], "3584");
}

fn wmark_values(z: &BTreeMap<String, String>) -> ([u64; 4], String) {
    let wm = ["min", "low", "high", "promo"].map(|k| z[k].parse().unwrap());
    (wm, z["protection"].clone())
}

fn protection_text(p: [u64; 5]) -> String {
    format!("({}, {}, {}, {}, {})", p[0], p[1], p[2], p[3], p[4])
}

#[test]
fn watermarks_follow_linux_formulas_on_the_traced_layout() {
    let za = traced();
    let managed = [3998, 782_336, NORMAL_FRAMES, 0, 0];
    let expect = linux_watermarks(managed, None);
    let lowmem_kbytes = (3998 + 782_336 + NORMAL_FRAMES) * 4;
    assert_eq!(za.min_free_kbytes(), int_sqrt(lowmem_kbytes * 16));
    let ours = zoneinfo_zones(&za.zoneinfo().to_string());
    let types = [
        ZoneType::Dma,
        ZoneType::Dma32,
        ZoneType::Normal,
        ZoneType::Movable,
    ];
    for (k, t) in types.into_iter().enumerate() {
        let i = t as usize;
        let (wm, prot) = wmark_values(&ours[k].1);
        assert_eq!(wm, expect[i].0, "{t} watermarks");
        assert_eq!(prot, protection_text(expect[i].1), "{t} protection");
        let id = ZoneId {
            node: 0,
            zone_type: t,
        };
        assert_eq!(za.watermarks(id), Some(expect[i].0));
    }
}

/// With the real machine's managed pages and `min_free_kbytes`, the watermark,
/// `managed` and `protection` lines are the real file's, byte for byte.
#[test]
fn watermark_lines_equal_linux_with_the_real_managed_pages() {
    let za = managed();
    assert_eq!(za.min_free_kbytes(), 67_584);
    let ours = za.zoneinfo().to_string();
    let pick = |text: &str| -> Vec<String> {
        lines(text)
            .into_iter()
            .scan(String::new(), |zone, l| {
                if l.starts_with("Node ") {
                    *zone = l.to_string();
                }
                Some((zone.clone(), l))
            })
            .filter(|(zone, l)| {
                !zone.ends_with("Device")
                    && ["min ", "low ", "high ", "promo ", "managed ", "protection:"]
                        .iter()
                        .any(|k| l.trim_start().starts_with(k))
                    && l.starts_with("        ")
            })
            .map(|(zone, l)| format!("{zone} | {l}"))
            .collect()
    };
    let (o, r) = (pick(&ours), pick(REAL_ZONEINFO));
    assert_eq!(o.len(), 4 * 6);
    assert_eq!(o, r);
    // And the independent formulas agree with the real machine too.
    let expect = linux_watermarks([3840, 772_917, 524_288, 0, 0], Some(67_584));
    assert_eq!(expect[0], ([49, 61, 73, 85], [0, 3019, 5067, 5067, 5067]));
    assert_eq!(
        expect[1],
        ([10037, 12546, 15055, 17564], [0, 0, 2048, 2048, 2048])
    );
    assert_eq!(expect[2], ([6808, 8510, 10212, 11914], [0; 5]));
    assert_eq!(expect[4], ([32; 4], [0; 5]));
}

/// With the real machine's managed pages, watermarks and 2 CPUs, each CPU's `batch`,
/// `high_min` and `high_max` (`zone_batchsize()`, `zone_highsize()` from the low
/// watermark and from 1/8 of the zone) are the real file's. `count` and `high` are
/// run-time state and `vm stats threshold` has no equivalent here (exact counters).
#[test]
fn pageset_limits_equal_linux_with_the_real_managed_pages() {
    let ours = managed().zoneinfo().to_string();
    let pick = |text: &str| -> Vec<String> {
        let mut zone = String::new();
        let mut out = Vec::new();
        for l in lines(text) {
            if l.starts_with("Node ") {
                zone = l.to_string();
            }
            let k = l.trim_start();
            if k.starts_with("cpu:")
                || k.starts_with("batch:")
                || k.starts_with("high_min:")
                || k.starts_with("high_max:")
            {
                out.push(format!("{zone} | {l}"));
            }
        }
        out
    };
    let (o, r) = (pick(&ours), pick(REAL_ZONEINFO));
    assert_eq!(r.len(), 3 * 2 * 4);
    assert_eq!(o, r);
}

// -----------------------------------------------------------------------------
// /proc/vmstat
// -----------------------------------------------------------------------------

#[test]
fn vmstat_lines_are_name_space_value_in_kernel_order() {
    let vm = traced().vmstat().to_string();
    // The kernel's order (vmstat_text[]): zone counters, then events.
    const KERNEL_ORDER: [&str; 33] = [
        "nr_free_pages",
        "nr_free_pages_blocks",
        "nr_free_cma",
        "pgalloc_dma",
        "pgalloc_dma32",
        "pgalloc_normal",
        "pgalloc_high",
        "pgalloc_movable",
        "pgalloc_device",
        "allocstall_dma",
        "allocstall_dma32",
        "allocstall_normal",
        "allocstall_high",
        "allocstall_movable",
        "allocstall_device",
        "pgfree",
        "pgsteal_kswapd",
        "pgsteal_direct",
        "pgscan_kswapd",
        "pgscan_direct",
        "slabs_scanned",
        "kswapd_low_wmark_hit_quickly",
        "kswapd_high_wmark_hit_quickly",
        "pageoutrun",
        "pgmigrate_success",
        "pgmigrate_fail",
        "compact_migrate_scanned",
        "compact_free_scanned",
        "compact_isolated",
        "compact_stall",
        "compact_fail",
        "compact_success",
        "compact_daemon_wake",
    ];
    let mut last = 0;
    for l in lines(&vm) {
        let (name, value) = l.split_once(' ').expect("name value");
        assert!(value.bytes().all(|c| c.is_ascii_digit()), "{l:?}");
        let pos = KERNEL_ORDER
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("unknown vmstat key {name}"));
        assert!(pos >= last, "{name} out of order");
        last = pos;
    }
    let free = 3998 + 782_336 + NORMAL_FRAMES;
    assert!(lines(&vm).contains(&format!("nr_free_pages {free}").as_str()));
}

// -----------------------------------------------------------------------------
// Fragmentation indices (reference §8.5)
// -----------------------------------------------------------------------------

/// Free blocks per order: 3 of order 0, 2 of order 2, 1 of order 3.
/// free_pages = 3 + 8 + 8 = 19, free_blocks_total = 6.
const FRAG: [u64; 11] = [3, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0];

#[test]
fn unusable_free_index_by_hand() {
    // suitable(o) = sum over o' >= o of n[o'] << (o' - o);
    // index = (free - (suitable << o)) * 1000 / free.
    assert_eq!(unusable_free_index(&FRAG, 0), 0); // 19 - 19 = 0
    assert_eq!(unusable_free_index(&FRAG, 1), 157); // suitable 4 + 4 = 8: (19 - 16) * 1000 / 19
    assert_eq!(unusable_free_index(&FRAG, 2), 157); // suitable 2 + 2 = 4: (19 - 16) * 1000 / 19
    assert_eq!(unusable_free_index(&FRAG, 3), 578); // suitable 1: 11000 / 19
    assert_eq!(unusable_free_index(&FRAG, 4), 1000); // nothing suitable
    assert_eq!(unusable_free_index(&[0; 11], 0), 1000); // nothing free
    assert_eq!(
        unusable_free_index(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2], 10),
        0
    );
}

#[test]
fn fragmentation_index_by_hand() {
    // A suitable block exists: -1000.
    for o in 0..=3 {
        assert_eq!(fragmentation_index(&FRAG, o), -1000, "order {o}");
    }
    // Order 4 (16 pages): 1000 - (1000 + 19 * 1000 / 16) / 6 = 1000 - 2187 / 6 = 636.
    assert_eq!(fragmentation_index(&FRAG, 4), 636);
    // Order 10: 1000 - (1000 + 19000 / 1024) / 6 = 1000 - 1018 / 6 = 831.
    assert_eq!(fragmentation_index(&FRAG, 10), 831);
    // Eight single pages, order 3: 1000 - (1000 + 1000) / 8 = 750.
    let singles = [8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(fragmentation_index(&singles, 3), 750);
    // A single free block too small: 1000 - (1000 + 512 * 1000 / 1024) / 1 = -500.
    // Linux's formula goes negative whenever free_blocks_total is 1, and is kept as is.
    let one = [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0];
    assert_eq!(fragmentation_index(&one, 10), -500);
    // Nothing free: 0.
    assert_eq!(fragmentation_index(&[0; 11], 5), 0);
}

#[test]
fn fragmentation_index_display_is_linux_printf() {
    let id = ZoneId {
        node: 0,
        zone_type: ZoneType::Dma32,
    };
    let extfrag = FragmentationIndex {
        zones: vec![(id, vec![-1000, 0, 636, 1000])],
        extfrag: true,
    };
    // "%2d.%03d " of index / 1000 and index % 1000.
    assert_eq!(
        extfrag.to_string(),
        "Node 0, zone    DMA32 -1.000  0.000  0.636  1.000 \n"
    );
    let unusable = FragmentationIndex {
        zones: vec![(id, vec![0, 157, 1000])],
        extfrag: false,
    };
    // "%d.%03d ".
    assert_eq!(
        unusable.to_string(),
        "Node 0, zone    DMA32 0.000 0.157 1.000 \n"
    );
}

/// Linux prints `index % 1000` with `%03d`, so a negative index above -1000 keeps its
/// sign after the point: -500 (one free order-9 block, order 10 requested) reads
/// `" 0.-500"` in `extfrag/extfrag_index`.
#[test]
fn extfrag_display_keeps_the_sign_of_small_negative_indices() {
    let id = ZoneId {
        node: 0,
        zone_type: ZoneType::Normal,
    };
    let one = [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0];
    let idx = fragmentation_index(&one, 10);
    let extfrag = FragmentationIndex {
        zones: vec![(id, vec![idx])],
        extfrag: true,
    };
    // C: printf("%2d.%03d ", -500 / 1000, -500 % 1000) == " 0.-500 ".
    assert_eq!(extfrag.to_string(), "Node 0, zone   Normal  0.-500 \n");
}

#[test]
fn allocator_indices_after_boot() {
    let za = traced();
    let u = za.unusable_index();
    let e = za.extfrag_index();
    // Normal holds only order-10 blocks: nothing is unusable, everything is suitable.
    let normal_u = &u.zones[2].1;
    assert!(normal_u.iter().all(|&i| i == 0), "{normal_u:?}");
    assert!(e.zones[2].1.iter().all(|&i| i == -1000));
    // DMA, per order, from BOOT_DMA.
    for o in 0..11 {
        assert_eq!(u.zones[0].1[o], unusable_free_index(&BOOT_DMA, o));
    }
    let text = e.to_string();
    assert!(
        text.starts_with("Node 0, zone      DMA -1.000 -1.000 "),
        "{text}"
    );
}
