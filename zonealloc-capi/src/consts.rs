//! The constants of `zonealloc.h`: GFP flags, zone types, backings, sentinels.
//!
//! Each is taken from the core (`Gfp`, `ZoneType`, `Config::default()`), never
//! restated, and `tests/header.rs` checks that the header's literals equal them.
//! Nothing here is called at run time but the conversions at the bottom.

use zonealloc_core::{Gfp, ZoneType};

/// "No frame": an empty slot of `zonealloc_alloc_pages_bulk`'s array, or no frame
/// in `struct zonealloc_error_info`. No zone reaches it: `Config::validate` keeps
/// every frame's byte address within 64 bits.
pub const ZONEALLOC_PFN_NONE: u64 = u64::MAX;

/// "No value" in `struct zonealloc_error_info::value`.
pub const ZONEALLOC_VALUE_NONE: u64 = u64::MAX;

/// "None" in a 32-bit field of `struct zonealloc_error_info`.
pub const ZONEALLOC_NONE: u32 = u32::MAX;

/// Frames are abstract numbers, with no memory behind them
/// (`ZoneAllocator::new`).
pub const ZONEALLOC_BACKING_FRAMES: u32 = 0;

/// Frames are pages of an anonymous mapping the allocator makes and owns
/// (`ZoneAllocator::with_arena`); `zonealloc_page_address` gives their addresses.
pub const ZONEALLOC_BACKING_ARENA: u32 = 1;

/// The backings, as the header's `enum zonealloc_backing` names them.
pub const BACKINGS: &[(&str, u32)] = &[
    ("ZONEALLOC_BACKING_FRAMES", ZONEALLOC_BACKING_FRAMES),
    ("ZONEALLOC_BACKING_ARENA", ZONEALLOC_BACKING_ARENA),
];

/// log2 of the page size: the C configuration keeps the core's default.
pub fn page_shift() -> u8 {
    zonealloc_core::Config::default().page_shift
}

/// The GFP flags and their combinations, as the header names them
/// (`ZONEALLOC_GFP_<name>`), with the core's values.
pub const GFP_FLAGS: &[(&str, u32)] = &[
    ("DMA", Gfp::DMA.bits()),
    ("HIGHMEM", Gfp::HIGHMEM.bits()),
    ("DMA32", Gfp::DMA32.bits()),
    ("MOVABLE", Gfp::MOVABLE.bits()),
    ("RECLAIMABLE", Gfp::RECLAIMABLE.bits()),
    ("HIGH", Gfp::HIGH.bits()),
    ("IO", Gfp::IO.bits()),
    ("FS", Gfp::FS.bits()),
    ("ZERO", Gfp::ZERO.bits()),
    ("DIRECT_RECLAIM", Gfp::DIRECT_RECLAIM.bits()),
    ("KSWAPD_RECLAIM", Gfp::KSWAPD_RECLAIM.bits()),
    ("NOWARN", Gfp::NOWARN.bits()),
    ("NORETRY", Gfp::NORETRY.bits()),
    ("COMP", Gfp::COMP.bits()),
    ("MEMALLOC", Gfp::MEMALLOC.bits()),
    ("NOMEMALLOC", Gfp::NOMEMALLOC.bits()),
    ("THISNODE", Gfp::THISNODE.bits()),
    ("THISZONE", Gfp::THISZONE.bits()),
    ("KERNEL", Gfp::KERNEL.bits()),
    ("ATOMIC", Gfp::ATOMIC.bits()),
    ("NOWAIT", Gfp::NOWAIT.bits()),
    ("USER", Gfp::USER.bits()),
    ("HIGHUSER_MOVABLE", Gfp::HIGHUSER_MOVABLE.bits()),
];

/// The zone type whose `enum zonealloc_zone_type` value is `v`.
pub(crate) fn zone_type(v: u32) -> Option<ZoneType> {
    ZoneType::ALL.get(usize::try_from(v).ok()?).copied()
}

/// The header's name of a zone type: `ZONEALLOC_ZONE_` and its name in capitals.
pub fn zone_type_c_name(t: ZoneType) -> String {
    format!("ZONEALLOC_ZONE_{}", t.name().to_ascii_uppercase())
}
