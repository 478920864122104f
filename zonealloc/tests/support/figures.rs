//! Reliability figures: what each test suite ran and checked, collected for
//! `zonealloc selftest`'s table.
//!
//! Test support, included by each suite with `#[path]` (not part of the library).
//! Each suite calls `record` once with
//! its counts (operations, invariant checks, bad inputs by kind, faults by site, ...);
//! the figures land as `key<TAB>value` lines in
//! `<workspace>/target/reliability/<suite>.tsv` (or `$ZONEALLOC_FIGURES_DIR`), and
//! `zonealloc selftest` prints them as one table. A suite that fails never records,
//! so the table only ever shows figures of passing runs.

use std::path::{Path, PathBuf};

/// Where figures go: `$ZONEALLOC_FIGURES_DIR`, else `target/reliability` of the
/// workspace containing `manifest_dir` (a crate directory).
#[allow(dead_code)]
pub fn dir(manifest_dir: &str) -> PathBuf {
    if let Some(d) = std::env::var_os("ZONEALLOC_FIGURES_DIR") {
        return PathBuf::from(d);
    }
    let crate_dir = Path::new(manifest_dir);
    let root = crate_dir
        .parent()
        .filter(|p| p.join("Cargo.toml").exists())
        .unwrap_or(crate_dir);
    root.join("target").join("reliability")
}

/// Writes suite `suite`'s figures, replacing what an earlier run wrote. Errors are
/// reported on stderr, never fatal: figures are a report, not a test.
pub fn record(suite: &str, manifest_dir: &str, figures: &[(String, u64)]) {
    let d = dir(manifest_dir);
    let mut text = String::new();
    for (k, v) in figures {
        text.push_str(&std::format!("{}\t{v}\n", k.replace(['\t', '\n'], " ")));
    }
    let r = std::fs::create_dir_all(&d)
        .and_then(|()| std::fs::write(d.join(std::format!("{suite}.tsv")), text));
    if let Err(e) = r {
        std::eprintln!(
            "figures: cannot write {suite} figures to {}: {e}",
            d.display()
        );
    }
}
