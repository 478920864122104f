//! Construction and destruction: the C configuration structs, their translation
//! into a `zonealloc_core::Config`, `zonealloc_create*` and `zonealloc_destroy`.
//!
//! Above `handle` and `ptr`. C describes the memory as arrays of nodes, zones and
//! holes; the translation reads them (checking each pointer), fills the few
//! fields C sets and leaves every other field at `Config::default()`, so fields
//! the core gains later take their defaults here too. The core then validates the
//! result as it validates any configuration (`Config::validate`), and its
//! `ConfigError` reaches C as one `ZONEALLOC_ERR_CONFIG_*` code per variant.

use core::ffi::c_int;

use zonealloc_core::{
    ArenaOptions, Config, ConfigError, NodeConfig, Order, PcpConfig, Pfn, ZoneAllocator, ZoneConfig,
};

use crate::consts::{zone_type, ZONEALLOC_BACKING_ARENA, ZONEALLOC_BACKING_FRAMES};
use crate::handle::{guard, zonealloc, Inner};
use crate::ptr::{slice, Out};
use crate::status::{Failure, Status};

/// A hole: `nr_pages` frames from `start_pfn` with no memory behind them.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct zonealloc_hole {
    /// First frame of the hole.
    pub start_pfn: u64,
    /// Frames in the hole.
    pub nr_pages: u64,
}

/// One zone (`ZoneConfig`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct zonealloc_zone_config {
    /// `enum zonealloc_zone_type`.
    pub zone_type: u32,
    /// First frame; need not be aligned.
    pub start_pfn: u64,
    /// Frames spanned, holes included.
    pub spanned_pages: u64,
    /// `nr_holes` holes (may be NULL when `nr_holes` is 0).
    pub holes: *const zonealloc_hole,
    /// Entries of `holes`.
    pub nr_holes: usize,
}

/// One node (`NodeConfig`): its zones, lowest zone type first.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct zonealloc_node_config {
    /// `nr_zones` zones (may be NULL when `nr_zones` is 0).
    pub zones: *const zonealloc_zone_config,
    /// Entries of `zones`.
    pub nr_zones: usize,
}

/// The configuration C gives `zonealloc_create`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct zonealloc_config {
    /// `nr_nodes` nodes; node `i` has id `i`.
    pub nodes: *const zonealloc_node_config,
    /// Entries of `nodes`.
    pub nr_nodes: usize,
    /// CPUs with per-CPU lists; 0 takes the machine's.
    pub nr_cpus: u32,
    /// `MAX_PAGE_ORDER`, inclusive (values above 255 read as 255).
    pub max_order: u32,
    /// `pageblock_order` (values above 255 read as 255).
    pub pageblock_order: u32,
    /// Non-zero: per-CPU lists on.
    pub pcp_enabled: u32,
    /// `min_free_kbytes`; negative: computed from the zone sizes as Linux does.
    pub min_free_kbytes: i64,
    /// `enum zonealloc_backing`.
    pub backing: u32,
}

impl Default for zonealloc_config {
    /// No memory, and every tunable at the core's default.
    fn default() -> zonealloc_config {
        let d = Config::default();
        zonealloc_config {
            nodes: core::ptr::null(),
            nr_nodes: 0,
            nr_cpus: 0,
            max_order: d.max_order.0.into(),
            pageblock_order: d.pageblock_order.0.into(),
            pcp_enabled: PcpConfig::default().enabled.into(),
            min_free_kbytes: d.min_free_kbytes.map_or(-1, |m| m as i64),
            backing: ZONEALLOC_BACKING_FRAMES,
        }
    }
}

/// An order as the core takes it: values above 255 saturate, and the core
/// refuses them as above `max_order`.
pub(crate) fn to_order(v: u32) -> Order {
    Order(u8::try_from(v).unwrap_or(u8::MAX))
}

/// Which backend a configuration asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backing {
    Frames,
    Arena,
}

impl Backing {
    fn from_c(v: u32) -> Result<Backing, Failure> {
        match v {
            ZONEALLOC_BACKING_FRAMES => Ok(Backing::Frames),
            ZONEALLOC_BACKING_ARENA => Ok(Backing::Arena),
            _ => Err(Status::InvalidArgument.into()),
        }
    }
}

