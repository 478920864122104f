//! An arena per NUMA node, bound to that node's memory, and allocations that take
//! the calling CPU's node first.
//!
//! Reads the host's topology from `/sys/devices/system/node`, builds one node of
//! 64 MiB per host node with the host's CPU-to-node map and distances, maps the
//! arena with each node's frames bound to that node (`mbind`), then, on a thread
//! pinned to each CPU in turn, allocates a page and shows which node's zone it
//! came from and which host node's memory holds it.
//!
//!     cargo run --release --example numa

#[cfg(target_os = "linux")]
fn main() {
    use zonealloc::numa::{node_of_address, HostTopology};
    use zonealloc::{ArenaOptions, Gfp, Order, ZoneAllocator};

    let topo = HostTopology::read().expect("the host's topology in /sys");
    println!("host: {} node(s)", topo.nodes.len());
    for n in &topo.nodes {
        println!(
            "  node {}: CPUs {:?}, distances {:?}",
            n.id, n.cpus, n.distance
        );
    }
    let config = topo.config(64 << 20);
    let opts = ArenaOptions {
        bind_nodes: true,
        ..ArenaOptions::default()
    };
    let za = ZoneAllocator::with_arena(config, opts).expect("an arena bound per node");
    for n in &topo.nodes {
        for &cpu in &n.cpus {
            let za = &za;
            std::thread::scope(|s| {
                s.spawn(move || {
                    // SAFETY: a zeroed set with one CPU added; the call only
                    // changes this thread's affinity.
                    let pinned = unsafe {
                        let mut set: libc::cpu_set_t = std::mem::zeroed();
                        libc::CPU_SET(cpu, &mut set);
                        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0
                    };
                    if !pinned {
                        println!("  CPU {cpu}: cannot run there, skipped");
                        return;
                    }
                    let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
                    let zone = za.zone_id_of(p).unwrap();
                    let addr = za.page_address(p).unwrap().as_ptr();
                    // SAFETY: the page is ours; writing faults it in.
                    unsafe { addr.write(1) };
                    let host = node_of_address(addr).map_or("?".into(), |n| n.to_string());
                    println!(
                        "  CPU {cpu} (node {}): page {p} from node {}'s zone, in host node {host}'s memory",
                        n.id, zone.node
                    );
                    za.free_pages(p, Order(0)).unwrap();
                });
            });
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("this example reads Linux's /sys and binds with mbind: Linux only");
}
