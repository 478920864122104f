//! Migration: moving a movable block to another block through its owner.
//!
//! Layer on the allocator's reference protocol (`allocator`), used by `compaction`.
//! Takes no lock of its own: every step is a compare-and-swap on a head's state
//! word, and the frees at the end take the zone lock through `free_one_page`.
//!
//! zonealloc does not know who refers to a block, so it cannot move one by itself:
//! the owner of movable memory supplies a `Migrate` callback. Given the block and a
//! new block of the same order, the owner copies the contents (an `Arena` backend
//! copies the bytes for it: `Migration::copy_contents`) and switches its references
//! to the new block, or refuses (the block is pinned, or no longer the owner's).
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::{Arc, Mutex};
//! use zonealloc::{ArenaOptions, Config, Gfp, Migrate, MigrateOutcome, Order, Pfn, ZoneAllocator};
//!
//! /// An owner of movable pages: buffer id -> the page holding it.
//! #[derive(Default)]
//! struct Buffers(Mutex<HashMap<u64, Pfn>>);
//!
//! impl Migrate for Buffers {
//!     // The default `migrate` has copied the bytes (an Arena backend) and asks the
//!     // owner to switch its references; a block it does not hold stays put.
//!     fn relocate(&self, old: Pfn, new: Pfn, _order: Order) -> MigrateOutcome {
//!         match self.0.lock().unwrap().values_mut().find(|p| **p == old) {
//!             Some(p) => {
//!                 *p = new;
//!                 MigrateOutcome::Moved
//!             }
//!             None => MigrateOutcome::Refused,
//!         }
//!     }
//! }
//!
//! let config = Config { nr_cpus: 1, ..Config::with_bytes(16 << 20) };
//! let za = ZoneAllocator::with_arena(config, ArenaOptions::default()).unwrap();
//! let owner = Arc::new(Buffers::default());
//! za.set_migrator(Some(owner.clone()));
//!
//! // Fill memory with movable pages and keep every fourth: every pageblock keeps
//! // some, so no free order-9 block is left while three quarters are free.
//! let mut pages = Vec::new();
//! while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NORETRY, Order(0)) {
//!     pages.push(p);
//! }
//! for p in pages {
//!     if p.0 % 4 != 0 {
//!         za.free_pages(p, Order(0)).unwrap();
//!         continue;
//!     }
//!     let page = za.page_address(p).unwrap().as_ptr();
//!     // SAFETY: the arena maps a 4 KiB page at each frame's address, and this
//!     // allocated page is ours alone.
//!     unsafe { page.write_bytes(p.0 as u8 | 1, 4096) };
//!     owner.0.lock().unwrap().insert(p.0, p);
//! }
//!
//! // An order-9 request compacts: pages move, their bytes with them.
//! let huge = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(9)).unwrap();
//! assert!(za.compaction_stats().pgmigrate_success > 0);
//! for (&id, &p) in owner.0.lock().unwrap().iter() {
//!     // SAFETY: as above.
//!     let first = unsafe { *za.page_address(p).unwrap().as_ptr() };
//!     assert_eq!(first, id as u8 | 1);
//! }
//! za.free_pages(huge, Order(9)).unwrap();
//! ```
//!
//! # The isolate-migrate-putback protocol
//!
//! A block is a candidate when its head is `Alloc` with the `Movable` type and no
//! flag (a `PageBlock` guard's block and a page_frag cache's block are never moved:
//! their pfn is held where the owner's callback cannot change it).
//!
//! ```text
//!  isolate   Alloc{rc = r}             ──CAS──▶ Alloc{ISOLATED, rc = r + 1}
//!            (compaction now holds one reference of its own)
//!  target    new: private free block   ──────▶ Alloc{ISOLATED|MIGRATING, rc = B}
//!            (B = MIGRATING_BASE; the owner's takes and drops on new move rc
//!            from there, and new's `next` link names old)
//!  call      owner.migrate(old, new): copies, switches references, or refuses
//!  moved     old ──CAS──▶ Frozen, freed, its rc = r' + 1 carried over:
//!            new ──CAS──▶ Alloc{ISOLATED, rc = r' + 1 + (rc - B)};
//!            then compaction's reference on new dropped (putback)
//!  refused   new ──CAS──▶ Frozen, kept as a target;   old: putback
//!  putback   Alloc{ISOLATED, rc}: rc > 1 ─▶ Alloc{rc - 1};  rc = 1 ─▶ Frozen, freed
//! ```
//!
//! The count is carried over only after the callback, because the contract
//! serialises the callback, not the moments around it: the owner may take or drop
//! references on the old block until its callback starts (after compaction first
//! looked at it), and on the new one as soon as its references name it, which can
//! be before compaction has seen the callback return. So the old block's count is
//! read when compaction seizes it, once the callback is over, and added to what
//! the owner did to the new block meanwhile; until then the new block's count
//! sits far above any real one (`MIGRATING_BASE`), so none of the owner's drops
//! can look like its last, and `page_count` answers the sum of the two.
//!
//! While a block is isolated its owner may still free it or drop references: the
//! owner's `free_pages`/`put_page` drops one of the owner's references (never
//! compaction's), so the block cannot be freed under the migration and cannot be
//! handed out twice. A free that drops the last of the owner's references leaves
//! the block to compaction, whose putback frees it: Linux's `putback_movable_pages`
//! after a page was freed under migration. A free of an isolated block whose owner
//! references are all gone is a double free and is refused (`AlreadyFree`),
//! changing nothing: detection stays exact. The one exception is a migrating
//! target, from its callback until it settles: its count is relative then, so a
//! drop of more references than the owner holds goes through (a contract breach;
//! the settled count is then compaction's reference alone, and its putback frees
//! the block once). Calls that would change the block's shape or owner
//! (`split_page`, a guard) answer `Busy` while it is isolated; the multi-page frees
//! drop the owner's references on it as `free_pages` does.

