//! Keeps the README honest: its examples are the crate documentation's and the
//! `migrate` module's (doctests, so they compile and run), and its two commands are
//! the ones CI runs.

const README: &str = include_str!("../../README.md");
const LIB_RS: &str = include_str!("../src/lib.rs");
const MIGRATE_RS: &str = include_str!("../src/migrate.rs");
const CI_RUN: &str = include_str!("../../.ci/run");
const CI_TEST: &str = include_str!("../../.ci/test");

/// The fenced code blocks of a Markdown text as `(info string, body)`.
fn fenced_blocks(md: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cur: Option<(String, String)> = None;
    for line in md.lines() {
        let t = line.trim_start();
        match (&mut cur, t.strip_prefix("```")) {
            (None, Some(info)) => cur = Some((info.trim().to_string(), String::new())),
            (Some(_), Some(_)) => out.push(cur.take().unwrap()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// The first code block of a module's `//!` documentation.
fn module_doc_example(src: &str) -> String {
    let doc: String = src
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| format!("{}\n", l.strip_prefix(' ').unwrap_or(l)))
        .collect();
    fenced_blocks(&doc)
        .into_iter()
        .next()
        .expect("the module has a doc example")
        .1
}

/// The first code block of `lib.rs`'s crate documentation (`//!` lines).
fn crate_doc_example() -> String {
    module_doc_example(LIB_RS)
}

#[test]
fn readme_example_is_the_crate_doc_example() {
    let rust: Vec<String> = fenced_blocks(README)
        .into_iter()
        .filter(|(info, _)| info == "rust")
        .map(|b| b.1)
        .collect();
    assert_eq!(rust.len(), 2, "the README has two Rust examples");
    assert_eq!(
        rust[0],
        crate_doc_example(),
        "README.md's example must equal zonealloc/src/lib.rs's crate doc example \
         (the doctest that proves it compiles)"
    );
    assert_eq!(
        rust[1],
        module_doc_example(MIGRATE_RS),
        "README.md's compaction example must equal zonealloc/src/migrate.rs's module \
         doc example (the doctest that proves it runs)"
    );
}

#[test]
fn readme_commands_are_the_ones_ci_runs() {
    let commands: Vec<String> = fenced_blocks(README)
        .into_iter()
        .filter(|(info, _)| info == "sh")
        .map(|b| b.1.trim().to_string())
        .collect();
    assert_eq!(
        commands,
        [
            "cargo run --release -p zonealloc-cli -- bench --quick",
            "bash .ci/test"
        ],
        "exactly two set-up commands: the main job and the tests"
    );
    // CI runs each, the main job possibly with more flags (`--check`, `--out`).
    for c in &commands {
        assert!(
            CI_RUN
                .lines()
                .any(|l| l.trim() == c || l.trim().starts_with(&format!("{c} "))),
            ".ci/run does not run {c:?}"
        );
    }
    assert!(CI_TEST.contains("cargo test --release"));
}
