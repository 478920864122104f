//! The kernel's symbolic `gfp_flags` (as `show_gfp_flags()` prints them) to `zonealloc::Gfp`.
//!
//! Bottom layer, pure functions. The tracepoints print flags greedily as composite
//! names first (`GFP_HIGHUSER_MOVABLE`), then single bits (`__GFP_ZERO`), then any
//! bits left as hex (`0x4000000`), joined by `|`; zero prints as `none`. Composite
//! names expand to their Linux 6.18 definitions (`include/linux/gfp_types.h`).
//!
//! Three kinds of symbol:
//! * flags zonealloc has: mapped bit for bit (zonealloc uses Linux's values);
//! * flags Linux has and zonealloc ignores because they change nothing about which
//!   block is chosen (`__GFP_HARDWALL`, `__GFP_ACCOUNT`, `__GFP_WRITE`, `__GFP_NOFAIL`,
//!   ...): accepted and dropped;
//! * anything else: reported as unknown (the caller counts it) and dropped.
//!
//! The trace's `migratetype` field, when present, overrides the mobility bits:
//! `effective_gfp()`.

use zonealloc::{Gfp, Migratetype};

/// `__GFP_RECLAIM`: both reclaim bits.
const RECLAIM: Gfp = Gfp::DIRECT_RECLAIM.union(Gfp::KSWAPD_RECLAIM);
/// `GFP_NOIO`.
const NOIO: Gfp = RECLAIM;
/// `GFP_NOFS`.
const NOFS: Gfp = RECLAIM.union(Gfp::IO);
/// `GFP_HIGHUSER`: `GFP_USER | __GFP_HIGHMEM` (`__GFP_HARDWALL` has no zonealloc bit).
const HIGHUSER: Gfp = Gfp::USER.union(Gfp::HIGHMEM);
/// `GFP_TRANSHUGE_LIGHT`: `(GFP_HIGHUSER_MOVABLE | __GFP_COMP | __GFP_NOMEMALLOC |
/// __GFP_NOWARN) & ~__GFP_RECLAIM`.
const TRANSHUGE_LIGHT: Gfp = Gfp::from_bits(
    (Gfp::HIGHUSER_MOVABLE.bits() | Gfp::COMP.bits() | Gfp::NOMEMALLOC.bits() | Gfp::NOWARN.bits())
        & !RECLAIM.bits(),
);

/// Every zonealloc bit with a Linux counterpart: what a raw hex value keeps.
const KNOWN_BITS: u32 = Gfp::DMA.bits()
    | Gfp::HIGHMEM.bits()
    | Gfp::DMA32.bits()
    | Gfp::MOVABLE.bits()
    | Gfp::RECLAIMABLE.bits()
    | Gfp::HIGH.bits()
    | Gfp::IO.bits()
    | Gfp::FS.bits()
    | Gfp::ZERO.bits()
    | Gfp::DIRECT_RECLAIM.bits()
    | Gfp::KSWAPD_RECLAIM.bits()
    | Gfp::NOWARN.bits()
    | Gfp::NORETRY.bits()
    | Gfp::MEMALLOC.bits()
    | Gfp::COMP.bits()
    | Gfp::NOMEMALLOC.bits()
    | Gfp::THISNODE.bits();

/// What one `|`-separated symbol means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GfpSymbol {
    /// Flags zonealloc acts on (possibly empty, for symbols it ignores).
    Known(Gfp),
    /// A name this table does not know.
    Unknown,
}

/// The meaning of one symbol: a composite `GFP_*`, a single `__GFP_*`, a hex or
/// decimal number, or `none`.
pub fn gfp_symbol(sym: &str) -> GfpSymbol {
    let g = match sym {
        "none" | "0" => Gfp::empty(),
        // Composite names (gfp_types.h, Linux 6.18).
        "GFP_KERNEL" => Gfp::KERNEL,
        "GFP_KERNEL_ACCOUNT" => Gfp::KERNEL,
        "GFP_ATOMIC" => Gfp::ATOMIC,
        // 6.16+: GFP_NOWAIT is __GFP_KSWAPD_RECLAIM | __GFP_NOWARN.
        "GFP_NOWAIT" => Gfp::NOWAIT.union(Gfp::NOWARN),
        "GFP_NOIO" => NOIO,
        "GFP_NOFS" => NOFS,
        "GFP_USER" => Gfp::USER,
        "GFP_DMA" => Gfp::DMA,
        "GFP_DMA32" => Gfp::DMA32,
        "GFP_HIGHUSER" => HIGHUSER,
        "GFP_HIGHUSER_MOVABLE" => Gfp::HIGHUSER_MOVABLE,
        "GFP_TRANSHUGE_LIGHT" => TRANSHUGE_LIGHT,
        "GFP_TRANSHUGE" => TRANSHUGE_LIGHT.union(Gfp::DIRECT_RECLAIM),
        // Single bits zonealloc has.
        "__GFP_DMA" => Gfp::DMA,
        "__GFP_HIGHMEM" => Gfp::HIGHMEM,
        "__GFP_DMA32" => Gfp::DMA32,
        "__GFP_MOVABLE" => Gfp::MOVABLE,
        "__GFP_RECLAIMABLE" => Gfp::RECLAIMABLE,
        "__GFP_HIGH" => Gfp::HIGH,
        "__GFP_IO" => Gfp::IO,
        "__GFP_FS" => Gfp::FS,
        "__GFP_ZERO" => Gfp::ZERO,
        "__GFP_DIRECT_RECLAIM" => Gfp::DIRECT_RECLAIM,
        "__GFP_KSWAPD_RECLAIM" => Gfp::KSWAPD_RECLAIM,
        "__GFP_RECLAIM" => RECLAIM,
        "__GFP_NOWARN" => Gfp::NOWARN,
        "__GFP_NORETRY" => Gfp::NORETRY,
        "__GFP_COMP" => Gfp::COMP,
        "__GFP_MEMALLOC" => Gfp::MEMALLOC,
        "__GFP_NOMEMALLOC" => Gfp::NOMEMALLOC,
        "__GFP_THISNODE" => Gfp::THISNODE,
        // Linux flags that do not change which block is chosen: accepted, dropped.
        "__GFP_HARDWALL"
        | "__GFP_ACCOUNT"
        | "__GFP_WRITE"
        | "__GFP_NOFAIL"
        | "__GFP_RETRY_MAYFAIL"
        | "__GFP_NOLOCKDEP"
        | "__GFP_ZEROTAGS"
        | "__GFP_SKIP_ZERO"
        | "__GFP_SKIP_KASAN"
        | "__GFP_NO_OBJ_EXT"
        | "__GFP_COLD"
        | "__GFP_NOTRACK"
        | "__GFP_OTHER_NODE"
        | "__GFP_ATOMIC"
        | "__GFP_UNMAPPED" => Gfp::empty(),
        _ => return number(sym).map_or(GfpSymbol::Unknown, GfpSymbol::Known),
    };
    GfpSymbol::Known(g)
}

