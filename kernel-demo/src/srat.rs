//! The NUMA topology from ACPI: the SRAT (which memory ranges and which CPUs
//! belong to which proximity domain) and the SLIT (the distances between them).
//!
//! The `acpi` crate finds and checksums the tables; it has no SRAT or SLIT type,
//! so their bodies are read here, as bytes. Both are simple:
//!
//! ```text
//!   SRAT: header (36) | revision u32 | reserved u64 | entries: type u8, length u8, ...
//!     type 0  CPU (local APIC), 16 bytes: domain[7:0] @2, APIC id @3, flags @4, domain[31:8] @9
//!     type 1  memory, 40 bytes: domain @2, base u64 @8, length u64 @16, flags @28
//!     type 2  CPU (x2APIC), 24 bytes: domain @4, x2APIC id @8, flags @12
//!     (flags bit 0: enabled; for memory, bit 1: hot-pluggable)
//!   SLIT: header (36) | localities N u64 | N x N distances, u8, row = from
//! ```
//!
//! Proximity domains become node numbers in increasing order (QEMU numbers
//! them from 0 already). Without an SRAT the machine is one node. Runs on the
//! bootstrap processor before the heap exists: fixed arrays only.

use acpi::sdt::{SdtHeader, Signature};
use acpi::{AcpiTable, AcpiTables};

use crate::consts::{MAX_NODES, PAGE_BYTES};
use crate::madt::IdentityMapped;
use crate::serial::println;

const MAX_MEMORY: usize = 32;
const MAX_CPU_ENTRIES: usize = 64;

/// A table the kernel reads as bytes after its header.
#[repr(C)]
struct RawTable<const SIG: u32> {
    header: SdtHeader,
}

const fn sig(s: &[u8; 4]) -> u32 {
    u32::from_le_bytes(*s)
}

type Srat = RawTable<{ sig(b"SRAT") }>;
type Slit = RawTable<{ sig(b"SLIT") }>;

// SAFETY: the layout starts with the SDT header (`repr(C)`, one field), as the
// trait requires; the signature is the table's.
unsafe impl AcpiTable for Srat {
    const SIGNATURE: Signature = Signature::SRAT;
    fn header(&self) -> &SdtHeader {
        &self.header
    }
}

// SAFETY: as for `Srat`.
unsafe impl AcpiTable for Slit {
    const SIGNATURE: Signature = Signature::SLIT;
    fn header(&self) -> &SdtHeader {
        &self.header
    }
}

/// The bytes of the table `T`, whole (header included), if the firmware has it.
fn table_bytes<T: AcpiTable>(tables: &AcpiTables<IdentityMapped>) -> Option<&'static [u8]> {
    let mapping = tables.find_table::<T>().ok()?;
    let start = mapping.physical_start();
    let len = mapping.get().header().length as usize;
    // SAFETY: the acpi crate mapped and checksummed `len` bytes at `start`
    // (identity mapped, see `madt::IdentityMapped`); the firmware's tables are
    // never written.
    Some(unsafe { core::slice::from_raw_parts(start as *const u8, len) })
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32_at(b, at)) | (u64::from(u32_at(b, at + 4)) << 32)
}

/// What the firmware says about nodes.
pub struct Topology {
    /// Whether an SRAT was found (otherwise everything is node 0).
    pub from_srat: bool,
    /// Whether a SLIT was found (otherwise distances are 10 and 20).
    pub from_slit: bool,
    nr_nodes: usize,
    /// Node -> proximity domain.
    domains: [u32; MAX_NODES],
    /// Enabled memory ranges: frames `[start, end)`, node, hot-pluggable.
    memory: [(u64, u64, u16, bool); MAX_MEMORY],
    nr_memory: usize,
    /// Enabled CPUs: local APIC id, node.
    cpus: [(u32, u16); MAX_CPU_ENTRIES],
    nr_cpus: usize,
    distance: [[u8; MAX_NODES]; MAX_NODES],
}

