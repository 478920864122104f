//! Interrupts: one IDT shared by every CPU, an entry stub per vector, and the
//! dispatcher they all call.
//!
//! Stable Rust has no `x86-interrupt` calling convention, so the stubs are ours:
//! stub `v` (16 bytes each, at `isr_stubs + 16 * v`) pushes a zero where the CPU
//! pushes no error code, then `v`, and jumps to the common path, which saves the
//! general registers, calls `trap_dispatch` with a pointer to the `TrapFrame` and
//! restores them before `iretq`. All gates are interrupt gates: handlers run
//! with interrupts disabled. The frame is 22 words, a multiple of 16 bytes, so
//! the call sees the ABI's stack alignment.
//!
//! Exceptions print what they know and end the run with `Exit::Exception`; the
//! double fault runs on its own stack (IST 1, see `gdt`), so a stack overflow
//! reports instead of resetting the machine.
//!
//! The barrier IPI and the NMI's own requests are served here (`cpu`); what the
//! timer vector and the NMI do beyond that belongs to the kernel above (the
//! timer handler and its watchdog, `tick`), which hands it in once, before any
//! timer starts (`set_handlers`).

use core::arch::global_asm;

use spin::Once;
use x86_64::structures::idt::InterruptDescriptorTable;
use x86_64::VirtAddr;

use crate::consts::{SPURIOUS_VECTOR, SYNC_VECTOR, TIMER_VECTOR};
use crate::exit::{exit, Exit};
use crate::serial::fatal_print;
use crate::{apic, cpu};

/// Where the (masked) legacy PICs deliver, spurious IRQs 7 and 15 included.
const LEGACY_PIC_VECTORS: core::ops::RangeInclusive<u64> = 0x20..=0x2f;

/// The registers the entry stubs save, lowest address first.
#[repr(C)]
#[derive(Debug)]
pub struct TrapFrame {
    r15: u64,
    r14: u64,
    r13: u64,
    r12: u64,
    r11: u64,
    r10: u64,
    r9: u64,
    r8: u64,
    rbp: u64,
    rdi: u64,
    rsi: u64,
    rdx: u64,
    rcx: u64,
    rbx: u64,
    rax: u64,
    vector: u64,
    error_code: u64,
    rip: u64,
    cs: u64,
    rflags: u64,
    rsp: u64,
    ss: u64,
}

global_asm!(
    r#"
    .text
    .balign 16
    .global isr_stubs
isr_stubs:
    .set vector, 0
    .rept 256
    .balign 16
    .if (vector == 8) || ((vector >= 10) && (vector <= 14)) || (vector == 17) || (vector == 21) || (vector == 29) || (vector == 30)
    .else
    pushq $0
    .endif
    pushq $vector
    jmp isr_common
    .set vector, vector + 1
    .endr

isr_common:
    push %rax
    push %rbx
    push %rcx
    push %rdx
    push %rsi
    push %rdi
    push %rbp
    push %r8
    push %r9
    push %r10
    push %r11
    push %r12
    push %r13
    push %r14
    push %r15
    cld
    mov %rsp, %rdi
    call {dispatch}
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %r11
    pop %r10
    pop %r9
    pop %r8
    pop %rbp
    pop %rdi
    pop %rsi
    pop %rdx
    pop %rcx
    pop %rbx
    pop %rax
    add $16, %rsp
    iretq
"#,
    dispatch = sym trap_dispatch,
    options(att_syntax)
);

extern "C" {
    static isr_stubs: u8;
}

/// The entry stub of `vector`.
fn stub(vector: u8) -> VirtAddr {
    let base = core::ptr::addr_of!(isr_stubs) as u64;
    VirtAddr::new(base + 16 * u64::from(vector))
}

static IDT: Once<InterruptDescriptorTable> = Once::new();

/// What the kernel above runs on the timer vector and after the NMI's own
/// services; each is given the interrupted `rip` and `rflags`.
struct Handlers {
    timer: fn(u64, u64),
    nmi: fn(u64, u64),
}

static HANDLERS: Once<Handlers> = Once::new();

/// Sets the timer vector's handler and the NMI's last step (once, by the
/// bootstrap processor before any CPU starts its timer). Until then a timer
/// interrupt is only acknowledged and an NMI only serves `cpu`'s requests.
pub fn set_handlers(timer: fn(u64, u64), nmi: fn(u64, u64)) {
    HANDLERS.call_once(|| Handlers { timer, nmi });
}

