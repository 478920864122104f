//! Pictures: a zone map (one cell per pageblock) and free blocks per order over time.
//!
//! Top layer, read-only over the allocator's public API. The map walks a zone's
//! frames with `frame_state()` block by block (a free or allocated block is skipped
//! whole, so the walk is O(blocks + hole frames)) to count each pageblock's free
//! pages, and colours the pageblock by the mobility of the memory allocated in it.
//!
//! zonealloc does not expose a pageblock's migratetype, so the colour comes from the
//! caller's `owners` (the blocks it holds and the migratetype it asked for each),
//! as page_owner would give it on Linux; allocated memory the caller does not name is
//! grey. The shade says how much of the pageblock is free: full colour when full,
//! fading toward white as it empties, white when nothing is allocated in it. A
//! black dot marks a pageblock holding memory of more than one mobility.
//!
//! Text is drawn with DejaVu Sans embedded from the `dejavu` crate through plotters'
//! `ab_glyph` feature, so no system font is needed. `.png` and `.svg` paths pick the
//! backend.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use serde::Serialize;
use zonealloc::{FrameState, Migratetype, Order, Pfn, ZoneAllocator, ZoneId};

use crate::replay::BuddySample;

const FONT: &str = "sans-serif";

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The embedded file is a valid TrueType font; a failure would only lose text.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
    });
}

/// Why a picture was not drawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapError(pub String);

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MapError {}

fn e<E: fmt::Display>(x: E) -> MapError {
    MapError(x.to_string())
}

// -----------------------------------------------------------------------------
// The data: one cell per pageblock
// -----------------------------------------------------------------------------

/// One pageblock's pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Cell {
    /// Frames that exist (not holes).
    pub present: u32,
    /// Free frames on the buddy lists.
    pub free: u32,
    /// Free frames on per-CPU lists.
    pub pcp: u32,
    /// Allocated frames the caller named, per migratetype (Unmovable, Movable,
    /// Reclaimable).
    pub owned: [u32; 3],
}

impl Cell {
    /// Allocated frames.
    pub fn allocated(&self) -> u32 {
        self.present - self.free - self.pcp
    }

    /// Allocated frames the caller did not name.
    pub fn unknown(&self) -> u32 {
        self.allocated()
            .saturating_sub(self.owned.iter().sum::<u32>())
    }
}

/// A zone, pageblock by pageblock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ZoneMap {
    /// The zone.
    #[serde(skip)]
    pub zone: ZoneId,
    /// Its first frame.
    pub start_pfn: u64,
    /// Frames per pageblock.
    pub pageblock_pages: u64,
    /// One cell per pageblock from the zone's start, trailing holes left out.
    pub cells: Vec<Cell>,
}

/// The zone holding the most allocated memory (the largest if none holds any).
fn busiest_zone(za: &ZoneAllocator) -> Option<ZoneId> {
    let free: HashMap<ZoneId, u64> = za
        .free_counts()
        .into_iter()
        .map(|z| (z.id, z.nr_free_pages))
        .collect();
    za.zones()
        .filter(|z| z.3 > 0)
        .max_by_key(|&(id, _, _, present)| {
            (
                present.saturating_sub(free.get(&id).copied().unwrap_or(0)),
                present,
            )
        })
        .map(|z| z.0)
}