use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::frame::{
    Tag, Word, FLAG_ISOLATED, FLAG_LAZY, FLAG_MIGRATING, MIGRATING_BASE, REFCOUNT_MAX,
};
use crate::free::Via;
use crate::gfp::AllocFlags;
use crate::hook::{self, InCallback, Panicked};
use crate::migrator::{Migrate, MigrateOutcome, Migration};
use crate::types::{Migratetype, Order, Pfn, Wmark};
use crate::zone::Zone;

/// How one migration attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Moved; the target is now the owner's, the old block was freed.
    Moved,
    /// The owner refused; the block was put back, the target is still ours.
    Refused,
    /// The owner freed the block while it was isolated (before or during its call):
    /// putback freed it and the target is still ours.
    Freed,
    /// The owner's callback panicked (caught, with `std`): handled as a refusal,
    /// the block put back and the target still ours (see `hook`).
    Panicked,
}

impl<B: Backend> ZoneAllocator<B> {
    /// This allocator's name for `hook::InCallback`: the address of its
    /// compaction state, unique among live allocators.
    pub(crate) fn compact_key(&self) -> usize {
        core::ptr::from_ref(&self.compact) as usize
    }

    /// Isolates the movable block headed by `pfn` for migration: one CAS adds
    /// compaction's reference and `FLAG_ISOLATED`. Returns the block's order, or
    /// `None` if the frame is not the head of a movable, unflagged allocated block.
    pub(crate) fn isolate_movable(&self, z: &Zone, pfn: Pfn) -> Option<Order> {
        let idx = z.idx(pfn);
        let mut w = z.frames.word(idx);
        loop {
            if !is_movable_candidate(w) {
                return None;
            }
            // A lazily split block moves page by page: its head alone here.
            if w.is_lazy() {
                Self::materialize(z, pfn, w);
                w = z.frames.word(idx);
                continue;
            }
            let rc = w.refcount().checked_add(1)?;
            let new = w.with_refcount(rc).with_flags(FLAG_ISOLATED);
            match z.frames.cas_word(idx, w, new) {
                Ok(_) => return Some(w.order()),
                Err(cur) => w = cur,
            }
        }
    }

