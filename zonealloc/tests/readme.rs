//! Keeps the README honest: each of its Rust examples is a doctest of the crate
//! documentation or of the `migrate` module (so it compiles and runs), the first
//! one the crate's own first example; its C example is the one CI builds and runs;
//! its two commands are the ones CI runs; it stays a newcomer's length.

const README: &str = include_str!("../../README.md");
const LIB_RS: &str = include_str!("../src/lib.rs");
const MIGRATE_RS: &str = include_str!("../src/migrate.rs");
const CI_RUN: &str = include_str!("../../.ci/run");
const CI_TEST: &str = include_str!("../../.ci/test");
const C_EXAMPLE: &str = include_str!("../../zonealloc-capi/tests/c/example.c");

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

/// The Rust code blocks of a module's `//!` documentation, each a doctest.
fn module_doc_examples(src: &str) -> Vec<String> {
    let doc: String = src
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| format!("{}\n", l.strip_prefix(' ').unwrap_or(l)))
        .collect();
    fenced_blocks(&doc)
        .into_iter()
        .filter(|(info, _)| info.is_empty() || info == "rust")
        .map(|b| b.1)
        .collect()
}

#[test]
fn readme_examples_are_doctests() {
    let rust: Vec<String> = fenced_blocks(README)
        .into_iter()
        .filter(|(info, _)| info == "rust")
        .map(|b| b.1)
        .collect();
    let crate_doc = module_doc_examples(LIB_RS);
    let migrate_doc = module_doc_examples(MIGRATE_RS);
    assert!(!rust.is_empty(), "the README has a Rust example");
    assert_eq!(
        rust[0], crate_doc[0],
        "README.md's first example must equal zonealloc/src/lib.rs's first crate doc \
         example (the doctest that proves it compiles)"
    );
    for r in &rust {
        assert!(
            crate_doc.contains(r) || migrate_doc.contains(r),
            "every Rust example of README.md must be a doctest of zonealloc/src/lib.rs or \
             zonealloc/src/migrate.rs, so that it compiles and runs:\n{r}"
        );
    }
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

#[test]
fn readme_c_example_is_the_one_ci_runs() {
    let c: Vec<String> = fenced_blocks(README)
        .into_iter()
        .filter(|(info, _)| info == "c")
        .map(|b| b.1)
        .collect();
    assert_eq!(
        c,
        [C_EXAMPLE],
        "README.md's C example must be zonealloc-capi/tests/c/example.c, which .ci/capi \
         builds and runs"
    );
}

#[test]
fn readme_is_a_newcomers_length() {
    let lines = README.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; measurement history goes to docs/"
    );
    let beside = concat!("..", "/shared");
    assert!(
        !README.contains(beside),
        "the README needs nothing beside the repository"
    );
}
