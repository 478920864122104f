//! Free page reporting: handing free memory back to whoever stands behind the
//! frames (the host of a guest, a device's driver, or the operating system under
//! an arena).
//!
//! A program that frees most of its arena keeps its whole resident set: a free
//! page is still a page the process touched. Linux's `mm/page_reporting.c` lets a
//! driver (virtio-balloon's free page reporting) learn of free blocks of at least
//! `page_reporting_order` (pageblock order by default) in batches, so the host can
//! take their memory back; each block reported is marked, and is not reported
//! again until it has been handed out and freed once more. zonealloc does the same.
//!
//! # Use
//!
//! An owner registers a reporter once ([`ZoneAllocator::register_page_reporting`]):
//! either its own [`PageReporter`] (a hypervisor, a device driver over abstract
//! frames), or the backend's own discard ([`Reporter::Backend`]): over an
//! [`Arena`](crate::arena::Arena), `madvise(MADV_DONTNEED)` (or `MADV_FREE`, or
//! `MADV_REMOVE` for a memfd arena, as `ArenaOptions::discard` says), which gives
//! the pages back to the operating system: the resident set falls, and a page
//! handed out later reads as zeroes on its first touch.
//!
//! ```
//! # #[cfg(target_os = "linux")] {
//! use zonealloc::reporting::{Reporter, ReportingConfig};
//! use zonealloc::{ArenaOptions, Config, Gfp, Order, ZoneAllocator};
//!
//! let za = ZoneAllocator::with_arena(Config::with_bytes(64 << 20), ArenaOptions::default())
//!     .unwrap();
//! // A 64 MiB zone: batches of 8 blocks (the default 32 is meant for larger zones).
//! let cfg = ReportingConfig { capacity: 8, ..ReportingConfig::default() };
//! za.register_page_reporting(Reporter::Backend, cfg).unwrap();
//! let p = za.alloc_pages(Gfp::KERNEL, Order(9)).unwrap();
//! za.free_pages(p, Order(9)).unwrap();
//! za.drain_all_pages();
//! let done = za.report_free_pages().unwrap();
//! assert!(done.pages > 0);
//! // Everything free in blocks of the reporting order is now reported, once.
//! assert_eq!(za.report_free_pages().unwrap().pages, 0);
//! # }
//! ```
//!
//! Reports are made by a *pass* over every zone ([`ZoneAllocator::report_free_pages`]).
//! Linux runs its pass from a work item two seconds after a free left a block of
//! the reporting order on the lists; with `std`, [`PageReportingWorker`] does the
//! same from a thread of its own, and a `no_std` kernel calls the pass from its own
//! worker when [`ZoneAllocator::page_reporting_pending`] says so.
//!
//! # The protocol
//!
//! A pass takes up to `capacity` ([`PAGE_REPORTING_CAPACITY`] by default) unreported free blocks of at
//! least the reporting order off the free lists, under the zone lock (each leaves
//! the free-page count as it goes, and the pass stops taking when the zone would
//! fall to its min watermark, as `__isolate_free_page()` does); their heads become
//! `Frozen`, owned by the pass. It calls the reporter with no lock held, then puts
//! the blocks back under the zone lock, merging them with any buddy freed in the
//! meantime, at the lists' tails (Linux puts them back at the head; at the tail,
//! allocations take memory still resident first), and marks them reported when
//! the reporter accepted them. The pass goes on until no unreported block is left
//! or a budget of one zone's worth of blocks is spent.
//!
//! Which memory is reported is kept per *unit*, a naturally aligned block of the
//! reporting order: one bit each, under the zone lock. A reported unit always lies
//! inside one free block; every way a block leaves the free lists but a merge
//! (allocation, a per-CPU refill, compaction's free scanner, `alloc_contig_range`,
//! isolation) clears its units' bits, as `__del_page_from_free_list()` clears
//! `PageReported`. A merged block is reported as a whole when any unit of it is
//! not (its reported units are reported again: the reporter must accept a block
//! part of which it has already seen, as Linux's do).
//!
//! # Owners' reporters
//!
//! A reporter is owner code and obeys the rule of every hook (see the crate's
//! `hook` rules): if it panics, the pass catches the unwind (with `std`), puts
//! the batch back unreported and answers [`ReportingError::OwnerPanicked`]; if it
//! refuses, the batch goes back unreported and the pass answers
//! [`ReportingError::Refused`]. It may call the allocator: a pass started from
//! inside it answers [`ReportingError::Busy`], registering and unregistering take
//! effect for the next pass, and everything else runs as from any other thread.
//! While a batch is out, its blocks are free but on no list: an allocation cannot
//! take them, a free of one of their frames answers `AlreadyFree`, and
//! `alloc_contig_range` over them fails as over any busy frame (Linux's
//! isolated-for-report pages likewise make it fail with `-EBUSY`).

