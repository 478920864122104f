//! Keeps the layers true: every module of `zonealloc/src` imports only from its
//! own layer and those below it, as the layer table of the crate documentation
//! (`lib.rs`, "Layers") declares them, lowest first; and `docs/architecture.md`
//! draws the same layers.
//!
//! The table in `lib.rs` is the one place the order is kept: this test reads it.
//! An import is a `use crate::x` (groups included), a `crate::x::` path anywhere
//! in the code (test modules too), or a `super::x` that names a sibling module;
//! comments and string literals are skipped. Two kinds of failure:
//! * an import from a module of a lower layer to one of a higher layer (the
//!   message names the file, the import and both layers);
//! * files importing each other in a circle, which a layer table cannot see
//!   when they share a layer.
//!
//! The one exception is Linux's own pair: a zone owns its per-CPU slots
//! (`struct zone` has `per_cpu_pageset`), so `zone` names `pcp`'s slot type
//! while `pcp` works on zones.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Imports that run upward by design: (importer, imported, why). Each must
/// still be made, and be named in `lib.rs`'s layer section.
const EXCEPTIONS: &[(&str, &str, &str)] = &[(
    "zone",
    "pcp",
    "a zone owns its per-CPU slots (`struct zone` has `per_cpu_pageset`)",
)];

/// Imports that run upward and are not mended yet: (importer, imported, what
/// mends it). Each must still be made (take it out once it is mended), and be
/// named in docs/architecture.md.
const OPEN: &[(&str, &str, &str)] = &[];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

// -----------------------------------------------------------------------------
// The declared layers
// -----------------------------------------------------------------------------

/// The layers of `lib.rs`'s table, lowest first: the modules of each row.
fn declared_layers(lib_rs: &str) -> Vec<Vec<String>> {
    let doc: Vec<&str> = lib_rs
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(str::trim)
        .collect();
    let start = doc
        .iter()
        .position(|l| l.starts_with("# Layers"))
        .expect("lib.rs has a `# Layers` section");
    let rows: Vec<Vec<String>> = doc[start..]
        .iter()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .map(|cell| {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|names| !names.is_empty())
        .collect();
    assert!(
        rows.len() > 2,
        "lib.rs's layer table has {} rows",
        rows.len()
    );
    rows
}

/// The layers `docs/architecture.md` draws under "## Layers", lowest first: the
/// names at the left of each row of the diagram (a row whose names end with a
/// comma goes on on the next line).
fn drawn_layers(md: &str) -> Vec<Vec<String>> {
    let section = md
        .split("\n## ")
        .find(|s| s.starts_with("Layers"))
        .expect("docs/architecture.md has a `## Layers` section");
    let diagram = section
        .split("```text\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("the Layers section has a text diagram");
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut open = false;
    for line in diagram.lines() {
        let Some(rest) = line.strip_prefix("  ") else {
            continue;
        };
        if !rest.starts_with(|c: char| c.is_ascii_lowercase()) {
            continue;
        }
        let names: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_, ".contains(*c))
            .collect();
        let names = names.split("  ").next().unwrap_or("").trim_end();
        let list: Vec<String> = names
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect();
        if open {
            rows.last_mut().unwrap().extend(list);
        } else {
            rows.push(list);
        }
        open = names.ends_with(',');
    }
    rows.reverse();
    rows
}

// -----------------------------------------------------------------------------
// Reading the sources
// -----------------------------------------------------------------------------

/// Every module file of `src` (not `lib.rs`), by the module it defines: its
/// name, unless `lib.rs` loads it with `#[path]` under another.
fn module_files(src: &Path, lib_rs: &str) -> BTreeMap<String, PathBuf> {
    let mut by_path = BTreeMap::new();
    let lines: Vec<&str> = lib_rs.lines().map(str::trim).collect();
    for (i, l) in lines.iter().enumerate() {
        let Some(file) = l
            .strip_prefix("#[path = \"")
            .and_then(|r| r.strip_suffix("\"]"))
        else {
            continue;
        };
        let m = lines[i + 1..]
            .iter()
            .find_map(|l| {
                l.trim_start_matches("pub ")
                    .strip_prefix("mod ")
                    .and_then(|r| r.strip_suffix(';'))
            })
            .expect("a #[path] attribute before a `mod`");
        by_path.insert(file.to_string(), m.to_string());
    }
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(src).expect("zonealloc/src") {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".rs") || name == "lib.rs" {
            continue;
        }
        let module = by_path
            .get(&name)
            .cloned()
            .unwrap_or_else(|| name.trim_end_matches(".rs").to_string());
        // A module with two files (`rseq.rs` and its stand-in `rseq_off.rs`) is
        // checked file by file under the one name: keep both.
        let key = if out.contains_key(&module) {
            format!("{module}#{name}")
        } else {
            module
        };
        out.insert(key, path);
    }
    out
}

/// `src` with comments, string literals and character literals blanked out
/// (line breaks kept, so line numbers still hold).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, s: &[u8]| {
        for &c in s {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, 0);
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if let Some(len) = raw_string_len(rest) {
            blank(&mut out, &rest[..len]);
            i += len;
        } else if rest[0] == b'"' || rest.starts_with(b"b\"") {
            let mut j = if rest[0] == b'"' { 1 } else { 2 };
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'\'' {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let len = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(ch + 2)
            };
            let len = len.unwrap_or(1);
            if len > 1 {
                blank(&mut out, &rest[..len]);
            } else {
                out.push('\'');
            }
            i += len;
        } else {
            let ch = src[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The length of the raw string literal (`r"..."`, `br#"..."#`) at the start of
/// `s`, if one starts there.
fn raw_string_len(s: &[u8]) -> Option<usize> {
    let mut j = usize::from(s.first() == Some(&b'b'));
    if s.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = s[j..].iter().take_while(|&&c| c == b'#').count();
    j += hashes;
    if s.get(j) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let end = s[j + 1..].windows(close.len()).position(|w| w == close)?;
    Some(j + 1 + end + close.len())
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Punct(char),
    PathSep,
}

/// The identifiers, `::` and single punctuation of `code`, with their lines.
fn tokens(code: &str) -> Vec<(Tok, usize)> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = code.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '\n' {
            line += 1;
        } else if c.is_alphabetic() || c == '_' {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if !(d.is_alphanumeric() || d == '_') {
                    break;
                }
                end = j + d.len_utf8();
                chars.next();
            }
            out.push((Tok::Ident(code[i..end].to_string()), line));
        } else if c == ':' && chars.peek().map(|p| p.1) == Some(':') {
            chars.next();
            out.push((Tok::PathSep, line));
        } else if !c.is_whitespace() {
            out.push((Tok::Punct(c), line));
        }
    }
    out
}

