//! The typed vocabulary of the allocator: frame numbers, orders, migratetypes and zones.
//!
//! These are plain value types with no behaviour beyond arithmetic; every other module
//! speaks in them so that a page count is never confused with a frame number or an
//! order with a migratetype.

use core::fmt;

/// A page frame number: the index of a page-sized frame in the physical (or abstract)
/// address space that the allocator manages.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pfn(pub u64);

impl Pfn {
    /// The frame number as an integer.
    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The frame `nr` frames after this one.
    #[inline]
    #[must_use]
    pub const fn add(self, nr: u64) -> Pfn {
        Pfn(self.0 + nr)
    }

    /// Whether the frame is naturally aligned for a block of `order`.
    #[inline]
    pub const fn is_aligned(self, order: Order) -> bool {
        self.0 & ((1u64 << order.0) - 1) == 0
    }

    /// The buddy of the block of `order` starting here: `pfn ^ (1 << order)`.
    #[inline]
    #[must_use]
    pub const fn buddy(self, order: Order) -> Pfn {
        Pfn(self.0 ^ (1u64 << order.0))
    }
}

impl fmt::Debug for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pfn({:#x})", self.0)
    }
}

impl fmt::Display for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A block order: a block of order `o` is `2^o` naturally aligned frames.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Order(pub u8);

impl Order {
    /// Order 0: a single frame.
    pub const ZERO: Order = Order(0);

    /// Frames in a block of this order.
    #[inline]
    pub const fn nr_pages(self) -> u64 {
        1u64 << self.0
    }

    /// The order as an index into per-order tables.
    #[inline]
    pub const fn idx(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Largest order any configuration may use (a block of `2^MAX_ORDER_LIMIT` frames).
pub const MAX_ORDER_LIMIT: u8 = 20;
/// Size of per-order tables.
pub const NR_ORDERS_MAX: usize = MAX_ORDER_LIMIT as usize + 1;

/// A zone watermark (`enum zone_watermarks`): the index into a zone's marks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum Wmark {
    Min = 0,
    Low = 1,
    High = 2,
    Promo = 3,
}

impl Wmark {
    /// The mark whose index is `bits` (0..=3).
    #[inline]
    pub(crate) const fn from_bits(bits: u32) -> Wmark {
        match bits {
            0 => Wmark::Min,
            1 => Wmark::Low,
            2 => Wmark::High,
            _ => Wmark::Promo,
        }
    }
}

/// The mobility class of a pageblock and of the free blocks on its lists.
///
/// Values and names are Linux's (`enum migratetype` of a kernel built with CMA).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
pub enum Migratetype {
    /// Kernel-style allocations that can never move.
    Unmovable = 0,
    /// Allocations that could be migrated (user pages).
    Movable = 1,
    /// Allocations that can be dropped and rebuilt (caches).
    Reclaimable = 2,
    /// Pageblocks reserved for high-order atomic allocations.
    HighAtomic = 3,
    /// Pageblocks of a contiguous memory area (see `cma`): lent to movable
    /// allocations only, never claimed by another type.
    Cma = 4,
    /// Pageblocks taken out of circulation (contiguous allocation, offlining).
    Isolate = 5,
}

/// Number of migratetypes.
pub const MIGRATE_TYPES: usize = 6;
/// Migratetypes that have per-CPU lists and take part in fallback (`< MIGRATE_PCPTYPES`).
pub const MIGRATE_PCPTYPES: usize = 3;

/// `PAGE_ALLOC_COSTLY_ORDER`: the highest order with ordinary per-CPU lists.
pub const PAGE_ALLOC_COSTLY_ORDER: u8 = 3;
/// Lists per CPU: 3 types x orders 0..=3, plus 2 pageblock-order lists.
pub(crate) const NR_PCP_LISTS: usize =
    MIGRATE_PCPTYPES * (PAGE_ALLOC_COSTLY_ORDER as usize + 1) + 2;

impl Migratetype {
    /// Every migratetype, in index order.
    pub const ALL: [Migratetype; MIGRATE_TYPES] = [
        Migratetype::Unmovable,
        Migratetype::Movable,
        Migratetype::Reclaimable,
        Migratetype::HighAtomic,
        Migratetype::Cma,
        Migratetype::Isolate,
    ];

