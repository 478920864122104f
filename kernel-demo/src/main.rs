//! A small x86-64 kernel that boots under QEMU and runs zonealloc as its page
//! allocator.
//!
//! The bootstrap processor comes in through Multiboot (`boot`), sets up its
//! console, GDT, IDT and local APIC, reads the firmware memory map (`bootmem`),
//! calibrates its clocks, reads the CPUs and the NUMA topology from ACPI
//! (`madt`, `srat`) and starts the other CPUs (`smp`). Then memory: it declares
//! the top of RAM absent (it arrives later, `hotadd`), carves a small heap and
//! per-node pools for the frame tables out of RAM as memblock would, reserves
//! them with everything else the kernel holds, builds the zones of every node
//! (`zones`) and the allocator with its frame tables mapped sparsely
//! (`vmemmap`), and gives back what only boot needed. Every CPU then runs the
//! stress (`stress`) with the timer interrupt allocating too (`tick`). The
//! verdict ends QEMU through isa-debug-exit (`exit`).
//!
//! Layers, lowest first. A module imports only modules of lower rows (no two of
//! a row import each other); nothing imports this file.
//!
//! | row | modules | what |
//! |---|---|---|
//! | 0 | `consts`, `boot`, `serial`, `stack`, `irq` | shared numbers (CPUs, nodes, page size, vectors); Multiboot header, long mode, AP trampoline, the image's addresses; COM1 console and its macros; painted stacks; save, disable and restore interrupts |
//! | 1 | `exit`, `apic`, `gdt`, `heap`, `bootmem`, `madt` | QEMU exit statuses; local APIC; per-CPU GDT and TSS; the kernel heap; memory map, reservations and early allocation (`BOOT`); ACPI tables and the CPUs |
//! | 2 | `time`, `srat` | TSC and APIC timer calibration; the NUMA nodes and distances |
//! | 3 | `cpu` | per-CPU area (GS), CPU and node, cross-CPU barrier, TLB shootdown, the allocator's `Platform` |
//! | 4 | `interrupts`, `zones`, `vmemmap` | IDT, entry stubs, dispatch; the allocator's configuration (and `ALLOCATOR`); the frame tables' mapping |
//! | 5 | `smp`, `hotadd` | AP start-up; memory that arrives |
//! | 6 | `block` | a held block: where it may lie, its tags, its release |
//! | 7 | `tick` | the timer handler and the watchdog |
//! | 8 | `stress` | the stress and its ledger |
//! | 9 | `main` | `kmain` and `ap_main`, building the allocator, the verdict |
//!
//! Calls still go up in three places, none of them an import: `boot`'s
//! 64-bit code calls `kmain` and `ap_main` by their link names; `kmain` hands
//! `interrupts` its timer and NMI handlers (`tick::on_tick`, `tick::on_nmi`)
//! and `tick` what its watchdog prints of the stress
//! (`stress::print_progress_raw`), before any timer runs.

#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

extern crate alloc;

mod apic;
mod block;
mod boot;
mod bootmem;
mod consts;
mod cpu;
mod exit;
mod gdt;
mod heap;
mod hotadd;
mod interrupts;
mod irq;
mod madt;
mod serial;
mod smp;
mod srat;
mod stack;
mod stress;
mod tick;
mod time;
mod vmemmap;
mod zones;

use alloc::vec::Vec;
use core::panic::PanicInfo;
use core::sync::atomic::Ordering;

use zonealloc::{AbstractFrames, MemMap, OfflineError, Pfn, ZoneAllocator};

use crate::bootmem::{BootMemory, Lifetime, BOOT};
use crate::consts::{MAX_NODES, PAGE_BYTES};
use crate::exit::{exit, fail_with, Exit};
use crate::serial::{fatal_print, print, println};
use crate::srat::Topology;
use crate::vmemmap::{VmemMap, MEMMAP};
use crate::zones::ALLOCATOR;

/// Bytes of the kernel heap: the allocator's small structures and the kernel's
/// own few allocations (the frame tables are not on it).
const HEAP_BYTES: u64 = 2 << 20;

/// MiB at the top of RAM the kernel boots without and adds during the stress,
/// unless the command line says otherwise (`hotadd_mib=`).
const HOTADD_MIB: u64 = 256;

