//! The shape comparison: zonealloc's free memory beside the kernel's, at each
//! snapshot the capture took (once a second of trace time) and at the end.
//!
//! Top layer, read-only: takes the kernel's snapshots (`kstate::Snapshots`) and
//! the replay's samples taken at the same trace times, and measures them against
//! each other:
//!
//! * free blocks per order, for each zone and migratetype (buddyinfo,
//!   pagetypeinfo);
//! * pageblocks per migratetype;
//! * the unusable free space index at orders 3 and 9 (what `extfrag/unusable_index`
//!   prints, from the free blocks per order);
//! * fallbacks (`mm_page_alloc_extfrag`): in all, those that claimed the pageblock,
//!   those that only stole from it, and (the kernel's only: zonealloc's counters do
//!   not tell the order a fallback took) those that split a block smaller than a
//!   pageblock.
//!
//! The acceptance figures (`Acceptance`): per zone, each order that holds at least
//! 1 % of the zone's free pages at the end is within ±25 % of the kernel's; at
//! each snapshot likewise for at least 90 % of the snapshots (each order counted
//! at the snapshots where it holds 1 %); pageblocks per type at the end within
//! ±10 %; fallbacks within ±25 % where the kernel had at least 20.

use std::fmt;

use serde::Serialize;
use zonealloc::unusable_free_index;

use crate::kstate::{Shape, ZoneShape, TYPES};

/// Fallback counts at one moment, since the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Fallbacks {
    /// All fallbacks.
    pub total: u64,
    /// Those that claimed the pageblock (`change_ownership=1`).
    pub claimed: u64,
    /// Those that took a block smaller than a pageblock (`fallback_order <
    /// pageblock_order`); `None` for zonealloc, which does not count them.
    pub fragmenting: Option<u64>,
}

impl Fallbacks {
    /// Fallbacks that did not claim the pageblock.
    pub fn stealing(&self) -> u64 {
        self.total - self.claimed.min(self.total)
    }
}

/// One moment, both sides.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Moment {
    /// Trace time since the replay's start, seconds.
    pub seconds: f64,
    /// The kernel's state.
    pub kernel: Shape,
    /// zonealloc's state at the same trace time.
    pub zonealloc: Shape,
    /// The kernel's fallbacks since the start.
    pub kernel_fallbacks: Fallbacks,
    /// zonealloc's.
    pub zonealloc_fallbacks: Fallbacks,
}

/// How one zone's order fared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OrderCheck {
    /// Zone name.
    pub zone: String,
    /// Order.
    pub order: usize,
    /// Kernel's free blocks at the end.
    pub kernel: u64,
    /// zonealloc's.
    pub zonealloc: u64,
    /// Within ±25 % at the end (only orders holding 1 % of the zone's free pages
    /// at the end are listed).
    pub end_ok: bool,
    /// Snapshots at which the order held 1 % of the zone's free pages.
    pub seconds_counted: usize,
    /// Of those, snapshots within ±25 %.
    pub seconds_ok: usize,
}

/// Pageblocks of one type in one zone at the end.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BlockCheck {
    /// Zone name.
    pub zone: String,
    /// Type.
    pub migratetype: String,
    /// Kernel's.
    pub kernel: u64,
    /// zonealloc's.
    pub zonealloc: u64,
    /// Within ±10 %.
    pub ok: bool,
}

/// A fallback count at the end.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FallbackCheck {
    /// What is counted.
    pub what: String,
    /// Kernel's.
    pub kernel: u64,
    /// zonealloc's.
    pub zonealloc: u64,
    /// Checked: the kernel had at least 20.
    pub checked: bool,
    /// Within ±25 %.
    pub ok: bool,
}

/// The acceptance figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Acceptance {
    /// Per zone and order.
    pub orders: Vec<OrderCheck>,
    /// Per zone and type.
    pub blocks: Vec<BlockCheck>,
    /// Fallbacks.
    pub fallbacks: Vec<FallbackCheck>,
}