/// Counts each pageblock of `zone` (default: the zone holding the most allocated
/// memory). `owners` names allocated blocks: head, order, migratetype.
pub fn zone_map(
    za: &ZoneAllocator,
    zone: Option<ZoneId>,
    owners: &[(Pfn, Order, Migratetype)],
) -> Option<ZoneMap> {
    let id = zone.or_else(|| busiest_zone(za))?;
    let (_, start, spanned, _) = za.zones().find(|z| z.0 == id)?;
    let pb = za.config().pageblock_nr_pages();
    let base = start.0 & !(pb - 1);
    let end = start.0 + spanned;
    let nr = (end - base).div_ceil(pb) as usize;
    let mut cells = vec![Cell::default(); nr];
    let mut add = |from: u64, n: u64, f: &mut dyn FnMut(&mut Cell, u32)| {
        let mut p = from;
        let stop = from + n;
        while p < stop {
            let i = ((p - base) / pb) as usize;
            let cell_end = base + (i as u64 + 1) * pb;
            let k = cell_end.min(stop) - p;
            f(&mut cells[i], k as u32);
            p += k;
        }
    };
    let mut p = start.0;
    while p < end {
        let step = match za.frame_state(Pfn(p)) {
            Some(FrameState::Hole) | None => 1,
            Some(FrameState::Free { order }) => {
                let n = order.nr_pages().min(end - p);
                add(p, n, &mut |c, k| {
                    c.present += k;
                    c.free += k;
                });
                n
            }
            Some(FrameState::PerCpu { order }) => {
                let n = order.nr_pages().min(end - p);
                add(p, n, &mut |c, k| {
                    c.present += k;
                    c.pcp += k;
                });
                n
            }
            Some(FrameState::Allocated { order, .. } | FrameState::Frozen { order }) => {
                let n = order.nr_pages().min(end - p);
                add(p, n, &mut |c, k| c.present += k);
                n
            }
            Some(FrameState::Tail | FrameState::Bad) => {
                add(p, 1, &mut |c, k| c.present += k);
                1
            }
        };
        p += step;
    }
    for &(head, order, mt) in owners {
        let slot = match mt {
            Migratetype::Unmovable => 0,
            Migratetype::Movable => 1,
            Migratetype::Reclaimable => 2,
            _ => continue,
        };
        if head.0 < start.0 || head.0 >= end {
            continue;
        }
        add(head.0, order.nr_pages().min(end - head.0), &mut |c, k| {
            c.owned[slot] += k;
        });
    }
    while cells.last().is_some_and(|c| c.present == 0) {
        cells.pop();
    }
    Some(ZoneMap {
        zone: id,
        start_pfn: base,
        pageblock_pages: pb,
        cells,
    })
}

// -----------------------------------------------------------------------------
// Colours
// -----------------------------------------------------------------------------

const UNMOVABLE: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const MOVABLE: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);
const RECLAIMABLE: RGBColor = RGBColor(0xff, 0x9f, 0x1c);
const UNKNOWN: RGBColor = RGBColor(0x70, 0x70, 0x70);
const HOLE: RGBColor = RGBColor(0x30, 0x30, 0x30);
const EDGE: RGBColor = RGBColor(0xc8, 0xc8, 0xc8);
/// Share of colour kept by an all-but-empty pageblock, so one pinned page shows.
const MIN_TINT: f64 = 0.3;

fn lerp_white(c: RGBColor, white_share: f64) -> RGBColor {
    let m = |v: u8| (f64::from(v) + (255.0 - f64::from(v)) * white_share).round() as u8;
    RGBColor(m(c.0), m(c.1), m(c.2))
}

/// The cell's colour and whether it holds more than one mobility.
fn cell_colour(c: &Cell) -> (RGBColor, bool) {
    if c.present == 0 {
        return (HOLE, false);
    }
    let alloc = c.allocated();
    if alloc == 0 {
        return (WHITE, false);
    }
    let kinds = [
        (c.owned[0], UNMOVABLE),
        (c.owned[1], MOVABLE),
        (c.owned[2], RECLAIMABLE),
        (c.unknown(), UNKNOWN),
    ];
    let present_kinds = kinds.iter().filter(|k| k.0 > 0).count();
    let base = kinds.iter().max_by_key(|k| k.0).map_or(UNKNOWN, |k| k.1);
    let free_share = f64::from(c.free + c.pcp) / f64::from(c.present);
    (
        lerp_white(base, free_share * (1.0 - MIN_TINT)),
        present_kinds > 1,
    )
}

// -----------------------------------------------------------------------------
// Drawing the map
// -----------------------------------------------------------------------------

