//! Model-based property tests: the allocator against a simple reference model.
//!
//! Uses only the public API. Each case builds a fresh `ZoneAllocator` for one
//! configuration, replays a generated `Vec<Op>` against it and against `Model`, and
//! checks after every step that the two agree. The model is deliberately dumb:
//!
//! ```text
//!   Model
//!   ├── zones[]   span, holes (read once from frame_state at set-up and checked
//!   │             against the Config) and an `owned` bit per frame
//!   ├── blocks    BTreeMap pfn -> (order, refcount): every block the test holds
//!   └── freed     the last heads freed, for double frees
//! ```
//!
//! It never predicts *which* pfn an allocation returns (that is the allocator's
//! choice); it checks that the returned block is *a* legal answer: in an eligible
//! zone, aligned to its order, no hole, no frame already held. It does predict every
//! refusal exactly: each bad call must return the `FreeError` / `AllocError` that
//! `ZoneAllocator::classify`'s rules give for the model's view of the frame, and must
//! leave `state_digest()` unchanged.
//!
//! The CPU is a plain parameter: every configuration's `cpu_id` reads a
//! thread-local that `Op::Migrate` sets, and `alloc_pages_on` / `free_pages_on` name
//! one directly, so which per-CPU list a call uses is part of the generated case
//! (deterministic, and shrinkable) rather than the scheduler's choice.
//!
//! After every step: `check_invariants()`; `assert_accounting` (buddy-free +
//! per-CPU + held == managed); the invariant report's allocated, free and per-CPU
//! figures against the model and the counters; every held head's `frame_state`.
//! Every 8 steps, and on `Op::Stats`: `pagetypeinfo()` (counters) against
//! `pagetypeinfo_walked()` (list walk), `buddyinfo()` against the sum of
//! pagetypeinfo, the free-page counters against a recount, per-CPU counts against
//! `zoneinfo()`, and free + per-CPU + held == present in every zone.
//!
//! "No spurious OOM", checked on every `NoMemory` (see `OomRule`): in each zone the
//! request could use, a naturally aligned, fully free range of `2^order` frames
//! (found by scanning the model) is only allowed to remain if the zone was below
//! its min watermark plus lowmem reserve, or had free highatomic pages the request
//! may not touch. For `__GFP_MEMALLOC` requests watermarks do not apply, so only
//! the highatomic excuse remains; `no_spurious_oom` runs MEMALLOC-only cases that
//! exhaust memory in every configuration and admit no excuse at all.
//!
//! Teardown of every case: free everything and drain the per-CPU lists (free ==
//! managed, invariants hold); if no highatomic reserve is left, the free lists must
//! be back to the initial maximal decomposition. Then allocate every frame with
//! `HIGHUSER_MOVABLE | MEMALLOC` (which must succeed down to the last frame,
//! releasing any reserves), free it all again, and require the initial
//! decomposition unconditionally: same buddyinfo and the same free heads as a
//! freshly built allocator.
//!
//! Both properties print their figures (configurations, cases, operations, bad
//! calls by kind, invariant checks, divergences). Seeds are fixed, so the counts are
//! the same on every run; `PROPTEST_CASES` raises the cases per configuration for
//! soak runs. A divergence is shrunk, printed, and persisted in
//! `proptest-regressions/model.txt`.

#[path = "support/figures.rs"]
mod figures;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{
    Config as ProptestConfig, FileFailurePersistence, RngSeed, TestError, TestRunner,
};
use zonealloc::{
    AllocError, Config, FaultSite, FrameState, FreeError, Gfp, Migratetype, NodeConfig, Order,
    PcpConfig, Pfn, ZoneAllocator, ZoneConfig, ZoneId, ZoneType,
};

// ---------------------------------------------------------------------------
// Configurations
// ---------------------------------------------------------------------------

/// One configuration of the suite and its share of the budget.
struct Setup {
    name: &'static str,
    config: Config,
    /// Cases per run unless `PROPTEST_CASES` says otherwise.
    cases: u32,
    /// Longest op sequence of a case (lengths are drawn from `1..=max_len`).
    max_len: usize,
    /// Make every n-th per-CPU refill fail (`FaultSite::PcpRefill`; 0: never). The
    /// allocation must then fall through to the buddy lists, invisibly to every
    /// property here.
    pcp_refill_fault_every: u64,
}

thread_local! {
    /// The simulated CPU this thread runs on (`Op::Migrate` changes it).
    static CPU: Cell<usize> = const { Cell::new(0) };
}

/// `Config::cpu_id` of every configuration: the simulated CPU, so that which
/// per-CPU list a call uses is part of the generated case, not of the scheduler.
fn simulated_cpu() -> usize {
    CPU.with(|c| c.get())
}

fn set_cpu(cpu: usize) {
    CPU.with(|c| c.set(cpu));
}

// Assigning after `default()` keeps this compiling when `NodeConfig` gains fields.
#[allow(clippy::field_reassign_with_default)]
fn node(zones: Vec<ZoneConfig>) -> NodeConfig {
    let mut n = NodeConfig::default();
    n.zones = zones;
    n
}

fn zone(t: ZoneType, start: u64, nr: u64) -> ZoneConfig {
    ZoneConfig::new(t, Pfn(start), nr)
}

/// The configuration matrix. Zones stay at a few thousand frames: every step runs
/// the O(frames) validator. `nr_cpus` is explicit everywhere (the default is the
/// machine's), and `cpu_id` is set to `simulated_cpu` at the end.
fn setups() -> Vec<Setup> {
    use ZoneType::*;
    let s = |name, config, cases, max_len| Setup {
        name,
        config,
        cases,
        max_len,
        pcp_refill_fault_every: 0,
    };
    let mut v = vec![
        s(
            "tiny zone: 7 frames, pcp high 0",
            Config {
                nodes: vec![node(vec![zone(Normal, 0, 7)])],
                min_free_kbytes: Some(0),
                nr_cpus: 2,
                pcp: PcpConfig {
                    batch: Some(1),
                    high_min: Some(0),
                    high_max: Some(0),
                    ..PcpConfig::default()
                },
                ..Config::default()
            },
            80,
            200,
        ),
        s(
            "odd size: 1000 frames, pcp off",
            Config {
                nodes: vec![node(vec![zone(Normal, 0, 1000)])],
                nr_cpus: 1,
                pcp: PcpConfig {
                    enabled: false,
                    ..PcpConfig::default()
                },
                ..Config::default()
            },
            80,
            400,
        ),
        s(
            "unaligned start: 3 + 4093, 4 cpus",
            Config {
                nodes: vec![node(vec![zone(Normal, 3, 4093)])],
                nr_cpus: 4,
                ..Config::default()
            },
            64,
            400,
        ),
        s(
            "max_order 3, pageblock 2",
            Config {
                max_order: Order(3),
                pageblock_order: Order(2),
                nodes: vec![node(vec![zone(Normal, 2, 1022)])],
                nr_cpus: 2,
                ..Config::default()
            },
            80,
            400,
        ),
        s(
            "16 MiB, max_order 10, pcp prefetch",
            Config {
                nodes: vec![node(vec![zone(Normal, 0, (16 << 20) >> 12)])],
                nr_cpus: 2,
                pcp: PcpConfig {
                    prefetch_buddy: true,
                    ..PcpConfig::default()
                },
                ..Config::default()
            },
            64,
            400,
        ),
        Setup {
            pcp_refill_fault_every: 3,
            ..s(
                "DMA32 + Normal, 1 in 3 pcp refills fail",
                Config {
                    max_order: Order(7),
                    pageblock_order: Order(4),
                    nodes: vec![node(vec![zone(Dma32, 0, 2048), zone(Normal, 2048, 2048)])],
                    nr_cpus: 2,
                    ..Config::default()
                },
                64,
                400,
            )
        },
        s(
            "holes, pcp batch 1 high 1",
            Config {
                max_order: Order(8),
                pageblock_order: Order(5),
                nodes: vec![node(vec![zone(Normal, 0, 2048)
                    .with_hole(Pfn(0), 2)
                    .with_hole(Pfn(100), 3)
                    .with_hole(Pfn(512), 512)
                    .with_hole(Pfn(1500), 1)
                    .with_hole(Pfn(2047), 1)])],
                nr_cpus: 2,
                pcp: PcpConfig {
                    batch: Some(1),
                    high_min: Some(1),
                    high_max: Some(1),
                    ..PcpConfig::default()
                },
                ..Config::default()
            },
            80,
            400,
        ),
        Setup {
            pcp_refill_fault_every: 2,
            ..s(
                "two nodes, 6 zones, 1 in 2 pcp refills fail",
                Config {
                    max_order: Order(5),
                    pageblock_order: Order(3),
                    nodes: vec![
                        node(vec![
                            zone(Dma, 0, 0),
                            zone(Dma32, 0, 512),
                            zone(Normal, 512, 1024),
                        ]),
                        node(vec![
                            zone(Dma32, 8192, 16).with_hole(Pfn(8192), 16),
                            zone(Normal, 8208, 1024),
                            zone(Movable, 9232, 512),
                        ]),
                    ],
                    nr_cpus: 2,
                    ..Config::default()
                },
                64,
                400,
            )
        },
        s(
            "max_order 0",
            Config {
                max_order: Order(0),
                pageblock_order: Order(0),
                nodes: vec![node(vec![zone(Normal, 1, 300)])],
                nr_cpus: 2,
                ..Config::default()
            },
            64,
            300,
        ),
        s(
            "DMA + Normal + Movable, pcp high_fraction 8",
            Config {
                max_order: Order(6),
                pageblock_order: Order(3),
                nodes: vec![node(vec![
                    zone(Dma, 0, 64),
                    zone(Normal, 64, 1024),
                    zone(Movable, 1088, 1024),
                ])],
                nr_cpus: 2,
                pcp: PcpConfig {
                    high_fraction: 8,
                    ..PcpConfig::default()
                },
                ..Config::default()
            },
            64,
            400,
        ),
        s(
            "no mobility grouping, pageblock = max_order",
            Config {
                max_order: Order(4),
                pageblock_order: Order(4),
                nodes: vec![node(vec![zone(Normal, 1, 777)])],
                min_free_kbytes: Some(64),
                mobility_grouping: false,
                nr_cpus: 3,
                ..Config::default()
            },
            64,
            400,
        ),
    ];
    for setup in &mut v {
        setup.config.cpu_id = Some(simulated_cpu);
    }
    v
}

