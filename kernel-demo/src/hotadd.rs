//! Memory that arrives: RAM the kernel booted without (a hole of its zone, see
//! `bootmem`'s absent ranges), added while the stress runs, as a hot-plugged
//! DIMM or a virtio-mem device's plug would be.
//!
//! The new memory brings its own frame tables (Linux's `memmap_on_memory`):
//! before zonealloc can count a frame it needs the sections' metadata backed,
//! and the only memory the kernel may take for that, with the allocator
//! running and its zone lock held around `MemMap::populate`, is memory no one
//! owns yet. So:
//!
//! 1. the first `VmemMap::frames_for(nr)` frames of the range are lent to the
//!    map (`lend`), enough for the worst case;
//! 2. `add_memory` adds the rest of the range; it backs the sections' tables
//!    through the map, which takes its frames (and page tables) from the loan;
//! 3. the loan ends; the frames it did not give are added too (their sections
//!    are backed now, so no frame is taken).
//!
//! The frames that hold the tables stay holes of the zone: the kernel uses them
//! for as long as the memory is there.
//!
//! ```text
//!   absent range:  [ tables | lent, unused | ------------- added --------------- )
//!                  ^start   ^+used         ^+lent                                ^end
//!   step 2 adds [start+lent, end), step 3 adds [start+used, start+lent)
//! ```

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use spin::Mutex;
use zonealloc::{Gfp, MemMap, Order, Pfn, ZoneAllocator, ZoneId};

use crate::bootmem::BOOT;
use crate::consts::PAGE_BYTES;
use crate::exit::{fail_with, Exit};
use crate::serial::println;
use crate::vmemmap::{VmemMap, MEMMAP};
use crate::{heap, time};

/// Frames `[ARRIVED_START, ARRIVED_END)` have been given to the allocator since
/// boot. Release: each is stored before the `add_memory` that hands those frames
/// out; a CPU that gets one of them from the allocator has passed the zone lock
/// after that call, so its Acquire load sees the store.
static ARRIVED_START: AtomicU64 = AtomicU64::new(0);
static ARRIVED_END: AtomicU64 = AtomicU64::new(0);

/// What the addition did.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    /// The absent range, frames `[start, end)`.
    pub start: u64,
    /// See `start`.
    pub end: u64,
    /// Frames lent to the map, and those it took for tables and page tables.
    pub lent: u64,
    /// See `lent`.
    pub tables: u64,
    /// The zone it arrived in, and its managed frames before and after.
    pub zone: ZoneId,
    /// See `zone`.
    pub managed_before: u64,
    /// See `zone`.
    pub managed_after: u64,
    /// The allocator's frame-table bytes before and after.
    pub metadata_before: u64,
    /// See `metadata_before`.
    pub metadata_after: u64,
    /// How long the two `add_memory` calls took, microseconds.
    pub took_us: u64,
    /// Heap allocations the `add_memory` calls made, and the whole addition
    /// (with its `zoneinfo` snapshots).
    pub heap_in_add_memory: u64,
    /// See `heap_in_add_memory`.
    pub heap_in_all: u64,
}

static ARRIVAL: Mutex<Option<Arrival>> = Mutex::new(None);

/// Whether frames `[pfn, pfn + nr)` lie in memory that arrived.
pub fn arrived(pfn: u64, nr: u64) -> bool {
    let end = ARRIVED_END.load(Ordering::Acquire);
    end != 0 && ARRIVED_START.load(Ordering::Acquire) <= pfn && pfn + nr <= end
}

/// The managed frames of zone `id`.
fn managed_of(za: &ZoneAllocator, id: ZoneId) -> u64 {
    za.zoneinfo()
        .zones
        .iter()
        .find(|z| z.id == id)
        .map_or(0, |z| z.managed)
}

