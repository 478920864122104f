//! Property test: random sequences of `PageBlock` guards, raw frees, page_frag
//! operations, vmalloc areas and movable blocks that compaction moves through an
//! owner who moves, refuses or panics at random, legitimate and not, never give two
//! live writable views of the same memory, never panic, and lose no frame.
//!
//! Every live region (a guard's `bytes_mut()`, a fragment) is filled with its own tag
//! byte when it is made; after every step the regions must be pairwise disjoint by
//! address range and still hold their tags, so an overlap that the address check
//! missed would show up as a clobbered tag. Misuse (a raw free behind a guard, a
//! second guard over one block, a fragment freed once too often, a fragment free
//! inside a guarded block, any raw free of a vmalloc area's page) must be refused
//! with an error. A compaction run whose owner panicked answers `OwnerPanicked`;
//! the blocks it moved before carry their tags to where the owner now has them.

use proptest::prelude::*;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use zonealloc::*;

#[path = "support/induced_panic.rs"]
mod induced;

#[derive(Clone, Debug)]
enum Op {
    AllocBlock(u8),
    DropGuard(usize),
    IntoRaw(usize),
    FreeRaw(usize),
    FromRaw(usize),
    RawFreeOfGuard(usize),
    SecondGuard(usize),
    FragAlloc(usize, u32),
    FragFree(usize),
    FragFreeAgain(usize),
    FragFreeInGuard(usize),
    Drain,
    Vmalloc(u8),
    Vfree(usize),
    RawFreeOfVmalloc(usize, usize),
    MovableAlloc(u8, u8),
    MovableFree(usize),
    Compact(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let i = 0usize..64;
    prop_oneof![
        4 => (0u8..=3).prop_map(Op::AllocBlock),
        2 => i.clone().prop_map(Op::DropGuard),
        1 => i.clone().prop_map(Op::IntoRaw),
        1 => i.clone().prop_map(Op::FreeRaw),
        1 => i.clone().prop_map(Op::FromRaw),
        1 => i.clone().prop_map(Op::RawFreeOfGuard),
        1 => i.clone().prop_map(Op::SecondGuard),
        6 => (1usize..6000, 0u32..=12).prop_map(|(s, a)| Op::FragAlloc(s, a)),
        4 => i.clone().prop_map(Op::FragFree),
        2 => i.clone().prop_map(Op::FragFreeAgain),
        1 => i.clone().prop_map(Op::FragFreeInGuard),
        1 => Just(Op::Drain),
        2 => (1u8..=8).prop_map(Op::Vmalloc),
        1 => i.clone().prop_map(Op::Vfree),
        1 => (i.clone(), i.clone()).prop_map(|(a, p)| Op::RawFreeOfVmalloc(a, p)),
        4 => (0u8..=2, 1u8..=24).prop_map(|(o, n)| Op::MovableAlloc(o, n)),
        2 => i.clone().prop_map(Op::MovableFree),
        1 => any::<u64>().prop_map(Op::Compact),
    ]
}

/// The owner of the movable blocks: head pfn -> (order, tag). Its callback moves
/// a block it holds, refuses, or panics, at random.
struct Owner {
    blocks: Mutex<HashMap<u64, (Order, u8)>>,
    rng: AtomicU64,
}

impl Migrate for Owner {
    fn migrate(&self, m: &Migration<'_>) -> MigrateOutcome {
        let mut x = self.rng.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        x = (x ^ (x >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        match (x >> 40) % 25 {
            0 => induced::induced_panic(),
            1..=4 => MigrateOutcome::Refused,
            _ => {
                let mut b = self.blocks.lock().unwrap();
                let Some(v) = b.remove(&m.source().0) else {
                    return MigrateOutcome::Refused;
                };
                m.copy_contents();
                b.insert(m.target().0, v);
                MigrateOutcome::Moved
            }
        }
    }
}

/// The `len` bytes of frames from `pfn`, in the arena.
fn frames(za: &ZoneAllocator<Arena>, pfn: Pfn, pages: u64) -> &[u8] {
    let p = za.page_address(pfn).unwrap().as_ptr();
    // SAFETY: the arena maps consecutive frames contiguously, and the test owns
    // these frames (a live block or vmalloc page of its own).
    unsafe { std::slice::from_raw_parts(p, (pages as usize) << 12) }
}

/// Fills the frames from `pfn` with `tag`.
fn fill(za: &ZoneAllocator<Arena>, pfn: Pfn, pages: u64, tag: u8) {
    let p = za.page_address(pfn).unwrap().as_ptr();
    // SAFETY: as in `frames`; nothing else writes them.
    unsafe { p.write_bytes(tag, (pages as usize) << 12) };
}

/// A live fragment: address, size, tag, and the head of its block.
struct Frag {
    ptr: NonNull<u8>,
    size: usize,
    tag: u8,
    head: Pfn,
}

struct World<'a> {
    za: &'a ZoneAllocator<Arena>,
    vm: &'a VmallocSpace<'a, Arena>,
    owner: &'a Owner,
    areas: Vec<(VmArea, u8)>,
    guards: Vec<(PageBlock<'a, Arena>, u8)>,
    raws: Vec<(Pfn, Order)>,
    frags: Vec<Frag>,
    /// Fragments freed, with the head their block had.
    freed: Vec<(NonNull<u8>, Pfn)>,
    next_tag: u8,
}

impl<'a> World<'a> {
    fn tag(&mut self) -> u8 {
        self.next_tag = self.next_tag.wrapping_add(1).max(1);
        self.next_tag
    }

    /// Regions disjoint and intact.
    fn check(&self) -> Result<(), TestCaseError> {
        let mut regions: Vec<(usize, usize, u8)> = Vec::new();
        for (g, tag) in &self.guards {
            let b = g.bytes().unwrap();
            prop_assert!(b.iter().all(|x| x == tag), "guard {:?} clobbered", g.pfn());
            regions.push((b.as_ptr() as usize, b.len(), *tag));
        }
        for f in &self.frags {
            // SAFETY: a live fragment's `size` bytes belong to this test.
            let b = unsafe { std::slice::from_raw_parts(f.ptr.as_ptr(), f.size) };
            prop_assert!(b.iter().all(|&x| x == f.tag), "fragment clobbered");
            regions.push((f.ptr.as_ptr() as usize, f.size, f.tag));
        }
        for (a, tag) in &self.areas {
            for &p in a.pages() {
                let b = frames(self.za, p, 1);
                prop_assert!(b.iter().all(|x| x == tag), "vmalloc page {p} clobbered");
                regions.push((b.as_ptr() as usize, b.len(), *tag));
            }
        }
        for (&p, &(order, tag)) in self.owner.blocks.lock().unwrap().iter() {
            let b = frames(self.za, Pfn(p), order.nr_pages());
            prop_assert!(b.iter().all(|&x| x == tag), "movable block {p} clobbered");
            regions.push((b.as_ptr() as usize, b.len(), tag));
        }
        regions.sort_unstable();
        for w in regions.windows(2) {
            prop_assert!(w[0].0 + w[0].1 <= w[1].0, "live regions overlap: {:?}", w);
        }
        Ok(())
    }

    fn outstanding(&self, head: Pfn) -> usize {
        self.frags.iter().filter(|f| f.head == head).count()
    }

    fn step(&mut self, op: Op, cache: &mut PageFragCache<'a, Arena>) -> Result<(), TestCaseError> {
        let za = self.za;
        match op {
            Op::AllocBlock(o) => {
                if let Ok(mut g) = za.alloc_block(Gfp::KERNEL, Order(o)) {
                    let t = self.tag();
                    g.bytes_mut().unwrap().fill(t);
                    self.guards.push((g, t));
                }
            }
            Op::DropGuard(i) if !self.guards.is_empty() => {
                let n = self.guards.len();
                drop(self.guards.swap_remove(i % n));
            }
            Op::IntoRaw(i) if !self.guards.is_empty() => {
                let n = self.guards.len();
                let (g, _) = self.guards.swap_remove(i % n);
                self.raws.push(g.into_raw());
            }
            Op::FreeRaw(i) if !self.raws.is_empty() => {
                let n = self.raws.len();
                let (p, o) = self.raws.swap_remove(i % n);
                prop_assert_eq!(za.free_pages(p, o), Ok(()));
            }
            Op::FromRaw(i) if !self.raws.is_empty() => {
                let n = self.raws.len();
                let (p, o) = self.raws.swap_remove(i % n);
                // SAFETY: the test owns the block's only reference and no pointer
                // to its memory outside the guard.
                let mut g = unsafe { PageBlock::from_raw(za, p, o) }.unwrap();
                let t = self.tag();
                g.bytes_mut().unwrap().fill(t);
                self.guards.push((g, t));
            }
            Op::RawFreeOfGuard(i) if !self.guards.is_empty() => {
                let (p, o) = {
                    let g = &self.guards[i % self.guards.len()].0;
                    (g.pfn(), g.order())
                };
                prop_assert_eq!(za.free_pages(p, o), Err(FreeError::Guarded(p)));
                prop_assert_eq!(za.put_page(p), Err(FreeError::Guarded(p)));
            }
            Op::SecondGuard(i) if !self.guards.is_empty() => {
                let (p, o) = {
                    let g = &self.guards[i % self.guards.len()].0;
                    (g.pfn(), g.order())
                };
                // SAFETY: refused before any guard is made.
                let second = unsafe { PageBlock::from_raw(za, p, o) };
                prop_assert_eq!(second.err(), Some(FreeError::Guarded(p)));
            }
            Op::FragAlloc(size, align_shift) => {
                if let Ok(ptr) = cache.alloc(size, 1 << align_shift) {
                    prop_assert_eq!(ptr.as_ptr() as usize % (1 << align_shift), 0);
                    let t = self.tag();
                    // SAFETY: a fresh fragment's `size` bytes belong to this test.
                    unsafe { ptr.as_ptr().write_bytes(t, size) };
                    let pfn = za.backend().pfn_of_addr(ptr.as_ptr()).unwrap();
                    let head = za.block_of(pfn).unwrap().0;
                    self.frags.push(Frag {
                        ptr,
                        size,
                        tag: t,
                        head,
                    });
                }
            }
            Op::FragFree(i) if !self.frags.is_empty() => {
                let n = self.frags.len();
                let f = self.frags.swap_remove(i % n);
                prop_assert_eq!(za.page_frag_free(f.ptr.as_ptr()), Ok(()));
                self.freed.push((f.ptr, f.head));
            }
            Op::FragFreeAgain(i) if !self.freed.is_empty() => {
                let (ptr, _) = self.freed[i % self.freed.len()];
                // Whatever block holds that address now: a second free is
                // detectable when no fragment of the block is out (while some are,
                // it is indistinguishable from theirs), and must then be refused.
                // A raw block there is a plain page, which page_frag_free may put
                // as Linux's does: leave those alone.
                let pfn = za.backend().pfn_of_addr(ptr.as_ptr()).unwrap();
                let now = za.block_of(pfn).ok().map(|b| b.0);
                let movable = self.owner.blocks.lock().unwrap();
                let raw = now.is_some_and(|h| {
                    self.raws.iter().any(|r| r.0 == h) || movable.contains_key(&h.0)
                });
                drop(movable);
                if !raw && now.is_none_or(|h| self.outstanding(h) == 0) {
                    prop_assert!(za.page_frag_free(ptr.as_ptr()).is_err());
                }
            }
            Op::FragFreeInGuard(i) if !self.guards.is_empty() => {
                let g = &self.guards[i % self.guards.len()].0;
                let p = g.pfn();
                let addr = g.bytes().unwrap().as_ptr();
                prop_assert_eq!(za.page_frag_free(addr), Err(FreeError::Guarded(p)));
            }
            Op::Drain => cache.drain(),
            Op::Vmalloc(n) => {
                if let Ok(a) = self.vm.vmalloc(usize::from(n) << 12) {
                    let t = self.tag();
                    for &p in a.pages() {
                        fill(za, p, 1, t);
                    }
                    self.areas.push((a, t));
                }
            }
            Op::Vfree(i) if !self.areas.is_empty() => {
                let n = self.areas.len();
                let (a, _) = self.areas.swap_remove(i % n);
                prop_assert_eq!(self.vm.vfree(a.addr()), Ok(()));
            }
            Op::RawFreeOfVmalloc(i, j) if !self.areas.is_empty() => {
                let a = &self.areas[i % self.areas.len()].0;
                let p = a.pages()[j % a.pages().len()];
                let busy = Err(FreeError::Busy(p));
                prop_assert_eq!(za.free_pages(p, Order(0)), busy);
                prop_assert_eq!(za.put_page(p).map(|_| ()), busy);
                prop_assert_eq!(za.free_pages_bulk(&[p]), busy);
                let addr = za.page_address(p).unwrap().as_ptr();
                prop_assert_eq!(za.page_frag_free(addr), busy);
            }
            Op::MovableAlloc(o, n) => {
                for _ in 0..n {
                    let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(o)) else {
                        break;
                    };
                    let t = self.tag();
                    fill(za, p, Order(o).nr_pages(), t);
                    self.owner.blocks.lock().unwrap().insert(p.0, (Order(o), t));
                }
            }
            Op::MovableFree(i) => {
                let mut b = self.owner.blocks.lock().unwrap();
                if let Some(&p) = b.keys().nth(i % b.len().max(1)) {
                    let (o, _) = b.remove(&p).unwrap();
                    prop_assert_eq!(za.free_pages(Pfn(p), o), Ok(()));
                }
            }
            Op::Compact(seed) => {
                self.owner.rng.store(seed, Ordering::Relaxed);
                let zone = za.zone_id_of(za.zones().next().unwrap().1).unwrap();
                let r = za.compact_zone(zone, None, self.owner);
                prop_assert!(
                    matches!(r, Ok(_) | Err(CompactError::OwnerPanicked)),
                    "{:?}",
                    r
                );
                prop_assert!(za.check_invariants().is_ok());
            }
            _ => {}
        }
        self.check()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_two_live_views_overlap(
        ops in proptest::collection::vec(op(), 1..300),
        grouping in any::<bool>(),
    ) {
        // Without mobility grouping movable blocks sit among the others, where
        // compaction finds them and targets for them.
        let za = ZoneAllocator::with_arena(
            Config {
                nr_cpus: 2,
                min_free_kbytes: Some(0),
                mobility_grouping: grouping,
                ..Config::with_bytes(8 << 20)
            },
            ArenaOptions { memfd: true, ..ArenaOptions::default() },
        )
        .unwrap();
        let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
        let owner = Owner { blocks: Mutex::new(HashMap::new()), rng: AtomicU64::new(0) };
        let mut cache = PageFragCache::new(&za, Gfp::ATOMIC);
        let mut w = World {
            za: &za,
            vm: &vm,
            owner: &owner,
            areas: Vec::new(),
            guards: Vec::new(),
            raws: Vec::new(),
            frags: Vec::new(),
            freed: Vec::new(),
            next_tag: 0,
        };
        for op in ops {
            w.step(op, &mut cache)?;
        }
        // Everything comes back: no frame lost, none freed twice.
        for f in std::mem::take(&mut w.frags) {
            prop_assert_eq!(za.page_frag_free(f.ptr.as_ptr()), Ok(()));
        }
        drop(cache);
        w.guards.clear();
        for (p, o) in std::mem::take(&mut w.raws) {
            prop_assert_eq!(za.free_pages(p, o), Ok(()));
        }
        for (a, _) in std::mem::take(&mut w.areas) {
            prop_assert_eq!(vm.vfree(a.addr()), Ok(()));
        }
        for (p, (o, _)) in owner.blocks.lock().unwrap().drain() {
            prop_assert_eq!(za.free_pages(Pfn(p), o), Ok(()));
        }
        za.drain_all_pages();
        let r = za.check_invariants().unwrap();
        prop_assert_eq!(r.allocated_pages, 0);
        prop_assert_eq!(za.nr_free_pages(), za.managed_pages());
    }
}
