//! The allocator: `ZoneAllocator`, its construction, zonelists and watermarks.
//!
//! The allocator layer, above the per-CPU lists and the state it owns (`debug`,
//! `compact_state`, `cma_state`, `reporting_state`, `local_state`,
//! `stack_limits`). `ZoneAllocator` owns every zone, builds each node's zonelist
//! (local zones highest first, then the other nodes'), sets the watermarks,
//! lowmem reserves and per-CPU list sizes as Linux does, and answers the zone
//! layout queries. Setting the per-CPU sizes takes each CPU's pcp lock in turn
//! (and the zone lock under it where a list is left too long); no lock is held
//! across zones.
//!
//! Its paths live beside it, each an `impl` block of its own in the same layer:
//! `allocate` (`alloc_pages`), `free` (`free_pages`, references, `split_page`),
//! `drain` (per-CPU list maintenance) and `fast` (the per-CPU stacks in front of
//! the lists). Public API here: building (`new`, `with_arena`, `with_backend`,
//! `setup_watermarks`), the zone layout queries, the current CPU, and fault
//! injection. The other tasks live in `owned`, `contig`, `page_frag`, `stats`
//! and `check` (see the crate documentation's map).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ptr::NonNull;

use crate::backend::{AbstractFrames, Backend};
use crate::config::{Config, ConfigError};
use crate::debug::DebugState;
use crate::fault::FaultSite;
use crate::frame::TableSource;
use crate::pcp::{zone_batchsize, zone_highsize, MIN_PERCPU_PAGELIST_HIGH_FRACTION};
use crate::sync::Ordering;
use crate::types::Wmark;
use crate::types::{Pfn, ZoneId, ZoneType, MAX_NR_ZONES};
use crate::zone::Zone;

/// A request's preferred zone (index into `zones`) and its nofragment choice.
type Preferred = (usize, bool);

/// A zoned buddy page allocator over the frames described by a `Config`.
pub struct ZoneAllocator<B: Backend = AbstractFrames> {
    /// This allocator's place in fork's registry (see `fork`); the first field,
    /// so that it is dropped (unregistered) before anything it points at.
    #[cfg(not(loom))]
    _fork: crate::fork::Registration,
    pub(crate) config: Config,
    /// Every zone of every node, node by node, lowest zone type first.
    pub(crate) zones: Box<[Zone]>,
    /// Populated zones as `(start_pfn, end_pfn, zone index)`, sorted by start.
    lookup: Box<[(u64, u64, usize)]>,
    /// Per node: zone indices in fallback order.
    pub(crate) zonelists: Box<[Box<[usize]>]>,
    /// Per node: the zone index of each zone type present.
    node_zones: Box<[[Option<usize>; MAX_NR_ZONES]]>,
    /// Per node and highest zone type a request may use: its preferred zone (the
    /// first eligible one of the zonelist) and whether it should rather spill into
    /// DMA32 than fragment it (`alloc_flags_nofragment()`). Fixed at construction.
    pub(crate) preferred: Box<[[Option<Preferred>; MAX_NR_ZONES]]>,
    /// `alloc_pages`/`free_pages` try the per-CPU stacks first (see `fast`):
    /// the process can use them, the configuration allows them, and no debug
    /// mode or `cpu_id` hook is set.
    pub(crate) fast: bool,
    /// The zones' stacks are pinned (see `stacks`): `alloc_pages_pinned` and
    /// `free_pages_pinned` use them; `alloc_pages` and `free_pages` do not.
    pub(crate) pinned: bool,
    /// `fast`, and no fault site armed (`inject_faults` keeps it): the one load
    /// `alloc_pages` tests before its stack.
    pub(crate) fast_alloc: core::sync::atomic::AtomicBool,
    /// Per highest zone type a request may use: node 0's preferred zone (its index;
    /// `u8::MAX` for none), the one zone whose stacks `alloc_pages` pops from
    /// where every CPU is on node 0 (`single_node`).
    pub(crate) fast_zone: [u8; MAX_NR_ZONES],
    /// Every CPU is on node 0 (one node, or `cpu_to_node` all zeros): `alloc_fast`
    /// needs no CPU to pick its zone.
    pub(crate) single_node: bool,
    /// Every `LocalCache` holding blocks of its own (where `fast` is off), so that
    /// drains and the slow path reach what idle owners hold.
    pub(crate) caches:
        Box<crate::sync::Lock<Vec<alloc::sync::Weak<crate::local_state::CacheShared>>>>,
    /// `min_free_kbytes` in force, and whether it was given (`Some`) rather than
    /// computed from the zone sizes (Linux's `user_min_free_kbytes`), which a
    /// resize after offlining or onlining recomputes.
    min_free_kbytes: core::sync::atomic::AtomicU64,
    min_free_kbytes_given: bool,
    pub(crate) backend: B,
    pub(crate) debug: DebugState,
    /// Compaction: per-zone scanner state, the migrator, tunables, counters.
    pub(crate) compact: Box<crate::compact_state::CompactState>,
    /// Free page reporting: the reporter and its counters (see `reporting`).
    pub(crate) reporting: Box<crate::reporting_state::ReportingState>,
    /// Reclaim: the shrinkers, kswapd's wake-ups, the counters (see `shrinker`,
    /// `reclaim`).
    pub(crate) reclaim: Box<crate::shrinker::ReclaimState>,
    /// Contiguous memory areas (see `cma`).
    pub(crate) cma: crate::cma_state::CmaState,
    /// Memory arriving (`add_memory`), one call at a time. Process context
    /// only; no owner code runs under it.
    pub(crate) hotplug: Box<crate::sync::Lock<()>>,
}