/// Adds the absent memory (see the module documentation). Called by CPU 0 in
/// thread context while the other CPUs allocate and free.
///
/// # Errors
/// No absent memory was declared, or `add_memory` refused a step.
pub fn add(za: &ZoneAllocator) -> Result<(), alloc::string::String> {
    let boot = BOOT.get().expect("boot memory is set before the stress");
    let Some(&(start, end, _)) = boot.absent().first() else {
        return Ok(());
    };
    let heap_at_start = heap::stats().allocs;
    let nr = end - start;
    let zone = za
        .zone_id_of(Pfn(start))
        .ok_or("the absent memory lies in no zone")?;
    let managed_before = managed_of(za, zone);
    let metadata_before = za.metadata_bytes();
    let lent = VmemMap::frames_for(nr).min(nr);
    let t0 = time::tsc();
    let mut guard = MEMMAP.lock();
    let map = guard.as_mut().ok_or("no frame-table map")?;
    map.lend(start * PAGE_BYTES, lent);
    ARRIVED_START.store(start + lent, Ordering::Release);
    ARRIVED_END.store(end, Ordering::Release);
    let heap_before = heap::stats().allocs;
    let first = za.add_memory(
        Pfn(start + lent),
        nr - lent,
        Some(&mut *map as &mut dyn MemMap),
    );
    let tables = map.end_loan();
    first.map_err(|e| alloc::format!("add_memory of {:#x}+{}: {e}", start + lent, nr - lent))?;
    if tables < lent {
        ARRIVED_START.store(start + tables, Ordering::Release);
        za.add_memory(
            Pfn(start + tables),
            lent - tables,
            Some(&mut *map as &mut dyn MemMap),
        )
        .map_err(|e| alloc::format!("add_memory of the unused loan: {e}"))?;
    }
    let heap_in_add_memory = heap::stats().allocs - heap_before;
    drop(guard);
    let took_us = time::tsc_to_us(time::tsc() - t0);
    *ARRIVAL.lock() = Some(Arrival {
        start,
        end,
        lent,
        tables,
        zone,
        managed_before,
        managed_after: managed_of(za, zone),
        metadata_before,
        metadata_after: za.metadata_bytes(),
        took_us,
        heap_in_add_memory,
        heap_in_all: 0,
    });
    let all = heap::stats().allocs - heap_at_start;
    if let Some(a) = ARRIVAL.lock().as_mut() {
        a.heap_in_all = all;
    }
    Ok(())
}

/// At the checkpoint of `round`, the round of the addition (every other CPU
/// waiting): the zone's managed frames grew by exactly the frames added, and
/// the allocator hands the new frames out: order-10 blocks are taken from that
/// zone, movable, until one lies in the new memory (added memory goes to the
/// tail of the free lists, as Linux's onlining puts it), then all are freed.
pub fn check(za: &ZoneAllocator, round: u32) {
    let boot = BOOT.get().expect("boot memory is set before the stress");
    if boot.absent().is_empty() {
        return;
    }
    let Some(a) = *ARRIVAL.lock() else {
        fail_with(Exit::Memory, "the absent memory was not added");
    };
    let added = a.end - a.start - a.tables;
    if a.managed_after != a.managed_before + added {
        fail_with(
            Exit::Memory,
            &alloc::format!(
                "zone {:?} managed {} -> {} after adding {added} frames",
                a.zone,
                a.managed_before,
                a.managed_after
            ),
        );
    }
    println!(
        "hot-add: [mem {:#018x}-{:#018x}] arrived in node {} {} during round {}: {} frames added in {} us, {} frames of it hold its frame tables and their page tables ({} lent); managed {} -> {}; frame tables {} -> {} KiB; heap allocations: {} in add_memory, {} in all",
        a.start * PAGE_BYTES,
        a.end * PAGE_BYTES - 1,
        a.zone.node,
        a.zone.zone_type.name(),
        round,
        added,
        a.took_us,
        a.tables,
        a.lent,
        a.managed_before,
        a.managed_after,
        a.metadata_before >> 10,
        a.metadata_after >> 10,
        a.heap_in_add_memory,
        a.heap_in_all
    );
    let order = Order(10);
    let gfp = Gfp::KERNEL | Gfp::MOVABLE;
    let limit = a.managed_after >> order.0;
    let mut taken: Vec<u64> = Vec::with_capacity(limit as usize + 1);
    let mut hit = None;
    while (taken.len() as u64) < limit {
        let Ok(Pfn(p)) = za.alloc_pages_node(a.zone.node, gfp, order) else {
            break;
        };
        taken.push(p);
        if za.zone_id_of(Pfn(p)) != Some(a.zone) {
            break;
        }
        if arrived(p, 1 << order.0) {
            hit = Some(p);
            break;
        }
    }
    let n = taken.len();
    for p in taken {
        if let Err(e) = za.free_pages(Pfn(p), order) {
            fail_with(
                Exit::FreeRefused,
                &alloc::format!("free of order-10 block {p:#x}: {e}"),
            );
        }
    }
    match hit {
        Some(p) => println!(
            "hot-add: the new memory is handed out: order-10 block {:#x} came from it after {} others of the zone (all freed again)",
            p,
            n - 1
        ),
        None => fail_with(
            Exit::Memory,
            &alloc::format!("{n} order-10 blocks of the zone and none from the new memory"),
        ),
    }
}

/// The addition, for the final report.
pub fn arrival() -> Option<Arrival> {
    *ARRIVAL.lock()
}
