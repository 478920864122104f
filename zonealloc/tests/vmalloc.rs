//! vmalloc: the augmented free-space tree against a naive model, vmalloc/vfree across
//! the order boundaries on abstract frames and on a mapped memfd arena, mapped
//! contents, bad frees, vmap, vm_map_ram, and threads.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;

use proptest::prelude::*;
use zonealloc::*;

const PAGE: usize = 4096;

// =============================================================================
// The free-space tree against a sorted-vector model
// =============================================================================

/// The obvious implementation: sorted, merged free areas, linear scans.
#[derive(Clone, Debug, Default)]
struct Model {
    free: Vec<(u64, u64)>,
}

impl Model {
    fn find(&self, size: u64, align: u64) -> Option<usize> {
        let need = size.checked_add(align - 1)?;
        self.free.iter().position(|&(_, n)| n >= need)
    }

    fn carve(&mut self, i: usize, at: u64, size: u64) {
        let (s, n) = self.free[i];
        let mut parts = Vec::new();
        if at > s {
            parts.push((s, at - s));
        }
        if at + size < s + n {
            parts.push((at + size, s + n - at - size));
        }
        self.free.splice(i..=i, parts);
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        if size == 0 {
            return None;
        }
        let i = self.find(size, align)?;
        let at = self.free[i].0.next_multiple_of(align);
        self.carve(i, at, size);
        Some(at)
    }

    fn alloc_at(&mut self, start: u64, size: u64) -> bool {
        if size == 0 {
            return false;
        }
        match self
            .free
            .iter()
            .position(|&(s, n)| s <= start && start + size <= s + n)
        {
            Some(i) => {
                self.carve(i, start, size);
                true
            }
            None => false,
        }
    }

    fn free(&mut self, start: u64, size: u64) -> bool {
        if size == 0 || start.checked_add(size).is_none() {
            return false;
        }
        if self
            .free
            .iter()
            .any(|&(s, n)| s < start + size && start < s + n)
        {
            return false;
        }
        let i = self.free.partition_point(|&(s, _)| s < start);
        self.free.insert(i, (start, size));
        // Merge with the next, then with the previous.
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
        true
    }
}

#[derive(Clone, Debug)]
enum TreeOp {
    Alloc { size: u64, align_log: u32 },
    FreeLive(usize),
    FreeRange { start: u64, size: u64 },
    AllocAt { start: u64, size: u64 },
    Find { size: u64, align_log: u32 },
}

fn tree_op() -> impl Strategy<Value = TreeOp> {
    prop_oneof![
        4 => (1u64..48, 0u32..6).prop_map(|(size, align_log)| TreeOp::Alloc { size, align_log }),
        4 => any::<usize>().prop_map(TreeOp::FreeLive),
        1 => (0u64..700, 0u64..40).prop_map(|(start, size)| TreeOp::FreeRange { start, size }),
        1 => (0u64..700, 0u64..40).prop_map(|(start, size)| TreeOp::AllocAt { start, size }),
        1 => (1u64..200, 0u32..8).prop_map(|(size, align_log)| TreeOp::Find { size, align_log }),
    ]
}