/// One import: the module imported, the line, and the path as written.
#[derive(Debug)]
struct Import {
    module: String,
    line: usize,
    path: String,
}

/// The sibling modules (among `modules`) that the source `src` imports.
fn imports(src: &str, modules: &BTreeSet<String>) -> Vec<Import> {
    let toks = tokens(&code_only(src));
    let ident = |k: usize| match toks.get(k) {
        Some((Tok::Ident(s), _)) => Some(s.as_str()),
        _ => None,
    };
    let is = |k: usize, t: &Tok| toks.get(k).map(|x| &x.0) == Some(t);
    let mut out = Vec::new();
    // The brace depths at which inline `mod name {` blocks opened.
    let mut mods: Vec<usize> = Vec::new();
    let mut depth = 0;
    let mut k = 0;
    while k < toks.len() {
        match &toks[k].0 {
            Tok::Punct('{') => {
                if k >= 2 && ident(k - 2) == Some("mod") && ident(k - 1).is_some() {
                    mods.push(depth);
                }
                depth += 1;
            }
            Tok::Punct('}') => {
                depth -= 1;
                if mods.last() == Some(&depth) {
                    mods.pop();
                }
            }
            _ => {}
        }
        // The start of a path at the crate root: `crate::`, or as many `super::`
        // as there are inline modules around, plus one.
        let root = match ident(k) {
            Some("crate") if is(k + 1, &Tok::PathSep) && !is(k.wrapping_sub(1), &Tok::PathSep) => {
                Some(k + 2)
            }
            Some("super") if !is(k.wrapping_sub(1), &Tok::PathSep) => {
                let mut j = k;
                let mut supers = 0;
                while ident(j) == Some("super") && is(j + 1, &Tok::PathSep) {
                    supers += 1;
                    j += 2;
                }
                (supers == mods.len() + 1).then_some(j)
            }
            _ => None,
        };
        let Some(at) = root else {
            k += 1;
            continue;
        };
        let line = toks[k].1;
        let mut record = |name: &str, path: String| {
            if modules.contains(name) {
                out.push(Import {
                    module: name.to_string(),
                    line,
                    path,
                });
            }
        };
        let head = if ident(k) == Some("crate") {
            "crate"
        } else {
            "super"
        };
        if let Some(name) = ident(at) {
            let mut path = format!("{head}::{name}");
            if is(at + 1, &Tok::PathSep) {
                if let Some(next) = ident(at + 2) {
                    path = format!("{path}::{next}");
                } else if is(at + 2, &Tok::Punct('{')) {
                    path = format!("{path}::{{..}}");
                }
            }
            record(name, path);
        } else if is(at, &Tok::Punct('{')) {
            // A group: the first name of each item at its top level.
            let mut level = 0;
            let mut j = at;
            let mut item_start = true;
            while j < toks.len() {
                match &toks[j].0 {
                    Tok::Punct('{') => {
                        level += 1;
                        item_start = level == 1;
                    }
                    Tok::Punct('}') => {
                        level -= 1;
                        if level == 0 {
                            break;
                        }
                    }
                    Tok::Punct(',') if level == 1 => item_start = true,
                    Tok::Ident(name) if item_start && level == 1 => {
                        record(name, format!("{head}::{{{name}, ..}}"));
                        item_start = false;
                    }
                    _ => item_start = false,
                }
                j += 1;
            }
        }
        k = at;
    }
    out
}

