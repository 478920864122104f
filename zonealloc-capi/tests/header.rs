//! Keeps `include/zonealloc.h` in step with the library.
//!
//! The header is written by hand, for its documentation; this test reads it and
//! the crate's sources and fails on any drift:
//!
//! * every `extern "C"` function of `src/` is declared in the header, and every
//!   declaration has one, with the same parameter names and types and the same
//!   return type (C types translated to Rust's: `const uint64_t *` is
//!   `*const u64`, `struct zonealloc **` is `*mut *mut zonealloc`);
//! * every struct of the header is a `#[repr(C)]` struct of `src/` with the same
//!   fields, in the same order, of the same types;
//! * the status codes, zone types and backings are the library's, name for name
//!   and value for value, read from the compiled crate (not its source), and
//!   every variant of every core error type has a code named after it;
//! * the GFP flags are `zonealloc_core::Gfp`'s values, and every single-bit
//!   flag the core names has a header constant;
//! * every function has a kernel-doc comment naming it, each parameter, its
//!   errors and its threads.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ffi::CStr;
use std::fs;
use std::path::Path;

use zonealloc::{
    page_shift, zone_type_c_name, zonealloc_strerror, Status, BACKINGS, GFP_FLAGS, ZONEALLOC_NONE,
    ZONEALLOC_PFN_NONE, ZONEALLOC_VALUE_NONE,
};
use zonealloc_core::{AllocError, ConfigError, ContigError, FreeError, Gfp, Order, Pfn, ZoneType};

// -----------------------------------------------------------------------------
// Reading the header
// -----------------------------------------------------------------------------

/// A function declaration of the header.
#[derive(Debug)]
struct CFn {
    ret: String,
    params: Vec<(String, String)>,
    doc: String,
}

/// What the header declares.
#[derive(Debug, Default)]
struct Header {
    defines: BTreeMap<String, String>,
    enums: BTreeMap<String, Vec<(String, i64)>>,
    structs: BTreeMap<String, Vec<(String, String)>>,
    opaque: BTreeSet<String>,
    functions: BTreeMap<String, CFn>,
}

fn header_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/zonealloc.h");
    fs::read_to_string(path).expect("include/zonealloc.h")
}

/// Collapses runs of whitespace to one space and trims.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Splits `"TYPE NAME"` (a parameter or a field) at its last identifier.
fn split_decl(decl: &str) -> (String, String) {
    let decl = squash(decl);
    let at = decl
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    (squash(&decl[..at]), decl[at..].to_string())
}

fn parse_int(v: &str) -> i64 {
    let v = v.trim().trim_end_matches(['u', 'U', 'l', 'L']);
    let (neg, v) = v.strip_prefix('-').map_or((false, v), |r| (true, r));
    let n = match v.strip_prefix("0x") {
        Some(hex) => i64::from_str_radix(hex, 16),
        None => v.parse(),
    }
    .unwrap_or_else(|_| panic!("not an integer literal: {v:?}"));
    if neg {
        -n
    } else {
        n
    }
}

