//! Status codes: what every call returns, one code per error variant of the core.
//!
//! The lowest layer of the interface. A call returns `ZONEALLOC_OK` (0) or a
//! negative code, as a kernel function returns `-errno`. The codes come in groups:
//!
//! ```text
//!    0        ZONEALLOC_OK
//!   -1 ..  -7 the interface itself: handle, pointers, arguments, panics
//! -101 ..     AllocError     (one code per variant)
//! -201 ..     FreeError      (one code per variant)
//! -301 ..     ContigError    (one code per variant)
//! -401 ..     ConfigError    (one code per variant)
//! ```
//!
//! A code names the variant; the variant's payload (the frame, the order, the
//! node, the rejected value) is kept for the calling thread as its *last error*,
//! with the core's message, until its next failing call: `zonealloc_last_error`
//! and `zonealloc_last_error_message` read it. Nothing here takes a lock; the last
//! error is a thread-local, written only on the error path.

use core::cell::Cell;
use core::ffi::{c_char, c_int, CStr};
use core::fmt;

use zonealloc_core::{AllocError, ConfigError, ContigError, FreeError, InvariantViolation};

use crate::consts::{ZONEALLOC_NONE, ZONEALLOC_PFN_NONE, ZONEALLOC_VALUE_NONE};

/// Declares `Status` from one table: the variant, its value, its C name and its
/// `zonealloc_strerror` text, so the three can never disagree.
macro_rules! status_codes {
    ($( $(#[doc = $doc:literal])* $variant:ident = $value:literal, $cname:literal, $msg:literal; )*) => {
        /// A status code of the C interface (`enum zonealloc_error` in the header).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum Status {
            $( $(#[doc = $doc])* $variant = $value, )*
        }

        impl Status {
            /// Every code, in the header's order.
            pub const ALL: &'static [Status] = &[$(Status::$variant),*];

            /// The code's name in `zonealloc.h`.
            pub const fn c_name(self) -> &'static str {
                match self {
                    $(Status::$variant => $cname,)*
                }
            }

            /// What `zonealloc_strerror` answers for the code.
            pub const fn message(self) -> &'static CStr {
                match self {
                    $(Status::$variant => $msg,)*
                }
            }
        }
    };
}

status_codes! {
    /// Success.
    Ok = 0, "ZONEALLOC_OK", c"success";
    /// The handle is NULL, misaligned, or destroyed.
    BadHandle = -1, "ZONEALLOC_ERR_BAD_HANDLE",
        c"not a live zonealloc handle (NULL, misaligned or destroyed)";
    /// A pointer argument that may not be NULL is.
    NullPointer = -2, "ZONEALLOC_ERR_NULL_POINTER", c"a required pointer argument is NULL";
    /// An argument only the C interface can get wrong: a misaligned pointer, an
    /// unknown zone type or backing, an array longer than the address space.
    InvalidArgument = -3, "ZONEALLOC_ERR_INVALID_ARGUMENT",
        c"invalid argument (misaligned pointer, unknown zone type or backing, array too long)";
    /// The call panicked inside the library; the panic was caught at the boundary.
    Panic = -4, "ZONEALLOC_ERR_PANIC", c"internal panic caught at the interface";
    /// `zonealloc_page_address` on abstract frames.
    NoAddress = -5, "ZONEALLOC_ERR_NO_ADDRESS",
        c"the frames are abstract: no memory stands behind them";
    /// The process heap could not give the call the working memory it needs.
    HostMemory = -6, "ZONEALLOC_ERR_HOST_MEMORY",
        c"the process heap could not provide working memory for the call";
    /// `zonealloc_check_invariants` found a broken invariant.
    Invariant = -7, "ZONEALLOC_ERR_INVARIANT", c"an allocator invariant is broken";

    /// `AllocError::NoMemory`.
    AllocNoMemory = -101, "ZONEALLOC_ERR_ALLOC_NO_MEMORY",
        c"out of memory: no eligible zone had a free block of the order";
    /// `AllocError::InvalidOrder`.
    AllocInvalidOrder = -102, "ZONEALLOC_ERR_ALLOC_INVALID_ORDER",
        c"allocation order above max_order";
    /// `AllocError::InvalidNode`.
    AllocInvalidNode = -103, "ZONEALLOC_ERR_ALLOC_INVALID_NODE", c"no such node";
    /// `AllocError::NoEligibleZone`.
    AllocNoEligibleZone = -104, "ZONEALLOC_ERR_ALLOC_NO_ELIGIBLE_ZONE",
        c"the request's zone selection and node leave no populated zone";

    /// `FreeError::OutOfRange`.
    FreeOutOfRange = -201, "ZONEALLOC_ERR_FREE_OUT_OF_RANGE", c"frame is in no zone";
    /// `FreeError::Hole`.
    FreeHole = -202, "ZONEALLOC_ERR_FREE_HOLE", c"frame is a hole or reserved";
    /// `FreeError::TailPage`.
    FreeTailPage = -203, "ZONEALLOC_ERR_FREE_TAIL_PAGE",
        c"frame is inside an allocated block but not its head";
    /// `FreeError::AlreadyFree`.
    FreeAlreadyFree = -204, "ZONEALLOC_ERR_FREE_ALREADY_FREE", c"block is already free";
    /// `FreeError::WrongOrder`.
    FreeWrongOrder = -205, "ZONEALLOC_ERR_FREE_WRONG_ORDER",
        c"block was allocated with another order";
    /// `FreeError::Misaligned`.
    FreeMisaligned = -206, "ZONEALLOC_ERR_FREE_MISALIGNED",
        c"frame is not aligned to the order given";
    /// `FreeError::InvalidOrder`.
    FreeInvalidOrder = -207, "ZONEALLOC_ERR_FREE_INVALID_ORDER", c"order above max_order";
    /// `FreeError::Busy`.
    FreeBusy = -208, "ZONEALLOC_ERR_FREE_BUSY",
        c"frame is owned by another layer or in a state the call cannot accept";
    /// `FreeError::RefcountOverflow`.
    FreeRefcountOverflow = -209, "ZONEALLOC_ERR_FREE_REFCOUNT_OVERFLOW",
        c"reference count would overflow";
    /// `FreeError::CrossesZone`.
    FreeCrossesZone = -210, "ZONEALLOC_ERR_FREE_CROSSES_ZONE",
        c"range crosses a zone boundary or runs past the zone's end";
    /// `FreeError::BadPage`.
    FreeBadPage = -211, "ZONEALLOC_ERR_FREE_BAD_PAGE",
        c"frame was taken out of circulation after a bad-page report";
    /// `FreeError::ForeignAddress`.
    FreeForeignAddress = -212, "ZONEALLOC_ERR_FREE_FOREIGN_ADDRESS",
        c"address is not in the allocator's memory";
    /// `FreeError::Guarded`.
    FreeGuarded = -213, "ZONEALLOC_ERR_FREE_GUARDED", c"block is owned by a guard";

    /// `ContigError::InvalidRange`.
    ContigInvalidRange = -301, "ZONEALLOC_ERR_CONTIG_INVALID_RANGE",
        c"range is empty, reversed or in no zone (or the node does not exist)";
    /// `ContigError::CrossesZone`.
    ContigCrossesZone = -302, "ZONEALLOC_ERR_CONTIG_CROSSES_ZONE",
        c"range crosses a zone boundary";
    /// `ContigError::Busy`.
    ContigBusy = -303, "ZONEALLOC_ERR_CONTIG_BUSY",
        c"a frame of the range is in use, a hole, bad, or in a CMA area";
    /// `ContigError::Isolated`.
    ContigIsolated = -304, "ZONEALLOC_ERR_CONTIG_ISOLATED",
        c"a pageblock of the range is being isolated by another caller";
    /// `ContigError::NoMemory`.
    ContigNoMemory = -305, "ZONEALLOC_ERR_CONTIG_NO_MEMORY", c"no free contiguous range found";

    /// `ConfigError::PageShift`.
    ConfigPageShift = -401, "ZONEALLOC_ERR_CONFIG_PAGE_SHIFT", c"page shift outside 10..=30";
    /// `ConfigError::MaxOrder`.
    ConfigMaxOrder = -402, "ZONEALLOC_ERR_CONFIG_MAX_ORDER", c"max_order above the limit";
    /// `ConfigError::PageblockOrder`.
    ConfigPageblockOrder = -403, "ZONEALLOC_ERR_CONFIG_PAGEBLOCK_ORDER",
        c"pageblock_order above max_order";
    /// `ConfigError::NoMemory`.
    ConfigNoMemory = -404, "ZONEALLOC_ERR_CONFIG_NO_MEMORY",
        c"no node, or no frame in any zone";
    /// `ConfigError::ZoneOrder`.
    ConfigZoneOrder = -405, "ZONEALLOC_ERR_CONFIG_ZONE_ORDER",
        c"a node's zones are not in ascending zone type order";
    /// `ConfigError::ZoneTooLarge`.
    ConfigZoneTooLarge = -406, "ZONEALLOC_ERR_CONFIG_ZONE_TOO_LARGE",
        c"a zone spans 2^32 - 1 frames or more";
    /// `ConfigError::PfnTooLarge`.
    ConfigPfnTooLarge = -407, "ZONEALLOC_ERR_CONFIG_PFN_TOO_LARGE",
        c"a zone reaches past the 64-bit byte address space";
    /// `ConfigError::HoleOutsideZone`.
    ConfigHoleOutsideZone = -408, "ZONEALLOC_ERR_CONFIG_HOLE_OUTSIDE_ZONE",
        c"a hole reaches outside its zone";
    /// `ConfigError::Overlap`.
    ConfigOverlap = -409, "ZONEALLOC_ERR_CONFIG_OVERLAP", c"two zones share frames";
    /// `ConfigError::Backend`.
    ConfigBackend = -410, "ZONEALLOC_ERR_CONFIG_BACKEND",
        c"the memory backend could not provide memory for the frames";
    /// `ConfigError::NrCpus`.
    ConfigNrCpus = -411, "ZONEALLOC_ERR_CONFIG_NR_CPUS", c"nr_cpus outside 1..=4096";
    /// `ConfigError::MinFreeKbytes`.
    ConfigMinFreeKbytes = -412, "ZONEALLOC_ERR_CONFIG_MIN_FREE_KBYTES",
        c"min_free_kbytes above its maximum";
    /// `ConfigError::WatermarkScaleFactor`.
    ConfigWatermarkScaleFactor = -413, "ZONEALLOC_ERR_CONFIG_WATERMARK_SCALE_FACTOR",
        c"watermark_scale_factor out of range";
    /// `ConfigError::WatermarkBoostFactor`.
    ConfigWatermarkBoostFactor = -414, "ZONEALLOC_ERR_CONFIG_WATERMARK_BOOST_FACTOR",
        c"watermark_boost_factor out of range";
    /// `ConfigError::Pcp`.
    ConfigPcp = -415, "ZONEALLOC_ERR_CONFIG_PCP", c"a per-CPU list tunable out of range";
    /// `ConfigError::Cma`.
    ConfigCma = -416, "ZONEALLOC_ERR_CONFIG_CMA",
        c"a CMA area is not whole pageblocks of one zone clear of holes and other areas";
    /// `ConfigError::Metadata`.
    ConfigMetadata = -417, "ZONEALLOC_ERR_CONFIG_METADATA",
        c"the per-frame metadata could not be allocated";
    /// `ConfigError::Numa`.
    ConfigNuma = -418, "ZONEALLOC_ERR_CONFIG_NUMA",
        c"the NUMA topology (CPU-to-node map or node distances) is inconsistent";
    /// `ConfigError::Reserved`.
    ConfigReserved = -419, "ZONEALLOC_ERR_CONFIG_RESERVED",
        c"a reserved range is not present memory of one zone";
}

impl Status {
    /// The code as C sees it.
    pub const fn code(self) -> c_int {
        self as c_int
    }

    /// The status whose code is `code`, if there is one.
    pub fn from_code(code: c_int) -> Option<Status> {
        Status::ALL.iter().copied().find(|s| s.code() == code)
    }
}

impl From<AllocError> for Status {
    fn from(e: AllocError) -> Status {
        match e {
            AllocError::NoMemory { .. } => Status::AllocNoMemory,
            AllocError::InvalidOrder(_) => Status::AllocInvalidOrder,
            AllocError::InvalidNode(_) => Status::AllocInvalidNode,
            AllocError::NoEligibleZone => Status::AllocNoEligibleZone,
        }
    }
}

impl From<FreeError> for Status {
    fn from(e: FreeError) -> Status {
        match e {
            FreeError::OutOfRange(_) => Status::FreeOutOfRange,
            FreeError::Hole(_) => Status::FreeHole,
            FreeError::TailPage(_) => Status::FreeTailPage,
            FreeError::AlreadyFree(_) => Status::FreeAlreadyFree,
            FreeError::WrongOrder { .. } => Status::FreeWrongOrder,
            FreeError::Misaligned { .. } => Status::FreeMisaligned,
            FreeError::InvalidOrder(_) => Status::FreeInvalidOrder,
            FreeError::Busy(_) => Status::FreeBusy,
            FreeError::RefcountOverflow(_) => Status::FreeRefcountOverflow,
            FreeError::CrossesZone(_) => Status::FreeCrossesZone,
            FreeError::BadPage(_) => Status::FreeBadPage,
            FreeError::ForeignAddress(_) => Status::FreeForeignAddress,
            FreeError::Guarded(_) => Status::FreeGuarded,
        }
    }
}

impl From<ContigError> for Status {
    fn from(e: ContigError) -> Status {
        match e {
            ContigError::InvalidRange => Status::ContigInvalidRange,
            ContigError::CrossesZone(_) => Status::ContigCrossesZone,
            ContigError::Busy(_) => Status::ContigBusy,
            ContigError::Isolated(_) => Status::ContigIsolated,
            ContigError::NoMemory => Status::ContigNoMemory,
        }
    }
}

impl From<ConfigError> for Status {
    fn from(e: ConfigError) -> Status {
        match e {
            ConfigError::PageShift(_) => Status::ConfigPageShift,
            ConfigError::MaxOrder(_) => Status::ConfigMaxOrder,
            ConfigError::PageblockOrder(_) => Status::ConfigPageblockOrder,
            ConfigError::NoMemory => Status::ConfigNoMemory,
            ConfigError::ZoneOrder { .. } => Status::ConfigZoneOrder,
            ConfigError::ZoneTooLarge { .. } => Status::ConfigZoneTooLarge,
            ConfigError::PfnTooLarge { .. } => Status::ConfigPfnTooLarge,
            ConfigError::HoleOutsideZone { .. } => Status::ConfigHoleOutsideZone,
            ConfigError::Overlap => Status::ConfigOverlap,
            ConfigError::Backend => Status::ConfigBackend,
            ConfigError::NrCpus(_) => Status::ConfigNrCpus,
            ConfigError::MinFreeKbytes(_) => Status::ConfigMinFreeKbytes,
            ConfigError::WatermarkScaleFactor(_) => Status::ConfigWatermarkScaleFactor,
            ConfigError::WatermarkBoostFactor(_) => Status::ConfigWatermarkBoostFactor,
            ConfigError::Pcp(..) => Status::ConfigPcp,
            ConfigError::Cma { .. } => Status::ConfigCma,
            ConfigError::Metadata { .. } => Status::ConfigMetadata,
            ConfigError::Numa(_) => Status::ConfigNuma,
            ConfigError::Reserved(_) => Status::ConfigReserved,
        }
    }
}

// -----------------------------------------------------------------------------
// Failures and the thread's last error
// -----------------------------------------------------------------------------

/// Why a call failed: a core error with its payload, or an interface status.
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    /// The interface refused the call before the core saw it.
    Status(Status),
    Alloc(AllocError),
    Free(FreeError),
    Contig(ContigError),
    Config(ConfigError),
    Invariant(InvariantViolation),
    /// A panic's message.
    Panic(String),
}

