//! Pictures: a zone map (one cell per pageblock) and free blocks per order over time.
//!
//! Top layer, read-only over the allocator's public API. The map walks a zone's
//! frames with `frame_state()` block by block (a free or allocated block is skipped
//! whole, so the walk is O(blocks + hole frames)) to count each pageblock's free
//! pages, and reads each pageblock's migratetype with `pageblock_migratetype()`.
//!
//! What the map shows is what Linux's anti-fragmentation is about:
//!
//! * the **colour** is the pageblock's migratetype (Unmovable, Movable, Reclaimable,
//!   HighAtomic, Isolate), as `/proc/pagetypeinfo` counts them;
//! * the **shade** says how much of the pageblock is free: full colour when nothing
//!   is free, fading as it empties; a pageblock with nothing allocated in it (a whole
//!   free order-9 block on x86) is drawn much paler still, so free pageblocks stand out;
//! * a **dot** marks a *mixed* pageblock: it holds allocated memory of a mobility
//!   other than its own type, the pollution a fallback leaves behind when it steals
//!   pages without claiming the block. The dot has the colour of that other mobility
//!   (the largest one if several).
//!
//! zonealloc does not record which mobility each allocation asked for, so the mixed
//! dots come from the caller's `owners` (the blocks it holds and the migratetype it
//! asked for each), as page_owner would give them on Linux. Without owners no
//! pageblock is marked mixed; memory the caller does not name is counted as
//! allocated but never makes a pageblock mixed. HighAtomic and Isolate pageblocks
//! are reserves that any mobility may use and are never marked mixed.
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
use serde::{Serialize, Serializer};
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

/// The mobilities an allocation can ask for, in `Cell::owned` order.
const MOBILITIES: [Migratetype; 3] = [
    Migratetype::Unmovable,
    Migratetype::Movable,
    Migratetype::Reclaimable,
];