/// Cases per configuration: the setup's budget, or `PROPTEST_CASES` if set.
fn cases_for(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// The request mix of the main suite. `KERNEL | DMA32` and `KERNEL | DMA` are in
/// every configuration: where no such zone exists the model expects
/// `NoEligibleZone`.
fn suite_gfps() -> Vec<Gfp> {
    vec![
        Gfp::KERNEL,
        Gfp::KERNEL,
        Gfp::HIGHUSER_MOVABLE,
        Gfp::HIGHUSER_MOVABLE,
        Gfp::KERNEL | Gfp::RECLAIMABLE,
        Gfp::ATOMIC,
        Gfp::KERNEL | Gfp::DMA32,
        Gfp::KERNEL | Gfp::THISZONE,
        Gfp::HIGHUSER_MOVABLE | Gfp::THISZONE,
        Gfp::ATOMIC | Gfp::DMA32 | Gfp::THISZONE,
        Gfp::KERNEL | Gfp::THISNODE,
        Gfp::NOWAIT,
        Gfp::KERNEL | Gfp::ZERO,
        Gfp::KERNEL | Gfp::NORETRY,
        Gfp::KERNEL | Gfp::MEMALLOC,
        Gfp::HIGHUSER_MOVABLE | Gfp::MEMALLOC,
        Gfp::ATOMIC | Gfp::MEMALLOC,
        Gfp::KERNEL | Gfp::DMA32 | Gfp::MEMALLOC | Gfp::THISZONE,
        Gfp::KERNEL | Gfp::RECLAIMABLE | Gfp::MEMALLOC | Gfp::THISNODE,
        Gfp::KERNEL | Gfp::MEMALLOC | Gfp::NOMEMALLOC,
        Gfp::KERNEL | Gfp::DMA,
    ]
}

/// The request mix of `no_spurious_oom`: watermarks never apply, and nothing can
/// create a highatomic reserve (no request is both `__GFP_HIGH` and non-blocking).
fn memalloc_gfps() -> Vec<Gfp> {
    let m = Gfp::MEMALLOC;
    vec![
        Gfp::KERNEL | m,
        Gfp::KERNEL | m,
        Gfp::KERNEL | m | Gfp::THISZONE,
        Gfp::HIGHUSER_MOVABLE | m,
        Gfp::HIGHUSER_MOVABLE | m | Gfp::THISZONE,
        Gfp::KERNEL | Gfp::RECLAIMABLE | m,
        Gfp::KERNEL | Gfp::DMA32 | m,
        Gfp::KERNEL | m | Gfp::THISNODE,
    ]
}

/// The model's `gfp_zone()`: the highest zone type a request may use.
fn model_highest_zone(gfp: Gfp) -> ZoneType {
    if gfp.contains(Gfp::DMA) {
        ZoneType::Dma
    } else if gfp.contains(Gfp::DMA32) {
        ZoneType::Dma32
    } else if gfp.contains(Gfp::HIGHMEM) {
        if gfp.contains(Gfp::MOVABLE) {
            ZoneType::Movable
        } else {
            ZoneType::HighMem
        }
    } else {
        ZoneType::Normal
    }
}

/// What a failed request proves about the zones it was allowed to use.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum OomRule {
    /// `NORETRY`: the request gives up before draining the per-CPU lists, so free
    /// memory may sit there unmerged. Nothing to check.
    Nothing,
    /// Watermarks apply. A zone with no free highatomic pages that holds a free
    /// aligned range of the order, and more free pages than its min watermark plus
    /// its lowmem reserve for the request (plus the `2^order - 1` the check
    /// discounts), must have served it: the min watermark is the slow pass's, and
    /// reserve-entitled requests only get a lower one.
    Watermarks,
    /// `MEMALLOC`, blocking: no watermarks; everything but the highatomic lists is
    /// reachable, so no free aligned range may exist unless highatomic pages are free.
    NoWatermarks,
    /// `MEMALLOC`, non-blocking: every free block is reachable.
    Everything,
}

fn oom_rule(gfp: Gfp) -> OomRule {
    if gfp.contains(Gfp::NORETRY) {
        OomRule::Nothing
    } else if !gfp.contains(Gfp::MEMALLOC) || gfp.contains(Gfp::NOMEMALLOC) {
        OomRule::Watermarks
    } else if gfp.contains(Gfp::DIRECT_RECLAIM) {
        OomRule::NoWatermarks
    } else {
        OomRule::Everything
    }
}

// ---------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------

/// Which public call a bad operation goes through.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Api {
    FreePages,
    /// `free_pages_on(cpu, ..)`, the CPU coming from `aux`.
    FreePagesOn,
    SplitPage,
    PutPage,
    GetPage,
    PageCount,
}

/// Which frame (and order) a bad operation aims at. The model then says what the
/// call must return; an aim that turns out legal (a freed head since reallocated
/// at the same order) is skipped and counted.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    /// A head freed earlier: a double free.
    Freed,
    /// A pfn in no zone: below, between or above the zones, or far away.
    OutOfRange,
    /// A hole inside a zone.
    Hole,
    /// A frame inside a held block other than its head.
    Tail,
    /// A free frame: the head of a free block or a frame inside one.
    FreeFrame,
    /// A held head with an order other than its own.
    WrongOrder,
    /// A held head with an order it is not aligned to.
    Misaligned,
    /// An order above `max_order`.
    InvalidOrder,
}

const ALL_TARGETS: [Target; 8] = [
    Target::Freed,
    Target::OutOfRange,
    Target::Hole,
    Target::Tail,
    Target::FreeFrame,
    Target::WrongOrder,
    Target::Misaligned,
    Target::InvalidOrder,
];