impl Failure {
    /// The code C gets.
    pub(crate) fn status(&self) -> Status {
        match self {
            Failure::Status(s) => *s,
            Failure::Alloc(e) => Status::from(*e),
            Failure::Free(e) => Status::from(*e),
            Failure::Contig(e) => Status::from(*e),
            Failure::Config(e) => Status::from(*e),
            Failure::Invariant(_) => Status::Invariant,
            Failure::Panic(_) => Status::Panic,
        }
    }

    /// The payload as `struct zonealloc_error_info` carries it.
    pub(crate) fn info(&self) -> zonealloc_error_info {
        let mut i = zonealloc_error_info::none(self.status());
        match *self {
            Failure::Status(_) | Failure::Panic(_) => {}
            Failure::Alloc(e) => match e {
                AllocError::NoMemory { order } | AllocError::InvalidOrder(order) => {
                    i.order = order.0.into();
                }
                AllocError::InvalidNode(n) => i.node = n.into(),
                AllocError::NoEligibleZone => {}
            },
            Failure::Free(e) => {
                match e {
                    FreeError::WrongOrder { given, actual, .. } => {
                        i.order = given.0.into();
                        i.actual_order = actual.0.into();
                    }
                    FreeError::Misaligned { order, .. } | FreeError::InvalidOrder(order) => {
                        i.order = order.0.into();
                    }
                    FreeError::ForeignAddress(a) => i.value = a as u64,
                    _ => {}
                }
                if !matches!(e, FreeError::InvalidOrder(_) | FreeError::ForeignAddress(_)) {
                    i.pfn = e.pfn().0;
                }
            }
            Failure::Contig(e) => match e {
                ContigError::CrossesZone(p) | ContigError::Busy(p) | ContigError::Isolated(p) => {
                    i.pfn = p.0;
                }
                ContigError::InvalidRange | ContigError::NoMemory => {}
            },
            Failure::Config(e) => match e {
                ConfigError::PageShift(s) => i.value = s.into(),
                ConfigError::MaxOrder(o) | ConfigError::PageblockOrder(o) => {
                    i.order = o.0.into();
                }
                ConfigError::ZoneOrder { node } => i.node = saturate(node),
                ConfigError::ZoneTooLarge { node, zone_type }
                | ConfigError::PfnTooLarge { node, zone_type }
                | ConfigError::HoleOutsideZone { node, zone_type } => {
                    i.node = saturate(node);
                    i.zone_type = zone_type.idx() as u32;
                }
                ConfigError::NrCpus(n) => i.value = n as u64,
                ConfigError::MinFreeKbytes(v)
                | ConfigError::WatermarkScaleFactor(v)
                | ConfigError::WatermarkBoostFactor(v)
                | ConfigError::Pcp(_, v)
                | ConfigError::Metadata { bytes: v } => i.value = v,
                ConfigError::Cma { area, .. } => i.value = area as u64,
                ConfigError::Reserved(p) => i.pfn = p.0,
                ConfigError::NoMemory
                | ConfigError::Overlap
                | ConfigError::Backend
                | ConfigError::Numa(_) => {}
            },
            Failure::Invariant(ref v) => {
                if let Some(p) = v.pfn {
                    i.pfn = p.0;
                }
            }
        }
        i
    }