fn ser_mt<S: Serializer>(mt: &Option<Migratetype>, s: S) -> Result<S::Ok, S::Error> {
    match mt {
        Some(m) => s.serialize_some(m.name()),
        None => s.serialize_none(),
    }
}

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
    /// The pageblock's migratetype (`None`: a hole or not read).
    #[serde(serialize_with = "ser_mt")]
    pub migratetype: Option<Migratetype>,
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

    /// Named allocated frames whose mobility is not the pageblock's type (0 for
    /// HighAtomic, Isolate and unknown pageblocks).
    pub fn foreign(&self) -> u32 {
        match self.migratetype {
            Some(mt) if mt.is_mergeable() => MOBILITIES
                .iter()
                .zip(self.owned)
                .filter(|(m, _)| **m != mt)
                .map(|(_, n)| n)
                .sum(),
            _ => 0,
        }
    }

    /// Whether the pageblock is mixed: it holds named allocated memory of a mobility
    /// other than its type (Linux's fallback pollution).
    pub fn mixed(&self) -> bool {
        self.foreign() > 0
    }

    /// The foreign mobility with the most frames, if the pageblock is mixed.
    pub fn main_foreign(&self) -> Option<Migratetype> {
        let mt = self.migratetype.filter(|m| m.is_mergeable())?;
        MOBILITIES
            .iter()
            .zip(self.owned)
            .filter(|&(m, n)| *m != mt && n > 0)
            .max_by_key(|&(_, n)| n)
            .map(|(m, _)| *m)
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

impl ZoneMap {
    /// Pageblocks of migratetype `mt` (holes left out).
    pub fn pageblocks_of(&self, mt: Migratetype) -> usize {
        self.cells
            .iter()
            .filter(|c| c.present > 0 && c.migratetype == Some(mt))
            .count()
    }

    /// Mixed pageblocks (see [`Cell::mixed`]).
    pub fn mixed_pageblocks(&self) -> usize {
        self.cells.iter().filter(|c| c.mixed()).count()
    }

    /// Pageblocks with frames and nothing allocated.
    pub fn free_pageblocks(&self) -> usize {
        self.cells
            .iter()
            .filter(|c| c.present > 0 && c.allocated() == 0)
            .count()
    }
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
            Some(FrameState::PerCpu { order } | FrameState::Cached { order }) => {
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
    for (i, c) in cells.iter_mut().enumerate() {
        if c.present > 0 {
            let first = (base + i as u64 * pb).max(start.0);
            c.migratetype = za.pageblock_migratetype(Pfn(first));
        }
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
const RECLAIMABLE: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const HIGHATOMIC: RGBColor = RGBColor(0x94, 0x67, 0xbd);
const ISOLATE: RGBColor = RGBColor(0x8c, 0x56, 0x4b);
const CMA: RGBColor = RGBColor(0x17, 0xbe, 0xcf);
const UNKNOWN: RGBColor = RGBColor(0x70, 0x70, 0x70);
const HOLE: RGBColor = RGBColor(0x30, 0x30, 0x30);
const EDGE: RGBColor = RGBColor(0xc8, 0xc8, 0xc8);
/// Share of colour kept by an all-but-empty pageblock, so one pinned page shows.
const MIN_TINT: f64 = 0.4;
/// Share of colour kept by a pageblock with nothing allocated in it.
const FREE_TINT: f64 = 0.13;

fn lerp_white(c: RGBColor, white_share: f64) -> RGBColor {
    let m = |v: u8| (f64::from(v) + (255.0 - f64::from(v)) * white_share).round() as u8;
    RGBColor(m(c.0), m(c.1), m(c.2))
}

/// The colour of a migratetype (`None`: not known).
fn mt_colour(mt: Option<Migratetype>) -> RGBColor {
    match mt {
        Some(Migratetype::Unmovable) => UNMOVABLE,
        Some(Migratetype::Movable) => MOVABLE,
        Some(Migratetype::Reclaimable) => RECLAIMABLE,
        Some(Migratetype::HighAtomic) => HIGHATOMIC,
        Some(Migratetype::Cma) => CMA,
        Some(Migratetype::Isolate) => ISOLATE,
        None => UNKNOWN,
    }
}

/// `base` shaded for a pageblock with `free` of `present` frames free.
fn shade(base: RGBColor, free: u32, present: u32) -> RGBColor {
    if free >= present {
        return lerp_white(base, 1.0 - FREE_TINT);
    }
    let free_share = f64::from(free) / f64::from(present.max(1));
    lerp_white(base, free_share * (1.0 - MIN_TINT))
}

/// The cell's colour and, for a mixed pageblock, the colour of its dot.
fn cell_colour(c: &Cell) -> (RGBColor, Option<RGBColor>) {
    if c.present == 0 {
        return (HOLE, None);
    }
    let colour = shade(mt_colour(c.migratetype), c.free + c.pcp, c.present);
    (colour, c.main_foreign().map(|m| mt_colour(Some(m))))
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
    /// Allocated blocks with the mobility they asked for, to find mixed pageblocks
    /// (see the module docs).
    pub owners: &'a [(Pfn, Order, Migratetype)],
    /// Pageblocks per row (default: about twice as many columns as rows).
    pub columns: Option<usize>,
    /// Mark mixed pageblocks with a dot (default: true).
    pub mark_mixed: bool,
    /// Lines (`\n`-separated) under the subtitle saying what the picture is (and is
    /// not).
    pub note: Option<String>,
}

impl Default for MapOptions<'_> {
    fn default() -> Self {
        MapOptions {
            title: "zone map".into(),
            zone: None,
            owners: &[],
            columns: None,
            mark_mixed: true,
            note: None,
        }
    }
}

/// What the drawing needs besides the map.
struct Layout<'a> {
    cols: usize,
    rows: usize,
    legend_w: u32,
    title: &'a str,
    note: Option<&'a str>,
    /// Mixed pageblocks are marked (owners given and `mark_mixed`).
    marks: bool,
    owners_given: bool,
    grouping: bool,
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
    let cell = (640 / cols).clamp(2, 40) as u32;
    let plot_w = cell * cols as u32;
    let plot_h = cell * rows as u32;
    let legend_w = 470;
    let w = plot_w + 120 + legend_w;
    let note_lines = opts.note.as_deref().map_or(0, |n| n.lines().count()) as u32;
    let h = (plot_h + 160 + 22 * note_lines).max(640);
    let lay = Layout {
        cols,
        rows,
        legend_w,
        title: &opts.title,
        note: opts.note.as_deref(),
        marks: opts.mark_mixed && !opts.owners.is_empty(),
        owners_given: !opts.owners.is_empty(),
        grouping: za.config().mobility_grouping,
    };
    match path.extension().and_then(|x| x.to_str()) {
        Some("png") => {
            let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
            draw_map(root, &map, &lay)?;
        }
        Some("svg") => {
            let root = SVGBackend::new(path, (w, h)).into_drawing_area();
            draw_map(root, &map, &lay)?;
        }
        _ => return Err(MapError(format!("{}: use .png or .svg", path.display()))),
    }
    Ok(map)
}

/// A mixed pageblock's dot: `fill` with a black ring.
fn dot<C: Copy>(at: C, r: i32, fill: RGBColor) -> [Circle<C, i32>; 2] {
    [
        Circle::new(at, r + 1, BLACK.filled()),
        Circle::new(at, r, fill.filled()),
    ]
}

fn draw_map<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    map: &ZoneMap,
    lay: &Layout<'_>,
) -> Result<(), MapError>
where
    DB::ErrorType: 'static,
{
    let (cols, rows) = (lay.cols, lay.rows);
    root.fill(&WHITE).map_err(e)?;
    let (w, _) = root.dim_in_pixel();
    let (left, right) = root.split_horizontally(w - lay.legend_w);
    let pb_mib = (map.pageblock_pages * 4096) >> 20;
    let row_mib = pb_mib * cols as u64;
    let free: u64 = map.cells.iter().map(|c| u64::from(c.free + c.pcp)).sum();
    let present: u64 = map.cells.iter().map(|c| u64::from(c.present)).sum();
    let mixed = if lay.marks {
        format!(", {} mixed", map.mixed_pageblocks())
    } else {
        String::new()
    };
    let subtitle = format!(
        "zone {} from pfn {:#x}: {} pageblocks, {} wholly free{mixed}, {:.1}% of pages free",
        map.zone.zone_type,
        map.start_pfn,
        map.cells.len(),
        map.free_pageblocks(),
        100.0 * free as f64 / present.max(1) as f64
    );
    root.titled(lay.title, (FONT, 23)).map_err(e)?;
    let mut chart = ChartBuilder::on(&left)
        .margin(10)
        .margin_top(52 + 22 * lay.note.map_or(0, |n| n.lines().count()) as u32)
        .x_label_area_size(50)
        .y_label_area_size(105)
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
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 17))
        .draw()
        .map_err(e)?;
    let area = chart.plotting_area();
    let (px, _) = area.dim_in_pixel();
    let cell_px = px as usize / cols.max(1);
    for (i, c) in map.cells.iter().enumerate() {
        let (x, y) = ((i % cols) as f64, (i / cols) as f64);
        let (colour, foreign) = cell_colour(c);
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
        if let (Some(f), true) = (foreign, lay.marks) {
            let r = (cell_px as i32 / 4).max(1);
            for d in dot((x + 0.5, y + 0.5), r, f) {
                area.draw(&d).map_err(e)?;
            }
        }
    }
    left.draw(&Text::new(
        subtitle,
        (90, 30),
        (FONT, 17).into_font().color(&BLACK),
    ))
    .map_err(e)?;
    for (i, line) in lay.note.unwrap_or("").lines().enumerate() {
        left.draw(&Text::new(
            line.to_string(),
            (90, 54 + 22 * i as i32),
            (FONT, 17).into_font().color(&RGBColor(0x60, 0x20, 0x20)),
        ))
        .map_err(e)?;
    }
    draw_legend(&right, map, lay)?;
    root.present().map_err(e)?;
    Ok(())
}