    /// `putback_movable_pages()` for one block: drops compaction's reference; if it
    /// was the last (the owner freed the block while isolated), frees the block.
    /// Returns whether the block was freed.
    pub(crate) fn putback_movable(&self, z: &Zone, pfn: Pfn) -> bool {
        let idx = z.idx(pfn);
        let mut w = z.frames.word(idx);
        loop {
            debug_assert!(w.tag() == Tag::Alloc && w.flags() & FLAG_ISOLATED != 0);
            let new = if w.refcount() <= 1 {
                Word::frozen(w.order())
            } else {
                w.with_refcount(w.refcount() - 1).with_flags(0)
            };
            match z.frames.cas_word(idx, w, new) {
                Ok(_) => break,
                Err(cur) => w = cur,
            }
        }
        let freed = w.refcount() <= 1;
        if freed {
            self.release_frozen(z, pfn, w.order(), Via::Zone);
        }
        freed
    }

    /// Takes every reference off an isolated head (the caller's and any the owner
    /// left) and returns how many there were: the block is the caller's, `Frozen`.
    fn seize_isolated(&self, z: &Zone, pfn: Pfn) -> u32 {
        let idx = z.idx(pfn);
        let mut w = z.frames.word(idx);
        loop {
            debug_assert!(w.tag() == Tag::Alloc && w.flags() & FLAG_ISOLATED != 0);
            match z.frames.cas_word(idx, w, Word::frozen(w.order())) {
                Ok(_) => return w.refcount(),
                Err(cur) => w = cur,
            }
        }
    }

    /// Carries the old block's `held` references (the owner's as of its callback,
    /// and compaction's) over to the migrating target `new`, on top of the takes
    /// and drops its owner made on `new` since the callback gave it out, and ends
    /// its migrating state (its `next` link back to `link`). An owner that dropped
    /// more references than it held (a contract breach) leaves only compaction's,
    /// so that its putback frees the block.
    fn settle_target(&self, z: &Zone, new: Pfn, held: u32, link: u32) {
        let idx = z.idx(new);
        let mut w = z.frames.word(idx);
        loop {
            debug_assert!(w.tag() == Tag::Alloc && w.flags() & FLAG_MIGRATING != 0);
            match z.frames.cas_word(idx, w, w.settled(held)) {
                Ok(_) => break,
                Err(cur) => w = cur,
            }
        }
        z.frames.set_migration_link(idx, link);
    }

