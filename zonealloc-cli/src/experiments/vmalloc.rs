//! `vmalloc`: Linux's test_vmalloc cases with `vfree` page by page against
//! `free_pages_bulk` (seed 002).
//!
//! Both variants build page arrays the 6.19+ way (high orders first, each block split
//! to order 0, `VmallocConfig::high_order_first`); they differ only in `vfree`:
//!
//! * **before**, `VfreeMode::PerPage` (mm-new in the seed's table): one
//!   `free_pages(pfn, 0)` per page, so a split order-k block returns as 2^k order-0
//!   pages to this CPU's order-0 list, and the next `vmalloc` has to get its order-k
//!   block from the buddy again.
//! * **after**, `VfreeMode::Bulk` (seed 002): `free_pages_bulk(pages)`, each run of
//!   consecutive frames freed as the largest aligned blocks, so the order-k block
//!   returns as one block (to the order-k per-CPU list for k ≤ 3 or 9).
//!
//! The cases are `lib/test_vmalloc.c`'s (see `reference/seed-benchmarks.md` b.3);
//! as in the module, one sample is the time of one whole test call (set-up and
//! teardown included) in µs, and the labels read `p:` pages, `h:` huge, `l:` loop
//! count. Every case runs twice:
//!
//! * **sim**: abstract frames (`VmallocSpace::new`): nothing is mapped and there is
//!   no memory, so the tests' one-byte writes and `__GFP_ZERO` cost nothing. This
//!   isolates the allocator, as the seed's ratios need.
//! * **mapped**: a memfd arena (`VmallocSpace::new_mapped`): each area's frames are
//!   really mapped with `mmap(MAP_FIXED | MAP_SHARED)` and unmapped again, the byte
//!   writes land in the frames (through `page_address`), `__GFP_ZERO` clears the
//!   pages. Syscalls dominate; a sanity check that the gain survives them.
//!
//! `kvfree_rcu_*` (no deferred-free queue here) and `align_shift` (expected to fail)
//! are left out. `pcpu_alloc_test` exercises Linux's per-CPU chunk allocator, which
//! this crate does not have: a stand-in carves its 35,000 objects out of per-CPU
//! chunks that are `vmalloc` areas (2 MiB per CPU, Linux's usual unit size on
//! x86-64) and `vfree`s each chunk when its last object goes.
//!
//! Each variant has its own 1 GiB zone (and, for the zeroing cases, a second space
//! on it whose page allocations carry `__GFP_ZERO`), and runs on a thread pinned to
//! one CPU. Both variants of a case get the same random sizes.

use std::time::Instant;

use zonealloc::{
    ArenaOptions, Backend, Config, Gfp, Pfn, VfreeMode, VmArea, VmallocConfig, VmallocSpace,
    ZoneAllocator, ZoneType,
};

use super::seed_util::{first_cpu, on_cpu, round_speedups, Rng};
use super::{Experiment, ExperimentResult, Target};
use crate::harness::{secs_since, Ctx, Metric, Samples, Table, Variant};

/// The experiment.
pub struct Vmalloc;

/// 1 GiB of 4 KiB frames per variant.
const ZONE_PAGES: u64 = 1 << 18;
const PAGE: usize = 4096;
/// `THREAD_ALIGN << 1` on x86-64 (16 KiB stacks).
const FIX_ALIGN_BYTES: usize = 32 << 10;
/// Live 1-page areas of `long_busy_list_alloc_test`.
const BUSY_LIST: usize = 15_000;
/// Objects of `pcpu_alloc_test` (`nr_pcpu_objects`).
const PCPU_OBJECTS: usize = 35_000;
/// Bytes per CPU in a per-CPU chunk of the stand-in (`pcpu_unit_size`).
const PCPU_UNIT_BYTES: usize = 2 << 20;

/// One test_vmalloc case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    FixAlign,
    FixSize { p: usize, huge: bool },
    FullFit,
    LongBusyList,
    PcpuAlloc,
    RandomSizeAlign,
    RandomSize,
    VmMapRam,
}