/// Names of the per-node frame-table pools (reservations need static names).
const POOL_NAMES: [&str; MAX_NODES] = [
    "frame tables and their page tables, node 0",
    "frame tables and their page tables, node 1",
    "frame tables and their page tables, node 2",
    "frame tables and their page tables, node 3",
    "frame tables and their page tables, node 4",
    "frame tables and their page tables, node 5",
    "frame tables and their page tables, node 6",
    "frame tables and their page tables, node 7",
];

/// What the command line can change: `timer_alloc=off` stops the timer
/// handler allocating; `hotadd_mib=N` sets how much memory arrives (0: none).
struct Options {
    timer_alloc: bool,
    hotadd_mib: u64,
}

fn parse_options(cmdline: &str) -> Options {
    let mut o = Options {
        timer_alloc: true,
        hotadd_mib: HOTADD_MIB,
    };
    for word in cmdline.split_ascii_whitespace() {
        match word.split_once('=') {
            Some(("timer_alloc", v)) => o.timer_alloc = !matches!(v, "off" | "0" | "no"),
            Some(("hotadd_mib", v)) => o.hotadd_mib = v.parse().unwrap_or(HOTADD_MIB),
            _ => {}
        }
    }
    o
}

/// The bootstrap processor's first Rust code, on the boot stack, interrupts
/// disabled; `magic` and `info` are what the Multiboot loader left in `%eax` and
/// `%ebx`. `boot` calls it by this link name.
#[no_mangle]
pub extern "C" fn kmain(magic: u32, info: u32) -> ! {
    time::mark_boot();
    gdt::load(0);
    cpu::init_this_cpu(0);
    paint_boot_stack();
    let console = serial::init();
    println!();
    println!("zonealloc kernel demo: booting");
    if !console {
        println!("(the UART failed its self-test: raw output)");
    }
    interrupts::load_idt();
    // What the timer vector and the NMI run is the timer handler's, and what
    // its watchdog reports is the stress's: handed down before any timer runs.
    interrupts::set_handlers(tick::on_tick, tick::on_nmi);
    tick::set_progress_report(stress::print_progress_raw);
    apic::disable_legacy_pic();

    let mut boot =
        BootMemory::from_multiboot(magic, info).unwrap_or_else(|e| fail_with(Exit::BootInfo, e));
    let opts = parse_options(boot.cmdline());
    tick::TIMER_ALLOC.store(opts.timer_alloc, Ordering::Relaxed);

    apic::enable();
    let (tsc_mhz, apic_per_ms) = time::calibrate();
    println!("clocks: TSC {tsc_mhz} MHz, APIC timer {apic_per_ms} counts/ms (bus / 16)");

    let tables = madt::tables().unwrap_or_else(|e| fail_with(Exit::Smp, e));
    let cpus = madt::find_cpus(&tables).unwrap_or_else(|e| fail_with(Exit::Smp, e));
    let topo = Topology::read(&tables).unwrap_or_else(|e| fail_with(Exit::Setup, e));
    cpu::mark_online(apic::id());
    let nr_cpus = smp::start_aps(cpus.apic_ids());
    for c in 0..nr_cpus {
        let id = cpu::apic_id_of(c).unwrap_or(0);
        cpu::set_node(c, topo.node_of_apic(id));
    }
    println!(
        "cpus: {} in the MADT, {nr_cpus} running (local APIC ids {:?}, nodes {:?})",
        cpus.listed,
        cpus.apic_ids(),
        (0..nr_cpus)
            .map(cpu::cpu_to_node)
            .collect::<heapless_list::List>()
    );
    topo.print();

    let za = build_allocator(&mut boot, &topo, nr_cpus, opts.hotadd_mib);
    release_boot_memory(za, &mut boot);
    let boot = BOOT.call_once(|| boot);
    report_memory(za, boot);
    stress::preflight(za);

    println!(
        "stress: {nr_cpus} CPUs x {} rounds x {} operations, timer {} Hz, timer handler allocates: {}, pinned per-CPU stacks: {}",
        stress::ROUNDS,
        stress::OPS_PER_ROUND,
        tick::TIMER_HZ,
        tick::TIMER_ALLOC.load(Ordering::Relaxed),
        za.pinned_available()
    );
    stress::prepare(nr_cpus);
    tick::resume_allocation();
    smp::release_aps();
    run_cpu(0)
}