impl Acceptance {
    /// Every order within ±25 % at the end.
    pub fn end_ok(&self) -> bool {
        self.orders.iter().all(|o| o.end_ok)
    }

    /// Every order within ±25 % at 90 % of its snapshots.
    pub fn seconds_ok(&self) -> bool {
        self.orders
            .iter()
            .all(|o| o.seconds_counted == 0 || o.seconds_ok * 10 >= o.seconds_counted * 9)
    }

    /// Every type's pageblocks within ±10 %.
    pub fn blocks_ok(&self) -> bool {
        self.blocks.iter().all(|b| b.ok)
    }

    /// Every checked fallback count within ±25 %.
    pub fn fallbacks_ok(&self) -> bool {
        self.fallbacks.iter().all(|f| !f.checked || f.ok)
    }
}

/// The whole comparison.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ShapeComparison {
    /// At the start, the kernel's pagetypeinfo and zonealloc's warm start.
    pub start: Option<Moment>,
    /// At each snapshot.
    pub seconds: Vec<Moment>,
    /// At the end.
    pub end: Option<Moment>,
    /// The figures.
    pub acceptance: Acceptance,
    /// The kernel's free memory rebuilt from the layout and the trace alone
    /// (`shadow`), at each snapshot and then the end: how much of the kernel's
    /// state the capture explains.
    pub rebuilt: Vec<Shape>,
    /// What did not fit the rebuilt state.
    pub rebuilt_stats: Option<crate::shadow::ShadowStats>,
}

/// Whether `z` is within `pct` % of `k` (both zero counts as within).
pub fn within(k: u64, z: u64, pct: u64) -> bool {
    let (k, z) = (k as i128, z as i128);
    (z - k).abs() * 100 <= k * pct as i128
}

/// The orders of a zone that hold at least 1 % of its free pages.
fn heavy_orders(z: &ZoneShape) -> Vec<usize> {
    let total = z.free_pages();
    (0..z.free.len())
        .filter(|&o| total > 0 && (z.free[o] << o) * 100 >= total)
        .collect()
}

/// Free blocks of `order` in zone `zone` of `s` (0 where missing).
fn blocks(s: &Shape, z: &ZoneShape, order: usize) -> u64 {
    s.zone(z.node, z.zone)
        .and_then(|x| x.free.get(order).copied())
        .unwrap_or(0)
}

