//! Configuration: the memory layout (nodes, zones, holes) and the tunables.
//!
//! A `Config` is plain data, validated once by `Config::validate()` when an allocator
//! is built. The defaults are x86-64 Linux's: 4 KiB pages, `MAX_PAGE_ORDER` 10,
//! `pageblock_order` 9, `watermark_scale_factor` 10, the default lowmem reserve ratios.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::frame::zone_metadata_bytes;
use crate::types::{Order, Pfn, ZoneType, MAX_NR_ZONES, MAX_ORDER_LIMIT};

/// A node's distance to itself (`LOCAL_DISTANCE`).
pub const LOCAL_DISTANCE: u8 = 10;
/// A node's distance to another when no table says (`REMOTE_DISTANCE`).
pub const REMOTE_DISTANCE: u8 = 20;

/// Largest `min_free_kbytes` accepted: Linux's sysctl is an `int`.
pub const MIN_FREE_KBYTES_MAX: u64 = i32::MAX as u64;

/// Largest `watermark_boost_factor` accepted (Linux's sysctl is an `int`, 0 and up).
pub const WATERMARK_BOOST_FACTOR_MAX: u64 = i32::MAX as u64;

/// Largest `watermark_scale_factor` accepted (Linux's sysctl range is 1..=3000).
pub const WATERMARK_SCALE_FACTOR_MAX: u64 = 3000;

/// One zone: a range of frame numbers of one zone type, possibly with holes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneConfig {
    /// The kind of zone.
    pub zone_type: ZoneType,
    /// First frame of the zone (`zone_start_pfn`); need not be aligned.
    pub start_pfn: Pfn,
    /// Frames spanned, holes included (`spanned_pages`). Zero for an empty zone.
    pub spanned_pages: u64,
    /// Ranges `(start, nr_pages)` inside the zone with no memory behind them.
    pub holes: Vec<(Pfn, u64)>,
}

impl ZoneConfig {
    /// A zone without holes.
    pub fn new(zone_type: ZoneType, start_pfn: Pfn, spanned_pages: u64) -> ZoneConfig {
        ZoneConfig {
            zone_type,
            start_pfn,
            spanned_pages,
            holes: Vec::new(),
        }
    }

    /// Adds a hole of `nr_pages` frames at `start`.
    #[must_use]
    pub fn with_hole(mut self, start: Pfn, nr_pages: u64) -> ZoneConfig {
        self.holes.push((start, nr_pages));
        self
    }

    /// One past the last frame of the zone.
    pub fn end_pfn(&self) -> Pfn {
        self.start_pfn.add(self.spanned_pages)
    }

    /// The zone's present frames: its span less its holes, as sorted, disjoint
    /// `(start, end)` frame numbers (overlapping holes counted once).
    pub fn present_ranges(&self) -> Vec<(u64, u64)> {
        let (start, end) = (
            self.start_pfn.0,
            self.start_pfn.0.saturating_add(self.spanned_pages),
        );
        let mut holes: Vec<(u64, u64)> = self
            .holes
            .iter()
            .map(|&(h, n)| (h.0.max(start), h.0.saturating_add(n).min(end)))
            .filter(|&(a, b)| a < b)
            .collect();
        holes.sort_unstable();
        let mut out = Vec::with_capacity(holes.len() + 1);
        let mut at = start;
        for (a, b) in holes {
            if a > at {
                out.push((at, a));
            }
            at = at.max(b);
        }
        if at < end {
            out.push((at, end));
        }
        out
    }
}

/// A contiguous memory area (Linux's `cma=` or a device tree's `shared-dma-pool`):
/// whole pageblocks of one zone whose free memory only movable allocations may
/// borrow, so that `cma_alloc` can always empty a run of it by migrating the
/// borrowers out (see `cma`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmaConfig {
    /// The area's name, as `/sys/kernel/mm/cma/<name>` shows it, and as
    /// `ZoneAllocator::cma_area` finds it; unique among the areas.
    pub name: String,
    /// First frame; a multiple of the pageblock size.
    pub base: Pfn,
    /// Frames; a non-zero multiple of the pageblock size.
    pub nr_pages: u64,
}

