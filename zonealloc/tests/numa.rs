//! NUMA: `alloc_pages` starts from the calling CPU's node (`numa_node_id()`),
//! and falls back to the other nodes nearest first, by the distance table.

use std::cell::Cell;

use zonealloc::{
    Config, Gfp, NodeConfig, Order, Pfn, Platform, ZoneAllocator, ZoneConfig, ZoneType,
};

thread_local! {
    /// The CPU this test thread claims to run on.
    static CPU: Cell<usize> = const { Cell::new(0) };
}

/// A machine whose CPU is whatever the test thread says.
#[derive(Debug)]
struct SaidCpu;

impl Platform for SaidCpu {
    fn cpu_id(&self) -> usize {
        CPU.with(|c| c.get())
    }
}

static SAID: SaidCpu = SaidCpu;

/// `nodes` nodes of one 16 MiB Normal zone each, one after another.
fn numa_config(nodes: usize, cpu_to_node: &[u16], distance: Vec<Vec<u8>>) -> Config {
    let frames = 4096;
    Config {
        nodes: (0..nodes)
            .map(|n| NodeConfig {
                zones: vec![ZoneConfig::new(
                    ZoneType::Normal,
                    Pfn(n as u64 * frames),
                    frames,
                )],
            })
            .collect(),
        nr_cpus: cpu_to_node.len(),
        cpu_to_node: cpu_to_node.to_vec(),
        node_distance: distance,
        platform: Some(&SAID),
        ..Config::default()
    }
}

fn node_of(za: &ZoneAllocator, p: Pfn) -> u16 {
    za.zone_id_of(p).unwrap().node
}

#[test]
fn alloc_pages_takes_the_calling_cpus_node_first() {
    let za = ZoneAllocator::new(numa_config(2, &[0, 0, 1, 1], Vec::new())).unwrap();
    for cpu in 0..4 {
        CPU.with(|c| c.set(cpu));
        assert_eq!(za.numa_node_id(), [0, 0, 1, 1][cpu]);
        for order in [0, 3, 9] {
            let p = za.alloc_pages(Gfp::KERNEL, Order(order)).unwrap();
            assert_eq!(
                node_of(&za, p),
                za.numa_node_id(),
                "CPU {cpu}, order {order}"
            );
            za.free_pages(p, Order(order)).unwrap();
        }
        // The try-only entry point starts there too.
        let p = za.alloc_pages_nolock(Gfp::KERNEL, None, Order(0)).unwrap();
        assert_eq!(node_of(&za, p), za.numa_node_id());
        za.free_pages(p, Order(0)).unwrap();
    }
    // A node named explicitly wins over the CPU's.
    CPU.with(|c| c.set(0));
    let p = za.alloc_pages_node(1, Gfp::KERNEL, Order(0)).unwrap();
    assert_eq!(node_of(&za, p), 1);
    za.free_pages(p, Order(0)).unwrap();
}

#[test]
fn a_full_node_falls_back_to_the_nearest_other() {
    // Node 0 is nearer to node 2 than to node 1.
    let distance = vec![vec![10, 40, 20], vec![40, 10, 20], vec![20, 20, 10]];
    let za = ZoneAllocator::new(numa_config(3, &[0, 1, 2], distance)).unwrap();
    CPU.with(|c| c.set(0));
    let mut held = Vec::new();
    let mut seen = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::KERNEL | Gfp::NORETRY, Order(0)) {
        let n = node_of(&za, p);
        if seen.last() != Some(&n) {
            seen.push(n);
        }
        held.push(p);
    }
    // Node 0's own memory first, then node 2's, then node 1's.
    assert_eq!(seen, [0, 2, 1]);
    for p in held {
        za.free_pages(p, Order(0)).unwrap();
    }
    za.drain_all_pages();
    assert_eq!(za.nr_free_pages(), za.managed_pages());
}

#[test]
fn a_distance_table_that_is_not_one_is_refused() {
    let bad = [
        vec![vec![10, 20]],
        vec![vec![10, 20], vec![20, 11]],
        vec![vec![10, 5], vec![5, 10]],
    ];
    for d in bad {
        let e = ZoneAllocator::new(numa_config(2, &[0, 1], d.clone())).err();
        assert!(
            matches!(e, Some(zonealloc::ConfigError::Numa(_))),
            "{d:?}: {e:?}"
        );
    }
    let e = ZoneAllocator::new(numa_config(2, &[0, 2], Vec::new())).err();
    assert!(matches!(e, Some(zonealloc::ConfigError::Numa(_))));
}

/// Without a platform, on x86-64 Linux the per-CPU stacks serve `alloc_pages`:
/// a thread pinned to a CPU of node 1 gets node 1's memory from them too.
#[cfg(target_os = "linux")]
#[test]
fn the_fast_path_takes_the_cpus_node_too() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        return;
    }
    let frames = 4096;
    let config = Config {
        nodes: (0..2)
            .map(|n| NodeConfig {
                zones: vec![ZoneConfig::new(ZoneType::Normal, Pfn(n * frames), frames)],
            })
            .collect(),
        nr_cpus: 2,
        cpu_to_node: vec![0, 1],
        ..Config::default()
    };
    let za = ZoneAllocator::new(config).unwrap();
    for cpu in 0..2usize {
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: a zeroed set with one CPU; changes this thread only.
                let pinned = unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0
                };
                if !pinned {
                    return;
                }
                for _ in 0..1000 {
                    let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
                    // The thread may have been moved between its CPU read and
                    // the pop; it is pinned, so that is rare, but allowed.
                    if za.current_cpu() == cpu {
                        assert_eq!(node_of(&za, p), cpu as u16);
                    }
                    za.free_pages(p, Order(0)).unwrap();
                }
            });
        });
    }
}
