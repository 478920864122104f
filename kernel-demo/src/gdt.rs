//! Per-CPU GDT and TSS: a kernel code and data segment, and a task-state segment
//! whose first interrupt stack (IST 1) is the CPU's double-fault stack.
//!
//! Each CPU needs its own TSS (loading one marks it busy), hence its own GDT.
//! Both live in static arrays indexed by CPU, built by the CPU itself on its way
//! up, before it sets its `GS` base (loading a segment register resets it).

use spin::Once;
use x86_64::instructions::segmentation::{Segment, CS, DS, ES, SS};
use x86_64::instructions::tables::load_tss;
use x86_64::registers::segmentation::SegmentSelector;
use x86_64::structures::gdt::{Descriptor, GlobalDescriptorTable};
use x86_64::structures::tss::TaskStateSegment;
use x86_64::VirtAddr;

use crate::consts::MAX_CPUS;
use crate::stack::Stack;

/// Bytes of each CPU's double-fault stack.
const DOUBLE_FAULT_STACK_BYTES: usize = 16 << 10;

static DOUBLE_FAULT_STACKS: [Stack<DOUBLE_FAULT_STACK_BYTES>; MAX_CPUS] =
    [const { Stack::new() }; MAX_CPUS];

static TSS: [Once<TaskStateSegment>; MAX_CPUS] = [const { Once::new() }; MAX_CPUS];

struct Gdt {
    table: GlobalDescriptorTable,
    code: SegmentSelector,
    data: SegmentSelector,
    tss: SegmentSelector,
}

static GDT: [Once<Gdt>; MAX_CPUS] = [const { Once::new() }; MAX_CPUS];

/// Builds CPU `cpu`'s TSS and GDT and loads them on the calling CPU (which must
/// be `cpu`), reloading the segment registers but `FS` and `GS`.
pub fn load(cpu: usize) {
    let tss = TSS[cpu].call_once(|| {
        let mut tss = TaskStateSegment::new();
        tss.interrupt_stack_table[0] = VirtAddr::new(DOUBLE_FAULT_STACKS[cpu].top());
        tss
    });
    let gdt = GDT[cpu].call_once(|| {
        let mut table = GlobalDescriptorTable::new();
        let code = table.append(Descriptor::kernel_code_segment());
        let data = table.append(Descriptor::kernel_data_segment());
        let tss = table.append(Descriptor::tss_segment(tss));
        Gdt {
            table,
            code,
            data,
            tss,
        }
    });
    gdt.table.load();
    // SAFETY: the selectors name this GDT's 64-bit code segment, its data
    // segment and its TSS, which stay in place for good (static).
    unsafe {
        CS::set_reg(gdt.code);
        SS::set_reg(gdt.data);
        DS::set_reg(gdt.data);
        ES::set_reg(gdt.data);
        load_tss(gdt.tss);
    }
}