#[cfg(all(feature = "std", not(loom)))]
use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::frame::Word;
use crate::reporting_state::Registered;
pub use crate::reporting_state::{PageReporter, ReportRefused, Reporter};
use crate::sync::{AtomicBool, Ordering};
use crate::types::{Migratetype, Order, Pfn, Wmark, MIGRATE_TYPES};
use crate::zone::Zone;

/// Blocks handed to a reporter in one call (`PAGE_REPORTING_CAPACITY`).
pub const PAGE_REPORTING_CAPACITY: usize = 32;

/// The most blocks `ReportingConfig::capacity` may ask for in one call.
pub const PAGE_REPORTING_CAPACITY_MAX: usize = 1024;

/// How reporting runs (`register_page_reporting`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportingConfig {
    /// The smallest order reported (`page_reporting_order`); pageblock order for
    /// `None`, as in Linux.
    pub order: Option<Order>,
    /// Blocks per call to the reporter, 1 to [`PAGE_REPORTING_CAPACITY_MAX`]
    /// ([`PAGE_REPORTING_CAPACITY`] by default). A zone is reported only while its
    /// free pages exceed its low watermark by `capacity` blocks of the reporting
    /// order, so with the default, a zone of less than 64 MiB of 4 KiB pages
    /// (32 blocks of order 9) is never reported, as in Linux: a small arena wants
    /// a smaller capacity.
    pub capacity: usize,
}

impl Default for ReportingConfig {
    fn default() -> Self {
        ReportingConfig {
            order: None,
            capacity: PAGE_REPORTING_CAPACITY,
        }
    }
}

/// Linux's `PAGE_REPORTING_DELAY`: how long after a free the pass runs (two
/// seconds), in milliseconds; [`PageReportingWorker`]'s default.
pub const PAGE_REPORTING_DELAY_MS: u64 = 2000;

/// Why a reporting call was refused or stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportingError {
    /// No reporter is registered.
    NotRegistered,
    /// A reporter is already registered (`-EBUSY`); unregister it first.
    AlreadyRegistered,
    /// The reporting order is above `max_order`.
    InvalidOrder(Order),
    /// `ReportingConfig::capacity` is 0 or above `PAGE_REPORTING_CAPACITY_MAX`.
    InvalidCapacity(usize),
    /// `Reporter::Backend` over a backend that cannot give memory back.
    NoDiscard,
    /// `Reporter::Backend` with page poisoning checked: a discarded page reads as
    /// zeroes, not as poison, so every reuse would be reported bad. (Linux's
    /// virtio-balloon likewise reports free pages only where the host keeps the
    /// poison value.)
    Poisoning,
    /// A pass is running already (on another thread, or this call comes from
    /// inside its reporter).
    Busy,
    /// The reporter refused a batch: it went back unreported and the pass ended.
    Refused,
    /// The reporter panicked (caught, with `std`): the batch went back unreported
    /// and the pass ended.
    OwnerPanicked,
}

impl core::fmt::Display for ReportingError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ReportingError::NotRegistered => f.write_str("no page reporter is registered"),
            ReportingError::AlreadyRegistered => {
                f.write_str("a page reporter is already registered")
            }
            ReportingError::InvalidOrder(o) => write!(f, "reporting order {o} above max_order"),
            ReportingError::InvalidCapacity(n) => write!(f, "reporting capacity {n} out of range"),
            ReportingError::NoDiscard => f.write_str("the backend cannot discard pages"),
            ReportingError::Poisoning => {
                f.write_str("page poisoning is checked: discarded pages would read as bad")
            }
            ReportingError::Busy => f.write_str("a reporting pass is already running"),
            ReportingError::Refused => f.write_str("the reporter refused a batch"),
            ReportingError::OwnerPanicked => f.write_str("the reporter panicked"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ReportingError {}

/// What one pass reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportSummary {
    /// Calls made to the reporter.
    pub batches: u64,
    /// Blocks reported.
    pub blocks: u64,
    /// Pages in them.
    pub pages: u64,
}