/// The seed's table, in its order, with its change (%, > 0 faster) and whether it
/// was a significant improvement.
const SEED_TABLE: [(Case, f64, bool); 17] = [
    (Case::FixAlign, 67.17, true),
    (Case::FixSize { p: 1, huge: false }, -5.14, false),
    (Case::FixSize { p: 4, huge: false }, 53.55, true),
    (Case::FixSize { p: 16, huge: false }, 57.26, true),
    (Case::FixSize { p: 16, huge: true }, 68.46, true),
    (Case::FixSize { p: 64, huge: false }, 79.27, true),
    (Case::FixSize { p: 64, huge: true }, 84.17, true),
    (
        Case::FixSize {
            p: 256,
            huge: false,
        },
        77.01,
        true,
    ),
    (Case::FixSize { p: 256, huge: true }, 89.44, true),
    (
        Case::FixSize {
            p: 512,
            huge: false,
        },
        82.67,
        true,
    ),
    (Case::FixSize { p: 512, huge: true }, 118.09, true),
    (Case::FullFit, -0.98, false),
    (Case::LongBusyList, 74.58, true),
    (Case::PcpuAlloc, 4.35, false),
    (Case::RandomSizeAlign, 76.99, true),
    (Case::RandomSize, 72.23, true),
    (Case::VmMapRam, -0.70, false),
];

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::FixAlign => "fix_align_alloc_test",
            Case::FixSize { .. } => "fix_size_alloc_test",
            Case::FullFit => "full_fit_alloc_test",
            Case::LongBusyList => "long_busy_list_alloc_test",
            Case::PcpuAlloc => "pcpu_alloc_test (stand-in)",
            Case::RandomSizeAlign => "random_size_align_alloc_test",
            Case::RandomSize => "random_size_alloc_test",
            Case::VmMapRam => "vm_map_ram_test",
        }
    }

    /// `p` and `h` as the seed labels them (1 and 0 for cases that ignore them).
    fn p_h(self) -> (usize, bool) {
        match self {
            Case::FixSize { p, huge } => (p, huge),
            _ => (1, false),
        }
    }

    /// The seed's loop count: 500,000, or 100,000 for p ≥ 64.
    fn seed_loops(self) -> u64 {
        if self.p_h().0 >= 64 {
            100_000
        } else {
            500_000
        }
    }

    /// Whether the case allocates with `__GFP_ZERO`.
    fn zeroes(self) -> bool {
        matches!(self, Case::FixAlign | Case::RandomSizeAlign)
    }

    fn label(self, l: u64) -> String {
        let (p, h) = self.p_h();
        format!("{}: p:{p}, h:{}, l:{l} (usec)", self.name(), h as u8)
    }

    /// The case in words, for a chart's row (the label keeps test_vmalloc's name).
    fn words(self) -> String {
        match self {
            Case::FixAlign => "5 pages aligned to 32 KiB, zeroed".to_owned(),
            Case::FixSize { p, huge } => format!(
                "{p} page{}{}",
                if p == 1 { "" } else { "s" },
                if huge { ", vmalloc_huge" } else { "" }
            ),
            Case::FullFit => "1 page into exact-fit holes".to_owned(),
            Case::LongBusyList => "100 + 1 pages beside 15,000 live areas".to_owned(),
            Case::PcpuAlloc => "per-CPU chunks of 2 MiB (stand-in)".to_owned(),
            Case::RandomSizeAlign => "1–10 pages, random alignment, zeroed".to_owned(),
            Case::RandomSize => "1–100 pages, random".to_owned(),
            Case::VmMapRam => "vm_map_ram of a page (control: frees nothing)".to_owned(),
        }
    }

    fn id(self) -> String {
        let (p, h) = self.p_h();
        let short = self.name().split(' ').next().unwrap_or("case");
        format!("{short}-p{p}-h{}", h as u8)
    }
}

/// The two page-freeing variants, in table order.
const MODES: [(VfreeMode, &str); 2] = [
    (VfreeMode::PerPage, "per-page vfree"),
    (VfreeMode::Bulk, "free_pages_bulk"),
];