// -----------------------------------------------------------------------------
// The checks
// -----------------------------------------------------------------------------

struct House {
    layers: Vec<Vec<String>>,
    layer_of: BTreeMap<String, usize>,
    files: BTreeMap<String, PathBuf>,
    /// (importer file key, import), every import of every file.
    imports: Vec<(String, Import)>,
}

fn house() -> House {
    let dir = crate_dir();
    let lib_rs = read(&dir.join("src/lib.rs"));
    let layers = declared_layers(&lib_rs);
    let mut layer_of = BTreeMap::new();
    for (i, row) in layers.iter().enumerate() {
        for m in row {
            assert!(
                layer_of.insert(m.clone(), i).is_none(),
                "lib.rs's layer table lists `{m}` twice"
            );
        }
    }
    let files = module_files(&dir.join("src"), &lib_rs);
    let modules: BTreeSet<String> = files
        .keys()
        .map(|k| k.split('#').next().unwrap().to_string())
        .collect();
    let mut all = Vec::new();
    for (key, path) in &files {
        let me = key.split('#').next().unwrap();
        for imp in imports(&read(path), &modules) {
            if imp.module != me {
                all.push((key.clone(), imp));
            }
        }
    }
    House {
        layers,
        layer_of,
        files,
        imports: all,
    }
}

fn module_of(key: &str) -> &str {
    key.split('#').next().unwrap()
}

fn file_name(h: &House, key: &str) -> String {
    format!(
        "zonealloc/src/{}",
        h.files[key].file_name().unwrap().to_string_lossy()
    )
}

fn describe(h: &House, layer: usize) -> String {
    let names: Vec<String> = h.layers[layer].iter().map(|m| format!("`{m}`")).collect();
    format!("layer {} ({})", layer + 1, names.join(", "))
}

fn is_exception(from: &str, to: &str) -> bool {
    EXCEPTIONS
        .iter()
        .chain(OPEN)
        .any(|&(a, b, _)| a == from && b == to)
}

/// The upward imports of `h`, one message each.
fn upward_imports(h: &House) -> Vec<String> {
    let mut out = Vec::new();
    for (key, imp) in &h.imports {
        let from = module_of(key);
        let (Some(&lf), Some(&lt)) = (h.layer_of.get(from), h.layer_of.get(&imp.module)) else {
            continue;
        };
        if lt > lf && !is_exception(from, &imp.module) {
            out.push(format!(
                "{}:{} imports `{}` ({}): `{from}` is in {}, `{}` in {}, above it",
                file_name(h, key),
                imp.line,
                imp.module,
                imp.path,
                describe(h, lf),
                imp.module,
                describe(h, lt),
            ));
        }
    }
    out
}

