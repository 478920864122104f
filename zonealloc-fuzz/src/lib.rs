//! Fuzz harness of zonealloc: byte strings become a configuration and a sequence of
//! operations over every public entry point, checked after every step.
//!
//! Two targets share this decoder and executor:
//!
//! * `ops`: arbitrary operation sequences (allocation at every order, frees,
//!   references, splits, contiguous and bulk paths, drains, statistics) against a
//!   model of what the caller owns. After each step: `check_invariants()`, an exact
//!   ledger (a frame handed out twice is a violation), and page accounting
//!   (`free + per-CPU + owned == managed`).
//! * `bad_frees`: the same, interleaved with bad calls of every kind (double free,
//!   including one whose first free sits on a per-CPU list; a frame outside every
//!   zone; a hole; a tail page; the wrong order; a misaligned frame; an order above
//!   the maximum; a partly free range; a duplicate in a bulk array). Each must return
//!   the expected error and leave `state_digest()` unchanged.
//!
//! cargo-fuzz drives them on nightly (`fuzz/`); `cargo test -p zonealloc-fuzz`
//! replays the committed corpus and a batch of seeded random inputs on stable.
//! Any input that ever failed is kept in the corpus as a named regression.

use std::collections::{BTreeMap, HashSet};

use arbitrary::{Arbitrary, Unstructured};
use zonealloc::{
    AbstractFrames, Config, FaultSite, FreeError, Gfp, NodeConfig, Order, PcpConfig, Pfn,
    ZoneAllocator, ZoneConfig, ZoneType,
};

/// The configuration a fuzz input selects.
#[derive(Arbitrary, Debug, Clone)]
pub struct FuzzConfig {
    start: u16,
    len: u16,
    hole: Option<(u16, u8)>,
    max_order: u8,
    pageblock_order: u8,
    cpus: u8,
    pcp: bool,
    pcp_small: bool,
    two_zones: bool,
    grouping: bool,
    /// Fail every n-th allocation and per-CPU refill (0 and 1: never).
    fault_every: u8,
}

/// One operation on the allocator.
#[derive(Arbitrary, Debug, Clone)]
pub enum Op {
    Alloc { cpu: u8, order: u8, gfp: u8 },
    Free { idx: u16, cpu: u8 },
    Get { idx: u16 },
    Put { idx: u16 },
    Split { idx: u16 },
    FreeContig { idx: u16 },
    AllocBulk { n: u8 },
    FreeBulk { first: u16, n: u8, reverse: bool },
    AllocContigRange { offset: u16, len: u16 },
    AllocContigPages { len: u16 },
    Drain { cpu: u8 },
    DrainAll,
    Decay,
    Stats,
    Bad(BadOp),
}

/// One bad call: it must fail and change nothing.
#[derive(Arbitrary, Debug, Clone)]
pub enum BadOp {
    DoubleFree { idx: u16 },
    OutOfRange { beyond: u16 },
    Hole,
    Tail { idx: u16 },
    WrongOrder { idx: u16, order: u8 },
    Misaligned { idx: u16 },
    OrderTooLarge { idx: u16 },
    PartlyFreeRange { idx: u16 },
    DuplicateInBulk { idx: u16 },
    GetFree { idx: u16 },
}

impl BadOp {
    fn kind(&self) -> &'static str {
        match self {
            BadOp::DoubleFree { .. } => "double free",
            BadOp::OutOfRange { .. } => "pfn outside every zone",
            BadOp::Hole => "hole",
            BadOp::Tail { .. } => "tail page",
            BadOp::WrongOrder { .. } => "wrong order",
            BadOp::Misaligned { .. } => "misaligned pfn",
            BadOp::OrderTooLarge { .. } => "order above max",
            BadOp::PartlyFreeRange { .. } => "partly free range",
            BadOp::DuplicateInBulk { .. } => "duplicate in bulk array",
            BadOp::GetFree { .. } => "reference to a free page",
        }
    }
}

/// What the caller owns: one entry per reference-holding block.
#[derive(Clone, Copy, Debug)]
struct Held {
    pfn: Pfn,
    order: Order,
    refs: u32,
}