impl Experiment for Vmalloc {
    fn name(&self) -> &'static str {
        "vmalloc"
    }

    fn description(&self) -> &'static str {
        "seed 002: test_vmalloc cases, vfree page by page vs free_pages_bulk, on abstract \
         frames (sim) and on a memfd arena with real mappings (mapped)"
    }

    fn run(&self, ctx: &mut Ctx) -> ExperimentResult {
        let mut res = ExperimentResult::new(self);
        // Loop counts: the seed's l divided by these.
        let sim_div: u64 = ctx.scale(100, 1);
        let mapped_div: u64 = ctx.scale(1000, 10);
        res.param(
            "loop count l: the seed's (500000, or 100000 for p >= 64) divided by",
            format!("{sim_div} (sim), {mapped_div} (mapped)"),
        );
        res.param(
            "zone per variant",
            "1 GiB, PCP defaults; page arrays high orders first",
        );
        let nr_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let full_fit_pairs = nr_cpus.ilog2() as usize + 1; // fls(num_online_cpus)
        let full_fit_pairs = full_fit_pairs * ((32 << 20) / PAGE);
        // Each mapped 1-page area is a VMA, and its guard gap another: stay under
        // vm.max_map_count with every full_fit pair live.
        let max_maps: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(65_530);
        let mapped_pairs = full_fit_pairs.min((max_maps.saturating_sub(4096) / 4) & !1023);
        res.param(
            "full_fit pairs J (fls(CPUs) x 32 MiB / page)",
            format!("{full_fit_pairs} (sim), {mapped_pairs} (mapped: vm.max_map_count {max_maps})"),
        );
        let cpu = first_cpu();
        res.param(
            "thread",
            cpu.map_or("unpinned".to_owned(), |c| format!("one, pinned to CPU {c}")),
        );

        let mut summary = Vec::new();
        // sim: abstract frames.
        {
            let zas: Vec<ZoneAllocator> = MODES
                .iter()
                .map(|_| ZoneAllocator::new(config()).expect("valid configuration"))
                .collect();
            let spaces: Vec<(VmallocSpace<'_, _>, VmallocSpace<'_, _>)> = zas
                .iter()
                .zip(MODES)
                .map(|(za, (mode, _))| {
                    let cfg = |gfp| VmallocConfig {
                        vfree_mode: mode,
                        gfp,
                        ..VmallocConfig::default()
                    };
                    (
                        VmallocSpace::new(za, cfg(plain_gfp())).expect("valid space"),
                        VmallocSpace::new(za, cfg(plain_gfp() | Gfp::ZERO)).expect("valid space"),
                    )
                })
                .collect();
            let env = Env {
                div: sim_div,
                full_fit_pairs,
                cpu,
                nr_cpus,
            };
            summary.push(("sim", run_cases(ctx, &mut res, "sim", &spaces, &env)));
        }
        // mapped: memfd arena.
        {
            ctx.status("mapped: creating memfd arenas");
            let opts = ArenaOptions {
                memfd: true,
                ..ArenaOptions::default()
            };
            let zas: Vec<ZoneAllocator<_>> = MODES
                .iter()
                .map(|_| ZoneAllocator::with_arena(config(), opts).expect("memfd arena"))
                .collect();
            let spaces: Vec<(VmallocSpace<'_, _>, VmallocSpace<'_, _>)> = zas
                .iter()
                .zip(MODES)
                .map(|(za, (mode, _))| {
                    let cfg = |gfp| VmallocConfig {
                        vfree_mode: mode,
                        gfp,
                        ..VmallocConfig::default()
                    };
                    (
                        VmallocSpace::new_mapped(za, cfg(plain_gfp())).expect("mapped space"),
                        VmallocSpace::new_mapped(za, cfg(plain_gfp() | Gfp::ZERO))
                            .expect("mapped space"),
                    )
                })
                .collect();
            let env = Env {
                div: mapped_div,
                full_fit_pairs: mapped_pairs,
                cpu,
                nr_cpus,
            };
            summary.push(("mapped", run_cases(ctx, &mut res, "mapped", &spaces, &env)));
        }

        for (mode, rows) in &summary {
            res.notes.push(seed_layout(mode, rows));
        }
        let sim = &summary[0].1;
        let big: Vec<&Row> = sim
            .iter()
            .filter(|r| matches!(r.case, Case::FixSize { p, .. } if p >= 4))
            .collect();
        let lo = big
            .iter()
            .map(|r| r.change_pct)
            .fold(f64::INFINITY, f64::min);
        let hi = big
            .iter()
            .map(|r| r.change_pct)
            .fold(f64::NEG_INFINITY, f64::max);
        res.notes.push(format!(
            "seed: +53 % to +118 % for fix_size p >= 4; ours (sim): {lo:+.1} % to {hi:+.1} %"
        ));
        if let Some(r) = sim
            .iter()
            .find(|r| r.case == Case::FixSize { p: 512, huge: true })
        {
            res.notes.push(format!(
                "seed: fix_size p:512 h:1 +118.09 %; ours (sim): {:+.1} % (per round {:+.1} % – {:+.1} %)",
                r.change_pct, r.round_lo_pct, r.round_hi_pct
            ));
        }
        res.notes.push(
            "h:1 differs from h:0 only at p:512 here: vmalloc_huge uses pageblock-order pages \
             for requests of at least a pageblock (x86-64's rule; arm64 would also use \
             64 KiB contiguous-PTE blocks from p:16)"
                .to_owned(),
        );
        res.targets.push(Target::at_least(
            "sim: smallest change among fix_size p >= 4 (seed: +53.55 %)",
            lo,
            53.55,
            "%",
        ));
        res
    }
}

