//! An owner of movable pages for the experiments that move them (`hotplug`,
//! `cma`): it keeps its pages by frame and lets each move when asked.

use std::collections::HashSet;
use std::sync::Mutex;

use zonealloc::{Migrate, MigrateOutcome, Order, Pfn};

/// The owner's pages, by frame.
pub struct Owner(pub Mutex<HashSet<Pfn>>);

impl Owner {
    /// An owner with no pages.
    pub fn new() -> Owner {
        Owner(Mutex::new(HashSet::new()))
    }
}

impl Migrate for Owner {
    fn relocate(&self, old: Pfn, new: Pfn, _order: Order) -> MigrateOutcome {
        let mut p = self.0.lock().expect("owner lock");
        if p.remove(&old) {
            p.insert(new);
            MigrateOutcome::Moved
        } else {
            MigrateOutcome::Refused
        }
    }
}