/// A raw flags value (`0x...` or decimal), keeping the bits zonealloc knows.
fn number(sym: &str) -> Option<Gfp> {
    let v = match sym.strip_prefix("0x").or_else(|| sym.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => sym.parse::<u64>().ok()?,
    };
    Some(Gfp::from_bits(v as u32 & KNOWN_BITS))
}

/// Parses a whole `gfp_flags` value. Unknown symbols are passed to `unknown` and
/// dropped.
pub fn parse_gfp_flags(text: &str, mut unknown: impl FnMut(&str)) -> Gfp {
    let mut g = Gfp::empty();
    for sym in text.split('|').filter(|s| !s.is_empty()) {
        match gfp_symbol(sym) {
            GfpSymbol::Known(f) => g |= f,
            GfpSymbol::Unknown => unknown(sym),
        }
    }
    g
}

/// The flags a replay uses: `gfp` with its mobility bits replaced by the trace's
/// `migratetype` when it names one of the three ordinary types (the tracepoint prints
/// the type the allocator actually used, after `gfp_migratetype()` and any override).
pub fn effective_gfp(gfp: Gfp, migratetype: Option<Migratetype>) -> Gfp {
    let mobility = Gfp::MOVABLE | Gfp::RECLAIMABLE;
    let base = gfp & !mobility;
    match migratetype {
        Some(Migratetype::Unmovable) => base,
        Some(Migratetype::Movable) => base | Gfp::MOVABLE,
        Some(Migratetype::Reclaimable) => base | Gfp::RECLAIMABLE,
        _ => gfp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn parses(text: &str, want: Gfp) {
        let mut bad = Vec::new();
        let g = parse_gfp_flags(text, |s| bad.push(s.to_string()));
        assert!(bad.is_empty(), "{text}: unknown {bad:?}");
        assert_eq!(g, want, "{text}");
    }

    #[test]
    fn trace_flags_map_to_zonealloc_bits() {
        parses(
            "GFP_HIGHUSER_MOVABLE|__GFP_ZERO|__GFP_COMP",
            Gfp::HIGHUSER_MOVABLE | Gfp::ZERO | Gfp::COMP,
        );
        parses(
            "GFP_KERNEL_ACCOUNT|__GFP_ZERO|__GFP_COMP",
            Gfp::KERNEL | Gfp::ZERO | Gfp::COMP,
        );
        parses("GFP_NOWAIT", Gfp::NOWAIT | Gfp::NOWARN);
        parses(
            "GFP_NOFS|__GFP_RECLAIMABLE|__GFP_NOWARN|__GFP_NORETRY|__GFP_COMP",
            NOFS | Gfp::RECLAIMABLE | Gfp::NOWARN | Gfp::NORETRY | Gfp::COMP,
        );
        parses("GFP_ATOMIC|__GFP_DMA32", Gfp::ATOMIC | Gfp::DMA32);
        parses("GFP_HIGHUSER|__GFP_ACCOUNT", HIGHUSER);
        parses("none", Gfp::empty());
        parses("GFP_KERNEL|0x100", Gfp::KERNEL | Gfp::ZERO);
    }

    #[test]
    fn unknown_symbols_are_reported_and_dropped() {
        let mut bad = Vec::new();
        let g = parse_gfp_flags("GFP_KERNEL|__GFP_FROBNICATE", |s| bad.push(s.to_string()));
        assert_eq!(g, Gfp::KERNEL);
        assert_eq!(bad, ["__GFP_FROBNICATE"]);
    }

    #[test]
    fn migratetype_field_decides_mobility() {
        let g = Gfp::HIGHUSER_MOVABLE;
        assert_eq!(
            effective_gfp(g, Some(Migratetype::Unmovable)).migratetype(),
            Migratetype::Unmovable
        );
        assert_eq!(
            effective_gfp(Gfp::KERNEL, Some(Migratetype::Reclaimable)).migratetype(),
            Migratetype::Reclaimable
        );
        assert_eq!(effective_gfp(g, None), g);
    }
}
