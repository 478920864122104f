//! Boot: the Multiboot header, the way from 32-bit protected mode to long mode,
//! and the real-mode trampoline that brings the application processors the same way.
//!
//! The lowest layer; nothing of the kernel runs before it, and it imports nothing
//! of the kernel: its 64-bit code calls the kernel's two entry points, `kmain`
//! and `ap_main` (main.rs), by their link names, as a loader calls the kernel it
//! loaded. QEMU's Multiboot loader (`-kernel`) copies the image to 1 MiB and
//! enters `start32` in flat 32-bit protected mode, paging off, with the boot
//! information's address in `%ebx`. The loader refuses a 64-bit ELF unless the
//! header carries its own load addresses (flag 16, the "a.out kludge"), so the
//! header names them and link.ld lays the file out to match.
//!
//! ```text
//!  BSP: start32 ─ build page tables ─┐
//!                                    ├─ enter_long_mode ─ start64 ─┬─ kmain(magic, info)
//!  AP:  SIPI ─ trampoline (16-bit) ─ ap_entry32 ─┘                 └─ ap_main()   (%edi = AP_MARKER)
//! ```
//!
//! The page tables identity-map the first `IDENTITY_MAPPED_BYTES` of physical
//! address space with 2 MiB pages, write-back (the firmware's MTRRs make the MMIO
//! hole below 4 GiB uncached). One PML4, one PDPT, 64 page directories: 264 KiB of
//! the image's bss, reserved from the allocator for good (`vmemmap` adds the
//! frame tables' slot to the same PML4).
//!
//! Everything above but the page tables and the boot stack is only needed until
//! the last application processor is up: the 32-bit entry, the way to long mode,
//! the trampoline's source and the boot GDT live in the init area (`init_area`,
//! link.ld), which the kernel then gives to the allocator.

use core::arch::global_asm;
use core::sync::atomic::AtomicU64;

/// Physical bytes the boot page tables map, from address 0.
pub const IDENTITY_MAPPED_BYTES: u64 = 64 << 30;

/// Physical address the trampoline is copied to: the start-up IPI's vector is this
/// address's page number, so it lies below 1 MiB and is page aligned. The first
/// 4 KiB of usable low memory above the BIOS data area.
pub const TRAMPOLINE_ADDR: u64 = 0x8000;

/// What an application processor carries in `%edi` into long mode, to tell it
/// from the bootstrap processor (which carries the Multiboot magic there).
const AP_MARKER: u32 = 0x4150_4150;

/// Bytes of the bootstrap processor's stack (in the image's bss): 64 KiB, of
/// which a run uses about 31 (the allocator's construction included).
pub const BOOT_STACK_BYTES: usize = 64 << 10;

/// The stack the next application processor to start loads in long mode; the
/// bootstrap processor sets it before each start-up IPI (see `smp`). Read once by
/// that processor's first instruction in long mode, after the start-up IPI (whose
/// delivery orders it).
pub static AP_STACK_TOP: AtomicU64 = AtomicU64::new(0);

extern "C" {
    static trampoline_start: u8;
    static trampoline_end: u8;
    static boot_stack_bottom: u8;
    static __kernel_start: u8;
    static __kernel_end: u8;
    static __init_start: u8;
    static __init_end: u8;
}

// The kernel's entry points, defined with these link names at the top of the
// kernel (main.rs); only `start64` below calls them.
extern "C" {
    /// The bootstrap processor's first Rust code: `%edi` and `%esi` carry
    /// what the Multiboot loader left in `%eax` and `%ebx`.
    fn kmain(magic: u32, info: u32) -> !;
    /// An application processor's first Rust code, on its own stack.
    fn ap_main() -> !;
}

/// The trampoline's code and data, to copy to `TRAMPOLINE_ADDR`.
pub fn trampoline() -> &'static [u8] {
    let start = core::ptr::addr_of!(trampoline_start);
    let end = core::ptr::addr_of!(trampoline_end);
    // SAFETY: both symbols are labels of one section in the global_asm below,
    // start before end; the bytes between them are initialised read-only data.
    unsafe { core::slice::from_raw_parts(start, end as usize - start as usize) }
}

/// The lowest address of the bootstrap processor's stack.
pub fn boot_stack_bottom_addr() -> u64 {
    core::ptr::addr_of!(boot_stack_bottom) as u64
}

/// The kernel image in physical memory, `[start, end)`: code, data, bss (stacks
/// and page tables included), page aligned.
pub fn kernel_image() -> (u64, u64) {
    (
        core::ptr::addr_of!(__kernel_start) as u64,
        core::ptr::addr_of!(__kernel_end) as u64,
    )
}