#[track_caller]
fn same(tree: &FreeAreaTree, model: &Model) {
    tree.check_invariants().unwrap();
    assert_eq!(tree.iter().collect::<Vec<_>>(), model.free);
    assert_eq!(tree.len(), model.free.len());
    assert_eq!(
        tree.free_units(),
        model.free.iter().map(|a| a.1).sum::<u64>()
    );
    assert_eq!(
        tree.largest(),
        model.free.iter().map(|a| a.1).max().unwrap_or(0)
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every operation gives the model's answer and leaves the model's free list.
    #[test]
    fn tree_matches_model(base in 0u64..64, size in 1u64..600, ops in prop::collection::vec(tree_op(), 1..200)) {
        let mut tree = FreeAreaTree::with_range(base, size);
        let mut model = Model::default();
        model.free(base, size);
        let mut live: Vec<(u64, u64)> = Vec::new();
        same(&tree, &model);
        for op in ops {
            match op {
                TreeOp::Alloc { size, align_log } => {
                    let align = 1 << align_log;
                    let got = tree.alloc(size, align);
                    prop_assert_eq!(got, model.alloc(size, align));
                    if let Some(at) = got {
                        prop_assert_eq!(at % align, 0);
                        live.push((at, size));
                    }
                }
                TreeOp::FreeLive(i) => {
                    if live.is_empty() {
                        continue;
                    }
                    let (s, n) = live.swap_remove(i % live.len());
                    let ok = tree.free(s, n).is_ok();
                    prop_assert_eq!(ok, model.free(s, n));
                }
                TreeOp::FreeRange { start, size } => {
                    let got = tree.free(start, size);
                    prop_assert_eq!(got.is_ok(), model.free(start, size));
                    if size == 0 {
                        prop_assert_eq!(got, Err(TreeError::ZeroSize));
                    }
                }
                TreeOp::AllocAt { start, size } => {
                    prop_assert_eq!(tree.alloc_at(start, size), model.alloc_at(start, size));
                }
                TreeOp::Find { size, align_log } => {
                    let align = 1 << align_log;
                    let want = model.find(size, align).map(|i| model.free[i]);
                    prop_assert_eq!(tree.find_lowest_match(size, align), want);
                }
            }
            same(&tree, &model);
        }
        // Give everything back: the range is one area again (for what was not
        // double-freed or carved by AllocAt).
        for (s, n) in live {
            prop_assert_eq!(tree.free(s, n).is_ok(), model.free(s, n));
        }
        same(&tree, &model);
    }
}

#[test]
fn tree_many_fragments_stay_balanced() {
    let n = 20_000u64;
    let mut t = FreeAreaTree::with_range(0, 4 * n);
    let starts: Vec<u64> = (0..n).map(|_| t.alloc(2, 1).unwrap()).collect();
    assert_eq!(starts, (0..n).map(|i| 2 * i).collect::<Vec<_>>());
    // Free every other allocation: n/2 separate holes of 2, plus the tail.
    for &s in starts.iter().step_by(2) {
        t.free(s, 2).unwrap();
    }
    assert_eq!(t.len() as u64, n / 2 + 1);
    let checks = t.check_invariants().unwrap();
    assert!(checks > 5 * n / 2);
    // Lowest fit of 2 is the first hole; of 3, the tail.
    assert_eq!(t.find_lowest_match(2, 1), Some((0, 2)));
    assert_eq!(t.find_lowest_match(3, 1), Some((2 * n, 2 * n)));
    // Alignment slack: size 1 at alignment 4 needs an area of 4.
    assert_eq!(t.find_lowest_match(1, 4), Some((2 * n, 2 * n)));
    for &s in starts.iter().skip(1).step_by(2) {
        t.free(s, 2).unwrap();
    }
    t.check_invariants().unwrap();
    assert_eq!(t.iter().collect::<Vec<_>>(), [(0, 4 * n)]);
}

#[test]
fn tree_edges_and_errors() {
    let mut t = FreeAreaTree::with_range(u64::MAX - 100, 100);
    assert_eq!(t.free(u64::MAX - 10, 20), Err(TreeError::Overflow));
    assert_eq!(t.free(5, 0), Err(TreeError::ZeroSize));
    assert!(matches!(
        t.free(u64::MAX - 50, 10),
        Err(TreeError::Overlap { .. })
    ));
    assert_eq!(t.alloc(101, 1), None);
    assert_eq!(t.alloc(0, 1), None);
    assert_eq!(t.alloc(1, 3), None); // not a power of two
    assert_eq!(t.alloc(100, 1), Some(u64::MAX - 100));
    assert!(t.is_empty());
    assert_eq!(t.area_containing(u64::MAX - 1), None);
    t.free(u64::MAX - 100, 100).unwrap();
    assert_eq!(t.area_containing(u64::MAX - 1), Some((u64::MAX - 100, 100)));
    t.check_invariants().unwrap();
    assert_eq!(FreeAreaTree::new().largest(), 0);
}

// =============================================================================
// Set-ups
// =============================================================================

const ZONE_BYTES: u64 = 64 << 20;

fn config(nr_cpus: usize) -> Config {
    Config {
        nr_cpus,
        ..Config::with_bytes(ZONE_BYTES)
    }
}

fn abstract_za() -> ZoneAllocator {
    ZoneAllocator::new(config(2)).unwrap()
}

fn memfd_za(nr_cpus: usize) -> ZoneAllocator<Arena> {
    let opts = ArenaOptions {
        memfd: true,
        ..ArenaOptions::default()
    };
    ZoneAllocator::with_arena(config(nr_cpus), opts).unwrap()
}

#[path = "support/settled.rs"]
mod support;
use support::settled;

#[track_caller]
fn checked<B: Backend>(vm: &VmallocSpace<'_, B>) -> VmallocReport {
    vm.allocator().check_invariants().unwrap();
    vm.check_invariants().unwrap()
}

/// The vmalloc configurations every size test runs over.
fn vm_configs() -> Vec<VmallocConfig> {
    let mut v = Vec::new();
    for vfree_mode in [VfreeMode::Bulk, VfreeMode::PerPage] {
        for high_order_first in [true, false] {
            for guard_pages in [true, false] {
                v.push(VmallocConfig {
                    vfree_mode,
                    high_order_first,
                    guard_pages,
                    ..VmallocConfig::default()
                });
            }
        }
    }
    v
}

/// Sizes across the order boundaries, in pages.
const SIZES: [usize; 8] = [1, 2, 3, 511, 512, 513, 1024, 1025];

#[track_caller]
fn check_area<B: Backend>(vm: &VmallocSpace<'_, B>, area: &VmArea, nr: usize) {
    let za = vm.allocator();
    assert_eq!(area.nr_pages(), nr);
    assert_eq!(area.size_bytes(), nr * PAGE);
    assert_eq!(area.kind(), AreaKind::Vmalloc);
    assert_eq!(area.is_mapped(), vm.is_mapped());
    assert_eq!(area.addr() % PAGE, 0);
    let distinct: HashSet<_> = area.pages().iter().collect();
    assert_eq!(distinct.len(), nr, "a frame appears twice");
    for &p in area.pages() {
        assert_eq!(
            za.frame_state(p),
            Some(FrameState::Allocated {
                order: Order(0),
                refcount: 1
            })
        );
    }
    assert_eq!(vm.area(area.addr()).as_ref(), Some(area));
    for i in [0, nr / 2, nr - 1] {
        assert_eq!(
            vm.vmalloc_to_pfn(area.addr() + i * PAGE + 7),
            Some(area.pages()[i])
        );
    }
    if vm.config().guard_pages {
        assert_eq!(vm.vmalloc_to_pfn(area.addr() + nr * PAGE), None);
    }
}

/// High orders first on a fresh allocator: the array is whole aligned blocks,
/// largest first, each in ascending order.
#[track_caller]
fn check_high_order_layout(area: &VmArea) {
    let pages = area.pages();
    let mut i = 0;
    let mut remaining = pages.len();
    while remaining > 1 {
        let order = remaining.ilog2().min(10);
        let n = 1usize << order;
        let first = pages[i];
        assert!(
            first.is_aligned(Order(order as u8)),
            "{first} order {order}"
        );
        for k in 0..n {
            assert_eq!(pages[i + k], first.add(k as u64));
        }
        i += n;
        remaining -= n;
    }
}

// =============================================================================
// vmalloc / vfree across sizes, both backends
// =============================================================================

fn sizes_round_trip<B: Backend>(za: &ZoneAllocator<B>) {
    for cfg in vm_configs() {
        let vm = VmallocSpace::new(za, cfg).unwrap();
        assert!(!vm.is_mapped());
        run_sizes(&vm);
        drop(vm);
        settled(za);
    }
}

fn run_sizes<B: Backend>(vm: &VmallocSpace<'_, B>) {
    let za = vm.allocator();
    // One at a time.
    for nr in SIZES {
        settled(za);
        let area = vm.vmalloc(nr * PAGE).unwrap();
        check_area(vm, &area, nr);
        if vm.config().high_order_first {
            check_high_order_layout(&area);
        }
        let r = checked(vm);
        assert_eq!(r.vmalloc_pages, nr as u64);
        vm.vfree(area.addr()).unwrap();
        let r = checked(vm);
        assert_eq!((r.vmalloc_pages, r.busy_areas, r.free_areas), (0, 0, 1));
    }
    // All live together, odd byte sizes, freed in a scrambled order.
    let mut areas = Vec::new();
    for nr in SIZES {
        let area = vm.vmalloc(nr * PAGE - 100).unwrap();
        check_area(vm, &area, nr);
        areas.push(area);
        checked(vm);
    }
    assert_eq!(vm.nr_vmalloc_pages(), SIZES.iter().sum::<usize>() as u64);
    // Areas never overlap (guard included).
    let mut spans: Vec<(usize, usize)> = areas
        .iter()
        .map(|a| (a.addr(), a.addr() + a.size_bytes()))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        let gap = if vm.config().guard_pages { PAGE } else { 0 };
        assert!(w[0].1 + gap <= w[1].0);
    }
    for i in [3, 0, 7, 1, 6, 2, 5, 4] {
        vm.vfree(areas[i].addr()).unwrap();
        checked(vm);
    }
    assert_eq!(vm.areas(), Vec::new());
    let (_, size) = vm.range();
    assert_eq!(vm.free_space(), (size as u64, size as u64));
}

