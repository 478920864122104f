//! Zone maps: each cell has its pageblock's migratetype, mixed pageblocks (allocated
//! memory of another mobility than the pageblock's type) are found from the owners
//! and drawn as dots, and both backends write their files.

use zonealloc::{Config, Gfp, Migratetype, Order, Pfn, ZoneAllocator};
use zonealloc_trace::maps::{self, MapOptions};

/// A 64 MiB zone filled with movable pages, a few freed, then unmovable pages that
/// can only come from movable pageblocks too full to be claimed: real fallback
/// pollution. Returns the allocator and every live block with its mobility.
fn polluted() -> (ZoneAllocator, Vec<(Pfn, Order, Migratetype)>) {
    let za = ZoneAllocator::new(Config {
        nr_cpus: 1,
        ..Config::with_bytes(64 << 20)
    })
    .unwrap();
    let mut movable = Vec::new();
    while let Ok(p) = za.alloc_pages_on(0, Gfp::HIGHUSER_MOVABLE, Order(0)) {
        movable.push(p);
    }
    assert!(movable.len() > 10_000);
    let mut owners = Vec::new();
    for (i, &p) in movable.iter().enumerate() {
        if i % 16 == 0 {
            za.free_pages_on(0, p, Order(0)).unwrap();
        } else {
            owners.push((p, Order(0), Migratetype::Movable));
        }
    }
    za.drain_all_pages();
    for _ in 0..200 {
        let p = za.alloc_pages_on(0, Gfp::KERNEL, Order(0)).unwrap();
        owners.push((p, Order(0), Migratetype::Unmovable));
    }
    za.drain_all_pages();
    (za, owners)
}

#[test]
fn cells_carry_the_pageblock_migratetype_and_mixed_blocks_are_found() {
    let (za, owners) = polluted();
    let m = maps::zone_map(&za, None, &owners).unwrap();
    assert_eq!(m.cells.len(), 32);
    for (i, c) in m.cells.iter().enumerate() {
        let pfn = Pfn(m.start_pfn + i as u64 * m.pageblock_pages);
        assert_eq!(
            c.migratetype,
            za.pageblock_migratetype(pfn),
            "pageblock {i}"
        );
        assert!(c.migratetype.is_some(), "pageblock {i}");
    }
    let total: usize = Migratetype::ALL.iter().map(|&t| m.pageblocks_of(t)).sum();
    assert_eq!(total, 32);
    // A block is mixed exactly when it holds named memory of another mobility.
    for c in &m.cells {
        let own = match c.migratetype {
            Some(Migratetype::Unmovable) => 0,
            Some(Migratetype::Movable) => 1,
            Some(Migratetype::Reclaimable) => 2,
            _ => usize::MAX,
        };
        let other: u32 = (0..3).filter(|&k| k != own).map(|k| c.owned[k]).sum();
        assert_eq!(c.mixed(), own != usize::MAX && other > 0, "{c:?}");
    }
    // The unmovable pages fell back into movable pageblocks: the claimed ones now
    // hold movable pages, any left Movable hold unmovable ones. Either is mixed.
    let claimed_or_stolen = m.cells.iter().any(|c| {
        (c.migratetype == Some(Migratetype::Unmovable) && c.owned[1] > 0)
            || (c.migratetype == Some(Migratetype::Movable) && c.owned[0] > 0)
    });
    assert!(claimed_or_stolen, "no pollution: {:?}", m.cells);
    assert!(m.mixed_pageblocks() > 0);
    // Without owners nothing is known to be mixed, but the types are the same.
    let bare = maps::zone_map(&za, None, &[]).unwrap();
    assert_eq!(bare.mixed_pageblocks(), 0);
    for (a, b) in bare.cells.iter().zip(&m.cells) {
        assert_eq!(a.migratetype, b.migratetype);
    }
}