    /// Migrates the isolated block `old` of `order` to `new`, a block of the same
    /// order the caller holds privately (`Frozen`), through the owner `m`. On
    /// `Moved` the target became the owner's; otherwise it is still the caller's.
    pub(crate) fn migrate_isolated(
        &self,
        z: &Zone,
        old: Pfn,
        new: Pfn,
        order: Order,
        m: &dyn Migrate,
    ) -> Step {
        let w = z.frames.word(z.idx(old));
        if w.refcount() <= 1 {
            // Freed by its owner since isolation: only compaction's reference left.
            self.putback_movable(z, old);
            return Step::Freed;
        }
        // The target is migrating until the callback is over: the owner may still
        // take and drop references on the old block until its callback starts (it
        // serialises only the callback), and on the new one from the moment the
        // callback names it, so the old block's count is carried over only once
        // the callback has returned (`settle_target`). Meanwhile the target's count
        // is relative to `MIGRATING_BASE`, and its `next` link names the old block
        // for `page_count`.
        let target =
            Word::alloc_flagged(order, Migratetype::Movable, FLAG_ISOLATED | FLAG_MIGRATING)
                .with_refcount(MIGRATING_BASE);
        let link = z.frames.migration_link(z.idx(new));
        z.frames.set_migration_link(z.idx(new), z.idx(old));
        z.frames.set_word(z.idx(new), target);
        let copy = |from: Pfn, to: Pfn, nr: u64| self.backend.copy_pages(from, to, nr);
        let outcome = {
            let _inside = InCallback::enter(self.compact_key(), &self.compact.callbacks);
            hook::call(|| {
                m.migrate(&Migration {
                    old,
                    new,
                    order,
                    copy: &copy,
                })
            })
        };
        match outcome {
            Ok(MigrateOutcome::Moved) => {
                let held = self.seize_isolated(z, old);
                self.settle_target(z, new, held, link);
                z.events.pgalloc.inc(order.nr_pages());
                self.release_frozen(z, old, order, Via::Zone);
                self.putback_movable(z, new);
                Step::Moved
            }
            // A panic is taken as a refusal: the owner's references may name either
            // block, and only its own data can suffer for that (see `Migrate`).
            Ok(MigrateOutcome::Refused) | Err(Panicked) => {
                self.seize_isolated(z, new);
                z.frames.set_migration_link(z.idx(new), link);
                let freed = self.putback_movable(z, old);
                match outcome {
                    Err(Panicked) => Step::Panicked,
                    _ if freed => Step::Freed,
                    _ => Step::Refused,
                }
            }
        }
    }
}

/// Why `migrate_range_out` stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MoveOutError {
    /// An allocated block that can never move (not movable, another owner's, bad).
    NotMovable(Pfn),
    /// Movable blocks and no migrator registered.
    NoMigrator,
    /// The owner refused to move this block.
    OwnerRefused(Pfn),
    /// The owner's callback panicked moving this block.
    OwnerPanicked(Pfn),
    /// No free block outside the range to move this one to.
    NoMemory(Pfn),
}

/// What `movable_precheck` found in the way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocker {
    /// A frame with no memory behind it.
    Hole(Pfn),
    /// A bad frame, or an allocated block that can never move (not movable, or
    /// another owner's).
    Pinned(Pfn),
}

impl<B: Backend> ZoneAllocator<B> {
    /// The lock-free look before a range is emptied (offlining, `cma_alloc`):
    /// every frame of `[start, end)`, and every block overlapping it, from the
    /// `max_order` boundary below `start` (a block whose head lies before the
    /// range is seen too). `Ok(true)` if an allocated block would have to move;
    /// the first hole or pinned block (its frame clamped to `start`) otherwise.
    pub(crate) fn movable_precheck(z: &Zone, start: u64, end: u64) -> Result<bool, Blocker> {
        let mut movable = false;
        let mut p = (start & !(z.max_order.nr_pages() - 1)).max(z.start_pfn);
        while p < end {
            let w = z.frames.word(z.idx(Pfn(p)));
            let step = if w.tag() == Tag::Tail {
                1
            } else {
                w.order().nr_pages()
            };
            if p + step > start {
                let at = Pfn(p.max(start));
                match w.tag() {
                    Tag::Hole => return Err(Blocker::Hole(at)),
                    Tag::Bad => return Err(Blocker::Pinned(at)),
                    Tag::Alloc if !is_movable_candidate(w) => return Err(Blocker::Pinned(at)),
                    Tag::Alloc => movable = true,
                    _ => {}
                }
            }
            p += step;
        }
        Ok(movable)
    }