#[test]
fn sizes_across_order_boundaries_abstract() {
    let za = abstract_za();
    sizes_round_trip(&za);
}

#[test]
fn sizes_across_order_boundaries_arena_unmapped() {
    let za = ZoneAllocator::with_arena(config(2), ArenaOptions::default()).unwrap();
    sizes_round_trip(&za);
}

#[test]
fn sizes_across_order_boundaries_memfd_mapped() {
    let za = memfd_za(2);
    for cfg in vm_configs() {
        let vm = VmallocSpace::new_mapped(&za, cfg).unwrap();
        assert!(vm.is_mapped());
        run_sizes(&vm);
        drop(vm);
        settled(&za);
    }
}

// =============================================================================
// Mapped contents
// =============================================================================

/// Writes a per-page pattern through the vmalloc address.
fn write_through_area(area: &VmArea, tag: u8) {
    let p = area.as_ptr().unwrap().as_ptr();
    for i in 0..area.nr_pages() {
        let v = tag ^ (i as u8);
        // SAFETY: the area is mapped and `nr_pages` pages long; this test owns it.
        unsafe {
            p.add(i * PAGE).write(v);
            p.add(i * PAGE + PAGE - 1).write(!v);
        }
    }
}

/// Reads the pattern back through each frame's own address.
#[track_caller]
fn check_frames(za: &ZoneAllocator<Arena>, area: &VmArea, tag: u8) {
    for (i, &pfn) in area.pages().iter().enumerate() {
        let q = za.page_address(pfn).unwrap().as_ptr();
        let v = tag ^ (i as u8);
        // SAFETY: `pfn` is one of the area's frames, allocated and owned by it.
        let (a, b) = unsafe { (q.read(), q.add(PAGE - 1).read()) };
        assert_eq!((a, b), (v, !v), "page {i} (pfn {pfn})");
    }
}

#[test]
fn writes_through_vmalloc_land_in_the_frames() {
    let za = memfd_za(2);
    let vm = VmallocSpace::new_mapped(&za, VmallocConfig::default()).unwrap();
    // Fragment memory a little so arrays mix runs and single pages.
    let holes: Vec<Pfn> = (0..64)
        .map(|_| za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap())
        .collect();
    for (k, p) in holes.iter().enumerate() {
        if k % 2 == 0 {
            za.free_pages(*p, Order(0)).unwrap();
        }
    }
    let mut areas = Vec::new();
    for (k, nr) in SIZES.into_iter().enumerate() {
        let area = vm.vmalloc(nr * PAGE).unwrap();
        write_through_area(&area, k as u8);
        areas.push(area);
    }
    for (k, area) in areas.iter().enumerate() {
        check_frames(&za, area, k as u8);
    }
    // And the other way: write a frame, read through the area.
    let a = &areas[5];
    let q = za.page_address(a.pages()[300]).unwrap().as_ptr();
    // SAFETY: the frame belongs to the live area `a`.
    unsafe { q.add(17).write(0xab) };
    // SAFETY: the area is mapped; page 300 byte 17 is inside it.
    assert_eq!(
        unsafe { a.as_ptr().unwrap().as_ptr().add(300 * PAGE + 17).read() },
        0xab
    );
    for area in &areas {
        vm.vfree(area.addr()).unwrap();
    }
    checked(&vm);
    for (k, p) in holes.iter().enumerate() {
        if k % 2 == 1 {
            za.free_pages(*p, Order(0)).unwrap();
        }
    }
    drop(vm);
    settled(&za);
}