/// Reporting's state and its counters since the allocator was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportingStats {
    /// The reporting order while a reporter is registered.
    pub order: Option<Order>,
    /// Free pages reported and not handed out since, all zones.
    pub reported_pages: u64,
    /// Passes run (`report_free_pages` calls that got to work).
    pub passes: u64,
    /// Calls made to reporters.
    pub batches: u64,
    /// Blocks reported, counted once per report.
    pub blocks: u64,
    /// Pages in them.
    pub pages: u64,
    /// Batches refused by the reporter.
    pub refused: u64,
    /// Batches whose reporter panicked.
    pub panicked: u64,
}

/// Clears the running flag when a pass ends, by any way out.
struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// How a batch's report went.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Accepted,
    Refused,
    Panicked,
}

impl<B: Backend> ZoneAllocator<B> {
    /// `page_reporting_register()`: from now on free blocks of at least
    /// `cfg.order` are reported to `reporter` by each pass, `cfg.capacity` at a
    /// time. Nothing is reported yet.
    ///
    /// A set-up call: it allocates what the passes use, once (each zone's bitmap
    /// of reported memory and room for a batch in flight, and the batch handed
    /// to the reporter), so that a pass makes no heap call.
    /// `unregister_page_reporting` frees it.
    ///
    /// # Errors
    /// `AlreadyRegistered`; `InvalidOrder` for an order above `max_order`;
    /// `InvalidCapacity`; `NoDiscard` or `Poisoning` for a `Reporter::Backend`
    /// whose backend cannot discard, or whose discarded pages would fail the
    /// poison check.
    pub fn register_page_reporting(
        &self,
        reporter: Reporter,
        cfg: ReportingConfig,
    ) -> Result<(), ReportingError> {
        let order = cfg.order.unwrap_or(self.config.pageblock_order);
        if order > self.config.max_order {
            return Err(ReportingError::InvalidOrder(order));
        }
        if !(1..=PAGE_REPORTING_CAPACITY_MAX).contains(&cfg.capacity) {
            return Err(ReportingError::InvalidCapacity(cfg.capacity));
        }
        if matches!(reporter, Reporter::Backend) {
            if !self.backend.can_discard() {
                return Err(ReportingError::NoDiscard);
            }
            let d = self.config.debug;
            if d.poison && !d.init_on_free {
                return Err(ReportingError::Poisoning);
            }
        }
        let mut reg = self.reporting.registered.lock();
        if reg.is_some() {
            return Err(ReportingError::AlreadyRegistered);
        }
        *self.reporting.batch.lock() = Vec::with_capacity(cfg.capacity);
        for z in self.zones.iter() {
            let mut zl = z.lock();
            zl.area
                .report
                .start(order, z.start_pfn, z.spanned, cfg.capacity);
            z.counters.nr_reported.set(0);
            // What is free already waits for the first pass.
            z.counters.report_pending.store(true, Ordering::Relaxed);
        }
        *reg = Some(Registered {
            how: reporter,
            order,
            capacity: cfg.capacity,
            epoch: self.reporting.epochs.fetch_add(1, Ordering::Relaxed),
        });
        Ok(())
    }