/// The core configuration `c` describes.
///
/// # Safety
/// Every array `c` points to (nodes, their zones, the zones' holes) is valid for
/// reads of its stated length and not written during the call.
unsafe fn translate(c: &zonealloc_config) -> Result<(Config, Backing), Failure> {
    let backing = Backing::from_c(c.backing)?;
    let mut nodes = Vec::new();
    // SAFETY: the contract covers `c.nodes`.
    for n in unsafe { slice(c.nodes, c.nr_nodes) }? {
        let mut zones = Vec::new();
        // SAFETY: the contract covers each node's zones.
        for z in unsafe { slice(n.zones, n.nr_zones) }? {
            let t = zone_type(z.zone_type).ok_or(Status::InvalidArgument)?;
            let mut zone = ZoneConfig::new(t, Pfn(z.start_pfn), z.spanned_pages);
            // SAFETY: the contract covers each zone's holes.
            for h in unsafe { slice(z.holes, z.nr_holes) }? {
                zone = zone.with_hole(Pfn(h.start_pfn), h.nr_pages);
            }
            zones.push(zone);
        }
        nodes.push(NodeConfig { zones });
    }
    let defaults = Config::default();
    let config = Config {
        nodes,
        nr_cpus: match c.nr_cpus {
            0 => defaults.nr_cpus,
            n => usize::try_from(n).unwrap_or(usize::MAX),
        },
        max_order: to_order(c.max_order),
        pageblock_order: to_order(c.pageblock_order),
        min_free_kbytes: u64::try_from(c.min_free_kbytes).ok(),
        pcp: PcpConfig {
            enabled: c.pcp_enabled != 0,
            ..defaults.pcp
        },
        ..defaults
    };
    Ok((config, backing))
}

/// Builds the allocator and its handle.
fn build(config: Config, backing: Backing) -> Result<*mut zonealloc, ConfigError> {
    let inner = match backing {
        Backing::Frames => Inner::Frames(ZoneAllocator::new(config)?),
        Backing::Arena => Inner::Arena(ZoneAllocator::with_arena(config, ArenaOptions::default())?),
    };
    Ok(zonealloc::create(inner))
}

/// Fills `*cfg` with the defaults: no nodes, the machine's CPUs, `max_order` 10,
/// `pageblock_order` 9, per-CPU lists on, `min_free_kbytes` computed, abstract
/// frames.
///
/// # Safety
/// `cfg` is NULL or valid for a write of a `zonealloc_config`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_config_init(cfg: *mut zonealloc_config) -> c_int {
    guard(|| {
        let out = Out::required(cfg)?;
        // SAFETY: `cfg` is valid for the write by the contract.
        unsafe { out.write(zonealloc_config::default()) };
        Ok(())
    })
}

/// Builds an allocator from `*cfg` and stores its handle in `*out`.
///
/// # Safety
/// `cfg` is NULL or points to a `zonealloc_config` whose arrays are each valid
/// for reads of their stated lengths; `out` is NULL or valid for a write of a
/// pointer. Nothing writes any of them during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_create(
    cfg: *const zonealloc_config,
    out: *mut *mut zonealloc,
) -> c_int {
    guard(|| {
        let out = Out::required(out)?;
        if cfg.is_null() {
            return Err(Status::NullPointer.into());
        }
        if !cfg.is_aligned() {
            return Err(Status::InvalidArgument.into());
        }
        // SAFETY: non-null and aligned (checked), readable by the contract.
        let c = unsafe { &*cfg };
        // SAFETY: the arrays `c` points to are readable by the contract.
        let (config, backing) = unsafe { translate(c) }?;
        let za = build(config, backing)?;
        // SAFETY: `out` is valid for the write by the contract.
        unsafe { out.write(za) };
        Ok(())
    })
}

/// Builds an allocator over one Normal zone of `bytes` (rounded down to pages)
/// from frame 0, every other setting at its default, over `backing`.
///
/// # Safety
/// `out` is NULL or valid for a write of a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_create_bytes(
    bytes: u64,
    backing: u32,
    out: *mut *mut zonealloc,
) -> c_int {
    guard(|| {
        let out = Out::required(out)?;
        let backing = Backing::from_c(backing)?;
        let za = build(Config::with_bytes(bytes), backing)?;
        // SAFETY: `out` is valid for the write by the contract.
        unsafe { out.write(za) };
        Ok(())
    })
}

/// Destroys the allocator behind `za`. The handle stays refused afterwards.
///
/// # Safety
/// `za` is NULL or a handle `zonealloc_create*` returned, and no other call on
/// it runs or starts while this one runs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zonealloc_destroy(za: *mut zonealloc) -> c_int {
    // SAFETY: passed on from this function's contract.
    guard(|| unsafe { zonealloc::destroy(za) })
}
