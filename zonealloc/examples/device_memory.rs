//! Device memory (a GPU's, a NIC's buffer area, a guest's frames) managed as
//! abstract frames: zonealloc hands out frame numbers, and the program turns them
//! into device offsets itself. Nothing is mapped or touched on the host.
//!
//! Here a 4 GiB device whose memory starts at device address 0x1_0000_0000 is split
//! into buffers of 4 KiB to 4 MiB, some freed again; the buddy lists merge what comes
//! back, and `buddyinfo` shows the result in the kernel's format.
//!
//! Run: `cargo run --release --example device_memory`.

use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator, ZoneType};

/// Where the device's memory begins, and its size.
const DEVICE_BASE: u64 = 0x1_0000_0000;
const DEVICE_BYTES: u64 = 4 << 30;
const PAGE: u64 = 4096;

/// A buffer on the device: its first frame and its order.
struct Buffer {
    pfn: Pfn,
    order: Order,
}

impl Buffer {
    /// The device address of the buffer (frame numbers start at the device base).
    fn device_addr(&self) -> u64 {
        self.pfn.0 * PAGE
    }

    fn len(&self) -> u64 {
        PAGE << self.order.0
    }
}

fn main() {
    // One zone of abstract frames whose numbers are the device's page numbers; one
    // CPU's lists, as a driver thread would use.
    let config = Config {
        nr_cpus: 1,
        ..Config::single_zone(
            ZoneType::Normal,
            Pfn(DEVICE_BASE / PAGE),
            DEVICE_BYTES / PAGE,
        )
    };
    let za = ZoneAllocator::new(config).expect("a valid device layout");

    let mut buffers = Vec::new();
    for i in 0..4096u64 {
        // Mostly small buffers, every 16th a large one (up to order 10: 4 MiB).
        let order = if i % 16 == 0 {
            Order(10)
        } else {
            Order((i % 5) as u8)
        };
        match za.alloc_pages(Gfp::KERNEL, order) {
            Ok(pfn) => buffers.push(Buffer { pfn, order }),
            Err(e) => {
                println!("allocation {i} failed: {e}");
                break;
            }
        }
    }
    let first = &buffers[0];
    println!(
        "{} buffers; the first at device address {:#x}, {} bytes",
        buffers.len(),
        first.device_addr(),
        first.len()
    );
    assert!(first.device_addr() >= DEVICE_BASE);

    // Free every other buffer; their neighbours' frees later merge into large blocks.
    let mut kept = Vec::new();
    for (i, b) in buffers.into_iter().enumerate() {
        if i % 2 == 0 {
            za.free_pages(b.pfn, b.order).expect("our own buffer");
        } else {
            kept.push(b);
        }
    }
    za.drain_all_pages();
    println!("half freed:\n{}", za.buddyinfo());
    for b in kept {
        za.free_pages(b.pfn, b.order).expect("our own buffer");
    }
    za.drain_all_pages();
    println!("all freed:\n{}", za.buddyinfo());
    assert_eq!(za.nr_free_pages(), za.managed_pages());
}
