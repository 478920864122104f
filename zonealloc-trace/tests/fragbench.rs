//! The fragmentation benchmark at test scale: grouping must beat no grouping at rest,
//! compaction must beat grouping alone under load, every figure must be consistent,
//! and the pictures must be written.

use zonealloc_trace::fragbench::{self, FragOptions, PictureOut};

#[test]
fn grouping_beats_no_grouping_at_rest() {
    let dir = std::env::temp_dir().join(format!("zonealloc-trace-fb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = FragOptions {
        zone_bytes: 128 << 20,
        ops_per_page: 2.0,
        samples: 20,
        ..FragOptions::default()
    };
    let r = fragbench::run(&o, Some(&PictureOut { dir: dir.clone() })).unwrap();
    let s = &r.synthetic.subjects;
    assert_eq!(
        s.len(),
        4,
        "grouping, grouping + compaction, no grouping, peer"
    );
    for x in s {
        for p in [&x.under_load, &x.at_rest] {
            assert_eq!(p.possible, p.free_pages / 512);
            assert!(p.obtained <= p.possible, "{}: {p:?}", x.name);
            // Only compaction makes free pageblocks during the pass.
            if p.pages_moved == 0 {
                assert!(p.obtained <= p.free_pageblocks, "{}: {p:?}", x.name);
            }
            assert!((0.0..=1.0).contains(&p.unusable_index_order9));
        }
        assert_eq!(x.workload_alloc_failures, 0, "{}", x.name);
    }
    // Compaction: more order-9 blocks while the movable memory is still allocated,
    // paid for in pages moved; the same at rest (nothing movable is left to move).
    let (gl, cl) = (&s[0].under_load, &s[1].under_load);
    assert!(
        cl.obtained > gl.obtained,
        "grouping {gl:?} vs compaction {cl:?}"
    );
    assert!(cl.compact_stall > 0 && cl.pages_moved > 0, "{cl:?}");
    assert_eq!(
        cl.moved_per_block,
        cl.pages_moved as f64 / cl.obtained as f64
    );
    assert_eq!(
        (gl.pages_moved, gl.compact_stall),
        (0, 0),
        "no migrator, no compaction"
    );
    assert_eq!(s[1].at_rest.obtained, s[0].at_rest.obtained);
    for row in &r.cost.rows {
        assert!(
            row.pages_moved > 0 && row.order9_after > row.order9_before,
            "{row:?}"
        );
    }
    let (g, n) = (&s[0].at_rest, &s[2].at_rest);
    assert!(g.success_percent >= 90.0, "grouping: {g:?}");
    assert!(
        g.success_percent > n.success_percent + 10.0,
        "grouping {g:?} vs none {n:?}"
    );
    assert!(g.unusable_index_order9 < n.unusable_index_order9);
    assert!(s[0].pinned_pageblocks < s[2].pinned_pageblocks);
    // Two maps (PNG, SVG) and a chart for each zonealloc subject.
    for x in &s[..3] {
        assert_eq!(x.maps.len(), 2, "{}", x.name);
        assert_eq!(x.charts.len(), 1, "{}", x.name);
        for f in x.maps.iter().chain(&x.charts) {
            let bytes = std::fs::read(f).unwrap();
            if f.ends_with(".png") {
                assert!(bytes.starts_with(b"\x89PNG"), "{f}");
            } else {
                assert!(String::from_utf8_lossy(&bytes).contains("<svg"), "{f}");
            }
        }
    }
    assert!(r.to_string().contains("success"));
    serde_json::to_string(&r).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn same_seed_same_figures() {
    let o = FragOptions {
        zone_bytes: 32 << 20,
        ops_per_page: 1.0,
        peer: false,
        samples: 0,
        ..FragOptions::default()
    };
    let a = fragbench::run(&o, None).unwrap();
    let b = fragbench::run(&o, None).unwrap();
    for (x, y) in a.synthetic.subjects.iter().zip(&b.synthetic.subjects) {
        assert_eq!(x.at_rest.obtained, y.at_rest.obtained);
        assert_eq!(x.under_load.obtained, y.under_load.obtained);
        assert_eq!(x.pinned_pageblocks, y.pinned_pageblocks);
    }
}

/// The default workload at full scale (1 GiB), grouping alone: every order-9 block
/// comes back at rest and no pageblock mixes mobilities. Regression: a list-only
/// take below the watermark for every order once left free pageblocks parked on a
/// per-CPU list, out of the fallbacks' reach (88.9 % at rest, 56 mixed pageblocks).
#[test]
fn full_scale_grouping_keeps_pageblocks_pure() {
    let o = FragOptions {
        peer: false,
        samples: 0,
        ..FragOptions::default()
    };
    assert_eq!(
        o.zone_bytes,
        1 << 30,
        "the default workload is the README's"
    );
    let r = fragbench::run(&o, None).unwrap();
    let g = &r.synthetic.subjects[0];
    assert_eq!(g.mixed_pageblocks, 0, "grouping: {g:?}");
    assert!(
        g.at_rest.success_percent >= 99.0,
        "grouping: {:?}",
        g.at_rest
    );
}