/// An application processor's first Rust code, on its own stack: set up, wait
/// for the go, run. `boot` calls it by this link name.
#[no_mangle]
pub extern "C" fn ap_main() -> ! {
    let index = smp::ap_setup();
    run_cpu(index)
}

/// A short list printed before the heap exists.
mod heapless_list {
    /// Up to 16 node numbers, printed as a list.
    pub struct List([u16; 16], usize);

    impl FromIterator<u16> for List {
        fn from_iter<I: IntoIterator<Item = u16>>(it: I) -> List {
            let mut l = List([0; 16], 0);
            for v in it.into_iter().take(16) {
                l.0[l.1] = v;
                l.1 += 1;
            }
            l
        }
    }

    impl core::fmt::Debug for List {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_list().entries(&self.0[..self.1]).finish()
        }
    }
}

/// Declares the top `mib` MiB of RAM absent, if it is Normal memory in one
/// piece: the zone spans it, as a hole, until `hotadd` adds it.
#[link_section = ".init.text"]
fn declare_arriving(boot: &mut BootMemory, mib: u64) {
    let nr = mib << 20 >> 12;
    let Some(&(s, e)) = boot.ram().last() else {
        return;
    };
    if nr == 0 {
        println!("hot-add: off (hotadd_mib=0)");
        return;
    }
    if e - s < nr || e - nr < zones::DMA32_END_PFN {
        println!("hot-add: off (no {mib} MiB of Normal memory in one piece at the top of RAM)");
        return;
    }
    if let Err(e) = boot.declare_absent(e - nr, e, "memory that arrives during the stress") {
        fail_with(Exit::Setup, e);
    }
}

/// Memory, up to a built allocator: the absent range, the heap, the frame
/// tables' pools (memblock's allocations), the configuration with every
/// reservation, the frame tables' map, and `ZoneAllocator::with_memmap`.
#[link_section = ".init.text"]
fn build_allocator(
    boot: &mut BootMemory,
    topo: &Topology,
    nr_cpus: usize,
    hotadd_mib: u64,
) -> &'static ZoneAllocator {
    declare_arriving(boot, hotadd_mib);

    // The heap, on node 0, before anything needs it.
    let mut node0 = [(0u64, 0u64); 32];
    let mut n = 0;
    for r in topo.ranges_of(0).take(node0.len()) {
        node0[n] = r;
        n += 1;
    }
    let heap_at = boot
        .alloc_top(
            HEAP_BYTES,
            2 << 20,
            &node0[..n],
            "kernel heap",
            Lifetime::Kept,
        )
        .unwrap_or_else(|e| fail_with(Exit::Setup, e));
    // SAFETY: `[heap_at, heap_at + HEAP_BYTES)` is usable RAM inside the
    // identity map, now reserved from the allocator and from everything else;
    // called once.
    unsafe { heap::init(heap_at, HEAP_BYTES) };

    // Each node's frame tables from its own memory, as much as they can need;
    // node 0's pool also gives the map's shared frames.
    let nodes = zones::node_configs(boot, topo);
    let mut pools = [(0u64, 0u64); MAX_NODES];
    for (nid, node) in nodes.iter().enumerate() {
        let frames = zones::table_frames_bound(node) + if nid == 0 { 3 } else { 0 };
        if node.zones.is_empty() {
            continue;
        }
        let ram = zones::node_ram(boot, topo, nid as u16);
        let at = boot
            .alloc_top(
                frames * PAGE_BYTES,
                PAGE_BYTES,
                &ram,
                POOL_NAMES[nid],
                Lifetime::Kept,
            )
            .unwrap_or_else(|e| fail_with(Exit::Setup, e));
        pools[nid] = (at, at + frames * PAGE_BYTES);
    }
    let reserved = zones::reserved(boot, &nodes);
    let nr_nodes = nodes.len();
    let config = zones::config(nodes, reserved, topo, nr_cpus);
    boot.print();
    zones::print(&config);
    println!(
        "frame tables: {} KiB to back (Config::metadata_bytes), where a flat table (spanned x 16) would take {} KiB",
        config.metadata_bytes() >> 10,
        config.spanned_metadata_bytes() >> 10
    );

    let map = VmemMap::new(&pools[..nr_nodes]).unwrap_or_else(|e| fail_with(Exit::Setup, e));
    *MEMMAP.lock() = Some(map);
    let t0 = time::tsc();
    let built = {
        let mut guard = MEMMAP.lock();
        let map = guard.as_mut().expect("set just above");
        let built =
            ZoneAllocator::with_memmap(config, AbstractFrames, &mut *map as &mut dyn MemMap);
        map.end_construction();
        built
    };
    let za = match built {
        Ok(za) => ALLOCATOR.call_once(|| za),
        Err(e) => fail_with(
            Exit::Setup,
            &alloc::format!("ZoneAllocator::with_memmap: {e}"),
        ),
    };
    println!(
        "zonealloc: {} managed frames ({} MiB) in {} zones on {nr_nodes} nodes, built in {} ms ({} ms since boot)",
        za.managed_pages(),
        za.managed_pages() >> 8,
        za.zones().count(),
        time::tsc_to_us(time::tsc() - t0) / 1000,
        time::since_boot_ms()
    );
    za
}