/// One NUMA node: its zones, lowest zone type first.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NodeConfig {
    /// The node's zones, in ascending zone type order.
    pub zones: Vec<ZoneConfig>,
}

/// The whole allocator's configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// log2 of the page size in bytes (12 for 4 KiB).
    pub page_shift: u8,
    /// Largest block order (`MAX_PAGE_ORDER`, inclusive).
    pub max_order: Order,
    /// Order of a pageblock (`pageblock_order`), at most `max_order`.
    pub pageblock_order: Order,
    /// The nodes; node `i` has id `i`.
    pub nodes: Vec<NodeConfig>,
    /// `min_free_kbytes`; `None` computes it as Linux does from the zone sizes.
    pub min_free_kbytes: Option<u64>,
    /// `watermark_scale_factor` in units of 0.01 % (Linux default 10).
    pub watermark_scale_factor: u64,
    /// `watermark_boost_factor` in units of 0.01 % of the high watermark: how far
    /// fallbacks that steal from other pageblocks may raise the watermarks until
    /// kswapd (`reclaim::KswapdWorker`, or a kernel's own call to `balance_node`)
    /// has reclaimed, compacted and reset the boost. 0 (the default) turns
    /// boosting off: Linux's default is 15000, but a boost nothing resets would
    /// raise the watermarks for good, so it is for programs that run kswapd.
    pub watermark_boost_factor: u64,
    /// `lowmem_reserve_ratio` per zone type; 0 disables the reserve for that zone.
    pub lowmem_reserve_ratio: [u64; MAX_NR_ZONES],
    /// Group allocations by mobility (migratetypes). Even when `true`, Linux's rule
    /// disables grouping on zones too small for it.
    pub mobility_grouping: bool,
    /// CPUs, not threads: how many sets of per-CPU lists the allocator keeps,
    /// one per CPU id in `0..nr_cpus`. Default: the CPUs
    /// this process may run on (`std::thread::available_parallelism`), or 1
    /// without `std`.
    ///
    /// A call uses the lists of the CPU it runs on, not of its thread: the id
    /// comes from `Config::platform`'s `cpu_id` if a platform is set, else from
    /// the `cpu_id` hook, else from the operating system (the rseq area's
    /// `cpu_id`, or `sched_getcpu()`, on Linux with `std`; 0 elsewhere), and is
    /// taken modulo `nr_cpus`. Any number of threads may share an allocator:
    /// threads that run on one CPU (or on CPUs whose ids meet modulo
    /// `nr_cpus`) share that CPU's lists, which are taken with a try-lock, and
    /// a call that finds them held by another thread goes to the zone's buddy
    /// lists under the zone lock instead. More threads than `nr_cpus` (or a
    /// smaller `nr_cpus` than the machine has CPUs) is therefore always
    /// correct; it only costs contention on the shared lists and zone locks.
    /// The per-CPU stacks are keyed by the real CPU id too (see
    /// `ZoneAllocator::uses_cpu_stacks`). A `cpu_id` hook that returns each
    /// thread a number of its own below `nr_cpus` instead gives each thread its
    /// own lists, making `nr_cpus` a count of such numbers (the per-CPU stacks
    /// are off with a hook).
    pub nr_cpus: usize,
    /// Per-CPU list tunables.
    pub pcp: PcpConfig,
    /// How the allocator learns the current CPU. `None`: `sched_getcpu()` with `std`,
    /// CPU 0 without. The result is taken modulo `nr_cpus`. Any value is safe: it
    /// only picks which CPU's lists to try. The hook is read before a call takes
    /// anything, and with `std` a hook that panics reads as CPU 0 (the panic is
    /// caught after the panic hook has reported it), so no call is left half done.
    pub cpu_id: Option<fn() -> usize>,
    /// The machine the allocator runs on, for a kernel or any host whose code can
    /// be interrupted by code that allocates (see `Platform`): every allocator
    /// lock is then taken with interrupts disabled through it, and it names the
    /// current CPU (before `cpu_id`). `None` (the default): no interrupt guard,
    /// the CPU from the operating system.
    pub platform: Option<&'static dyn crate::platform::Platform>,
    /// The node of each CPU (`cpu_to_node()`), indexed by CPU; a CPU past the end
    /// is on node 0. Empty (the default): every CPU on node 0. `alloc_pages` starts
    /// from the calling CPU's node (`numa_node_id()`).
    pub cpu_to_node: Vec<u16>,
    /// Distances between nodes (the ACPI SLIT's matrix, or
    /// `/sys/devices/system/node/node*/distance`): `node_distance[a][b]` from node
    /// `a` to node `b`. Zonelists try nodes nearest first (ties by node number).
    /// Empty, or a missing entry: Linux's defaults, 10 to itself and 20 to any
    /// other node.
    pub node_distance: Vec<Vec<u8>>,
    /// Ranges `(start, nr_pages)` of present memory that start out reserved, owned
    /// by whoever built the allocator (memblock's reserved regions: the kernel
    /// image, boot structures, firmware tables): counted in a zone's present pages
    /// but not its managed ones, until `free_reserved_area` gives them to the
    /// allocator.
    pub reserved: Vec<(Pfn, u64)>,
    /// How fragment blocks return when their last fragment is freed.
    pub frag_free_path: FragFreePath,
    /// Debug modes: poisoning, init-on-alloc/free.
    pub debug: DebugConfig,
    /// Most bytes of per-frame metadata (16 a frame; see `metadata_bytes`) the
    /// allocator may allocate.
    /// `None`: as much as the machine gives; the allocation is fallible either way,
    /// so a configuration too large for memory is refused, never an abort.
    pub metadata_limit_bytes: Option<u64>,
    /// Contiguous memory areas (see `cma`); none by default. With none, the
    /// kernel-format outputs are those of a kernel built without CMA.
    pub cma: Vec<CmaConfig>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            page_shift: 12,
            max_order: Order(10),
            pageblock_order: Order(9),
            nodes: Vec::new(),
            min_free_kbytes: None,
            watermark_scale_factor: 10,
            watermark_boost_factor: 0,
            lowmem_reserve_ratio: [
                ZoneType::Dma.default_lowmem_reserve_ratio(),
                ZoneType::Dma32.default_lowmem_reserve_ratio(),
                ZoneType::Normal.default_lowmem_reserve_ratio(),
                ZoneType::HighMem.default_lowmem_reserve_ratio(),
                ZoneType::Movable.default_lowmem_reserve_ratio(),
            ],
            mobility_grouping: true,
            nr_cpus: default_nr_cpus(),
            pcp: PcpConfig::default(),
            cpu_id: None,
            platform: None,
            cpu_to_node: Vec::new(),
            node_distance: Vec::new(),
            reserved: Vec::new(),
            frag_free_path: FragFreePath::default(),
            debug: DebugConfig::default(),
            metadata_limit_bytes: None,
            cma: Vec::new(),
        }
    }
}