fn plain_gfp() -> Gfp {
    Gfp::KERNEL | Gfp::HIGHMEM
}

fn config() -> Config {
    Config::single_zone(ZoneType::Normal, Pfn(0), ZONE_PAGES)
}

/// Settings of one mode's runs.
struct Env {
    /// The seed's loop count is divided by this.
    div: u64,
    full_fit_pairs: usize,
    cpu: Option<usize>,
    nr_cpus: usize,
}

/// One line of the seed-style summary.
struct Row {
    case: Case,
    label: String,
    before_us: f64,
    after_us: f64,
    /// `before / after - 1`, in %, from the medians (> 0: after is faster).
    change_pct: f64,
    round_lo_pct: f64,
    round_hi_pct: f64,
    significant: bool,
}

/// Runs every case on `spaces` (one (plain, zeroing) pair per variant, `MODES`
/// order), pushes a table per case, returns the summary rows.
fn run_cases<B: Backend>(
    ctx: &mut Ctx,
    res: &mut ExperimentResult,
    mode: &str,
    spaces: &[(VmallocSpace<'_, B>, VmallocSpace<'_, B>)],
    env: &Env,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for (case, seed_pct, _) in SEED_TABLE {
        let l = (case.seed_loops() / env.div).max(1);
        let label = case.label(l);
        let (p, h) = case.p_h();
        let mut variants: Vec<Variant<'_>> = spaces
            .iter()
            .zip(MODES)
            .map(|((plain, zeroing), (_, name))| {
                let vm = if case.zeroes() { zeroing } else { plain };
                Variant::new(name, move || on_cpu(env.cpu, || run_case(vm, case, l, env)))
            })
            .collect();
        let s = ctx.compare(&format!("{mode}: {label}"), &mut variants);
        drop(variants);
        let table = Table::new(
            &format!("{mode}-{}", case.id()),
            &format!(
                "{mode}: {} (test_vmalloc {}, p:{p}, h:{}, l:{l}): µs per test call",
                case.words(),
                case.name().split(' ').next().unwrap_or_default(),
                h as u8
            ),
            Metric::lower("µs per test call", "µs"),
            &[(MODES[0].1, &s[0]), (MODES[1].1, &s[1])],
        )
        .labelled(case.words())
        .posted(1.0 + seed_pct / 100.0)
        .grouped(match mode {
            "sim" => "abstract frames, nothing mapped: the allocator alone (sim)",
            _ => "a memfd arena, every area really mapped (mapped)",
        });
        let significant = table.rows[1].significant;
        res.tables.push(table);
        rows.push(summary_row(case, label, &s[0], &s[1], significant));
    }
    rows
}