/// Builds the IDT (once) and loads it on this CPU.
pub fn load_idt() {
    let idt = IDT.call_once(|| {
        let mut idt = InterruptDescriptorTable::new();
        // SAFETY: every address given to `set_handler_addr` below is the entry
        // stub of that very vector, which saves the registers, calls
        // `trap_dispatch` and returns with `iretq` (or never returns, for
        // exceptions); IST index 0 is set in every CPU's TSS (see `gdt`).
        unsafe {
            for v in [0u8, 1, 2, 3, 4, 5, 6, 7, 9, 16, 19, 20, 28] {
                idt[v].set_handler_addr(stub(v));
            }
            // The double fault switches to IST 1 (index 0 here), this CPU's own
            // stack for it (see `gdt`).
            idt.double_fault
                .set_handler_addr(stub(8))
                .set_stack_index(0);
            idt.invalid_tss.set_handler_addr(stub(10));
            idt.segment_not_present.set_handler_addr(stub(11));
            idt.stack_segment_fault.set_handler_addr(stub(12));
            idt.general_protection_fault.set_handler_addr(stub(13));
            idt.page_fault.set_handler_addr(stub(14));
            idt.alignment_check.set_handler_addr(stub(17));
            idt.machine_check.set_handler_addr(stub(18));
            idt.cp_protection_exception.set_handler_addr(stub(21));
            idt.vmm_communication_exception.set_handler_addr(stub(29));
            idt.security_exception.set_handler_addr(stub(30));
            for v in 32..=255u8 {
                idt[v].set_handler_addr(stub(v));
            }
        }
        idt
    });
    idt.load();
}

/// Enables interrupts on this CPU.
pub fn enable() {
    x86_64::instructions::interrupts::enable();
}

/// Where every entry stub lands, interrupts disabled.
extern "C" fn trap_dispatch(frame: &mut TrapFrame) {
    match frame.vector {
        v if v == u64::from(TIMER_VECTOR) => {
            if let Some(h) = HANDLERS.get() {
                (h.timer)(frame.rip, frame.rflags);
            }
            apic::eoi();
        }
        // NMIs: TLB shootdowns and escalated barriers (`cpu::on_nmi`), or the
        // watchdog's, which says where this CPU was, and stops it (the
        // kernel's handler, `tick::on_nmi`). One NMI may find its request
        // already served by an earlier one: nothing to do.
        2 => {
            cpu::on_nmi();
            if let Some(h) = HANDLERS.get() {
                (h.nmi)(frame.rip, frame.rflags);
            }
        }
        v if v == u64::from(SYNC_VECTOR) => {
            cpu::on_sync_ipi();
            apic::eoi();
        }
        // A spurious interrupt is not acknowledged (it set no in-service bit).
        v if v == u64::from(SPURIOUS_VECTOR) => {}
        v if LEGACY_PIC_VECTORS.contains(&v) => {}
        v if v < 32 => exception(frame),
        _ => {
            fatal_print!(
                "\nunexpected interrupt vector {:#x} on cpu {}\n",
                frame.vector,
                cpu::this_cpu()
            );
            exit(Exit::Exception);
        }
    }
}

const EXCEPTION_NAMES: [&str; 32] = [
    "divide error",
    "debug",
    "non-maskable interrupt",
    "breakpoint",
    "overflow",
    "bound range exceeded",
    "invalid opcode",
    "device not available",
    "double fault",
    "coprocessor segment overrun",
    "invalid TSS",
    "segment not present",
    "stack-segment fault",
    "general protection fault",
    "page fault",
    "reserved",
    "x87 floating point",
    "alignment check",
    "machine check",
    "SIMD floating point",
    "virtualization",
    "control protection",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "hypervisor injection",
    "VMM communication",
    "security",
    "reserved",
];

/// Reports an exception and ends the run.
fn exception(frame: &TrapFrame) -> ! {
    let v = frame.vector as usize;
    fatal_print!(
        "\nEXCEPTION {} ({}) on cpu {}: error code {:#x}\n  rip {:#018x} cs {:#x} rflags {:#x} rsp {:#018x} ss {:#x}\n",
        v,
        EXCEPTION_NAMES[v & 31],
        cpu::this_cpu(),
        frame.error_code,
        frame.rip,
        frame.cs,
        frame.rflags,
        frame.rsp,
        frame.ss
    );
    if v == 14 {
        fatal_print!(
            "  cr2 (faulting address) {:#018x}\n",
            x86_64::registers::control::Cr2::read_raw()
        );
    }
    fatal_print!("  {:x?}\n", frame);
    exit(Exit::Exception)
}