impl ZoneAllocator<AbstractFrames> {
    /// An allocator over abstract frames (no memory behind them).
    ///
    /// # Errors
    /// The configuration's first problem (see `Config::validate`).
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, Gfp, Order, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let pfn = za.alloc_pages(Gfp::KERNEL, Order(3)).unwrap();
    /// za.free_pages(pfn, Order(3)).unwrap();
    /// // Freed order-3 blocks rest on this CPU's list until drained.
    /// assert_eq!(za.nr_free_pages() + za.nr_pcp_pages(), za.managed_pages());
    /// ```
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        Self::with_backend(config, AbstractFrames)
    }
}

#[cfg(feature = "std")]
impl ZoneAllocator<crate::arena::Arena> {
    /// An allocator over a freshly mapped arena: every frame has a writable page.
    ///
    /// # Errors
    /// The configuration's first problem, or `ConfigError::Backend` if the mapping
    /// fails.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{ArenaOptions, Config, Gfp, Order, ZoneAllocator};
    /// let za = ZoneAllocator::with_arena(Config::with_bytes(16 << 20), ArenaOptions::default()).unwrap();
    /// let mut block = za.alloc_block(Gfp::KERNEL | Gfp::ZERO, Order(1)).unwrap();
    /// let bytes = block.bytes_mut().unwrap();
    /// assert!(bytes.iter().all(|&b| b == 0));
    /// bytes[0] = 42;
    /// ```
    pub fn with_arena(
        config: Config,
        opts: crate::arena::ArenaOptions,
    ) -> Result<Self, ConfigError> {
        let arena = crate::arena::Arena::new(&config, opts)?;
        Self::with_backend(config, arena)
    }
}

impl<B: Backend> ZoneAllocator<B> {
    /// An allocator over `backend`, its frame tables from the allocator's own
    /// memory: with `std` on Linux a sparse anonymous mapping, where sections
    /// with no memory cost nothing; elsewhere the global heap (see `memmap`).
    ///
    /// # Errors
    /// The configuration's first problem (see `Config::validate`), or
    /// `ConfigError::Metadata` when the tables' memory cannot be had.
    pub fn with_backend(config: Config, backend: B) -> Result<Self, ConfigError> {
        Self::build(config, backend, &mut TableSource::Own)
    }

    /// An allocator over `backend` whose frame tables live where `memmap` puts
    /// them: memory a kernel carved from the frames it manages (as memblock
    /// does), or address space it maps section by section (as Linux's vmemmap).
    /// With it, construction needs the heap only for the allocator's small
    /// fixed structures (zones, per-CPU slots, pageblock bits), never for
    /// per-frame metadata.
    ///
    /// # Errors
    /// As `with_backend`; `ConfigError::Metadata` when `memmap` cannot reserve or
    /// back a table.
    pub fn with_memmap(
        config: Config,
        backend: B,
        memmap: &mut dyn crate::memmap::MemMap,
    ) -> Result<Self, ConfigError> {
        Self::build(config, backend, &mut TableSource::Given(memmap))
    }