    /// Moves every allocated block that overlaps `[start, end)` (pageblocks the
    /// caller isolated, so that nothing is allocated into them meanwhile) out
    /// through `m`, to blocks allocated outside. The walk starts at the
    /// `max_order` boundary below `start`, so a block whose head lies before the
    /// range is found too. Blocks freed meanwhile are passed over; blocks moved
    /// before an error stay moved.
    pub(crate) fn migrate_range_out(
        &self,
        z: &Zone,
        start: u64,
        end: u64,
        m: Option<&dyn Migrate>,
    ) -> Result<(), MoveOutError> {
        let mut p = (start & !(z.max_order.nr_pages() - 1)).max(z.start_pfn);
        while p < end {
            let pfn = Pfn(p);
            let w = z.frames.word(z.idx(pfn));
            let step = if w.tag() == Tag::Tail {
                1
            } else {
                w.order().nr_pages()
            };
            // A lazily split block's pages move one by one: give them their
            // words, and look at the head again (`isolate_movable` would too, but
            // here a block that straddles `start` moves only its pages inside).
            if w.is_lazy() && is_movable_candidate(w) && p + step > start {
                Self::materialize(z, pfn, w);
                continue;
            }
            if w.tag() != Tag::Alloc || p + step <= start {
                p += step;
                continue;
            }
            if !is_movable_candidate(w) {
                return Err(MoveOutError::NotMovable(pfn));
            }
            let m = m.ok_or(MoveOutError::NoMigrator)?;
            let Some(order) = self.isolate_movable(z, pfn) else {
                // Freed or changed meanwhile: looked at again on the next pass.
                p += step;
                continue;
            };
            let Some(target) = self.private_block(z, order) else {
                self.putback_movable(z, pfn);
                return Err(MoveOutError::NoMemory(pfn));
            };
            let c = &self.compact.counters;
            let failed = match self.migrate_isolated(z, pfn, target, order, m) {
                Step::Moved => {
                    c.migrated.inc(order.nr_pages());
                    None
                }
                Step::Freed => Some(None),
                Step::Refused => Some(Some(MoveOutError::OwnerRefused(pfn))),
                Step::Panicked => Some(Some(MoveOutError::OwnerPanicked(pfn))),
            };
            // The target is still ours unless the block moved into it.
            if let Some(e) = failed {
                z.lock().free_block_locked(target, order, false);
                if let Some(e) = e {
                    c.refused.inc(order.nr_pages());
                    return Err(e);
                }
            }
            p += order.nr_pages();
        }
        Ok(())
    }

    /// A free block of `order` from zone `z`'s buddy lists (the caller's range is
    /// isolated, so it lies outside the range), made private (`Frozen`, the
    /// caller's) to receive a migration; none when taking it would leave the zone
    /// at its min watermark. Like Linux's `alloc_migration_target()` for a
    /// movable page, it may come from a CMA area.
    fn private_block(&self, z: &Zone, order: Order) -> Option<Pfn> {
        if z.nr_free_pages() < z.wmark(Wmark::Min) + order.nr_pages() {
            return None;
        }
        let flags = AllocFlags::checking(Wmark::Min) | AllocFlags::CMA;
        let t = z.lock().rmqueue_one(order, Migratetype::Movable, flags)?;
        // Counted as allocated (`pgalloc`) only if a block moves into it.
        z.frames.set_word(z.idx(t), Word::frozen(order));
        Some(t)
    }
}