    /// Keeps the failure as this thread's last error and returns its code.
    pub(crate) fn record(self) -> c_int {
        let code = self.status().code();
        // A thread that is exiting has lost its thread-locals: the code alone
        // still reaches the caller.
        let _ = LAST.try_with(|last| last.set(Some(self)));
        code
    }
}

fn saturate(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX - 1)
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Status(s) => f.write_str(&s.message().to_string_lossy()),
            Failure::Alloc(e) => write!(f, "{e}"),
            Failure::Free(e) => write!(f, "{e}"),
            Failure::Contig(e) => write!(f, "{e}"),
            Failure::Config(e) => write!(f, "{e}"),
            Failure::Invariant(v) => write!(f, "invariant broken: {v}"),
            Failure::Panic(m) => write!(f, "panic inside zonealloc: {m}"),
        }
    }
}

impl From<Status> for Failure {
    fn from(s: Status) -> Failure {
        Failure::Status(s)
    }
}

impl From<AllocError> for Failure {
    fn from(e: AllocError) -> Failure {
        Failure::Alloc(e)
    }
}

impl From<FreeError> for Failure {
    fn from(e: FreeError) -> Failure {
        Failure::Free(e)
    }
}

impl From<ContigError> for Failure {
    fn from(e: ContigError) -> Failure {
        Failure::Contig(e)
    }
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Failure {
        Failure::Config(e)
    }
}

