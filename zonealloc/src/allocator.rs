//! The allocator: nodes, zonelists, watermarks and the public page API.
//!
//! Top layer of the core. `ZoneAllocator` owns every zone, builds each node's zonelist
//! (local zones highest first, then the other nodes'), sets the watermarks and lowmem
//! reserves as Linux does, and implements `alloc_pages`, `free_pages`, `get_page`,
//! `put_page` and `split_page` on top of the buddy layer. It takes each zone's lock
//! for the duration of one buddy operation; no lock is held across zones.
//!
//! Public API here: building (`new`, `with_arena`, `with_backend`,
//! `setup_watermarks`), allocating and freeing single blocks and references, the
//! per-CPU list controls (drains, decay), fault injection and the zone layout
//! queries. The other tasks live in `owned`, `contig`, `page_frag`, `stats` and
//! `check` (see the crate documentation's map).
//!
//! # Allocation
//!
//! A fast pass walks the zonelist with the low watermark; a slow pass retries with
//! the min watermark and the reserves the request is entitled to (`__GFP_HIGH`,
//! non-blocking, `MEMALLOC`); then the highatomic reserves are released and a last
//! pass runs. Orders above `PAGE_ALLOC_COSTLY_ORDER` whose GFP may block compact
//! first, through the registered migrator (see `compaction`); a request that may
//! reclaim then asks the registered shrinkers for memory (direct reclaim, see
//! `shrinker`), and wakes kswapd (`reclaim`) on its way into the slow path. When
//! the last pass fails the request fails with `AllocError::NoMemory`.
//!
//! # Freeing and references
//!
//! An allocated block's head carries a reference count (1 after allocation).
//! `get_page` adds one, `put_page` and `free_pages` drop one, and the block is freed
//! when the count reaches zero. Each of these checks the frame's state and changes the
//! count in one compare-and-swap, so a bad call is refused with nothing changed and two
//! racing frees of one block can never both succeed.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ptr::NonNull;

use crate::backend::{AbstractFrames, Backend};
use crate::config::{Config, ConfigError};
use crate::debug::DebugState;
use crate::error::{AllocError, FreeError};
use crate::fault::FaultSite;
use crate::frame::{
    FrameState, Tag, Word, FLAG_CMA, FLAG_FRAG, FLAG_GUARDED, FLAG_ISOLATED, FLAG_LAZY,
    FLAG_MIGRATING, FLAG_VMALLOC, MIGRATING_BASE, REFCOUNT_MAX,
};
use crate::gfp::{AllocFlags, Gfp};
use crate::pcp::{
    count_zone_free, pcp_allowed_order, zone_batchsize, zone_highsize,
    MIN_PERCPU_PAGELIST_HIGH_FRACTION,
};
use crate::sync::{backoff, Ordering};
use crate::types::Wmark;
use crate::types::{Migratetype, Order, Pfn, ZoneId, ZoneType, MAX_NR_ZONES};
use crate::zone::{Zone, ZONE_BELOW_HIGH, ZONE_BOOSTED_WATERMARK};

/// A request's preferred zone (index into `zones`) and its nofragment choice.
type Preferred = (usize, bool);