#[test]
fn vzalloc_is_zero_after_reuse() {
    let za = memfd_za(1);
    let vm = VmallocSpace::new_mapped(&za, VmallocConfig::default()).unwrap();
    for round in 0..3u8 {
        let dirty = vm.vmalloc(40 * PAGE).unwrap();
        let p = dirty.as_ptr().unwrap().as_ptr();
        // SAFETY: mapped, 40 pages, owned here.
        unsafe { core::ptr::write_bytes(p, 0x5a ^ round, 40 * PAGE) };
        vm.vfree(dirty.addr()).unwrap();
        let clean = vm.vzalloc(40 * PAGE).unwrap();
        let p = clean.as_ptr().unwrap().as_ptr();
        // SAFETY: mapped, 40 pages, owned here.
        let bytes = unsafe { core::slice::from_raw_parts(p, 40 * PAGE) };
        assert!(bytes.iter().all(|&b| b == 0));
        vm.vfree(clean.addr()).unwrap();
    }
    drop(vm);
    settled(&za);
}

#[test]
fn mapping_needs_a_memfd_arena() {
    let za = ZoneAllocator::with_arena(config(1), ArenaOptions::default()).unwrap();
    assert!(za.backend().memfd().is_none());
    assert_eq!(
        VmallocSpace::new_mapped(&za, VmallocConfig::default()).unwrap_err(),
        VmallocError::NotMappable
    );
    let za = memfd_za(1);
    assert!(za.backend().memfd().is_some());
}

// =============================================================================
// Huge vmalloc, vfree modes
// =============================================================================

#[test]
fn vmalloc_huge_uses_pageblocks_and_falls_back() {
    let za = abstract_za();
    let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    let h = vm.vmalloc_huge(600 * PAGE).unwrap();
    assert_eq!(h.page_order(), Order(9));
    assert_eq!(h.nr_pages(), 1024);
    assert_eq!(h.addr() % (512 * PAGE), 0);
    for run in h.pages().chunks(512) {
        assert!(run[0].is_aligned(Order(9)));
        assert!(run.windows(2).all(|w| w[1] == w[0].add(1)));
    }
    // Below a pageblock: ordinary small pages.
    let s = vm.vmalloc_huge(100 * PAGE).unwrap();
    assert_eq!((s.page_order(), s.nr_pages()), (Order(0), 100));
    checked(&vm);
    vm.vfree(h.addr()).unwrap();
    vm.vfree(s.addr()).unwrap();
    // Pin one page in every pageblock: no pageblock-order page is left, so the
    // huge attempt fails and the request falls back to small pages.
    let mut held = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::KERNEL | Gfp::NORETRY, Order(0)) {
        held.push(p);
    }
    for &p in &held {
        if p.0 % 512 != 5 {
            za.free_pages(p, Order(0)).unwrap();
        }
    }
    let f = vm.vmalloc_huge(512 * PAGE).unwrap();
    assert_eq!((f.page_order(), f.nr_pages()), (Order(0), 512));
    checked(&vm);
    vm.vfree(f.addr()).unwrap();
    for &p in &held {
        if p.0 % 512 == 5 {
            za.free_pages(p, Order(0)).unwrap();
        }
    }
    drop(vm);
    settled(&za);
}

#[test]
fn bulk_vfree_returns_whole_blocks_per_page_returns_pages() {
    for (mode, whole) in [(VfreeMode::Bulk, true), (VfreeMode::PerPage, false)] {
        let za = abstract_za();
        let cfg = VmallocConfig {
            vfree_mode: mode,
            ..VmallocConfig::default()
        };
        let vm = VmallocSpace::new(&za, cfg).unwrap();
        settled(&za);
        let a = vm.vmalloc(512 * PAGE).unwrap();
        let head = a.pages()[0];
        assert!(head.is_aligned(Order(9)));
        let before = za.nr_free_pages() + za.nr_pcp_pages();
        vm.vfree(a.addr()).unwrap();
        assert_eq!(za.nr_free_pages() + za.nr_pcp_pages(), before + 512);
        let st = za.frame_state(head).unwrap();
        let big = matches!(
            st,
            FrameState::PerCpu { order: Order(9) } | FrameState::Free { order: Order(9..) }
        );
        assert_eq!(big, whole, "{mode:?}: head is {st:?}");
        checked(&vm);
        drop(vm);
        settled(&za);
    }
}

// =============================================================================
// Bad frees and unmaps change nothing
// =============================================================================

/// Everything observable about the space and its allocator.
fn snapshot<B: Backend>(vm: &VmallocSpace<'_, B>) -> (u64, Vec<VmArea>, (u64, u64), String) {
    (
        vm.allocator().state_digest(),
        vm.areas(),
        vm.free_space(),
        vm.vmallocinfo(),
    )
}