#[test]
fn png_and_svg_are_written_with_one_dot_per_mixed_pageblock() {
    let (za, owners) = polluted();
    let dir = std::env::temp_dir().join(format!("zonealloc-trace-maps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let circles = |path: &std::path::Path| {
        std::fs::read_to_string(path)
            .unwrap()
            .matches("<circle")
            .count()
    };
    let svg = dir.join("m.svg");
    let m = maps::render_zone_map(
        &za,
        &svg,
        &MapOptions {
            title: "test".into(),
            owners: &owners,
            ..MapOptions::default()
        },
    )
    .unwrap();
    assert!(m.mixed_pageblocks() > 0);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("<svg"));
    assert!(text.contains("migratetype") && text.contains("mixed"));
    for t in [
        "Unmovable",
        "Movable",
        "Reclaimable",
        "HighAtomic",
        "Isolate",
    ] {
        assert!(text.contains(t), "legend lacks {t}");
    }
    // A dot is two circles (ring and fill); the legend draws one example dot.
    assert_eq!(circles(&svg), 2 * m.mixed_pageblocks() + 2);
    // No owners, or marks turned off: no dots at all.
    let bare = dir.join("bare.svg");
    maps::render_zone_map(&za, &bare, &MapOptions::default()).unwrap();
    assert_eq!(circles(&bare), 0);
    let off = dir.join("off.svg");
    maps::render_zone_map(
        &za,
        &off,
        &MapOptions {
            owners: &owners,
            mark_mixed: false,
            ..MapOptions::default()
        },
    )
    .unwrap();
    assert_eq!(circles(&off), 0);
    let png = dir.join("m.png");
    maps::render_zone_map(
        &za,
        &png,
        &MapOptions {
            owners: &owners,
            ..MapOptions::default()
        },
    )
    .unwrap();
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    assert!(maps::render_zone_map(&za, &dir.join("m.jpg"), &MapOptions::default()).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn legend_example_is_the_commonest_mixed_pageblock_and_the_note_is_drawn() {
    let (za, owners) = polluted();
    let m = maps::zone_map(&za, None, &owners).unwrap();
    // In this zone, mixing means Unmovable pages in Movable pageblocks.
    let mixed: Vec<_> = m.cells.iter().filter(|c| c.mixed()).collect();
    assert!(!mixed.is_empty());
    let n = mixed
        .iter()
        .filter(|c| {
            c.migratetype == Some(Migratetype::Movable)
                && c.main_foreign() == Some(Migratetype::Unmovable)
        })
        .count();
    let dir = std::env::temp_dir().join(format!("zonealloc-legend-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("map.svg");
    maps::render_zone_map(
        &za,
        &svg,
        &MapOptions {
            owners: &owners,
            note: Some("first line of the note\nsecond line".into()),
            ..MapOptions::default()
        },
    )
    .unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        text.contains(&format!("{n} here hold Unmovable pages")),
        "legend example does not match the map"
    );
    assert!(text.contains("in a Movable pageblock"));
    assert!(text.contains("first line of the note") && text.contains("second line"));
}

#[test]
fn free_blocks_chart_keeps_its_title_and_counts_trace_seconds() {
    use zonealloc_trace::replay::BuddySample;
    let samples: Vec<BuddySample> = (0..50u64)
        .map(|i| BuddySample {
            event: i * 1000,
            trace_time_ns: i * 100_000_000,
            free_blocks: vec![vec![i % 3, 0, i, 1]],
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("zonealloc-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("chart.svg");
    let title = "Free blocks, zonealloc, mobility_grouping: false";
    maps::render_buddyinfo_chart(&samples, 0, &svg, title, maps::XAxis::TraceSeconds).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(text.contains("mobility_grouping: false"), "title cut");
    assert!(text.contains("seconds of the trace"));
    // 4.9 s of trace: the axis counts seconds, not the 49,000 events.
    // SVG text elements hold their text on a line of its own.
    let labels: Vec<&str> = text.lines().collect();
    assert!(
        labels.iter().any(|l| *l == "4.0" || *l == "4.5"),
        "no seconds on the axis"
    );
    assert!(
        !labels.iter().any(|l| l.ends_with('k')),
        "events on the axis"
    );
}
