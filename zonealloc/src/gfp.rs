//! Allocation requests: `Gfp` flags and the internal `AllocFlags` derived from them.
//!
//! `Gfp` is what a caller says about an allocation (which zones it may use, how mobile
//! the memory is, whether it may dip into reserves); `AllocFlags` is what the allocator
//! makes of it for one pass over the zonelist (which watermark, which reserves).
//! The bit values follow Linux (`include/linux/gfp_types.h`, `mm/internal.h`) where
//! Linux has the flag, so traces and kernel habits carry over.

use core::fmt;
use core::ops::{BitAnd, BitOr, BitOrAssign, Not};

use crate::types::{Migratetype, Wmark, ZoneType};

/// Get-free-pages flags: what a caller asks of an allocation.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gfp(u32);

impl Gfp {
    /// May only use `ZoneType::Dma`.
    pub const DMA: Gfp = Gfp(0x01);
    /// May use highmem (and, with `MOVABLE`, the movable zone).
    pub const HIGHMEM: Gfp = Gfp(0x02);
    /// May only use zones up to `ZoneType::Dma32`.
    pub const DMA32: Gfp = Gfp(0x04);
    /// The memory can be migrated: movable migratetype.
    pub const MOVABLE: Gfp = Gfp(0x08);
    /// The memory can be reclaimed: reclaimable migratetype.
    pub const RECLAIMABLE: Gfp = Gfp(0x10);
    /// High priority: may use part of the reserve below the min watermark.
    pub const HIGH: Gfp = Gfp(0x20);
    /// May start I/O (kept for kernel parity; has no effect here).
    pub const IO: Gfp = Gfp(0x40);
    /// May call into the filesystem (kept for kernel parity; has no effect here).
    pub const FS: Gfp = Gfp(0x80);
    /// Zero the memory before returning it.
    pub const ZERO: Gfp = Gfp(0x100);
    /// The caller may block: without it the request is treated as atomic.
    pub const DIRECT_RECLAIM: Gfp = Gfp(0x400);
    /// May wake background reclaim (recorded in statistics only).
    pub const KSWAPD_RECLAIM: Gfp = Gfp(0x800);
    /// Do not report failure in the log.
    pub const NOWARN: Gfp = Gfp(0x2000);
    /// Do not retry after draining per-CPU lists and reserves.
    pub const NORETRY: Gfp = Gfp(0x1_0000);
    /// Allocate a compound block (kept for parity; blocks are never compound here).
    pub const COMP: Gfp = Gfp(0x4_0000);
    /// May ignore every watermark (emergency reserves).
    pub const MEMALLOC: Gfp = Gfp(0x2_0000);
    /// Never use the emergency reserves, even when `MEMALLOC` would.
    pub const NOMEMALLOC: Gfp = Gfp(0x8_0000);
    /// Use only the caller's node.
    pub const THISNODE: Gfp = Gfp(0x20_0000);
    /// Use only the preferred zone: no fallback down the zonelist.
    pub const THISZONE: Gfp = Gfp(0x4000_0000);

    /// `GFP_KERNEL`: ordinary unmovable allocation that may block.
    pub const KERNEL: Gfp = Gfp(0x400 | 0x800 | 0x40 | 0x80);
    /// `GFP_ATOMIC`: cannot block, may use part of the reserves.
    pub const ATOMIC: Gfp = Gfp(0x20 | 0x800);
    /// `GFP_NOWAIT`: cannot block, no reserves.
    pub const NOWAIT: Gfp = Gfp(0x800);
    /// `GFP_USER`: user allocation, unmovable.
    pub const USER: Gfp = Gfp::KERNEL;
    /// `GFP_HIGHUSER_MOVABLE`: user pages, may use the movable zone.
    pub const HIGHUSER_MOVABLE: Gfp = Gfp(Gfp::KERNEL.0 | 0x02 | 0x08);