fn default_nr_cpus() -> usize {
    #[cfg(feature = "std")]
    return std::thread::available_parallelism().map_or(1, |n| n.get());
    #[cfg(not(feature = "std"))]
    1
}

impl Config {
    /// One node with one zone of `nr_pages` frames starting at `start_pfn`.
    pub fn single_zone(zone_type: ZoneType, start_pfn: Pfn, nr_pages: u64) -> Config {
        Config {
            nodes: alloc::vec![NodeConfig {
                zones: alloc::vec![ZoneConfig::new(zone_type, start_pfn, nr_pages)],
            }],
            ..Config::default()
        }
    }

    /// One Normal zone of `bytes` (rounded down to pages) starting at frame 0.
    pub fn with_bytes(bytes: u64) -> Config {
        Config::single_zone(ZoneType::Normal, Pfn(0), bytes >> 12)
    }

    /// Adds a contiguous memory area `name` of `nr_pages` frames at `base`. Its
    /// index, for `cma_alloc` and the other CMA calls, is the number of areas
    /// added before it; `ZoneAllocator::cma_area(name)` finds it. Two areas may
    /// not share a name (`ConfigError::Cma`).
    ///
    /// ```
    /// use zonealloc::{Config, Pfn, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20).with_cma("dma", Pfn(8192), 4096)).unwrap();
    /// let dma = za.cma_area("dma").unwrap();
    /// assert_eq!(dma, 0);
    /// assert_eq!(za.cma_area_info(dma).unwrap().count, 4096);
    /// ```
    #[must_use]
    pub fn with_cma(mut self, name: &str, base: Pfn, nr_pages: u64) -> Config {
        self.cma.push(CmaConfig {
            name: name.into(),
            base,
            nr_pages,
        });
        self
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> u64 {
        1u64 << self.page_shift
    }

    /// Frames in a pageblock.
    pub fn pageblock_nr_pages(&self) -> u64 {
        self.pageblock_order.nr_pages()
    }

    /// Bytes of per-frame metadata an allocator over this configuration backs
    /// with memory: 16 per frame of every memory section (`SECTION_FRAMES`
    /// frames) that holds present memory, holes inside such a section included,
    /// in whole 64-byte lines, a line for every four of a zone's buddy lists
    /// (their sentinels), and one unused line after every 512 entries (0.8 %),
    /// which keeps the heads of pageblocks apart in the first-level cache.
    /// Sections with no memory cost nothing (see `memmap`), except where the
    /// allocator takes its tables from the global heap (no `std`, no `MemMap`):
    /// there every spanned frame costs its 16 bytes (`spanned_metadata_bytes`).
    pub fn metadata_bytes(&self) -> u64 {
        self.nodes
            .iter()
            .flat_map(|n| n.zones.iter())
            .map(|z| {
                let present = z.present_ranges();
                crate::frame::table_backed_bytes(z.start_pfn.0, z.spanned_pages, &present)
            })
            .fold(0, u64::saturating_add)
    }

    /// Bytes of per-frame metadata for every spanned frame, holes included: what
    /// a table from the global heap takes.
    pub fn spanned_metadata_bytes(&self) -> u64 {
        self.nodes
            .iter()
            .flat_map(|n| n.zones.iter())
            .map(|z| zone_metadata_bytes(z.spanned_pages))
            .fold(0, u64::saturating_add)
    }

    /// Checks the configuration for consistency.
    ///
    /// # Errors
    /// A `ConfigError` naming the first problem found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(10..=30).contains(&self.page_shift) {
            return Err(ConfigError::PageShift(self.page_shift));
        }
        if self.max_order.0 > MAX_ORDER_LIMIT {
            return Err(ConfigError::MaxOrder(self.max_order));
        }
        if self.pageblock_order > self.max_order {
            return Err(ConfigError::PageblockOrder(self.pageblock_order));
        }
        if self.nr_cpus == 0 || self.nr_cpus > 4096 {
            return Err(ConfigError::NrCpus(self.nr_cpus));
        }
        if self.nodes.is_empty() || self.nodes.len() > u16::MAX as usize {
            return Err(ConfigError::NoMemory);
        }
        // Linux's sysctl ranges: `min_free_kbytes` is an int, `watermark_scale_factor`
        // 1..=3000. Within them the watermark arithmetic cannot overflow.
        if let Some(m) = self.min_free_kbytes.filter(|&m| m > MIN_FREE_KBYTES_MAX) {
            return Err(ConfigError::MinFreeKbytes(m));
        }
        if !(1..=WATERMARK_SCALE_FACTOR_MAX).contains(&self.watermark_scale_factor) {
            return Err(ConfigError::WatermarkScaleFactor(
                self.watermark_scale_factor,
            ));
        }
        if self.watermark_boost_factor > WATERMARK_BOOST_FACTOR_MAX {
            return Err(ConfigError::WatermarkBoostFactor(
                self.watermark_boost_factor,
            ));
        }
        self.pcp.validate()?;
        // Every frame's byte address, `pfn << page_shift`, fits in 64 bits.
        let pfn_limit = 1u64 << (64 - u32::from(self.page_shift));
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let mut populated = 0u64;
        for (nid, node) in self.nodes.iter().enumerate() {
            let mut last_type: Option<ZoneType> = None;
            for z in &node.zones {
                if last_type.is_some_and(|t| t >= z.zone_type) {
                    return Err(ConfigError::ZoneOrder { node: nid });
                }
                last_type = Some(z.zone_type);
                if z.spanned_pages >= u32::MAX as u64 {
                    return Err(ConfigError::ZoneTooLarge {
                        node: nid,
                        zone_type: z.zone_type,
                    });
                }
                let end = z
                    .start_pfn
                    .0
                    .checked_add(z.spanned_pages)
                    .filter(|&e| e <= pfn_limit)
                    .ok_or(ConfigError::PfnTooLarge {
                        node: nid,
                        zone_type: z.zone_type,
                    })?;
                let mut spans: Vec<(u64, u64)> = Vec::with_capacity(z.holes.len());
                for &(h, n) in &z.holes {
                    let hend = h.0.saturating_add(n);
                    if h < z.start_pfn || hend > end {
                        return Err(ConfigError::HoleOutsideZone {
                            node: nid,
                            zone_type: z.zone_type,
                        });
                    }
                    spans.push((h.0, hend));
                }
                // Frames in holes, each once however many holes cover it.
                spans.sort_unstable();
                let (mut holes, mut covered) = (0u64, z.start_pfn.0);
                for (h, hend) in spans {
                    let from = h.max(covered);
                    if hend > from {
                        holes += hend - from;
                        covered = hend;
                    }
                }
                if z.spanned_pages > 0 {
                    ranges.push((z.start_pfn.0, end));
                    populated = populated.saturating_add(z.spanned_pages.saturating_sub(holes));
                }
            }
        }
        ranges.sort_unstable();
        if ranges.windows(2).any(|w| w[0].1 > w[1].0) {
            return Err(ConfigError::Overlap);
        }
        if populated == 0 {
            return Err(ConfigError::NoMemory);
        }
        self.validate_cma()?;
        self.validate_numa()?;
        self.validate_reserved()?;
        let bytes = self.metadata_bytes();
        if self.metadata_limit_bytes.is_some_and(|l| bytes > l) {
            return Err(ConfigError::Metadata { bytes });
        }
        Ok(())
    }
}

