//! Page isolation: taking pageblocks out of circulation and giving them back.
//!
//! Layer on the buddy lists (zone lock held, methods of `ZoneLocked`), used by
//! `alloc_contig_range()`. Isolating a pageblock sets its isolate bit (the type
//! underneath is kept, as in Linux 6.16+) and moves its free blocks to the Isolate
//! lists, where no allocation looks and which `NR_FREE_PAGES` does not count; frames
//! freed into it later land there too. A free block larger than a pageblock that
//! covers the block is first broken up, one pageblock at a time, so that the other
//! pageblocks keep their memory (Linux's `split_large_buddy`).

use crate::buddy::FreeDelta;
use crate::frame::Tag;
use crate::types::{Migratetype, Order, Pfn};
use crate::zone::ZoneLocked;

impl ZoneLocked<'_> {
    /// The free block (head, order) that contains `pfn`, if `pfn` is free.
    pub(crate) fn free_block_containing(&self, pfn: Pfn) -> Option<(Pfn, Order)> {
        let z = self.zone;
        for o in 0..=z.max_order.0 {
            let head = Pfn(pfn.0 & !((1u64 << o) - 1));
            if !z.contains(head) {
                return None;
            }
            let w = z.frames.word(z.idx(head));
            if w.order().0 >= o {
                match w.tag() {
                    Tag::Buddy => return Some((head, w.order())),
                    Tag::Alloc | Tag::Pcp | Tag::Frozen | Tag::Cached => return None,
                    _ => {}
                }
            }
        }
        None
    }

    /// Gives the pageblock holding `pfn` the type `new` (`Isolate` sets the isolate
    /// bit; any other type on an isolated block clears it), moving its free memory
    /// to the new type's lists.
    fn retype_pageblock(&mut self, pfn: Pfn, new: Migratetype) {
        let z = self.zone;
        let pb = z.pageblock_order;
        let start = Pfn(pfn.0 & !(pb.nr_pages() - 1));
        let old = z.blocks.migratetype(start);
        let set_type = |zl: &mut Self| {
            if old == Migratetype::Isolate && new != Migratetype::Isolate {
                zl.unisolate_pageblock(start);
            } else {
                zl.set_pageblock_type(start, new);
            }
        };
        if let Some((head, order)) = self.free_block_containing(start.max(Pfn(z.start_pfn))) {
            if order > pb {
                // Break the covering block up: each pageblock-sized part is freed
                // again on its own block's type and merges where it may.
                let mt = z.blocks.migratetype(head);
                self.del_from_free_list(head, order, mt);
                set_type(self);
                let mut d = FreeDelta::default().with(-(order.nr_pages() as i64), mt);
                for i in 0..1u64 << (order.0 - pb.0) {
                    let part = head.add(i << pb.0);
                    let part_mt = z.blocks.migratetype(part);
                    d = d.with(pb.nr_pages() as i64, part_mt);
                    self.merge_free(part, pb, part_mt, false, &mut d);
                }
                d.apply(self);
                return;
            }
        }
        let lo = start.0.max(z.start_pfn);
        let hi = (start.0 + pb.nr_pages()).min(z.end_pfn());
        let mut p = lo;
        while p < hi {
            let w = z.frames.word(z.idx(Pfn(p)));
            if w.tag() == Tag::Buddy {
                self.move_to_free_list(Pfn(p), w.order(), old, new);
                p += w.order().nr_pages();
            } else {
                p += 1;
            }
        }
        set_type(self);
        self.remerge(Pfn(lo), pb, new);
    }

    /// Isolates the pageblock holding `pfn`. `false` if it already was isolated.
    pub(crate) fn isolate_pageblock(&mut self, pfn: Pfn) -> bool {
        if self.zone.blocks.migratetype(pfn) == Migratetype::Isolate {
            return false;
        }
        self.retype_pageblock(pfn, Migratetype::Isolate);
        true
    }

    /// Ends the isolation of the pageblock holding `pfn`, restoring its type.
    pub(crate) fn undo_isolate_pageblock(&mut self, pfn: Pfn) {
        let restored = self.zone.blocks.base_migratetype(pfn);
        self.retype_pageblock(pfn, restored);
    }
}