/// How to draw a zone map.
#[derive(Clone, Debug)]
pub struct MapOptions<'a> {
    /// Title above the map.
    pub title: String,
    /// The zone (default: the one holding the most allocated memory).
    pub zone: Option<ZoneId>,
    /// Allocated blocks with their mobility, to colour by (see the module docs).
    pub owners: &'a [(Pfn, Order, Migratetype)],
    /// Pageblocks per row (default: about twice as many columns as rows).
    pub columns: Option<usize>,
}

impl Default for MapOptions<'_> {
    fn default() -> Self {
        MapOptions {
            title: "zone map".into(),
            zone: None,
            owners: &[],
            columns: None,
        }
    }
}

/// Draws `za`'s zone as a map of pageblocks into `path` (`.png` or `.svg`), and
/// returns the counts drawn.
///
/// # Errors
/// No populated zone, an unknown extension, or a drawing or I/O error.
pub fn render_zone_map(
    za: &ZoneAllocator,
    path: &Path,
    opts: &MapOptions<'_>,
) -> Result<ZoneMap, MapError> {
    register_font();
    let map =
        zone_map(za, opts.zone, opts.owners).ok_or_else(|| MapError("no populated zone".into()))?;
    let n = map.cells.len().max(1);
    let cols = opts.columns.unwrap_or_else(|| {
        // Powers of two, about twice as wide as tall.
        let mut c = 8;
        while c * c < 2 * n {
            c *= 2;
        }
        c
    });
    let rows = n.div_ceil(cols);
    let cell = (960 / cols).clamp(2, 40) as u32;
    let plot_w = cell * cols as u32;
    let plot_h = cell * rows as u32;
    let legend_w = 300;
    let w = plot_w + 120 + legend_w;
    let h = (plot_h + 150).max(430);
    match path.extension().and_then(|x| x.to_str()) {
        Some("png") => {
            let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
            draw_map(root, &map, cols, rows, legend_w, &opts.title)?;
        }
        Some("svg") => {
            let root = SVGBackend::new(path, (w, h)).into_drawing_area();
            draw_map(root, &map, cols, rows, legend_w, &opts.title)?;
        }
        _ => return Err(MapError(format!("{}: use .png or .svg", path.display()))),
    }
    Ok(map)
}

