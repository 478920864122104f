//! The kernel's own free memory rebuilt from its trace: the layout's free frames,
//! then every event that moves a block onto or off the buddy lists.
//!
//! A check of the capture, not a model: it asks nothing of zonealloc. The buddy
//! lists change at four events the trace records with the block's frames:
//!
//! | event | the buddy lists |
//! |---|---|
//! | `mm_page_alloc_zone_locked` | the block leaves them (to a per-CPU list, or straight to its caller) |
//! | `mm_page_pcpu_drain` | the block joins them (flushed from a per-CPU list) |
//! | `mm_page_free` of an order with no per-CPU list (4–8, 10) | the block joins them |
//! | `mm_page_alloc_extfrag` that claims | the pageblocks change type |
//!
//! Refills, flushes and fallbacks also name the pageblock's type. Free frames merge
//! the way the kernel's do, into the largest aligned blocks (see `kpage`), so the
//! shadow's free blocks per order and type can be set beside the kernel's own
//! snapshots: where they differ, something moved that the trace did not record (a
//! free that bypassed the per-CPU lists, an event perf lost), or the layout read
//! was not consistent. `ShadowStats` counts the events that did not fit.

use serde::Serialize;
use zonealloc::Migratetype;

use crate::event::{Event, Record};
use crate::kstate::{type_index, Shape, ZoneShape, TYPES};
use crate::start::StartPlan;

/// Events that did not fit the rebuilt state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ShadowStats {
    /// Events applied.
    pub events: u64,
    /// Frames a refill or zone-locked take found not free.
    pub taken_not_free: u64,
    /// Frames a flush or buddy free found free already.
    pub freed_already_free: u64,
    /// Events at frames outside every zone.
    pub outside: u64,
}

struct ShadowZone {
    zone: zonealloc::ZoneType,
    node: u16,
    start: u64,
    end: u64,
    /// One bit per frame from `start`: on the buddy lists.
    free: Vec<u64>,
    /// Type of each pageblock, from the one holding `start`.
    types: Vec<Migratetype>,
}

impl ShadowZone {
    fn get(&self, pfn: u64) -> bool {
        let i = pfn - self.start;
        self.free[(i >> 6) as usize] >> (i & 63) & 1 != 0
    }

    fn set(&mut self, pfn: u64, on: bool) -> bool {
        let i = pfn - self.start;
        let w = &mut self.free[(i >> 6) as usize];
        let was = *w >> (i & 63) & 1 != 0;
        if on {
            *w |= 1 << (i & 63);
        } else {
            *w &= !(1 << (i & 63));
        }
        was
    }
}

/// The rebuilt state.
pub struct Shadow {
    zones: Vec<ShadowZone>,
    pb: u8,
    max_order: u8,
    start_ns: u64,
    /// What did not fit.
    pub stats: ShadowStats,
}

impl Shadow {
    /// The state the warm start inferred: the layout's free blocks, its pageblock
    /// types.
    pub fn new(plan: &StartPlan) -> Shadow {
        let pb = plan.pageblock_order;
        let zones = plan
            .zones
            .iter()
            .map(|z| {
                let n = z.spec.spanned;
                let mut s = ShadowZone {
                    zone: z.spec.zone_type,
                    node: z.spec.node,
                    start: z.spec.start_pfn,
                    end: z.spec.start_pfn + n,
                    free: vec![0; n.div_ceil(64) as usize],
                    types: z.block_types.clone(),
                };
                for &(p, o) in &z.free_blocks {
                    for q in p..p + (1u64 << o) {
                        s.set(q, true);
                    }
                }
                s
            })
            .collect();
        Shadow {
            zones,
            pb,
            max_order: plan.max_order,
            start_ns: plan.start_ns,
            stats: ShadowStats::default(),
        }
    }

    fn zone_mut(&mut self, pfn: u64) -> Option<&mut ShadowZone> {
        self.zones
            .iter_mut()
            .find(|z| pfn >= z.start && pfn < z.end)
    }

    /// Applies one record (those before the start are passed over).
    pub fn apply(&mut self, r: &Record) {
        if r.time_ns < self.start_ns {
            return;
        }
        let pb = self.pb;
        let (pfn, order, join, mt) = match r.event {
            Event::AllocZoneLocked {
                pfn,
                order,
                migratetype,
                ..
            } => (pfn, order, false, migratetype),
            Event::PcpuDrain {
                pfn,
                order,
                migratetype,
            } => (pfn, order, true, migratetype),
            Event::Free { pfn, order } if !(order <= 3 || order == pb) => (pfn, order, true, None),
            Event::AllocExtfrag {
                pfn,
                fallback_order,
                alloc_migratetype: Some(mt),
                change_ownership: true,
                ..
            } => {
                let Some(z) = self.zone_mut(pfn) else {
                    self.stats.outside += 1;
                    return;
                };
                let first = z.start >> pb;
                let lo = pfn >> fallback_order.max(pb) << fallback_order.max(pb);
                let n = 1u64 << fallback_order.saturating_sub(pb);
                for b in (lo >> pb)..(lo >> pb) + n {
                    if let Some(t) = z.types.get_mut((b - first) as usize) {
                        *t = mt;
                    }
                }
                self.stats.events += 1;
                return;
            }
            _ => return,
        };
        self.stats.events += 1;
        let Some(z) = self.zone_mut(pfn) else {
            self.stats.outside += 1;
            return;
        };
        let end = (pfn + (1u64 << order)).min(z.end);
        let (mut bad, first) = (0, z.start >> pb);
        for p in pfn..end {
            if z.set(p, join) == join {
                bad += 1;
            }
        }
        if let Some(mt) = mt {
            if let Some(t) = z.types.get_mut(((pfn >> pb) - first) as usize) {
                *t = mt;
            }
        }
        if join {
            self.stats.freed_already_free += bad;
        } else {
            self.stats.taken_not_free += bad;
        }
    }

    /// The rebuilt free memory now: free blocks per order, per type (each block
    /// counted under its first pageblock's type) and pageblocks per type.
    pub fn shape(&self) -> Shape {
        let orders = self.max_order as usize + 1;
        let zones = self
            .zones
            .iter()
            .map(|z| {
                let mut free = vec![0u64; orders];
                let mut by_type = vec![vec![0u64; orders]; TYPES.len()];
                let first = z.start >> self.pb;
                let mut p = z.start;
                while p < z.end {
                    if !z.get(p) {
                        p += 1;
                        continue;
                    }
                    let s = p;
                    while p < z.end && z.get(p) {
                        p += 1;
                    }
                    let mut q = s;
                    while q < p {
                        let align = if q == 0 { 63 } else { q.trailing_zeros() };
                        let fit = 63 - (p - q).leading_zeros();
                        let o = align.min(fit).min(u32::from(self.max_order)) as usize;
                        free[o] += 1;
                        let t = z
                            .types
                            .get(((q >> self.pb) - first) as usize)
                            .copied()
                            .unwrap_or(Migratetype::Movable);
                        if let Some(t) = type_index(t) {
                            by_type[t][o] += 1;
                        }
                        q += 1u64 << o;
                    }
                }
                let mut blocks = [0u64; 4];
                for &t in &z.types {
                    if let Some(i) = type_index(t) {
                        blocks[i] += 1;
                    }
                }
                ZoneShape {
                    node: z.node,
                    zone: z.zone,
                    free,
                    free_by_type: by_type,
                    blocks,
                }
            })
            .collect();
        Shape { time_ns: 0, zones }
    }
}
