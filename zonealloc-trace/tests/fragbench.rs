//! The fragmentation benchmark at test scale: grouping must beat no grouping at rest,
//! every figure must be consistent, and the pictures must be written.

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
    assert_eq!(s.len(), 3, "grouping, no grouping, peer");
    for x in s {
        for p in [&x.under_load, &x.at_rest] {
            assert_eq!(p.possible, p.free_pages / 512);
            assert!(p.obtained <= p.possible, "{}: {p:?}", x.name);
            assert!(p.obtained <= p.free_pageblocks, "{}: {p:?}", x.name);
            assert!((0.0..=1.0).contains(&p.unusable_index_order9));
        }
        assert_eq!(x.workload_alloc_failures, 0, "{}", x.name);
    }
    let (g, n) = (&s[0].at_rest, &s[1].at_rest);
    assert!(g.success_percent >= 90.0, "grouping: {g:?}");
    assert!(
        g.success_percent > n.success_percent + 10.0,
        "grouping {g:?} vs none {n:?}"
    );
    assert!(g.unusable_index_order9 < n.unusable_index_order9);
    assert!(s[0].pinned_pageblocks < s[1].pinned_pageblocks);
    // Two maps (PNG, SVG) and a chart for each zonealloc subject.
    for x in &s[..2] {
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