fn draw_map<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    map: &ZoneMap,
    cols: usize,
    rows: usize,
    legend_w: u32,
    title: &str,
) -> Result<(), MapError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(e)?;
    let (w, _) = root.dim_in_pixel();
    let (left, right) = root.split_horizontally(w - legend_w);
    let pb_mib = (map.pageblock_pages * 4096) >> 20;
    let row_mib = pb_mib * cols as u64;
    let free: u64 = map.cells.iter().map(|c| u64::from(c.free + c.pcp)).sum();
    let present: u64 = map.cells.iter().map(|c| u64::from(c.present)).sum();
    let untouched = map
        .cells
        .iter()
        .filter(|c| c.present > 0 && c.allocated() == 0)
        .count();
    let caption = format!(
        "{title}\nzone {} from pfn {:#x}: {} pageblocks, {} fully free, {:.1}% of pages free",
        map.zone.zone_type,
        map.start_pfn,
        map.cells.len(),
        untouched,
        100.0 * free as f64 / present.max(1) as f64
    );
    let mut lines = caption.lines();
    let top = root
        .titled(lines.next().unwrap_or(""), (FONT, 20))
        .map_err(e)?;
    let _ = top;
    let mut chart = ChartBuilder::on(&left)
        .margin(10)
        .margin_top(48)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..cols as f64, rows as f64..0f64)
        .map_err(e)?;
    let x_step = (cols / 16).max(1);
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(cols.div_ceil(x_step) + 1)
        .y_labels(rows.min(20) + 1)
        .x_label_formatter(&|x| format!("{}", *x as u64))
        .y_label_formatter(&|y| format!("{} MiB", (*y as u64) * row_mib))
        .x_desc(format!("pageblock within the row ({pb_mib} MiB each)"))
        .y_desc("offset in the zone")
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(e)?;
    let area = chart.plotting_area();
    let (px, _) = area.dim_in_pixel();
    let cell_px = px as usize / cols.max(1);
    for (i, c) in map.cells.iter().enumerate() {
        let (x, y) = ((i % cols) as f64, (i / cols) as f64);
        let (colour, mixed) = cell_colour(c);
        area.draw(&Rectangle::new(
            [(x, y), (x + 1.0, y + 1.0)],
            colour.filled(),
        ))
        .map_err(e)?;
        if cell_px >= 6 {
            area.draw(&Rectangle::new(
                [(x, y), (x + 1.0, y + 1.0)],
                EDGE.stroke_width(1),
            ))
            .map_err(e)?;
        }
        if mixed {
            let r = (cell_px as i32 / 6).max(1);
            area.draw(&Circle::new((x + 0.5, y + 0.5), r, BLACK.filled()))
                .map_err(e)?;
        }
    }
    if let Some(sub) = lines.next() {
        left.draw(&Text::new(
            sub.to_string(),
            (90, 30),
            (FONT, 15).into_font().color(&BLACK),
        ))
        .map_err(e)?;
    }
    // Legend.
    let text = |s: &str, x: i32, y: i32, size: u32| {
        Text::new(
            s.to_string(),
            (x, y),
            (FONT, size).into_font().color(&BLACK),
        )
    };
    let mut y = 60;
    right
        .draw(&text("Allocated memory in the pageblock", 10, y, 15))
        .map_err(e)?;
    y += 26;
    for (label, c) in [
        ("Unmovable", UNMOVABLE),
        ("Movable", MOVABLE),
        ("Reclaimable", RECLAIMABLE),
        ("allocated, mobility not named", UNKNOWN),
    ] {
        right
            .draw(&Rectangle::new([(12, y), (30, y + 18)], c.filled()))
            .map_err(e)?;
        right.draw(&text(label, 40, y + 2, 14)).map_err(e)?;
        y += 26;
    }
    right
        .draw(&Rectangle::new([(12, y), (30, y + 18)], WHITE.filled()))
        .map_err(e)?;
    right
        .draw(&Rectangle::new(
            [(12, y), (30, y + 18)],
            EDGE.stroke_width(1),
        ))
        .map_err(e)?;
    right
        .draw(&text("nothing allocated (all free)", 40, y + 2, 14))
        .map_err(e)?;
    y += 26;
    right
        .draw(&Rectangle::new([(12, y), (30, y + 18)], HOLE.filled()))
        .map_err(e)?;
    right
        .draw(&text("hole (no memory)", 40, y + 2, 14))
        .map_err(e)?;
    y += 26;
    right
        .draw(&Circle::new((21, y + 9), 4, BLACK.filled()))
        .map_err(e)?;
    right
        .draw(&text("mixed: more than one mobility", 40, y + 2, 14))
        .map_err(e)?;
    y += 40;
    right
        .draw(&text("Shade: share of the pageblock free", 10, y, 15))
        .map_err(e)?;
    y += 24;
    let steps = 10;
    for i in 0..=steps {
        let f = f64::from(i) / f64::from(steps);
        let x0 = 12 + i * 22;
        right
            .draw(&Rectangle::new(
                [(x0, y), (x0 + 22, y + 18)],
                lerp_white(UNMOVABLE, f * (1.0 - MIN_TINT)).filled(),
            ))
            .map_err(e)?;
    }
    y += 22;
    right.draw(&text("0% free", 10, y, 13)).map_err(e)?;
    right.draw(&text("99% free", 200, y, 13)).map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

// -----------------------------------------------------------------------------
// Free blocks per order over time
// -----------------------------------------------------------------------------

const ORDER_COLOURS: [RGBColor; 11] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x00, 0x00, 0x00),
];