fn parse_header(src: &str) -> Header {
    let mut h = Header::default();
    // Preprocessor lines: keep the defines, drop C++'s `extern "C"` wrapper.
    let mut code = String::new();
    let mut skipping = 0;
    for line in src.lines() {
        let t = line.trim_start();
        if t.starts_with("#ifdef __cplusplus") {
            skipping += 1;
        } else if skipping > 0 && t.starts_with("#endif") {
            skipping -= 1;
        } else if skipping == 0 {
            if let Some(rest) = t.strip_prefix("#define ") {
                let rest = rest.split("/*").next().unwrap();
                let mut it = rest.splitn(2, char::is_whitespace);
                let name = it.next().unwrap().to_string();
                let value = it.next().map(str::trim).unwrap_or("").to_string();
                if !value.is_empty() {
                    h.defines.insert(name, value);
                }
            } else if !t.starts_with('#') {
                code.push_str(line);
            }
        }
        code.push('\n');
    }
    // Statements at brace depth 0, each with the `/** */` comment before it.
    let b = code.as_bytes();
    let (mut i, mut depth) = (0, 0);
    let (mut stmt, mut doc, mut stmts) = (String::new(), String::new(), Vec::new());
    while i < b.len() {
        if code[i..].starts_with("/*") {
            let end = code[i + 2..].find("*/").expect("unterminated comment") + i + 4;
            if code[i..].starts_with("/**") && stmt.trim().is_empty() {
                doc = code[i..end].to_string();
            }
            i = end;
            continue;
        }
        if code[i..].starts_with("//") {
            i += code[i..].find('\n').unwrap_or(b.len() - i);
            continue;
        }
        let c = b[i] as char;
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ';' if depth == 0 => {
                stmts.push((squash(&stmt), std::mem::take(&mut doc)));
                stmt.clear();
                i += 1;
                continue;
            }
            _ => {}
        }
        stmt.push(c);
        i += 1;
    }
    assert!(
        stmt.trim().is_empty(),
        "text after the last statement: {stmt:?}"
    );
    for (s, doc) in stmts {
        if let Some(rest) = s.strip_prefix("enum ") {
            let (name, body) = rest.split_once('{').expect("enum body");
            let body = body.trim_end().strip_suffix('}').expect("enum end");
            let entries = body
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(|e| {
                    let (n, v) = e.split_once('=').expect("enum entries have values");
                    (n.trim().to_string(), parse_int(v))
                })
                .collect();
            h.enums.insert(name.trim().to_string(), entries);
        } else if let Some(rest) = s.strip_prefix("struct ").filter(|r| !r.contains('(')) {
            match rest.split_once('{') {
                None => {
                    h.opaque.insert(rest.trim().to_string());
                }
                Some((name, body)) => {
                    let body = body.trim_end().strip_suffix('}').expect("struct end");
                    let fields = body
                        .split(';')
                        .filter(|f| !f.trim().is_empty())
                        .map(|f| {
                            let (t, n) = split_decl(f);
                            (n, t)
                        })
                        .collect();
                    h.structs.insert(name.trim().to_string(), fields);
                }
            }
        } else {
            let (head, rest) = s
                .split_once('(')
                .unwrap_or_else(|| panic!("statement {s:?}"));
            let params = rest.trim_end().strip_suffix(')').expect("prototype end");
            let (ret, name) = split_decl(head);
            let params = if params.trim() == "void" {
                Vec::new()
            } else {
                params
                    .split(',')
                    .map(|p| {
                        let (t, n) = split_decl(p);
                        (n, t)
                    })
                    .collect()
            };
            let f = CFn { ret, params, doc };
            assert!(
                h.functions.insert(name.clone(), f).is_none(),
                "{name} twice"
            );
        }
    }
    h
}

/// A C type as the Rust type it must be declared with.
fn c_to_rust(c: &str) -> String {
    let spaced = c.replace('*', " * ");
    let toks: Vec<&str> = spaced.split_whitespace().collect();
    let stars = toks.iter().filter(|&&t| t == "*").count();
    let constant = toks.first() == Some(&"const");
    let base: Vec<&str> = toks
        .iter()
        .copied()
        .filter(|&t| t != "*" && t != "const" && t != "struct")
        .collect();
    assert_eq!(base.len(), 1, "unexpected C type {c:?}");
    let base = match base[0] {
        "uint8_t" => "u8",
        "uint16_t" => "u16",
        "uint32_t" => "u32",
        "uint64_t" => "u64",
        "int32_t" => "i32",
        "int64_t" => "i64",
        "size_t" => "usize",
        "int" => "c_int",
        "char" => "c_char",
        "void" if stars == 0 => "()",
        "void" => "c_void",
        other => other,
    };
    let mut t = base.to_string();
    for k in 0..stars {
        let q = if k == 0 && constant {
            "*const "
        } else {
            "*mut "
        };
        t = format!("{q}{t}");
    }
    t
}

// -----------------------------------------------------------------------------
// Reading the crate's sources
// -----------------------------------------------------------------------------

/// An `extern "C"` function of the crate.
#[derive(Debug)]
struct RustFn {
    file: String,
    no_mangle: bool,
    ret: String,
    params: Vec<(String, String)>,
}

struct Sources {
    functions: BTreeMap<String, RustFn>,
    structs: BTreeMap<String, Vec<(String, String)>>,
}