/// Whether `w` heads a block compaction may isolate: allocated, movable, no flag.
#[inline]
pub(crate) fn is_movable_candidate(w: Word) -> bool {
    w.tag() == Tag::Alloc
        && w.aux() == Migratetype::Movable as u8
        && w.flags() & !FLAG_LAZY == 0
        && (1..=REFCOUNT_MAX).contains(&w.refcount())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, PcpConfig};
    use crate::error::FreeError;
    use crate::gfp::Gfp;
    use crate::types::ZoneType;
    use std::sync::Mutex;

    fn tiny() -> ZoneAllocator {
        ZoneAllocator::new(Config {
            max_order: Order(2),
            pageblock_order: Order(2),
            nr_cpus: 1,
            mobility_grouping: false,
            min_free_kbytes: Some(0),
            pcp: PcpConfig {
                enabled: false,
                ..PcpConfig::default()
            },
            ..Config::single_zone(ZoneType::Normal, Pfn(0), 16)
        })
        .unwrap()
    }

    /// A movable page whose owner holds `refs` references (set directly, as that
    /// many `get_page` calls would), and a private target beside it.
    fn page_and_target(za: &ZoneAllocator, refs: u32) -> (Pfn, Pfn) {
        let p = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(0)).unwrap();
        let t = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(0)).unwrap();
        let z = za.zone_of(p).unwrap();
        let w = z.frames.word(z.idx(p));
        z.frames.set_word(z.idx(p), w.with_refcount(refs));
        z.frames.set_word(z.idx(t), Word::frozen(Order(0)));
        (p, t)
    }

    /// Moves the page, then takes `takes` references on the new one and drops
    /// one, inside its callback; records `page_count` of the new page there.
    struct Owner<'a> {
        za: &'a ZoneAllocator,
        takes: u32,
        seen: Mutex<Seen>,
    }

    /// The callback's `get_page` answers, and `page_count` after them.
    type Seen = (std::vec::Vec<Result<(), FreeError>>, Option<u32>);

    impl Migrate for Owner<'_> {
        fn relocate(&self, _old: Pfn, new: Pfn, _order: Order) -> MigrateOutcome {
            let mut seen = self.seen.lock().unwrap();
            for _ in 0..self.takes {
                seen.0.push(self.za.get_page(new));
            }
            assert_eq!(self.za.put_page(new), Ok(false));
            seen.1 = self.za.page_count(new).ok();
            MigrateOutcome::Moved
        }
    }

    #[test]
    fn references_gained_while_moving_are_carried_over_whole() {
        let za = tiny();
        let (p, t) = page_and_target(&za, REFCOUNT_MAX - 1);
        let z = za.zone_of(p).unwrap();
        assert_eq!(za.isolate_movable(z, p), Some(Order(0)));
        let owner = Owner {
            za: &za,
            takes: 3,
            seen: Mutex::new((std::vec::Vec::new(), None)),
        };
        assert_eq!(za.migrate_isolated(z, p, t, Order(0), &owner), Step::Moved);
        let (gets, during) = owner.seen.lock().unwrap().clone();
        // Nothing refused while the count is relative, and nothing lost: the
        // owner's REFCOUNT_MAX - 1 + 3 - 1, and compaction's one during the move.
        assert_eq!(gets, std::vec![Ok(()); 3]);
        assert_eq!(during, Some(REFCOUNT_MAX + 2));
        assert_eq!(za.page_count(t), Ok(REFCOUNT_MAX + 1));
        // Above the cap the settled block takes no more references and is not
        // isolated again; a drop brings it back.
        assert_eq!(za.get_page(t), Err(FreeError::RefcountOverflow(t)));
        assert_eq!(za.isolate_movable(z, t), None);
        assert_eq!(za.put_page(t), Ok(false));
        assert_eq!(za.isolate_movable(z, t), Some(Order(0)));
        assert!(!za.putback_movable(z, t));
        assert_eq!(za.page_count(t), Ok(REFCOUNT_MAX));
    }

    #[test]
    fn get_page_stops_at_the_cap() {
        let za = tiny();
        let (p, _) = page_and_target(&za, REFCOUNT_MAX - 1);
        assert_eq!(za.get_page(p), Ok(()));
        assert_eq!(za.get_page(p), Err(FreeError::RefcountOverflow(p)));
        assert_eq!(za.page_count(p), Ok(REFCOUNT_MAX));
        // Isolated, the count carries compaction's reference on top.
        let z = za.zone_of(p).unwrap();
        assert_eq!(za.isolate_movable(z, p), Some(Order(0)));
        assert_eq!(za.page_count(p), Ok(REFCOUNT_MAX + 1));
        assert_eq!(za.get_page(p), Err(FreeError::RefcountOverflow(p)));
        assert!(!za.putback_movable(z, p));
    }
}
