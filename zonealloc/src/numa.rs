//! The host's NUMA topology, for a program whose arena should follow it: which
//! CPUs sit on which node, how far apart the nodes are, and binding a node's
//! frames to that node's memory (`mbind`).
//!
//! `std` on Linux only; a kernel builds the same `Config` fields
//! (`cpu_to_node`, `node_distance`) from its firmware tables (the ACPI SRAT and
//! SLIT). Bottom layer: reads `/sys`, makes the system calls, and knows nothing of
//! the allocator but `Config`.
//!
//! ```no_run
//! use zonealloc::{numa::HostTopology, ArenaOptions, ZoneAllocator};
//!
//! let topo = HostTopology::read().unwrap();
//! // 64 MiB per node, bound to that node's memory.
//! let config = topo.config(64 << 20);
//! let opts = ArenaOptions { bind_nodes: true, ..ArenaOptions::default() };
//! let za = ZoneAllocator::with_arena(config, opts).unwrap();
//! ```

#![allow(unsafe_code)]

use std::io;
use std::path::Path;
use std::string::String;
use std::vec::Vec;

use crate::config::{Config, NodeConfig, ZoneConfig};
use crate::types::{Pfn, ZoneType};

/// One node of the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostNode {
    /// The node's number.
    pub id: u16,
    /// Its CPUs.
    pub cpus: Vec<usize>,
    /// Its distance to every node in `/sys`'s order of node numbers (0 to the
    /// highest online), as `node*/distance` gives it.
    pub distance: Vec<u8>,
}

/// The host's online nodes, from `/sys/devices/system/node`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostTopology {
    /// Online nodes, by number.
    pub nodes: Vec<HostNode>,
}

/// Parses a kernel CPU or node list (`0-3,8,10-11`).
pub fn parse_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if a > b || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

fn read(p: &Path) -> io::Result<String> {
    std::fs::read_to_string(p)
}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        std::format!("unreadable {what}"),
    )
}

impl HostTopology {
    /// Reads the online nodes, their CPUs and distances.
    ///
    /// # Errors
    /// The files cannot be read or parsed (no `/sys`, no NUMA support: a
    /// machine without it still shows node 0).
    pub fn read() -> io::Result<HostTopology> {
        HostTopology::read_from(Path::new("/sys/devices/system/node"))
    }

    /// As `read`, from a copy of the `node` folder (for tests).
    ///
    /// # Errors
    /// As `read`.
    pub fn read_from(dir: &Path) -> io::Result<HostTopology> {
        let online = parse_list(&read(&dir.join("online"))?).ok_or_else(|| bad("online"))?;
        let mut nodes = Vec::with_capacity(online.len());
        for &n in &online {
            let nd = dir.join(std::format!("node{n}"));
            let cpus = parse_list(&read(&nd.join("cpulist"))?).ok_or_else(|| bad("cpulist"))?;
            let distance = read(&nd.join("distance"))?
                .split_whitespace()
                .map(|d| d.parse::<u8>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| bad("distance"))?;
            nodes.push(HostNode {
                id: u16::try_from(n).map_err(|_| bad("node number"))?,
                cpus,
                distance,
            });
        }
        Ok(HostTopology { nodes })
    }

    /// A configuration with one node per host node (numbered as the host's; a
    /// host whose node numbers have gaps gets empty nodes there), each with one
    /// `Normal` zone of `bytes_per_node` bytes, one after another in frame
    /// numbers; `cpu_to_node` and `node_distance` as the host's, `nr_cpus`
    /// covering every CPU listed.
    pub fn config(&self, bytes_per_node: u64) -> Config {
        let top = self.nodes.iter().map(|n| n.id as usize).max().unwrap_or(0);
        let frames = bytes_per_node >> 12;
        let mut nodes = Vec::with_capacity(top + 1);
        let mut next = 0u64;
        for id in 0..=top {
            let zones = if self.nodes.iter().any(|n| n.id as usize == id) {
                let z = ZoneConfig::new(ZoneType::Normal, Pfn(next), frames);
                next += frames;
                std::vec![z]
            } else {
                Vec::new()
            };
            nodes.push(NodeConfig { zones });
        }
        let nr_cpus = self
            .nodes
            .iter()
            .flat_map(|n| n.cpus.iter())
            .max()
            .map_or(1, |&c| c + 1);
        let mut cpu_to_node = std::vec![0u16; nr_cpus];
        for n in &self.nodes {
            for &c in &n.cpus {
                cpu_to_node[c] = n.id;
            }
        }
        // The host lists distances to its online nodes only; a node it does not
        // have is far from everything.
        let node_distance = (0..=top)
            .map(|a| {
                (0..=top)
                    .map(|b| {
                        let row = self.nodes.iter().find(|n| n.id as usize == a);
                        let col = self.nodes.iter().position(|n| n.id as usize == b);
                        match (row, col) {
                            _ if a == b => crate::config::LOCAL_DISTANCE,
                            (Some(r), Some(c)) => r.distance.get(c).copied().unwrap_or(u8::MAX),
                            _ => u8::MAX,
                        }
                    })
                    .collect()
            })
            .collect();
        Config {
            nodes,
            nr_cpus,
            cpu_to_node,
            node_distance,
            ..Config::default()
        }
    }
}

