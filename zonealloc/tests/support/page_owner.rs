//! Test support, included by suites with `#[path]` (not part of the library): an
//! owner of movable pages that moves them when asked, refuses or panics on
//! request, and may run code of the test's at each call.
//!
//! The including crate must also include `support/induced_panic.rs` as
//! `mod induced_panic`.

use std::collections::HashSet;
use std::sync::Mutex;

use zonealloc::{Gfp, Migrate, MigrateOutcome, Order, Pfn, ZoneAllocator};

/// An owner of movable pages, by frame; moves them when asked unless told not
/// to (`refuse`), panics on the `panic_at`th call, and runs `on_call` first at
/// each call (a test calling back into the allocator).
#[derive(Default)]
pub struct Owner {
    pub pages: Mutex<HashSet<Pfn>>,
    pub refuse: bool,
    pub panic_at: Option<usize>,
    pub calls: Mutex<usize>,
    #[allow(clippy::type_complexity)]
    pub on_call: Option<Box<dyn Fn() + Send + Sync>>,
}

impl Migrate for Owner {
    fn relocate(&self, old: Pfn, new: Pfn, _order: Order) -> MigrateOutcome {
        let mut c = self.calls.lock().unwrap();
        *c += 1;
        if Some(*c) == self.panic_at {
            drop(c);
            crate::induced_panic::induced_panic();
        }
        drop(c);
        if let Some(f) = &self.on_call {
            f();
        }
        if self.refuse {
            return MigrateOutcome::Refused;
        }
        let mut p = self.pages.lock().unwrap();
        if p.remove(&old) {
            p.insert(new);
            MigrateOutcome::Moved
        } else {
            MigrateOutcome::Refused
        }
    }
}

/// Allocates movable pages until the zone refuses, keeping those for which
/// `keep` holds (the rest are freed): the owner's pages.
pub fn fill_movable(za: &ZoneAllocator, owner: &Owner, keep: impl Fn(Pfn) -> bool) {
    let mut all = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NOWAIT, Order(0)) {
        all.push(p);
    }
    for p in all {
        if keep(p) {
            owner.pages.lock().unwrap().insert(p);
        } else {
            za.free_pages(p, Order(0)).unwrap();
        }
    }
}
