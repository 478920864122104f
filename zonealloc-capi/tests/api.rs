//! The C interface called as C calls it, through the exported functions: every
//! function, its error codes and their payloads, the pointer checks, handles
//! that are NULL or destroyed, the text buffers, and racing frees.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;
use std::sync::Barrier;

use ::zonealloc::*;
use zonealloc_core::{Config, ZoneAllocator, ZoneType};

const GFP_KERNEL: u32 = 0xcc0;
const GFP_DMA32: u32 = 0x04;
const GFP_THISNODE: u32 = 0x20_0000;
const GFP_ZERO: u32 = 0x100;

/// A live handle, destroyed when dropped.
struct Za(*mut zonealloc);

// SAFETY: the header lets any thread call on a handle, concurrently with any call
// but `zonealloc_destroy`, which only `Drop` (with the value owned) makes.
unsafe impl Send for Za {}
// SAFETY: as above.
unsafe impl Sync for Za {}

/// Runs `f` with a pointer to a fresh `T` for it to fill; returns the status and
/// the value.
fn out<T: Default>(f: impl FnOnce(*mut T) -> c_int) -> (c_int, T) {
    let mut v = T::default();
    let rc = f(&mut v);
    (rc, v)
}

#[track_caller]
fn ok(rc: c_int) {
    assert_eq!(rc, 0, "{}", last_message());
}