impl Topology {
    /// Reads the SRAT and the SLIT.
    ///
    /// # Errors
    /// An SRAT with more nodes, memory ranges or CPUs than the kernel keeps.
    #[link_section = ".init.text"]
    pub fn read(tables: &AcpiTables<IdentityMapped>) -> Result<Topology, &'static str> {
        let mut t = Topology {
            from_srat: false,
            from_slit: false,
            nr_nodes: 1,
            domains: [0; MAX_NODES],
            memory: [(0, 0, 0, false); MAX_MEMORY],
            nr_memory: 0,
            cpus: [(0, 0); MAX_CPU_ENTRIES],
            nr_cpus: 0,
            distance: [[0; MAX_NODES]; MAX_NODES],
        };
        if let Some(srat) = table_bytes::<Srat>(tables) {
            t.from_srat = true;
            t.read_srat(srat)?;
        }
        for a in 0..MAX_NODES {
            for b in 0..MAX_NODES {
                t.distance[a][b] = if a == b { 10 } else { 20 };
            }
        }
        if let Some(slit) = table_bytes::<Slit>(tables) {
            t.read_slit(slit);
        }
        Ok(t)
    }

    /// The SRAT's entries, in two passes: the domains (numbered into nodes),
    /// then each entry with its node.
    #[link_section = ".init.text"]
    fn read_srat(&mut self, b: &[u8]) -> Result<(), &'static str> {
        // Each entry as (kind, domain, payload): kind 0 a CPU (APIC id), 1 memory.
        let each = |f: &mut dyn FnMut(u8, u32, u64, u64, u32)| {
            let mut at = 48;
            while at + 2 <= b.len() {
                let (ty, len) = (b[at], b[at + 1] as usize);
                if len < 2 || at + len > b.len() {
                    break;
                }
                let e = &b[at..at + len];
                match (ty, len) {
                    (0, 16..) => {
                        let domain = u32::from(e[2])
                            | (u32::from(e[9]) << 8)
                            | (u32::from(e[10]) << 16)
                            | (u32::from(e[11]) << 24);
                        f(0, domain, u64::from(e[3]), 0, u32_at(e, 4));
                    }
                    (1, 40..) => f(1, u32_at(e, 2), u64_at(e, 8), u64_at(e, 16), u32_at(e, 28)),
                    (2, 24..) => f(0, u32_at(e, 4), u64::from(u32_at(e, 8)), 0, u32_at(e, 12)),
                    _ => {}
                }
                at += len;
            }
        };
        const ENABLED: u32 = 1;
        const HOT_PLUGGABLE: u32 = 2;
        let mut nr = 0;
        let mut full = false;
        each(&mut |_, domain, _, _, flags| {
            if flags & ENABLED == 0 || self.domains[..nr].contains(&domain) {
                return;
            }
            if nr == MAX_NODES {
                full = true;
                return;
            }
            self.domains[nr] = domain;
            nr += 1;
        });
        if full {
            return Err("more NUMA nodes than the kernel keeps");
        }
        self.domains[..nr].sort_unstable();
        self.nr_nodes = nr.max(1);
        let domains = self.domains;
        let node_of = |d: u32| domains[..nr].iter().position(|&x| x == d).unwrap_or(0) as u16;
        let (mut nm, mut nc) = (0, 0);
        each(&mut |kind, domain, a, len, flags| {
            if flags & ENABLED == 0 {
                return;
            }
            let node = node_of(domain);
            if kind == 0 {
                if nc < MAX_CPU_ENTRIES {
                    self.cpus[nc] = (a as u32, node);
                    nc += 1;
                } else {
                    full = true;
                }
            } else if len > 0 {
                if nm < MAX_MEMORY {
                    let (s, e) = (a / PAGE_BYTES, (a + len).div_ceil(PAGE_BYTES));
                    self.memory[nm] = (s, e, node, flags & HOT_PLUGGABLE != 0);
                    nm += 1;
                } else {
                    full = true;
                }
            }
        });
        if full {
            return Err("more SRAT entries than the kernel keeps");
        }
        self.nr_memory = nm;
        self.nr_cpus = nc;
        self.memory[..nm].sort_unstable_by_key(|m| m.0);
        Ok(())
    }

    /// The SLIT's matrix, for the domains that are nodes.
    #[link_section = ".init.text"]
    fn read_slit(&mut self, b: &[u8]) {
        if b.len() < 44 {
            return;
        }
        let n = u64_at(b, 36) as usize;
        if n == 0 || b.len() < 44 + n * n {
            return;
        }
        for a in 0..self.nr_nodes {
            for c in 0..self.nr_nodes {
                let (da, dc) = (self.domains[a] as usize, self.domains[c] as usize);
                if da < n && dc < n {
                    self.distance[a][c] = b[44 + da * n + dc];
                }
            }
        }
        self.from_slit = true;
    }

    /// Nodes (at least 1).
    pub fn nr_nodes(&self) -> usize {
        self.nr_nodes
    }

    /// The node of the CPU with local APIC id `apic_id` (0 if not listed).
    pub fn node_of_apic(&self, apic_id: u32) -> u16 {
        self.cpus[..self.nr_cpus]
            .iter()
            .find(|c| c.0 == apic_id)
            .map_or(0, |c| c.1)
    }

    /// Calls `f(start, end, node)` for the pieces of frames `[s, e)` by the
    /// SRAT's ranges; pieces it does not list are node 0's (all of them without
    /// an SRAT).
    pub fn split(&self, s: u64, e: u64, mut f: impl FnMut(u64, u64, u16)) {
        let mem = &self.memory[..self.nr_memory];
        let mut p = s;
        while p < e {
            match mem.iter().find(|m| m.0 <= p && p < m.1) {
                Some(m) => {
                    let q = m.1.min(e);
                    f(p, q, m.2);
                    p = q;
                }
                None => {
                    let q = mem
                        .iter()
                        .map(|m| m.0)
                        .filter(|&b| b > p)
                        .min()
                        .unwrap_or(e)
                        .min(e);
                    f(p, q, 0);
                    p = q;
                }
            }
        }
    }

    /// The frame ranges of `node` that the SRAT lists (all of memory for node 0
    /// without an SRAT).
    pub fn ranges_of(&self, node: u16) -> impl Iterator<Item = (u64, u64)> + '_ {
        let all = (!self.from_srat && node == 0).then_some((0, u64::MAX));
        self.memory[..self.nr_memory]
            .iter()
            .filter(move |m| m.2 == node)
            .map(|m| (m.0, m.1))
            .chain(all)
    }

    /// The distance from node `a` to node `b`.
    pub fn distance(&self, a: usize, b: usize) -> u8 {
        self.distance[a][b]
    }

    /// Prints the tables as read.
    pub fn print(&self) {
        if !self.from_srat {
            println!("numa: no SRAT, one node");
            return;
        }
        println!(
            "numa: SRAT lists {} nodes (proximity domains {:?})",
            self.nr_nodes,
            &self.domains[..self.nr_nodes]
        );
        for &(s, e, node, hot) in &self.memory[..self.nr_memory] {
            println!(
                "  SRAT: node {node} [mem {:#018x}-{:#018x}]{}",
                s * PAGE_BYTES,
                e * PAGE_BYTES - 1,
                if hot { " hot-pluggable" } else { "" }
            );
        }
        for &(apic, node) in &self.cpus[..self.nr_cpus] {
            println!("  SRAT: local APIC id {apic} -> node {node}");
        }
        if self.from_slit {
            for a in 0..self.nr_nodes {
                println!(
                    "  SLIT: node {a} distances {:?}",
                    &self.distance[a][..self.nr_nodes]
                );
            }
        } else {
            println!("  no SLIT: distances 10 local, 20 remote");
        }
    }
}
