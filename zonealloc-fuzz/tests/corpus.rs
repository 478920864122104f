//! The stable twin of the fuzz targets: replays the committed corpus and a batch of
//! seeded random inputs through both targets, and prints the figures.

#[path = "../../zonealloc/tests/support/figures.rs"]
mod figures;

use std::path::Path;

use zonealloc_fuzz::{run, seeded_input, Figures};

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        std::fs::read(e.path()).unwrap(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn corpus_and_seeded_inputs_pass_both_targets() {
    let seeded: usize = std::env::var("ZONEALLOC_FUZZ_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let mut ops = Figures::default();
    let mut bad = Figures::default();
    let files = corpus();
    for (name, data) in &files {
        eprintln!("corpus: {name}");
        ops.merge(&run(data, false));
        bad.merge(&run(data, true));
    }
    for seed in 0..seeded as u64 {
        let data = seeded_input(seed, 64 + (seed as usize * 37) % 3000);
        ops.merge(&run(&data, false));
        bad.merge(&run(&data, true));
    }
    println!(
        "fuzz twin: corpus files {}, seeded inputs {seeded}",
        files.len()
    );
    for (name, f) in [("ops", &ops), ("bad_frees", &bad)] {
        println!(
            "  target {name:<9}: executions {}, operations {}, invariant checks {} ({} assertions), violations 0",
            f.execs, f.ops, f.invariant_checks, f.assertions
        );
    }
    println!("  faults injected by site (every step checked after each):");
    for (k, n) in &ops.faults {
        println!("    {k:<28} {n}");
    }
    println!("  bad inputs tried by kind:");
    for (k, n) in &bad.bad_inputs {
        println!("    {k:<28} {n}");
    }
    assert!(ops.ops > 10_000);
    let mut f: Vec<(String, u64)> = vec![
        ("operations".into(), ops.ops + bad.ops),
        ("fuzz_twin_executions".into(), ops.execs + bad.execs),
        ("fuzz_corpus_files".into(), files.len() as u64),
        (
            "invariant_checks".into(),
            ops.invariant_checks + bad.invariant_checks,
        ),
        (
            "invariant_assertions".into(),
            ops.assertions + bad.assertions,
        ),
        ("violations".into(), 0),
        ("frames_lost".into(), 0),
    ];
    for (k, n) in &bad.bad_inputs {
        f.push((format!("bad_inputs:{k}"), *n));
    }
    for (k, n) in &ops.faults {
        f.push((format!("faults:{k}"), *n));
    }
    figures::record("fuzz-twin", env!("CARGO_MANIFEST_DIR"), &f);
    assert!(
        bad.bad_inputs.len() >= 8,
        "every kind of bad input must be reached: {:?}",
        bad.bad_inputs
    );
}

/// Found by the seeded twin: with pageblocks of one frame, a frame freed next to a
/// buddy of another type stayed unmerged after that buddy's pageblock was retyped to
/// the same type (HighAtomic); retypes now re-merge equal types too. The input was
/// recorded before `FuzzConfig` gained its fault field, so it now decodes to a
/// different run; the scenario itself is pinned by
/// `zonealloc/tests/contig.rs::regression_restored_highatomic_blocks_merge_again`.
#[test]
fn regression_unmerged_highatomic_buddies_after_retype() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let data =
        std::fs::read(dir.join("regression-unmerged-highatomic-buddies-after-retype")).unwrap();
    run(&data, false);
    run(&data, true);
}
