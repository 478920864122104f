//! Calls that spare their callers friction: an owned vmalloc area's bytes as
//! slices, with `vfree` by address refused while its guard lives; why a page
//! fragment gives out no slice (a free by address takes the guard's reference);
//! a shrinker that reaches the allocator through a `Weak`; CMA areas found by
//! name; and more threads than `Config::nr_cpus`.

#[path = "support/settled.rs"]
mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use zonealloc::reclaim::{ShrinkControl, Shrinker, ShrinkerConfig};
use zonealloc::{
    ArenaOptions, CmaError, Config, ConfigError, Gfp, Order, PageFragCache, Pfn, VmallocConfig,
    VmallocError, VmallocSpace, ZoneAllocator,
};

use support::settled;

const PAGE: usize = 4096;

// -----------------------------------------------------------------------------
// A count of the heap calls a thread makes while it is marked
// -----------------------------------------------------------------------------

/// The system allocator, counting the calls of marked threads.
struct Counting;

thread_local! {
    static MARKED: Cell<bool> = const { Cell::new(false) };
}

static HEAP_CALLS: AtomicU64 = AtomicU64::new(0);

fn count_if_marked() {
    if MARKED.try_with(Cell::get).unwrap_or(false) {
        HEAP_CALLS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` unchanged; the count touches no
// heap memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_if_marked();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count_if_marked();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_if_marked();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` marked; the heap calls it made on this thread, and its result.
fn heap_calls<T>(f: impl FnOnce() -> T) -> (u64, T) {
    // Only marked threads count, and `HEAP_WATCH` lets one test mark at a time.
    let before = HEAP_CALLS.load(Ordering::Relaxed);
    MARKED.with(|m| m.set(true));
    let r = f();
    MARKED.with(|m| m.set(false));
    (HEAP_CALLS.load(Ordering::Relaxed) - before, r)
}

/// Tests that count heap calls run one at a time (the count is global).
static HEAP_WATCH: Mutex<()> = Mutex::new(());

// -----------------------------------------------------------------------------
// vmalloc: an owned area's bytes
// -----------------------------------------------------------------------------

fn memfd_za() -> ZoneAllocator<zonealloc::Arena> {
    let opts = ArenaOptions {
        memfd: true,
        ..ArenaOptions::default()
    };
    let config = Config {
        nr_cpus: 2,
        ..Config::with_bytes(32 << 20)
    };
    ZoneAllocator::with_arena(config, opts).unwrap()
}

#[test]
fn an_owned_mapped_area_is_written_through_slices_that_land_in_its_frames() {
    let za = memfd_za();
    let vm = VmallocSpace::new_mapped(&za, VmallocConfig::default()).unwrap();
    // 513 pages: an order-9 block split, then one more page elsewhere.
    let mut area = vm.vmalloc_owned(513 * PAGE).unwrap();
    assert_eq!(area.bytes().unwrap().len(), 513 * PAGE);
    {
        let b = area.bytes_mut().unwrap();
        for (i, page) in b.chunks_mut(PAGE).enumerate() {
            page.fill((i % 251) as u8);
        }
    }
    // Every page's bytes are in the frame behind it.
    for (i, &pfn) in area.pages().iter().enumerate() {
        let frame = za.page_address(pfn).unwrap();
        // SAFETY: the frame is the area's, mapped and live; only reads happen
        // while the guard is not borrowed mutably.
        let first = unsafe { frame.as_ptr().read() };
        // SAFETY: as above; the last byte of the page.
        let last = unsafe { frame.as_ptr().add(PAGE - 1).read() };
        assert_eq!(
            (first, last),
            ((i % 251) as u8, (i % 251) as u8),
            "page {i}"
        );
    }
    assert!(area.bytes().unwrap()[..PAGE].iter().all(|&x| x == 0));
    drop(area);
    vm.check_invariants().unwrap();
    assert_eq!(vm.nr_vmalloc_pages(), 0);
    drop(vm);
    settled(&za);
}

#[test]
fn an_unmapped_owned_area_has_no_bytes() {
    let za = ZoneAllocator::new(Config::with_bytes(16 << 20)).unwrap();
    let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    let mut area = vm.vmalloc_owned(3 * PAGE).unwrap();
    assert!(area.bytes().is_none());
    assert!(area.bytes_mut().is_none());
    drop(area);
    drop(vm);
    settled(&za);
}

#[test]
fn vfree_refuses_an_owned_area_and_changes_nothing_until_into_area() {
    let za = memfd_za();
    let vm = VmallocSpace::new_mapped(&za, VmallocConfig::default()).unwrap();
    let mut area = vm.vmalloc_owned(4 * PAGE).unwrap();
    area.bytes_mut().unwrap().fill(0x5a);
    let addr = area.addr();
    let (info, pages, free) = (vm.vmallocinfo(), vm.nr_vmalloc_pages(), vm.free_space());
    assert_eq!(vm.vfree(addr), Err(VmallocError::Owned(addr)));
    assert_eq!(
        vm.vfree(addr).unwrap_err().to_string(),
        format!("the area at {addr:#x} is owned by a guard")
    );
    // Other calls by address say what they always said.
    assert!(matches!(
        vm.vunmap(addr),
        Err(VmallocError::WrongKind { .. })
    ));
    assert!(vm.vm_unmap_ram(addr, 4).is_err());
    assert_eq!(
        (vm.vmallocinfo(), vm.nr_vmalloc_pages(), vm.free_space()),
        (info, pages, free)
    );
    vm.check_invariants().unwrap();
    // The bytes are still there, in the same frames.
    assert!(area.bytes().unwrap().iter().all(|&x| x == 0x5a));
    // Handed over: `vfree` by address accepts it again.
    let raw = area.into_area();
    assert_eq!(vm.area(addr).as_ref(), Some(&raw));
    vm.vfree(addr).unwrap();
    assert_eq!(vm.vfree(addr), Err(VmallocError::UnknownAddress(addr)));
    assert_eq!(vm.nr_vmalloc_pages(), 0);
    drop(vm);
    settled(&za);
}

#[test]
fn owned_areas_are_written_from_threads_of_their_own() {
    let za = memfd_za();
    let vm = VmallocSpace::new_mapped(&za, VmallocConfig::default()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let vm = &vm;
            s.spawn(move || {
                for round in 0..20usize {
                    let mut a = vm.vmalloc_owned((1 + round % 7) * PAGE).unwrap();
                    a.bytes_mut().unwrap().fill(t);
                    assert!(a.bytes().unwrap().iter().all(|&x| x == t));
                    // A stranger's vfree of it is refused.
                    assert_eq!(vm.vfree(a.addr()), Err(VmallocError::Owned(a.addr())));
                }
            });
        }
    });
    vm.check_invariants().unwrap();
    assert_eq!(vm.nr_vmalloc_pages(), 0);
    drop(vm);
    settled(&za);
}

