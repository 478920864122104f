//! A small x86-64 kernel that boots under QEMU and runs zonealloc as its page
//! allocator.
//!
//! The bootstrap processor comes in through Multiboot (`boot`), sets up its
//! console, GDT, IDT and local APIC, reads the firmware memory map (`bootmem`),
//! calibrates its clocks, finds the CPUs in the MADT and starts them (`madt`,
//! `smp`), reserves the heap that stage 1 builds the allocator's metadata in,
//! builds the zones (`zones`) and the allocator, then lets every CPU run the
//! stress (`stress`) with the timer interrupt on (`tick`). The verdict ends QEMU
//! through isa-debug-exit (`exit`).
//!
//! Module map, lowest first:
//!
//! | module | what |
//! |---|---|
//! | `boot` | Multiboot header, 32-bit entry, long mode, AP trampoline |
//! | `exit`, `serial`, `stack` | QEMU exit statuses, COM1 console, painted stacks |
//! | `cpu` | per-CPU area (GS), interrupt save/restore, CPU and node, cross-CPU barrier |
//! | `gdt`, `interrupts`, `apic`, `time` | descriptor tables, entry stubs, local APIC, TSC and timer calibration |
//! | `bootmem`, `madt`, `smp` | memory map and reservations, CPUs from ACPI, AP start-up |
//! | `heap`, `zones` | the kernel heap, the allocator's configuration |
//! | `tick`, `stress` | the timer handler, the stress and its ledger |

#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

extern crate alloc;

mod apic;
mod boot;
mod bootmem;
mod cpu;
mod exit;
mod gdt;
mod heap;
mod interrupts;
mod madt;
mod serial;
mod smp;
mod stack;
mod stress;
mod tick;
mod time;
mod zones;

use core::panic::PanicInfo;
use core::sync::atomic::Ordering;

use spin::Once;
use zonealloc::{Config, ZoneAllocator};

use crate::bootmem::BootMemory;
use crate::exit::{exit, Exit};

/// The page allocator, once built (before any CPU runs the stress).
pub static ALLOCATOR: Once<ZoneAllocator> = Once::new();

/// The boot memory, final once the heap is reserved.
pub static BOOT: Once<BootMemory> = Once::new();

/// Prints a failure found on CPU 0 outside the stress and ends the run with `why`.
fn fail_with(why: Exit, what: &str) -> ! {
    fatal_print!("\nFAIL ({why:?}): {what}\n");
    exit(why)
}

/// The bootstrap processor's first Rust code, on the boot stack, interrupts
/// disabled; `magic` and `info` are what the Multiboot loader left in `%eax` and
/// `%ebx`.
pub extern "C" fn kmain(magic: u32, info: u32) -> ! {
    time::mark_boot();
    gdt::load(0);
    cpu::init_this_cpu(0);
    paint_boot_stack();
    let console = serial::init();
    println!();
    println!("zonealloc kernel demo (stage 1): booting");
    if !console {
        println!("(the UART failed its self-test: raw output)");
    }
    interrupts::load_idt();
    apic::disable_legacy_pic();

    let mut boot =
        BootMemory::from_multiboot(magic, info).unwrap_or_else(|e| fail_with(Exit::BootInfo, e));

    apic::enable();
    let (tsc_mhz, apic_per_ms) = time::calibrate();
    println!("clocks: TSC {tsc_mhz} MHz, APIC timer {apic_per_ms} counts/ms (bus / 16)");

    let cpus = madt::find_cpus().unwrap_or_else(|e| fail_with(Exit::Smp, e));
    cpu::mark_online(apic::id());
    let nr_cpus = smp::start_aps(cpus.apic_ids());
    println!(
        "cpus: {} in the MADT, {nr_cpus} running (local APIC ids {:?}, all on node {})",
        cpus.listed,
        cpus.apic_ids(),
        cpu::cpu_to_node(0)
    );

    let heap_bytes = metadata_heap(&mut boot);
    boot.print();
    let boot = BOOT.call_once(|| boot);
    let config = zones::config(boot, nr_cpus);
    zones::print(&config);
    let za = build_allocator(config, heap_bytes);
    println!(
        "zonealloc: {} managed frames ({} MiB) in {} zones, built in {} ms since boot",
        za.managed_pages(),
        za.managed_pages() >> 8,
        za.zones().count(),
        time::since_boot_ms()
    );
    stress::preflight(za);

    println!(
        "stress: {nr_cpus} CPUs x {} rounds x {} operations, timer {} Hz, timer handler allocates: {}",
        stress::ROUNDS,
        stress::OPS_PER_ROUND,
        tick::TIMER_HZ,
        tick::TIMER_ALLOCATES
    );
    stress::prepare(nr_cpus);
    tick::resume_allocation();
    smp::release_aps();
    run_cpu(0)
}