fn draw_legend<DB: DrawingBackend>(
    right: &DrawingArea<DB, Shift>,
    map: &ZoneMap,
    lay: &Layout<'_>,
) -> Result<(), MapError>
where
    DB::ErrorType: 'static,
{
    let text = |s: &str, x: i32, y: i32, size: u32| {
        Text::new(
            s.to_string(),
            (x, y),
            (FONT, size).into_font().color(&BLACK),
        )
    };
    let swatch = |y: i32, c: RGBColor| -> Result<(), MapError> {
        right
            .draw(&Rectangle::new([(12, y), (32, y + 20)], c.filled()))
            .map_err(e)?;
        right
            .draw(&Rectangle::new(
                [(12, y), (32, y + 20)],
                EDGE.stroke_width(1),
            ))
            .map_err(e)
    };
    let mut y = 56;
    right
        .draw(&text("Colour: the pageblock's migratetype", 10, y, 18))
        .map_err(e)?;
    y += 30;
    // CMA only where an area is configured, as the kernel prints it.
    for mt in Migratetype::ALL {
        let n = map.pageblocks_of(mt);
        if mt == Migratetype::Cma && n == 0 {
            continue;
        }
        swatch(y, mt_colour(Some(mt)))?;
        let label = format!(
            "{} ({n} pageblock{})",
            mt.name(),
            if n == 1 { "" } else { "s" }
        );
        right.draw(&text(&label, 42, y + 3, 17)).map_err(e)?;
        y += 31;
    }
    let unread = map
        .cells
        .iter()
        .filter(|c| c.present > 0 && c.migratetype.is_none())
        .count();
    if unread > 0 {
        swatch(y, UNKNOWN)?;
        right
            .draw(&text(&format!("type not known ({unread})"), 42, y + 3, 17))
            .map_err(e)?;
        y += 31;
    }
    swatch(y, HOLE)?;
    right
        .draw(&text("hole (no memory)", 42, y + 3, 17))
        .map_err(e)?;
    y += 50;
    right
        .draw(&text("Shade: share of the pageblock free", 10, y, 18))
        .map_err(e)?;
    y += 30;
    let steps = 10u32;
    for base in [UNMOVABLE, MOVABLE, RECLAIMABLE] {
        for i in 0..steps {
            let x0 = 12 + i as i32 * 24;
            let c = shade(base, i * 512 / steps, 512);
            right
                .draw(&Rectangle::new([(x0, y), (x0 + 24, y + 10)], c.filled()))
                .map_err(e)?;
        }
        y += 10;
    }
    y += 5;
    right.draw(&text("nothing free", 10, y, 16)).map_err(e)?;
    right.draw(&text("90-99% free", 160, y, 16)).map_err(e)?;
    y += 30;
    for (i, base) in [UNMOVABLE, MOVABLE, RECLAIMABLE].into_iter().enumerate() {
        let x0 = 12 + i as i32 * 8;
        right
            .draw(&Rectangle::new(
                [(x0, y), (x0 + 8, y + 20)],
                shade(base, 512, 512).filled(),
            ))
            .map_err(e)?;
    }
    right
        .draw(&Rectangle::new(
            [(12, y), (36, y + 20)],
            EDGE.stroke_width(1),
        ))
        .map_err(e)?;
    right
        .draw(&text(
            "nothing allocated: a whole free pageblock",
            44,
            y + 3,
            17,
        ))
        .map_err(e)?;
    y += 50;
    right
        .draw(&text("Dot: mixed pageblock", 10, y, 18))
        .map_err(e)?;
    y += 30;
    if lay.marks {
        // The example is the commonest kind of mixed pageblock in this map.
        let mut kinds: Vec<((Migratetype, Migratetype), usize)> = Vec::new();
        for c in &map.cells {
            if let (Some(mt), Some(f)) = (c.migratetype, c.main_foreign()) {
                match kinds.iter_mut().find(|(k, _)| *k == (mt, f)) {
                    Some((_, n)) => *n += 1,
                    None => kinds.push(((mt, f), 1)),
                }
            }
        }
        let common = kinds.iter().max_by_key(|(_, n)| *n).copied();
        let ((block, foreign), n) =
            common.unwrap_or(((Migratetype::Movable, Migratetype::Unmovable), 0));
        swatch(y, shade(mt_colour(Some(block)), 256, 512))?;
        for d in dot((22, y + 10), 5, mt_colour(Some(foreign))) {
            right.draw(&d).map_err(e)?;
        }
        right
            .draw(&text("holds allocated memory of another", 42, y - 6, 17))
            .map_err(e)?;
        let (line2, line3) = if n > 0 {
            (
                format!("mobility: {n} here hold {} pages", foreign.name()),
                format!("in a {} pageblock (the commonest)", block.name()),
            )
        } else {
            (
                format!("mobility (e.g. {} pages in a", foreign.name()),
                format!("{} pageblock; none in this map)", block.name()),
            )
        };
        right.draw(&text(&line2, 42, y + 14, 17)).map_err(e)?;
        right.draw(&text(&line3, 42, y + 34, 17)).map_err(e)?;
        y += 62;
        right
            .draw(&text(
                "dot colour = that mobility (the largest if several),",
                10,
                y,
                16,
            ))
            .map_err(e)?;
        y += 21;
        right
            .draw(&text(
                "as asked for by the allocations the caller named",
                10,
                y,
                16,
            ))
            .map_err(e)?;
        y += 21;
    } else {
        let why = if lay.owners_given {
            "not marked in this picture"
        } else {
            "not marked: no allocation's mobility was given"
        };
        right.draw(&text(why, 10, y, 16)).map_err(e)?;
        y += 21;
    }
    if !lay.grouping {
        y += 15;
        right
            .draw(&text(
                "Mobility grouping off: every request is served",
                10,
                y,
                16,
            ))
            .map_err(e)?;
        y += 21;
        right
            .draw(&text(
                "as Unmovable, so types separate nothing (Linux's",
                10,
                y,
                16,
            ))
            .map_err(e)?;
        y += 21;
        right
            .draw(&text("page_group_by_mobility_disabled)", 10, y, 16))
            .map_err(e)?;
    }
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

/// What the x axis of a free-blocks chart counts.
#[derive(Clone, Copy, Debug)]
pub enum XAxis<'a> {
    /// The samples' `event` (operations or events), with this label.
    Events(&'a str),
    /// The samples' `trace_time_ns`, in seconds of the trace.
    TraceSeconds,
}

/// Draws free blocks per order (log scale) over the samples' events or trace time,
/// for the zone at index `zone` of each sample, into a PNG or SVG. The legend sits
/// beside the plot, never over a line.
///
/// # Errors
/// No samples, an unknown extension, or a drawing or I/O error.
pub fn render_buddyinfo_chart(
    samples: &[BuddySample],
    zone: usize,
    path: &Path,
    title: &str,
    x: XAxis<'_>,
) -> Result<(), MapError> {
    register_font();
    if samples.is_empty() {
        return Err(MapError("no samples".into()));
    }
    let (w, h) = (1000, 560);
    match path.extension().and_then(|x| x.to_str()) {
        Some("png") => draw_chart(
            BitMapBackend::new(path, (w, h)).into_drawing_area(),
            samples,
            zone,
            title,
            x,
        ),
        Some("svg") => draw_chart(
            SVGBackend::new(path, (w, h)).into_drawing_area(),
            samples,
            zone,
            title,
            x,
        ),
        _ => Err(MapError(format!("{}: use .png or .svg", path.display()))),
    }
}

fn draw_chart<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    samples: &[BuddySample],
    zone: usize,
    title: &str,
    x_axis: XAxis<'_>,
) -> Result<(), MapError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(e)?;
    let x_of = |s: &BuddySample| match x_axis {
        XAxis::Events(_) => s.event as f64,
        XAxis::TraceSeconds => s.trace_time_ns as f64 / 1e9,
    };
    let series = |o: usize| -> Vec<(f64, f64)> {
        samples
            .iter()
            .filter_map(|s| {
                let b = s.free_blocks.get(zone)?;
                Some((x_of(s), b.get(o).copied().unwrap_or(0) as f64))
            })
            .collect()
    };
    let orders = samples
        .iter()
        .filter_map(|s| s.free_blocks.get(zone).map(Vec::len))
        .max()
        .unwrap_or(0);
    let x_max = samples.last().map_or(1.0, x_of);
    let x_max = if x_max > 0.0 { x_max } else { 1.0 };
    let y_max = (0..orders)
        .flat_map(|o| series(o).into_iter().map(|p| p.1))
        .fold(1.0f64, f64::max);
    let floor = 0.8;
    let root = root.titled(title, (FONT, 21)).map_err(e)?;
    let (w, _) = root.dim_in_pixel();
    let legend_w = 190;
    let (plot, legend) = root.split_horizontally(w - legend_w);
    let mut chart = ChartBuilder::on(&plot)
        .margin(15)
        .x_label_area_size(55)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..x_max, (floor * 0.9..y_max * 3.0).log_scale())
        .map_err(e)?;
    let x_desc = match x_axis {
        XAxis::Events(label) => label.to_string(),
        XAxis::TraceSeconds => "seconds of the trace".to_string(),
    };
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("free blocks (log scale; 0 drawn on the axis)")
        .x_label_formatter(&|x| match x_axis {
            XAxis::TraceSeconds if x_max < 10.0 => format!("{x:.1}"),
            XAxis::TraceSeconds => format!("{x:.0}"),
            XAxis::Events(_) if x_max >= 1e6 => format!("{:.1}M", x / 1e6),
            XAxis::Events(_) if x_max >= 1e4 => format!("{:.0}k", x / 1e3),
            XAxis::Events(_) => format!("{x:.0}"),
        })
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style((FONT, 17))
        .axis_desc_style((FONT, 17))
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
        // Segment by segment: a wide polyline's mitred joins shoot spikes far past
        // the plot where the line turns sharply (a count dropping to 0 and back).
        chart
            .draw_series(
                pts.windows(2)
                    .map(|w| PathElement::new(vec![w[0], w[1]], c.stroke_width(width))),
            )
            .map_err(e)?;
        // The legend, beside the plot: one line per order, largest order on top
        // (the order the lines mostly stack in).
        let y = 44 + (orders - 1 - o) as i32 * 26;
        legend
            .draw(&PathElement::new(
                vec![(8, y), (34, y)],
                c.stroke_width(width),
            ))
            .map_err(e)?;
        legend
            .draw(&Text::new(
                format!("order {o} ({} KiB)", 4u64 << o),
                (42, y - 8),
                (FONT, 16).into_font().color(&BLACK),
            ))
            .map_err(e)?;
    }
    legend
        .draw(&Text::new(
            "free blocks of".to_string(),
            (8, 12),
            (FONT, 16).into_font().color(&BLACK),
        ))
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// Draws one zone's free blocks at orders 3, 6 and 9 over trace time, the
/// kernel's (its snapshots: dashed, with a dot at each) beside zonealloc's replay
/// (solid), into a PNG or SVG: the shape comparison of `compare` as a picture.
/// `zone` names the zone in the moments' shapes.
///
/// # Errors
/// No moments, an unknown extension, or a drawing or I/O error.
pub fn render_shape_chart(
    moments: &[crate::compare::Moment],
    zone: zonealloc::ZoneType,
    path: &Path,
    title: &str,
) -> Result<(), MapError> {
    register_font();
    if moments.is_empty() {
        return Err(MapError("no snapshots to draw".into()));
    }
    let (w, h) = (1000, 560);
    match path.extension().and_then(|x| x.to_str()) {
        Some("png") => draw_shape(
            BitMapBackend::new(path, (w, h)).into_drawing_area(),
            moments,
            zone,
            title,
        ),
        Some("svg") => draw_shape(
            SVGBackend::new(path, (w, h)).into_drawing_area(),
            moments,
            zone,
            title,
        ),
        _ => Err(MapError(format!("{}: use .png or .svg", path.display()))),
    }
}