    /// `page_reporting_unregister()`: no more reports. What was reported stays
    /// given back (its memory reads as zeroes when reused), but no longer counts
    /// in `reported_pages`. A pass under way finishes its current batch.
    ///
    /// # Errors
    /// `NotRegistered`.
    pub fn unregister_page_reporting(&self) -> Result<(), ReportingError> {
        let mut reg = self.reporting.registered.lock();
        if reg.take().is_none() {
            return Err(ReportingError::NotRegistered);
        }
        *self.reporting.batch.lock() = Vec::new();
        for z in self.zones.iter() {
            let mut zl = z.lock();
            zl.area.report.stop();
            z.counters.nr_reported.set(0);
            z.counters.report_pending.store(false, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Whether a free has left an unreported block of the reporting order on the
    /// lists since the last pass (a reporter is registered, and a pass would find
    /// work). Reads one flag per zone, no lock.
    pub fn page_reporting_pending(&self) -> bool {
        self.zones
            .iter()
            .any(|z| z.counters.report_pending.load(Ordering::Relaxed))
    }

    /// Reporting's order, counters, and the pages reported now.
    pub fn page_reporting_stats(&self) -> ReportingStats {
        let r = &self.reporting;
        ReportingStats {
            order: r.registered.lock().as_ref().map(|g| g.order),
            reported_pages: self
                .zones
                .iter()
                .map(|z| z.counters.nr_reported.get())
                .sum(),
            passes: r.passes.get(),
            batches: r.batches.get(),
            blocks: r.blocks.get(),
            pages: r.pages.get(),
            refused: r.refused.get(),
            panicked: r.panicked.get(),
        }
    }

    /// `page_reporting_process()`: one pass over every zone, reporting every free
    /// block of at least the reporting order that is not reported yet, in batches
    /// of up to the capacity. A zone whose free pages are within `capacity`
    /// blocks of its low watermark is passed over, as in Linux.
    ///
    /// # Errors
    /// `NotRegistered`; `Busy` while another pass runs (or from inside a
    /// reporter); `Refused` and `OwnerPanicked` when the reporter refused or
    /// panicked on a batch, which went back unreported (what earlier batches
    /// reported stays reported).
    pub fn report_free_pages(&self) -> Result<ReportSummary, ReportingError> {
        let reg = self
            .reporting
            .registered
            .lock()
            .clone()
            .ok_or(ReportingError::NotRegistered)?;
        if self.reporting.running.swap(true, Ordering::Acquire) {
            return Err(ReportingError::Busy);
        }
        let _running = Running(&self.reporting.running);
        self.reporting.passes.inc(1);
        // The registration's buffer, for this pass alone.
        let mut batch = core::mem::take(&mut *self.reporting.batch.lock());
        let mut sum = ReportSummary::default();
        let outcome = self
            .zones
            .iter()
            .try_for_each(|z| self.report_zone(z, &reg, &mut batch, &mut sum));
        let mut slot = self.reporting.batch.lock();
        if slot.capacity() == 0 {
            // Back for the next pass (or, if the reporter was unregistered
            // meanwhile, until the next registration replaces it).
            *slot = batch;
        }
        // Else registered anew meanwhile (from the reporter, say): the new
        // registration's buffer stays, and this pass's old one is freed with it.
        drop(slot);
        outcome.map(|()| sum)
    }

    /// `page_reporting_process_zone()`.
    /// `batch`: the registration's buffer (see `ReportingState::batch`); a batch
    /// holds no more than it has room for.
    fn report_zone(
        &self,
        z: &Zone,
        reg: &Registered,
        batch: &mut Vec<(Pfn, Order)>,
        sum: &mut ReportSummary,
    ) -> Result<(), ReportingError> {
        let r = reg.order;
        let cap = reg.capacity.min(batch.capacity());
        let mut budget = None;
        loop {
            batch.clear();
            let current = self
                .reporting
                .registered
                .lock()
                .as_ref()
                .is_some_and(|g| g.epoch == reg.epoch);
            if !current {
                // Unregistered (or registered anew) since the pass began.
                return Ok(());
            }
            {
                let mut zl = z.lock();
                if zl.area.report.order != r.0 {
                    return Ok(());
                }
                let budget = budget.get_or_insert_with(|| {
                    z.counters.report_pending.store(false, Ordering::Relaxed);
                    (z.nr_free_pages() >> r.0) + 1
                });
                if *budget == 0 {
                    return Ok(());
                }
                let gate = z.wmark(Wmark::Low) + ((cap as u64) << r.0);
                if z.nr_free_pages() < gate {
                    return Ok(());
                }
                let min = z.wmark(Wmark::Min);
                let t = &z.frames;
                'lists: for o in r.0..=z.max_order.0 {
                    for mt in 0..MIGRATE_TYPES {
                        if mt == Migratetype::Isolate.idx() {
                            continue;
                        }
                        let list = zl.area.lists[o as usize][mt];
                        for idx in list.iter(t) {
                            if batch.len() as u64 >= (*budget).min(cap as u64) {
                                break 'lists;
                            }
                            let pfn = z.pfn_of(idx);
                            if !zl.area.report.all_set(z.start_pfn, pfn, Order(o)) {
                                batch.push((pfn, Order(o)));
                            }
                        }
                    }
                }
                // Take them off, each as `__isolate_free_page()` would: not below
                // the min watermark.
                let mut free = z.nr_free_pages();
                let mut kept = 0;
                for k in 0..batch.len() {
                    let (pfn, o) = batch[k];
                    if free < min + o.nr_pages() {
                        break;
                    }
                    free -= o.nr_pages();
                    let idx = z.idx(pfn);
                    if !zl.area.report.hold(idx) {
                        break;
                    }
                    let mt = z.blocks.migratetype(pfn);
                    zl.del_from_free_list(pfn, o, mt);
                    zl.account_freepages(-(o.nr_pages() as i64), mt);
                    t.set_word(idx, Word::frozen(o));
                    batch[kept] = (pfn, o);
                    kept += 1;
                }
                batch.truncate(kept);
                *budget -= (batch.len() as u64).min(*budget);
            }
            if batch.is_empty() {
                return Ok(());
            }
            let outcome = self.call_reporter(&reg.how, batch);
            self.put_back(z, r, batch, outcome == Outcome::Accepted);
            let rs = &self.reporting;
            rs.batches.inc(1);
            match outcome {
                Outcome::Accepted => {
                    let pages: u64 = batch.iter().map(|&(_, o)| o.nr_pages()).sum();
                    sum.batches += 1;
                    sum.blocks += batch.len() as u64;
                    sum.pages += pages;
                    rs.blocks.inc(batch.len() as u64);
                    rs.pages.inc(pages);
                }
                Outcome::Refused => {
                    rs.refused.inc(1);
                    return Err(ReportingError::Refused);
                }
                Outcome::Panicked => {
                    rs.panicked.inc(1);
                    return Err(ReportingError::OwnerPanicked);
                }
            }
        }
    }

    /// Tells the reporter of `batch`, no lock held.
    fn call_reporter(&self, how: &Reporter, batch: &[(Pfn, Order)]) -> Outcome {
        let r = crate::hook::call(|| match how {
            Reporter::Backend => batch
                .iter()
                .all(|&(p, o)| self.backend.discard_pages(p, o.nr_pages())),
            Reporter::Hook(h) => h.report(batch).is_ok(),
        });
        match r {
            Ok(true) => Outcome::Accepted,
            Ok(false) => Outcome::Refused,
            Err(_) => Outcome::Panicked,
        }
    }

    /// `page_reporting_drain()`: puts `batch` back on the lists (merging, at the
    /// tails), marked reported if `reported`.
    fn put_back(&self, z: &Zone, r: Order, batch: &[(Pfn, Order)], reported: bool) {
        let mut zl = z.lock();
        // Putting a block back is no new free: the pending flag stays as it was.
        let pending = z.counters.report_pending.load(Ordering::Relaxed);
        for &(pfn, o) in batch {
            let idx = z.idx(pfn);
            debug_assert_eq!(z.frames.word(idx), Word::frozen(o));
            let fl = &mut zl.area.report.in_flight;
            if let Some(k) = fl.iter().position(|&i| i == idx) {
                fl.swap_remove(k);
            }
            zl.free_block_locked(pfn, o, true);
            if reported && zl.area.report.order == r.0 {
                // Each unit of the block is marked only where it now lies in a free
                // block of at least the reporting order: a block larger than a
                // pageblock whose pageblocks changed type meanwhile (one isolated)
                // went back in parts that cannot merge.
                for k in 0..1u64 << (o.0 - r.0) {
                    let u = pfn.add(k << r.0);
                    if zl.free_block_containing(u).is_some_and(|(_, fo)| fo >= r) {
                        let n = zl.area.report.set(z.start_pfn, u, r);
                        z.counters.nr_reported.add((n << r.0) as i64);
                    }
                }
            }
        }
        z.counters.report_pending.store(pending, Ordering::Relaxed);
    }
}

/// A thread that runs a reporting pass when a free has left something to report,
/// at most once per delay: Linux's delayed work item. Stops (and joins its
/// thread) when dropped, or when the allocator is gone.
#[cfg(all(feature = "std", not(loom)))]
pub struct PageReportingWorker {
    thread: crate::hook::Background,
}

#[cfg(all(feature = "std", not(loom)))]
impl PageReportingWorker {
    /// Starts the worker for `za`, waking every `delay` and running a pass when
    /// `page_reporting_pending()` says so. The worker holds only a weak
    /// reference: dropping the last `Arc` of the allocator ends it.
    ///
    /// # Errors
    /// The operating system's refusal to start a thread.
    pub fn spawn<B: Backend + 'static>(
        za: &Arc<ZoneAllocator<B>>,
        delay: core::time::Duration,
    ) -> std::io::Result<PageReportingWorker> {
        let weak = Arc::downgrade(za);
        let t = crate::hook::Background::spawn("page-reporting", move |stop| loop {
            std::thread::park_timeout(delay);
            if stop.load(std::sync::atomic::Ordering::Acquire) {
                return;
            }
            let Some(za) = weak.upgrade() else { return };
            if za.page_reporting_pending() {
                // A refusal or a panic ends this pass; the next free tries again.
                let _ = za.report_free_pages();
            }
        })?;
        Ok(PageReportingWorker { thread: t })
    }

    /// Whether the worker's thread runs: `false` once it has ended, and in the
    /// child of a `fork` (which has no copy of it; the child may `spawn` its
    /// own).
    pub fn is_running(&self) -> bool {
        self.thread.is_running()
    }
}