/// Stage 1's source of the allocator's per-frame metadata: the kernel heap,
/// sized for the metadata of every spanned frame plus room for the rest, placed
/// at the top of usable RAM (as memblock allocates) and reserved, so that it is
/// a hole to the allocator. Returns the heap's size.
///
/// This function and `build_allocator` are all that change when the metadata
/// comes from the heap-free constructor instead.
fn metadata_heap(boot: &mut BootMemory) -> u64 {
    let frames = zones::spanned_frames(boot);
    // 16 bytes a frame, a spare 64-byte line every 512 frames, the lists'
    // sentinel lines; then an eighth more and 4 MiB for everything else.
    let metadata = frames * 16 + frames / 512 * 64 + 3 * 64 * 64;
    let bytes = (metadata + metadata / 8 + (4 << 20)).next_multiple_of(2 << 20);
    let Some(start) = boot.highest_free(bytes, boot::IDENTITY_MAPPED_BYTES) else {
        fail_with(Exit::Setup, "no usable range holds the kernel heap")
    };
    if let Err(e) = boot.reserve(start, start + bytes, "kernel heap (allocator metadata)") {
        fail_with(Exit::Setup, e);
    }
    // SAFETY: `[start, start + bytes)` is usable RAM inside the identity map,
    // now reserved from the allocator and from everything else; called once.
    unsafe { heap::init(start, bytes) };
    bytes
}

/// Builds the allocator (its metadata on the kernel heap) and publishes it.
fn build_allocator(config: Config, heap_bytes: u64) -> &'static ZoneAllocator {
    let metadata = config.metadata_bytes();
    println!(
        "metadata: {} KiB for {} spanned frames, heap {} KiB",
        metadata >> 10,
        config
            .nodes
            .iter()
            .flat_map(|n| n.zones.iter())
            .map(|z| z.spanned_pages)
            .sum::<u64>(),
        heap_bytes >> 10
    );
    match ZoneAllocator::new(config) {
        Ok(za) => ALLOCATOR.call_once(|| za),
        Err(e) => fail_with(Exit::Setup, &alloc::format!("ZoneAllocator::new: {e}")),
    }
}

/// Every CPU's stage-1 work once set up: start its timer, enable interrupts,
/// run the stress. CPU 0 then checks and reports; the others wait to be ended.
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
    let drained = stress::za_call(|| za.drain_all_pages());
    let (free, pcp, managed) = (za.nr_free_pages(), za.nr_pcp_pages(), za.managed_pages());
    println!(
        "ledger: allocs {} frees {} (timer handlers {} / {}), frames held {}, drained {drained} from per-CPU lists, free {free} per-CPU {pcp} managed {managed}",
        t.allocs, t.frees, t.irq_allocs, t.irq_frees, t.held_pages
    );
    if t.allocs != t.frees || t.irq_allocs != t.irq_frees || t.held_pages != 0 {
        fail_with(Exit::Ledger, "a block was not freed exactly once");
    }
    if free != managed || pcp != 0 {
        fail_with(
            Exit::Ledger,
            "nr_free_pages() != managed_pages() after the drain",
        );
    }
    let report = match stress::za_call(|| za.check_invariants()) {
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
    for c in 0..nr_cpus {
        let (bottom, top) = smp::stack_of(c);
        match stack::used(bottom, top) {
            Some(used) => println!(
                "  cpu {c}: stack used {} of {} KiB",
                used >> 10,
                (top - bottom) >> 10
            ),
            None => fail_with(
                Exit::StackOverflow,
                &alloc::format!("cpu {c}'s stack overflowed"),
            ),
        }
    }
    tick::FINISHED.store(true, Ordering::Relaxed);

    print!("{}", za.buddyinfo());
    print!("{}", za.zoneinfo());
    stress::print_per_cpu(nr_cpus);
    let (heap_allocs, heap_used, heap_peak, heap_size) = heap::stats();
    println!(
        "heap: {heap_allocs} allocations served ({} by alloc_pages/free_pages during the stress), {} KiB in use, peak {} KiB of {} KiB",
        t.heap_allocs_in_paths,
        heap_used >> 10,
        heap_peak >> 10,
        heap_size >> 10
    );
    let ticks: alloc::vec::Vec<u64> = (0..nr_cpus)
        .map(|c| tick::STATS[c].ticks.load(Ordering::Relaxed))
        .collect();
    println!(
        "PASS: {nr_cpus} cpus, {} allocations ({} frames; DMA {} DMA32 {} Normal {}), {} frees ({} on another CPU), {} double frees refused, {} timer-handler allocations ({} failed), {} sync IPIs, ticks per cpu {:?}, stress {} ms, boot to verdict {} ms",
        t.allocs,
        t.pages_allocated,
        t.by_zone[0],
        t.by_zone[1],
        t.by_zone[2],
        t.frees,
        t.remote_frees,
        t.refused,
        t.irq_allocs,
        t.irq_failures,
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
