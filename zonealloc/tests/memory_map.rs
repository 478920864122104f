//! Where the frame metadata lives and what it costs, and memory that arrives
//! after construction: sparse maps, reserved ranges released at boot, memory
//! hot-added into a zone's holes, tables from a caller's region.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use zonealloc::{
    AbstractFrames, Config, FreeError, Gfp, MemMap, NodeConfig, OfflineError, Order, Pfn,
    StaticMemMap, ZoneAllocator, ZoneConfig, ZoneType, SECTION_FRAMES,
};

/// Records the largest single allocation made while `COUNTING` is set.
struct Largest;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator as it came.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: as the caller promised us.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: as the caller promised us.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as the caller promised us.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Largest = Largest;

const GIB: u64 = 1 << 30;

/// Bytes of one section's frame table: 16 a frame and a skew line every 512.
fn section_table_bytes() -> u64 {
    SECTION_FRAMES * 16 + SECTION_FRAMES / 512 * 64
}

/// An arm64-style sparse map: 2 GiB of RAM at 2 GiB, 14 GiB at 544 GiB, one
/// Normal zone spanning both (550 GiB of span, 16 GiB of memory).
fn sparse_arm64() -> Config {
    let f = |bytes: u64| bytes >> 12;
    let start = f(2 * GIB);
    let end = f(558 * GIB);
    let zone = ZoneConfig::new(ZoneType::Normal, Pfn(start), end - start)
        .with_hole(Pfn(f(4 * GIB)), f(540 * GIB));
    Config {
        nodes: vec![NodeConfig { zones: vec![zone] }],
        nr_cpus: 2,
        ..Config::default()
    }
}

#[test]
fn a_sparse_map_costs_what_its_memory_needs() {
    let config = sparse_arm64();
    let present = (16 * GIB) >> 12;
    let needed = present * 16;
    let spanned = config.spanned_metadata_bytes();
    let backed = config.metadata_bytes();
    assert!(spanned > 2 * GIB, "{spanned}");
    assert!(
        backed as f64 <= 1.10 * needed as f64,
        "{backed} against {needed}"
    );
    let za = ZoneAllocator::new(config).unwrap();
    assert_eq!(za.metadata_bytes(), backed);
    assert_eq!(za.managed_pages(), present);
    println!(
        "16 GiB over a 550 GiB span: {:.1} MiB of frame metadata for {:.1} MiB the present \
         frames need ({:.2}x); {:.2} GiB over the whole span",
        backed as f64 / (1 << 20) as f64,
        needed as f64 / (1 << 20) as f64,
        backed as f64 / needed as f64,
        spanned as f64 / GIB as f64
    );
    // The memory at both ends is there, and none in between.
    let p = za.alloc_pages(Gfp::KERNEL, Order(10)).unwrap();
    za.free_pages(p, Order(10)).unwrap();
    // Every call naming a frame of the span that has no metadata is refused
    // without touching it (its metadata reads as a hole and is never written).
    let absent = Pfn((300 * GIB) >> 12);
    assert!(matches!(
        za.free_pages(absent, Order(0)),
        Err(FreeError::Hole(_))
    ));
    assert!(matches!(
        za.free_pages(absent, Order(9)),
        Err(FreeError::Hole(_))
    ));
    assert!(za.put_page(absent).is_err());
    assert!(za.get_page(absent).is_err());
    assert!(za.split_page(absent, Order(1)).is_err());
    assert!(za.free_contig_range(absent, 16).is_err());
    assert!(za.free_pages_bulk(&[absent, absent.add(1)]).is_err());
    assert!(za.free_pages_nolock(absent, Order(0)).is_err());
    let mut cache = za.local_cache(Gfp::KERNEL).unwrap();
    assert!(cache.free(absent, Order(0)).is_err());
    drop(cache);
}

#[test]
fn a_64_gib_machine_makes_no_allocation_above_a_sections_table() {
    let config = Config {
        nr_cpus: 2,
        ..Config::with_bytes(64 * GIB)
    };
    LARGEST.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    let za = ZoneAllocator::new(config);
    COUNTING.store(false, Ordering::Relaxed);
    let za = za.unwrap();
    let largest = LARGEST.load(Ordering::Relaxed) as u64;
    println!(
        "64 GiB: largest single heap allocation {largest} bytes (a section's table: {}), \
         {} MiB of metadata outside the heap",
        section_table_bytes(),
        za.metadata_bytes() >> 20
    );
    assert!(largest <= section_table_bytes(), "{largest}");
}