/// The calling thread's last error message.
fn last_message() -> String {
    let mut buf = [0 as c_char; 256];
    // SAFETY: `buf` has 256 writable bytes.
    let n = unsafe { zonealloc_last_error_message(buf.as_mut_ptr(), buf.len()) };
    assert!(n >= 0);
    // SAFETY: the call ended the text with a NUL inside `buf`.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// The calling thread's last error info.
fn last_info() -> zonealloc_error_info {
    let mut info = std::mem::MaybeUninit::<zonealloc_error_info>::uninit();
    // SAFETY: `info` is writable; the call fills every field.
    let code = unsafe { zonealloc_last_error(info.as_mut_ptr()) };
    // SAFETY: filled by the call (it answered a code, not a failure of its own).
    let info = unsafe { info.assume_init() };
    assert_eq!(code, info.code);
    info
}

impl Za {
    fn bytes(bytes: u64) -> Za {
        // SAFETY: `p` points to a local.
        let (rc, p) =
            out(|p| unsafe { zonealloc_create_bytes(bytes, ZONEALLOC_BACKING_FRAMES, p) });
        ok(rc);
        Za(p)
    }

    fn new(cfg: &zonealloc_config) -> Result<Za, c_int> {
        // SAFETY: `cfg` and the arrays it points to are alive for the call;
        // `p` points to a local.
        let (rc, p) = out(|p| unsafe { zonealloc_create(cfg, p) });
        if rc == 0 {
            Ok(Za(p))
        } else {
            assert!(p.is_null(), "out written on failure");
            Err(rc)
        }
    }

    fn alloc(&self, gfp: u32, order: u32) -> Result<u64, c_int> {
        // SAFETY: a live handle; `p` points to a local.
        let (rc, p) = out(|p| unsafe { zonealloc_alloc_pages(self.0, gfp, order, p) });
        if rc == 0 {
            Ok(p)
        } else {
            Err(rc)
        }
    }

    fn free(&self, pfn: u64, order: u32) -> c_int {
        // SAFETY: a live handle.
        unsafe { zonealloc_free_pages(self.0, pfn, order) }
    }

    fn count(&self, f: unsafe extern "C" fn(*const zonealloc, *mut u64) -> c_int) -> u64 {
        // SAFETY: a live handle; `p` points to a local.
        let (rc, n) = out(|p| unsafe { f(self.0, p) });
        ok(rc);
        n
    }

    fn nr_free(&self) -> u64 {
        self.count(zonealloc_nr_free_pages)
    }

    fn managed(&self) -> u64 {
        self.count(zonealloc_managed_pages)
    }

    fn drain_all(&self) -> u64 {
        // SAFETY: a live handle; `p` points to a local.
        let (rc, n) = out(|p| unsafe { zonealloc_drain_all_pages(self.0, p) });
        ok(rc);
        n
    }

    fn check(&self) -> u64 {
        // SAFETY: a live handle; `p` points to a local.
        let (rc, n) = out(|p| unsafe { zonealloc_check_invariants(self.0, p) });
        ok(rc);
        n
    }

    /// Text `f` through a buffer of `cap` bytes: the answer and the text.
    fn text(
        &self,
        f: unsafe extern "C" fn(*const zonealloc, *mut c_char, usize) -> i64,
        cap: usize,
    ) -> (i64, String) {
        let mut buf = vec![b'#' as c_char; cap + 1];
        // SAFETY: a live handle; `buf` has `cap` writable bytes (and one more,
        // which must stay untouched).
        let n = unsafe { f(self.0, buf.as_mut_ptr(), cap) };
        assert_eq!(buf[cap], b'#' as c_char, "wrote past cap");
        if cap == 0 {
            return (n, String::new());
        }
        // SAFETY: the call ended the text with a NUL inside `buf`.
        let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
        (n, s.to_string_lossy().into_owned())
    }

    /// Every free frame back on the buddy lists, and every invariant checked.
    #[track_caller]
    fn assert_quiet_and_whole(&self) {
        self.drain_all();
        assert_eq!(self.nr_free(), self.managed());
        assert_eq!(self.count(zonealloc_nr_pcp_pages), 0);
        assert!(self.check() > 0);
    }
}

impl Drop for Za {
    fn drop(&mut self) {
        // SAFETY: the handle is owned here and nothing else calls on it now.
        let rc = unsafe { zonealloc_destroy(self.0) };
        if !std::thread::panicking() {
            assert_eq!(rc, 0);
        }
    }
}

fn config() -> zonealloc_config {
    // SAFETY: `p` points to a local.
    let (rc, c) = out(|p| unsafe { zonealloc_config_init(p) });
    ok(rc);
    c
}

fn zone(zone_type: ZoneType, start_pfn: u64, spanned_pages: u64) -> zonealloc_zone_config {
    zonealloc_zone_config {
        zone_type: zone_type.idx() as u32,
        start_pfn,
        spanned_pages,
        holes: ptr::null(),
        nr_holes: 0,
    }
}

// -----------------------------------------------------------------------------
// Construction
// -----------------------------------------------------------------------------

#[test]
fn config_init_gives_the_cores_defaults() {
    let c = config();
    let d = Config::default();
    assert!(c.nodes.is_null());
    assert_eq!(c.nr_nodes, 0);
    assert_eq!(c.nr_cpus, 0);
    assert_eq!(c.max_order, u32::from(d.max_order.0));
    assert_eq!(c.pageblock_order, u32::from(d.pageblock_order.0));
    assert_eq!(c.pcp_enabled, 1);
    assert_eq!(c.min_free_kbytes, -1);
    assert_eq!(c.backing, ZONEALLOC_BACKING_FRAMES);
    // SAFETY: NULL is refused before any write.
    assert_eq!(
        unsafe { zonealloc_config_init(ptr::null_mut()) },
        Status::NullPointer.code()
    );
}

#[test]
fn nodes_zones_and_holes_are_built_as_described() {
    let holes = [zonealloc_hole {
        start_pfn: 5000,
        nr_pages: 100,
    }];
    let node0 = [
        zonealloc_zone_config {
            holes: holes.as_ptr(),
            nr_holes: 1,
            ..zone(ZoneType::Dma32, 4096, 8192)
        },
        zone(ZoneType::Normal, 16384, 16384),
    ];
    let node1 = [zone(ZoneType::Normal, 65536 + 3, 8192)];
    let nodes = [
        zonealloc_node_config {
            zones: node0.as_ptr(),
            nr_zones: 2,
        },
        zonealloc_node_config {
            zones: node1.as_ptr(),
            nr_zones: 1,
        },
    ];
    let cfg = zonealloc_config {
        nodes: nodes.as_ptr(),
        nr_nodes: 2,
        nr_cpus: 3,
        pcp_enabled: 0,
        min_free_kbytes: 256,
        ..config()
    };
    let za = Za::new(&cfg).unwrap();
    assert_eq!(za.managed(), 8192 - 100 + 16384 + 8192);
    assert_eq!(za.nr_free(), za.managed(), "per-CPU lists are off");
    let vmstat = za.text(zonealloc_vmstat, 1 << 16).1;
    assert!(vmstat.contains("nr_free_pages"), "{vmstat}");
    let zoneinfo = za.text(zonealloc_zoneinfo, 1 << 18).1;
    assert!(zoneinfo.contains("Node 1, zone   Normal"), "{zoneinfo}");

    let p = za.alloc(GFP_DMA32, 0).unwrap();
    assert!((4096..4096 + 8192).contains(&p) && !(5000..5100).contains(&p));
    // SAFETY: a live handle; `p` points to a local.
    let (rc, q) =
        out(|p| unsafe { zonealloc_alloc_pages_node(za.0, 1, GFP_KERNEL | GFP_THISNODE, 4, p) });
    ok(rc);
    assert!((65536 + 3..65536 + 3 + 8192).contains(&q) && q % 16 == 0);
    ok(za.free(p, 0));
    ok(za.free(q, 4));
    // A frame of the hole was never the allocator's.
    assert_eq!(za.free(5050, 0), Status::FreeHole.code());
    assert_eq!(last_info().pfn, 5050);
    // SAFETY: a live handle; `p` points to a local.
    let (rc, _) = out(|p| unsafe { zonealloc_alloc_pages_node(za.0, 9, GFP_KERNEL, 0, p) });
    assert_eq!(rc, Status::AllocInvalidNode.code());
    assert_eq!(last_info().node, 9);
    za.assert_quiet_and_whole();
}

#[test]
fn each_refused_configuration_answers_its_own_code() {
    let holes_outside = [zonealloc_hole {
        start_pfn: 10,
        nr_pages: 100,
    }];
    let ok_zone = [zone(ZoneType::Normal, 0, 4096)];
    let backwards = [
        zone(ZoneType::Normal, 0, 4096),
        zone(ZoneType::Dma32, 8192, 4096),
    ];
    let overlapping = [
        zone(ZoneType::Dma32, 0, 4096),
        zone(ZoneType::Normal, 2048, 4096),
    ];
    let huge = [zone(ZoneType::Normal, 0, u64::from(u32::MAX))];
    let far = [zone(ZoneType::Normal, 1 << 60, 4096)];
    let bad_type = [zonealloc_zone_config {
        zone_type: 9,
        ..ok_zone[0]
    }];
    let hole_outside = [zonealloc_zone_config {
        start_pfn: 64,
        holes: holes_outside.as_ptr(),
        nr_holes: 1,
        ..ok_zone[0]
    }];
    let null_holes = [zonealloc_zone_config {
        nr_holes: 1,
        ..ok_zone[0]
    }];
    let node = |zones: &[zonealloc_zone_config]| zonealloc_node_config {
        zones: zones.as_ptr(),
        nr_zones: zones.len(),
    };
    let one = |zones: &[zonealloc_zone_config]| [node(zones)];
    // Each node array outlives the configurations that point to it.
    let ok_nodes = one(&ok_zone);
    let (backwards_n, overlapping_n, huge_n) = (one(&backwards), one(&overlapping), one(&huge));
    let (far_n, hole_outside_n) = (one(&far), one(&hole_outside));
    let (bad_type_n, null_holes_n) = (one(&bad_type), one(&null_holes));
    let with = |nodes: &[zonealloc_node_config]| zonealloc_config {
        nodes: nodes.as_ptr(),
        nr_nodes: nodes.len(),
        ..config()
    };
    let cases: Vec<(&str, zonealloc_config, Status)> = vec![
        ("no node", config(), Status::ConfigNoMemory),
        (
            "zones out of order",
            with(&backwards_n),
            Status::ConfigZoneOrder,
        ),
        ("overlap", with(&overlapping_n), Status::ConfigOverlap),
        ("zone too large", with(&huge_n), Status::ConfigZoneTooLarge),
        ("pfn too large", with(&far_n), Status::ConfigPfnTooLarge),
        (
            "hole outside",
            with(&hole_outside_n),
            Status::ConfigHoleOutsideZone,
        ),
        (
            "max_order",
            zonealloc_config {
                max_order: 21,
                ..with(&ok_nodes)
            },
            Status::ConfigMaxOrder,
        ),
        (
            "max_order past u8",
            zonealloc_config {
                max_order: 1000,
                ..with(&ok_nodes)
            },
            Status::ConfigMaxOrder,
        ),
        (
            "pageblock_order",
            zonealloc_config {
                pageblock_order: 11,
                ..with(&ok_nodes)
            },
            Status::ConfigPageblockOrder,
        ),
        (
            "nr_cpus",
            zonealloc_config {
                nr_cpus: 5000,
                ..with(&ok_nodes)
            },
            Status::ConfigNrCpus,
        ),
        (
            "min_free_kbytes",
            zonealloc_config {
                min_free_kbytes: i64::MAX,
                ..with(&ok_nodes)
            },
            Status::ConfigMinFreeKbytes,
        ),
        ("zone type", with(&bad_type_n), Status::InvalidArgument),
        (
            "backing",
            zonealloc_config {
                backing: 7,
                ..with(&ok_nodes)
            },
            Status::InvalidArgument,
        ),
        ("holes NULL", with(&null_holes_n), Status::NullPointer),
        (
            "nodes NULL",
            zonealloc_config {
                nr_nodes: 1,
                ..config()
            },
            Status::NullPointer,
        ),
    ];
    for (what, cfg, want) in &cases {
        let got = Za::new(cfg).err();
        assert_eq!(got, Some(want.code()), "{what}: {}", last_message());
    }
    // Payloads: the node, the zone type, the value.
    let two = [node(&ok_zone), node(&backwards)];
    assert!(Za::new(&with(&two)).is_err());
    assert_eq!(last_info().node, 1);
    assert!(Za::new(&with(&hole_outside_n)).is_err());
    let info = last_info();
    assert_eq!(
        (info.node, info.zone_type),
        (0, ZoneType::Normal.idx() as u32)
    );
    let cpus = zonealloc_config {
        nr_cpus: 5000,
        ..with(&ok_nodes)
    };
    assert!(Za::new(&cpus).is_err());
    assert_eq!(last_info().value, 5000);
    assert!(last_message().contains("5000"), "{}", last_message());
    // The good one builds.
    drop(Za::new(&with(&ok_nodes)).unwrap());
    // SAFETY: NULL configuration and NULL out are refused before anything.
    unsafe {
        let mut p = ptr::null_mut();
        assert_eq!(
            zonealloc_create(ptr::null(), &mut p),
            Status::NullPointer.code()
        );
        let cfg = with(&ok_nodes);
        assert_eq!(
            zonealloc_create(&cfg, ptr::null_mut()),
            Status::NullPointer.code()
        );
        assert_eq!(
            zonealloc_create_bytes(100, ZONEALLOC_BACKING_FRAMES, &mut p),
            Status::ConfigNoMemory.code()
        );
        assert_eq!(
            zonealloc_create_bytes(1 << 20, 2, &mut p),
            Status::InvalidArgument.code()
        );
        assert!(p.is_null());
    }
}

// -----------------------------------------------------------------------------
// Blocks and references
// -----------------------------------------------------------------------------

#[test]
fn bad_frees_answer_their_codes_and_change_nothing() {
    let za = Za::bytes(64 << 20);
    let p = za.alloc(GFP_KERNEL, 3).unwrap();
    assert_eq!(p % 8, 0);
    let free_before = za.nr_free();
    assert_eq!(za.free(p + 1, 0), Status::FreeTailPage.code());
    assert_eq!(za.free(p, 2), Status::FreeWrongOrder.code());
    let info = last_info();
    assert_eq!((info.pfn, info.order, info.actual_order), (p, 2, 3));
    assert_eq!(za.free(p + 2, 1), Status::FreeTailPage.code());
    assert_eq!(za.free(p + 1, 1), Status::FreeMisaligned.code());
    assert_eq!(za.free(p, 11), Status::FreeInvalidOrder.code());
    assert_eq!(last_info().order, 11);
    assert_eq!(za.free(p, u32::MAX), Status::FreeInvalidOrder.code());
    assert_eq!(za.free(1 << 40, 0), Status::FreeOutOfRange.code());
    assert_eq!(za.nr_free(), free_before, "refused frees changed nothing");
    ok(za.free(p, 3));
    assert_eq!(za.free(p, 3), Status::FreeAlreadyFree.code());
    assert_eq!(last_info().pfn, p);
    assert!(
        last_message().contains("already free"),
        "{}",
        last_message()
    );
    assert_eq!(
        za.alloc(GFP_KERNEL, 11),
        Err(Status::AllocInvalidOrder.code())
    );
    assert_eq!(last_info().order, 11);
    za.assert_quiet_and_whole();
}

#[test]
fn references_and_split_pages() {
    let za = Za::bytes(64 << 20);
    let p = za.alloc(GFP_KERNEL, 2).unwrap();
    let count = |pfn| {
        // SAFETY: a live handle; `c` points to a local.
        out(|c| unsafe { zonealloc_page_count(za.0, pfn, c) })
    };
    let put = |pfn| {
        // SAFETY: a live handle; `f` points to a local.
        out(|f| unsafe { zonealloc_put_page(za.0, pfn, f) })
    };
    assert_eq!(count(p), (0, 1));
    // SAFETY: a live handle.
    ok(unsafe { zonealloc_get_page(za.0, p) });
    assert_eq!(count(p), (0, 2));
    assert_eq!(put(p), (0, 0));
    assert_eq!(put(p), (0, 1), "the last reference frees the block");
    assert_eq!(count(p).0, Status::FreeAlreadyFree.code());
    // SAFETY: a live handle; NULL `freed` is allowed.
    assert_eq!(
        unsafe { zonealloc_put_page(za.0, p, ptr::null_mut()) },
        Status::FreeAlreadyFree.code()
    );
    // SAFETY: a live handle.
    assert_eq!(
        unsafe { zonealloc_get_page(za.0, p) },
        Status::FreeAlreadyFree.code()
    );

    let q = za.alloc(GFP_KERNEL, 4).unwrap();
    // SAFETY: a live handle.
    ok(unsafe { zonealloc_split_page(za.0, q, 4) });
    for i in 0..16 {
        assert_eq!(count(q + i), (0, 1));
    }
    for i in 0..8 {
        ok(za.free(q + i, 0));
    }
    // The other half as one run.
    // SAFETY: a live handle.
    ok(unsafe { zonealloc_free_contig_range(za.0, q + 8, 8) });
    // SAFETY: a live handle.
    let again = unsafe { zonealloc_free_contig_range(za.0, q + 8, 8) };
    assert_eq!(again, Status::FreeAlreadyFree.code());
    za.assert_quiet_and_whole();
}

#[test]
fn a_required_out_pointer_that_is_null_allocates_nothing() {
    let za = Za::bytes(16 << 20);
    za.drain_all();
    let before = za.nr_free() + za.count(zonealloc_nr_pcp_pages);
    // SAFETY: a live handle; NULL out pointers are refused before anything.
    unsafe {
        let null = ptr::null_mut();
        assert_eq!(
            zonealloc_alloc_pages(za.0, GFP_KERNEL, 0, null),
            Status::NullPointer.code()
        );
        assert_eq!(
            zonealloc_alloc_pages_node(za.0, 0, GFP_KERNEL, 0, null),
            Status::NullPointer.code()
        );
        assert_eq!(
            zonealloc_alloc_contig_pages(za.0, 10, GFP_KERNEL, 0, null),
            Status::NullPointer.code()
        );
        let mut slots = [ZONEALLOC_PFN_NONE; 4];
        assert_eq!(
            zonealloc_alloc_pages_bulk(za.0, GFP_KERNEL, slots.as_mut_ptr(), 4, ptr::null_mut()),
            Status::NullPointer.code()
        );
        assert_eq!(slots, [ZONEALLOC_PFN_NONE; 4]);
        let misaligned = (ptr::dangling_mut::<u64>() as usize + 1) as *mut u64;
        assert_eq!(
            zonealloc_alloc_pages(za.0, GFP_KERNEL, 0, misaligned),
            Status::InvalidArgument.code()
        );
    }
    assert_eq!(za.nr_free() + za.count(zonealloc_nr_pcp_pages), before);
    za.assert_quiet_and_whole();
}

// -----------------------------------------------------------------------------
// Contiguous and bulk
// -----------------------------------------------------------------------------

#[test]
fn contiguous_ranges_and_runs() {
    let za = Za::bytes(64 << 20);
    // SAFETY: a live handle throughout; out pointers point to locals.
    unsafe {
        ok(zonealloc_alloc_contig_range(za.0, 1000, 1700));
        assert_eq!(
            zonealloc_alloc_contig_range(za.0, 1500, 1800),
            Status::ContigBusy.code()
        );
        assert_eq!(last_info().pfn, 1500);
        assert_eq!(
            zonealloc_alloc_contig_range(za.0, 5, 5),
            Status::ContigInvalidRange.code()
        );
        assert_eq!(
            zonealloc_alloc_contig_range(za.0, 16000, 17000),
            Status::ContigCrossesZone.code()
        );
        ok(zonealloc_free_contig_range(za.0, 1000, 700));
        let (rc, p) = out(|p| zonealloc_alloc_contig_pages(za.0, 1000, GFP_KERNEL, 0, p));
        ok(rc);
        ok(zonealloc_free_contig_range(za.0, p, 1000));
        let (rc, _) = out(|p| zonealloc_alloc_contig_pages(za.0, 0, GFP_KERNEL, 0, p));
        assert_eq!(rc, Status::ContigInvalidRange.code());
        let (rc, _) = out(|p| zonealloc_alloc_contig_pages(za.0, 10, GFP_KERNEL, 70000, p));
        assert_eq!(rc, Status::ContigInvalidRange.code());
        let (rc, _) = out(|p| zonealloc_alloc_contig_pages(za.0, 1 << 20, GFP_KERNEL, 0, p));
        assert_eq!(rc, Status::ContigNoMemory.code());
        assert_eq!(
            zonealloc_free_contig_range(za.0, 16000, 1000),
            Status::FreeCrossesZone.code()
        );
    }
    za.assert_quiet_and_whole();
}

#[test]
fn bulk_allocation_fills_empty_slots_across_chunks_and_frees_all_or_nothing() {
    let za = Za::bytes(64 << 20);
    let kept = za.alloc(GFP_KERNEL, 0).unwrap();
    let mut slots = vec![ZONEALLOC_PFN_NONE; 600];
    slots[300] = kept;
    // SAFETY: a live handle; `slots` has 600 entries; `n` points to a local.
    let (rc, n) = out(|n| unsafe {
        zonealloc_alloc_pages_bulk(za.0, GFP_KERNEL, slots.as_mut_ptr(), slots.len(), n)
    });
    ok(rc);
    assert_eq!(n, 600);
    assert_eq!(slots[300], kept, "a pre-filled slot is kept");
    let mut sorted = slots.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 600, "every page once");
    // One bad entry (listed twice): nothing is freed.
    let mut twice = slots.clone();
    twice.push(slots[0]);
    // SAFETY: a live handle; `twice` has `twice.len()` entries.
    let rc = unsafe { zonealloc_free_pages_bulk(za.0, twice.as_ptr(), twice.len()) };
    assert_ne!(rc, 0);
    // SAFETY: as above.
    ok(unsafe { zonealloc_free_pages_bulk(za.0, slots.as_ptr(), slots.len()) });
    // SAFETY: as above.
    let rc = unsafe { zonealloc_free_pages_bulk(za.0, slots.as_ptr(), slots.len()) };
    assert_eq!(rc, Status::FreeAlreadyFree.code());
    // SAFETY: empty arrays may be NULL.
    ok(unsafe { zonealloc_free_pages_bulk(za.0, ptr::null(), 0) });
    za.assert_quiet_and_whole();
}

