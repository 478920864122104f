//! `zonealloc selftest`: the reliability figures of the test suites in one table.
//!
//! Each suite (model-based properties, fuzz twin, fault injection, multi-thread
//! stress, loom models, libFuzzer smoke run) records what it ran and checked in
//! `target/reliability/<suite>.tsv` when it passes (see `zonealloc::figures`).
//! This command adds them up and prints one table; it fails if a required suite has
//! no figures, or if any suite recorded a violation or a lost frame.

use std::collections::BTreeMap;
use std::path::Path;

/// Suites whose figures the test command (`bash .ci/test`) records (by name
/// prefix): always required.
const REQUIRED: [&str; 4] = ["model", "fuzz-twin", "faults", "stress-"];

/// Suites only `bash .ci/run` records (the loom models, in a `--cfg loom` build):
/// required with `--ci`, otherwise reported as not run. The libFuzzer smoke run
/// records its figures too when nightly is present; it is never required.
const CI_ONLY: [&str; 1] = ["loom-"];

/// Reads every suite's figures from `dir`: suite name → key → value.
fn read(dir: &Path) -> std::io::Result<BTreeMap<String, BTreeMap<String, u64>>> {
    let mut suites = BTreeMap::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.extension().and_then(|x| x.to_str()) != Some("tsv") {
            continue;
        }
        let name = p
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("?")
            .to_owned();
        let mut kv = BTreeMap::new();
        for line in std::fs::read_to_string(&p)?.lines() {
            if let Some((k, v)) = line.split_once('\t') {
                if let Ok(v) = v.trim().parse::<u64>() {
                    *kv.entry(k.to_owned()).or_insert(0) += v;
                }
            }
        }
        suites.insert(name, kv);
    }
    Ok(suites)
}

/// Prints the table; returns whether everything required is there and clean
/// (with `ci`, the suites only `.ci/run` records as well).
pub fn run(dir: &Path, ci: bool) -> bool {
    let suites = match read(dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("zonealloc selftest: cannot read {}: {e}", dir.display());
            return false;
        }
    };
    let sum = |key: &str| -> u64 { suites.values().filter_map(|kv| kv.get(key)).sum() };
    let by_prefix = |prefix: &str| -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for kv in suites.values() {
            for (k, v) in kv {
                if let Some(rest) = k.strip_prefix(prefix) {
                    *m.entry(rest.to_owned()).or_insert(0) += v;
                }
            }
        }
        m
    };
    let who = |key: &str| -> String {
        let names: Vec<&str> = suites
            .iter()
            .filter(|(_, kv)| kv.contains_key(key))
            .map(|(n, _)| n.as_str())
            .collect();
        if names.len() > 4 {
            format!("{} suites", names.len())
        } else {
            names.join(", ")
        }
    };
    let threads = suites
        .values()
        .filter_map(|kv| kv.get("threads"))
        .max()
        .copied()
        .unwrap_or(0);
    println!(
        "zonealloc reliability figures ({} suites, from {})",
        suites.len(),
        dir.display()
    );
    println!("{:<60} {:>14}  from", "figure", "value");
    let row = |what: &str, v: u64, from: String| println!("{what:<60} {v:>14}  {from}");
    row("operations run", sum("operations"), who("operations"));
    row(
        "threads (most in one run, on 2 cores)",
        threads,
        who("threads"),
    );
    row(
        "cross-thread frees",
        sum("cross_thread_frees"),
        who("cross_thread_frees"),
    );
    row(
        "allocation failures met (and survived)",
        sum("allocation_failures"),
        who("allocation_failures"),
    );
    row(
        "quiescent checkpoints",
        sum("checkpoints"),
        who("checkpoints"),
    );
    for (model, n) in by_prefix("loom_executions:") {
        row(&format!("loom executions: {model}"), n, "loom".into());
    }
    row(
        "fuzz twin executions (stable)",
        sum("fuzz_twin_executions"),
        who("fuzz_twin_executions"),
    );
    for (target, n) in by_prefix("fuzz_executions:") {
        row(
            &format!("libFuzzer executions: {target}"),
            n,
            "fuzz-libfuzzer".into(),
        );
    }
    row(
        "fuzz corpus files (committed)",
        sum("fuzz_corpus_files"),
        who("fuzz_corpus_files"),
    );
    for (target, n) in by_prefix("fuzz_corpus:") {
        row(
            &format!("libFuzzer corpus: {target}"),
            n,
            "fuzz-libfuzzer".into(),
        );
    }
    for (kind, n) in by_prefix("faults:") {
        row(&format!("faults injected: {kind}"), n, String::new());
    }
    for (kind, n) in by_prefix("bad_inputs:") {
        row(&format!("bad inputs tried: {kind}"), n, String::new());
    }
    row(
        "check_invariants() runs",
        sum("invariant_checks"),
        who("invariant_checks"),
    );
    row(
        "  assertions they evaluated",
        sum("invariant_assertions"),
        who("invariant_assertions"),
    );
    let violations = sum("violations");
    let lost = sum("frames_lost");
    row(
        "violations found (must be 0)",
        violations,
        who("violations"),
    );
    row("frames lost (must be 0)", lost, who("frames_lost"));
    let mut ok = violations == 0 && lost == 0;
    let ran = |prefix: &str| suites.keys().any(|n| n.starts_with(prefix));
    for req in REQUIRED {
        if !ran(req) {
            println!(
                "missing: no figures from the {req:?} suite (did `bash .ci/test` run and pass?)"
            );
            ok = false;
        }
    }
    for req in CI_ONLY {
        if ran(req) {
            continue;
        }
        if ci {
            println!("missing: no figures from the {req:?} suite (did `bash .ci/run` reach it?)");
            ok = false;
        } else {
            println!("not run: the {req:?} suite (its figures come from `bash .ci/run`)");
        }
    }
    println!("selftest: {}", if ok { "PASS" } else { "FAIL" });
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(format!("{name}.tsv")), text).unwrap();
    }

    #[test]
    fn after_the_test_command_it_passes_and_with_ci_it_wants_the_loom_figures() {
        let dir = std::env::temp_dir().join(format!("zonealloc-selftest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["model", "fuzz-twin", "faults", "stress-pressure"] {
            suite(&dir, name, "operations\t10\nviolations\t0\n");
        }
        assert!(run(&dir, false), "the test command's suites are enough");
        assert!(!run(&dir, true), "--ci requires the loom figures");
        suite(&dir, "loom-pcp", "operations\t5\n");
        assert!(run(&dir, true));
        suite(&dir, "stress-pressure", "violations\t1\n");
        assert!(!run(&dir, false), "a violation fails it");
        std::fs::remove_file(dir.join("model.tsv")).unwrap();
        suite(&dir, "stress-pressure", "violations\t0\n");
        assert!(!run(&dir, false), "a required suite is missing");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