#[test]
fn reserved_memory_is_present_but_not_managed_until_released() {
    let config = Config {
        reserved: vec![(Pfn(1000), 24), (Pfn(4096), 2048)],
        nr_cpus: 1,
        ..Config::with_bytes(64 << 20)
    };
    let za = ZoneAllocator::new(config).unwrap();
    let all = (64 << 20) >> 12;
    assert_eq!(za.managed_pages(), all - 24 - 2048);
    assert!(za
        .zoneinfo()
        .to_string()
        .contains(&format!("present  {all}")));
    // A reserved frame is not the allocator's to free.
    assert!(matches!(
        za.free_pages(Pfn(1010), Order(0)),
        Err(FreeError::Hole(_))
    ));
    // Half a range, then one frame too many: refused whole.
    assert_eq!(
        za.free_reserved_area(Pfn(1000), 25),
        Err(OfflineError::NotReserved(Pfn(1024)))
    );
    assert_eq!(za.free_reserved_area(Pfn(1000), 24), Ok(24));
    assert_eq!(za.free_reserved_area(Pfn(4096), 2048), Ok(2048));
    assert_eq!(za.managed_pages(), all);
    assert_eq!(
        za.free_reserved_area(Pfn(4096), 1),
        Err(OfflineError::NotReserved(Pfn(4096)))
    );
    za.check_invariants().unwrap();
    // The released frames merged into whole blocks: everything is allocatable.
    let mut held = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::KERNEL | Gfp::NORETRY, Order(0)) {
        held.push(p);
    }
    assert!(held.contains(&Pfn(1010)) && held.contains(&Pfn(5000)));
    for p in held {
        za.free_pages(p, Order(0)).unwrap();
    }
    za.drain_all_pages();
    assert_eq!(za.nr_free_pages(), all);
    za.check_invariants().unwrap();
}

/// Memory arriving where the zone had a hole: a whole section that had no
/// metadata, and part of a section that had.
#[test]
fn memory_added_into_a_hole_is_managed_and_allocatable() {
    let s = SECTION_FRAMES;
    let zone = ZoneConfig::new(ZoneType::Normal, Pfn(0), 4 * s)
        .with_hole(Pfn(s / 2), s / 2)
        .with_hole(Pfn(2 * s), 2 * s);
    let config = Config {
        nodes: vec![NodeConfig { zones: vec![zone] }],
        nr_cpus: 1,
        ..Config::default()
    };
    let za = ZoneAllocator::new(config).unwrap();
    let before = (za.managed_pages(), za.metadata_bytes());
    assert_eq!(before.0, s + s / 2);
    // Into the section that has metadata already: no more metadata.
    za.add_memory(Pfn(s / 2), s / 4, None).unwrap();
    assert_eq!(za.metadata_bytes(), before.1);
    // A whole section that had none: its table is backed now.
    za.add_memory(Pfn(3 * s), s, None).unwrap();
    assert!(za.metadata_bytes() >= before.1 + s * 16);
    assert_eq!(za.managed_pages(), before.0 + s / 4 + s);
    assert_eq!(
        za.add_memory(Pfn(3 * s + 5), 1, None),
        Err(OfflineError::NotHole(Pfn(3 * s + 5)))
    );
    assert_eq!(
        za.add_memory(Pfn(0), 1, None),
        Err(OfflineError::NotHole(Pfn(0)))
    );
    assert!(matches!(
        za.add_memory(Pfn(4 * s - 1), 2, None),
        Err(OfflineError::CrossesZone(_))
    ));
    za.check_invariants().unwrap();
    // Every frame can be had, the new ones too.
    let mut held = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::KERNEL | Gfp::NORETRY, Order(9)) {
        held.push(p);
    }
    assert!(held.iter().any(|p| p.0 >= 3 * s));
    assert_eq!(
        held.len() as u64 * 512,
        za.managed_pages() - za.nr_free_pages() - za.nr_pcp_pages()
    );
    for p in held {
        za.free_pages(p, Order(9)).unwrap();
    }
    za.drain_all_pages();
    assert_eq!(za.nr_free_pages(), za.managed_pages());
}

/// Tables carved from a region the caller gives, as a kernel carves them from
/// the memory it manages: the heap holds none of them, and memory added later
/// needs the region again.
#[test]
fn tables_from_a_given_region() {
    let region: &'static mut [u8] = Box::leak(vec![0u8; 8 << 20].into_boxed_slice());
    let mut memmap = StaticMemMap::new(region);
    let zone = ZoneConfig::new(ZoneType::Normal, Pfn(0), 1 << 18).with_hole(Pfn(1 << 17), 1 << 16);
    let config = Config {
        nodes: vec![NodeConfig { zones: vec![zone] }],
        nr_cpus: 1,
        ..Config::default()
    };
    LARGEST.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    let za = ZoneAllocator::with_memmap(config, AbstractFrames, &mut memmap);
    COUNTING.store(false, Ordering::Relaxed);
    let za = za.unwrap();
    // The table (4 MiB) is not on the heap: nothing there is larger than a
    // section's table.
    assert!(LARGEST.load(Ordering::Relaxed) as u64 <= section_table_bytes());
    assert!(memmap.used() >= (1 << 18) * 16 && memmap.used() < (1 << 18) * 17);
    assert_eq!(
        za.add_memory(Pfn(1 << 17), 16, None),
        Err(OfflineError::Metadata)
    );
    let m: &mut dyn MemMap = &mut memmap;
    za.add_memory(Pfn(1 << 17), 16, Some(m)).unwrap();
    za.check_invariants().unwrap();
    assert_eq!(za.managed_pages(), (1 << 18) - (1 << 16) + 16);
}