/// Draws free blocks per order (log scale) over the samples' `event` axis, for the
/// zone at index `zone` of each sample, into a PNG or SVG.
///
/// # Errors
/// No samples, an unknown extension, or a drawing or I/O error.
pub fn render_buddyinfo_chart(
    samples: &[BuddySample],
    zone: usize,
    path: &Path,
    title: &str,
    x_label: &str,
) -> Result<(), MapError> {
    register_font();
    if samples.is_empty() {
        return Err(MapError("no samples".into()));
    }
    let (w, h) = (1200, 700);
    match path.extension().and_then(|x| x.to_str()) {
        Some("png") => draw_chart(
            BitMapBackend::new(path, (w, h)).into_drawing_area(),
            samples,
            zone,
            title,
            x_label,
        ),
        Some("svg") => draw_chart(
            SVGBackend::new(path, (w, h)).into_drawing_area(),
            samples,
            zone,
            title,
            x_label,
        ),
        _ => Err(MapError(format!("{}: use .png or .svg", path.display()))),
    }
}

fn draw_chart<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    samples: &[BuddySample],
    zone: usize,
    title: &str,
    x_label: &str,
) -> Result<(), MapError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(e)?;
    let series = |o: usize| -> Vec<(f64, f64)> {
        samples
            .iter()
            .filter_map(|s| {
                let b = s.free_blocks.get(zone)?;
                Some((s.event as f64, b.get(o).copied().unwrap_or(0) as f64))
            })
            .collect()
    };
    let orders = samples
        .iter()
        .filter_map(|s| s.free_blocks.get(zone).map(Vec::len))
        .max()
        .unwrap_or(0);
    let x_max = samples.last().map_or(1.0, |s| s.event as f64).max(1.0);
    let y_max = (0..orders)
        .flat_map(|o| series(o).into_iter().map(|p| p.1))
        .fold(1.0f64, f64::max);
    let floor = 0.8;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 20))
        .margin(15)
        .x_label_area_size(55)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..x_max, (floor..y_max * 3.0).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("free blocks (log scale; 0 drawn on the axis)")
        .x_label_formatter(&|x| {
            if x_max >= 1e6 {
                format!("{:.1}M", x / 1e6)
            } else if x_max >= 1e4 {
                format!("{:.0}k", x / 1e3)
            } else {
                format!("{x:.0}")
            }
        })
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .draw()
        .map_err(e)?;
    for o in 0..orders {
        let c = ORDER_COLOURS[o % ORDER_COLOURS.len()];
        let pts: Vec<(f64, f64)> = series(o)
            .into_iter()
            .map(|(x, y)| (x, y.max(floor)))
            .collect();
        let width = if o >= 9 { 3 } else { 2 };
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(width)))
            .map_err(e)?
            .label(format!("order {o} ({} KiB)", 4u64 << o))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(width))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 13))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use zonealloc::{Config, Gfp};

    #[test]
    fn cells_count_free_and_owned_pages() {
        let za = ZoneAllocator::new(Config {
            nr_cpus: 1,
            ..Config::with_bytes(64 << 20)
        })
        .unwrap();
        let p = za.alloc_pages_on(0, Gfp::KERNEL, Order(3)).unwrap();
        za.drain_all_pages();
        let m = zone_map(&za, None, &[(p, Order(3), Migratetype::Unmovable)]).unwrap();
        assert_eq!(m.cells.len(), 32);
        let total_free: u32 = m.cells.iter().map(|c| c.free + c.pcp).sum();
        assert_eq!(
            u64::from(total_free),
            za.nr_free_pages() + za.nr_pcp_pages()
        );
        let c = m.cells[(p.0 / 512) as usize];
        assert_eq!(c.owned[0], 8);
        assert_eq!(c.unknown(), 0);
        assert!(!cell_colour(&c).1);
    }

    #[test]
    fn shade_fades_with_free_share() {
        let full = Cell {
            present: 512,
            owned: [512, 0, 0],
            ..Cell::default()
        };
        let nearly_free = Cell {
            present: 512,
            free: 511,
            owned: [1, 0, 0],
            ..Cell::default()
        };
        assert_eq!(cell_colour(&full).0, UNMOVABLE);
        let c = cell_colour(&nearly_free).0;
        assert!(c.1 > UNMOVABLE.1 && c != WHITE);
    }
}
