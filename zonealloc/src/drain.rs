//! Per-CPU list maintenance: drains, `high` decay, and the pages parked in front
//! of the buddy lists.
//!
//! A path of `ZoneAllocator` (allocator layer, beside `allocate`, `free` and
//! `fast`). It empties CPUs' lists (`pcp`: each CPU's lock taken in turn, which
//! stops that CPU's stacks and moves what they hold onto its lists; the zone
//! lock under it) and the blocks `LocalCache`s hold (`local_state`: each
//! cache's lock taken in turn). No cross-CPU call is needed: a remote CPU's
//! lists are reached through its lock.

use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;

use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::local_state::{CacheShared, Held, LOCAL_ORDERS};
use crate::types::Order;
use crate::zone::Zone;

impl<B: Backend> ZoneAllocator<B> {
    /// `drain_local_pages()`: empties this thread's CPU's lists in every zone.
    /// Returns the pages returned to the buddy lists.
    pub fn drain_local_pages(&self) -> u64 {
        self.drain_cpu_pages(self.current_cpu())
    }

    /// Empties CPU `cpu`'s lists in every zone; returns the pages returned.
    pub fn drain_cpu_pages(&self, cpu: usize) -> u64 {
        let cpu = self.cpu_index(cpu);
        let mut n = 0;
        for z in self.zones.iter() {
            let mut p = z.pcp_lock(cpu);
            n += p.pcp.count;
            p.drain(self.config.pcp.prefetch_buddy);
        }
        n
    }

    /// `drain_all_pages()`: empties every CPU's lists in every zone, from this
    /// thread (each remote CPU's lock taken in turn; no cross-CPU calls needed).
    /// Returns the pages returned.
    pub fn drain_all_pages(&self) -> u64 {
        let drained = self.drain_caches()
            + (0..self.config.nr_cpus)
                .map(|cpu| self.drain_cpu_pages(cpu))
                .sum::<u64>();
        // Frees that found the zone lock taken (`free_pages_nolock`).
        for z in self.zones.iter().filter(|z| z.has_deferred()) {
            z.lock().free_deferred();
        }
        drained
    }

    /// `decay_pcp_high()` on every CPU and zone: what Linux's vmstat worker does once
    /// a second. Call it periodically to let idle CPUs give memory back. Returns
    /// whether some CPU has more to decay.
    pub fn pcp_decay(&self) -> bool {
        let mut more = self.decay_caches();
        for z in self.zones.iter() {
            for cpu in 0..z.pcp.len() {
                more |= z.pcp_lock(cpu).decay(self.config.pcp.prefetch_buddy);
            }
        }
        more
    }

    /// `decay_pcp_high()` on CPU `cpu` (taken modulo `nr_cpus`) in every zone: what
    /// Linux's vmstat worker does on that CPU once a second while it runs (a
    /// replay of a trace calls it on each CPU's own clock). Returns whether the
    /// CPU has more to decay.
    pub fn pcp_decay_cpu(&self, cpu: usize) -> bool {
        let cpu = self.cpu_index(cpu);
        let mut more = false;
        for z in self.zones.iter() {
            more |= z.pcp_lock(cpu).decay(self.config.pcp.prefetch_buddy);
        }
        more
    }

    /// Pages on every CPU's lists and stacks, in `LocalCache`s, and freed by
    /// `free_pages_nolock` while the zone lock was taken, all zones (free, but
    /// not in `nr_free_pages`). Lock-free; exact once quiet.
    pub fn nr_pcp_pages(&self) -> u64 {
        self.zones
            .iter()
            .flat_map(|z| z.pcp.iter())
            .map(|s| s.stats.count.get())
            .sum::<u64>()
            + self.nr_stacked_pages()
            + self.nr_cached_pages()
            + self.zones.iter().map(|z| z.deferred_pages()).sum::<u64>()
    }

    // -------------------------------------------------------------------------
    // LocalCaches
    // -------------------------------------------------------------------------

    /// The registered caches still alive.
    fn live_caches(&self) -> Vec<Arc<CacheShared>> {
        self.caches
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Empties every `LocalCache` (their owners' calls wait meanwhile). Returns
    /// the pages given back.
    pub(crate) fn drain_caches(&self) -> u64 {
        self.live_caches()
            .iter()
            .map(|c| {
                let mut h = c.held.lock();
                let n = h.flush_all(self);
                c.publish(&h);
                n
            })
            .sum()
    }

    /// Empties the caches whose owners made no call since the last decay, skipping
    /// any in use now; marks the others unused. Returns whether a cache still holds
    /// pages.
    pub(crate) fn decay_caches(&self) -> bool {
        let mut more = false;
        for c in self.live_caches() {
            let Some(mut h) = c.held.try_lock() else {
                more = true;
                continue;
            };
            if !h.used {
                h.flush_all(self);
                c.publish(&h);
            }
            h.used = false;
            more |= h.pages > 0;
        }
        more
    }

    /// Free pages held by `LocalCache`s now (part of `nr_pcp_pages`, and of
    /// zoneinfo's per-CPU `count` for the CPU each cache refills from; not in
    /// `nr_free_pages`). Always 0 where the per-CPU stacks serve the caches.
    pub fn nr_cached_pages(&self) -> u64 {
        self.live_caches().iter().map(|c| c.pages.get()).sum()
    }

    /// Pages held by the caches of zone `z` that refill from CPU `cpu`'s lists.
    pub(crate) fn cached_pages_of(&self, z: &Zone, cpu: usize) -> u64 {
        self.live_caches()
            .iter()
            .filter(|c| c.zone == z.index && c.cpu == cpu)
            .map(|c| c.pages.get())
            .sum()
    }
}

impl Held {
    /// Gives the `n` oldest blocks of `order` back to the buddy lists.
    pub(crate) fn flush_order<B: Backend>(
        &mut self,
        za: &ZoneAllocator<B>,
        order: Order,
        n: usize,
    ) -> u64 {
        let stack = &mut self.stacks[order.idx()];
        let n = n.min(stack.len());
        if n == 0 {
            return 0;
        }
        za.free_cached(&za.zones[self.zone], order, &stack[..n]);
        stack.drain(..n);
        self.pages -= (n as u64) << order.0;
        n as u64
    }

    /// Gives every block back; returns the pages given back.
    pub(crate) fn flush_all<B: Backend>(&mut self, za: &ZoneAllocator<B>) -> u64 {
        let before = self.pages;
        self.alloc_factor = [0; LOCAL_ORDERS];
        for o in 0..LOCAL_ORDERS {
            self.flush_order(za, Order(o as u8), usize::MAX);
        }
        before - self.pages
    }
}