#[test]
fn bad_vfree_and_vunmap_are_refused_and_change_nothing() {
    let za = abstract_za();
    let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    let v = vm.vmalloc(5 * PAGE).unwrap();
    let mine = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    let m = vm.vmap(&[mine]).unwrap();
    let r = vm.vm_map_ram(&[mine]).unwrap();
    let before = snapshot(&vm);
    let (start, size) = vm.range();
    use VmallocError::*;
    let cases: Vec<(Result<(), VmallocError>, VmallocError)> = vec![
        (vm.vfree(v.addr() + PAGE), UnknownAddress(v.addr() + PAGE)),
        (vm.vfree(v.addr() + 1), UnknownAddress(v.addr() + 1)),
        (vm.vfree(0), UnknownAddress(0)),
        (vm.vfree(start + size), UnknownAddress(start + size)),
        (vm.vfree(start - PAGE), UnknownAddress(start - PAGE)),
        (
            vm.vfree(m.addr()),
            WrongKind {
                addr: m.addr(),
                kind: AreaKind::Vmap,
            },
        ),
        (
            vm.vunmap(v.addr()),
            WrongKind {
                addr: v.addr(),
                kind: AreaKind::Vmalloc,
            },
        ),
        (vm.vunmap(m.addr() + PAGE), UnknownAddress(m.addr() + PAGE)),
        (
            vm.vm_unmap_ram(r, 2),
            WrongCount {
                addr: r,
                expected: 1,
                given: 2,
            },
        ),
        (vm.vm_unmap_ram(r + PAGE, 1), UnknownAddress(r + PAGE)),
        (vm.vm_unmap_ram(r, 0), ZeroSize),
        (
            vm.vm_unmap_ram(v.addr(), 1),
            WrongKind {
                addr: v.addr(),
                kind: AreaKind::Vmalloc,
            },
        ),
        (
            vm.vm_unmap_ram(v.addr(), 100),
            WrongKind {
                addr: v.addr(),
                kind: AreaKind::Vmalloc,
            },
        ),
    ];
    for (k, (got, want)) in cases.into_iter().enumerate() {
        assert_eq!(got, Err(want), "case {k}");
        assert_eq!(snapshot(&vm), before, "case {k} changed something");
    }
    // vfree of a vm_map_ram block address.
    let block = vm
        .areas()
        .into_iter()
        .find(|a| a.kind() == AreaKind::VmapBlock)
        .unwrap();
    assert_eq!(
        vm.vfree(block.addr()),
        Err(WrongKind {
            addr: block.addr(),
            kind: AreaKind::VmapBlock
        })
    );
    // Refused allocations.
    assert_eq!(vm.vmalloc(0).unwrap_err(), ZeroSize);
    assert_eq!(vm.vzalloc(0).unwrap_err(), ZeroSize);
    assert_eq!(
        vm.vmalloc_align(PAGE, 3 * PAGE).unwrap_err(),
        InvalidAlign(3 * PAGE)
    );
    assert!(matches!(
        vm.vmalloc(ZONE_BYTES as usize * 2),
        Err(TooLarge { .. })
    ));
    assert_eq!(vm.vmap(&[]).unwrap_err(), ZeroSize);
    assert_eq!(vm.vm_map_ram(&[]).unwrap_err(), ZeroSize);
    assert_eq!(vm.vmap(&[Pfn(1 << 40)]).unwrap_err(), BadPage(Pfn(1 << 40)));
    assert_eq!(snapshot(&vm), before);
    // Legitimate frees, then each a second time.
    vm.vfree(v.addr()).unwrap();
    assert_eq!(vm.vfree(v.addr()), Err(UnknownAddress(v.addr())));
    vm.vunmap(m.addr()).unwrap();
    assert_eq!(vm.vunmap(m.addr()), Err(UnknownAddress(m.addr())));
    vm.vm_unmap_ram(r, 1).unwrap();
    assert_eq!(vm.vm_unmap_ram(r, 1), Err(UnknownAddress(r)));
    checked(&vm);
    za.free_pages(mine, Order(0)).unwrap();
    drop(vm);
    settled(&za);
}

#[test]
fn frames_cannot_be_freed_behind_vfrees_back() {
    for mode in [VfreeMode::Bulk, VfreeMode::PerPage] {
        let za = abstract_za();
        let cfg = VmallocConfig {
            vfree_mode: mode,
            ..VmallocConfig::default()
        };
        let vm = VmallocSpace::new(&za, cfg).unwrap();
        let a = vm.vmalloc(8 * PAGE).unwrap();
        let stolen = a.pages()[3];
        assert_eq!(
            za.free_pages(stolen, Order(0)),
            Err(FreeError::Busy(stolen))
        );
        assert_eq!(vm.vfree(a.addr()), Ok(()));
        // The area is gone and every frame came back.
        assert!(vm.area(a.addr()).is_none());
        checked(&vm);
        drop(vm);
        settled(&za);
    }
}

/// A space of `pages` pages at 1 GiB.
fn small_space(pages: usize) -> VmallocConfig {
    VmallocConfig {
        start: 1 << 30,
        size_bytes: Some(pages * PAGE),
        ..VmallocConfig::default()
    }
}

#[test]
fn out_of_memory_and_out_of_address_space_give_everything_back() {
    let za = abstract_za();
    let vm = VmallocSpace::new(&za, small_space(16)).unwrap();
    let before = snapshot(&vm);
    // 16 pages plus a guard do not fit in 16.
    assert_eq!(
        vm.vmalloc(16 * PAGE).unwrap_err(),
        VmallocError::NoVirtualSpace { nr_pages: 17 }
    );
    assert_eq!(snapshot(&vm), before);
    let a = vm.vmalloc(15 * PAGE).unwrap();
    assert_eq!(a.addr(), 1 << 30);
    vm.vfree(a.addr()).unwrap();
    drop(vm);
    // Memory: more than is free, but not more than is managed.
    let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    let hog = vm.vmalloc(8000 * PAGE).unwrap();
    let e = vm.vmalloc(9000 * PAGE).unwrap_err();
    assert_eq!(e, VmallocError::NoMemory { nr_pages: 9000 });
    checked(&vm);
    vm.vfree(hog.addr()).unwrap();
    drop(vm);
    settled(&za);
}

#[test]
fn dropping_the_space_frees_live_vmalloc_areas_only() {
    let za = abstract_za();
    let mine = za.alloc_pages(Gfp::KERNEL, Order(1)).unwrap();
    {
        let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
        vm.vmalloc(700 * PAGE).unwrap();
        vm.vmalloc(3 * PAGE).unwrap();
        vm.vmap(&[mine, mine.add(1)]).unwrap();
    }
    assert_eq!(
        za.frame_state(mine),
        Some(FrameState::Allocated {
            order: Order(1),
            refcount: 1
        })
    );
    za.free_pages(mine, Order(1)).unwrap();
    settled(&za);
}

