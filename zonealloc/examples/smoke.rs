use zonealloc::*;
fn main() {
    let za = ZoneAllocator::new(Config::with_bytes(256 << 20)).unwrap();
    println!("{:?}", za.check_invariants().unwrap());
    let mut v = Vec::new();
    for i in 0..10000u32 {
        let gfp = match i % 3 {
            0 => Gfp::KERNEL,
            1 => Gfp::HIGHUSER_MOVABLE,
            _ => Gfp::KERNEL | Gfp::RECLAIMABLE,
        };
        let o = Order((i % 5) as u8);
        if let Ok(p) = za.alloc_pages(gfp, o) {
            v.push((p, o));
        }
        if i % 7 == 0 && !v.is_empty() {
            let (p, o) = v.swap_remove((i as usize * 31) % v.len());
            za.free_pages(p, o).unwrap();
        }
    }
    println!("{:?}", za.check_invariants().unwrap());
    print!("{}{}", za.buddyinfo(), za.pagetypeinfo());
    assert_eq!(za.pagetypeinfo(), za.pagetypeinfo_walked());
    for (p, o) in v.drain(..) {
        za.free_pages(p, o).unwrap();
    }
    println!("{:?}", za.check_invariants().unwrap());
    print!("{}{}{}", za.buddyinfo(), za.zoneinfo(), za.vmstat());
    print!("{}{}", za.unusable_index(), za.extfrag_index());
    println!("{:?}", za.pcp_stats());
    let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    za.free_pages(p, Order(0)).unwrap();
    println!("{:?} pcp={}", za.pcp_stats(), za.nr_pcp_pages());
    println!("{:?}", za.check_invariants().unwrap());
}
#[allow(dead_code)]
fn pcp() {}