// -----------------------------------------------------------------------------
// Page fragments: why a guard gives out no slice
// -----------------------------------------------------------------------------

/// The scenario `Fragment`'s documentation gives: a second free of a
/// neighbouring fragment's address takes the guard's reference, so the block
/// can go back to the allocator while the guard still lives. Safe calls only.
#[test]
fn a_free_by_address_takes_a_fragment_guards_reference() {
    let za =
        ZoneAllocator::with_arena(Config::with_bytes(16 << 20), ArenaOptions::default()).unwrap();
    let mut cache = PageFragCache::new(&za, Gfp::KERNEL);
    let guarded = cache.alloc_frag(100, 8).unwrap();
    let other = cache.alloc_frag(100, 8).unwrap().into_raw();
    za.page_frag_free(other.as_ptr()).unwrap();
    // Once too often: refused only when no fragment is out, and one is.
    za.page_frag_free(other.as_ptr()).unwrap();
    // The cache lets the block go; no fragment counts on it any more, so it is
    // freed, under the live guard.
    cache.drain();
    assert_eq!(za.nr_free_pages() + za.nr_pcp_pages(), za.managed_pages());
    // The guard's own free is refused now (its block is free); its drop
    // ignores that. A slice borrowed from it would point into free memory.
    assert!(za.page_frag_free(guarded.as_ptr().as_ptr()).is_err());
    drop(guarded);
    drop(cache);
    settled(&za);
}

// -----------------------------------------------------------------------------
// Shrinkers: what the allocator keeps
// -----------------------------------------------------------------------------

/// A pool that reaches the allocator through a `Weak`.
struct Pool {
    za: Weak<ZoneAllocator>,
    cached: Mutex<Vec<Pfn>>,
    scanned: AtomicU64,
}

impl Shrinker for Pool {
    fn count(&self, _: &ShrinkControl) -> u64 {
        self.cached.lock().unwrap().len() as u64
    }

    fn scan(&self, sc: &ShrinkControl) -> Option<u64> {
        let za = self.za.upgrade()?;
        let mut c = self.cached.lock().unwrap();
        let n = (sc.nr_to_scan as usize).min(c.len());
        for p in c.drain(..n) {
            za.free_pages(p, Order(0)).unwrap();
        }
        self.scanned.fetch_add(n as u64, Ordering::Relaxed);
        Some(n as u64)
    }
}

#[test]
fn a_shrinker_holding_a_weak_reclaims_and_keeps_no_cycle() {
    let za = Arc::new(ZoneAllocator::new(Config::with_bytes(16 << 20)).unwrap());
    let pool = Arc::new(Pool {
        za: Arc::downgrade(&za),
        cached: Mutex::new(Vec::new()),
        scanned: AtomicU64::new(0),
    });
    let _id = za.register_shrinker(pool.clone(), ShrinkerConfig::default());
    assert_eq!(
        Arc::strong_count(&za),
        1,
        "the shrinker holds no strong reference"
    );
    while let Ok(p) = za.alloc_pages(Gfp::NOWAIT, Order(0)) {
        pool.cached.lock().unwrap().push(p);
    }
    let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    assert!(
        pool.scanned.load(Ordering::Relaxed) > 0,
        "direct reclaim asked the pool"
    );
    za.free_pages(p, Order(0)).unwrap();
    // Dropped with the shrinker still registered: the allocator goes, and the
    // pool's `Weak` sees it.
    drop(za);
    assert!(pool.za.upgrade().is_none());
    assert_eq!(
        Arc::strong_count(&pool),
        1,
        "the allocator's entry went with it"
    );
}