/// The targets that make sense without an order (`put_page`, `get_page`, `page_count`).
const REF_TARGETS: [Target; 5] = [
    Target::Freed,
    Target::OutOfRange,
    Target::Hole,
    Target::Tail,
    Target::FreeFrame,
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum BadAlloc {
    InvalidOrder,
    InvalidNode,
    /// `__GFP_DMA`: refused where no DMA zone is populated.
    DmaWithoutZone,
}

/// One step of a case. `sel` picks among what the model holds at that moment.
#[derive(Clone, Debug)]
enum Op {
    /// `alloc_pages_node(node % nr_nodes, gfp, order)` on the current CPU, or
    /// `alloc_pages_on(cpu, gfp, order)` (node 0).
    Alloc {
        gfp: Gfp,
        order: u8,
        node: u8,
        on_cpu: Option<u8>,
    },
    /// `alloc_block`: the guard is dropped at once, or kept with `into_raw`.
    AllocGuard { gfp: Gfp, order: u8, keep: bool },
    /// `free_pages` (or `free_pages_on(cpu, ..)`) of a held block at its order.
    Free { sel: usize, on_cpu: Option<u8> },
    /// `PageBlock::from_raw` of a held block, dropped.
    FreeGuard { sel: usize },
    /// `get_page` on a held head (`put_page` once it holds 4 references).
    Get { sel: usize },
    /// `put_page` on a held head.
    Put { sel: usize },
    /// `split_page` of a held block at its order.
    Split { sel: usize },
    /// A call the allocator must refuse, changing nothing.
    Bad {
        api: Api,
        target: Target,
        sel: usize,
        aux: u8,
    },
    /// An allocation the allocator must refuse before touching anything.
    BadAlloc { kind: BadAlloc, aux: u8 },
    /// The thread moves to another (simulated) CPU; the allocator takes the
    /// number modulo `nr_cpus`.
    Migrate { cpu: u8 },
    /// `drain_cpu_pages(cpu)`, or `drain_all_pages()`.
    Drain { cpu: Option<u8> },
    /// `pcp_decay()`.
    Decay,
    /// Cross-check the statistics.
    Stats,
}

/// Orders 0..=max, weighted toward small ones when `small` is set.
fn order_strategy(max: u8, small: bool) -> BoxedStrategy<u8> {
    if max == 0 {
        Just(0u8).boxed()
    } else if small {
        prop_oneof![6 => Just(0u8), 3 => 1..=max.min(3), 2 => 0..=max].boxed()
    } else {
        (0..=max).boxed()
    }
}

fn suite_ops(max: u8) -> BoxedStrategy<Op> {
    let gfp = || prop::sample::select(suite_gfps());
    let order = || order_strategy(max, true);
    let bad_ordered = (
        prop::sample::select(vec![Api::FreePages, Api::FreePagesOn, Api::SplitPage]),
        prop::sample::select(ALL_TARGETS.to_vec()),
        any::<usize>(),
        any::<u8>(),
    );
    let bad_ref = (
        prop::sample::select(vec![Api::PutPage, Api::GetPage, Api::PageCount]),
        prop::sample::select(REF_TARGETS.to_vec()),
        any::<usize>(),
        any::<u8>(),
    );
    let bad_alloc = prop::sample::select(vec![
        BadAlloc::InvalidOrder,
        BadAlloc::InvalidNode,
        BadAlloc::DmaWithoutZone,
    ]);
    prop_oneof![
        30 => (gfp(), order(), any::<u8>(), prop::option::weighted(0.2, 0..8u8))
            .prop_map(|(gfp, order, node, on_cpu)| Op::Alloc { gfp, order, node, on_cpu }),
        5 => (gfp(), order(), any::<bool>())
            .prop_map(|(gfp, order, keep)| Op::AllocGuard { gfp, order, keep }),
        20 => (any::<usize>(), prop::option::weighted(0.2, 0..8u8))
            .prop_map(|(sel, on_cpu)| Op::Free { sel, on_cpu }),
        3 => any::<usize>().prop_map(|sel| Op::FreeGuard { sel }),
        5 => any::<usize>().prop_map(|sel| Op::Get { sel }),
        6 => any::<usize>().prop_map(|sel| Op::Put { sel }),
        4 => any::<usize>().prop_map(|sel| Op::Split { sel }),
        12 => bad_ordered.prop_map(|(api, target, sel, aux)| Op::Bad { api, target, sel, aux }),
        6 => bad_ref.prop_map(|(api, target, sel, aux)| Op::Bad { api, target, sel, aux }),
        3 => (bad_alloc, any::<u8>()).prop_map(|(kind, aux)| Op::BadAlloc { kind, aux }),
        3 => (0..8u8).prop_map(|cpu| Op::Migrate { cpu }),
        2 => prop::option::weighted(0.5, 0..8u8).prop_map(|cpu| Op::Drain { cpu }),
        1 => Just(Op::Decay),
        2 => Just(Op::Stats),
    ]
    .boxed()
}

/// Allocation-heavy, orders uniform: memory runs out and fragments, so requests fail.
fn oom_ops(max: u8) -> BoxedStrategy<Op> {
    prop_oneof![
        20 => (prop::sample::select(memalloc_gfps()), order_strategy(max, false), any::<u8>())
            .prop_map(|(gfp, order, node)| Op::Alloc { gfp, order, node, on_cpu: None }),
        4 => any::<usize>().prop_map(|sel| Op::Free { sel, on_cpu: None }),
        1 => (0..8u8).prop_map(|cpu| Op::Migrate { cpu }),
        1 => any::<usize>().prop_map(|sel| Op::Put { sel }),
        2 => any::<usize>().prop_map(|sel| Op::Split { sel }),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------

struct ZoneModel {
    id: ZoneId,
    start: u64,
    end: u64,
    present: u64,
    hole: Vec<bool>,
    owned: Vec<bool>,
    /// Frames held by the test.
    nr_owned: u64,
}

impl ZoneModel {
    fn contains(&self, pfn: u64) -> bool {
        pfn >= self.start && pfn < self.end
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Block {
    order: u8,
    refs: u32,
}

/// What the test holds, and the layout it was built on.
struct Model {
    max_order: u8,
    nr_nodes: usize,
    zones: Vec<ZoneModel>,
    blocks: BTreeMap<u64, Block>,
    owned_pages: u64,
    /// Heads freed recently, with their order: double-free candidates.
    freed: VecDeque<(u64, u8)>,
    /// Pfns in no zone.
    out_of_range: Vec<u64>,
    /// Every hole frame.
    holes: Vec<u64>,
}

fn nr(order: u8) -> u64 {
    1u64 << order
}

fn aligned(pfn: u64, order: u8) -> bool {
    pfn & (nr(order) - 1) == 0
}

impl Model {
    /// Reads the layout through the public API and checks it against `config`.
    #[track_caller]
    fn new(za: &ZoneAllocator, config: &Config) -> Model {
        let configured: Vec<&ZoneConfig> = config.nodes.iter().flat_map(|n| &n.zones).collect();
        let listed: Vec<_> = za.zones().collect();
        assert_eq!(listed.len(), configured.len(), "zones() vs Config");
        let mut zones = Vec::new();
        let mut holes = Vec::new();
        for (&(id, start, spanned, present), zc) in listed.iter().zip(&configured) {
            assert_eq!(
                (id.zone_type, start, spanned),
                (zc.zone_type, zc.start_pfn, zc.spanned_pages),
                "zones() disagrees with the Config"
            );
            let mut hole = vec![false; spanned as usize];
            for i in 0..spanned {
                let pfn = start.0 + i;
                let in_cfg = zc.holes.iter().any(|&(h, n)| pfn >= h.0 && pfn < h.0 + n);
                let st = za.frame_state(Pfn(pfn));
                assert_eq!(
                    st == Some(FrameState::Hole),
                    in_cfg,
                    "frame {pfn:#x}: state {st:?}, configured hole: {in_cfg}"
                );
                if in_cfg {
                    hole[i as usize] = true;
                    holes.push(pfn);
                } else {
                    assert!(
                        matches!(st, Some(FrameState::Free { .. } | FrameState::Tail)),
                        "fresh frame {pfn:#x} is {st:?}"
                    );
                }
                assert_eq!(za.zone_id_of(Pfn(pfn)), Some(id));
            }
            let nr_holes = hole.iter().filter(|&&h| h).count() as u64;
            assert_eq!(present, spanned - nr_holes, "{id:?}: present frames");
            zones.push(ZoneModel {
                id,
                start: start.0,
                end: start.0 + spanned,
                present,
                owned: vec![false; spanned as usize],
                nr_owned: 0,
                hole,
            });
        }
        let in_zone = |p: u64| zones.iter().any(|z| z.contains(p));
        let mut out_of_range: Vec<u64> = vec![0, 1 << 40, u64::MAX - 1, u64::MAX];
        for z in zones.iter().filter(|z| z.end > z.start) {
            out_of_range.extend([z.start.wrapping_sub(1), z.end, z.end + 1, z.end + 4096]);
        }
        out_of_range.retain(|&p| !in_zone(p));
        out_of_range.sort_unstable();
        out_of_range.dedup();
        for &p in &out_of_range {
            assert_eq!(za.frame_state(Pfn(p)), None, "pfn {p:#x} is in no zone");
            assert_eq!(za.zone_id_of(Pfn(p)), None, "pfn {p:#x} is in no zone");
        }
        Model {
            max_order: config.max_order.0,
            nr_nodes: config.nodes.len(),
            zones,
            blocks: BTreeMap::new(),
            owned_pages: 0,
            freed: VecDeque::new(),
            out_of_range,
            holes,
        }
    }

    fn zone_of(&self, pfn: u64) -> Option<usize> {
        self.zones.iter().position(|z| z.contains(pfn))
    }

    fn set_owned(&mut self, pfn: u64, order: u8, owned: bool) {
        let zi = self.zone_of(pfn).expect("held block in a zone");
        let z = &mut self.zones[zi];
        let i = (pfn - z.start) as usize;
        for o in &mut z.owned[i..i + nr(order) as usize] {
            assert_ne!(*o, owned, "model: frame ownership flipped twice");
            *o = owned;
        }
        if owned {
            z.nr_owned += nr(order);
        } else {
            z.nr_owned -= nr(order);
        }
    }

    fn insert(&mut self, pfn: u64, order: u8) {
        self.set_owned(pfn, order, true);
        self.owned_pages += nr(order);
        let old = self.blocks.insert(pfn, Block { order, refs: 1 });
        assert!(old.is_none(), "model: {pfn:#x} held twice");
    }

    /// Drops one reference; returns whether that freed the block.
    fn put(&mut self, pfn: u64) -> bool {
        let b = self
            .blocks
            .get_mut(&pfn)
            .expect("model: put of an unheld block");
        b.refs -= 1;
        if b.refs > 0 {
            return false;
        }
        let order = b.order;
        self.blocks.remove(&pfn);
        self.set_owned(pfn, order, false);
        self.owned_pages -= nr(order);
        if self.freed.len() == 64 {
            self.freed.pop_front();
        }
        self.freed.push_back((pfn, order));
        true
    }

    fn split(&mut self, pfn: u64) {
        let b = self.blocks[&pfn];
        self.blocks.insert(
            pfn,
            Block {
                order: 0,
                refs: b.refs,
            },
        );
        for i in 1..nr(b.order) {
            self.blocks.insert(pfn + i, Block { order: 0, refs: 1 });
        }
    }

    fn nth_block(&self, sel: usize) -> Option<(u64, Block)> {
        let n = self.blocks.len();
        (n > 0).then(|| {
            let (&p, &b) = self.blocks.iter().nth(sel % n).unwrap();
            (p, b)
        })
    }

    /// What a call taking `pfn` as the head of a held block must return, following
    /// the rules `free_pages`, `split_page` (with `order`), `put_page`, `get_page`
    /// and `page_count` (without) document: order range, zone, alignment, then the
    /// frame's state, then the order match.
    fn expect_head(&self, pfn: u64, order: Option<u8>) -> Result<Block, FreeError> {
        let p = Pfn(pfn);
        if let Some(o) = order {
            if o > self.max_order {
                return Err(FreeError::InvalidOrder(Order(o)));
            }
        }
        let zi = self.zone_of(pfn).ok_or(FreeError::OutOfRange(p))?;
        if let Some(o) = order {
            if !aligned(pfn, o) {
                return Err(FreeError::Misaligned {
                    pfn: p,
                    order: Order(o),
                });
            }
        }
        let z = &self.zones[zi];
        let i = (pfn - z.start) as usize;
        if z.hole[i] {
            return Err(FreeError::Hole(p));
        }
        if let Some(&b) = self.blocks.get(&pfn) {
            if let Some(o) = order {
                if o != b.order {
                    return Err(FreeError::WrongOrder {
                        pfn: p,
                        given: Order(o),
                        actual: Order(b.order),
                    });
                }
            }
            return Ok(b);
        }
        if z.owned[i] {
            return Err(FreeError::TailPage(p));
        }
        Err(FreeError::AlreadyFree(p))
    }

    /// Node `nid`'s zonelist: nearest node first, each node's zones highest first,
    /// populated zones only.
    fn zonelist(&self, nid: usize) -> Vec<usize> {
        let mut nodes: Vec<usize> = (0..self.nr_nodes).collect();
        nodes.sort_by_key(|&n| n.abs_diff(nid));
        let mut zl = Vec::new();
        for n in nodes {
            let mut zs: Vec<usize> = (0..self.zones.len())
                .filter(|&i| self.zones[i].id.node as usize == n && self.zones[i].present > 0)
                .collect();
            zs.sort_by_key(|&i| std::cmp::Reverse(self.zones[i].id.zone_type));
            zl.extend(zs);
        }
        zl
    }

    /// The zones a request may be served from, or the error it must get before any
    /// zone is tried. An empty list means the request must fail with `NoMemory`.
    fn eligible(&self, nid: usize, gfp: Gfp, order: u8) -> Result<Vec<usize>, AllocError> {
        if order > self.max_order {
            return Err(AllocError::InvalidOrder(Order(order)));
        }
        if nid >= self.nr_nodes {
            return Err(AllocError::InvalidNode(nid as u16));
        }
        let highest = model_highest_zone(gfp);
        let zl: Vec<usize> = self
            .zonelist(nid)
            .into_iter()
            .filter(|&i| self.zones[i].id.zone_type <= highest)
            .collect();
        let &first = zl.first().ok_or(AllocError::NoEligibleZone)?;
        Ok(zl
            .into_iter()
            .filter(|&i| !gfp.contains(Gfp::THISZONE) || i == first)
            .filter(|&i| !gfp.contains(Gfp::THISNODE) || self.zones[i].id.node as usize == nid)
            .collect())
    }

    /// Why `[pfn, pfn + 2^order)` is not a legal new block in `eligible`, if it is not.
    fn illegal_block(&self, pfn: u64, order: u8, eligible: &[usize]) -> Option<String> {
        let Some(zi) = self.zone_of(pfn) else {
            return Some("in no zone".into());
        };
        let z = &self.zones[zi];
        if !eligible.contains(&zi) {
            return Some(format!("in {:?}, not an eligible zone", z.id));
        }
        if !aligned(pfn, order) {
            return Some(format!("not aligned to order {order}"));
        }
        if pfn + nr(order) > z.end {
            return Some(format!("runs past the end of {:?}", z.id));
        }
        let i = (pfn - z.start) as usize;
        let range = i..i + nr(order) as usize;
        if let Some(k) = z.hole[range.clone()].iter().position(|&h| h) {
            return Some(format!("frame {:#x} is a hole", pfn + k as u64));
        }
        if let Some(k) = z.owned[range].iter().position(|&o| o) {
            return Some(format!("frame {:#x} is already held", pfn + k as u64));
        }
        None
    }

    /// The first naturally aligned, fully free range of `2^order` frames in zone `zi`.
    fn free_range_in(&self, order: u8, zi: usize) -> Option<u64> {
        let size = nr(order);
        let z = &self.zones[zi];
        let mut a = z.start.next_multiple_of(size);
        while a + size <= z.end {
            let i = (a - z.start) as usize;
            let r = i..i + size as usize;
            if !z.hole[r.clone()].iter().any(|&h| h) && !z.owned[r].iter().any(|&o| o) {
                return Some(a);
            }
            a += size;
        }
        None
    }

    /// A free frame, searching from a point `sel` picks.
    fn free_frame(&self, sel: usize) -> Option<u64> {
        let pop: Vec<&ZoneModel> = self.zones.iter().filter(|z| z.present > 0).collect();
        let z = pop[sel % pop.len()];
        let n = (z.end - z.start) as usize;
        let from = (sel / pop.len()) % n;
        (0..n)
            .map(|k| (from + k) % n)
            .find(|&i| !z.hole[i] && !z.owned[i])
            .map(|i| z.start + i as u64)
    }
}

/// Free pages on the buddy lists, free pages parked on per-CPU lists and pages the
/// test holds must add up to every managed page. The one place to change when a
/// new layer starts holding pages.
#[track_caller]
fn assert_accounting(za: &ZoneAllocator, model: &Model) {
    let (free, pcp) = (za.nr_free_pages(), za.nr_pcp_pages());
    assert_eq!(
        free + pcp + model.owned_pages,
        za.managed_pages(),
        "free {free} + per-CPU {pcp} + held {} != managed {}",
        model.owned_pages,
        za.managed_pages()
    );
}

// ---------------------------------------------------------------------------
// Figures
// ---------------------------------------------------------------------------

/// What a run did, for the printed table.
#[derive(Default, Clone)]
struct Tally {
    cases: u64,
    ops: u64,
    teardown_ops: u64,
    allocs_ok: u64,
    allocs_failed: u64,
    /// (failed allocation, eligible zone) pairs where the model proved the failure
    /// was not spurious.
    oom_verdicts: u64,
    /// Pairs the rules excuse: a free range existed, but the zone was below its
    /// watermark or had free highatomic pages the request may not use.
    oom_excused: u64,
    /// Refused calls by (call, error).
    bad: BTreeMap<(String, String), u64>,
    /// Bad aims that turned out legal and were not made.
    bad_skipped: u64,
    digest_checks: u64,
    invariant_checks: u64,
    invariant_assertions: u64,
    stats_checks: u64,
    /// Teardowns that compared the free lists with a fresh allocator's.
    layout_checks: u64,
    /// Teardowns that found highatomic reserves before the refill.
    teardowns_with_reserves: u64,
    /// Per-CPU refills failed on purpose.
    pcp_refill_faults: u64,
    divergences: u64,
}

impl Tally {
    fn bad_total(&self) -> u64 {
        self.bad.values().sum()
    }

    fn add(&mut self, o: &Tally) {
        self.cases += o.cases;
        self.ops += o.ops;
        self.teardown_ops += o.teardown_ops;
        self.allocs_ok += o.allocs_ok;
        self.allocs_failed += o.allocs_failed;
        self.oom_verdicts += o.oom_verdicts;
        self.oom_excused += o.oom_excused;
        for (k, v) in &o.bad {
            *self.bad.entry(k.clone()).or_default() += v;
        }
        self.bad_skipped += o.bad_skipped;
        self.digest_checks += o.digest_checks;
        self.invariant_checks += o.invariant_checks;
        self.invariant_assertions += o.invariant_assertions;
        self.stats_checks += o.stats_checks;
        self.layout_checks += o.layout_checks;
        self.teardowns_with_reserves += o.teardowns_with_reserves;
        self.pcp_refill_faults += o.pcp_refill_faults;
        self.divergences += o.divergences;
    }
}

/// The variant name of an error (`WrongOrder` for `WrongOrder { .. }`), from its
/// `Debug` form, so that new variants need no change here.
fn variant(e: &impl std::fmt::Debug) -> String {
    let d = format!("{e:?}");
    let end = d.find(|c: char| !c.is_alphanumeric()).unwrap_or(d.len());
    d[..end].to_string()
}

// ---------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------

/// What every case of one configuration compares against.
struct Baseline {
    config: Config,
    buddyinfo: zonealloc::BuddyInfo,
    /// Free heads of a fresh allocator, in pfn order.
    free_heads: Vec<(u64, FrameState)>,
    /// Counted pageblocks per populated zone (constant over a run).
    nr_pageblocks: Vec<(ZoneId, u64)>,
    pcp_refill_fault_every: u64,
}

fn free_heads(za: &ZoneAllocator) -> Vec<(u64, FrameState)> {
    let mut v = Vec::new();
    for (_, start, spanned, _) in za.zones() {
        for p in start.0..start.0 + spanned {
            if let Some(st @ (FrameState::Free { .. } | FrameState::PerCpu { .. })) =
                za.frame_state(Pfn(p))
            {
                v.push((p, st));
            }
        }
    }
    v
}

impl Baseline {
    fn new(setup: &Setup) -> Baseline {
        let config = &setup.config;
        let za = ZoneAllocator::new(config.clone()).expect("valid config");
        Baseline {
            config: config.clone(),
            pcp_refill_fault_every: setup.pcp_refill_fault_every,
            buddyinfo: za.buddyinfo(),
            free_heads: free_heads(&za),
            nr_pageblocks: za
                .free_counts()
                .iter()
                .map(|z| (z.id, z.nr_blocks.iter().sum()))
                .collect(),
        }
    }
}

/// One case: the allocator, the model, and where the figures go.
struct Case<'a> {
    za: &'a ZoneAllocator,
    model: Model,
    base: &'a Baseline,
    t: &'a mut Tally,
}

/// How an allocation is made.
#[derive(Clone, Copy, Debug)]
enum How {
    /// `alloc_pages_node(nid, ..)` on the current CPU.
    Node(usize),
    /// `alloc_pages_on(cpu, ..)`.
    On(usize),
    /// `alloc_block`; the guard is dropped at once unless `keep` (then `into_raw`).
    Guard { keep: bool },
}

/// How a held block is freed.
#[derive(Clone, Copy, Debug)]
enum Release {
    Free,
    FreeOn(usize),
    Guard,
}

/// The request that fills every frame at teardown: every zone, no watermarks.
const FILL: Gfp = Gfp::from_bits(Gfp::HIGHUSER_MOVABLE.bits() | Gfp::MEMALLOC.bits());

impl Case<'_> {
    #[track_caller]
    fn check_step(&mut self) {
        let report = self
            .za
            .check_invariants()
            .unwrap_or_else(|v| panic!("check_invariants: {v}"));
        self.t.invariant_checks += 1;
        self.t.invariant_assertions += report.checks;
        assert_accounting(self.za, &self.model);
        assert_eq!(
            (report.allocated_blocks, report.allocated_pages),
            (self.model.blocks.len() as u64, self.model.owned_pages),
            "allocated blocks/pages per check_invariants vs held by the model"
        );
        assert_eq!(report.bad_pages, 0);
        assert_eq!(
            (report.free_pages, report.pcp_pages),
            (self.za.nr_free_pages(), self.za.nr_pcp_pages()),
            "free and per-CPU pages per check_invariants vs the counters"
        );
        for (&pfn, b) in &self.model.blocks {
            assert_eq!(
                self.za.frame_state(Pfn(pfn)),
                Some(FrameState::Allocated {
                    order: Order(b.order),
                    refcount: b.refs
                }),
                "held block {pfn:#x}"
            );
        }
    }

    /// The counters against the list walk and against each other.
    #[track_caller]
    fn check_stats(&mut self) {
        self.t.stats_checks += 1;
        let pti = self.za.pagetypeinfo();
        let walked = self.za.pagetypeinfo_walked();
        assert_eq!(pti, walked, "pagetypeinfo counters vs list walk");
        assert_eq!(pti.pageblock_order, self.base.config.pageblock_order);
        let bi = self.za.buddyinfo();
        assert_eq!(bi.zones.len(), pti.zones.len());
        let pb = self.base.config.pageblock_order.0 as usize;
        let mut total_free = 0;
        for (((id, per_order), z), &(bid, nr_blocks)) in bi
            .zones
            .iter()
            .zip(&pti.zones)
            .zip(&self.base.nr_pageblocks)
        {
            assert_eq!((*id, z.id), (bid, bid));
            assert_eq!(per_order.len(), self.model.max_order as usize + 1);
            let (mut free, mut high, mut blocks_pages) = (0, 0, 0);
            for (o, row) in z.nr_free.iter().enumerate() {
                assert_eq!(per_order[o], z.blocks_at(o), "{id:?}: buddyinfo order {o}");
                for mt in Migratetype::ALL {
                    let pages = row[mt.idx()] << o;
                    if mt != Migratetype::Isolate {
                        free += pages;
                        if o >= pb {
                            blocks_pages += pages;
                        }
                    }
                    if mt == Migratetype::HighAtomic {
                        high += pages;
                    }
                }
            }
            assert_eq!(z.nr_free_pages, free, "{id:?}: nr_free_pages vs lists");
            assert_eq!(z.nr_free_highatomic, high, "{id:?}: nr_free_highatomic");
            assert_eq!(z.nr_free_pages_blocks, blocks_pages, "{id:?}: blocks");
            assert_eq!(
                z.nr_blocks.iter().sum::<u64>(),
                nr_blocks,
                "{id:?}: pageblocks"
            );
            total_free += free;
        }
        assert_eq!(total_free, self.za.nr_free_pages());
        assert_eq!(
            self.za.vmstat().get("nr_free_pages"),
            Some(self.za.nr_free_pages())
        );
        // Per-CPU counts: pcp_stats, zoneinfo's pagesets and the total agree.
        let pcp = self.za.pcp_stats();
        // Refills and flushes counted per list order add up to their totals.
        for c in pcp.iter().flat_map(|z| z.cpus.iter()) {
            assert_eq!(
                c.refill_blocks_by_order.iter().sum::<u64>(),
                c.refill_blocks
            );
            assert_eq!(c.drain_blocks_by_order.iter().sum::<u64>(), c.drain_blocks);
        }
        let by_zone: Vec<(ZoneId, u64)> = pcp
            .iter()
            .map(|z| (z.id, z.cpus.iter().map(|c| c.count).sum()))
            .collect();
        assert_eq!(
            by_zone.iter().map(|z| z.1).sum::<u64>(),
            self.za.nr_pcp_pages()
        );
        for zi in self.za.zoneinfo().zones.iter().filter(|z| z.present > 0) {
            let counted = by_zone.iter().find(|z| z.0 == zi.id).map(|z| z.1);
            let listed: u64 = zi.pagesets.iter().map(|p| p.count).sum();
            assert_eq!(Some(listed), counted, "{:?}: zoneinfo pagesets", zi.id);
            // Per-zone accounting: free + per-CPU + held = present.
            let z = self.model.zones.iter().find(|z| z.id == zi.id).unwrap();
            assert_eq!(
                zi.free + listed + z.nr_owned,
                z.present,
                "{:?}: free {} + per-CPU {listed} + held {}",
                zi.id,
                zi.free,
                z.nr_owned
            );
        }
    }

    /// The free lists are the initial maximal decomposition again.
    #[track_caller]
    fn assert_initial_layout(&mut self) {
        self.t.layout_checks += 1;
        assert_eq!(
            self.za.buddyinfo(),
            self.base.buddyinfo,
            "buddyinfo after teardown vs a fresh allocator"
        );
        assert!(
            free_heads(self.za) == self.base.free_heads,
            "free heads after teardown differ from a fresh allocator's"
        );
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Alloc {
                gfp,
                order,
                node,
                on_cpu,
            } => {
                let nid = node as usize % self.model.nr_nodes;
                let how = match on_cpu {
                    Some(cpu) => How::On(cpu as usize),
                    None => How::Node(nid),
                };
                self.alloc(gfp, order, how);
            }
            Op::AllocGuard { gfp, order, keep } => self.alloc(gfp, order, How::Guard { keep }),
            Op::Free { sel, on_cpu } => {
                let how = on_cpu.map_or(Release::Free, |c| Release::FreeOn(c as usize));
                self.free(sel, how)
            }
            Op::FreeGuard { sel } => self.free(sel, Release::Guard),
            Op::Migrate { cpu } => set_cpu(cpu as usize),
            Op::Drain { cpu } => self.drain(cpu.map(usize::from)),
            Op::Decay => {
                self.za.pcp_decay();
            }
            Op::Get { sel } => self.get(sel),
            Op::Put { sel } => {
                if let Some((pfn, _)) = self.model.nth_block(sel) {
                    self.put(pfn);
                }
            }
            Op::Split { sel } => self.split(sel),
            Op::Bad {
                api,
                target,
                sel,
                aux,
            } => self.bad(api, target, sel, aux),
            Op::BadAlloc { kind, aux } => self.bad_alloc(kind, aux),
            Op::Stats => self.check_stats(),
        }
    }

    #[track_caller]
    fn alloc(&mut self, gfp: Gfp, order: u8, how: How) {
        let nid = match how {
            How::Node(nid) => nid,
            How::On(_) | How::Guard { .. } => 0,
        };
        let expect = self.model.eligible(nid, gfp, order);
        let got = match how {
            How::Node(nid) => self.za.alloc_pages_node(nid as u16, gfp, Order(order)),
            How::On(cpu) => self.za.alloc_pages_on(cpu, gfp, Order(order)),
            How::Guard { keep } => match self.za.alloc_block(gfp, Order(order)) {
                Ok(block) => {
                    let pfn = block.pfn();
                    assert_eq!(block.order(), Order(order));
                    if keep {
                        assert_eq!(block.into_raw(), (pfn, Order(order)));
                    } else {
                        self.check_new_block(pfn, order, &expect, gfp);
                        drop(block);
                        let st = self.za.frame_state(pfn);
                        assert!(
                            !matches!(st, Some(FrameState::Allocated { .. })),
                            "dropped guard left {pfn:?} {st:?}"
                        );
                        self.t.allocs_ok += 1;
                        return;
                    }
                    Ok(pfn)
                }
                Err(e) => Err(e),
            },
        };
        match got {
            Ok(pfn) => {
                self.check_new_block(pfn, order, &expect, gfp);
                assert_eq!(self.za.page_count(pfn), Ok(1));
                self.model.insert(pfn.0, order);
                self.t.allocs_ok += 1;
            }
            Err(e) => {
                self.t.allocs_failed += 1;
                match &expect {
                    Err(want) => assert_eq!(e, *want, "{gfp:?} order {order} {how:?}"),
                    Ok(eligible) => {
                        assert_eq!(
                            e,
                            AllocError::NoMemory {
                                order: Order(order)
                            },
                            "{gfp:?} order {order} {how:?}"
                        );
                        self.check_no_spurious_oom(gfp, order, eligible);
                    }
                }
            }
        }
    }

    #[track_caller]
    fn check_new_block(
        &self,
        pfn: Pfn,
        order: u8,
        expect: &Result<Vec<usize>, AllocError>,
        gfp: Gfp,
    ) {
        let eligible = match expect {
            Ok(e) => e,
            Err(want) => panic!("{gfp:?} order {order}: got {pfn:?}, expected {want:?}"),
        };
        if let Some(why) = self.model.illegal_block(pfn.0, order, eligible) {
            panic!("{gfp:?} order {order} returned {pfn:?}: {why}");
        }
        assert_eq!(
            self.za.frame_state(pfn),
            Some(FrameState::Allocated {
                order: Order(order),
                refcount: 1
            })
        );
    }

    /// After a `NoMemory`: what the failure proves, per `OomRule`.
    #[track_caller]
    fn check_no_spurious_oom(&mut self, gfp: Gfp, order: u8, eligible: &[usize]) {
        let rule = oom_rule(gfp);
        if rule == OomRule::Nothing {
            return;
        }
        // The failure path drained every per-CPU list.
        assert_eq!(self.za.nr_pcp_pages(), 0, "{gfp:?} failed without draining");
        let counts = self.za.free_counts();
        let zoneinfo = self.za.zoneinfo();
        let highest = model_highest_zone(gfp);
        for &zi in eligible {
            let z = &self.model.zones[zi];
            let Some(a) = self.model.free_range_in(order, zi) else {
                self.t.oom_verdicts += 1;
                continue;
            };
            let c = counts
                .iter()
                .find(|c| c.id == z.id)
                .expect("populated zone");
            let free = z.present - z.nr_owned;
            assert_eq!(c.nr_free_pages, free, "{:?}: free pages vs the model", z.id);
            if rule != OomRule::Everything && c.nr_free_highatomic > 0 {
                // The range may lie in a highatomic pageblock this request may not use.
                self.t.oom_excused += 1;
                continue;
            }
            if rule == OomRule::Watermarks {
                let min = self.za.watermarks(z.id).expect("zone")[0];
                let info = zoneinfo.zones.iter().find(|i| i.id == z.id).expect("zone");
                let reserve = info.protection[highest as usize];
                if free - (nr(order) - 1) <= min + reserve {
                    // Below the min watermark: refusing is the allocator's right.
                    self.t.oom_excused += 1;
                    continue;
                }
            }
            self.t.oom_verdicts += 1;
            panic!(
                "spurious OOM: {gfp:?} order {order} failed, but [{a:#x}, {:#x}) is free in \
                 {:?} ({free} free pages, watermarks {:?})",
                a + nr(order),
                z.id,
                self.za.watermarks(z.id)
            );
        }
    }

    #[track_caller]
    fn free(&mut self, sel: usize, how: Release) {
        let Some((pfn, b)) = self.model.nth_block(sel) else {
            return;
        };
        let (p, o) = (Pfn(pfn), Order(b.order));
        match how {
            Release::Free => assert_eq!(self.za.free_pages(p, o), Ok(())),
            Release::FreeOn(cpu) => assert_eq!(self.za.free_pages_on(cpu, p, o), Ok(())),
            // SAFETY: the model owns the block's only reference and hands it to the
            // guard; abstract frames have no memory to alias.
            Release::Guard => {
                drop(unsafe { zonealloc::PageBlock::from_raw(self.za, p, o) }.unwrap())
            }
        }
        self.after_put(pfn);
    }

    /// `drain_cpu_pages` / `drain_all_pages`: the pages they report leave the
    /// per-CPU lists for the buddy lists.
    #[track_caller]
    fn drain(&mut self, cpu: Option<usize>) {
        let (pcp, free) = (self.za.nr_pcp_pages(), self.za.nr_free_pages());
        let n = match cpu {
            Some(c) => self.za.drain_cpu_pages(c),
            None => self.za.drain_all_pages(),
        };
        assert_eq!(
            self.za.nr_pcp_pages(),
            pcp - n,
            "drain of {cpu:?} returned {n}"
        );
        assert_eq!(self.za.nr_free_pages(), free + n, "drain of {cpu:?}");
        match cpu {
            None => assert_eq!(self.za.nr_pcp_pages(), 0),
            Some(c) => {
                let c = c % self.base.config.nr_cpus;
                for z in self.za.pcp_stats() {
                    assert_eq!(z.cpus[c].count, 0, "{:?}: cpu {c} after its drain", z.id);
                }
            }
        }
    }

    #[track_caller]
    fn put(&mut self, pfn: u64) {
        let last = self.model.blocks[&pfn].refs == 1;
        assert_eq!(self.za.put_page(Pfn(pfn)), Ok(last), "put_page({pfn:#x})");
        self.after_put(pfn);
    }

    #[track_caller]
    fn after_put(&mut self, pfn: u64) {
        if self.model.put(pfn) {
            let st = self.za.frame_state(Pfn(pfn));
            assert!(
                matches!(
                    st,
                    Some(FrameState::Free { .. } | FrameState::Tail | FrameState::PerCpu { .. })
                ),
                "freed {pfn:#x} is {st:?}"
            );
        }
    }

    #[track_caller]
    fn get(&mut self, sel: usize) {
        let Some((pfn, b)) = self.model.nth_block(sel) else {
            return;
        };
        if b.refs >= 4 {
            return self.put(pfn);
        }
        assert_eq!(self.za.get_page(Pfn(pfn)), Ok(()));
        self.model.blocks.get_mut(&pfn).unwrap().refs += 1;
        assert_eq!(self.za.page_count(Pfn(pfn)), Ok(b.refs + 1));
    }

    #[track_caller]
    fn split(&mut self, sel: usize) {
        // Prefer blocks that have something to split.
        let big: Vec<u64> = self
            .model
            .blocks
            .iter()
            .filter(|(_, b)| b.order > 0)
            .map(|(&p, _)| p)
            .collect();
        let pfn = if big.is_empty() {
            match self.model.nth_block(sel) {
                Some((p, _)) => p,
                None => return,
            }
        } else {
            big[sel % big.len()]
        };
        let b = self.model.blocks[&pfn];
        assert_eq!(self.za.split_page(Pfn(pfn), Order(b.order)), Ok(()));
        self.model.split(pfn);
        assert_eq!(self.za.page_count(Pfn(pfn)), Ok(b.refs));
        for i in 1..nr(b.order) {
            assert_eq!(
                self.za.frame_state(Pfn(pfn + i)),
                Some(FrameState::Allocated {
                    order: Order(0),
                    refcount: 1
                })
            );
        }
    }

    /// Resolves a bad aim to a frame and an order.
    fn aim(&self, target: Target, sel: usize, aux: u8) -> Option<(u64, u8)> {
        let m = &self.model;
        let max = m.max_order;
        let any_order = aux % (max + 1);
        // The largest order `pfn` is aligned to, capped by `aux`.
        let fitting = |pfn: u64| (pfn.trailing_zeros().min(max as u32) as u8).min(any_order);
        match target {
            Target::Freed => {
                let n = m.freed.len();
                (n > 0).then(|| m.freed[sel % n])
            }
            Target::OutOfRange => {
                let p = m.out_of_range[sel % m.out_of_range.len()];
                Some((p, any_order))
            }
            Target::Hole => {
                let n = m.holes.len();
                (n > 0).then(|| (m.holes[sel % n], 0))
            }
            Target::Tail => {
                let big: Vec<(u64, u8)> = m
                    .blocks
                    .iter()
                    .filter(|(_, b)| b.order > 0)
                    .map(|(&p, b)| (p, b.order))
                    .collect();
                if big.is_empty() {
                    return None;
                }
                let (head, o) = big[sel % big.len()];
                let pfn = head + 1 + (aux as u64 * 7919) % (nr(o) - 1);
                Some((pfn, fitting(pfn)))
            }
            Target::FreeFrame => m.free_frame(sel).map(|p| (p, fitting(p))),
            Target::WrongOrder => {
                let (pfn, b) = m.nth_block(sel)?;
                let others: Vec<u8> = (0..=max)
                    .filter(|&o| o != b.order && aligned(pfn, o))
                    .collect();
                (!others.is_empty()).then(|| (pfn, others[aux as usize % others.len()]))
            }
            Target::Misaligned => {
                let pfn = match m.nth_block(sel) {
                    Some((p, _)) => p,
                    None => m.free_frame(sel)?,
                };
                let pfn = if aligned(pfn, max) { pfn + 1 } else { pfn };
                let tz = pfn.trailing_zeros() as u8;
                (tz < max).then(|| (pfn, tz + 1 + aux % (max - tz)))
            }
            Target::InvalidOrder => {
                let pfn = match m.nth_block(sel) {
                    Some((p, _)) => p,
                    None => m.free_frame(sel)?,
                };
                Some((pfn, max + 1 + aux % (250 - max)))
            }
        }
    }

    #[track_caller]
    fn bad(&mut self, api: Api, target: Target, sel: usize, aux: u8) {
        let Some((pfn, order)) = self.aim(target, sel, aux) else {
            self.t.bad_skipped += 1;
            return;
        };
        let with_order = matches!(api, Api::FreePages | Api::FreePagesOn | Api::SplitPage);
        let expected = match self.model.expect_head(pfn, with_order.then_some(order)) {
            Ok(_) => {
                self.t.bad_skipped += 1;
                return;
            }
            Err(e) => e,
        };
        let (p, o) = (Pfn(pfn), Order(order));
        let before = self.za.state_digest();
        let got = match api {
            Api::FreePages => self.za.free_pages(p, o),
            Api::FreePagesOn => self.za.free_pages_on(aux as usize, p, o),
            Api::SplitPage => self.za.split_page(p, o),
            Api::PutPage => self.za.put_page(p).map(|_| ()),
            Api::GetPage => self.za.get_page(p),
            Api::PageCount => self.za.page_count(p).map(|_| ()),
        };
        assert_eq!(
            got,
            Err(expected),
            "{api:?}({p:?}, order {order}) aimed at {target:?}"
        );
        assert_eq!(
            self.za.state_digest(),
            before,
            "refused {api:?}({p:?}, order {order}) changed the allocator"
        );
        self.t.digest_checks += 1;
        let mut kind = variant(&expected);
        if kind == "AlreadyFree" {
            match self.za.frame_state(p) {
                Some(FrameState::Tail) => kind += " (inside a free block)",
                Some(FrameState::PerCpu { .. }) => kind += " (on a per-CPU list)",
                _ => {}
            }
        }
        *self.t.bad.entry((format!("{api:?}"), kind)).or_default() += 1;
    }

    #[track_caller]
    fn bad_alloc(&mut self, kind: BadAlloc, aux: u8) {
        let m = &self.model;
        let (nid, gfp, order) = match kind {
            BadAlloc::InvalidOrder => (0, Gfp::KERNEL, m.max_order + 1 + aux % 100),
            BadAlloc::InvalidNode => (m.nr_nodes + aux as usize % 3, Gfp::KERNEL, 0),
            BadAlloc::DmaWithoutZone => (0, Gfp::KERNEL | Gfp::DMA, 0),
        };
        let expected = match m.eligible(nid, gfp, order) {
            Ok(_) => {
                self.t.bad_skipped += 1;
                return;
            }
            Err(e) => e,
        };
        let before = self.za.state_digest();
        let got = self.za.alloc_pages_node(nid as u16, gfp, Order(order));
        assert_eq!(got, Err(expected), "{gfp:?} order {order} node {nid}");
        assert_eq!(
            self.za.state_digest(),
            before,
            "refused allocation changed state"
        );
        self.t.digest_checks += 1;
        *self
            .t
            .bad
            .entry(("alloc_pages_node".into(), variant(&expected)))
            .or_default() += 1;
    }

    /// Drops every reference the test holds.
    #[track_caller]
    fn release_all(&mut self) {
        let held: Vec<(u64, Block)> = self.model.blocks.iter().map(|(&p, &b)| (p, b)).collect();
        for (i, (pfn, b)) in held.into_iter().enumerate() {
            for _ in 1..b.refs {
                self.put(pfn);
            }
            if i % 2 == 0 {
                assert_eq!(self.za.free_pages(Pfn(pfn), Order(b.order)), Ok(()));
                self.after_put(pfn);
            } else {
                self.put(pfn);
            }
            self.t.teardown_ops += b.refs as u64;
            assert_accounting(self.za, &self.model);
        }
        assert!(self.model.blocks.is_empty());
        self.drain(None);
        assert_eq!(self.za.nr_free_pages(), self.za.managed_pages());
    }

    /// Allocates every frame, largest blocks first, with watermarks off.
    #[track_caller]
    fn fill(&mut self) {
        for order in (0..=self.model.max_order).rev() {
            loop {
                self.t.teardown_ops += 1;
                match self.za.alloc_pages(FILL, Order(order)) {
                    Ok(pfn) => {
                        let expect = self.model.eligible(0, FILL, order);
                        self.check_new_block(pfn, order, &expect, FILL);
                        self.model.insert(pfn.0, order);
                    }
                    Err(e) => {
                        assert_eq!(
                            e,
                            AllocError::NoMemory {
                                order: Order(order)
                            }
                        );
                        break;
                    }
                }
            }
        }
        assert_eq!(
            (self.za.nr_free_pages(), self.za.nr_pcp_pages()),
            (0, 0),
            "refill left free pages"
        );
        assert_eq!(self.model.owned_pages, self.za.managed_pages());
    }

    #[track_caller]
    fn teardown(&mut self) {
        self.release_all();
        self.check_step();
        self.check_stats();
        let reserved: u64 = self
            .za
            .free_counts()
            .iter()
            .map(|z| z.nr_reserved_highatomic)
            .sum();
        if reserved == 0 {
            self.assert_initial_layout();
        } else {
            self.t.teardowns_with_reserves += 1;
        }
        self.fill();
        self.check_step();
        self.release_all();
        self.check_step();
        self.check_stats();
        for z in self.za.free_counts() {
            assert_eq!(
                (z.nr_reserved_highatomic, z.nr_free_highatomic),
                (0, 0),
                "{:?}: highatomic reserve survived a full refill",
                z.id
            );
        }
        self.assert_initial_layout();
    }
}

/// One case: a fresh allocator, the ops, the teardown.
fn run_case(base: &Baseline, ops: &[Op], t: &mut Tally) {
    let za = ZoneAllocator::new(base.config.clone()).expect("valid config");
    if base.pcp_refill_fault_every > 0 {
        za.inject_faults(FaultSite::PcpRefill, base.pcp_refill_fault_every);
    }
    let model = Model::new(&za, &base.config);
    set_cpu(0);
    let mut c = Case {
        za: &za,
        model,
        base,
        t,
    };
    c.t.cases += 1;
    c.check_step();
    c.check_stats();
    for (i, op) in ops.iter().enumerate() {
        c.apply(op);
        c.t.ops += 1;
        c.check_step();
        if i % 8 == 7 {
            c.check_stats();
        }
    }
    c.teardown();
    c.t.pcp_refill_faults += za.faults_injected(FaultSite::PcpRefill);
}

/// The figures of one configuration.
struct Row {
    name: &'static str,
    managed: u64,
    tally: Tally,
    secs: f64,
    /// The divergence found, with its shrunk input.
    failure: Option<String>,
}

/// Runs `cases` cases of at most `max_len` ops of `strategy` on one configuration
/// with a fixed seed. A divergence is counted, reported with its shrunk input, and
/// persisted in `proptest-regressions/model.txt`.
fn run_setup(
    setup: &Setup,
    seed: u64,
    (cases, max_len): (u32, usize),
    strategy: fn(u8) -> BoxedStrategy<Op>,
) -> Row {
    let start = Instant::now();
    let base = Baseline::new(setup);
    let config = ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model.txt",
        ))),
        source_file: Some(file!()),
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let tally = RefCell::new(Tally::default());
    let ops = prop::collection::vec(strategy(setup.config.max_order.0), 1..=max_len);
    let result = runner.run(&ops, |ops| {
        run_case(&base, &ops, &mut tally.borrow_mut());
        Ok(())
    });
    let mut tally = tally.into_inner();
    let failure = match result {
        Ok(()) => None,
        Err(TestError::Fail(why, ops)) => Some(format!(
            "{}: divergence: {why}\nminimal ops ({}): {ops:#?}",
            setup.name,
            ops.len()
        )),
        Err(e) => Some(format!("{}: {e}", setup.name)),
    };
    tally.divergences += failure.is_some() as u64;
    Row {
        name: setup.name,
        managed: ZoneAllocator::new(setup.config.clone())
            .expect("valid config")
            .managed_pages(),
        tally,
        secs: start.elapsed().as_secs_f64(),
        failure,
    }
}