// =============================================================================
// vmap of a caller's page array
// =============================================================================

fn scattered_pages<B: Backend>(za: &ZoneAllocator<B>, n: usize) -> (Vec<Pfn>, Vec<Pfn>) {
    let all: Vec<Pfn> = (0..2 * n)
        .map(|_| za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap())
        .collect();
    // Keep every other page, in reverse order: no two entries consecutive.
    let keep: Vec<Pfn> = all.iter().step_by(2).rev().copied().collect();
    let spare: Vec<Pfn> = all.iter().skip(1).step_by(2).copied().collect();
    (keep, spare)
}

#[test]
fn vmap_of_a_user_page_array_abstract() {
    let za = abstract_za();
    let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    let (pages, spare) = scattered_pages(&za, 50);
    let a = vm.vmap(&pages).unwrap();
    assert_eq!(a.kind(), AreaKind::Vmap);
    assert_eq!(a.pages(), &pages[..]);
    for (i, &p) in pages.iter().enumerate() {
        assert_eq!(vm.vmalloc_to_pfn(a.addr() + i * PAGE), Some(p));
    }
    assert_eq!(vm.nr_vmalloc_pages(), 0);
    checked(&vm);
    vm.vunmap(a.addr()).unwrap();
    // The frames are still the caller's.
    for &p in pages.iter().chain(&spare) {
        za.free_pages(p, Order(0)).unwrap();
    }
    checked(&vm);
    drop(vm);
    settled(&za);
}

#[test]
fn vmap_of_a_user_page_array_mapped() {
    let za = memfd_za(2);
    let vm = VmallocSpace::new_mapped(&za, VmallocConfig::default()).unwrap();
    let (pages, spare) = scattered_pages(&za, 40);
    // Also a run of consecutive frames, and the same frame twice (legal: an alias).
    let run = za.alloc_pages(Gfp::KERNEL, Order(3)).unwrap();
    let mut array = pages.clone();
    array.extend((0..8).map(|i| run.add(i)));
    array.push(pages[0]);
    for (i, &p) in array.iter().enumerate().take(48) {
        let q = za.page_address(p).unwrap().as_ptr();
        // SAFETY: `p` is a frame this test allocated.
        unsafe { q.add(100).write(i as u8 + 1) };
    }
    let a = vm.vmap(&array).unwrap();
    assert!(a.is_mapped());
    let base = a.as_ptr().unwrap().as_ptr();
    for i in 0..48 {
        // SAFETY: the mapping is live and 49 pages long.
        assert_eq!(unsafe { base.add(i * PAGE + 100).read() }, i as u8 + 1);
    }
    // The last page aliases the first.
    // SAFETY: as above.
    unsafe { base.add(48 * PAGE + 5).write(0xee) };
    // SAFETY: as above.
    assert_eq!(unsafe { base.add(5).read() }, 0xee);
    vm.vunmap(a.addr()).unwrap();
    // Frames keep their contents after vunmap.
    let q = za.page_address(pages[0]).unwrap().as_ptr();
    // SAFETY: still this test's frame.
    assert_eq!(unsafe { q.add(5).read() }, 0xee);
    for &p in pages.iter().chain(&spare) {
        za.free_pages(p, Order(0)).unwrap();
    }
    za.free_pages(run, Order(3)).unwrap();
    checked(&vm);
    drop(vm);
    settled(&za);
}

// =============================================================================
// vm_map_ram
// =============================================================================

fn vm_map_ram_cycle<B: Backend>(vm: &VmallocSpace<'_, B>) {
    let za = vm.allocator();
    let run = za.alloc_pages(Gfp::KERNEL, Order(7)).unwrap();
    let pages: Vec<Pfn> = (0..128).map(|i| run.add(i)).collect();
    // Enough small mappings to fill and retire several blocks.
    let block = vm.vmap_block_pages();
    let mut live = Vec::new();
    let mut used = 0;
    for k in 0..block {
        let n = [1, 2, 3, 8, 5][k % 5];
        let a = vm.vm_map_ram(&pages[..n]).unwrap();
        used += n.next_power_of_two();
        live.push((a, n));
    }
    assert!(used > 4 * block);
    let r = checked(vm);
    assert!(r.ram_blocks >= 3, "{r:?}");
    if vm.is_mapped() {
        let q = za.page_address(pages[2]).unwrap().as_ptr();
        // SAFETY: the frame is this test's.
        unsafe { q.write(0x42) };
        for &(a, n) in &live {
            if n >= 3 {
                // SAFETY: the mapping at `a` is live and maps `pages[..n]`.
                assert_eq!(unsafe { (a as *const u8).add(2 * PAGE).read() }, 0x42);
            }
        }
    }
    // A large one gets its own area.
    let big = vm.vm_map_ram(&pages).unwrap();
    assert_eq!(vm.area(big).unwrap().kind(), AreaKind::VmMapRam);
    assert_eq!(vm.vmalloc_to_pfn(big + 100 * PAGE), Some(pages[100]));
    vm.vm_unmap_ram(big, 128).unwrap();
    // Unmap in a scrambled order; retired blocks go back as they empty.
    let mut order: Vec<usize> = (0..live.len()).collect();
    order.sort_by_key(|&i| (i * 7919) % live.len());
    for i in order {
        let (a, n) = live[i];
        vm.vm_unmap_ram(a, n).unwrap();
    }
    let r = checked(vm);
    // Only the current blocks (at most one per CPU, empty) remain.
    assert!(r.ram_blocks <= za.config().nr_cpus as u64);
    assert_eq!(r.busy_areas, r.ram_blocks);
    za.free_pages(run, Order(7)).unwrap();
}

#[test]
fn vm_map_ram_blocks_abstract() {
    let za = abstract_za();
    let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    vm_map_ram_cycle(&vm);
    drop(vm);
    settled(&za);
}