fn rust_type(t: &str) -> String {
    squash(
        &t.replace("core::ffi::", "")
            .replace("std::ffi::", "")
            .replace("std::os::raw::", ""),
    )
}

fn read_sources() -> Sources {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut s = Sources {
        functions: BTreeMap::new(),
        structs: BTreeMap::new(),
    };
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = fs::read_to_string(&path).unwrap();
        let mut from = 0;
        while let Some(at) = text[from..].find("extern \"C\" fn ") {
            let at = from + at;
            let before: Vec<&str> = text[..at].lines().rev().take(3).collect();
            let name_start = at + "extern \"C\" fn ".len();
            let open = name_start + text[name_start..].find('(').unwrap();
            let name = text[name_start..open].trim().to_string();
            let close = open + text[open..].find(')').unwrap();
            let params = text[open + 1..close]
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (n, t) = p.split_once(':').expect("name: type");
                    (n.trim().to_string(), rust_type(t))
                })
                .collect();
            let body = close + text[close..].find('{').unwrap();
            let ret = text[close + 1..body]
                .trim()
                .strip_prefix("->")
                .map_or("()".to_string(), rust_type);
            let f = RustFn {
                file: file.clone(),
                no_mangle: before.iter().any(|l| l.trim() == "#[unsafe(no_mangle)]"),
                ret,
                params,
            };
            assert!(
                s.functions.insert(name.clone(), f).is_none(),
                "{name} twice"
            );
            from = body;
        }
        let mut from = 0;
        while let Some(at) = text[from..].find("#[repr(C)]") {
            let at = from + at;
            let def = at + text[at..].find("pub struct ").unwrap() + "pub struct ".len();
            let open = def + text[def..].find('{').unwrap();
            let close = open + text[open..].find('}').unwrap();
            let name = text[def..open].trim().to_string();
            let fields = text[open + 1..close]
                .lines()
                .map(str::trim)
                .filter(|l| l.starts_with("pub "))
                .map(|l| {
                    let l = l.trim_start_matches("pub ").trim_end_matches(',');
                    let (n, t) = l.split_once(':').unwrap();
                    (n.trim().to_string(), rust_type(t))
                })
                .collect();
            s.structs.insert(name, fields);
            from = close;
        }
    }
    s
}

// -----------------------------------------------------------------------------
// Functions and structs
// -----------------------------------------------------------------------------

#[test]
fn every_exported_function_is_declared_alike() {
    let h = parse_header(&header_text());
    let src = read_sources();
    let declared: BTreeSet<_> = h.functions.keys().cloned().collect();
    let defined: BTreeSet<_> = src.functions.keys().cloned().collect();
    assert_eq!(
        declared.difference(&defined).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "declared in zonealloc.h, defined nowhere in src/"
    );
    assert_eq!(
        defined.difference(&declared).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "defined in src/, missing from zonealloc.h"
    );
    for (name, c) in &h.functions {
        let r = &src.functions[name];
        assert!(
            name.starts_with("zonealloc_"),
            "{name}: not in the namespace"
        );
        assert!(r.no_mangle, "{name} ({}): no #[unsafe(no_mangle)]", r.file);
        assert_eq!(c_to_rust(&c.ret), r.ret, "{name}: return type");
        let c_params: Vec<_> = c
            .params
            .iter()
            .map(|(n, t)| (n.clone(), c_to_rust(t)))
            .collect();
        assert_eq!(c_params, r.params, "{name} ({}): parameters", r.file);
    }
    println!(
        "{} functions: the same names, parameters and return types in zonealloc.h and src/",
        h.functions.len()
    );
}

#[test]
fn every_struct_has_the_same_fields_in_the_same_order() {
    let h = parse_header(&header_text());
    let src = read_sources();
    assert_eq!(
        h.structs.keys().collect::<Vec<_>>(),
        src.structs.keys().collect::<Vec<_>>(),
        "the header's structs and the crate's #[repr(C)] structs"
    );
    for (name, fields) in &h.structs {
        let c: Vec<_> = fields
            .iter()
            .map(|(n, t)| (n.clone(), c_to_rust(t)))
            .collect();
        assert_eq!(c, src.structs[name], "struct {name}");
    }
    assert_eq!(
        h.opaque.iter().collect::<Vec<_>>(),
        ["zonealloc"],
        "the one opaque type is the handle"
    );
}