/// Figures of a run.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// Inputs executed.
    pub execs: u64,
    /// Operations executed.
    pub ops: u64,
    /// `check_invariants()` runs.
    pub invariant_checks: u64,
    /// Assertions inside those runs.
    pub assertions: u64,
    /// Bad calls tried, by kind.
    pub bad_inputs: BTreeMap<&'static str, u64>,
    /// Failures injected, by site.
    pub faults: BTreeMap<&'static str, u64>,
}

impl Figures {
    /// Adds another run's figures.
    pub fn merge(&mut self, o: &Figures) {
        self.execs += o.execs;
        self.ops += o.ops;
        self.invariant_checks += o.invariant_checks;
        self.assertions += o.assertions;
        for (k, v) in &o.bad_inputs {
            *self.bad_inputs.entry(k).or_default() += v;
        }
        for (k, v) in &o.faults {
            *self.faults.entry(k).or_default() += v;
        }
    }
}

const GFPS: [Gfp; 5] = [
    Gfp::KERNEL,
    Gfp::HIGHUSER_MOVABLE,
    Gfp::KERNEL.union(Gfp::RECLAIMABLE),
    Gfp::ATOMIC,
    Gfp::KERNEL.union(Gfp::MEMALLOC),
];

fn build(c: &FuzzConfig) -> (ZoneAllocator<AbstractFrames>, Option<Pfn>) {
    let max_order = c.max_order % 11;
    let pb = c.pageblock_order % (max_order + 1);
    let len = 1 + c.len as u64 % 1024;
    let start = c.start as u64 % 5000;
    let mut zone = ZoneConfig::new(
        ZoneType::Normal,
        Pfn(start + if c.two_zones { 1024 } else { 0 }),
        len,
    );
    let mut hole = None;
    if let Some((off, n)) = c.hole {
        let off = off as u64 % len;
        let n = (1 + n as u64 % 16).min(len - off);
        if n < len {
            let h = zone.start_pfn.add(off);
            zone = zone.with_hole(h, n);
            hole = Some(h);
        }
    }
    let mut zones = vec![];
    if c.two_zones {
        zones.push(ZoneConfig::new(ZoneType::Dma32, Pfn(start), 1024));
    }
    zones.push(zone);
    let pcp = PcpConfig {
        enabled: c.pcp,
        batch: c.pcp_small.then_some(1),
        high_min: c.pcp_small.then_some(2),
        high_max: c.pcp_small.then_some(4),
        ..PcpConfig::default()
    };
    let config = Config {
        max_order: Order(max_order),
        pageblock_order: Order(pb),
        nodes: vec![NodeConfig { zones }],
        nr_cpus: 1 + c.cpus as usize % 4,
        pcp,
        mobility_grouping: c.grouping,
        ..Config::default()
    };
    (
        ZoneAllocator::new(config).expect("fuzz configurations are valid"),
        hole,
    )
}

/// Runs one input. `with_bad` interleaves the bad calls. Panics on any violation.
pub fn run(data: &[u8], with_bad: bool) -> Figures {
    let mut u = Unstructured::new(data);
    let Ok(config) = FuzzConfig::arbitrary(&mut u) else {
        return Figures::default();
    };
    let (za, hole) = build(&config);
    let sites = [
        (FaultSite::Alloc, "Alloc"),
        (FaultSite::PcpRefill, "PcpRefill"),
    ];
    if config.fault_every > 1 {
        for (site, _) in sites {
            za.inject_faults(site, config.fault_every as u64);
        }
    }
    let mut ex = Exec {
        za: &za,
        held: Vec::new(),
        owned: HashSet::new(),
        hole,
        fig: Figures {
            execs: 1,
            ..Figures::default()
        },
    };
    let mut steps = 0;
    while let Ok(op) = Op::arbitrary(&mut u) {
        if matches!(op, Op::Bad(_)) && !with_bad {
            continue;
        }
        ex.step(&op);
        steps += 1;
        if steps >= 400 {
            break;
        }
    }
    for (site, name) in sites {
        za.inject_faults(site, 0);
        let n = za.faults_injected(site);
        if n > 0 {
            ex.fig.faults.insert(name, n);
        }
    }
    ex.teardown();
    ex.fig
}

struct Exec<'a> {
    za: &'a ZoneAllocator<AbstractFrames>,
    held: Vec<Held>,
    owned: HashSet<u64>,
    hole: Option<Pfn>,
    fig: Figures,
}