impl Config {
    /// `cpu_to_node` within the nodes; `node_distance` square over them, 10 on the
    /// diagonal (`LOCAL_DISTANCE`) and more than 10 off it, as the SLIT requires.
    fn validate_numa(&self) -> Result<(), ConfigError> {
        let n = self.nodes.len();
        if self.cpu_to_node.iter().any(|&nid| nid as usize >= n) {
            return Err(ConfigError::Numa(
                "cpu_to_node names a node that does not exist",
            ));
        }
        if self.node_distance.is_empty() {
            return Ok(());
        }
        if self.node_distance.len() != n || self.node_distance.iter().any(|r| r.len() != n) {
            return Err(ConfigError::Numa(
                "node_distance is not one row and column per node",
            ));
        }
        for (a, row) in self.node_distance.iter().enumerate() {
            for (b, &d) in row.iter().enumerate() {
                if (a == b) != (d == LOCAL_DISTANCE) || d < LOCAL_DISTANCE {
                    return Err(ConfigError::Numa(
                        "node_distance: 10 to a node itself, more than 10 to any other",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The distance from node `a` to node `b` (`node_distance()`): the table's, or
    /// 10 to itself and 20 to any other.
    pub fn distance(&self, a: u16, b: u16) -> u8 {
        self.node_distance
            .get(a as usize)
            .and_then(|r| r.get(b as usize))
            .copied()
            .unwrap_or(if a == b {
                LOCAL_DISTANCE
            } else {
                REMOTE_DISTANCE
            })
    }

    /// The node of CPU `cpu` (`cpu_to_node()`): the table's entry, or node 0.
    pub fn node_of_cpu(&self, cpu: usize) -> u16 {
        self.cpu_to_node.get(cpu).copied().unwrap_or(0)
    }

    /// Each reserved range inside one zone and clear of its holes.
    fn validate_reserved(&self) -> Result<(), ConfigError> {
        for &(start, nr) in &self.reserved {
            let end = start
                .0
                .checked_add(nr)
                .ok_or(ConfigError::Reserved(start))?;
            let zone = self
                .nodes
                .iter()
                .flat_map(|n| n.zones.iter())
                .find(|z| z.start_pfn <= start && start < z.end_pfn());
            match zone {
                Some(z)
                    if end <= z.end_pfn().0
                        && !z
                            .holes
                            .iter()
                            .any(|&(h, n)| h.0 < end && start.0 < h.0.saturating_add(n)) => {}
                _ => return Err(ConfigError::Reserved(start)),
            }
        }
        Ok(())
    }

    /// Each CMA area: whole pageblocks inside one zone, clear of its holes and of
    /// the other areas (Linux's `cma_init_reserved_mem()` and
    /// `cma_activate_area()` checks), and a name no earlier area has (the name
    /// `cma_area` finds it by, as `/sys/kernel/mm/cma/<name>` is one directory).
    fn validate_cma(&self) -> Result<(), ConfigError> {
        let pb = self.pageblock_nr_pages();
        let mut spans: Vec<(u64, u64, usize)> = Vec::with_capacity(self.cma.len());
        for (area, c) in self.cma.iter().enumerate() {
            let bad = |why| Err(ConfigError::Cma { area, why });
            if c.nr_pages == 0 || !c.base.0.is_multiple_of(pb) || !c.nr_pages.is_multiple_of(pb) {
                return bad("not whole pageblocks");
            }
            let Some(end) = c.base.0.checked_add(c.nr_pages) else {
                return bad("outside every zone");
            };
            let zone = self
                .nodes
                .iter()
                .flat_map(|n| n.zones.iter())
                .find(|z| z.start_pfn <= c.base && c.base < z.end_pfn());
            let Some(z) = zone else {
                return bad("outside every zone");
            };
            if end > z.end_pfn().0 {
                return bad("crosses its zone's end");
            }
            if z.holes
                .iter()
                .any(|&(h, n)| h.0 < end && c.base.0 < h.0.saturating_add(n))
            {
                return bad("overlaps a hole");
            }
            if self.cma[..area].iter().any(|o| o.name == c.name) {
                return bad("has the name of an earlier area");
            }
            spans.push((c.base.0, end, area));
        }
        spans.sort_unstable();
        if let Some(w) = spans.windows(2).find(|w| w[0].1 > w[1].0) {
            return Err(ConfigError::Cma {
                area: w[1].2,
                why: "overlaps another area",
            });
        }
        Ok(())
    }
}

/// Why a configuration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// Page shift outside 10..=30.
    PageShift(u8),
    /// `max_order` above `MAX_ORDER_LIMIT`.
    MaxOrder(Order),
    /// `pageblock_order` above `max_order`.
    PageblockOrder(Order),
    /// No node, or no frame in any zone.
    NoMemory,
    /// A node's zones are not in strictly ascending zone type order.
    ZoneOrder {
        /// The node.
        node: usize,
    },
    /// A zone spans `u32::MAX` frames or more.
    ZoneTooLarge {
        /// The node.
        node: usize,
        /// The zone.
        zone_type: ZoneType,
    },
    /// A zone reaches past the largest frame number whose byte address
    /// (`pfn << page_shift`) fits in 64 bits.
    PfnTooLarge {
        /// The node.
        node: usize,
        /// The zone.
        zone_type: ZoneType,
    },
    /// A hole reaches outside its zone.
    HoleOutsideZone {
        /// The node.
        node: usize,
        /// The zone.
        zone_type: ZoneType,
    },
    /// Two zones share frames.
    Overlap,
    /// The memory backend could not provide memory for the frames.
    Backend,
    /// `nr_cpus` outside 1..=4096.
    NrCpus(usize),
    /// `min_free_kbytes` above `MIN_FREE_KBYTES_MAX`.
    MinFreeKbytes(u64),
    /// `watermark_scale_factor` outside `1..=WATERMARK_SCALE_FACTOR_MAX`.
    WatermarkScaleFactor(u64),
    /// `watermark_boost_factor` above `WATERMARK_BOOST_FACTOR_MAX`.
    WatermarkBoostFactor(u64),
    /// A per-CPU list tunable outside its range (see `PcpConfig`).
    Pcp(&'static str, u64),
    /// A CMA area (`Config::cma[area]`) that is not whole pageblocks of one zone
    /// clear of holes and of the other areas, or that has the name of an earlier
    /// area.
    Cma {
        /// Its index in `Config::cma`.
        area: usize,
        /// What is wrong with it.
        why: &'static str,
    },
    /// `cpu_to_node` names a node that does not exist, or `node_distance` is not
    /// a square matrix over the nodes with 10 on its diagonal and more elsewhere.
    Numa(&'static str),
    /// A reserved range (`Config::reserved`) that is not present memory of one
    /// zone: outside every zone, across a zone's end, or over a hole.
    Reserved(Pfn),
    /// The per-frame metadata (16 bytes a frame, plus a byte a pageblock) could not
    /// be allocated: more than the address space or the machine can give.
    Metadata {
        /// Bytes asked for.
        bytes: u64,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::PageShift(s) => write!(f, "page shift {s} outside 10..=30"),
            ConfigError::MaxOrder(o) => write!(f, "max_order {o} above {MAX_ORDER_LIMIT}"),
            ConfigError::PageblockOrder(o) => write!(f, "pageblock_order {o} above max_order"),
            ConfigError::NoMemory => f.write_str("no memory configured"),
            ConfigError::ZoneOrder { node } => {
                write!(f, "node {node}: zones not in ascending type order")
            }
            ConfigError::ZoneTooLarge { node, zone_type } => {
                write!(f, "node {node}, zone {zone_type}: too large")
            }
            ConfigError::PfnTooLarge { node, zone_type } => {
                write!(f, "node {node}, zone {zone_type}: frame numbers beyond the 64-bit byte address space")
            }
            ConfigError::HoleOutsideZone { node, zone_type } => {
                write!(f, "node {node}, zone {zone_type}: hole outside the zone")
            }
            ConfigError::Overlap => f.write_str("zones overlap"),
            ConfigError::Backend => f.write_str("memory backend failed"),
            ConfigError::NrCpus(n) => write!(f, "nr_cpus {n} outside 1..=4096"),
            ConfigError::MinFreeKbytes(m) => {
                write!(f, "min_free_kbytes {m} above {MIN_FREE_KBYTES_MAX}")
            }
            ConfigError::WatermarkScaleFactor(w) => write!(
                f,
                "watermark_scale_factor {w} outside 1..={WATERMARK_SCALE_FACTOR_MAX}"
            ),
            ConfigError::WatermarkBoostFactor(w) => write!(
                f,
                "watermark_boost_factor {w} above {WATERMARK_BOOST_FACTOR_MAX}"
            ),
            ConfigError::Pcp(name, v) => write!(f, "pcp.{name} {v} out of range"),
            ConfigError::Cma { area, why } => write!(f, "CMA area {area}: {why}"),
            ConfigError::Numa(why) => write!(f, "NUMA topology: {why}"),
            ConfigError::Reserved(p) => {
                write!(f, "reserved range at {p}: not present memory of one zone")
            }
            ConfigError::Metadata { bytes } => {
                write!(f, "cannot allocate {bytes} bytes of frame metadata")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ConfigError {}

// -----------------------------------------------------------------------------
// The tunables of the layers above, kept here so the configuration sits below
// every layer that reads it.
// -----------------------------------------------------------------------------

/// Per-CPU list tunables. `None` fields take Linux's formulas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcpConfig {
    /// Use per-CPU lists at all. Off, every allocation and free takes the zone lock
    /// (Linux's boot pageset behaviour).
    pub enabled: bool,
    /// Refill and flush batch (`zone_batchsize()` when `None`).
    pub batch: Option<u64>,
    /// Lower bound of `high` (`zone_highsize()` from the low watermark when `None`).
    pub high_min: Option<u64>,
    /// Upper bound of `high` (1/8 of the zone split between CPUs when `None`).
    pub high_max: Option<u64>,
    /// `percpu_pagelist_high_fraction`: non-zero (at least 8) fixes `high` at
    /// `managed / fraction / cpus` and turns auto-tuning off.
    pub high_fraction: u64,
    /// Prefetching as Linux 4.16 to 5.17 did in `free_pcppages_bulk`: pick the blocks
    /// of a flush and prefetch their buddies' metadata
    /// before taking the zone lock. Off by default: see the crate README for the
    /// measurements behind that choice.
    pub prefetch_buddy: bool,
    /// Per-CPU stacks committed with restartable sequences in front of the lists,
    /// for `alloc_pages`/`free_pages` on the CPU the thread runs on (x86-64 Linux
    /// with glibc 2.35 or later; elsewhere, or with this off, the lists' try-lock
    /// path serves every call). On by default; see the `rseq` module docs.
    /// Calls naming a CPU (`alloc_pages_on`, `free_pages_on`) and a
    /// `Config::cpu_id` hook always take the lists, as Linux's per-CPU lists
    /// behave.
    pub rseq: bool,
}

impl Default for PcpConfig {
    fn default() -> PcpConfig {
        PcpConfig {
            enabled: true,
            batch: None,
            high_min: None,
            high_max: None,
            high_fraction: 0,
            prefetch_buddy: false,
            rseq: true,
        }
    }
}

/// Largest `PcpConfig::batch`, `high_min` and `high_max` accepted: a zone has fewer
/// frames than this, and the list arithmetic (`batch << 5`, `high + batch`) stays far
/// from overflow below it.
pub const PCP_TUNABLE_MAX: u64 = u32::MAX as u64;

impl PcpConfig {
    /// Checks each tunable against `PCP_TUNABLE_MAX`.
    ///
    /// # Errors
    /// `ConfigError::Pcp` naming the first tunable out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("batch", self.batch),
            ("high_min", self.high_min),
            ("high_max", self.high_max),
            ("high_fraction", Some(self.high_fraction)),
        ] {
            if let Some(v) = v.filter(|&v| v > PCP_TUNABLE_MAX) {
                return Err(ConfigError::Pcp(name, v));
            }
        }
        Ok(())
    }
}

/// Debug options (`Config::debug`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DebugConfig {
    /// Fill freed pages with `PAGE_POISON` and check it on allocation.
    pub poison: bool,
    /// Zero every page when it is allocated.
    pub init_on_alloc: bool,
    /// Zero every page when it is freed (takes precedence over poisoning).
    pub init_on_free: bool,
}

/// How a fragment block returns to the allocator when its last fragment is freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FragFreePath {
    /// Every block under the zone lock (`__free_pages_ok`): Linux before 4.20.
    Zone,
    /// Order-0 pages through the per-CPU lists, larger blocks under the zone lock:
    /// Linux 4.20 to 6.13.
    #[default]
    PcpOrder0,
    /// Every order the per-CPU lists take (0..=3) through them: Linux 6.14+
    /// (`free_frozen_pages`).
    PcpAll,
}