#[test]
fn bulk_allocation_running_out_is_a_short_count() {
    let za = Za::bytes(1 << 20);
    let mut slots = vec![ZONEALLOC_PFN_NONE; 1000];
    // SAFETY: a live handle; `slots` has 1000 entries; `n` points to a local.
    let (rc, n) = out(|n| unsafe {
        zonealloc_alloc_pages_bulk(za.0, GFP_KERNEL, slots.as_mut_ptr(), slots.len(), n)
    });
    ok(rc);
    assert!(n > 0 && n <= 256, "{n}");
    let filled: Vec<u64> = slots
        .iter()
        .copied()
        .filter(|&p| p != ZONEALLOC_PFN_NONE)
        .collect();
    assert_eq!(filled.len(), n);
    // SAFETY: a live handle; `filled` has `n` entries.
    ok(unsafe { zonealloc_free_pages_bulk(za.0, filled.as_ptr(), n) });
    za.assert_quiet_and_whole();
}

// -----------------------------------------------------------------------------
// Texts and counts
// -----------------------------------------------------------------------------

#[test]
fn texts_follow_snprintf_and_match_the_core() {
    let za = Za::bytes(64 << 20);
    let core = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    let texts: [(
        unsafe extern "C" fn(*const zonealloc, *mut c_char, usize) -> i64,
        String,
    ); 2] = [
        (zonealloc_buddyinfo, core.buddyinfo().to_string()),
        (zonealloc_pagetypeinfo, core.pagetypeinfo().to_string()),
    ];
    for (f, want) in texts {
        let (n, _) = za.text(f, 0);
        assert_eq!(n, want.len() as i64);
        let (n, full) = za.text(f, want.len() + 1);
        assert_eq!((n, full.as_str()), (want.len() as i64, want.as_str()));
        let (n, cut) = za.text(f, 10);
        assert_eq!((n, cut.as_str()), (want.len() as i64, &want[..9]));
        // NULL with a zero capacity asks for the length only.
        // SAFETY: a live handle; nothing is written with cap 0.
        assert_eq!(unsafe { f(za.0, ptr::null_mut(), 0) }, want.len() as i64);
        // SAFETY: NULL with a capacity is refused before any write.
        let rc = unsafe { f(za.0, ptr::null_mut(), 8) };
        assert_eq!(rc, i64::from(Status::NullPointer.code()));
    }
    for f in [zonealloc_zoneinfo, zonealloc_vmstat] {
        let (n, text) = za.text(f, 1 << 18);
        assert!(n > 0 && text.len() == n as usize);
    }
    assert!(za
        .text(zonealloc_buddyinfo, 4096)
        .1
        .starts_with("Node 0, zone   Normal"));
}