#[test]
fn every_function_has_its_kernel_doc() {
    let h = parse_header(&header_text());
    for (name, f) in &h.functions {
        let doc = &f.doc;
        assert!(
            doc.contains(&format!("{name} - ")),
            "{name}: no kernel-doc comment naming it"
        );
        for (p, _) in &f.params {
            assert!(doc.contains(&format!("@{p}:")), "{name}: @{p} undocumented");
        }
        for section in ["Errors:", "Threads:"] {
            assert!(doc.contains(section), "{name}: no {section:?} section");
        }
    }
}

// -----------------------------------------------------------------------------
// Codes and constants
// -----------------------------------------------------------------------------

#[test]
fn status_codes_are_the_librarys() {
    let h = parse_header(&header_text());
    let header: Vec<(String, i64)> = h.enums["zonealloc_error"].clone();
    let library: Vec<(String, i64)> = Status::ALL
        .iter()
        .map(|s| (s.c_name().to_string(), i64::from(s.code())))
        .collect();
    assert_eq!(header, library, "enum zonealloc_error");
    let codes: HashSet<_> = Status::ALL.iter().map(|s| s.code()).collect();
    assert_eq!(codes.len(), Status::ALL.len(), "codes are distinct");
    assert!(Status::ALL
        .iter()
        .all(|s| (s.code() == 0) == (*s == Status::Ok) && s.code() <= 0));
    let mut texts = HashSet::new();
    for s in Status::ALL {
        // SAFETY: `zonealloc_strerror` returns a static NUL-terminated string.
        let text = unsafe { CStr::from_ptr(zonealloc_strerror(s.code())) };
        assert_eq!(text, s.message());
        assert!(
            texts.insert(text),
            "{}: its text is another code's",
            s.c_name()
        );
    }
    // SAFETY: as above.
    let unknown = unsafe { CStr::from_ptr(zonealloc_strerror(12345)) };
    assert!(!texts.contains(unknown));
    println!(
        "{} status codes: names, values and texts agree",
        Status::ALL.len()
    );
}

/// `AlreadyFree` -> `ALREADY_FREE`.
fn screaming_snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// The variant's name from its `Debug` form (`NoMemory { order: .. }`).
fn variant_name(debug: String) -> String {
    debug
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect()
}

// One value of every variant of each core error type. The matches have no
// wildcard, so a variant added to the core stops this test from compiling
// until it is listed here (as it stops `Status::from` in the library).
fn every_alloc_error() -> Vec<AllocError> {
    let all = vec![
        AllocError::NoMemory { order: Order(3) },
        AllocError::InvalidOrder(Order(30)),
        AllocError::InvalidNode(7),
        AllocError::NoEligibleZone,
    ];
    for e in &all {
        match e {
            AllocError::NoMemory { .. }
            | AllocError::InvalidOrder(_)
            | AllocError::InvalidNode(_)
            | AllocError::NoEligibleZone => {}
        }
    }
    all
}

fn every_free_error() -> Vec<FreeError> {
    let p = Pfn(0x1234);
    let all = vec![
        FreeError::OutOfRange(p),
        FreeError::Hole(p),
        FreeError::TailPage(p),
        FreeError::AlreadyFree(p),
        FreeError::WrongOrder {
            pfn: p,
            given: Order(1),
            actual: Order(2),
        },
        FreeError::Misaligned {
            pfn: p,
            order: Order(3),
        },
        FreeError::InvalidOrder(Order(30)),
        FreeError::Busy(p),
        FreeError::RefcountOverflow(p),
        FreeError::CrossesZone(p),
        FreeError::BadPage(p),
        FreeError::ForeignAddress(0xdead_0000),
        FreeError::Guarded(p),
    ];
    for e in &all {
        match e {
            FreeError::OutOfRange(_)
            | FreeError::Hole(_)
            | FreeError::TailPage(_)
            | FreeError::AlreadyFree(_)
            | FreeError::WrongOrder { .. }
            | FreeError::Misaligned { .. }
            | FreeError::InvalidOrder(_)
            | FreeError::Busy(_)
            | FreeError::RefcountOverflow(_)
            | FreeError::CrossesZone(_)
            | FreeError::BadPage(_)
            | FreeError::ForeignAddress(_)
            | FreeError::Guarded(_) => {}
        }
    }
    all
}

