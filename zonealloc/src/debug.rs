//! Debug modes and fault injection: page poisoning, init-on-alloc/free, bad-page
//! reports, and failures injected at chosen call sites.
//!
//! Layer below the allocator and the per-CPU lists (it reads the zone's frame table
//! and the backend, which callers pass in). Its hooks are methods of `DebugState`:
//! `free_prepare` runs when a block's last reference is dropped (before it reaches a
//! per-CPU or buddy list), `alloc_check` when a block is handed out. No lock is held
//! in either; the block is owned by the caller.
//!
//! * **Poisoning** (Linux's `page_poison`): freed pages are filled with `PAGE_POISON`
//!   (0xaa) and checked on allocation; a byte that changed means someone wrote to
//!   memory after freeing it. The block is then reported (pfn, offset, byte found)
//!   and taken out of circulation (`Bad` state, never handed out again), and the
//!   allocation retries, as Linux's `check_new_pages` does.
//! * **init_on_free / init_on_alloc**: zero pages when freed / when allocated.
//! * **Fault injection** (Linux's `fail_page_alloc`) lives in `fault`, below every
//!   layer that has a site.
//!
//! Poisoning and the init modes need a backend with memory (the arena); on abstract
//! frames they do nothing.

use alloc::vec::Vec;

use crate::backend::Backend;
use crate::config::DebugConfig;
use crate::fault::Faults;
use crate::frame::{Tag, Word};
use crate::sync::{Irq, Lock};
use crate::types::{Order, Pfn};
use crate::zone::Zone;

/// The byte freed pages are filled with (Linux's `PAGE_POISON`).
pub const PAGE_POISON: u8 = 0xaa;

/// What poisoning found on a block being allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadPageReport {
    /// The block's first frame.
    pub pfn: Pfn,
    /// The block's order.
    pub order: Order,
    /// Byte offset of the first corrupted byte from the block's start.
    pub offset: usize,
    /// The byte found there.
    pub found: u8,
}

/// Debug state kept by the allocator: the options, the fault plan, the reports.
pub(crate) struct DebugState {
    cfg: DebugConfig,
    pub faults: Faults,
    /// Boxed: fork's registry reaches it at a stable address (`fork`).
    pub(crate) bad_pages_lock: alloc::boxed::Box<Lock<Vec<BadPageReport>>>,
}

impl DebugState {
    /// Whether any mode touches pages on the way in or out (poison, init on alloc
    /// or free): when none does, `alloc_check` and `free_prepare` do nothing.
    #[inline]
    pub(crate) fn touches_pages(&self) -> bool {
        let d = self.cfg;
        d.poison || d.init_on_alloc || d.init_on_free
    }

    /// The debug state for `cfg`; its report list is taken with interrupts
    /// disabled through `irq` (a bad page is found on any allocation or free).
    pub(crate) fn new(cfg: DebugConfig, irq: Irq) -> DebugState {
        DebugState {
            cfg,
            faults: Faults::default(),
            bad_pages_lock: alloc::boxed::Box::new(Lock::new(Vec::new(), irq)),
        }
    }

    /// Blocks reported bad (and taken out of circulation) so far.
    pub(crate) fn bad_pages(&self) -> Vec<BadPageReport> {
        self.bad_pages_lock.lock().clone()
    }

    /// Brings the initially free memory of `zones` into the state the debug checks
    /// expect, as Linux's boot-time frees do: poisoned, or zeroed for
    /// `init_on_free`.
    pub(crate) fn init_free_memory(&self, backend: &impl Backend, zones: &[Zone]) {
        let d = self.cfg;
        let byte = if d.init_on_free {
            if backend.initially_zero() {
                return;
            }
            0
        } else if d.poison {
            PAGE_POISON
        } else {
            return;
        };
        for z in zones {
            for p in z.start_pfn..z.end_pfn() {
                if z.frames.word(z.idx(Pfn(p))).tag() != Tag::Hole {
                    backend.fill_pages(Pfn(p), 1, byte);
                }
            }
        }
    }

    /// `free_pages_prepare()`'s debug part: zero or poison a block being freed.
    #[inline]
    pub(crate) fn free_prepare(&self, backend: &impl Backend, pfn: Pfn, order: Order) {
        let d = self.cfg;
        if d.init_on_free {
            backend.zero_pages(pfn, order.nr_pages());
        } else if d.poison {
            backend.fill_pages(pfn, order.nr_pages(), PAGE_POISON);
        }
    }

    /// `check_new_pages()` and `post_alloc_hook()`'s debug part: verify the poison
    /// of a block of zone `z` being allocated (reporting and retiring it if
    /// corrupted) and zero it if asked. Returns `false` if the block was retired.
    #[inline]
    pub(crate) fn alloc_check(
        &self,
        backend: &impl Backend,
        z: &Zone,
        pfn: Pfn,
        order: Order,
    ) -> bool {
        let d = self.cfg;
        if d.poison || d.init_on_free {
            let expect = if d.init_on_free { 0 } else { PAGE_POISON };
            if let Some((offset, found)) = backend.find_mismatch(pfn, order.nr_pages(), expect) {
                self.bad_pages_lock.lock().push(BadPageReport {
                    pfn,
                    order,
                    offset,
                    found,
                });
                z.frames
                    .set_word(z.idx(pfn), Word::new(Tag::Bad, order.0, 0, 0));
                return false;
            }
        }
        if d.init_on_alloc && !d.init_on_free {
            backend.zero_pages(pfn, order.nr_pages());
        }
        true
    }
}
