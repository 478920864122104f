//! The allocator's configuration from the boot memory: one node, with DMA
//! (below 16 MiB), DMA32 (below 4 GiB) and Normal zones as x86-64 Linux lays
//! them out.
//!
//! A zone spans from the first to the last frame of RAM the firmware map puts in
//! its range (the zone is left out if it gets none). Inside the span, every frame
//! that is not usable RAM is a hole: the gaps between the map's usable entries
//! (the PCI hole below 4 GiB, the BIOS area below 1 MiB, ACPI tables) and
//! everything the kernel reserved for itself (see `bootmem`). The holes are
//! exactly the complement of `BootMemory::usable_frames` within the span, so the
//! allocator's present frames are the usable frames, one for one.

use alloc::vec::Vec;

use zonealloc::{Config, NodeConfig, Pfn, ZoneConfig, ZoneType};

use crate::bootmem::{BootMemory, Kind, PAGE_BYTES};
use crate::cpu;
use crate::tick::TIMER_ALLOCATES;

/// One past the last frame of ZONE_DMA (16 MiB).
pub const DMA_END_PFN: u64 = (16 << 20) / PAGE_BYTES;
/// One past the last frame of ZONE_DMA32 (4 GiB).
pub const DMA32_END_PFN: u64 = (4 << 30) / PAGE_BYTES;

const ZONE_RANGES: [(ZoneType, u64, u64); 3] = [
    (ZoneType::Dma, 0, DMA_END_PFN),
    (ZoneType::Dma32, DMA_END_PFN, DMA32_END_PFN),
    (ZoneType::Normal, DMA32_END_PFN, u64::MAX),
];

/// The frames of RAM the firmware map shows, `[first, end)`, before the kernel's
/// reservations: what the zones span. Page 0 stays outside, as the firmware's
/// (Linux trims it from the map the same way, so its DMA zone starts at frame 1).
fn ram_span(boot: &BootMemory) -> Option<(u64, u64)> {
    let ram = boot.regions().iter().filter(|r| r.kind == Kind::Usable);
    let first = ram
        .clone()
        .map(|r| r.start.div_ceil(PAGE_BYTES))
        .min()?
        .max(1);
    let end = ram.map(|r| r.end / PAGE_BYTES).max()?;
    (first < end).then_some((first, end))
}

/// Each zone's span `(type, start_pfn, end_pfn)`, before any heap exists.
fn spans(boot: &BootMemory) -> impl Iterator<Item = (ZoneType, u64, u64)> + '_ {
    let (first, end) = ram_span(boot).unwrap_or((0, 0));
    ZONE_RANGES.iter().filter_map(move |&(zt, lo, hi)| {
        let (s, e) = (first.max(lo), end.min(hi));
        let present = boot
            .usable_frames()
            .iter()
            .any(|&(us, ue)| us.max(s) < ue.min(e));
        (s < e && present).then_some((zt, s, e))
    })
}

/// Frames the zones will span, holes included: what the per-frame metadata is
/// sized by. Needs no heap.
pub fn spanned_frames(boot: &BootMemory) -> u64 {
    spans(boot).map(|(_, s, e)| e - s).sum()
}

/// The zones, each with its holes.
pub fn zone_configs(boot: &BootMemory) -> Vec<ZoneConfig> {
    spans(boot)
        .map(|(zt, s, e)| {
            let mut zc = ZoneConfig::new(zt, Pfn(s), e - s);
            let mut cursor = s;
            for &(us, ue) in boot.usable_frames() {
                let (us, ue) = (us.max(s), ue.min(e));
                if us >= ue {
                    continue;
                }
                if us > cursor {
                    zc = zc.with_hole(Pfn(cursor), us - cursor);
                }
                cursor = ue;
            }
            if cursor < e {
                zc = zc.with_hole(Pfn(cursor), e - cursor);
            }
            zc
        })
        .collect()
}

/// The whole configuration: one node, these zones, `nr_cpus` CPUs whose index
/// the allocator reads through `cpu::this_cpu`; every tunable at Linux's default.
/// When the timer handler allocates (`tick::TIMER_ALLOCATES`), the allocator also
/// gets the kernel as its `Platform`, so that its locks disable interrupts.
pub fn config(boot: &BootMemory, nr_cpus: usize) -> Config {
    let platform: Option<&'static dyn zonealloc::Platform> = if TIMER_ALLOCATES {
        Some(&cpu::PLATFORM)
    } else {
        None
    };
    Config {
        nodes: alloc::vec![NodeConfig {
            zones: zone_configs(boot),
        }],
        nr_cpus,
        cpu_id: Some(cpu::this_cpu),
        platform,
        ..Config::default()
    }
}

/// Prints each zone's span and holes.
pub fn print(config: &Config) {
    for z in config.nodes.iter().flat_map(|n| n.zones.iter()) {
        let hole_frames: u64 = z.holes.iter().map(|&(_, n)| n).sum();
        crate::println!(
            "zone {:<6} pfn [{:#x}, {:#x})  spanned {}  holes {} ({} frames)  present {}",
            z.zone_type.name(),
            z.start_pfn.0,
            z.end_pfn().0,
            z.spanned_pages,
            z.holes.len(),
            hole_frames,
            z.spanned_pages - hole_frames
        );
        for &(h, n) in &z.holes {
            crate::println!("    hole pfn [{:#x}, {:#x})  {} frames", h.0, h.0 + n, n);
        }
    }
}