fn every_contig_error() -> Vec<ContigError> {
    let p = Pfn(0x1234);
    let all = vec![
        ContigError::InvalidRange,
        ContigError::CrossesZone(p),
        ContigError::Busy(p),
        ContigError::Isolated(p),
        ContigError::NoMemory,
    ];
    for e in &all {
        match e {
            ContigError::InvalidRange
            | ContigError::CrossesZone(_)
            | ContigError::Busy(_)
            | ContigError::Isolated(_)
            | ContigError::NoMemory => {}
        }
    }
    all
}

fn every_config_error() -> Vec<ConfigError> {
    let z = ZoneType::Normal;
    let all = vec![
        ConfigError::PageShift(40),
        ConfigError::MaxOrder(Order(30)),
        ConfigError::PageblockOrder(Order(12)),
        ConfigError::NoMemory,
        ConfigError::ZoneOrder { node: 1 },
        ConfigError::ZoneTooLarge {
            node: 0,
            zone_type: z,
        },
        ConfigError::PfnTooLarge {
            node: 0,
            zone_type: z,
        },
        ConfigError::HoleOutsideZone {
            node: 0,
            zone_type: z,
        },
        ConfigError::Overlap,
        ConfigError::Backend,
        ConfigError::NrCpus(5000),
        ConfigError::MinFreeKbytes(u64::MAX),
        ConfigError::WatermarkScaleFactor(0),
        ConfigError::WatermarkBoostFactor(u64::MAX),
        ConfigError::Pcp("batch", u64::MAX),
        ConfigError::Cma {
            area: 0,
            why: "overlaps a hole",
        },
        ConfigError::Metadata { bytes: 1 << 50 },
        ConfigError::Numa("distance"),
        ConfigError::Reserved(Pfn(9)),
    ];
    for e in &all {
        match e {
            ConfigError::PageShift(_)
            | ConfigError::MaxOrder(_)
            | ConfigError::PageblockOrder(_)
            | ConfigError::NoMemory
            | ConfigError::ZoneOrder { .. }
            | ConfigError::ZoneTooLarge { .. }
            | ConfigError::PfnTooLarge { .. }
            | ConfigError::HoleOutsideZone { .. }
            | ConfigError::Overlap
            | ConfigError::Backend
            | ConfigError::NrCpus(_)
            | ConfigError::MinFreeKbytes(_)
            | ConfigError::WatermarkScaleFactor(_)
            | ConfigError::WatermarkBoostFactor(_)
            | ConfigError::Pcp(..)
            | ConfigError::Cma { .. }
            | ConfigError::Metadata { .. }
            | ConfigError::Numa(_)
            | ConfigError::Reserved(_) => {}
        }
    }
    all
}

#[test]
fn every_core_error_variant_has_a_code_of_its_own_named_after_it() {
    let mapped: Vec<(String, Status)> = every_alloc_error()
        .into_iter()
        .map(|e| {
            (
                format!("ALLOC_{}", screaming_snake(&variant_name(format!("{e:?}")))),
                e.into(),
            )
        })
        .chain(every_free_error().into_iter().map(|e| {
            (
                format!("FREE_{}", screaming_snake(&variant_name(format!("{e:?}")))),
                e.into(),
            )
        }))
        .chain(every_contig_error().into_iter().map(|e| {
            (
                format!(
                    "CONTIG_{}",
                    screaming_snake(&variant_name(format!("{e:?}")))
                ),
                e.into(),
            )
        }))
        .chain(every_config_error().into_iter().map(|e| {
            (
                format!(
                    "CONFIG_{}",
                    screaming_snake(&variant_name(format!("{e:?}")))
                ),
                e.into(),
            )
        }))
        .collect();
    let mut seen = HashSet::new();
    for (name, status) in &mapped {
        assert_eq!(status.c_name(), format!("ZONEALLOC_ERR_{name}"));
        assert!(seen.insert(*status), "{name}: code shared");
    }
    // Every code but the interface's own comes from exactly one variant.
    let own = [
        Status::Ok,
        Status::BadHandle,
        Status::NullPointer,
        Status::InvalidArgument,
        Status::Panic,
        Status::NoAddress,
        Status::HostMemory,
        Status::Invariant,
    ];
    for s in Status::ALL {
        assert!(
            seen.contains(s) != own.contains(s),
            "{}: neither the interface's nor one variant's",
            s.c_name()
        );
    }
    println!(
        "{} core error variants, each with its own code",
        mapped.len()
    );
}