// -----------------------------------------------------------------------------
// CMA areas by name
// -----------------------------------------------------------------------------

fn two_areas() -> Config {
    Config {
        nr_cpus: 2,
        ..Config::with_bytes(64 << 20)
            .with_cma("dma", Pfn(8192), 2048)
            .with_cma("video", Pfn(10240), 2048)
    }
}

#[test]
fn cma_areas_are_found_by_name() {
    let za = ZoneAllocator::new(two_areas()).unwrap();
    assert_eq!(za.cma_area("dma"), Ok(0));
    assert_eq!(za.cma_area("video"), Ok(1));
    for bad in ["", "DMA", "vide", "video ", "dma\0"] {
        assert_eq!(za.cma_area(bad), Err(CmaError::NoAreaNamed), "{bad:?}");
    }
    assert_eq!(
        CmaError::NoAreaNamed.to_string(),
        "no CMA area of that name"
    );
    let video = za.cma_area("video").unwrap();
    assert_eq!(za.cma_area_info(video).unwrap().name, "video");
    let run = za.cma_alloc(video, 512, Order(9)).unwrap();
    assert!((10240..12288).contains(&run.0));
    assert_eq!(za.cma_area_info(video).unwrap().allocated, 512);
    assert_eq!(za.cma_area_info(0).unwrap().allocated, 0);
    za.cma_release(video, run, 512).unwrap();
    settled(&za);
}

#[test]
fn the_lookup_and_the_calls_by_name_make_no_heap_call() {
    let _one = HEAP_WATCH.lock().unwrap();
    let za = ZoneAllocator::new(two_areas()).unwrap();
    let by_name =
        |name: &str| -> Result<Pfn, CmaError> { za.cma_alloc(za.cma_area(name)?, 256, Order(8)) };
    // Warm up: a thread's first calls may set up its thread-locals.
    let w = by_name("dma").unwrap();
    za.cma_release(0, w, 256).unwrap();
    assert!(
        heap_calls(|| drop(Vec::<u8>::with_capacity(8))).0 > 0,
        "the watch counts"
    );
    let (calls, runs) = heap_calls(|| {
        let a = by_name("dma");
        let b = by_name("video");
        let c = by_name("audio");
        (a, b, c)
    });
    assert_eq!(calls, 0, "heap calls on the runtime path");
    let (a, b, c) = runs;
    assert_eq!(c, Err(CmaError::NoAreaNamed));
    let (calls, _) = heap_calls(|| {
        za.cma_release(za.cma_area("dma").unwrap(), a.unwrap(), 256)
            .unwrap();
        za.cma_release(za.cma_area("video").unwrap(), b.unwrap(), 256)
            .unwrap();
    });
    assert_eq!(calls, 0, "heap calls on the runtime path");
    settled(&za);
}

#[test]
fn two_areas_of_one_name_are_refused() {
    let config = Config::with_bytes(64 << 20)
        .with_cma("dma", Pfn(8192), 2048)
        .with_cma("dma", Pfn(10240), 2048);
    let want = ConfigError::Cma {
        area: 1,
        why: "has the name of an earlier area",
    };
    assert_eq!(config.validate(), Err(want));
    assert!(matches!(ZoneAllocator::new(config), Err(e) if e.to_string().contains("earlier area")));
    // Distinct names, the same spans: accepted.
    assert!(two_areas().validate().is_ok());
}

// -----------------------------------------------------------------------------
// nr_cpus counts CPUs, not threads
// -----------------------------------------------------------------------------

#[test]
fn more_threads_than_nr_cpus_share_the_lists_and_lose_nothing() {
    let za = ZoneAllocator::new(Config {
        nr_cpus: 1,
        ..Config::with_bytes(32 << 20)
    })
    .unwrap();
    assert_eq!(za.current_cpu(), 0);
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let za = &za;
            s.spawn(move || {
                let mut held = Vec::new();
                for i in 0..2000u64 {
                    let order = Order(((t + i) % 4) as u8);
                    held.push((za.alloc_pages(Gfp::KERNEL, order).unwrap(), order));
                    if held.len() > 16 {
                        let (p, o) = held.swap_remove((i % 16) as usize);
                        za.free_pages(p, o).unwrap();
                    }
                }
                for (p, o) in held {
                    za.free_pages(p, o).unwrap();
                }
            });
        }
    });
    settled(&za);
}

#[test]
fn a_cpu_id_past_nr_cpus_is_taken_modulo() {
    fn cpu_id() -> usize {
        13
    }
    let za = ZoneAllocator::new(Config {
        nr_cpus: 4,
        cpu_id: Some(cpu_id),
        ..Config::with_bytes(16 << 20)
    })
    .unwrap();
    assert_eq!(za.current_cpu(), 1);
    let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    za.free_pages(p, Order(0)).unwrap();
    settled(&za);
}
