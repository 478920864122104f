//! The allocator's configuration from the boot memory and the NUMA topology:
//! per node, DMA (below 16 MiB), DMA32 (below 4 GiB) and Normal zones as x86-64
//! Linux lays them out; the kernel's reservations; the CPUs' nodes and the
//! distances between nodes.
//!
//! A node's zone spans from the first to the last frame of that node's RAM the
//! firmware map puts in its range (memory declared absent included: it arrives
//! into its zone later); the zone is left out if it gets none. Inside the span,
//! every frame that is not present RAM is a hole: the gaps between the map's
//! usable entries (the PCI hole below 4 GiB, the BIOS area below 1 MiB), and the
//! absent memory. What the kernel reserved is present but not managed
//! (`Config::reserved`), split at zone boundaries.

use alloc::vec::Vec;

use spin::Once;
use zonealloc::{Config, NodeConfig, Pfn, ZoneAllocator, ZoneConfig, ZoneType, SECTION_FRAMES};

use crate::bootmem::BootMemory;
use crate::consts::PAGE_BYTES;
use crate::cpu;
use crate::serial::println;
use crate::srat::Topology;

/// The page allocator, once built from this configuration (before any CPU runs
/// the stress).
pub static ALLOCATOR: Once<ZoneAllocator> = Once::new();

/// One past the last frame of ZONE_DMA (16 MiB).
pub const DMA_END_PFN: u64 = (16 << 20) / PAGE_BYTES;
/// One past the last frame of ZONE_DMA32 (4 GiB).
pub const DMA32_END_PFN: u64 = (4 << 30) / PAGE_BYTES;

const ZONE_RANGES: [(ZoneType, u64, u64); 3] = [
    (ZoneType::Dma, 0, DMA_END_PFN),
    (ZoneType::Dma32, DMA_END_PFN, DMA32_END_PFN),
    (ZoneType::Normal, DMA32_END_PFN, u64::MAX),
];

/// The pieces of `ranges` inside `[lo, hi)`.
fn clip(ranges: &[(u64, u64)], lo: u64, hi: u64) -> Vec<(u64, u64)> {
    ranges
        .iter()
        .map(|&(s, e)| (s.max(lo), e.min(hi)))
        .filter(|&(s, e)| s < e)
        .collect()
}

/// Node `node`'s RAM: the map's RAM cut by the SRAT's ranges.
pub fn node_ram(boot: &BootMemory, topo: &Topology, node: u16) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(s, e) in boot.ram() {
        topo.split(s, e, |a, b, n| {
            if n == node {
                out.push((a, b));
            }
        });
    }
    out
}

/// The zones of every node, each with its holes.
pub fn node_configs(boot: &BootMemory, topo: &Topology) -> Vec<NodeConfig> {
    let present = boot.present();
    (0..topo.nr_nodes() as u16)
        .map(|node| {
            let ram = node_ram(boot, topo, node);
            // This node's present frames: RAM less the absent ranges, cut to
            // the node (another node's memory inside a span is a hole here).
            let node_present: Vec<(u64, u64)> = ram
                .iter()
                .flat_map(|&(rs, re)| clip(present.as_slice(), rs, re))
                .collect();
            let zones = ZONE_RANGES
                .iter()
                .filter_map(|&(zt, lo, hi)| {
                    let spans = clip(&ram, lo, hi);
                    let (s, e) = (spans.first()?.0, spans.last()?.1);
                    let mut zc = ZoneConfig::new(zt, Pfn(s), e - s);
                    let mut cursor = s;
                    for (ps, pe) in clip(&node_present, s, e) {
                        if ps > cursor {
                            zc = zc.with_hole(Pfn(cursor), ps - cursor);
                        }
                        cursor = pe;
                    }
                    if cursor < e {
                        zc = zc.with_hole(Pfn(cursor), e - cursor);
                    }
                    Some(zc)
                })
                .collect();
            NodeConfig { zones }
        })
        .collect()
}