/// A zoned buddy page allocator over the frames described by a `Config`.
pub struct ZoneAllocator<B: Backend = AbstractFrames> {
    pub(crate) config: Config,
    /// Every zone of every node, node by node, lowest zone type first.
    pub(crate) zones: Box<[Zone]>,
    /// Populated zones as `(start_pfn, end_pfn, zone index)`, sorted by start.
    lookup: Box<[(u64, u64, usize)]>,
    /// Per node: zone indices in fallback order.
    zonelists: Box<[Box<[usize]>]>,
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
    /// `fast`, and no fault site armed (`inject_faults` keeps it): the one load
    /// `alloc_pages` tests before its stack.
    pub(crate) fast_alloc: core::sync::atomic::AtomicBool,
    /// Per highest zone type a request may use: node 0's preferred zone (its index;
    /// `u8::MAX` for none), the one zone whose stacks `alloc_pages` pops from.
    pub(crate) fast_zone: [u8; MAX_NR_ZONES],
    /// Every `LocalCache` holding blocks of its own (where `fast` is off), so that
    /// drains and the slow path reach what idle owners hold.
    pub(crate) caches: crate::sync::Lock<Vec<alloc::sync::Weak<crate::local_state::CacheShared>>>,
    /// `min_free_kbytes` in force, and whether it was given (`Some`) rather than
    /// computed from the zone sizes (Linux's `user_min_free_kbytes`), which a
    /// resize after offlining or onlining recomputes.
    min_free_kbytes: core::sync::atomic::AtomicU64,
    min_free_kbytes_given: bool,
    pub(crate) backend: B,
    pub(crate) debug: DebugState,
    /// Compaction: per-zone scanner state, the migrator, tunables, counters.
    pub(crate) compact: crate::compact_state::CompactState,
    /// Free page reporting: the reporter and its counters (see `reporting`).
    pub(crate) reporting: crate::reporting_state::ReportingState,
    /// Reclaim: the shrinkers, kswapd's wake-ups, the counters (see `shrinker`,
    /// `reclaim`).
    pub(crate) reclaim: crate::shrinker::ReclaimState,
    /// Contiguous memory areas (see `cma`).
    pub(crate) cma: crate::cma_state::CmaState,
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
    /// An allocator over `backend`.
    ///
    /// # Errors
    /// The configuration's first problem (see `Config::validate`).
    pub fn with_backend(config: Config, backend: B) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut zones = Vec::new();
        let mut node_zones = Vec::new();
        for (nid, node) in config.nodes.iter().enumerate() {
            let mut nz = [None; MAX_NR_ZONES];
            for zc in &node.zones {
                let id = ZoneId {
                    node: nid as u16,
                    zone_type: zc.zone_type,
                };
                nz[zc.zone_type.idx()] = Some(zones.len());
                zones.push(Zone::new(
                    id,
                    zones.len(),
                    zc,
                    config.max_order,
                    config.pageblock_order,
                    config.mobility_grouping,
                    config.nr_cpus,
                    !config.cma.is_empty(),
                )?);
            }
            node_zones.push(nz);
        }
        for z in zones.iter_mut() {
            z.boost_factor = config.watermark_boost_factor;
        }
        crate::cma_state::mark_areas(&config.cma, &mut zones);
        for z in &zones {
            z.lock().release_initial_frames();
        }
        let mut fast = config.pcp.enabled
            && config.pcp.rseq
            && config.cpu_id.is_none()
            && !DebugState::new(config.debug).touches_pages();
        if fast {
            for z in zones.iter_mut() {
                fast &= crate::stack_limits::build_stacks(z, config.nr_cpus);
            }
            if !fast {
                for z in zones.iter_mut() {
                    z.stacks = crate::rseq::Stacks::none();
                }
            }
        }
        let mut lookup: Vec<(u64, u64, usize)> = zones
            .iter()
            .filter(|z| z.spanned > 0)
            .map(|z| (z.start_pfn, z.end_pfn(), z.index))
            .collect();
        lookup.sort_unstable();
        let nr_nodes = config.nodes.len();
        let zonelists: Box<[Box<[usize]>]> = (0..nr_nodes)
            .map(|nid| {
                let mut order: Vec<usize> = (0..nr_nodes).collect();
                order.sort_by_key(|&n| (n as isize - nid as isize).unsigned_abs());
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
        let compact = crate::compact_state::CompactState::new(&zones);
        let cma = crate::cma_state::CmaState::new(&config.cma, &zones);
        let mut za = ZoneAllocator {
            min_free_kbytes: core::sync::atomic::AtomicU64::new(0),
            min_free_kbytes_given: false,
            config,
            zones: zones.into_boxed_slice(),
            lookup: lookup.into_boxed_slice(),
            zonelists,
            node_zones: node_zones.into_boxed_slice(),
            preferred,
            fast,
            fast_alloc: core::sync::atomic::AtomicBool::new(fast),
            fast_zone,
            caches: crate::sync::Lock::new(Vec::new()),
            backend,
            debug: DebugState::new(debug),
            compact,
            reporting: crate::reporting_state::ReportingState::new(),
            reclaim: crate::shrinker::ReclaimState::new(nr_nodes),
            cma,
        };
        za.setup_watermarks(za.config.min_free_kbytes)?;
        za.debug.init_free_memory(&za.backend, &za.zones);
        Ok(za)
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
                let mut p = z.pcp_lock(cpu);
                p.pcp.batch = batch;
                p.pcp.high_min = high_min;
                p.pcp.high_max = high_max;
                p.pcp.high = p.pcp.high.clamp(high_min, high_max);
                // The stacks start again from their smallest limits, within the new
                // bound (they are stopped and empty while the lock is held).
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

    /// The state of frame `pfn`, or `None` if it is in no zone.
    pub fn frame_state(&self, pfn: Pfn) -> Option<FrameState> {
        let z = self.zone_of(pfn)?;
        Some(Self::head_word(z, z.idx(pfn)).into())
    }

    /// Frame `idx`'s state word as its owner sees it: a migration's target
    /// (`FLAG_MIGRATING`, see `migrate`) with the reference count it stands for,
    /// the old block's plus the takes and drops on the target since, and without
    /// that flag; a page a multi-page free has claimed once it is freed or restored
    /// (see `Word::claimed`).
    fn head_word(z: &Zone, idx: u32) -> Word {
        let mut w = z.frames.word(idx);
        let mut spins = 0;
        loop {
            if w.is_claimed() {
                // Freed or restored in a moment (see `Word::claimed`).
                backoff(&mut spins);
                w = z.frames.word(idx);
                continue;
            }
            // A page of a lazily split block is what its head stands for.
            if w.is_lazy() {
                return w.lazy_page();
            }
            if w.tag() == Tag::Tail {
                match Self::lazy_block_of(z, z.pfn_of(idx)) {
                    Some((_, hw)) if hw.is_lazy() => return hw.lazy_page(),
                    Some(_) => {
                        backoff(&mut spins);
                        w = z.frames.word(idx);
                        continue;
                    }
                    None => {
                        // Materialised between the two reads: the page's own word,
                        // which the head's (Acquire) makes visible now.
                        let again = z.frames.word(idx);
                        if again == w {
                            return w;
                        }
                        w = again;
                        continue;
                    }
                }
            }
            if w.tag() != Tag::Alloc || w.flags() & FLAG_MIGRATING == 0 {
                return w;
            }
            let old = z
                .frames
                .view()
                .word_any(u64::from(z.frames.migration_link(idx)));
            let again = z.frames.word(idx);
            // Between seizing the old block and settling the target, compaction
            // holds neither count where this can read it: look again.
            if again == w
                && old.tag() == Tag::Alloc
                && old.flags() & FLAG_ISOLATED != 0
                && old.order() == w.order()
            {
                return w.settled(old.refcount());
            }
            backoff(&mut spins);
            w = again;
        }
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

    // -------------------------------------------------------------------------
    // Allocation
    // -------------------------------------------------------------------------

    /// Allocates a block of `2^order` frames, naturally aligned, with one reference.
    ///
    /// # Errors
    /// `InvalidOrder` above `max_order`; `NoMemory` if no eligible zone can serve it.
    #[inline]
    pub fn alloc_pages(&self, gfp: Gfp, order: Order) -> Result<Pfn, AllocError> {
        if let Some(p) = self.alloc_fast(gfp, order, Head::PLAIN) {
            return Ok(p);
        }
        self.alloc_pages_node_on(self.current_cpu(), 0, gfp, order, Head::PLAIN)
    }

    /// `alloc_pages` of a block published as `head` (a vmalloc area's blocks come
    /// marked as its own): this CPU's stack first, as `alloc_pages`.
    pub(crate) fn alloc_pages_as(
        &self,
        gfp: Gfp,
        order: Order,
        head: Head,
    ) -> Result<Pfn, AllocError> {
        if let Some(p) = self.alloc_fast(gfp, order, head) {
            return Ok(p);
        }
        self.alloc_pages_node_on(self.current_cpu(), 0, gfp, order, head)
    }

    /// As `alloc_pages`, using CPU `cpu`'s per-CPU lists (taken modulo `nr_cpus`).
    /// For simulated CPUs in tests and for callers that know their CPU.
    ///
    /// # Errors
    /// As `alloc_pages`.
    #[inline]
    pub fn alloc_pages_on(&self, cpu: usize, gfp: Gfp, order: Order) -> Result<Pfn, AllocError> {
        self.alloc_pages_node_on(self.cpu_index(cpu), 0, gfp, order, Head::PLAIN)
    }

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
        let id = match self.config.cpu_id {
            Some(f) => crate::hook::call(f).unwrap_or(0),
            None => os_cpu_id(),
        };
        self.cpu_index(id)
    }

    /// Maps any number to a CPU index; avoids a division in the common case.
    #[inline]
    fn cpu_index(&self, id: usize) -> usize {
        if id < self.config.nr_cpus {
            id
        } else {
            id % self.config.nr_cpus
        }
    }

    /// `alloc_pages_node()`: as `alloc_pages`, starting from node `nid`'s zonelist.
    ///
    /// # Errors
    /// As `alloc_pages`, and `InvalidNode` for a node that does not exist.
    pub fn alloc_pages_node(&self, nid: u16, gfp: Gfp, order: Order) -> Result<Pfn, AllocError> {
        self.alloc_pages_node_on(self.current_cpu(), nid, gfp, order, Head::PLAIN)
    }

    /// The allocation path: fast pass, slow pass, drain and unreserve, last pass.
    /// The block's head is published as `head` says (see `Head`).
    pub(crate) fn alloc_pages_node_on(
        &self,
        cpu: usize,
        nid: u16,
        gfp: Gfp,
        order: Order,
        head: Head,
    ) -> Result<Pfn, AllocError> {
        if self.debug.faults.should_fail(FaultSite::Alloc) {
            return Err(AllocError::NoMemory { order });
        }
        if order > self.config.max_order {
            return Err(AllocError::InvalidOrder(order));
        }
        let highest = gfp.highest_zone();
        let (first, nofragment) = self
            .preferred
            .get(nid as usize)
            .ok_or(AllocError::InvalidNode(nid))?[highest.idx()]
        .ok_or(AllocError::NoEligibleZone)?;
        let req = Request {
            cpu,
            nid,
            gfp,
            order,
            highest,
            mt: gfp.migratetype(),
            first,
            head,
        };
        let mut fast = AllocFlags::fast(gfp, order.0);
        if nofragment {
            fast = fast | AllocFlags::NOFRAGMENT;
        }
        if let Some(p) = self.get_page_from_freelist(&req, fast) {
            return Ok(p);
        }
        // Slow path: wake kswapd, then the min watermark and whatever reserves the
        // request may use.
        if gfp.contains(Gfp::KSWAPD_RECLAIM) {
            self.wake_kswapd(&req);
        }
        let slow = AllocFlags::slow(gfp, order.0);
        if let Some(p) = self.get_page_from_freelist(&req, slow) {
            return Ok(p);
        }
        // Costly orders that may block compact first (`DirectCompact`).
        if self.compacts_directly(gfp, order) {
            let zones = self.zonelist(nid).filter(|z| {
                z.zone_type() <= highest
                    && (!gfp.contains(Gfp::THISNODE) || z.id.node == nid)
                    && (!gfp.contains(Gfp::THISZONE) || z.index == first)
            });
            let retry = || self.get_page_from_freelist(&req, slow);
            let cma = req.mt == Migratetype::Movable;
            if let Some(p) = self.compact_for(zones, highest, order, cma, retry) {
                return Ok(p);
            }
        }
        // Direct reclaim: the shrinkers give back what they cache, a pass at a
        // time, while passes make progress (Linux's `should_reclaim_retry()`
        // gives up after 16 without any).
        if let Some(p) = self.reclaim_directly(&req, slow) {
            return Ok(p);
        }
        if gfp.contains(Gfp::NORETRY) {
            return Err(AllocError::NoMemory { order });
        }
        // What is left is memory parked on per-CPU lists and in highatomic
        // reserves (Linux's drain after failed direct reclaim).
        for force in [false, true] {
            let unreserved = self.unreserve_highatomic(&req, force);
            let drained = !force && self.drain_all_pages() > 0;
            if unreserved || drained {
                if let Some(p) = self.get_page_from_freelist(&req, slow) {
                    return Ok(p);
                }
            }
        }
        Err(AllocError::NoMemory { order })
    }

    /// `wake_all_kswapds()`: marks the request's node for kswapd when one of its
    /// eligible zones is below its high watermark (boost included; free CMA
    /// pages left out, as `pgdat_balanced()` leaves them).
    #[cold]
    fn wake_kswapd(&self, req: &Request) {
        let short = self.zonelist(req.nid).any(|z| {
            z.zone_type() <= req.highest
                && z.id.node == req.nid
                && z.present_now() > 0
                && z.nr_free_pages_no_cma() <= z.wmark(Wmark::High)
        });
        if short {
            self.reclaim.wake(req.nid);
        }
    }

    /// `__alloc_pages_direct_reclaim()`, retried: asks the shrinkers for memory
    /// (`shrink_slab`) from `DEF_PRIORITY` down, trying the allocation after each
    /// priority that freed something, and again, while passes free anything, at
    /// most `MAX_RECLAIM_RETRIES` times in a row. Linux stops a pass once the
    /// shrinkers say they freed `SWAP_CLUSTER_MAX` pages; judging by the
    /// allocation instead keeps a shrinker that claims what it did not free from
    /// ending the pass before the others are asked. Only for a request that may
    /// reclaim directly, not from inside a reclaim pass (a shrinker's own
    /// allocations), and only when shrinkers are registered.
    #[cold]
    fn reclaim_directly(&self, req: &Request, flags: AllocFlags) -> Option<Pfn> {
        const MAX_RECLAIM_RETRIES: u32 = 16;
        let r = &self.reclaim;
        if !req.gfp.contains(Gfp::DIRECT_RECLAIM)
            || !crate::hook::InReclaim::may_reclaim(&r.running)
            || r.shrinkers.is_empty()
        {
            return None;
        }
        let zone_type = self.zones[req.first].zone_type();
        r.allocstall[zone_type.idx()].inc(1);
        for _ in 0..MAX_RECLAIM_RETRIES {
            let mut freed = 0;
            for priority in (0..=crate::shrinker::DEF_PRIORITY).rev() {
                let s = {
                    let _g = crate::hook::InReclaim::enter(&r.running);
                    r.shrinkers
                        .shrink(req.gfp, req.nid, priority, self.node_managed(req.nid))
                };
                r.pgscan_direct.inc(s.scanned);
                r.pgsteal_direct.inc(s.freed);
                freed += s.freed;
                if s.freed == 0 {
                    continue;
                }
                if let Some(p) = self.get_page_from_freelist(req, flags) {
                    return Some(p);
                }
                // What was freed may sit on per-CPU lists and stacks (Linux
                // drains after a failed attempt that reclaimed something).
                if self.drain_all_pages() > 0 {
                    if let Some(p) = self.get_page_from_freelist(req, flags) {
                        return Some(p);
                    }
                }
            }
            if freed == 0 {
                return None;
            }
        }
        None
    }

    /// Managed pages of node `nid` now.
    pub(crate) fn node_managed(&self, nid: u16) -> u64 {
        self.zones
            .iter()
            .filter(|z| z.id.node == nid)
            .map(|z| z.managed_now())
            .sum()
    }

    /// `get_page_from_freelist()`: one pass over the zonelist.
    fn get_page_from_freelist(&self, req: &Request, flags: AllocFlags) -> Option<Pfn> {
        let zonelist = &self.zonelists[req.nid as usize];
        for &zi in zonelist.iter() {
            let z = &self.zones[zi];
            if z.zone_type() > req.highest
                || (req.gfp.contains(Gfp::THISZONE) && zi != req.first)
                || (req.gfp.contains(Gfp::THISNODE) && z.id.node != req.nid)
            {
                continue;
            }
            // Below the high watermark, per-CPU lists shrink (see `pcp`); the test is
            // made here rather than on the hotter free path, as Linux does.
            let above_high = z.flags.load(Ordering::Relaxed) & ZONE_BELOW_HIGH == 0
                && (z.watermark_fast(req.order, z.wmark(Wmark::High), req.highest, flags) || {
                    z.flags.fetch_or(ZONE_BELOW_HIGH, Ordering::Relaxed);
                    false
                });
            if !above_high
                && !flags.has(AllocFlags::NO_WATERMARKS)
                && !z.watermark_fast(req.order, z.wmark(flags.wmark()), req.highest, flags)
            {
                z.events.wmark_fail.inc(1);
                // The watermark guards the zone's free pages; blocks already on this
                // CPU's list are not counted there, and handing them out takes
                // nothing from the zone. Without this, a refill that dips below the
                // mark would fail every later allocation into a drain of the very
                // blocks it took (a refill/drain ping-pong near the watermark).
                // Only when the free-page count is what failed (`short_of_pages`): a
                // high-order request short of its block goes on to the slow path,
                // whose drain gives the blocks parked on per-CPU lists back to merge
                // (whole free pageblocks kept on the THP list are out of the
                // fallback's reach, and unmovable fallbacks then steal pages inside
                // movable pageblocks).
                let mark = z.wmark(flags.wmark());
                if z.short_of_pages(req.order, mark, req.highest, flags) {
                    if let Some(p) = self.rmqueue_cached(z, req, flags) {
                        return Some(p);
                    }
                }
                continue;
            }
            if let Some(p) = self.rmqueue(z, req, flags) {
                return Some(p);
            }
        }
        if flags.has(AllocFlags::NOFRAGMENT) {
            return self.get_page_from_freelist(req, flags.without(AllocFlags::NOFRAGMENT));
        }
        None
    }

    /// `rmqueue()`: from this CPU's list where the order has one, else the buddy;
    /// a block that fails its debug checks is retired and another one taken.
    #[inline]
    fn rmqueue(&self, z: &Zone, req: &Request, flags: AllocFlags) -> Option<Pfn> {
        loop {
            let pfn = self
                .rmqueue_pcplist(z, req, flags, true)
                .or_else(|| self.rmqueue_buddy(z, req, flags))?;
            // A fallback boosted the watermarks: wake kswapd to reclaim and
            // compact (`ZONE_BOOSTED_WATERMARK`).
            if z.flags.load(Ordering::Relaxed) & ZONE_BOOSTED_WATERMARK != 0 {
                self.boosted(z, req.gfp);
            }
            if let Some(p) = self.prep_checked(z, req, pfn) {
                return Some(p);
            }
        }
    }

    /// Clears the zone's boost flag and wakes kswapd for its node, if the
    /// request may.
    #[cold]
    #[inline(never)]
    pub(crate) fn boosted(&self, z: &Zone, gfp: Gfp) {
        z.flags
            .fetch_and(!ZONE_BOOSTED_WATERMARK, Ordering::Relaxed);
        if gfp.contains(Gfp::KSWAPD_RECLAIM) {
            self.reclaim.wake(z.id.node);
        }
    }

    /// Only blocks already on this CPU's list, for a zone below its watermark (see
    /// `get_page_from_freelist`). Cold: kept out of the hot path's code.
    #[cold]
    #[inline(never)]
    fn rmqueue_cached(&self, z: &Zone, req: &Request, flags: AllocFlags) -> Option<Pfn> {
        loop {
            let pfn = self.rmqueue_pcplist(z, req, flags, false)?;
            if let Some(p) = self.prep_checked(z, req, pfn) {
                return Some(p);
            }
        }
    }

    /// The debug checks, then `prep_new_page`; `None` if the block was retired.
    #[inline]
    fn prep_checked(&self, z: &Zone, req: &Request, pfn: Pfn) -> Option<Pfn> {
        if !self.debug.alloc_check(&self.backend, z, pfn, req.order) {
            return None;
        }
        self.prep_new_page(z, pfn, req.order, req.gfp, req.mt, req.head);
        Some(pfn)
    }

    /// `rmqueue_pcplist()`: this CPU's list, if the order has one and its lock is
    /// free, refilled from the zone when empty if `refill`.
    #[inline]
    fn rmqueue_pcplist(
        &self,
        z: &Zone,
        req: &Request,
        flags: AllocFlags,
        refill: bool,
    ) -> Option<Pfn> {
        if !self.config.pcp.enabled || !pcp_allowed_order(req.order, z.pageblock_order) {
            return None;
        }
        z.pcp_trylock(req.cpu)?
            .rmqueue(req.order, req.mt, flags, &self.debug.faults, refill)
    }

    /// `rmqueue_buddy()`: a block from the buddy lists under the zone lock.
    fn rmqueue_buddy(&self, z: &Zone, req: &Request, flags: AllocFlags) -> Option<Pfn> {
        let pfn = z.lock().rmqueue_one(req.order, req.mt, flags)?;
        z.events.pgalloc.inc(req.order.nr_pages());
        Some(pfn)
    }

    /// `prep_new_page()`: zero if asked, then publish the allocated state with the
    /// flags and references of `head`. A page_frag block's bias is stored in its bias
    /// slot first: the word's Release store publishes both, so a fragment free that
    /// sees `FLAG_FRAG` (with an Acquire load) also sees the bias beside it.
    #[inline]
    pub(crate) fn prep_new_page(
        &self,
        z: &Zone,
        pfn: Pfn,
        order: Order,
        gfp: Gfp,
        mt: Migratetype,
        head: Head,
    ) {
        if gfp.contains(Gfp::ZERO) {
            self.backend.zero_pages(pfn, order.nr_pages());
        }
        let idx = z.idx(pfn);
        if head.0.flags() & FLAG_FRAG != 0 {
            z.frames
                .bias_slot(idx)
                .store(head.0.refcount(), Ordering::Relaxed);
        }
        z.frames.set_word(idx, head.word(order, mt));
    }

    /// Releases one highatomic pageblock in the request's zones.
    fn unreserve_highatomic(&self, req: &Request, force: bool) -> bool {
        let mt = req.mt;
        self.zonelists[req.nid as usize]
            .iter()
            .map(|&zi| &self.zones[zi])
            .filter(|z| z.zone_type() <= req.highest)
            .any(|z| z.lock().unreserve_highatomic(mt, force))
    }

    // -------------------------------------------------------------------------
    // Freeing and references
    // -------------------------------------------------------------------------

    /// Drops one reference on the block of `2^order` frames at `pfn`; frees it when
    /// that was the last reference (`__free_pages`).
    ///
    /// # Errors
    /// A `FreeError` if `pfn` is not the head of an allocated block of exactly this
    /// order, or the block belongs to a live `PageBlock` (`Guarded`); nothing is
    /// changed then.
    #[inline]
    pub fn free_pages(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        if self.free_fast(pfn, order) {
            return Ok(());
        }
        self.free_pages_by(Via::Cpu(self.current_cpu()), pfn, order, Holder::Raw)
    }

    /// As `free_pages`, freeing to CPU `cpu`'s lists (taken modulo `nr_cpus`).
    ///
    /// # Errors
    /// As `free_pages`.
    pub fn free_pages_on(&self, cpu: usize, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        self.free_pages_by(Via::Cpu(self.cpu_index(cpu)), pfn, order, Holder::Raw)
    }

    /// The zone of `pfn` as the head of a block of `order`: the checks every call
    /// naming a block by its head and order makes before touching its word.
    #[inline]
    pub(crate) fn head_zone(&self, pfn: Pfn, order: Order) -> Result<&Zone, FreeError> {
        if order > self.config.max_order {
            return Err(FreeError::InvalidOrder(order));
        }
        let z = self.zone_of(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        if !pfn.is_aligned(order) {
            return Err(FreeError::Misaligned { pfn, order });
        }
        Ok(z)
    }

    /// `free_pages` on behalf of `by`, the way `via` says (`Via::Cpu`: that CPU's
    /// lists; `Via::Here`: the stack of the CPU the thread runs on where the
    /// stacks serve the block, as `free_pages`).
    #[inline]
    pub(crate) fn free_pages_by(
        &self,
        via: Via,
        pfn: Pfn,
        order: Order,
        by: Holder,
    ) -> Result<(), FreeError> {
        let z = self.head_zone(pfn, order)?;
        self.put_and_free(z, pfn, Some(order), via, by).map(|_| ())
    }

    /// Drops one reference on the block whose head is `pfn`, freeing it at zero.
    /// Returns whether the block was freed.
    ///
    /// # Errors
    /// A `FreeError` if `pfn` is not the head of an allocated block.
    pub fn put_page(&self, pfn: Pfn) -> Result<bool, FreeError> {
        let z = self.zone_of(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        self.put_and_free(z, pfn, None, Via::Here(self.current_cpu()), Holder::Raw)
    }

    /// Changes the state word of the allocated block headed by `pfn` with one
    /// compare-and-swap: `f` maps the current word (always an allocated head) to
    /// the new one or refuses. Returns the old and new words.
    #[inline]
    pub(crate) fn update_head(
        &self,
        z: &Zone,
        pfn: Pfn,
        by: Holder,
        f: impl Fn(Word) -> Result<Word, FreeError>,
    ) -> Result<(Word, Word), FreeError> {
        let idx = z.idx(pfn);
        let mut w = z.frames.word(idx);
        let mut spins = 0;
        loop {
            if w.tag() != Tag::Alloc {
                // A page a multi-page free has taken but may still give back.
                if w.is_claimed() {
                    backoff(&mut spins);
                    w = z.frames.word(idx);
                    continue;
                }
                // A tail of a lazily split block: a page of its own once the block
                // is materialised.
                if w.tag() == Tag::Tail && Self::unlazy_tail(z, pfn, &mut spins) {
                    w = z.frames.word(idx);
                    continue;
                }
                return Err(self.classify(z, pfn, w));
            }
            // The common case, one test: a block no layer owns, changed by the raw
            // API.
            if w.flags() & (OWNER_FLAGS | FLAG_LAZY) != 0 || by != Holder::Raw {
                if w.is_lazy() {
                    // The head of a lazily split block: its page is `lazy_page`,
                    // checked and changed as any page; if `f` takes it, the block
                    // is materialised with the head's new word in the same hold.
                    let page = w.lazy_page();
                    owner_check(page, by, pfn)?;
                    let new = f(page)?;
                    if Self::materialize_to(z, pfn, w, new) {
                        return Ok((page, new));
                    }
                    w = z.frames.word(idx);
                    continue;
                }
                owner_check(w, by, pfn)?;
            }
            let new = f(w)?;
            match z.frames.cas_word(idx, w, new) {
                Ok(_) => return Ok((w, new)),
                Err(cur) => w = cur,
            }
        }
    }

    /// The lazily split block (`FLAG_LAZY`) whose tail frame `pfn` is, with its
    /// head's word: lazy, or held by a thread (`materializing`, or
    /// `claimed_block`). `None` if `pfn`'s enclosing head is anything else.
    pub(crate) fn lazy_block_of(z: &Zone, pfn: Pfn) -> Option<(Pfn, Word)> {
        let (h, hw) = z.head_of_tail(pfn)?;
        (hw.is_lazy() || (hw.is_claimed() && hw.order().0 > 0)).then_some((h, hw))
    }

    /// Gives every page of the lazily split block at `head`, whose head word was
    /// `w`, a state word of its own: what an eager split writes (`lazy_page`).
    /// Changes nothing if the head is no longer `w` (another thread materialised
    /// or freed the block, or is doing so): the caller reads its page again.
    pub(crate) fn materialize(z: &Zone, head: Pfn, w: Word) {
        Self::materialize_to(z, head, w, w.lazy_page());
    }

    /// `materialize`, with `head_word` for the head page's own word instead of
    /// `lazy_page` (a change a single-page call makes to the head page, in the
    /// same hold). Returns whether it held the block (`false`: the head was no
    /// longer `w`, nothing changed).
    pub(crate) fn materialize_to(z: &Zone, head: Pfn, w: Word, head_word: Word) -> bool {
        let idx = z.idx(head);
        let held = Word::materializing(w.order(), w.aux());
        if z.frames.cas_word(idx, w, held).is_err() {
            return false;
        }
        let page = w.lazy_page();
        // The tails from the last down, each with Release: a thread that read
        // page `p` as `Tail` and then finds a page below it written has `p`'s
        // word visible when it reads `p` again, so a search for `p`'s head never
        // stops at a written page while `p` itself still reads `Tail`.
        let t = z.frames.view();
        for i in (idx + 1..idx + w.order().nr_pages() as u32).rev() {
            t.set_word(i, page);
        }
        // After the tails: whoever sees the head's new word and then reads a
        // tail sees the tail's.
        z.frames.set_word(idx, head_word);
        true
    }

    /// For a call on frame `pfn` alone, whose word it read as `Tail`: if `pfn`
    /// lies in a lazily split block, materialises it (or waits once for the
    /// thread holding its head) and returns `true`, and the caller reads the
    /// page's word again; also `true` if the block was materialised since that
    /// read (the page has a word of its own now); `false` for an ordinary tail.
    pub(crate) fn unlazy_tail(z: &Zone, pfn: Pfn, spins: &mut u32) -> bool {
        match Self::lazy_block_of(z, pfn) {
            Some((h, hw)) if hw.is_lazy() => Self::materialize(z, h, hw),
            Some(_) => backoff(spins),
            // The head's word was read with Acquire after the page's: a
            // materialisation it saw finished has written the page's word too.
            None => return z.frames.word(z.idx(pfn)) != Word::TAIL,
        }
        true
    }

    /// Drops a reference; the winner of the last reference frees the block through
    /// `via`. Returns whether the block was freed.
    #[inline]
    pub(crate) fn put_and_free(
        &self,
        z: &Zone,
        pfn: Pfn,
        order: Option<Order>,
        via: Via,
        by: Holder,
    ) -> Result<bool, FreeError> {
        let (old, new) = self.update_head(z, pfn, by, |w| {
            let actual = w.order();
            match order {
                Some(given) if given != actual => Err(FreeError::WrongOrder { pfn, given, actual }),
                // An isolated block's last reference is compaction's (see `migrate`).
                _ if w.refcount() <= 1 && w.flags() & FLAG_ISOLATED != 0 => {
                    Err(FreeError::AlreadyFree(pfn))
                }
                _ if w.refcount() <= 1 => Ok(Word::frozen(actual)),
                // A guard gives the block back to the raw API with its last drop.
                _ => Ok(w
                    .with_refcount(w.refcount() - 1)
                    .with_flags(w.flags() & !FLAG_GUARDED)),
            }
        })?;
        let last = new.tag() == Tag::Frozen;
        if last {
            self.release_frozen(z, pfn, old.order(), via);
        }
        Ok(last)
    }

    /// Frees a block whose last reference the caller dropped (its head is `Frozen`
    /// and the caller owns it) through `via`, after the debug modes' free hooks.
    #[inline]
    pub(crate) fn release_frozen(&self, z: &Zone, pfn: Pfn, order: Order, via: Via) {
        self.debug.free_prepare(&self.backend, pfn, order);
        match via {
            Via::Cpu(cpu) => self.free_frozen(z, pfn, order, cpu),
            Via::Here(cpu) => {
                if !self.free_frozen_here(z, pfn, order) {
                    self.free_frozen(z, pfn, order, cpu)
                }
            }
            Via::Zone => self.free_one_page(z, pfn, order),
        }
    }

    /// Adds `nr` references to the block headed by `pfn` (`page_ref_add`).
    pub(crate) fn page_ref_add(&self, pfn: Pfn, nr: u32) -> Result<(), FreeError> {
        let z = self.zone_of(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        self.update_head(z, pfn, Holder::Raw, |w| {
            let r = w
                .refcount()
                .checked_add(nr)
                .ok_or(FreeError::RefcountOverflow(pfn))?;
            // The owner's references: a migrating target's count is relative to
            // `MIGRATING_BASE` (what it gained since its move began), an isolated
            // block's includes compaction's one.
            let owner = if w.flags() & FLAG_MIGRATING != 0 {
                r.saturating_sub(MIGRATING_BASE)
            } else {
                r - u32::from(w.flags() & FLAG_ISOLATED != 0)
            };
            if owner > REFCOUNT_MAX {
                return Err(FreeError::RefcountOverflow(pfn));
            }
            Ok(w.with_refcount(r))
        })
        .map(|_| ())
    }

    /// `__free_frozen_pages()`: frees a block the caller froze, to CPU `cpu`'s list
    /// where its order has one and its pageblock is not isolated, else to the buddy
    /// lists under the zone lock.
    #[inline]
    pub(crate) fn free_frozen(&self, z: &Zone, pfn: Pfn, order: Order, cpu: usize) {
        if self.config.pcp.enabled && pcp_allowed_order(order, z.pageblock_order) {
            let mut mt = z.blocks.migratetype(pfn);
            if !mt.is_mergeable() {
                if mt == Migratetype::Isolate {
                    return self.free_one_page(z, pfn, order);
                }
                // HighAtomic blocks travel on the movable list; the flush re-reads
                // the pageblock's type.
                mt = Migratetype::Movable;
            }
            if let Some(mut pcp) = z.pcp_trylock(cpu) {
                pcp.free(pfn, order, mt, self.config.pcp.prefetch_buddy);
                return;
            }
        }
        self.free_one_page(z, pfn, order);
    }

    /// Gives blocks of `order` held `Cached` by a `LocalCache` back to the buddy
    /// lists, under one zone lock hold, with the metadata each merge reads first
    /// prefetched before the lock is taken (see `prefetch_merge`).
    pub(crate) fn free_cached(&self, z: &Zone, order: Order, blocks: &[Pfn]) {
        for &pfn in blocks {
            prefetch_merge(z, pfn, order);
        }
        z.lock().free_batch_locked(blocks, order);
        z.events.pgfree.inc((blocks.len() as u64) << order.0);
    }

    /// `free_one_page()`: the zone-lock path.
    pub(crate) fn free_one_page(&self, z: &Zone, pfn: Pfn, order: Order) {
        z.lock().free_block_locked(pfn, order, false);
        count_zone_free(z, order);
    }

    // -------------------------------------------------------------------------
    // Per-CPU list maintenance
    // -------------------------------------------------------------------------

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
        self.drain_caches()
            + (0..self.config.nr_cpus)
                .map(|cpu| self.drain_cpu_pages(cpu))
                .sum::<u64>()
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

    /// Pages on every CPU's lists and stacks, and in `LocalCache`s, all zones
    /// (free, but not in `nr_free_pages`). Lock-free; exact once quiet.
    pub fn nr_pcp_pages(&self) -> u64 {
        self.zones
            .iter()
            .flat_map(|z| z.pcp.iter())
            .map(|s| s.stats.count.get())
            .sum::<u64>()
            + self.nr_stacked_pages()
            + self.nr_cached_pages()
    }

    /// Adds a reference to the allocated block whose head is `pfn`.
    ///
    /// # Errors
    /// A `FreeError` if `pfn` is not the head of an allocated block;
    /// `RefcountOverflow` if the block would have more than `REFCOUNT_MAX`
    /// references.
    pub fn get_page(&self, pfn: Pfn) -> Result<(), FreeError> {
        self.page_ref_add(pfn, 1)
    }

    /// The reference count of the allocated block whose head is `pfn`.
    ///
    /// # Errors
    /// A `FreeError` if `pfn` is not the head of an allocated block.
    pub fn page_count(&self, pfn: Pfn) -> Result<u32, FreeError> {
        let z = self.zone_of(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        let w = Self::head_word(z, z.idx(pfn));
        if w.tag() != Tag::Alloc {
            return Err(self.classify(z, pfn, w));
        }
        Ok(w.refcount())
    }

    /// `split_page()`: turns the allocated block of `2^order` frames at `pfn` into
    /// `2^order` independent order-0 pages, each with one reference (the head keeps
    /// the references it had).
    ///
    /// A block with one reference split by its only owner splits lazily, in one
    /// compare-and-swap: only the head records the split, and the first call on
    /// one of its pages alone gives every page its own state. Until then a free
    /// of exactly its pages (`free_contig_range`, `free_pages_bulk`, a vmalloc
    /// area's `vfree`) takes the block back with one compare-and-swap. Either way
    /// every page reads, and is checked, as a page of its own.
    ///
    /// # Errors
    /// A `FreeError` if `pfn` is not the head of an allocated block of this order.
    pub fn split_page(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let z = self.head_zone(pfn, order)?;
        // A block with one reference (the raw API's own, so with no flag once
        // the checks pass) splits lazily: only its head changes (see
        // `FLAG_LAZY`).
        let lazy = |w: Word| order.0 > 0 && w.refcount() == 1;
        let (old, _) = self.update_head(z, pfn, Holder::Raw, |w| {
            if w.order() != order {
                return Err(FreeError::WrongOrder {
                    pfn,
                    given: order,
                    actual: w.order(),
                });
            }
            if w.flags() & FLAG_ISOLATED != 0 {
                return Err(FreeError::Busy(pfn));
            }
            if lazy(w) {
                return Ok(Word::lazy(order, w.aux(), w.flags()));
            }
            Ok(Word::new(Tag::Alloc, 0, w.aux(), w.refcount()).with_flags(w.flags()))
        })?;
        if lazy(old) {
            return Ok(());
        }
        let idx = z.idx(pfn);
        let w = old;
        let mt = Migratetype::from_idx(w.aux() as usize).unwrap_or(Migratetype::Unmovable);
        let page = Word::alloc_flagged(Order(0), mt, w.flags());
        z.frames
            .view()
            .set_words(idx + 1, order.nr_pages() as u32 - 1, 0, page);
        Ok(())
    }

    /// The allocated block containing frame `pfn`: its head and order (Linux's
    /// `compound_head`, for any block).
    ///
    /// # Errors
    /// The `FreeError` of the frame if it is in no allocated block.
    pub fn block_of(&self, pfn: Pfn) -> Result<(Pfn, Order), FreeError> {
        let z = self.zone_of(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        let mut spins = 0;
        loop {
            let w = z.frames.word(z.idx(pfn));
            // A page a multi-page free has taken but may still give back, or one
            // of a lazily split block a thread holds.
            if w.is_claimed()
                || (w.tag() == Tag::Tail
                    && Self::lazy_block_of(z, pfn).is_some_and(|(_, hw)| hw.is_claimed()))
            {
                backoff(&mut spins);
                continue;
            }
            match self.block_of_in(z, pfn) {
                Err(_) if z.frames.word(z.idx(pfn)) != w => {}
                r => return r,
            }
        }
    }

    /// `block_of` in zone `z`, answering at once for a claimed page.
    fn block_of_in(&self, z: &Zone, pfn: Pfn) -> Result<(Pfn, Order), FreeError> {
        let w = z.frames.word(z.idx(pfn));
        let head = match w.tag() {
            Tag::Alloc => Some((pfn, w)),
            Tag::Tail => z.head_of_tail(pfn),
            _ => None,
        };
        match head {
            // A page of a lazily split block is a block of its own.
            Some((_, hw)) if hw.is_lazy() => Ok((pfn, Order(0))),
            Some((head, hw)) if hw.tag() == Tag::Alloc => Ok((head, hw.order())),
            _ => Err(self.classify(z, pfn, w)),
        }
    }

    /// Names what is wrong with using `pfn` as the head of an allocated block.
    #[cold]
    pub(crate) fn classify(&self, z: &Zone, pfn: Pfn, w: Word) -> FreeError {
        match w.tag() {
            Tag::Hole => FreeError::Hole(pfn),
            Tag::Buddy | Tag::Pcp | Tag::Frozen | Tag::Cached => FreeError::AlreadyFree(pfn),
            Tag::Bad => FreeError::BadPage(pfn),
            Tag::Alloc => FreeError::Busy(pfn),
            _ => {
                // A tail: inside a free block (already free) or an allocated one.
                // A merge in progress hides the enclosing free block for a moment
                // (its heads are tails until the merged head is published), so an
                // answer of "tail" is confirmed under the zone lock, where no merge
                // is half-done. The path is cold: only bad calls reach it.
                if self.inside_free_block(z, pfn) {
                    return FreeError::AlreadyFree(pfn);
                }
                let _zl = z.lock();
                if self.inside_free_block(z, pfn) {
                    FreeError::AlreadyFree(pfn)
                } else {
                    FreeError::TailPage(pfn)
                }
            }
        }
    }

    /// Whether tail frame `pfn` lies in a free block (on the buddy or a per-CPU list,
    /// or being freed), judged from the heads at each aligned position below it.
    fn inside_free_block(&self, z: &Zone, pfn: Pfn) -> bool {
        // From order 0: a merge marks a block's head a tail before it publishes the
        // merged head, so a free that read the tail may find the block itself free
        // again (its buddy allocated, the merge undone) by the time it looks.
        for o in 0..=z.max_order.0 {
            let head = Pfn(pfn.0 & !((1u64 << o) - 1));
            if !z.contains(head) {
                break;
            }
            let hw = z.frames.word(z.idx(head));
            if matches!(hw.tag(), Tag::Buddy | Tag::Pcp | Tag::Frozen | Tag::Cached)
                && hw.order().0 >= o
            {
                return true;
            }
            if hw.tag() == Tag::Alloc && hw.order().0 >= o {
                break;
            }
        }
        false
    }

    /// Sets or clears `FLAG_GUARDED` on the allocated block of `order` at `pfn`, which
    /// must be in the opposite state (and, to become guarded, carry no other flag).
    pub(crate) fn set_guarded(&self, pfn: Pfn, order: Order, on: bool) -> Result<(), FreeError> {
        let z = self.head_zone(pfn, order)?;
        let by = if on { Holder::Raw } else { Holder::Guard };
        self.update_head(z, pfn, by, |w| {
            if w.order() != order {
                return Err(FreeError::WrongOrder {
                    pfn,
                    given: order,
                    actual: w.order(),
                });
            }
            if on && w.flags() != 0 {
                return Err(FreeError::Busy(pfn));
            }
            Ok(w.with_flags(w.flags() ^ FLAG_GUARDED))
        })
        .map(|_| ())
    }

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
}

/// The head flags that name a block's owner (a guard, a page_frag cache, a
/// vmalloc area): a block carrying one answers to that owner alone.
const OWNER_FLAGS: u8 = FLAG_GUARDED | FLAG_FRAG | FLAG_VMALLOC | FLAG_CMA;

/// Whether `by` may change the allocated head word `w` (of the block at `pfn`):
/// a guarded block answers to its guard alone and a guard only to it; a page_frag
/// cache's block answers to the fragment paths alone; a vmalloc area's page
/// answers to vmalloc alone, and vmalloc only to its own pages; a `cma_alloc`
/// page to none of them.
#[inline]
fn owner_check(w: Word, by: Holder, pfn: Pfn) -> Result<(), FreeError> {
    if (w.flags() & FLAG_GUARDED != 0) != (by == Holder::Guard) {
        return Err(FreeError::Guarded(pfn));
    }
    if w.flags() & FLAG_FRAG != 0 && by != Holder::Frag {
        return Err(FreeError::Busy(pfn));
    }
    if (w.flags() & FLAG_VMALLOC != 0) != (by == Holder::Vmalloc) {
        return Err(FreeError::Busy(pfn));
    }
    // A `cma_alloc` page answers to `cma_release` alone, which frees it through
    // the multi-page path, never through a head-word update.
    if w.flags() & FLAG_CMA != 0 {
        return Err(FreeError::Busy(pfn));
    }
    Ok(())
}

/// Who changes a block's head word: a caller of the raw pfn API, or the `PageBlock`
/// guard that owns the block (`FLAG_GUARDED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holder {
    Raw,
    Guard,
    /// The page_frag paths, for blocks a cache carves (`FLAG_FRAG`) and fragments.
    Frag,
    /// A vmalloc space, for the pages of its areas (`FLAG_VMALLOC`).
    Vmalloc,
}

/// The allocation slow path's one call upward: direct compaction
/// (`__alloc_pages_direct_compact`). `compaction`, a layer above this one,
/// implements it for `ZoneAllocator`; the allocator names nothing of that layer
/// and keeps only its state (`compact_state`, below).
pub(crate) trait DirectCompact {
    /// Whether a request of `order` with `gfp` compacts before it fails: a costly
    /// order and a GFP that may block.
    fn compacts_directly(&self, gfp: Gfp, order: Order) -> bool;

    /// Compacts `zones` (the request's zonelist, filtered) in turn, each followed
    /// by the allocation attempt `retry`; the block `retry` got, if any. `cma`:
    /// the request may take pages of CMA pageblocks (a movable one).
    fn compact_for<'a>(
        &'a self,
        zones: impl Iterator<Item = &'a Zone>,
        highest: ZoneType,
        order: Order,
        cma: bool,
        retry: impl FnMut() -> Option<Pfn>,
    ) -> Option<Pfn>;
}

/// Where a block whose last reference was dropped goes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Via {
    /// The ordinary path: that CPU's lists where the order has one, else the zone.
    Cpu(usize),
    /// The CPU the thread runs on: its stack where the per-CPU stacks serve the
    /// call (see `fast`), else as `Cpu` with the CPU given (read before the
    /// block was taken).
    Here(usize),
    /// Straight to the buddy lists under the zone lock (`__free_pages_ok`).
    Zone,
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

/// One allocation request, fixed for all of its passes.
struct Request {
    /// CPU whose lists to use.
    cpu: usize,
    nid: u16,
    gfp: Gfp,
    order: Order,
    highest: ZoneType,
    mt: Migratetype,
    /// The preferred zone: first eligible zone of the zonelist.
    first: usize,
    /// How the allocated head is published.
    head: Head,
}

/// The state an allocated block's head is published with: its flags and its
/// reference count, set by the one store that hands the block out. Kept as the
/// head word's bits (an allocated word of order 0 and migratetype 0), so that
/// publishing a block is one OR with its order and migratetype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head(Word);

impl Head {
    /// An ordinary block: no flag, one reference.
    pub(crate) const PLAIN: Head = Head::new(0, 1);
    /// A `PageBlock` guard's block (`FLAG_GUARDED`), one reference.
    pub(crate) const GUARDED: Head = Head::new(FLAG_GUARDED, 1);
    /// A vmalloc area's block (`FLAG_VMALLOC`), one reference.
    pub(crate) const VMALLOC: Head = Head::new(FLAG_VMALLOC, 1);

    /// A vmalloc area's block of `order`, split to order-0 pages from the start
    /// (lazily, `FLAG_LAZY`, for an order above 0): what `VMALLOC` and
    /// `split_page` would make of it, without the split's compare-and-swap.
    pub(crate) const fn vmalloc(order: Order) -> Head {
        if order.0 > 0 {
            Head::new(FLAG_VMALLOC | FLAG_LAZY, 1)
        } else {
            Head::VMALLOC
        }
    }

    /// A page_frag cache's block (`FLAG_FRAG`) with `bias` references, all the
    /// cache's (`bias` at least 1), and `bias` published in its bias slot.
    pub(crate) const fn frag(bias: u32) -> Head {
        Head::new(FLAG_FRAG, bias)
    }

    const fn new(flags: u8, refs: u32) -> Head {
        Head(Word::new(Tag::Alloc, 0, 0, refs).with_flags(flags))
    }

    /// The head word of an allocated block of `order` and migratetype `mt`
    /// (`Tag::Hole` is the tag whose bits are zero: the OR keeps `Alloc`).
    #[inline]
    fn word(self, order: Order, mt: Migratetype) -> Word {
        Word(self.0 .0 | Word::new(Tag::Hole, order.0, mt as u8, 0).0)
    }
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

/// The order of the blocks that fill a cache line of frame metadata (the table is
/// laid out in whole lines): the buddies of smaller blocks share their line.
const LINE_ORDER: u8 = crate::frame::PER_LINE.trailing_zeros() as u8;

/// Prefetches the frame metadata a merge of the block at `pfn` of `order` reads
/// first: the block's buddy, and the buddies of the two blocks it forms next on
/// lines of their own (the merge reads one when it gets that far,
/// `buddy_merge_likely()` when it stops one order short). Below `LINE_ORDER`
/// the buddy shares the block's own line, so that line is the one prefetched:
/// the block's free wrote it, but a batch of frees and a flush later it is
/// often out of the first-level cache again. At order 0 the next two are the
/// lines beyond it, which a shuffled free reads about half and a quarter of the
/// time. Issued for a whole batch before the
/// zone lock is taken, the misses overlap each other instead of coming one
/// after another inside it. That pays where other work has pushed the table out
/// of the caches since the blocks were handed out; where it is still cached, the
/// prefetches cost a few instructions a block.
#[inline(always)]
pub(crate) fn prefetch_merge(z: &Zone, pfn: Pfn, order: Order) {
    let t = z.frames.view();
    if order.0 >= LINE_ORDER {
        t.prefetch(pfn.buddy(order));
    } else {
        t.prefetch(pfn);
    }
    // The buddy of the block of order `k` that holds this one.
    let buddy_at = |k: u8| Pfn(pfn.0 & !((1u64 << k) - 1)).buddy(Order(k));
    let k = (order.0 + 1).max(LINE_ORDER);
    // Merges stop below the zone's largest order: nothing reads a buddy there.
    if k < z.max_order.0 {
        t.prefetch(buddy_at(k));
    }
    if k + 1 < z.max_order.0 {
        t.prefetch(buddy_at(k + 1));
    }
}

#[cfg(test)]
mod tests {
    //! Small workloads over abstract frames, sized so that Miri can run them (the CI
    //! runs this module under `cargo miri test`): every allocation path, the guard
    //! flag, the multi-page frees, and two real threads racing on one block.

    use super::*;
    use crate::config::Config;

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