thread_local! {
    /// The calling thread's last failure; replaced by each failing call, kept by
    /// successful ones (as `errno`).
    static LAST: Cell<Option<Failure>> = const { Cell::new(None) };
}

/// Runs `f` on this thread's last failure (`None` before the first).
pub(crate) fn with_last<R>(f: impl FnOnce(Option<&Failure>) -> R) -> R {
    let last = LAST.try_with(Cell::take).ok().flatten();
    let r = f(last.as_ref());
    let _ = LAST.try_with(|c| c.set(last));
    r
}

/// What `zonealloc_last_error` fills in: the code of the thread's last failing
/// call and the payload of its error. Fields the error does not name hold
/// `ZONEALLOC_PFN_NONE` or `ZONEALLOC_NONE`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct zonealloc_error_info {
    /// The frame the error names (the block, the first bad frame of a range,
    /// the frame an invariant is broken at).
    pub pfn: u64,
    /// A value the error names: a rejected configuration value (`nr_cpus`,
    /// `min_free_kbytes`, a scale factor, a tunable, the metadata bytes, the CMA
    /// area's index, the page shift) or a foreign address.
    pub value: u64,
    /// The status code.
    pub code: c_int,
    /// The order given (or asked for, or configured).
    pub order: u32,
    /// The block's own order, for `ZONEALLOC_ERR_FREE_WRONG_ORDER`.
    pub actual_order: u32,
    /// The node.
    pub node: u32,
    /// The zone type (`enum zonealloc_zone_type`).
    pub zone_type: u32,
}

impl zonealloc_error_info {
    /// `code` with no payload.
    pub(crate) fn none(code: Status) -> zonealloc_error_info {
        zonealloc_error_info {
            pfn: ZONEALLOC_PFN_NONE,
            value: ZONEALLOC_VALUE_NONE,
            code: code.code(),
            order: ZONEALLOC_NONE,
            actual_order: ZONEALLOC_NONE,
            node: ZONEALLOC_NONE,
            zone_type: ZONEALLOC_NONE,
        }
    }
}

/// The text `zonealloc_strerror` gives an unknown code.
pub(crate) const UNKNOWN_CODE: &CStr = c"unknown zonealloc status code";

/// `zonealloc_strerror`'s answer as a C string pointer.
pub(crate) fn strerror(code: c_int) -> *const c_char {
    Status::from_code(code)
        .map_or(UNKNOWN_CODE, Status::message)
        .as_ptr()
}