impl ShapeComparison {
    /// Builds the acceptance figures from `seconds` and `end`.
    pub fn evaluate(&mut self) {
        let mut a = Acceptance::default();
        let Some(end) = &self.end else {
            self.acceptance = a;
            return;
        };
        for kz in &end.kernel.zones {
            for o in heavy_orders(kz) {
                let k = kz.free[o];
                let z = blocks(&end.zonealloc, kz, o);
                let mut counted = 0;
                let mut ok = 0;
                for m in &self.seconds {
                    let Some(mk) = m.kernel.zone(kz.node, kz.zone) else {
                        continue;
                    };
                    if !heavy_orders(mk).contains(&o) {
                        continue;
                    }
                    counted += 1;
                    if within(mk.free[o], blocks(&m.zonealloc, kz, o), 25) {
                        ok += 1;
                    }
                }
                a.orders.push(OrderCheck {
                    zone: kz.zone.name().to_string(),
                    order: o,
                    kernel: k,
                    zonealloc: z,
                    end_ok: within(k, z, 25),
                    seconds_counted: counted,
                    seconds_ok: ok,
                });
            }
            // Orders heavy at some snapshot but not at the end are still counted.
            let mut extra: Vec<usize> = Vec::new();
            for m in &self.seconds {
                if let Some(mk) = m.kernel.zone(kz.node, kz.zone) {
                    for o in heavy_orders(mk) {
                        if !heavy_orders(kz).contains(&o) && !extra.contains(&o) {
                            extra.push(o);
                        }
                    }
                }
            }
            extra.sort_unstable();
            for o in extra {
                let (mut counted, mut ok) = (0, 0);
                for m in &self.seconds {
                    let Some(mk) = m.kernel.zone(kz.node, kz.zone) else {
                        continue;
                    };
                    if heavy_orders(mk).contains(&o) {
                        counted += 1;
                        ok += usize::from(within(mk.free[o], blocks(&m.zonealloc, kz, o), 25));
                    }
                }
                a.orders.push(OrderCheck {
                    zone: kz.zone.name().to_string(),
                    order: o,
                    kernel: kz.free.get(o).copied().unwrap_or(0),
                    zonealloc: blocks(&end.zonealloc, kz, o),
                    // Not heavy at the end: not checked there.
                    end_ok: true,
                    seconds_counted: counted,
                    seconds_ok: ok,
                });
            }
            let zb = end
                .zonealloc
                .zone(kz.node, kz.zone)
                .map_or([0; 4], |z| z.blocks);
            for (t, mt) in TYPES.iter().enumerate() {
                if kz.blocks[t] == 0 && zb[t] == 0 {
                    continue;
                }
                a.blocks.push(BlockCheck {
                    zone: kz.zone.name().to_string(),
                    migratetype: mt.name().to_string(),
                    kernel: kz.blocks[t],
                    zonealloc: zb[t],
                    ok: within(kz.blocks[t], zb[t], 10),
                });
            }
        }
        let (k, z) = (end.kernel_fallbacks, end.zonealloc_fallbacks);
        for (what, kv, zv) in [
            ("all fallbacks", k.total, z.total),
            ("claiming", k.claimed, z.claimed),
            ("stealing", k.stealing(), z.stealing()),
        ] {
            a.fallbacks.push(FallbackCheck {
                what: what.into(),
                kernel: kv,
                zonealloc: zv,
                checked: kv >= 20,
                ok: within(kv, zv, 25),
            });
        }
        self.acceptance = a;
    }
}

/// `k/z`, right-aligned in `w`.
fn pair(k: u64, z: u64) -> String {
    format!("{k}/{z}")
}

/// The unusable free space index at `order` of a zone's free blocks per order, as
/// `0.xxx`.
fn unusable(free: &[u64], order: usize) -> String {
    format!("{:.3}", unusable_free_index(free, order) as f64 / 1000.0)
}

fn write_moment(f: &mut fmt::Formatter<'_>, label: &str, m: &Moment) -> fmt::Result {
    writeln!(f, "  {label} (+{:.1} s):", m.seconds)?;
    for kz in &m.kernel.zones {
        let empty = ZoneShape {
            node: kz.node,
            zone: kz.zone,
            free: vec![0; kz.free.len()],
            free_by_type: Vec::new(),
            blocks: [0; 4],
        };
        let zz = m.zonealloc.zone(kz.node, kz.zone).unwrap_or(&empty);
        let orders = kz.free.len().max(zz.free.len());
        let at = |v: &[u64], o: usize| v.get(o).copied().unwrap_or(0);
        let rows: Vec<(&[u64], &[u64])> = std::iter::once((&kz.free[..], &zz.free[..]))
            .chain((0..TYPES.len()).map(|t| {
                (
                    kz.free_by_type.get(t).map_or(&[][..], Vec::as_slice),
                    zz.free_by_type.get(t).map_or(&[][..], Vec::as_slice),
                )
            }))
            .collect();
        // One width for every column of the zone: the widest `k/z` plus a space.
        let w = rows
            .iter()
            .flat_map(|(k, z)| (0..orders).map(move |o| pair(at(k, o), at(z, o)).len()))
            .max()
            .unwrap_or(3)
            + 1;
        let row = |k: &[u64], z: &[u64]| -> String {
            (0..orders)
                .map(|o| format!("{:>w$}", pair(at(k, o), at(z, o))))
                .collect::<Vec<_>>()
                .join("")
        };
        writeln!(
            f,
            "    {:<7} {:<11}{}",
            kz.zone.name(),
            "all",
            row(&kz.free, &zz.free)
        )?;
        for (t, mt) in TYPES.iter().enumerate() {
            let k = kz.free_by_type.get(t).map_or(&[][..], Vec::as_slice);
            let z = zz.free_by_type.get(t).map_or(&[][..], Vec::as_slice);
            if k.iter().chain(z).all(|&n| n == 0) {
                continue;
            }
            writeln!(f, "    {:<7} {:<11}{}", "", mt.name(), row(k, z))?;
        }
        let pb: Vec<String> = TYPES
            .iter()
            .enumerate()
            .filter(|&(t, _)| kz.blocks[t] + zz.blocks[t] > 0)
            .map(|(t, mt)| format!("{} {}", mt.name(), pair(kz.blocks[t], zz.blocks[t])))
            .collect();
        writeln!(
            f,
            "    {:<7} pageblocks {}; unusable free space index, order 3: {}/{}, order 9: {}/{}",
            "",
            pb.join(", "),
            unusable(&kz.free, 3),
            unusable(&zz.free, 3),
            unusable(&kz.free, 9),
            unusable(&zz.free, 9),
        )?;
    }
    let (k, z) = (m.kernel_fallbacks, m.zonealloc_fallbacks);
    writeln!(
        f,
        "    fallbacks since the start: kernel {} (claiming {}, stealing {}, fragmenting {}), zonealloc {} (claiming {}, stealing {})",
        k.total,
        k.claimed,
        k.stealing(),
        k.fragmenting.map_or("?".into(), |n| n.to_string()),
        z.total,
        z.claimed,
        z.stealing()
    )
}