#[test]
fn every_module_is_in_one_layer() {
    let h = house();
    let mut problems = Vec::new();
    for key in h.files.keys() {
        if !h.layer_of.contains_key(module_of(key)) {
            problems.push(format!(
                "{} is in no layer: add `{}` to the row it belongs to in lib.rs's layer \
                 table (and to docs/architecture.md's diagram)",
                file_name(&h, key),
                module_of(key)
            ));
        }
    }
    for m in h.layer_of.keys() {
        if !h.files.keys().any(|k| module_of(k) == m) {
            problems.push(format!(
                "lib.rs's layer table lists `{m}`, which has no file in zonealloc/src"
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let h = house();
    let up = upward_imports(&h);
    assert!(
        up.is_empty(),
        "\n{} import(s) run up the layers (lib.rs's layer table, lowest first):\n{}\n",
        up.len(),
        up.join("\n")
    );
}

#[test]
fn the_exceptions_are_still_needed_and_documented() {
    let h = house();
    let lib_rs = read(&crate_dir().join("src/lib.rs"));
    let page = read(&crate_dir().join("../docs/architecture.md"));
    let page = page.split_whitespace().collect::<Vec<_>>().join(" ");
    let made = |from: &str, to: &str| {
        h.imports
            .iter()
            .any(|(k, i)| module_of(k) == from && i.module == to)
    };
    for &(from, to, why) in EXCEPTIONS {
        assert!(
            made(from, to),
            "`{from}` no longer imports `{to}` ({why}): take the exception out"
        );
        assert!(
            lib_rs.contains(&format!("`{from}` names `{to}`")),
            "lib.rs's layer section does not say that `{from}` names `{to}` ({why})"
        );
    }
    for &(from, to, mend) in OPEN {
        assert!(
            made(from, to),
            "`{from}` no longer imports `{to}`: take it out of OPEN (it was: {mend})"
        );
        assert!(
            page.contains(&format!("`{from}` reads")) && page.contains(&format!("from `{to}`")),
            "docs/architecture.md does not say that `{from}` reads from `{to}` ({mend})"
        );
    }
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let h = house();
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (key, imp) in &h.imports {
        let from = module_of(key);
        if !is_exception(from, &imp.module) {
            edges.entry(from).or_default().insert(imp.module.as_str());
        }
    }
    // Each module's reach; a module that reaches itself is on a circle.
    let mut circles: BTreeSet<Vec<&str>> = BTreeSet::new();
    for &start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start];
        while let Some(m) = stack.pop() {
            for &n in edges.get(m).into_iter().flatten() {
                if seen.insert(n) {
                    stack.push(n);
                }
            }
        }
        if seen.contains(start) {
            let mut circle: Vec<&str> = seen
                .iter()
                .copied()
                .filter(|&m| reaches(&edges, m, start))
                .collect();
            circle.sort_unstable();
            circles.insert(circle);
        }
    }
    assert!(
        circles.is_empty(),
        "\nmodules that import each other in a circle:\n{}\n",
        circles
            .iter()
            .map(|c| c.join(", "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn reaches(edges: &BTreeMap<&str, BTreeSet<&str>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from];
    while let Some(m) = stack.pop() {
        if m == to {
            return true;
        }
        for &n in edges.get(m).into_iter().flatten() {
            if seen.insert(n) {
                stack.push(n);
            }
        }
    }
    false
}

#[test]
fn the_architecture_page_draws_the_same_layers() {
    let dir = crate_dir();
    let declared = declared_layers(&read(&dir.join("src/lib.rs")));
    let drawn = drawn_layers(&read(&dir.join("../docs/architecture.md")));
    let as_sets = |rows: &[Vec<String>]| -> Vec<BTreeSet<String>> {
        rows.iter().map(|r| r.iter().cloned().collect()).collect()
    };
    assert_eq!(
        as_sets(&drawn),
        as_sets(&declared),
        "docs/architecture.md's layer diagram (rows read bottom up) differs from lib.rs's \
         layer table"
    );
}

// -----------------------------------------------------------------------------
// The reader itself
// -----------------------------------------------------------------------------

#[test]
fn the_reader_finds_every_form_of_import() {
    let modules: BTreeSet<String> = ["zone", "pcp", "types", "frame", "gfp", "buddy", "fast"]
        .map(String::from)
        .into();
    let src = r#"
//! See [`crate::buddy::Thing`] and `crate::fast`.
use crate::zone::Zone;
use crate::{pcp::{self, PcpSlot}, types};
pub(crate) fn f() -> crate::frame::Word { let _ = "crate::buddy::x"; let _c = '"'; todo!() }
fn g<'a>(x: &'a u8) -> &'a u8 { super::gfp::touch(); x }
#[cfg(test)]
mod tests {
    use super::*;
    use super::super::fast::Buf;
}
"#;
    let got: Vec<(String, usize)> = imports(src, &modules)
        .into_iter()
        .map(|i| (i.module, i.line))
        .collect();
    let want: Vec<(String, usize)> = [
        ("zone", 3),
        ("pcp", 4),
        ("types", 4),
        ("frame", 5),
        ("gfp", 6),
        ("fast", 10),
    ]
    .map(|(m, l)| (m.to_string(), l))
    .into();
    assert_eq!(got, want);
}