fn summary_row(case: Case, label: String, before: &Samples, after: &Samples, sig: bool) -> Row {
    let (_, lo, hi) = round_speedups(before, after, true);
    Row {
        case,
        label,
        before_us: before.median(),
        after_us: after.median(),
        change_pct: (before.median() / after.median() - 1.0) * 100.0,
        round_lo_pct: (lo - 1.0) * 100.0,
        round_hi_pct: (hi - 1.0) * 100.0,
        significant: sig,
    }
}

/// The seed's table layout: test, baseline, after, change (> 0 is faster), and the
/// seed's own change beside it.
fn seed_layout(mode: &str, rows: &[Row]) -> String {
    let w = rows.iter().map(|r| r.label.len()).max().unwrap_or(0);
    let mut s = format!(
        "seed-style table, {mode} (median µs per test call; change = baseline / after - 1, \
         > 0 is faster; (I)/(R) = significant improvement/regression, Mann-Whitney \
         p < 0.05; per-round spread of the change in brackets)\n"
    );
    s.push_str(&format!(
        "    {:<w$}  {:>12}  {:>12}  {:>10}  {:>19}  {:>12}\n",
        "test", "baseline", "after", "change", "per round", "seed"
    ));
    for r in rows {
        let mark = match (r.significant, r.change_pct > 0.0) {
            (false, _) => "   ",
            (true, true) => "(I)",
            (true, false) => "(R)",
        };
        let seed = SEED_TABLE
            .iter()
            .find(|(c, _, _)| *c == r.case)
            .map(|&(_, pct, sig)| format!("{}{pct:+.2} %", if sig { "(I) " } else { "" }))
            .unwrap_or_default();
        s.push_str(&format!(
            "    {:<w$}  {:>12.0}  {:>12.0}  {mark} {:>+7.1} %  {:>+8.1} – {:>+6.1} %  {:>12}\n",
            r.label, r.before_us, r.after_us, r.change_pct, r.round_lo_pct, r.round_hi_pct, seed
        ));
    }
    s.pop();
    s
}

// -----------------------------------------------------------------------------
// The cases
// -----------------------------------------------------------------------------

/// The test's one-byte write to page 0 of an area: lands in the frame (nothing
/// happens on abstract frames). An area's pages are vmalloc's alone (no guard can
/// be put over them), so the byte is written at the frame's address.
#[allow(unsafe_code)]
fn touch<B: Backend>(za: &ZoneAllocator<B>, pfn: Pfn) {
    if let Some(p) = za.page_address(pfn) {
        // SAFETY: the backend maps a whole page at each frame's address (the
        // `Backend` contract); the page belongs to the caller (an area of its own,
        // or pages it allocated) and nothing else reads or writes it meanwhile.
        unsafe { p.as_ptr().write(0) };
    }
}

fn alloc(vm: &VmallocSpace<'_, impl Backend>, pages: usize) -> VmArea {
    vm.vmalloc(pages * PAGE).expect("the 1 GiB zone has room")
}

fn free(vm: &VmallocSpace<'_, impl Backend>, a: &VmArea) {
    vm.vfree(a.addr()).expect("vfree of a live area");
}

