//! The CPUs, from ACPI's MADT: the RSDP found in the BIOS areas, then the local
//! APIC entries of the multiple APIC description table.
//!
//! Runs on the bootstrap processor before the heap exists: the `acpi` crate's
//! table walk needs no allocator, only a way to reach physical memory, which the
//! identity map gives. `srat` finds its tables through the same `tables()`.

use core::ptr::NonNull;

use acpi::madt::{Madt, MadtEntry};
use acpi::{AcpiHandler, AcpiTables, PhysicalMapping};

use crate::boot;
use crate::consts::MAX_CPUS;

/// ACPI's view of physical memory: the identity map.
#[derive(Clone, Copy, Debug)]
pub struct IdentityMapped;

impl AcpiHandler for IdentityMapped {
    unsafe fn map_physical_region<T>(
        &self,
        physical_address: usize,
        size: usize,
    ) -> PhysicalMapping<Self, T> {
        assert!(
            physical_address != 0
                && (physical_address as u64).saturating_add(size as u64)
                    <= boot::IDENTITY_MAPPED_BYTES,
            "ACPI table outside the identity map"
        );
        let virt = NonNull::new(physical_address as *mut T).expect("checked non-zero");
        // SAFETY: the range is identity mapped (checked above); the caller (the
        // acpi crate) vouches that a `T` lies there.
        unsafe { PhysicalMapping::new(physical_address, virt, size, size, *self) }
    }

    fn unmap_physical_region<T>(_region: &PhysicalMapping<Self, T>) {}
}

/// The CPUs the MADT lists as enabled.
pub struct Cpus {
    apic_ids: [u32; MAX_CPUS],
    len: usize,
    /// Enabled CPUs listed, including any beyond `MAX_CPUS`.
    pub listed: usize,
}

impl Cpus {
    /// Local APIC ids, the first `MAX_CPUS` enabled ones in table order.
    pub fn apic_ids(&self) -> &[u32] {
        &self.apic_ids[..self.len]
    }
}

/// The ACPI tables, found through the RSDP in the BIOS areas.
///
/// # Errors
/// No RSDP there.
#[link_section = ".init.text"]
pub fn tables() -> Result<AcpiTables<IdentityMapped>, &'static str> {
    // SAFETY: this is a BIOS machine (QEMU's SeaBIOS, Multiboot boot), so the
    // EBDA pointer and the BIOS area the search reads are there, identity mapped.
    unsafe { AcpiTables::search_for_rsdp_bios(IdentityMapped) }
        .map_err(|_| "no ACPI RSDP in the BIOS areas")
}

/// Reads the MADT.
///
/// # Errors
/// No MADT.
#[link_section = ".init.text"]
pub fn find_cpus(tables: &AcpiTables<IdentityMapped>) -> Result<Cpus, &'static str> {
    let madt = tables.find_table::<Madt>().map_err(|_| "no MADT")?;
    let mut cpus = Cpus {
        apic_ids: [0; MAX_CPUS],
        len: 0,
        listed: 0,
    };
    let mut add = |id: u32| {
        cpus.listed += 1;
        if cpus.len < MAX_CPUS {
            cpus.apic_ids[cpus.len] = id;
            cpus.len += 1;
        }
    };
    for entry in madt.get().entries() {
        match entry {
            MadtEntry::LocalApic(e) => {
                let flags = e.flags;
                if flags & 1 != 0 {
                    add(u32::from(e.apic_id));
                }
            }
            MadtEntry::LocalX2Apic(e) => {
                let (flags, id) = (e.flags, e.x2apic_id);
                // xAPIC mode reaches ids up to 254 only.
                if flags & 1 != 0 && id < 0xff {
                    add(id);
                }
            }
            _ => {}
        }
    }
    Ok(cpus)
}