/// What only boot uses, `[start, end)`, page aligned (see link.ld): given to the
/// allocator once the application processors are up.
pub fn init_area() -> (u64, u64) {
    (
        core::ptr::addr_of!(__init_start) as u64,
        core::ptr::addr_of!(__init_end) as u64,
    )
}

global_asm!(
    r#"
    .section .multiboot, "a"
    .balign 4
multiboot_header:
    .long 0x1BADB002                    /* magic */
    .long 0x00010002                    /* memory map wanted; load addresses below */
    .long -(0x1BADB002 + 0x00010002)    /* checksum */
    .long multiboot_header              /* header_addr */
    .long __kernel_start                /* load_addr */
    .long __load_end                    /* load_end_addr */
    .long __kernel_end                  /* bss_end_addr */
    .long start32                       /* entry_addr */

    .section .init.boot, "ax"
    .code32
    .global start32
start32:
    cli
    cld
    mov %eax, %edi                      /* Multiboot magic */
    mov %ebx, %esi                      /* boot information */

    /* PML4[0] -> PDPT; PDPT[0..64] -> the 64 page directories. */
    mov $boot_pdpt, %eax
    or $0x3, %eax
    mov %eax, boot_pml4
    mov $boot_pd, %eax
    or $0x3, %eax
    xor %ecx, %ecx
1:
    mov %eax, boot_pdpt(,%ecx,8)
    add $0x1000, %eax
    inc %ecx
    cmp $64, %ecx
    jne 1b

    /* Entry i of the directories maps [i * 2 MiB, (i + 1) * 2 MiB): present,
       writable, large page. */
    xor %ecx, %ecx
2:
    mov %ecx, %eax
    shl $21, %eax
    or $0x83, %eax
    mov %eax, boot_pd(,%ecx,8)
    mov %ecx, %eax
    shr $11, %eax
    mov %eax, boot_pd+4(,%ecx,8)
    inc %ecx
    cmp $(64 * 512), %ecx
    jne 2b
    jmp enter_long_mode

    /* An application processor, in 32-bit protected mode from the trampoline. */
    .global ap_entry32
ap_entry32:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov ${ap_marker}, %edi

enter_long_mode:
    mov %cr4, %eax
    or $0x20, %eax                      /* PAE */
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3
    mov $0xC0000080, %ecx               /* EFER */
    rdmsr
    or $0x100, %eax                     /* LME */
    wrmsr
    mov %cr0, %eax
    or $0x80000001, %eax                /* PG, PE */
    mov %eax, %cr0
    lgdt boot_gdt_ptr
    ljmp $0x08, $start64

    .code64
start64:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    xor %eax, %eax
    mov %ax, %fs
    mov %ax, %gs
    cmp ${ap_marker}, %edi
    je 3f
    lea boot_stack_top(%rip), %rsp
    mov %edi, %edi
    mov %esi, %esi
    call {kmain}
    ud2
3:
    mov {ap_stack_top}(%rip), %rsp
    call {ap_main}
    ud2

    /* Copied to TRAMPOLINE_ADDR; an application processor starts at its first
       byte in real mode, CS = TRAMPOLINE_ADDR >> 4, IP = 0. */
    .section .init.rodata, "a"
    .code16
    .global trampoline_start
trampoline_start:
    cli
    cld
    mov %cs, %ax
    mov %ax, %ds
    lgdtl trampoline_gdt_ptr - trampoline_start
    mov %cr0, %eax
    or $1, %eax
    mov %eax, %cr0
    ljmpl $0x18, $ap_entry32
    .balign 4
trampoline_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .long boot_gdt
    .global trampoline_end
trampoline_end:
    .code64

    /* Null, 64-bit code (0x08), data (0x10), 32-bit code (0x18, for the
       trampoline's jump to protected mode). Accessed bits set: the CPU never
       writes them. */
    .section .init.data, "aw"
    .balign 16
boot_gdt:
    .quad 0
    .quad 0x00AF9B000000FFFF
    .quad 0x00CF93000000FFFF
    .quad 0x00CF9B000000FFFF
boot_gdt_end:
    .balign 16
boot_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .quad boot_gdt

    .section .bss.boot, "aw", @nobits
    .balign 4096
boot_pml4:
    .skip 4096
boot_pdpt:
    .skip 4096
boot_pd:
    .skip 4096 * 64
    .balign 16
    .global boot_stack_bottom
boot_stack_bottom:
    .skip {boot_stack_bytes}
boot_stack_top:

    .text
"#,
    ap_marker = const AP_MARKER,
    boot_stack_bytes = const BOOT_STACK_BYTES,
    kmain = sym kmain,
    ap_main = sym ap_main,
    ap_stack_top = sym AP_STACK_TOP,
    options(att_syntax)
);