impl Exec<'_> {
    fn take(&mut self, pfn: Pfn, order: Order) {
        for p in pfn.0..pfn.0 + order.nr_pages() {
            assert!(self.owned.insert(p), "frame {p:#x} handed out twice");
        }
        self.held.push(Held {
            pfn,
            order,
            refs: 1,
        });
    }

    fn give_back(&mut self, pfn: Pfn, order: Order) {
        for p in pfn.0..pfn.0 + order.nr_pages() {
            assert!(self.owned.remove(&p), "frame {p:#x} freed but not owned");
        }
    }

    fn pick(&self, idx: u16) -> Option<usize> {
        (!self.held.is_empty()).then(|| idx as usize % self.held.len())
    }

    /// Drops one reference of held entry `i` through `f`; updates the model.
    fn drop_ref(&mut self, i: usize) {
        let h = &mut self.held[i];
        h.refs -= 1;
        if h.refs == 0 {
            let h = self.held.swap_remove(i);
            self.give_back(h.pfn, h.order);
        }
    }

    fn order0_run(&self, i: usize) -> Vec<usize> {
        // Held order-0 pages with one reference starting at held[i], consecutive,
        // in held[i]'s zone (a range across zones is refused: `CrossesZone`).
        let mut by_pfn: BTreeMap<u64, usize> = BTreeMap::new();
        for (k, h) in self.held.iter().enumerate() {
            if h.order.0 == 0 && h.refs == 1 {
                by_pfn.insert(h.pfn.0, k);
            }
        }
        let zone = self.za.zone_id_of(self.held[i].pfn);
        let mut run = vec![];
        let mut p = self.held[i].pfn.0;
        while let Some(&k) = by_pfn.get(&p) {
            if self.za.zone_id_of(Pfn(p)) != zone {
                break;
            }
            run.push(k);
            p += 1;
        }
        run
    }

    fn remove_indices(&mut self, mut idx: Vec<usize>) {
        idx.sort_unstable_by(|a, b| b.cmp(a));
        for k in idx {
            let h = self.held.swap_remove(k);
            self.give_back(h.pfn, h.order);
        }
    }

    fn step(&mut self, op: &Op) {
        let za = self.za;
        let max = za.config().max_order;
        self.fig.ops += 1;
        match *op {
            Op::Alloc { cpu, order, gfp } => {
                let order = Order(order % (max.0 + 2));
                let gfp = GFPS[gfp as usize % GFPS.len()];
                match za.alloc_pages_on(cpu as usize, gfp, order) {
                    Ok(p) => {
                        assert!(order <= max);
                        assert!(p.is_aligned(order));
                        self.take(p, order);
                    }
                    Err(e) => assert!(
                        order > max || matches!(e, zonealloc::AllocError::NoMemory { .. }),
                        "{e:?}"
                    ),
                }
            }
            Op::Free { idx, cpu } => {
                if let Some(i) = self.pick(idx) {
                    let h = self.held[i];
                    za.free_pages_on(cpu as usize, h.pfn, h.order).unwrap();
                    self.drop_ref(i);
                }
            }
            Op::Get { idx } => {
                if let Some(i) = self.pick(idx) {
                    za.get_page(self.held[i].pfn).unwrap();
                    self.held[i].refs += 1;
                }
            }
            Op::Put { idx } => {
                if let Some(i) = self.pick(idx) {
                    let freed = za.put_page(self.held[i].pfn).unwrap();
                    assert_eq!(freed, self.held[i].refs == 1);
                    self.drop_ref(i);
                }
            }
            Op::Split { idx } => {
                if let Some(i) = self.pick(idx) {
                    let h = self.held[i];
                    if h.refs == 1 && h.order.0 > 0 {
                        za.split_page(h.pfn, h.order).unwrap();
                        self.held.swap_remove(i);
                        for k in 0..h.order.nr_pages() {
                            self.held.push(Held {
                                pfn: h.pfn.add(k),
                                order: Order(0),
                                refs: 1,
                            });
                        }
                    }
                }
            }
            Op::FreeContig { idx } => {
                if let Some(i) = self.pick(idx) {
                    let run = self.order0_run(i);
                    if !run.is_empty() {
                        za.free_contig_range(self.held[i].pfn, run.len() as u64)
                            .unwrap();
                        self.remove_indices(run);
                    }
                }
            }
            Op::AllocBulk { n } => {
                let mut pages = vec![None; n as usize % 70];
                let got = za.alloc_pages_bulk(Gfp::KERNEL, &mut pages);
                assert_eq!(got, pages.iter().flatten().count());
                for p in pages.into_iter().flatten() {
                    self.take(p, Order(0));
                }
            }
            Op::FreeBulk { first, n, reverse } => {
                let singles: Vec<usize> = (0..self.held.len())
                    .filter(|&k| self.held[k].order.0 == 0 && self.held[k].refs == 1)
                    .collect();
                if !singles.is_empty() {
                    let start = first as usize % singles.len();
                    let mut chosen: Vec<usize> = singles
                        .iter()
                        .copied()
                        .skip(start)
                        .take(1 + n as usize % 64)
                        .collect();
                    chosen.sort_by_key(|&k| self.held[k].pfn);
                    let mut pfns: Vec<Pfn> = chosen.iter().map(|&k| self.held[k].pfn).collect();
                    if reverse {
                        pfns.reverse();
                    }
                    za.free_pages_bulk(&pfns).unwrap();
                    self.remove_indices(chosen);
                }
            }
            Op::AllocContigRange { offset, len } => {
                let (_, start, spanned, _) = za.zones().last().unwrap();
                let off = offset as u64 % spanned;
                let len = 1 + len as u64 % 600;
                let end = (start.0 + off + len).min(start.0 + spanned);
                let s = start.add(off);
                let want_ok =
                    (s.0..end).all(|p| !self.owned.contains(&p) && Some(Pfn(p)) != self.hole);
                match za.alloc_contig_range(s, Pfn(end)) {
                    Ok(()) => {
                        for p in s.0..end {
                            self.take(Pfn(p), Order(0));
                        }
                    }
                    // A range may fail even when the model says it is free only if
                    // it crosses into memory the model cannot see (none here).
                    Err(e) => assert!(
                        !want_ok || hole_in(self.hole, s.0, end),
                        "{e:?} for free range {s:?}..{end:#x}"
                    ),
                }
            }
            Op::AllocContigPages { len } => {
                let len = 1 + len as u64 % 300;
                if let Ok(p) = za.alloc_contig_pages(len, Gfp::KERNEL, 0) {
                    for q in p.0..p.0 + len {
                        self.take(Pfn(q), Order(0));
                    }
                }
            }
            Op::Drain { cpu } => {
                za.drain_cpu_pages(cpu as usize);
            }
            Op::DrainAll => {
                za.drain_all_pages();
            }
            Op::Decay => {
                za.pcp_decay();
            }
            Op::Stats => {
                assert_eq!(za.pagetypeinfo(), za.pagetypeinfo_walked());
                let _ = (
                    za.buddyinfo().to_string(),
                    za.zoneinfo().to_string(),
                    za.vmstat().to_string(),
                );
            }
            Op::Bad(ref b) => self.bad(b),
        }
        self.check();
    }

    fn check(&mut self) {
        let za = self.za;
        let r = za
            .check_invariants()
            .unwrap_or_else(|v| panic!("invariant violated: {v}"));
        self.fig.invariant_checks += 1;
        self.fig.assertions += r.checks;
        assert_eq!(
            r.allocated_pages,
            self.owned.len() as u64,
            "allocated frames != owned frames"
        );
        assert_eq!(
            za.nr_free_pages() + za.nr_pcp_pages() + self.owned.len() as u64,
            za.managed_pages(),
            "frames lost"
        );
    }

    /// A bad call: the expected error, and nothing changed.
    fn bad(&mut self, b: &BadOp) {
        let za = self.za;
        let max = za.config().max_order;
        let digest = za.state_digest();
        let held = |idx: u16| self.pick(idx).map(|i| self.held[i]);
        let result: Option<Result<(), FreeError>> = match *b {
            BadOp::DoubleFree { idx } => {
                // Free a single-reference block for real, then free it again.
                let Some(i) = self.pick(idx).filter(|&i| self.held[i].refs == 1) else {
                    return;
                };
                let h = self.held[i];
                za.free_pages(h.pfn, h.order).unwrap();
                self.drop_ref(i);
                let d = za.state_digest();
                let r = za.free_pages(h.pfn, h.order);
                assert!(matches!(r, Err(FreeError::AlreadyFree(_))), "{r:?}");
                assert_eq!(za.state_digest(), d, "double free changed state");
                *self.fig.bad_inputs.entry(b.kind()).or_default() += 1;
                return;
            }
            BadOp::OutOfRange { beyond } => {
                let p = Pfn(20_000 + beyond as u64);
                let r = za.free_pages(p, Order(0));
                assert_eq!(r, Err(FreeError::OutOfRange(p)));
                Some(r)
            }
            BadOp::Hole => self.hole.map(|p| {
                let r = za.free_pages(p, Order(0));
                assert_eq!(r, Err(FreeError::Hole(p)));
                r
            }),
            BadOp::Tail { idx } => held(idx).filter(|h| h.order.0 > 0).map(|h| {
                let r = za.free_pages(h.pfn.add(1), Order(0));
                assert_eq!(r, Err(FreeError::TailPage(h.pfn.add(1))));
                r
            }),
            BadOp::WrongOrder { idx, order } => held(idx)
                .filter(|h| h.order.0 != order % (max.0 + 1))
                .map(|h| {
                    let o = Order(order % (max.0 + 1));
                    let r = za.free_pages(h.pfn, o);
                    assert!(
                        matches!(
                            r,
                            Err(FreeError::WrongOrder { .. }) | Err(FreeError::Misaligned { .. })
                        ),
                        "{r:?}"
                    );
                    r
                }),
            BadOp::Misaligned { idx } => held(idx)
                .filter(|h| h.pfn.0 % 2 == 1 || h.order.0 > 0)
                .map(|h| {
                    let p = if h.order.0 > 0 { h.pfn.add(1) } else { h.pfn };
                    let r = za.free_pages(p, Order(1));
                    assert!(r.is_err(), "{r:?}");
                    r
                }),
            BadOp::OrderTooLarge { idx } => held(idx).map(|h| {
                let o = Order(max.0 + 1);
                let r = za.free_pages(h.pfn, o);
                assert_eq!(r, Err(FreeError::InvalidOrder(o)));
                r
            }),
            BadOp::PartlyFreeRange { idx } => held(idx).filter(|h| h.order.0 == 0).and_then(|h| {
                let next = h.pfn.add(1);
                (!self.owned.contains(&next.0) && za.zone_id_of(next).is_some()).then(|| {
                    let r = za.free_contig_range(h.pfn, 2);
                    assert!(r.is_err(), "{r:?}");
                    r
                })
            }),
            BadOp::DuplicateInBulk { idx } => held(idx)
                .filter(|h| h.order.0 == 0 && h.refs == 1)
                .map(|h| {
                    let r = za.free_pages_bulk(&[h.pfn, h.pfn]);
                    assert_eq!(r, Err(FreeError::AlreadyFree(h.pfn)));
                    r
                }),
            BadOp::GetFree { idx } => {
                let (_, start, spanned, _) = za.zones().last().unwrap();
                let p = start.add(idx as u64 % spanned);
                (!self.owned.contains(&p.0)).then(|| {
                    let r = za.get_page(p);
                    assert!(r.is_err(), "{r:?}");
                    r
                })
            }
        };
        if let Some(r) = result {
            if r.is_err() {
                *self.fig.bad_inputs.entry(b.kind()).or_default() += 1;
                assert_eq!(za.state_digest(), digest, "{b:?} changed state");
            }
        }
    }

    fn teardown(&mut self) {
        let za = self.za;
        for h in std::mem::take(&mut self.held) {
            for _ in 0..h.refs {
                za.put_page(h.pfn).unwrap();
            }
            self.give_back(h.pfn, h.order);
        }
        za.drain_all_pages();
        self.check();
        assert_eq!(za.nr_free_pages(), za.managed_pages());
    }
}

fn hole_in(hole: Option<Pfn>, start: u64, end: u64) -> bool {
    // The configured hole is up to 16 frames from its first frame.
    hole.is_some_and(|h| h.0 < end && h.0 + 16 > start)
}

/// A deterministic pseudo-random byte string (splitmix64), for the stable runs.
pub fn seeded_input(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}