/// The orders a shape chart draws.
pub const SHAPE_ORDERS: [usize; 3] = [3, 6, 9];

fn draw_shape<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    moments: &[crate::compare::Moment],
    zone: zonealloc::ZoneType,
    title: &str,
) -> Result<(), MapError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(e)?;
    let at = |s: &crate::kstate::Shape, o: usize| {
        s.zones
            .iter()
            .find(|z| z.zone == zone)
            .and_then(|z| z.free.get(o).copied())
            .unwrap_or(0) as f64
    };
    let floor = 0.8;
    let series = |o: usize, kernel: bool| -> Vec<(f64, f64)> {
        moments
            .iter()
            .map(|m| {
                let s = if kernel { &m.kernel } else { &m.zonealloc };
                (m.seconds, at(s, o).max(floor))
            })
            .collect()
    };
    let x_max = moments.iter().map(|m| m.seconds).fold(1.0f64, f64::max);
    let y_max = SHAPE_ORDERS
        .iter()
        .flat_map(|&o| series(o, true).into_iter().chain(series(o, false)))
        .map(|p| p.1)
        .fold(1.0f64, f64::max);
    let root = root.titled(title, (FONT, 21)).map_err(e)?;
    let (w, _) = root.dim_in_pixel();
    let legend_w = 230;
    let (plot, legend) = root.split_horizontally(w - legend_w);
    let mut chart = ChartBuilder::on(&plot)
        .margin(15)
        .x_label_area_size(55)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..x_max * 1.02, (floor * 0.9..y_max * 3.0).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("seconds of the trace since the start")
        .y_desc("free blocks (log scale; 0 drawn on the axis)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style((FONT, 17))
        .axis_desc_style((FONT, 17))
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .draw()
        .map_err(e)?;
    for (i, &o) in SHAPE_ORDERS.iter().enumerate() {
        let c = ORDER_COLOURS[o % ORDER_COLOURS.len()];
        let z = series(o, false);
        chart
            .draw_series(
                z.windows(2)
                    .map(|w| PathElement::new(vec![w[0], w[1]], c.stroke_width(3))),
            )
            .map_err(e)?;
        let k = series(o, true);
        // Dashed: every other piece of each segment between snapshots.
        chart
            .draw_series(k.windows(2).flat_map(|w| {
                let (a, b) = (w[0], w[1]);
                (0..8).step_by(2).map(move |j| {
                    let t0 = j as f64 / 8.0;
                    let t1 = (j + 1) as f64 / 8.0;
                    let lerp = |t: f64| {
                        (
                            a.0 + (b.0 - a.0) * t,
                            // Geometric: the y axis is logarithmic.
                            a.1 * (b.1 / a.1).powf(t),
                        )
                    };
                    PathElement::new(vec![lerp(t0), lerp(t1)], c.stroke_width(2))
                })
            }))
            .map_err(e)?;
        chart
            .draw_series(k.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(e)?;
        let y = 44 + i as i32 * 56;
        legend
            .draw(&PathElement::new(vec![(8, y), (34, y)], c.stroke_width(3)))
            .map_err(e)?;
        legend
            .draw(&Text::new(
                format!("order {o}, zonealloc"),
                (42, y - 8),
                (FONT, 16).into_font().color(&BLACK),
            ))
            .map_err(e)?;
        legend
            .draw(&PathElement::new(
                vec![(8, y + 24), (16, y + 24)],
                c.stroke_width(2),
            ))
            .map_err(e)?;
        legend
            .draw(&PathElement::new(
                vec![(24, y + 24), (32, y + 24)],
                c.stroke_width(2),
            ))
            .map_err(e)?;
        legend
            .draw(&Circle::new((20, y + 24), 3, c.filled()))
            .map_err(e)?;
        legend
            .draw(&Text::new(
                format!("order {o}, kernel"),
                (42, y + 16),
                (FONT, 16).into_font().color(&BLACK),
            ))
            .map_err(e)?;
    }
    legend
        .draw(&Text::new(
            "free blocks of".to_string(),
            (8, 12),
            (FONT, 16).into_font().color(&BLACK),
        ))
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
        // The fallback claimed the pageblock for the unmovable request: not mixed.
        assert_eq!(c.migratetype, Some(Migratetype::Unmovable));
        assert_eq!(c.migratetype, za.pageblock_migratetype(p));
        assert!(!c.mixed());
        assert_eq!(cell_colour(&c).1, None);
        for (i, c) in m.cells.iter().enumerate() {
            let pfn = m.start_pfn + i as u64 * m.pageblock_pages;
            assert_eq!(c.migratetype, za.pageblock_migratetype(Pfn(pfn)), "{i}");
        }
    }

    #[test]
    fn shade_fades_with_free_share_and_free_pageblocks_stand_out() {
        let full = Cell {
            present: 512,
            owned: [512, 0, 0],
            migratetype: Some(Migratetype::Unmovable),
            ..Cell::default()
        };
        let nearly_free = Cell {
            present: 512,
            free: 511,
            owned: [1, 0, 0],
            ..full
        };
        let empty = Cell {
            present: 512,
            free: 500,
            pcp: 12,
            owned: [0; 3],
            ..full
        };
        assert_eq!(cell_colour(&full).0, UNMOVABLE);
        let c = cell_colour(&nearly_free).0;
        assert!(c.1 > UNMOVABLE.1 && c != WHITE);
        let f = cell_colour(&empty).0;
        assert!(f.1 > c.1 + 40 && f != WHITE, "{f:?} vs {c:?}");
        let movable = Cell {
            migratetype: Some(Migratetype::Movable),
            ..full
        };
        assert_eq!(cell_colour(&movable).0, MOVABLE);
        let hole = Cell::default();
        assert_eq!(cell_colour(&hole), (HOLE, None));
    }

    #[test]
    fn mixed_means_memory_of_another_mobility_than_the_pageblock() {
        let movable = Cell {
            present: 512,
            free: 100,
            owned: [0, 400, 0],
            migratetype: Some(Migratetype::Movable),
            ..Cell::default()
        };
        assert!(!movable.mixed());
        let polluted = Cell {
            owned: [3, 400, 9],
            ..movable
        };
        assert!(polluted.mixed());
        assert_eq!(polluted.foreign(), 12);
        assert_eq!(polluted.main_foreign(), Some(Migratetype::Reclaimable));
        assert_eq!(cell_colour(&polluted).1, Some(RECLAIMABLE));
        // Unnamed memory never makes a block mixed; neither do the reserves.
        let unnamed = Cell {
            owned: [0; 3],
            ..movable
        };
        assert!(!unnamed.mixed() && unnamed.unknown() == 412);
        for mt in [Migratetype::HighAtomic, Migratetype::Isolate] {
            let r = Cell {
                migratetype: Some(mt),
                ..polluted
            };
            assert!(!r.mixed() && r.main_foreign().is_none());
        }
    }
}