/// Runs every configuration, two at a time (CI has two cores), with the budget
/// `(cases, max_len)` that `budget` gives it; rows come back in matrix order.
fn run_matrix(
    seed: u64,
    strategy: fn(u8) -> BoxedStrategy<Op>,
    budget: impl Fn(&Setup) -> (u32, usize) + Sync,
) -> Vec<Row> {
    let setups = setups();
    let rows = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(setup) = setups.get(i) else { break };
                let row = run_setup(setup, seed + i as u64, budget(setup), strategy);
                rows.lock().unwrap().push((i, row));
            });
        }
    });
    let mut rows = rows.into_inner().unwrap();
    rows.sort_by_key(|r| r.0);
    rows.into_iter().map(|r| r.1).collect()
}

/// Prints the table and the totals; returns the totals.
fn print_rows(title: &str, rows: &[Row], wall: f64) -> Tally {
    let mut total = Tally::default();
    let mut out = String::new();
    let line = |out: &mut String, c: [&dyn std::fmt::Display; 12]| {
        writeln!(
            out,
            "{:<44} {:>6} {:>6} {:>8} {:>7} {:>7} {:>7} {:>8} {:>6} {:>6} {:>4} {:>6}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11]
        )
        .unwrap()
    };
    writeln!(out, "\n== {title} ==").unwrap();
    line(
        &mut out,
        [
            &"configuration",
            &"frames",
            &"cases",
            &"ops",
            &"allocs",
            &"failed",
            &"oom-ok",
            &"inv-chk",
            &"bad",
            &"stats",
            &"div",
            &"secs",
        ],
    );
    for r in rows {
        let t = &r.tally;
        line(
            &mut out,
            [
                &r.name,
                &r.managed,
                &t.cases,
                &t.ops,
                &t.allocs_ok,
                &t.allocs_failed,
                &t.oom_verdicts,
                &t.invariant_checks,
                &t.bad_total(),
                &t.stats_checks,
                &t.divergences,
                &format!("{:.1}", r.secs),
            ],
        );
        total.add(t);
    }
    line(
        &mut out,
        [
            &format!("TOTAL: {} configurations", rows.len()),
            &"",
            &total.cases,
            &total.ops,
            &total.allocs_ok,
            &total.allocs_failed,
            &total.oom_verdicts,
            &total.invariant_checks,
            &total.bad_total(),
            &total.stats_checks,
            &total.divergences,
            &format!("{wall:.1}"),
        ],
    );
    let t = &total;
    for (what, n) in [
        (
            "operations in teardowns (release, refill, release)",
            t.teardown_ops,
        ),
        ("check_invariants() runs", t.invariant_checks),
        ("  assertions they evaluated", t.invariant_assertions),
        ("statistics cross-checks", t.stats_checks),
        ("refused calls, state_digest() unchanged", t.digest_checks),
        ("bad aims that turned out legal (skipped)", t.bad_skipped),
        (
            "failed request x zone: no free range, or served",
            t.oom_verdicts,
        ),
        (
            "failed request x zone: excused (min wmark/highatomic)",
            t.oom_excused,
        ),
        (
            "free lists compared with a fresh allocator's",
            t.layout_checks,
        ),
        (
            "  teardowns that first released highatomic reserves",
            t.teardowns_with_reserves,
        ),
        (
            "per-CPU refills failed by fault injection",
            t.pcp_refill_faults,
        ),
    ] {
        writeln!(out, "{what:<56} {n:>12}").unwrap();
    }
    if !t.bad.is_empty() {
        writeln!(
            out,
            "refused calls by kind (expected error, state unchanged):"
        )
        .unwrap();
        for ((api, kind), n) in &t.bad {
            writeln!(out, "  {api:<18} {kind:<36} {n:>7}").unwrap();
        }
    }
    writeln!(out, "divergences: {}", t.divergences).unwrap();
    println!("{out}");
    total
}