impl fmt::Display for ShapeComparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "\nfree memory, kernel/zonealloc: free blocks per order (0..10) per zone, all types then each type;\n\
             pageblocks per type; unusable free space index; fallbacks (mm_page_alloc_extfrag)"
        )?;
        if let Some(m) = &self.start {
            write_moment(f, "start", m)?;
        }
        for (i, m) in self.seconds.iter().enumerate() {
            write_moment(f, &format!("snapshot {}", i + 1), m)?;
        }
        if let Some(m) = &self.end {
            write_moment(f, "end", m)?;
        }
        let a = &self.acceptance;
        writeln!(
            f,
            "\nshape at the end and over time (orders with at least 1 % of a zone's free pages):"
        )?;
        for o in &a.orders {
            writeln!(
                f,
                "  {:<7} order {:>2}: end {:>7} / {:<7} {:<4}  snapshots within 25 %: {}/{}{}",
                o.zone,
                o.order,
                o.kernel,
                o.zonealloc,
                if o.end_ok { "ok" } else { "MISS" },
                o.seconds_ok,
                o.seconds_counted,
                if o.seconds_counted > 0 && o.seconds_ok * 10 < o.seconds_counted * 9 {
                    " MISS"
                } else {
                    ""
                }
            )?;
        }
        for b in &a.blocks {
            writeln!(
                f,
                "  {:<7} {:<11} pageblocks at the end: {} / {} {}",
                b.zone,
                b.migratetype,
                b.kernel,
                b.zonealloc,
                if b.ok { "ok" } else { "MISS (10 %)" }
            )?;
        }
        for x in &a.fallbacks {
            writeln!(
                f,
                "  fallbacks, {:<14} {} / {} {}",
                x.what,
                x.kernel,
                x.zonealloc,
                match (x.checked, x.ok) {
                    (false, _) => "(kernel under 20: not checked)",
                    (true, true) => "ok",
                    (true, false) => "MISS",
                }
            )?;
        }
        if let (Some(st), Some(end), Some(rb)) =
            (&self.rebuilt_stats, &self.end, self.rebuilt.last())
        {
            writeln!(
                f,
                "\nthe kernel's free memory rebuilt from the layout and the trace alone (a check of the capture): \
                 {} events, {} frames taken that were not free, {} freed that were free already",
                st.events, st.taken_not_free, st.freed_already_free
            )?;
            for kz in &end.kernel.zones {
                let Some(rz) = rb.zone(kz.node, kz.zone) else {
                    continue;
                };
                let cells: Vec<String> = (0..kz.free.len())
                    .map(|o| format!("{}/{}", kz.free[o], rz.free.get(o).copied().unwrap_or(0)))
                    .collect();
                writeln!(
                    f,
                    "  end, {:<7} kernel/rebuilt: {}",
                    kz.zone.name(),
                    cells.join(" ")
                )?;
            }
        }
        writeln!(
            f,
            "  verdict: end {}, over time {}, pageblocks {}, fallbacks {}",
            if a.end_ok() { "ok" } else { "MISS" },
            if a.seconds_ok() { "ok" } else { "MISS" },
            if a.blocks_ok() { "ok" } else { "MISS" },
            if a.fallbacks_ok() { "ok" } else { "MISS" },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zonealloc::ZoneType;

    fn shape(free: Vec<u64>, blocks: [u64; 4]) -> Shape {
        Shape {
            time_ns: 0,
            zones: vec![ZoneShape {
                node: 0,
                zone: ZoneType::Normal,
                free,
                free_by_type: Vec::new(),
                blocks,
            }],
        }
    }

    fn moment(k: Shape, z: Shape) -> Moment {
        Moment {
            seconds: 0.0,
            kernel: k,
            zonealloc: z,
            kernel_fallbacks: Fallbacks::default(),
            zonealloc_fallbacks: Fallbacks::default(),
        }
    }

    #[test]
    fn within_is_symmetric_around_the_kernel() {
        assert!(within(100, 125, 25) && within(100, 75, 25));
        assert!(!within(100, 126, 25) && !within(100, 74, 25));
        assert!(within(0, 0, 25) && !within(0, 1, 25));
    }

    #[test]
    fn light_orders_are_not_checked_and_heavy_ones_are() {
        // Free pages: order 0: 1000 (heavy), order 3: 1 block = 8 pages (0.8 %,
        // light), order 10: 10 blocks (heavy).
        let k = shape(vec![1000, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10], [10, 100, 5, 0]);
        let z = shape(vec![1200, 0, 0, 9, 0, 0, 0, 0, 0, 0, 7], [11, 99, 5, 0]);
        let mut c = ShapeComparison {
            seconds: vec![moment(k.clone(), z.clone()), moment(k.clone(), k.clone())],
            end: Some(moment(k, z)),
            ..ShapeComparison::default()
        };
        c.evaluate();
        let a = &c.acceptance;
        let orders: Vec<usize> = a.orders.iter().map(|o| o.order).collect();
        assert_eq!(orders, vec![0, 10]);
        assert!(a.orders[0].end_ok, "1200 against 1000");
        assert!(!a.orders[1].end_ok, "7 against 10");
        assert_eq!(
            (a.orders[1].seconds_ok, a.orders[1].seconds_counted),
            (1, 2)
        );
        assert!(!a.end_ok() && !a.seconds_ok());
        assert!(a.blocks_ok());
        assert!(a.fallbacks_ok(), "the kernel had none: nothing checked");
    }

    #[test]
    fn fallbacks_are_checked_from_twenty() {
        let k = shape(vec![1], [0; 4]);
        let mut m = moment(k.clone(), k);
        m.kernel_fallbacks = Fallbacks {
            total: 30,
            claimed: 6,
            fragmenting: Some(0),
        };
        m.zonealloc_fallbacks = Fallbacks {
            total: 31,
            claimed: 14,
            fragmenting: None,
        };
        let mut c = ShapeComparison {
            end: Some(m),
            ..ShapeComparison::default()
        };
        c.evaluate();
        let f = &c.acceptance.fallbacks;
        assert!(f[0].checked && f[0].ok);
        assert!(!f[1].checked, "6 claims: under 20");
        assert!(f[2].checked && !f[2].ok, "24 stealing against 17");
        assert!(!c.acceptance.fallbacks_ok());
        let text = c.to_string();
        assert!(text.contains("verdict"), "{text}");
    }
}