#[test]
fn vm_map_ram_blocks_mapped() {
    let za = memfd_za(2);
    let vm = VmallocSpace::new_mapped(&za, VmallocConfig::default()).unwrap();
    vm_map_ram_cycle(&vm);
    drop(vm);
    settled(&za);
}

// =============================================================================
// Threads
// =============================================================================

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn vmalloc_space_is_send_and_sync() {
    assert_send_sync::<VmallocSpace<'static, AbstractFrames>>();
    assert_send_sync::<VmallocSpace<'static, Arena>>();
    assert_send_sync::<VmArea>();
}

/// Threads vmalloc, write, check and vfree concurrently (plus vmap and
/// vm_map_ram); at the end every frame is back and every structure checks out.
fn concurrent<B: Backend>(vm: &VmallocSpace<'_, B>, za: &ZoneAllocator<B>) {
    const THREADS: usize = 4;
    const ROUNDS: usize = 150;
    let barrier = Barrier::new(THREADS);
    let ops = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (barrier, ops) = (&barrier, &ops);
            s.spawn(move || {
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
                let mut rnd = move |n: usize| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed % n as u64) as usize
                };
                barrier.wait();
                let mut live: Vec<(VmArea, u8)> = Vec::new();
                for round in 0..ROUNDS {
                    let tag = (t * 31 + round) as u8;
                    // At most 4 live areas a thread: 4 x 4 x 513 pages fit in memory.
                    let op = if live.len() >= 4 { 2 } else { rnd(4) };
                    match op {
                        0 | 1 => {
                            let nr = [1, 3, 17, 200, 513][rnd(5)];
                            let a = if rnd(2) == 0 {
                                vm.vmalloc(nr * PAGE)
                            } else {
                                vm.vzalloc(nr * PAGE)
                            }
                            .unwrap();
                            if a.is_mapped() {
                                write_through_area(&a, tag);
                            }
                            live.push((a, tag));
                        }
                        2 => {
                            if !live.is_empty() {
                                let (a, tag) = live.swap_remove(rnd(live.len()));
                                if a.is_mapped() {
                                    let p = a.as_ptr().unwrap().as_ptr();
                                    for i in 0..a.nr_pages() {
                                        // SAFETY: this thread owns the live area.
                                        let v = unsafe { p.add(i * PAGE).read() };
                                        assert_eq!(v, tag ^ i as u8, "another thread wrote here");
                                    }
                                }
                                vm.vfree(a.addr()).unwrap();
                            }
                        }
                        _ => {
                            let p = za.alloc_pages(Gfp::KERNEL, Order(2)).unwrap();
                            let pages: Vec<Pfn> = (0..4).map(|i| p.add(i)).collect();
                            let n = 1 + rnd(4);
                            let a = vm.vm_map_ram(&pages[..n]).unwrap();
                            let m = vm.vmap(&pages).unwrap();
                            vm.vm_unmap_ram(a, n).unwrap();
                            vm.vunmap(m.addr()).unwrap();
                            za.free_pages(p, Order(2)).unwrap();
                        }
                    }
                    ops.fetch_add(1, Ordering::Relaxed);
                }
                for (a, _) in live {
                    vm.vfree(a.addr()).unwrap();
                }
            });
        }
    });
    assert_eq!(ops.load(Ordering::Relaxed), (THREADS * ROUNDS) as u64);
    let r = checked(vm);
    assert_eq!(r.vmalloc_pages, 0);
    assert_eq!(r.busy_areas, r.ram_blocks);
}

#[test]
fn threads_vmalloc_and_vfree_concurrently_abstract() {
    let za = ZoneAllocator::new(config(4)).unwrap();
    for mode in [VfreeMode::Bulk, VfreeMode::PerPage] {
        let cfg = VmallocConfig {
            vfree_mode: mode,
            ..VmallocConfig::default()
        };
        let vm = VmallocSpace::new(&za, cfg).unwrap();
        concurrent(&vm, &za);
        drop(vm);
        settled(&za);
    }
}

#[test]
fn threads_vmalloc_and_vfree_concurrently_mapped() {
    let za = memfd_za(4);
    let vm = VmallocSpace::new_mapped(&za, VmallocConfig::default()).unwrap();
    concurrent(&vm, &za);
    drop(vm);
    settled(&za);
}

/// A `vmalloc` refused for lack of address space takes no page, whichever call
/// took the room before it: the room it checks first is the tree's as the last
/// hold of the KVA lock left it, a `vmap`'s range-first hold included.
#[test]
fn a_full_space_refuses_without_touching_a_page() {
    let za = abstract_za();
    let vm = VmallocSpace::new(&za, small_space(16)).unwrap();
    let pgalloc = || za.zone_events().iter().map(|e| e.pgalloc).sum::<u64>();
    let a = vm.vmalloc(7 * PAGE).unwrap();
    let (mine, spare) = scattered_pages(&za, 7);
    let m = vm.vmap(&mine).unwrap();
    assert_eq!(m.addr(), (1 << 30) + 8 * PAGE);
    let before = (pgalloc(), snapshot(&vm));
    assert_eq!(
        vm.vmalloc(PAGE).unwrap_err(),
        VmallocError::NoVirtualSpace { nr_pages: 2 }
    );
    assert_eq!((pgalloc(), snapshot(&vm)), before);
    vm.vunmap(m.addr()).unwrap();
    vm.vfree(a.addr()).unwrap();
    drop(vm);
    for p in mine.into_iter().chain(spare) {
        za.free_pages(p, Order(0)).unwrap();
    }
    settled(&za);
}