#[test]
fn drains_and_counts_agree() {
    let za = Za::bytes(64 << 20);
    let blocks: Vec<u64> = (0..64).map(|_| za.alloc(GFP_KERNEL, 0).unwrap()).collect();
    for &p in &blocks {
        ok(za.free(p, 0));
    }
    let pcp = za.count(zonealloc_nr_pcp_pages);
    assert_eq!(za.nr_free() + pcp, za.managed());
    // SAFETY: a live handle; NULL `nr_drained` is allowed.
    ok(unsafe { zonealloc_drain_local_pages(za.0, ptr::null_mut()) });
    let drained = za.drain_all();
    assert!(drained <= pcp);
    za.assert_quiet_and_whole();
}

// -----------------------------------------------------------------------------
// Handles
// -----------------------------------------------------------------------------

/// Every call on a handle, with harmless arguments, answering its status.
fn every_handle_call(za: *mut zonealloc) -> Vec<(&'static str, i64)> {
    let mut u = 0u64;
    let mut n = 0usize;
    let mut c = 0u32;
    let mut a: *mut c_void = ptr::null_mut();
    let mut buf = [0 as c_char; 16];
    let mut slots = [ZONEALLOC_PFN_NONE; 2];
    // SAFETY: every out pointer points to a local; `za` is NULL or a handle
    // from `zonealloc_create*`, live or destroyed, used by no other thread.
    unsafe {
        vec![
            (
                "alloc_pages",
                zonealloc_alloc_pages(za, GFP_KERNEL, 0, &mut u).into(),
            ),
            (
                "alloc_pages_node",
                zonealloc_alloc_pages_node(za, 0, GFP_KERNEL, 0, &mut u).into(),
            ),
            ("free_pages", zonealloc_free_pages(za, 0, 0).into()),
            ("get_page", zonealloc_get_page(za, 0).into()),
            (
                "put_page",
                zonealloc_put_page(za, 0, ptr::null_mut()).into(),
            ),
            ("page_count", zonealloc_page_count(za, 0, &mut c).into()),
            ("split_page", zonealloc_split_page(za, 0, 1).into()),
            ("page_address", zonealloc_page_address(za, 0, &mut a).into()),
            (
                "alloc_contig_range",
                zonealloc_alloc_contig_range(za, 0, 1).into(),
            ),
            (
                "alloc_contig_pages",
                zonealloc_alloc_contig_pages(za, 1, 0, 0, &mut u).into(),
            ),
            (
                "free_contig_range",
                zonealloc_free_contig_range(za, 0, 1).into(),
            ),
            (
                "alloc_pages_bulk",
                zonealloc_alloc_pages_bulk(za, 0, slots.as_mut_ptr(), 2, &mut n).into(),
            ),
            (
                "free_pages_bulk",
                zonealloc_free_pages_bulk(za, ptr::null(), 0).into(),
            ),
            (
                "drain_local_pages",
                zonealloc_drain_local_pages(za, &mut u).into(),
            ),
            (
                "drain_all_pages",
                zonealloc_drain_all_pages(za, &mut u).into(),
            ),
            ("nr_free_pages", zonealloc_nr_free_pages(za, &mut u).into()),
            ("managed_pages", zonealloc_managed_pages(za, &mut u).into()),
            ("nr_pcp_pages", zonealloc_nr_pcp_pages(za, &mut u).into()),
            ("buddyinfo", zonealloc_buddyinfo(za, buf.as_mut_ptr(), 16)),
            (
                "pagetypeinfo",
                zonealloc_pagetypeinfo(za, buf.as_mut_ptr(), 16),
            ),
            ("zoneinfo", zonealloc_zoneinfo(za, buf.as_mut_ptr(), 16)),
            ("vmstat", zonealloc_vmstat(za, buf.as_mut_ptr(), 16)),
            (
                "check_invariants",
                zonealloc_check_invariants(za, &mut u).into(),
            ),
        ]
    }
}