/// Gives bytes `[start, end)` of a reservation to the allocator
/// (`free_reserved_area`, zone by zone over its present frames) and takes them
/// out of the boot memory's reservations. Returns the frames given.
fn give_back(za: &ZoneAllocator, boot: &mut BootMemory, start: u64, end: u64, what: &str) -> u64 {
    let present = boot.present();
    let (s, e) = (start / PAGE_BYTES, end.div_ceil(PAGE_BYTES));
    let mut n = 0;
    for &(ps, pe) in present.as_slice() {
        for (_, zs, spanned, _) in za.zones() {
            let (a, b) = (s.max(ps).max(zs.0), e.min(pe).min(zs.0 + spanned));
            if a >= b {
                continue;
            }
            match za.free_reserved_area(Pfn(a), b - a) {
                Ok(k) => n += k,
                Err(err) => fail_with(
                    Exit::Memory,
                    &alloc::format!("free_reserved_area({a:#x}, {}) of {what}: {err}", b - a),
                ),
            }
        }
    }
    if let Err(err) = boot.release(s * PAGE_BYTES, e * PAGE_BYTES) {
        fail_with(Exit::Memory, err);
    }
    println!(
        "  [mem {:#018x}-{:#018x}] {what}: {n} frames",
        s * PAGE_BYTES,
        e * PAGE_BYTES - 1
    );
    n
}

