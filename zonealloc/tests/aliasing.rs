//! Property test: random sequences of `PageBlock` guards, raw frees and page_frag
//! operations, legitimate and not, never give two live writable views of the same
//! memory and never panic.
//!
//! Every live region (a guard's `bytes_mut()`, a fragment) is filled with its own tag
//! byte when it is made; after every step the regions must be pairwise disjoint by
//! address range and still hold their tags, so an overlap that the address check
//! missed would show up as a clobbered tag. Misuse (a raw free behind a guard, a
//! second guard over one block, a fragment freed once too often, a fragment free
//! inside a guarded block) must be refused with an error.

use proptest::prelude::*;
use std::ptr::NonNull;
use zonealloc::*;

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
    ]
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
                let raw = now.is_some_and(|h| self.raws.iter().any(|r| r.0 == h));
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
            _ => {}
        }
        self.check()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_two_live_views_overlap(ops in proptest::collection::vec(op(), 1..300)) {
        let za = ZoneAllocator::with_arena(
            Config { nr_cpus: 2, min_free_kbytes: Some(0), ..Config::with_bytes(8 << 20) },
            ArenaOptions::default(),
        )
        .unwrap();
        let mut cache = PageFragCache::new(&za, Gfp::ATOMIC);
        let mut w = World {
            za: &za,
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
        za.drain_all_pages();
        let r = za.check_invariants().unwrap();
        prop_assert_eq!(r.allocated_pages, 0);
        prop_assert_eq!(za.nr_free_pages(), za.managed_pages());
    }
}