#[test]
fn null_and_destroyed_handles_are_refused_by_every_call() {
    let bad = i64::from(Status::BadHandle.code());
    for (name, rc) in every_handle_call(ptr::null_mut()) {
        assert_eq!(rc, bad, "{name} with NULL");
    }
    let za = Za::bytes(4 << 20);
    let raw = za.0;
    drop(za);
    for (name, rc) in every_handle_call(raw) {
        assert_eq!(rc, bad, "{name} after destroy");
    }
    // SAFETY: a destroyed handle stays a readable tombstone.
    assert_eq!(unsafe { zonealloc_destroy(raw) }, Status::BadHandle.code());
    // SAFETY: NULL is refused.
    assert_eq!(
        unsafe { zonealloc_destroy(ptr::null_mut()) },
        Status::BadHandle.code()
    );
    // A live handle answers them all with its own codes.
    let za = Za::bytes(4 << 20);
    for (name, rc) in every_handle_call(za.0) {
        assert_ne!(rc, bad, "{name} on a live handle");
    }
}

// -----------------------------------------------------------------------------
// Errors
// -----------------------------------------------------------------------------

#[test]
fn the_last_error_is_per_thread_and_kept_by_successes() {
    std::thread::spawn(|| {
        let fresh = last_info();
        assert_eq!((fresh.code, fresh.pfn), (0, ZONEALLOC_PFN_NONE));
        assert_eq!(last_message(), "no error");
        // SAFETY: NULL `info` is allowed.
        assert_eq!(unsafe { zonealloc_last_error(ptr::null_mut()) }, 0);
        let za = Za::bytes(4 << 20);
        assert_eq!(za.free(3, 0), Status::FreeAlreadyFree.code());
        let p = za.alloc(GFP_KERNEL, 0).unwrap();
        ok(za.free(p, 0));
        let info = last_info();
        assert_eq!((info.code, info.pfn), (Status::FreeAlreadyFree.code(), 3));
        assert_eq!(info.order, ZONEALLOC_NONE);
        assert_eq!(info.value, ZONEALLOC_VALUE_NONE);
        // SAFETY: NULL `info` is allowed.
        assert_eq!(
            unsafe { zonealloc_last_error(ptr::null_mut()) },
            Status::FreeAlreadyFree.code()
        );
        // Reading the error fails here, and does not replace it.
        // SAFETY: NULL with a capacity is refused before any write.
        let rc = unsafe { zonealloc_last_error_message(ptr::null_mut(), 8) };
        assert_eq!(rc, i64::from(Status::NullPointer.code()));
        let misaligned = (ptr::dangling_mut::<u64>() as usize + 1) as *mut zonealloc_error_info;
        // SAFETY: a misaligned pointer is refused before any write.
        let rc = unsafe { zonealloc_last_error(misaligned) };
        assert_eq!(rc, Status::InvalidArgument.code());
        assert_eq!(last_info().code, Status::FreeAlreadyFree.code());
    })
    .join()
    .unwrap();
}