#[track_caller]
fn assert_no_failures(rows: &[Row]) {
    let failures: Vec<&str> = rows.iter().filter_map(|r| r.failure.as_deref()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// The main property over the whole configuration matrix, with its figures.
#[test]
fn model_suite_all_configs() {
    let start = Instant::now();
    let rows = run_matrix(0x5a11_0c00, suite_ops, |s| (cases_for(s.cases), s.max_len));
    let total = print_rows(
        "model suite: allocator vs reference model",
        &rows,
        start.elapsed().as_secs_f64(),
    );
    assert_no_failures(&rows);
    assert!(rows.len() >= 6);
    assert!(total.ops >= 100_000, "budget: {} ops", total.ops);
    for (kind, min) in [
        ("OutOfRange", 1),
        ("Hole", 1),
        ("TailPage", 1),
        ("AlreadyFree", 1),
        ("AlreadyFree (inside a free block)", 1),
        ("WrongOrder", 1),
        ("Misaligned", 1),
        ("InvalidOrder", 1),
    ] {
        let n: u64 = total
            .bad
            .iter()
            .filter(|((_, k), _)| *k == kind)
            .map(|(_, n)| n)
            .sum();
        assert!(n >= min, "no refused call of kind {kind} was tried");
    }
    record_figures("model", &total);
}

/// Hands a passing run's totals to `zonealloc selftest`'s table.
fn record_figures(suite: &str, t: &Tally) {
    let mut f: Vec<(String, u64)> = vec![
        ("operations".into(), t.ops + t.teardown_ops),
        ("invariant_checks".into(), t.invariant_checks),
        ("invariant_assertions".into(), t.invariant_assertions),
        ("violations".into(), t.divergences),
        ("faults:PcpRefill".into(), t.pcp_refill_faults),
    ];
    // One row per kind of bad call, summed over the entry points it was tried on.
    let mut by_kind: BTreeMap<&str, u64> = BTreeMap::new();
    for ((_, kind), n) in &t.bad {
        *by_kind.entry(kind.as_str()).or_default() += n;
    }
    for (kind, n) in by_kind {
        f.push((format!("bad_inputs:{kind}"), n));
    }
    figures::record(suite, env!("CARGO_MANIFEST_DIR"), &f);
}

/// `__GFP_MEMALLOC` requests ignore watermarks, so a failure must mean that no
/// naturally aligned, fully free range of the order exists in the zones the request
/// may use.
#[test]
fn no_spurious_oom() {
    let start = Instant::now();
    // Long, allocation-heavy cases: every configuration runs out of memory.
    let rows = run_matrix(0x000e_5eed, oom_ops, |s| {
        (cases_for(s.cases / 2), 4 * s.max_len)
    });
    let total = print_rows(
        "no spurious OOM (MEMALLOC requests only)",
        &rows,
        start.elapsed().as_secs_f64(),
    );
    assert_no_failures(&rows);
    assert_eq!(
        total.oom_excused, 0,
        "no request here can create a highatomic reserve"
    );
    for r in &rows {
        assert!(
            r.tally.oom_verdicts > 0,
            "{}: never ran out of memory",
            r.name
        );
    }
    record_figures("model-oom", &total);
}

/// Every configuration builds, and its layout (zones, holes, free blocks) is what
/// the Config says.
#[test]
fn configurations_build_with_the_configured_layout() {
    for s in setups() {
        let za = ZoneAllocator::new(s.config.clone()).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        let model = Model::new(&za, &s.config);
        let report = za.check_invariants().unwrap();
        assert_eq!(za.nr_free_pages(), za.managed_pages(), "{}", s.name);
        assert_eq!(report.free_pages, za.managed_pages(), "{}", s.name);
        let present: u64 = model.zones.iter().map(|z| z.present).sum();
        assert_eq!(present, za.managed_pages(), "{}", s.name);
        // The free blocks are the greedy maximal decomposition of each hole-free run.
        let mut expected = Vec::new();
        for z in &model.zones {
            let mut p = z.start;
            while p < z.end {
                if z.hole[(p - z.start) as usize] {
                    p += 1;
                    continue;
                }
                let mut q = p;
                while q < z.end && !z.hole[(q - z.start) as usize] {
                    q += 1;
                }
                for (pfn, order) in zonealloc::chunks(Pfn(p), q - p, s.config.max_order) {
                    expected.push((pfn.0, FrameState::Free { order }));
                }
                p = q;
            }
        }
        assert_eq!(free_heads(&za), expected, "{}", s.name);
    }
}

// ---------------------------------------------------------------------------
// Table-driven refusals on a fixed layout
// ---------------------------------------------------------------------------

/// Runs `call`, which must fail with `expected` and leave the state digest alone.
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(
    za: &ZoneAllocator,
    what: &str,
    call: impl FnOnce(&ZoneAllocator) -> Result<T, FreeError>,
    expected: FreeError,
) {
    let before = za.state_digest();
    let got = call(za);
    assert!(
        matches!(&got, Err(e) if *e == expected),
        "{what}: got {got:?}, expected {expected:?}"
    );
    assert_eq!(
        za.state_digest(),
        before,
        "{what}: refused call changed state"
    );
    za.check_invariants().unwrap();
}

/// Every kind of bad call, once each, with the exact error.
#[test]
fn every_bad_call_is_refused_with_its_error() {
    let config = Config {
        max_order: Order(4),
        pageblock_order: Order(2),
        nodes: vec![node(vec![
            zone(ZoneType::Normal, 16, 64).with_hole(Pfn(40), 4)
        ])],
        min_free_kbytes: Some(0),
        nr_cpus: 1,
        ..Config::default()
    };
    let za = ZoneAllocator::new(config).unwrap();
    let a = za.alloc_pages(Gfp::KERNEL, Order(2)).unwrap();
    let b = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    let c = za.alloc_pages(Gfp::KERNEL, Order(1)).unwrap();
    za.free_pages(c, Order(1)).unwrap();
    let free_inside = (16..80)
        .map(Pfn)
        .find(|&p| {
            za.frame_state(p) == Some(FrameState::Tail)
                && za.page_count(p).is_err()
                && !(a.0..a.0 + 4).contains(&p.0)
        })
        .unwrap();
    let free_head = (16..80)
        .map(Pfn)
        .find(|&p| matches!(za.frame_state(p), Some(FrameState::Free { .. })))
        .unwrap();
    let tail = a.add(1);
    let odd = if b.0 % 2 == 1 { b } else { tail };
    type Call = Box<dyn Fn(&ZoneAllocator) -> Result<(), FreeError>>;
    let cases: Vec<(&str, Call, FreeError)> = vec![
        (
            "double free",
            Box::new(move |z| z.free_pages(c, Order(1))),
            FreeError::AlreadyFree(c),
        ),
        (
            "below the zone",
            Box::new(|z| z.free_pages(Pfn(15), Order(0))),
            FreeError::OutOfRange(Pfn(15)),
        ),
        (
            "past the zone",
            Box::new(|z| z.free_pages(Pfn(80), Order(0))),
            FreeError::OutOfRange(Pfn(80)),
        ),
        (
            "a hole",
            Box::new(|z| z.free_pages(Pfn(41), Order(0))),
            FreeError::Hole(Pfn(41)),
        ),
        (
            "a tail page",
            Box::new(move |z| z.free_pages(tail, Order(0))),
            FreeError::TailPage(tail),
        ),
        (
            "inside a free block",
            Box::new(move |z| z.free_pages(free_inside, Order(0))),
            FreeError::AlreadyFree(free_inside),
        ),
        (
            "a free head",
            Box::new(move |z| z.free_pages(free_head, Order(0))),
            FreeError::AlreadyFree(free_head),
        ),
        (
            "wrong order",
            Box::new(move |z| z.free_pages(a, Order(1))),
            FreeError::WrongOrder {
                pfn: a,
                given: Order(1),
                actual: Order(2),
            },
        ),
        (
            "misaligned",
            Box::new(move |z| z.free_pages(odd, Order(1))),
            FreeError::Misaligned {
                pfn: odd,
                order: Order(1),
            },
        ),
        (
            "order above max",
            Box::new(move |z| z.free_pages(a, Order(5))),
            FreeError::InvalidOrder(Order(5)),
        ),
        (
            "order above max, out of range",
            Box::new(|z| z.free_pages(Pfn(u64::MAX), Order(200))),
            FreeError::InvalidOrder(Order(200)),
        ),
        (
            "put_page on a free frame",
            Box::new(move |z| z.put_page(free_head).map(|_| ())),
            FreeError::AlreadyFree(free_head),
        ),
        (
            "get_page on a free frame",
            Box::new(move |z| z.get_page(free_inside)),
            FreeError::AlreadyFree(free_inside),
        ),
        (
            "put_page on a tail",
            Box::new(move |z| z.put_page(tail).map(|_| ())),
            FreeError::TailPage(tail),
        ),
        (
            "get_page on a hole",
            Box::new(|z| z.get_page(Pfn(43))),
            FreeError::Hole(Pfn(43)),
        ),
        (
            "put_page out of range",
            Box::new(|z| z.put_page(Pfn(0)).map(|_| ())),
            FreeError::OutOfRange(Pfn(0)),
        ),
        (
            "split_page, wrong order",
            Box::new(move |z| z.split_page(a, Order(1))),
            FreeError::WrongOrder {
                pfn: a,
                given: Order(1),
                actual: Order(2),
            },
        ),
        (
            "split_page, order above max",
            Box::new(move |z| z.split_page(a, Order(9))),
            FreeError::InvalidOrder(Order(9)),
        ),
        (
            "split_page of a free block",
            Box::new(move |z| z.split_page(free_head, Order(0))),
            FreeError::AlreadyFree(free_head),
        ),
        (
            "split_page of a tail",
            Box::new(move |z| z.split_page(tail, Order(0))),
            FreeError::TailPage(tail),
        ),
    ];
    for (what, call, expected) in &cases {
        assert_refused(&za, what, call, *expected);
    }
    // The held blocks are untouched and still free normally.
    assert_eq!(za.page_count(a), Ok(1));
    za.free_pages(a, Order(2)).unwrap();
    za.free_pages(b, Order(0)).unwrap();
    za.drain_all_pages();
    assert_eq!(za.nr_free_pages(), za.managed_pages());
}