/// The present frames of a zone configuration.
fn present_of(z: &ZoneConfig) -> Vec<(u64, u64)> {
    z.present_ranges()
}

/// The kernel's reservations as `Config::reserved`: each cut to the present
/// frames of each zone.
pub fn reserved(boot: &BootMemory, nodes: &[NodeConfig]) -> Vec<(Pfn, u64)> {
    let mut out = Vec::new();
    for r in boot.reservations() {
        let (rs, re) = (r.start / PAGE_BYTES, r.end / PAGE_BYTES);
        for z in nodes.iter().flat_map(|n| n.zones.iter()) {
            for (s, e) in clip(&present_of(z), rs, re) {
                out.push((Pfn(s), e - s));
            }
        }
    }
    out
}

/// Frames a node's frame tables can take at most (see `vmemmap`): the bytes
/// zonealloc will back for each zone (`Config::metadata_bytes`), rounded out to
/// pages at both ends of every section, and the page tables that map them (one
/// for every 2 MiB and one at each end of every run, a directory per GiB).
pub fn table_frames_bound(node: &NodeConfig) -> u64 {
    node.zones
        .iter()
        .map(|z| {
            let one = Config {
                nodes: alloc::vec![NodeConfig {
                    zones: alloc::vec![z.clone()],
                }],
                ..Config::default()
            };
            let bytes = one.metadata_bytes();
            let sections = z.spanned_pages / SECTION_FRAMES + 2;
            bytes.div_ceil(PAGE_BYTES)
                + 2 * sections
                + bytes.div_ceil(2 << 20)
                + sections
                + (z.spanned_pages * 16).div_ceil(1 << 30)
                + 2
        })
        .sum()
}

/// The whole configuration: these nodes and reservations, `nr_cpus` CPUs with
/// their nodes, the SLIT's distances, and the kernel as the allocator's
/// `Platform` (its locks disable interrupts through it, and it names the
/// current CPU); every tunable at Linux's default.
pub fn config(
    nodes: Vec<NodeConfig>,
    reserved: Vec<(Pfn, u64)>,
    topo: &Topology,
    nr_cpus: usize,
) -> Config {
    let n = nodes.len();
    let node_distance = if topo.from_slit {
        (0..n)
            .map(|a| (0..n).map(|b| topo.distance(a, b)).collect())
            .collect()
    } else {
        Vec::new()
    };
    Config {
        nodes,
        nr_cpus,
        platform: Some(&cpu::PLATFORM),
        cpu_to_node: (0..nr_cpus).map(cpu::cpu_to_node).collect(),
        node_distance,
        reserved,
        ..Config::default()
    }
}

/// Prints each node's zones: span, holes, present and reserved frames.
pub fn print(config: &Config) {
    for (nid, node) in config.nodes.iter().enumerate() {
        for z in &node.zones {
            let hole_frames: u64 = z.holes.iter().map(|&(_, n)| n).sum();
            let reserved: u64 = config
                .reserved
                .iter()
                .filter(|&&(p, _)| z.start_pfn <= p && p < z.end_pfn())
                .map(|&(_, n)| n)
                .sum();
            println!(
                "node {nid} zone {:<6} pfn [{:#x}, {:#x})  spanned {}  holes {} ({} frames)  present {}  reserved {}",
                z.zone_type.name(),
                z.start_pfn.0,
                z.end_pfn().0,
                z.spanned_pages,
                z.holes.len(),
                hole_frames,
                z.spanned_pages - hole_frames,
                reserved
            );
        }
    }
    let cpus: Vec<(usize, u16)> = config
        .cpu_to_node
        .iter()
        .enumerate()
        .map(|(c, &n)| (c, n))
        .collect();
    println!(
        "cpu_to_node {:?}, node_distance {:?}",
        cpus, config.node_distance
    );
}