    /// No flags.
    pub const fn empty() -> Gfp {
        Gfp(0)
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Flags from raw bits (unknown bits are kept and ignored).
    pub const fn from_bits(bits: u32) -> Gfp {
        Gfp(bits)
    }

    /// Both sets of flags, usable in `const` contexts (`a | b` elsewhere).
    pub const fn union(self, other: Gfp) -> Gfp {
        Gfp(self.0 | other.0)
    }

    /// Whether every flag of `other` is set.
    #[inline]
    pub const fn contains(self, other: Gfp) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag of `other` is set.
    #[inline]
    pub const fn intersects(self, other: Gfp) -> bool {
        self.0 & other.0 != 0
    }

    /// `gfp_migratetype()`: movable and reclaimable map to their types, all else is
    /// unmovable.
    #[inline]
    pub const fn migratetype(self) -> Migratetype {
        match (self.0 >> 3) & 3 {
            1 => Migratetype::Movable,
            2 => Migratetype::Reclaimable,
            // Both bits set is a caller bug in Linux; treat it as unmovable.
            _ => Migratetype::Unmovable,
        }
    }

    /// `gfp_zone()`: the highest zone type this request may use.
    #[inline]
    pub const fn highest_zone(self) -> ZoneType {
        if self.0 & Gfp::DMA.0 != 0 {
            ZoneType::Dma
        } else if self.0 & Gfp::DMA32.0 != 0 {
            ZoneType::Dma32
        } else if self.0 & Gfp::HIGHMEM.0 != 0 {
            if self.0 & Gfp::MOVABLE.0 != 0 {
                ZoneType::Movable
            } else {
                ZoneType::HighMem
            }
        } else {
            ZoneType::Normal
        }
    }
}

impl BitOr for Gfp {
    type Output = Gfp;
    fn bitor(self, rhs: Gfp) -> Gfp {
        Gfp(self.0 | rhs.0)
    }
}

impl BitOrAssign for Gfp {
    fn bitor_assign(&mut self, rhs: Gfp) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for Gfp {
    type Output = Gfp;
    fn bitand(self, rhs: Gfp) -> Gfp {
        Gfp(self.0 & rhs.0)
    }
}

impl Not for Gfp {
    type Output = Gfp;
    fn not(self) -> Gfp {
        Gfp(!self.0)
    }
}

impl fmt::Debug for Gfp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(Gfp, &str); 18] = [
            (Gfp::DMA, "DMA"),
            (Gfp::HIGHMEM, "HIGHMEM"),
            (Gfp::DMA32, "DMA32"),
            (Gfp::MOVABLE, "MOVABLE"),
            (Gfp::RECLAIMABLE, "RECLAIMABLE"),
            (Gfp::HIGH, "HIGH"),
            (Gfp::IO, "IO"),
            (Gfp::FS, "FS"),
            (Gfp::ZERO, "ZERO"),
            (Gfp::DIRECT_RECLAIM, "DIRECT_RECLAIM"),
            (Gfp::KSWAPD_RECLAIM, "KSWAPD_RECLAIM"),
            (Gfp::NOWARN, "NOWARN"),
            (Gfp::NORETRY, "NORETRY"),
            (Gfp::COMP, "COMP"),
            (Gfp::MEMALLOC, "MEMALLOC"),
            (Gfp::NOMEMALLOC, "NOMEMALLOC"),
            (Gfp::THISNODE, "THISNODE"),
            (Gfp::THISZONE, "THISZONE"),
        ];
        let mut first = true;
        f.write_str("Gfp(")?;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        f.write_str(")")
    }
}

/// Internal allocation flags for one pass of the allocator (Linux's `ALLOC_*`): the
/// watermark the pass checks, and what the request may do beyond it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct AllocFlags(u32);

impl AllocFlags {
    const WMARK_MASK: u32 = 3;
    /// Skip the watermark check (`__GFP_MEMALLOC`).
    pub const NO_WATERMARKS: AllocFlags = AllocFlags(0x04);
    /// An OOM victim's request: may use part of the reserves.
    pub const OOM: AllocFlags = AllocFlags(0x08);
    /// Cannot block: may dip further into the reserves.
    pub const NON_BLOCK: AllocFlags = AllocFlags(0x10);
    /// `__GFP_HIGH`: may dip into the min reserve.
    pub const MIN_RESERVE: AllocFlags = AllocFlags(0x20);
    /// Rather spill into a lower zone than fragment this one.
    pub const NOFRAGMENT: AllocFlags = AllocFlags(0x100);
    /// May use and grow the highatomic reserve.
    pub const HIGHATOMIC: AllocFlags = AllocFlags(0x200);
    /// May take pages of CMA pageblocks (`ALLOC_CMA`): movable requests.
    pub const CMA: AllocFlags = AllocFlags(0x80);
    /// Only try locks, never wait for one (`ALLOC_TRYLOCK`, `alloc_pages_nolock`).
    pub const TRYLOCK: AllocFlags = AllocFlags(0x400);
    /// Any of the reserve flags.
    pub const RESERVES: AllocFlags =
        AllocFlags(Self::NON_BLOCK.0 | Self::MIN_RESERVE.0 | Self::HIGHATOMIC.0 | Self::OOM.0);