/// Threads race for a space with room for two 8-page areas. A `vmalloc` that
/// saw room and lost it to another thread after taking its pages (the
/// pages-first path of an unmapped space) gives the pages back and reports
/// `NoVirtualSpace`, as one that saw no room does; every frame is back at the end.
#[test]
fn threads_racing_for_a_full_space_give_everything_back() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 3_000;
    let za = ZoneAllocator::new(config(4)).unwrap();
    for mode in [VfreeMode::Bulk, VfreeMode::PerPage] {
        // Two 8-page areas and their guards, and 6 pages no area fits in.
        let cfg = VmallocConfig {
            vfree_mode: mode,
            ..small_space(24)
        };
        let vm = VmallocSpace::new(&za, cfg).unwrap();
        let (got, refused) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..ROUNDS {
                        match vm.vmalloc(8 * PAGE) {
                            Ok(a) => {
                                got.fetch_add(1, Ordering::Relaxed);
                                assert_eq!(a.nr_pages(), 8);
                                std::thread::yield_now();
                                vm.vfree(a.addr()).unwrap();
                            }
                            Err(e) => {
                                assert_eq!(e, VmallocError::NoVirtualSpace { nr_pages: 9 });
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        let (got, refused) = (got.into_inner(), refused.into_inner());
        assert_eq!(got + refused, (THREADS * ROUNDS) as u64);
        assert!(got > 0, "{mode:?}: no vmalloc succeeded");
        let r = checked(&vm);
        assert_eq!((r.busy_areas, r.vmalloc_pages), (0, 0));
        let whole = 24 * PAGE as u64;
        assert_eq!(
            vm.free_space(),
            (whole, whole),
            "{mode:?}: address space lost"
        );
        drop(vm);
        settled(&za);
    }
}

// =============================================================================
// Fault injection and debug modes
// =============================================================================

#[test]
fn injected_backing_faults_unwind_cleanly() {
    let za = abstract_za();
    for every in [1, 2, 3, 5, 8] {
        for high_order_first in [true, false] {
            let cfg = VmallocConfig {
                high_order_first,
                ..VmallocConfig::default()
            };
            let vm = VmallocSpace::new(&za, cfg).unwrap();
            za.inject_faults(FaultSite::VmallocBacking, every);
            let before = za.faults_injected(FaultSite::VmallocBacking);
            let mut ok = 0;
            for nr in SIZES.into_iter().chain([100, 250, 300]) {
                match vm.vmalloc(nr * PAGE) {
                    Ok(a) => {
                        check_area(&vm, &a, nr);
                        checked(&vm);
                        vm.vfree(a.addr()).unwrap();
                        ok += 1;
                    }
                    Err(e) => assert_eq!(
                        e,
                        VmallocError::NoMemory {
                            nr_pages: nr as u64
                        }
                    ),
                }
                let r = checked(&vm);
                assert_eq!((r.vmalloc_pages, r.busy_areas), (0, 0));
            }
            za.inject_faults(FaultSite::VmallocBacking, 0);
            assert!(za.faults_injected(FaultSite::VmallocBacking) > before);
            if every == 1 {
                assert_eq!(ok, 0);
            } else if every >= 5 {
                assert!(ok > 0, "every {every}: nothing succeeded");
            }
            drop(vm);
            settled(&za);
        }
    }
}

#[test]
fn poisoned_memfd_arena_sees_no_use_after_vfree() {
    let opts = ArenaOptions {
        memfd: true,
        ..ArenaOptions::default()
    };
    let cfg = Config {
        debug: DebugConfig {
            poison: true,
            ..DebugConfig::default()
        },
        ..config(2)
    };
    let za = ZoneAllocator::with_arena(cfg, opts).unwrap();
    let vm = VmallocSpace::new_mapped(&za, VmallocConfig::default()).unwrap();
    for round in 0..4u8 {
        let areas: Vec<VmArea> = SIZES
            .iter()
            .map(|&nr| vm.vmalloc(nr * PAGE).unwrap())
            .collect();
        for (k, a) in areas.iter().enumerate() {
            write_through_area(a, round ^ k as u8);
        }
        for (k, a) in areas.iter().enumerate() {
            check_frames(&za, a, round ^ k as u8);
            vm.vfree(a.addr()).unwrap();
        }
        checked(&vm);
    }
    assert_eq!(za.bad_page_reports(), Vec::new());
    drop(vm);
    settled(&za);
}

// =============================================================================
// /proc/vmallocinfo
// =============================================================================

#[test]
fn vmallocinfo_lists_areas_with_guard() {
    let za = abstract_za();
    let cfg = VmallocConfig {
        start: 0x10_0000_0000,
        ..VmallocConfig::default()
    };
    let vm = VmallocSpace::new(&za, cfg).unwrap();
    let a = vm.vmalloc(2 * PAGE).unwrap();
    assert_eq!(
        vm.vmallocinfo(),
        "0x0000001000000000-0x0000001000003000   12288 pages=2 vmalloc\n"
    );
    vm.vfree(a.addr()).unwrap();
    assert_eq!(vm.vmallocinfo(), "");
}

#[test]
fn an_owned_area_frees_itself_and_into_area_hands_it_over() {
    let za = abstract_za();
    let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    let free = za.nr_free_pages() + za.nr_pcp_pages();
    {
        let a = vm.vmalloc_owned(5 * PAGE).unwrap();
        assert_eq!(a.nr_pages(), 5);
        assert!(vm.area(a.addr()).is_some());
    }
    assert_eq!(
        za.nr_free_pages() + za.nr_pcp_pages(),
        free,
        "the drop freed it"
    );
    let kept = vm.vmalloc_owned(2 * PAGE).unwrap().into_area();
    assert!(vm.area(kept.addr()).is_some(), "into_area does not free");
    vm.vfree(kept.addr()).unwrap();
    checked(&vm);
    drop(vm);
    settled(&za);
}