/// One call of `case` with loop count `l`; µs for the whole call.
fn run_case<B: Backend>(vm: &VmallocSpace<'_, B>, case: Case, l: u64, env: &Env) -> f64 {
    let za = vm.allocator();
    let mut rng = Rng::new(0x7e57 ^ l);
    let t = Instant::now();
    match case {
        Case::FixSize { p, huge } => {
            for _ in 0..l {
                let a = if huge {
                    vm.vmalloc_huge(p * PAGE)
                } else {
                    vm.vmalloc(p * PAGE)
                }
                .expect("the 1 GiB zone has room");
                touch(za, a.pages()[0]);
                free(vm, &a);
            }
        }
        Case::FixAlign => {
            for _ in 0..l {
                let a = vm
                    .vmalloc_align(5 * PAGE, FIX_ALIGN_BYTES)
                    .expect("the 1 GiB zone has room");
                free(vm, &a);
            }
        }
        Case::RandomSize => {
            for _ in 0..l {
                let n = rng.range(1, 100) as usize;
                let a = alloc(vm, n);
                touch(za, a.pages()[0]);
                free(vm, &a);
            }
        }
        Case::RandomSizeAlign => {
            for _ in 0..l {
                let r = rng.next() as u8;
                let align = 1usize << (r % 23);
                let size = (r as usize % 10 + 1) * PAGE;
                let a = vm
                    .vmalloc_align(size, align)
                    .expect("the 1 GiB zone has room");
                free(vm, &a);
            }
        }
        Case::FullFit => {
            let j = env.full_fit_pairs;
            let mut ptr = Vec::with_capacity(j);
            let mut junk = Vec::with_capacity(j);
            for _ in 0..j {
                ptr.push(alloc(vm, 1));
                junk.push(alloc(vm, 1));
            }
            for a in &junk {
                free(vm, a);
            }
            for _ in 0..l {
                let a = alloc(vm, 1);
                touch(za, a.pages()[0]);
                free(vm, &a);
            }
            for a in &ptr {
                free(vm, a);
            }
        }
        Case::LongBusyList => {
            let busy: Vec<VmArea> = (0..BUSY_LIST).map(|_| alloc(vm, 1)).collect();
            for _ in 0..l {
                let a = alloc(vm, 100);
                let b = alloc(vm, 1);
                touch(za, a.pages()[0]);
                touch(za, b.pages()[0]);
                free(vm, &a);
                free(vm, &b);
            }
            for a in &busy {
                free(vm, a);
            }
        }
        Case::PcpuAlloc => pcpu_alloc(vm, &mut rng, env.nr_cpus),
        Case::VmMapRam => {
            let p = case.p_h().0;
            let mut slots = vec![None; p];
            let got = za.alloc_pages_bulk(Gfp::KERNEL, &mut slots);
            assert_eq!(got, p, "the 1 GiB zone has room");
            let pages: Vec<Pfn> = slots.into_iter().flatten().collect();
            for _ in 0..l {
                let addr = vm.vm_map_ram(&pages).expect("vm_map_ram");
                touch(za, pages[0]);
                vm.vm_unmap_ram(addr, p).expect("vm_unmap_ram");
            }
            za.free_pages_bulk(&pages)
                .expect("freeing the mapped pages");
        }
    }
    secs_since(t) * 1e6
}

/// The stand-in for `pcpu_alloc_test`: 35,000 objects of U[1, PAGE/4] bytes aligned
/// to 2^U[1, PAGE_SHIFT - 1], carved with a bump pointer from per-CPU chunks (one
/// `vmalloc` of `PCPU_UNIT_BYTES` per CPU each), then all freed; a chunk is
/// `vfree`d when its last object goes.
fn pcpu_alloc<B: Backend>(vm: &VmallocSpace<'_, B>, rng: &mut Rng, nr_cpus: usize) {
    struct Chunk {
        area: VmArea,
        live: u32,
    }
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut used = PCPU_UNIT_BYTES; // no chunk yet: "full"
    let mut objects: Vec<(usize, usize)> = Vec::with_capacity(PCPU_OBJECTS);
    for _ in 0..PCPU_OBJECTS {
        let size = rng.range(1, PAGE as u64 / 4) as usize;
        let align = 1usize << rng.range(1, 11);
        let mut off = used.next_multiple_of(align);
        if off + size > PCPU_UNIT_BYTES {
            let area = vm
                .vmalloc(PCPU_UNIT_BYTES * nr_cpus)
                .expect("the 1 GiB zone has room");
            chunks.push(Chunk { area, live: 0 });
            off = 0;
        }
        let ci = chunks.len() - 1;
        chunks[ci].live += 1;
        used = off + size;
        objects.push((ci, off));
    }
    for (ci, _) in objects {
        let c = &mut chunks[ci];
        c.live -= 1;
        if c.live == 0 {
            vm.vfree(c.area.addr()).expect("vfree of a chunk");
        }
    }
}
