//! Keeps README.md honest: its C example is `tests/c/example.c` (which
//! `.ci/capi` builds and runs), its error table lists every status code with its
//! value, and it names every function of the header.

use std::fs;
use std::path::Path;

use ::zonealloc::Status;

fn read(rel: &str) -> String {
    fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).expect(rel)
}

/// The bodies of the fenced blocks tagged `lang`.
fn fenced(md: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in md.lines() {
        match (&mut cur, line.strip_prefix("```")) {
            (None, Some(info)) if info.trim() == lang => cur = Some(String::new()),
            (Some(_), Some(_)) => out.push(cur.take().unwrap()),
            (Some(body), None) => {
                body.push_str(line);
                body.push('\n');
            }
            _ => {}
        }
    }
    out
}

#[test]
fn the_c_example_is_the_one_ci_runs() {
    let readme = read("README.md");
    assert_eq!(fenced(&readme, "c"), [read("tests/c/example.c")]);
    assert!(read("tests/c/example.c").lines().count() <= 25);
}

#[test]
fn the_error_table_lists_every_code() {
    let readme = read("README.md");
    for s in Status::ALL {
        let row = format!("| {} | `{}` |", s.code(), s.c_name());
        assert!(readme.contains(&row), "README.md has no row {row}");
    }
}

#[test]
fn every_function_is_named() {
    let readme = read("README.md");
    let header = read("include/zonealloc.h");
    let mut n = 0;
    for line in header
        .lines()
        .filter(|l| !l.starts_with([' ', '/', '#', '*']))
    {
        if let Some(name) = line
            .split('(')
            .next()
            .and_then(|h| h.rsplit([' ', '*']).next())
            .filter(|n| n.starts_with("zonealloc_") && line.contains('('))
        {
            assert!(
                readme.contains(&format!("`{name}`")),
                "README.md does not name {name}"
            );
            n += 1;
        }
    }
    assert!(n >= 30, "{n} functions found in the header");
}