/// With the application processors up and the allocator built: gives the
/// allocator what only boot needed (the trampoline, the boot information, the
/// init area, what the frame-table pools did not use), and checks that a
/// second release is refused.
fn release_boot_memory(za: &ZoneAllocator, boot: &mut BootMemory) {
    let before = za.managed_pages();
    println!("released after boot (free_reserved_area):");
    let mut total = 0;
    let slack = MEMMAP.lock().as_mut().map(VmemMap::close_pools);
    for &(node, s, e) in slack.iter().flatten() {
        if s < e {
            total += give_back(za, boot, s, e, POOL_NAMES[node as usize]);
            let _ = node;
        }
    }
    let boot_only: Vec<(u64, u64, &'static str)> = boot
        .reservations()
        .iter()
        .filter(|r| r.lifetime == Lifetime::Boot)
        .map(|r| (r.start, r.end, r.what))
        .collect();
    for (s, e, what) in boot_only {
        total += give_back(za, boot, s, e, what);
    }
    let (is, ie) = boot::init_area();
    total += give_back(
        za,
        boot,
        is,
        ie,
        "init area (boot code, trampoline, boot GDT)",
    );
    let after = za.managed_pages();
    if after != before + total {
        fail_with(
            Exit::Memory,
            &alloc::format!("managed {before} -> {after} after releasing {total} frames"),
        );
    }
    println!(
        "  {total} frames ({} KiB) released: managed {before} -> {after}",
        total * 4
    );
    let tramp = boot::TRAMPOLINE_ADDR / PAGE_BYTES;
    match za.free_reserved_area(Pfn(tramp), 1) {
        Err(OfflineError::NotReserved(p)) if p.0 == tramp => {}
        other => fail_with(
            Exit::Memory,
            &alloc::format!("a second release of frame {tramp:#x} gave {other:?}, not NotReserved"),
        ),
    }
}

/// The frame tables against what the machine has, the map's frames, the heap.
fn report_memory(za: &ZoneAllocator, boot: &BootMemory) {
    let present: u64 = za.zones().map(|z| z.3).sum();
    let spanned: u64 = za.zones().map(|z| z.2).sum();
    let meta = za.metadata_bytes();
    let u = MEMMAP
        .lock()
        .as_ref()
        .map(VmemMap::usage)
        .unwrap_or_default();
    let nodes = za.config().nodes.len();
    let tables: u64 = u.table_frames.iter().sum();
    let pts: u64 = u.pt_frames.iter().sum();
    println!(
        "frame tables: {} KiB backed (za.metadata_bytes()) for {present} present frames: present x 16 = {} KiB, ratio {}.{:03}; flat over {spanned} spanned frames: {} KiB",
        meta >> 10,
        (present * 16) >> 10,
        meta / (present * 16),
        meta % (present * 16) * 1000 / (present * 16),
        (spanned * 16) >> 10
    );
    println!(
        "vmemmap: {} MiB of address space at {:#x}; {tables} frames of tables ({:?} by node) and {pts} of page tables and the zero frame ({:?} by node), {} from another node's pool; {} populate calls, {} TLB shootdowns ({} ms waiting)",
        u.reserved_bytes >> 20,
        vmemmap::VMEMMAP_START,
        &u.table_frames[..nodes],
        &u.pt_frames[..nodes],
        u.off_node,
        u.populates,
        u.shootdowns,
        cpu::CROSS.shootdown_us.load(Ordering::Relaxed) / 1000
    );
    let kept: u64 = boot
        .reservations()
        .iter()
        .map(|r| (r.end - r.start) / PAGE_BYTES)
        .sum();
    let h = heap::stats();
    println!(
        "reserved now: {kept} frames; heap: {} KiB, {} allocations, {} KiB in use, largest single allocation {} bytes",
        h.size >> 10,
        h.allocs,
        h.used >> 10,
        h.largest
    );
}

/// Every CPU's work once set up: start its timer, enable interrupts, run the
/// stress. CPU 0 then checks and reports; the others wait to be ended.
fn run_cpu(cpu: usize) -> ! {
    let za = ALLOCATOR.get().expect("built before the CPUs are let go");
    apic::start_periodic_timer(tick::TIMER_HZ);
    interrupts::enable();
    stress::run(za, cpu);
    if cpu == 0 {
        finish(za)
    }
    loop {
        x86_64::instructions::hlt();
    }
}

/// CPU 0, every CPU quiet and every block freed: the exact ledger, the
/// allocator's own checks, the statistics, the verdict.
fn finish(za: &ZoneAllocator) -> ! {
    let nr_cpus = za.config().nr_cpus;
    let t = stress::totals(nr_cpus);
    let drained = za.drain_all_pages();
    let (free, pcp, managed) = (za.nr_free_pages(), za.nr_pcp_pages(), za.managed_pages());
    println!(
        "ledger: allocs {} frees {}; timer handlers alloc_pages {} / free_pages {}, alloc_pages_nolock {} / free_pages_nolock {}; frames held {}, drained {drained} from per-CPU lists, free {free} per-CPU {pcp} managed {managed}",
        t.allocs,
        t.frees,
        t.irq_allocs,
        t.irq_frees,
        t.irq_allocs_nolock,
        t.irq_frees_nolock,
        t.held_pages
    );
    if t.allocs != t.frees
        || t.irq_allocs + t.irq_allocs_nolock != t.irq_frees + t.irq_frees_nolock
        || t.held_pages != 0
    {
        fail_with(Exit::Ledger, "a block was not freed exactly once");
    }
    if free != managed || pcp != 0 {
        fail_with(
            Exit::Ledger,
            "nr_free_pages() != managed_pages() after the drain",
        );
    }
    let report = match za.check_invariants() {
        Ok(r) => r,
        Err(v) => fail_with(Exit::Invariants, &alloc::format!("{v:?}")),
    };
    if report.allocated_pages != 0 || report.free_pages != managed {
        fail_with(
            Exit::Invariants,
            &alloc::format!("check_invariants counts {report:?}"),
        );
    }
    println!(
        "check_invariants: clean ({} frames visited, {} free blocks, {} free frames, 0 allocated)",
        report.frames, report.free_blocks, report.free_pages
    );
    let mut overflowed = None;
    for c in 0..nr_cpus {
        let (bottom, top) = smp::stack_of(c);
        match stack::used(bottom, top) {
            Some(used) => println!(
                "  cpu {c}: stack used {} of {} KiB",
                used >> 10,
                (top - bottom) >> 10
            ),
            None => {
                println!("  cpu {c}: stack overflowed ({} KiB)", (top - bottom) >> 10);
                overflowed = Some(c);
            }
        }
    }
    if let Some(c) = overflowed {
        fail_with(
            Exit::StackOverflow,
            &alloc::format!("cpu {c}'s stack overflowed"),
        );
    }
    tick::FINISHED.store(true, Ordering::Relaxed);

    print!("{}", za.buddyinfo());
    print!("{}", za.zoneinfo());
    stress::print_per_cpu(nr_cpus);
    let h = heap::stats();
    println!(
        "heap: {} allocations served ({} by the allocator's alloc and free paths during the stress), largest {} bytes, {} KiB in use, peak {} KiB of {} KiB",
        h.allocs,
        t.heap_allocs_in_paths,
        h.largest,
        h.used >> 10,
        h.peak >> 10,
        h.size >> 10
    );
    let x = &cpu::CROSS;
    let get = |a: &core::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "barriers: {} sync_cpu calls ({} with interrupts off), {} requests served while waiting, {} escalated to NMI; {} TLB shootdowns ({} NMIs); {} checkpoints merged deferred frees first",
        get(&x.syncs),
        t.syncs_irqs_off,
        get(&x.served_while_waiting),
        get(&x.escalated),
        get(&x.shootdowns),
        get(&x.shootdown_nmis),
        t.deferred_drains
    );
    let ticks: Vec<u64> = (0..nr_cpus)
        .map(|c| tick::STATS[c].ticks.load(Ordering::Relaxed))
        .collect();
    let arrived = hotadd::arrival().map_or(0, |a| a.end - a.start - a.tables);
    println!(
        "PASS: {nr_cpus} cpus on {} nodes, {} allocations ({} frames; DMA {} DMA32 {} Normal {}; {}.{}% from the allocating CPU's node where it had a zone for the request), {} frees ({} on another CPU), {} double frees refused, timer handlers {} alloc_pages + {} alloc_pages_nolock ({} and {} failed), {arrived} frames arrived ({} allocations in them), {} sync IPIs at checkpoints, ticks per cpu {:?}, stress {} ms, boot to verdict {} ms",
        za.config().nodes.len(),
        t.allocs,
        t.pages_allocated,
        t.by_zone[0],
        t.by_zone[1],
        t.by_zone[2],
        stress::permille(t.local, t.local + t.remote) / 10,
        stress::permille(t.local, t.local + t.remote) % 10,
        t.frees,
        t.remote_frees,
        t.refused,
        t.irq_allocs,
        t.irq_allocs_nolock,
        t.irq_failures,
        t.irq_failures_nolock,
        t.in_arrived,
        t.syncs,
        ticks,
        t.elapsed_us / 1000,
        time::since_boot_ms()
    );
    exit(Exit::Pass)
}

/// Paints the unused part of the boot stack (below the current frame, with a
/// margin), so that `stack::used` can measure it at the end.
fn paint_boot_stack() {
    let rsp: u64;
    // SAFETY: reads the stack pointer.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) rsp, options(nomem, nostack, preserves_flags))
    };
    let bottom = boot::boot_stack_bottom_addr();
    // SAFETY: `[bottom, rsp - 4 KiB)` is the boot stack below every live frame
    // (this function's and its callers' are above `rsp`); interrupts are off.
    unsafe { stack::paint(bottom, (rsp - 4096) & !7) };
}

#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    fatal_print!("\nPANIC on cpu {}: {info}\n", cpu::this_cpu());
    exit(Exit::Panic)
}