    /// Flags that check `mark` and nothing more.
    #[inline]
    pub const fn checking(mark: Wmark) -> AllocFlags {
        AllocFlags(mark as u32)
    }

    /// Whether any flag of `f` is set.
    #[inline]
    pub fn has(self, f: AllocFlags) -> bool {
        self.0 & f.0 != 0
    }

    /// These flags without those of `f`.
    #[inline]
    #[must_use]
    pub fn without(self, f: AllocFlags) -> AllocFlags {
        AllocFlags(self.0 & !f.0)
    }

    /// The watermark this pass checks.
    #[inline]
    pub fn wmark(self) -> Wmark {
        Wmark::from_bits(self.0 & Self::WMARK_MASK)
    }

    /// Flags of the first, optimistic pass: the low watermark, plus the highatomic
    /// reserve for high-order requests that cannot block but may dip (2026 tree).
    pub fn fast(gfp: Gfp, order: u8) -> AllocFlags {
        let mut f = Self::checking(Wmark::Low).cma_for(gfp);
        if order > 0 && gfp.contains(Gfp::HIGH) && !gfp.contains(Gfp::DIRECT_RECLAIM) {
            f = f | Self::HIGHATOMIC;
        }
        f
    }

    /// `gfp_to_alloc_flags_cma()`: adds `CMA` for a movable request.
    #[inline]
    #[must_use]
    pub fn cma_for(self, gfp: Gfp) -> AllocFlags {
        if gfp.migratetype() == Migratetype::Movable {
            self | Self::CMA
        } else {
            self
        }
    }

    /// `gfp_to_alloc_flags()`: flags of the slow pass.
    pub fn slow(gfp: Gfp, order: u8) -> AllocFlags {
        let mut f = Self::checking(Wmark::Min).cma_for(gfp);
        if gfp.contains(Gfp::HIGH) {
            f = f | Self::MIN_RESERVE;
        }
        if !gfp.contains(Gfp::DIRECT_RECLAIM) && !gfp.contains(Gfp::NOMEMALLOC) {
            f = f | Self::NON_BLOCK;
            if order > 0 && f.has(Self::MIN_RESERVE) {
                f = f | Self::HIGHATOMIC;
            }
        }
        if gfp.contains(Gfp::MEMALLOC) && !gfp.contains(Gfp::NOMEMALLOC) {
            f = f | Self::NO_WATERMARKS;
        }
        f
    }
}

impl BitOr for AllocFlags {
    type Output = AllocFlags;
    #[inline]
    fn bitor(self, rhs: AllocFlags) -> AllocFlags {
        AllocFlags(self.0 | rhs.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migratetype_follows_linux_bits() {
        assert_eq!(Gfp::KERNEL.migratetype(), Migratetype::Unmovable);
        assert_eq!(Gfp::HIGHUSER_MOVABLE.migratetype(), Migratetype::Movable);
        assert_eq!(
            (Gfp::KERNEL | Gfp::RECLAIMABLE).migratetype(),
            Migratetype::Reclaimable
        );
    }

    #[test]
    fn zone_selection_follows_gfp_zone_table() {
        assert_eq!(Gfp::KERNEL.highest_zone(), ZoneType::Normal);
        assert_eq!((Gfp::KERNEL | Gfp::DMA32).highest_zone(), ZoneType::Dma32);
        assert_eq!((Gfp::KERNEL | Gfp::DMA).highest_zone(), ZoneType::Dma);
        assert_eq!(Gfp::HIGHUSER_MOVABLE.highest_zone(), ZoneType::Movable);
        assert_eq!(
            (Gfp::KERNEL | Gfp::MOVABLE).highest_zone(),
            ZoneType::Normal
        );
    }

    #[test]
    fn atomic_requests_get_reserves() {
        let f = AllocFlags::slow(Gfp::ATOMIC, 2);
        assert!(f.has(AllocFlags::MIN_RESERVE));
        assert!(f.has(AllocFlags::NON_BLOCK));
        assert!(f.has(AllocFlags::HIGHATOMIC));
        let k = AllocFlags::slow(Gfp::KERNEL, 2);
        assert!(!k.has(AllocFlags::RESERVES));
    }
}