/// The header's `#define`s with `prefix`, as numbers.
fn defines_with(h: &Header, prefix: &str) -> BTreeMap<String, u64> {
    h.defines
        .iter()
        .filter_map(|(n, v)| Some((n.strip_prefix(prefix)?.to_string(), v)))
        .map(|(n, v)| {
            let v = match v.as_str() {
                "UINT64_MAX" => u64::MAX,
                "UINT32_MAX" => u64::from(u32::MAX),
                v => u64::try_from(parse_int(v)).unwrap(),
            };
            (n, v)
        })
        .collect()
}

#[test]
fn gfp_flags_are_the_cores() {
    let h = parse_header(&header_text());
    let header = defines_with(&h, "ZONEALLOC_GFP_");
    let library: BTreeMap<String, u64> = GFP_FLAGS
        .iter()
        .map(|&(n, v)| (n.to_string(), u64::from(v)))
        .collect();
    assert_eq!(header, library);
    // Every single-bit flag the core has a name for (its `Debug` names them).
    for bit in 0..32 {
        let debug = format!("{:?}", Gfp::from_bits(1 << bit));
        let name = debug.trim_start_matches("Gfp(").trim_end_matches(')');
        if !name.is_empty() {
            assert_eq!(
                header.get(name),
                Some(&(1u64 << bit)),
                "the core's flag {name} (bit {bit}) is not ZONEALLOC_GFP_{name}"
            );
        }
    }
}

#[test]
fn zone_types_backings_and_sentinels_are_the_librarys() {
    let h = parse_header(&header_text());
    let zones: Vec<(String, i64)> = ZoneType::ALL
        .iter()
        .map(|&t| (zone_type_c_name(t), t.idx() as i64))
        .collect();
    assert_eq!(h.enums["zonealloc_zone_type"], zones);
    let backings: Vec<(String, i64)> = BACKINGS
        .iter()
        .map(|&(n, v)| (n.to_string(), i64::from(v)))
        .collect();
    assert_eq!(h.enums["zonealloc_backing"], backings);
    let d = defines_with(&h, "ZONEALLOC_");
    assert_eq!(d["PFN_NONE"], ZONEALLOC_PFN_NONE);
    assert_eq!(d["VALUE_NONE"], ZONEALLOC_VALUE_NONE);
    assert_eq!(d["NONE"], u64::from(ZONEALLOC_NONE));
    assert_eq!(d["PAGE_SHIFT"], u64::from(page_shift()));
    assert_eq!(
        h.enums.keys().collect::<Vec<_>>(),
        [
            "zonealloc_backing",
            "zonealloc_error",
            "zonealloc_zone_type"
        ]
    );
}

#[test]
fn the_parser_reads_what_it_should() {
    // Guards the guards: a header the parser misread would pass vacuously.
    let h = parse_header(&header_text());
    assert!(h.functions.len() >= 30, "{} functions", h.functions.len());
    assert!(h.structs.len() >= 5);
    assert!(h.defines.len() >= 25);
    assert_eq!(c_to_rust("struct zonealloc **"), "*mut *mut zonealloc");
    assert_eq!(c_to_rust("const struct zonealloc *"), "*const zonealloc");
    assert_eq!(c_to_rust("void **"), "*mut *mut c_void");
    assert_eq!(c_to_rust("const char *"), "*const c_char");
    assert_eq!(c_to_rust("int64_t"), "i64");
    assert_eq!(
        split_decl("const uint64_t *pfns"),
        ("const uint64_t *".into(), "pfns".into())
    );
}