    fn build(config: Config, backend: B, src: &mut TableSource<'_>) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut zones = Vec::new();
        let mut node_zones = Vec::new();
        let mut present = Vec::new();
        for (nid, node) in config.nodes.iter().enumerate() {
            let mut nz = [None; MAX_NR_ZONES];
            for zc in &node.zones {
                let id = ZoneId {
                    node: nid as u16,
                    zone_type: zc.zone_type,
                };
                nz[zc.zone_type.idx()] = Some(zones.len());
                zones.push(Zone::new(id, zones.len(), zc, &config, src)?);
                present.push(zc.present_ranges());
            }
            node_zones.push(nz);
        }
        for z in zones.iter_mut() {
            z.boost_factor = config.watermark_boost_factor;
        }
        crate::cma_state::mark_areas(&config.cma, &mut zones);
        for (z, present) in zones.iter().zip(&present) {
            z.lock().release_initial_frames(present);
        }
        drop(present);
        // The per-CPU stacks: with restartable sequences where the process has
        // them and the CPU is the operating system's; pinned where a platform
        // can make another CPU pass a barrier (see `stacks`).
        let stacks = config.pcp.enabled
            && config.pcp.rseq
            && config.cpu_id.is_none()
            && !DebugState::new(config.debug, None).touches_pages();
        let pinned = stacks && config.platform.is_some_and(|p| p.can_sync_cpu());
        let mut fast = stacks && config.platform.is_none();
        if fast || pinned {
            let mut built = true;
            for z in zones.iter_mut() {
                built &= crate::stack_limits::build_stacks(z, config.nr_cpus, pinned);
            }
            if !built {
                for z in zones.iter_mut() {
                    z.stacks = crate::stacks::Stacks::none();
                }
                fast = false;
            }
        }
        let pinned = pinned && zones.iter().all(|z| z.stacks.on());
        let mut lookup: Vec<(u64, u64, usize)> = zones
            .iter()
            .filter(|z| z.spanned > 0)
            .map(|z| (z.start_pfn, z.end_pfn(), z.index))
            .collect();
        lookup.sort_unstable();
        let nr_nodes = config.nodes.len();
        // Nodes nearest first, by the distance table (ties by node number, as
        // `build_zonelists()`'s `find_next_best_node()` breaks them).
        let zonelists: Box<[Box<[usize]>]> = (0..nr_nodes)
            .map(|nid| {
                let mut order: Vec<usize> = (0..nr_nodes).collect();
                order.sort_by_key(|&n| (config.distance(nid as u16, n as u16), n != nid, n));
                order
                    .into_iter()
                    .flat_map(|n| {
                        let nz = node_zones[n];
                        ZoneType::ALL.iter().rev().filter_map(move |t| nz[t.idx()])
                    })
                    .filter(|&zi| zones[zi].present > 0)
                    .collect::<Vec<_>>()
                    .into_boxed_slice()
            })
            .collect();
        let preferred = zonelists
            .iter()
            .map(|list| {
                ZoneType::ALL.map(|highest| {
                    let first = list
                        .iter()
                        .copied()
                        .find(|&zi| zones[zi].zone_type() <= highest)?;
                    let z = &zones[first];
                    let nofragment = z.zone_type() == ZoneType::Normal
                        && node_zones[z.id.node as usize][ZoneType::Dma32.idx()]
                            .is_some_and(|zi| zones[zi].present > 0);
                    Some((first, nofragment))
                })
            })
            .collect::<Box<[_]>>();
        let fast_zone = ZoneType::ALL.map(|t| {
            preferred
                .first()
                .and_then(|p: &[Option<Preferred>; MAX_NR_ZONES]| p[t.idx()])
                .and_then(|(zi, _)| u8::try_from(zi).ok())
                .filter(|&zi| zi != u8::MAX)
                .unwrap_or(u8::MAX)
        });
        let debug = config.debug;
        let platform = config.platform;
        let single_node = nr_nodes == 1 || config.cpu_to_node.iter().all(|&n| n == 0);
        let compact = crate::compact_state::CompactState::new(&zones);
        let cma = crate::cma_state::CmaState::new(&config.cma, &zones);
        // The parts fork's handlers lock live on the heap, registered at
        // their final addresses (moving the allocator does not move them).
        let zones = zones.into_boxed_slice();
        // Drains on an interrupt's slow path walk it.
        let caches = Box::new(crate::sync::Lock::new(Vec::new(), platform));
        let compact = Box::new(compact);
        let reporting = Box::new(crate::reporting_state::ReportingState::new());
        let reclaim = Box::new(crate::shrinker::ReclaimState::new(nr_nodes, platform));
        let hotplug = Box::new(crate::sync::Lock::new((), None));
        let debug = DebugState::new(debug, platform);
        #[cfg(not(loom))]
        let fork =
            crate::fork::Registration::new(crate::fork::ForkPtrs::of(&crate::fork::ForkParts {
                zones: &zones,
                compact: &compact,
                reporting: &reporting,
                reclaim: &reclaim,
                cma: &cma.areas,
                hotplug: &hotplug,
                caches: &caches,
                bad_pages: &debug.bad_pages_lock,
            }));
        let mut za = ZoneAllocator {
            #[cfg(not(loom))]
            _fork: fork,
            min_free_kbytes: core::sync::atomic::AtomicU64::new(0),
            min_free_kbytes_given: false,
            config,
            zones,
            lookup: lookup.into_boxed_slice(),
            zonelists,
            node_zones: node_zones.into_boxed_slice(),
            preferred,
            fast,
            pinned,
            fast_alloc: core::sync::atomic::AtomicBool::new(fast),
            fast_zone,
            single_node,
            caches,
            backend,
            debug,
            compact,
            reporting,
            reclaim,
            cma,
            hotplug,
        };
        za.setup_watermarks(za.config.min_free_kbytes)?;
        za.debug.init_free_memory(&za.backend, &za.zones);
        Ok(za)
    }