    /// The type as a table index.
    #[inline]
    pub const fn idx(self) -> usize {
        self as usize
    }

    /// The type with index `i`, if any.
    #[inline]
    pub const fn from_idx(i: usize) -> Option<Migratetype> {
        match i {
            0 => Some(Migratetype::Unmovable),
            1 => Some(Migratetype::Movable),
            2 => Some(Migratetype::Reclaimable),
            3 => Some(Migratetype::HighAtomic),
            4 => Some(Migratetype::Cma),
            5 => Some(Migratetype::Isolate),
            _ => None,
        }
    }

    /// Linux's name for the type, as printed in `/proc/pagetypeinfo`.
    pub const fn name(self) -> &'static str {
        match self {
            Migratetype::Unmovable => "Unmovable",
            Migratetype::Movable => "Movable",
            Migratetype::Reclaimable => "Reclaimable",
            Migratetype::HighAtomic => "HighAtomic",
            Migratetype::Cma => "CMA",
            Migratetype::Isolate => "Isolate",
        }
    }

    /// `migratetype_is_mergeable()`: only the three ordinary types may merge with a
    /// block of another type at pageblock order, and only they fall back.
    #[inline]
    pub const fn is_mergeable(self) -> bool {
        (self as usize) < MIGRATE_PCPTYPES
    }

    /// `is_migrate_movable()`: `Movable` or `Cma`, the pageblocks whose
    /// allocated blocks are all movable.
    #[inline]
    pub const fn is_movable(self) -> bool {
        matches!(self, Migratetype::Movable | Migratetype::Cma)
    }
}

impl fmt::Display for Migratetype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The kind of a zone, in Linux's order (lowest first).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
pub enum ZoneType {
    /// Frames below 16 MiB on x86.
    Dma = 0,
    /// Frames below 4 GiB.
    Dma32 = 1,
    /// Ordinary memory.
    Normal = 2,
    /// Memory without a permanent kernel mapping (32-bit systems).
    HighMem = 3,
    /// Memory that only movable allocations may use.
    Movable = 4,
}

/// Number of zone types.
pub const MAX_NR_ZONES: usize = 5;

impl ZoneType {
    /// Every zone type, lowest first.
    pub const ALL: [ZoneType; MAX_NR_ZONES] = [
        ZoneType::Dma,
        ZoneType::Dma32,
        ZoneType::Normal,
        ZoneType::HighMem,
        ZoneType::Movable,
    ];

    /// The zone type as a table index.
    #[inline]
    pub const fn idx(self) -> usize {
        self as usize
    }

    /// Linux's name for the zone (`zone_names[]`).
    pub const fn name(self) -> &'static str {
        match self {
            ZoneType::Dma => "DMA",
            ZoneType::Dma32 => "DMA32",
            ZoneType::Normal => "Normal",
            ZoneType::HighMem => "HighMem",
            ZoneType::Movable => "Movable",
        }
    }

    /// Lowercase name used in vmstat keys (`pgalloc_dma32`).
    pub const fn vmstat_name(self) -> &'static str {
        match self {
            ZoneType::Dma => "dma",
            ZoneType::Dma32 => "dma32",
            ZoneType::Normal => "normal",
            ZoneType::HighMem => "high",
            ZoneType::Movable => "movable",
        }
    }

    /// `sysctl_lowmem_reserve_ratio[]` default for this zone.
    pub const fn default_lowmem_reserve_ratio(self) -> u64 {
        match self {
            ZoneType::Dma | ZoneType::Dma32 => 256,
            ZoneType::Normal => 32,
            ZoneType::HighMem | ZoneType::Movable => 0,
        }
    }
}

impl fmt::Display for ZoneType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Identifies one zone of the allocator: its node and its position in the node.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ZoneId {
    /// Node index.
    pub node: u16,
    /// Zone type within the node.
    pub zone_type: ZoneType,
}

/// `floor(log2(n))` for `n > 0`.
#[inline]
pub(crate) const fn ilog2(n: u64) -> u32 {
    63 - n.leading_zeros()
}