// -----------------------------------------------------------------------------
// Arena
// -----------------------------------------------------------------------------

#[test]
fn arena_frames_have_addresses_and_abstract_ones_do_not() {
    // SAFETY: `p` points to a local.
    let (rc, p) = out(|p| unsafe { zonealloc_create_bytes(16 << 20, ZONEALLOC_BACKING_ARENA, p) });
    ok(rc);
    let za = Za(p);
    let pfn = za.alloc(GFP_KERNEL | GFP_ZERO, 1).unwrap();
    let addr = |pfn| {
        // SAFETY: a live handle; `a` points to a local.
        out(|a: *mut *mut c_void| unsafe { zonealloc_page_address(za.0, pfn, a) })
    };
    let (rc, a) = addr(pfn);
    ok(rc);
    let (_, b) = addr(pfn + 1);
    assert_eq!(b as usize - a as usize, 4096);
    // SAFETY: the block's two pages are ours, mapped and writable.
    let bytes = unsafe { std::slice::from_raw_parts_mut(a.cast::<u8>(), 8192) };
    assert!(bytes.iter().all(|&x| x == 0), "GFP_ZERO");
    bytes.fill(0x5a);
    ok(za.free(pfn, 1));
    assert_eq!(addr(1 << 30).0, Status::FreeOutOfRange.code());
    let frames = Za::bytes(16 << 20);
    // SAFETY: a live handle; `a` points to a local.
    let (rc, _) = out(|a: *mut *mut c_void| unsafe { zonealloc_page_address(frames.0, 0, a) });
    assert_eq!(rc, Status::NoAddress.code());
    za.assert_quiet_and_whole();
}

// -----------------------------------------------------------------------------
// Threads
// -----------------------------------------------------------------------------

#[test]
fn racing_frees_of_one_block_have_exactly_one_winner() {
    const ROUNDS: usize = 2000;
    let za = Za::bytes(64 << 20);
    let barrier = Barrier::new(2);
    let mut wins = 0;
    for round in 0..ROUNDS {
        let order = (round % 4) as u32;
        let p = za.alloc(GFP_KERNEL, order).unwrap();
        let (a, b) = std::thread::scope(|s| {
            let racer = || {
                barrier.wait();
                za.free(p, order)
            };
            let a = s.spawn(racer);
            let b = s.spawn(racer);
            (a.join().unwrap(), b.join().unwrap())
        });
        let mut both = [a, b];
        both.sort_unstable();
        assert_eq!(both, [Status::FreeAlreadyFree.code(), 0], "round {round}");
        wins += 1;
    }
    za.assert_quiet_and_whole();
    println!("{ROUNDS} rounds of two racing frees: {wins} with exactly one winner, 0 violations");
}