    /// The parts fork's handlers lock and fix up.
    #[cfg(not(loom))]
    fn fork_parts(&self) -> crate::fork::ForkParts<'_> {
        crate::fork::ForkParts {
            zones: &self.zones,
            compact: &self.compact,
            reporting: &self.reporting,
            reclaim: &self.reclaim,
            cma: &self.cma.areas,
            hotplug: &self.hotplug,
            caches: &self.caches,
            bad_pages: &self.debug.bad_pages_lock,
        }
    }

    /// Makes the allocator ready to be copied by `fork()` (`pthread_atfork`'s
    /// prepare handler): takes every lock a child could need, in the order the
    /// allocator's own code nests them (hotplug, the reporting registration,
    /// each CMA area's serialisation, each zone's compaction lock, the
    /// `LocalCache` registry, the shrinkers, the migrator slot, then per zone
    /// every CPU's per-CPU lists (stopping its per-CPU stacks) and the zone
    /// lock, then the locks taken under those), and keeps them held. Calls in
    /// other threads wait until [`postfork_parent`](Self::postfork_parent).
    ///
    /// With `std` on Unix every allocator is registered at construction and
    /// one `pthread_atfork` registration runs this and the `postfork_*` calls
    /// around every `fork()` of the process: do not call them yourself there
    /// (the second prefork would wait for the first). They are for a host with
    /// a fork of its own (`no_std`), which calls this before it copies the
    /// address space, with interrupts that could call the allocator kept off
    /// until the postfork call, and never from inside one of the allocator's
    /// callbacks (a `Migrate`, `Shrinker` or `PageReporter`), whose caller holds
    /// some of these locks.
    #[cfg(not(loom))]
    pub fn prefork(&self) {
        self.fork_parts().prefork();
    }

    /// In the parent after `fork()`: releases what [`prefork`](Self::prefork)
    /// took, in the reverse order, and lets the per-CPU stacks it stopped run
    /// again.
    ///
    /// # Safety
    /// `prefork` was called on this allocator by this thread, and neither
    /// postfork call since.
    #[cfg(not(loom))]
    #[allow(unsafe_code)]
    pub unsafe fn postfork_parent(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.fork_parts().postfork_parent() }
    }

    /// In the child after `fork()`, before anything else uses the allocator:
    /// releases what [`prefork`](Self::prefork) took and gives back what
    /// belonged to the parent's other threads, which do not exist in the child.
    /// Per-CPU stacks' stop and busy marks are cleared; frees deferred by
    /// `free_pages_nolock` are merged; a block caught between two states (frozen
    /// by a free not yet on a list, or taken off a per-CPU list or stack by an
    /// allocation not yet handed out) goes back to the buddy lists, once; a page
    /// a multi-page free had claimed stays allocated; reporting, reclaim and
    /// shrinker passes are counted out; kswapd's registration is cleared, so the
    /// child may start its own worker ([`KswapdWorker`](crate::KswapdWorker)
    /// and [`PageReportingWorker`](crate::PageReportingWorker) handles inherited
    /// from the parent say they are not running). Blocks the other threads had
    /// allocated stay allocated: the child holds no handle to free them.
    ///
    /// # Safety
    /// `prefork` was called on this allocator in the parent by the thread that
    /// then forked this process (the one calling this), and no postfork call
    /// was made in this process since.
    #[cfg(not(loom))]
    #[allow(unsafe_code)]
    pub unsafe fn postfork_child(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.fork_parts().postfork_child() }
    }

    /// Bytes of per-frame metadata backed by memory now: the sections of each
    /// zone's frame table that hold (or held) memory, and its tail (see
    /// `memmap`); the whole table where it came from the global heap.
    pub fn metadata_bytes(&self) -> u64 {
        self.zones
            .iter()
            .map(|z| z.frames.backed_bytes() as u64)
            .sum()
    }

    /// The configuration the allocator was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The memory backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// `min_free_kbytes` in force.
    pub fn min_free_kbytes(&self) -> u64 {
        self.min_free_kbytes.load(Ordering::Relaxed)
    }

    // -------------------------------------------------------------------------
    // Set-up: watermarks and lowmem reserves
    // -------------------------------------------------------------------------

    /// Sets `min_free_kbytes` (`None`: Linux's default from the zone sizes) and
    /// recomputes every zone's watermarks and lowmem reserves
    /// (`__setup_per_zone_wmarks`, `setup_per_zone_lowmem_reserve`).
    ///
    /// # Errors
    /// `ConfigError::MinFreeKbytes` above `MIN_FREE_KBYTES_MAX`; nothing changes then.
    pub fn setup_watermarks(&mut self, min_free_kbytes: Option<u64>) -> Result<(), ConfigError> {
        if let Some(m) = min_free_kbytes.filter(|&m| m > crate::config::MIN_FREE_KBYTES_MAX) {
            return Err(ConfigError::MinFreeKbytes(m));
        }
        let mfk = min_free_kbytes.unwrap_or_else(|| self.default_min_free_kbytes());
        self.min_free_kbytes_given = min_free_kbytes.is_some();
        self.min_free_kbytes.store(mfk, Ordering::Relaxed);
        self.spread_watermarks(mfk);
        Ok(())
    }

    /// `calculate_min_free_kbytes()`: `sqrt(lowmem_kbytes * 16)`, within 128 KiB
    /// and 256 MiB.
    fn default_min_free_kbytes(&self) -> u64 {
        let kib_per_page = self.config.page_size() / 1024;
        let lowmem_kbytes = self.lowmem_pages().saturating_mul(kib_per_page);
        isqrt(lowmem_kbytes.saturating_mul(16)).clamp(128, 262_144)
    }

    /// Managed pages (offline ones excluded) of the zones below HighMem.
    fn lowmem_pages(&self) -> u64 {
        self.zones
            .iter()
            .filter(|z| !matches!(z.zone_type(), ZoneType::HighMem | ZoneType::Movable))
            .map(|z| z.managed_now())
            .sum()
    }

    /// Recomputes `min_free_kbytes` (unless it was given), every zone's
    /// watermarks, lowmem reserves and per-CPU list sizes from the managed pages
    /// now: after memory went offline or came back (Linux's
    /// `init_per_zone_wmark_min()` and `zone_pcp_update()` from
    /// `online_pages()`/`offline_pages()`).
    pub(crate) fn resize_watermarks(&self) {
        let mfk = if self.min_free_kbytes_given {
            self.min_free_kbytes()
        } else {
            self.default_min_free_kbytes()
        };
        self.min_free_kbytes.store(mfk, Ordering::Relaxed);
        self.spread_watermarks(mfk);
    }

    /// `__setup_per_zone_wmarks()` and `setup_per_zone_lowmem_reserve()` for
    /// `min_free_kbytes` `mfk`, then `zone_pcp_update()`.
    fn spread_watermarks(&self, mfk: u64) {
        let lowmem_pages = self.lowmem_pages();
        let pages_min = mfk * 1024 / self.config.page_size();
        for z in self.zones.iter() {
            let managed = z.managed_now();
            let tmp = (pages_min * managed).checked_div(lowmem_pages).unwrap_or(0);
            let min = if matches!(z.zone_type(), ZoneType::HighMem | ZoneType::Movable) {
                (managed / 1024).clamp(32, 128)
            } else {
                tmp
            };
            let gap = (tmp >> 2).max(managed * self.config.watermark_scale_factor / 10_000);
            let marks = [min, min + gap, min + 2 * gap, min + 3 * gap];
            for (i, m) in marks.into_iter().enumerate() {
                z.watermark[i].store(m, Ordering::Relaxed);
            }
        }
        for nz in self.node_zones.iter() {
            for i in 0..MAX_NR_ZONES {
                let Some(zi) = nz[i] else { continue };
                let z = &self.zones[zi];
                let ratio = self.config.lowmem_reserve_ratio[i];
                let mut sum = 0;
                for j in 0..MAX_NR_ZONES {
                    let v = if j <= i {
                        0
                    } else {
                        sum += nz[j].map_or(0, |k| self.zones[k].managed_now());
                        if ratio == 0 || z.managed_now() == 0 {
                            0
                        } else {
                            sum / ratio
                        }
                    };
                    z.lowmem_reserve[j].store(v, Ordering::Relaxed);
                }
            }
        }
        self.zone_pcp_update();
    }

    /// `zone_set_pageset_high_and_batch()` for every zone and CPU.
    fn zone_pcp_update(&self) {
        let pc = &self.config.pcp;
        let cpus = self.config.nr_cpus as u64;
        for z in self.zones.iter() {
            let (batch, high_min, high_max) = if !pc.enabled {
                // Linux's boot pageset: high 0, batch 1, every free flushes.
                (1, 0, 0)
            } else {
                let batch = pc
                    .batch
                    .unwrap_or_else(|| zone_batchsize(z.managed_now(), self.config.page_size()))
                    .max(1);
                let managed = z.managed_now();
                let (min, max) = if pc.high_fraction >= MIN_PERCPU_PAGELIST_HIGH_FRACTION {
                    let h = zone_highsize(managed / pc.high_fraction, batch, cpus);
                    (h, h)
                } else {
                    (
                        zone_highsize(z.wmark(Wmark::Low), batch, cpus),
                        zone_highsize(managed / MIN_PERCPU_PAGELIST_HIGH_FRACTION, batch, cpus),
                    )
                };
                let min = pc.high_min.unwrap_or(min);
                let max = pc.high_max.unwrap_or(max).max(min);
                (batch, min, max)
            };
            for cpu in 0..z.pcp.len() {
                let mut p = z.pcp_lock_lists(cpu);
                p.pcp.batch = batch;
                p.pcp.high_min = high_min;
                p.pcp.high_max = high_max;
                p.pcp.high = p.pcp.high.clamp(high_min, high_max);
                // The stacks start again from their smallest limits, within the new
                // bound (stopped and empty while the lock is held, or pinned and
                // running: a push that finds more than its new limit flushes).
                crate::stack_limits::reset_limits(z, cpu, high_max);
                // Shrinking limits may leave too much on the lists.
                if p.pcp.count > p.pcp.high {
                    let todo = p.pcp.count - p.pcp.high;
                    p.free_bulk(todo, 0, pc.prefetch_buddy);
                }
            }
        }
    }

    // -------------------------------------------------------------------------
    // Lookup
    // -------------------------------------------------------------------------

    /// The zone whose span holds `pfn`.
    #[inline]
    pub(crate) fn zone_of(&self, pfn: Pfn) -> Option<&Zone> {
        let l = &self.lookup;
        let i = if l.len() <= 4 {
            l.iter().position(|&(s, e, _)| pfn.0 >= s && pfn.0 < e)?
        } else {
            let i = l.partition_point(|&(s, _, _)| s <= pfn.0).checked_sub(1)?;
            if pfn.0 >= l[i].1 {
                return None;
            }
            i
        };
        Some(&self.zones[l[i].2])
    }

    /// Node `nid`'s zonelist: its zones in fallback order.
    pub(crate) fn zonelist(&self, nid: u16) -> impl Iterator<Item = &Zone> {
        self.zonelists
            .get(nid as usize)
            .into_iter()
            .flat_map(|l| l.iter())
            .map(|&zi| &self.zones[zi])
    }

    /// The zone holding `pfn`, if any.
    pub fn zone_id_of(&self, pfn: Pfn) -> Option<ZoneId> {
        self.zone_of(pfn).map(|z| z.id)
    }

    /// The address of frame `pfn`'s page, if the backend gives frames addresses.
    pub fn page_address(&self, pfn: Pfn) -> Option<NonNull<u8>> {
        self.zone_of(pfn)?;
        self.backend.page_address(pfn)
    }

    /// Frames managed by the allocator (present frames of every zone, less those
    /// taken offline).
    pub fn managed_pages(&self) -> u64 {
        self.zones.iter().map(|z| z.managed_now()).sum()
    }

    /// Free frames on the buddy lists (isolated ones excluded), all zones.
    pub fn nr_free_pages(&self) -> u64 {
        self.zones.iter().map(|z| z.nr_free_pages()).sum()
    }

    /// Managed pages of node `nid` now.
    pub(crate) fn node_managed(&self, nid: u16) -> u64 {
        self.zones
            .iter()
            .filter(|z| z.id.node == nid)
            .map(|z| z.managed_now())
            .sum()
    }

    /// Watermarks of zone `id` as `[min, low, high, promo]` pages.
    pub fn watermarks(&self, id: ZoneId) -> Option<[u64; 4]> {
        let zi = self.node_zones.get(id.node as usize)?[id.zone_type.idx()]?;
        let z = &self.zones[zi];
        Some([
            z.wmark(Wmark::Min),
            z.wmark(Wmark::Low),
            z.wmark(Wmark::High),
            z.wmark(Wmark::Promo),
        ])
    }

    /// The zones, node by node: their ids, first frame, spanned and present frames.
    pub fn zones(&self) -> impl Iterator<Item = (ZoneId, Pfn, u64, u64)> + '_ {
        self.zones
            .iter()
            .map(|z| (z.id, Pfn(z.start_pfn), z.spanned, z.present))
    }

    // -------------------------------------------------------------------------
    // CPUs
    // -------------------------------------------------------------------------

    /// Whether `alloc_pages` and `free_pages` use the per-CPU stacks committed
    /// with restartable sequences (`PcpConfig::rseq`): the process has them
    /// (x86-64 Linux, glibc 2.35 or later with its rseq registration, the
    /// kernel's `membarrier` accepting `PRIVATE_EXPEDITED_RSEQ`), and the
    /// configuration allows them (per-CPU lists on, no `cpu_id` hook, no debug
    /// mode that touches pages). Otherwise every call takes the per-CPU lists'
    /// try-lock path.
    pub fn uses_cpu_stacks(&self) -> bool {
        self.fast
    }

    /// The CPU whose per-CPU lists this thread uses now. A `Config::cpu_id` hook
    /// that panics reads as CPU 0 (with `std`; see `Config::cpu_id`).
    #[inline]
    pub fn current_cpu(&self) -> usize {
        let id = if let Some(p) = self.config.platform {
            p.cpu_id()
        } else {
            match self.config.cpu_id {
                Some(f) => crate::hook::call(f).unwrap_or(0),
                None => os_cpu_id(),
            }
        };
        self.cpu_index(id)
    }

    /// The node of CPU `cpu` (`cpu_to_node()`, from `Config::cpu_to_node`).
    #[inline]
    pub fn cpu_to_node(&self, cpu: usize) -> u16 {
        self.config.node_of_cpu(cpu)
    }

    /// The node of the CPU this thread runs on (`numa_node_id()`): where
    /// `alloc_pages` starts.
    #[inline]
    pub fn numa_node_id(&self) -> u16 {
        self.cpu_to_node(self.current_cpu())
    }

    /// Maps any number to a CPU index; avoids a division in the common case.
    #[inline]
    pub(crate) fn cpu_index(&self, id: usize) -> usize {
        if id < self.config.nr_cpus {
            id
        } else {
            id % self.config.nr_cpus
        }
    }

    // -------------------------------------------------------------------------
    // Fault injection and bad pages
    // -------------------------------------------------------------------------

    /// Makes every `every`-th call at `site` fail (0 turns the site off): Linux's
    /// `fail_page_alloc`, to prove that every caller unwinds cleanly.
    pub fn inject_faults(&self, site: FaultSite, every: u64) {
        self.debug.faults.inject(site, every);
        // While a site is armed every allocation goes through the paths that
        // count the calls (the stacks would bypass them).
        self.fast_alloc.store(
            self.fast && !self.debug.faults.armed(),
            core::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Failures injected so far at `site`.
    pub fn faults_injected(&self, site: FaultSite) -> u64 {
        self.debug.faults.injected(site)
    }

    /// Blocks reported bad by poisoning (and taken out of circulation) so far.
    pub fn bad_page_reports(&self) -> Vec<crate::debug::BadPageReport> {
        self.debug.bad_pages()
    }
}

/// The OS's idea of the current CPU: glibc's rseq area where there is one (a plain
/// load, kept current by the kernel), else `sched_getcpu()`.
#[inline]
fn os_cpu_id() -> usize {
    #[cfg(all(feature = "std", target_os = "linux", not(any(loom, miri))))]
    {
        if let Some(c) = crate::os::rseq_cpu_id() {
            return c;
        }
        crate::os::sched_getcpu()
    }
    #[cfg(not(all(feature = "std", target_os = "linux", not(any(loom, miri)))))]
    0
}

/// Integer square root (`int_sqrt`), by Newton's method.
fn isqrt(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let mut x = n;
    let mut y = x.div_ceil(2);
    while y < x {
        x = y;
        y = (x + n / x) / 2;
    }
    x
}

#[cfg(test)]
mod tests {
    //! Small workloads over abstract frames, sized so that Miri can run them (the CI
    //! runs this module under `cargo miri test`): every allocation path, the guard
    //! flag, the multi-page frees, and two real threads racing on one block.

    use super::*;
    use crate::config::Config;
    use crate::error::FreeError;
    use crate::gfp::Gfp;
    use crate::types::Order;

    /// 256 frames in pageblocks of 32, blocks up to order 7: large enough for
    /// mobility grouping and for merges above pageblock order, at a quarter of the
    /// frames of 4 MiB, which Miri takes about six times as long to build and check.
    fn small() -> ZoneAllocator {
        ZoneAllocator::new(Config {
            nr_cpus: 2,
            min_free_kbytes: Some(0),
            max_order: Order(7),
            pageblock_order: Order(5),
            ..Config::with_bytes(1 << 20)
        })
        .unwrap()
    }

    #[track_caller]
    fn settled(za: &ZoneAllocator) {
        za.drain_all_pages();
        let r = za.check_invariants().unwrap();
        assert_eq!(r.allocated_pages, 0);
        assert_eq!(za.nr_free_pages(), za.managed_pages());
    }

    #[test]
    fn every_order_round_trips_and_a_second_free_is_refused() {
        let za = small();
        for o in 0..=za.config().max_order.0 {
            let order = Order(o);
            let p = za.alloc_pages(Gfp::KERNEL, order).unwrap();
            assert!(p.is_aligned(order));
            za.free_pages(p, order).unwrap();
            assert!(za.free_pages(p, order).is_err());
        }
        settled(&za);
    }

    #[test]
    fn guarded_blocks_answer_to_their_guard_alone() {
        let za = small();
        let g = za.alloc_block(Gfp::KERNEL, Order(2)).unwrap();
        let p = g.pfn();
        assert_eq!(za.free_pages(p, Order(2)), Err(FreeError::Guarded(p)));
        assert_eq!(za.get_page(p), Err(FreeError::Guarded(p)));
        drop(g);
        assert!(za.free_pages(p, Order(2)).is_err(), "the guard freed it");
        settled(&za);
    }

    #[test]
    fn multi_page_frees_take_pages_in_ascending_order() {
        let za = small();
        let head = za.alloc_pages(Gfp::KERNEL, Order(3)).unwrap();
        za.split_page(head, Order(3)).unwrap();
        let mut pages: Vec<Pfn> = (0..8).map(|i| head.add(i)).collect();
        pages.reverse();
        za.free_pages_bulk(&pages[..4]).unwrap();
        assert!(za.free_pages_bulk(&pages[..4]).is_err());
        za.free_contig_range(head, 4).unwrap();
        assert!(za.free_contig_range(head, 4).is_err());
        settled(&za);
    }

    #[test]
    fn two_threads_racing_to_free_one_block_have_one_winner() {
        let za = small();
        for round in 0..8u8 {
            let order = Order(round % 4);
            let p = za.alloc_pages(Gfp::KERNEL, order).unwrap();
            let wins: usize = std::thread::scope(|s| {
                let a = s.spawn(|| za.free_pages_on(0, p, order).is_ok() as usize);
                let b = s.spawn(|| za.free_pages_on(1, p, order).is_ok() as usize);
                a.join().unwrap() + b.join().unwrap()
            });
            assert_eq!(wins, 1, "round {round}");
        }
        settled(&za);
    }

    #[test]
    fn local_caches_on_two_threads_free_into_each_other() {
        let za = small();
        let (tx, rx) = std::sync::mpsc::channel::<Vec<Pfn>>();
        std::thread::scope(|s| {
            let za = &za;
            s.spawn(move || {
                let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap().with_batch(4);
                let got: Vec<Pfn> = (0..24).map(|_| c.alloc(Order(0)).unwrap()).collect();
                tx.send(got).unwrap();
            });
            s.spawn(move || {
                let mut c = za.local_cache_on(1, Gfp::KERNEL).unwrap().with_batch(4);
                for p in rx.recv().unwrap() {
                    c.free(p, Order(0)).unwrap();
                    assert!(c.free(p, Order(0)).is_err());
                }
            });
        });
        settled(&za);
    }

    #[test]
    fn per_cpu_lists_fill_and_flush_from_two_threads() {
        let za = small();
        std::thread::scope(|s| {
            for cpu in 0..2 {
                let za = &za;
                s.spawn(move || {
                    let got: Vec<Pfn> = (0..40)
                        .map(|_| za.alloc_pages_on(cpu, Gfp::KERNEL, Order(0)).unwrap())
                        .collect();
                    // Free on the other CPU's lists: cross-CPU frees.
                    for p in got {
                        za.free_pages_on(1 - cpu, p, Order(0)).unwrap();
                    }
                });
            }
        });
        settled(&za);
    }
}