/// `MPOL_BIND`: allocate only from the nodes of the mask.
const MPOL_BIND: libc::c_int = 2;
/// `MPOL_MF_MOVE`: pages of the range already faulted in move to the node.
const MPOL_MF_MOVE: libc::c_uint = 1 << 1;
/// `MPOL_F_NODE | MPOL_F_ADDR`: `get_mempolicy` answers the node of the page at
/// an address.
const MPOL_F_NODE_ADDR: libc::c_ulong = 1 | 2;

/// Binds the pages of `[addr, addr + len)` to host node `node` (`mbind` with
/// `MPOL_BIND`): pages faulted in later come from that node's memory.
///
/// # Errors
/// What `mbind` answered (a node the host does not have: `EINVAL`).
///
/// # Safety
/// `[addr, addr + len)` is memory the caller mapped (a policy change is all the
/// call makes; `mbind` refuses a range that is not mapped).
pub unsafe fn bind(addr: *mut u8, len: usize, node: u16) -> io::Result<()> {
    let mut mask = [0u64; 16];
    let n = node as usize;
    if n >= mask.len() * 64 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    mask[n / 64] |= 1 << (n % 64);
    // SAFETY: `mbind` reads `mask` (of `maxnode` bits) and changes only the
    // memory policy of the range, which the caller maps.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            MPOL_BIND,
            mask.as_ptr(),
            (mask.len() * 64 + 1) as libc::c_ulong,
            MPOL_MF_MOVE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The host node whose memory holds the page at `addr` (faulted in), as
/// `get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)` answers.
///
/// # Errors
/// What `get_mempolicy` answered (an address nothing maps: `EFAULT`).
pub fn node_of_address(addr: *const u8) -> io::Result<u16> {
    let addr = addr as usize;
    let mut node: libc::c_int = -1;
    // SAFETY: `get_mempolicy` writes one int to `node`; the address is only
    // looked up in the page tables, never dereferenced.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            core::ptr::null_mut::<u64>(),
            0 as libc::c_ulong,
            addr,
            MPOL_F_NODE_ADDR,
        )
    };
    if r == 0 {
        u16::try_from(node).map_err(|_| bad("node"))
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_as_the_kernel_writes_them() {
        assert_eq!(
            parse_list("0-3,8,10-11\n"),
            Some(std::vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_list("0"), Some(std::vec![0]));
        assert_eq!(parse_list(""), Some(std::vec![]));
        assert_eq!(parse_list("3-1"), None);
        assert_eq!(parse_list("x"), None);
    }

    #[test]
    #[cfg_attr(miri, ignore = "writes a sysfs-shaped tree of files")]
    fn a_two_socket_host_gives_its_topology_to_the_config() {
        let dir = std::env::temp_dir().join(std::format!("zonealloc-numa-{}", std::process::id()));
        for (n, cpus, dist) in [(0, "0-1,4-5", "10 21"), (1, "2-3,6-7", "21 10")] {
            let d = dir.join(std::format!("node{n}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cpulist"), std::format!("{cpus}\n")).unwrap();
            std::fs::write(d.join("distance"), std::format!("{dist}\n")).unwrap();
        }
        std::fs::write(dir.join("online"), "0-1\n").unwrap();
        let t = HostTopology::read_from(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let c = t.config(16 << 20);
        c.validate().unwrap();
        assert_eq!(c.nr_cpus, 8);
        assert_eq!(c.cpu_to_node, [0, 0, 1, 1, 0, 0, 1, 1]);
        assert_eq!(c.distance(0, 1), 21);
        assert_eq!(c.nodes[1].zones[0].start_pfn, Pfn(4096));
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads sysfs, maps and binds memory")]
    fn this_host_reads_and_binds_node_zero() {
        let Ok(t) = HostTopology::read() else {
            return;
        };
        assert!(!t.nodes.is_empty());
        let len = 1 << 20;
        // SAFETY: a fresh private mapping, unmapped below.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let first = t.nodes[0].id;
        // SAFETY: the mapping above.
        unsafe { bind(p.cast(), len, first) }.unwrap();
        // SAFETY: inside the mapping.
        unsafe { p.cast::<u8>().write(1) };
        assert_eq!(node_of_address(p.cast()).unwrap(), first);
        // A node the host does not have is refused.
        // SAFETY: the mapping above.
        assert!(unsafe { bind(p.cast(), len, 1000) }.is_err());
        // SAFETY: the mapping above.
        unsafe { libc::munmap(p, len) };
    }
}
