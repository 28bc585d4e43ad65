//! Helper prototypes: what each argument register must hold and what `r0` holds afterwards.
//! The standard helpers keep the kernel's ids so that objects written for libbpf call them
//! unchanged; host functions and variables of an EIM spec get the ids their spec assigns.

use crate::scalar::Scalar;

/// What an argument register must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    /// Any initialised scalar.
    Scalar,
    /// A scalar within `[min, max]` (an EIM argument constraint).
    ScalarIn {
        /// Smallest value allowed (inclusive).
        min: i64,
        /// Largest value allowed (inclusive).
        max: i64,
    },
    /// The context pointer, unmodified.
    Ctx,
    /// A map handle; `ty` restricts the map type when set (kernel map type number).
    Map {
        /// Kernel map type number the map must have; `None` accepts any.
        ty: Option<u32>,
    },
    /// A map that holds keys and values the program may read and write: hash, array (and
    /// their per-CPU forms) and LPM trie. Never a program array, whose elements are jump
    /// words only the control plane writes, nor a ring buffer, whose memory is records.
    DataMap,
    /// Readable, initialised memory of the map's key size (map from the first argument).
    MapKey,
    /// Readable, initialised memory of the map's value size.
    MapValue,
    /// Readable, initialised memory whose size is argument `size_arg` (0-based).
    ReadMem {
        /// Index (0-based) of the argument holding the size.
        size_arg: usize,
    },
    /// Writable memory whose size is argument `size_arg`; initialised by the call.
    WriteMem {
        /// Index (0-based) of the argument holding the size.
        size_arg: usize,
    },
    /// Readable memory of a fixed size.
    ReadMemFixed {
        /// Bytes readable at the pointer.
        size: u32,
    },
    /// Size of a memory argument: a scalar with a known upper bound, `1..=max`. `declared`
    /// marks a bound an EIM spec states as a constraint (its violation is `eim-argument`).
    Size {
        /// Largest size allowed.
        max: u64,
        /// Whether the EIM spec states the bound (breaking it is `eim-argument`).
        declared: bool,
    },
    /// A constant size (ring-buffer reservations).
    ConstSize,
    /// A ring-buffer record to submit or discard (releases its reference).
    Record,
}

/// What `r0` holds after the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ret {
    /// A number in the given set.
    Scalar(Scalar),
    /// A value of the map in the first argument, or null.
    MapValueOrNull,
    /// A new ring-buffer record of the size in argument 2, or null; acquires a reference.
    RecordOrNull,
    /// A pointer to host variable `var` (index into the environment's variables).
    HostVar {
        /// Index into the environment's host variables.
        var: u32,
    },
}

/// The prototype of one helper, host function or host variable: what a call requires and
/// what it yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelperProto {
    /// The helper's name, for messages and EIM grants.
    pub name: String,
    /// What `r1`, `r2`, ... must hold, in order; registers past the list are not read.
    pub args: Vec<Arg>,
    /// What `r0` holds after the call.
    pub ret: Ret,
    /// The call ends the program when it succeeds (tail calls).
    pub tail_call: bool,
}

impl HelperProto {
    /// A prototype that does not end the program.
    pub fn new(name: &str, args: Vec<Arg>, ret: Ret) -> Self {
        HelperProto {
            name: name.into(),
            args,
            ret,
            tail_call: false,
        }
    }
}

const RINGBUF: u32 = 27;
const PROG_ARRAY: u32 = 3;

/// Whether the data-map helpers (`map_lookup_elem`, `map_update_elem`, `map_delete_elem`)
/// may take a map of this type. Program arrays are excluded because their elements are the
/// jump words `bpf_tail_call` enters (a program writing one would choose native code the
/// host runs); ring buffers because their memory is records, not values; types rdx does
/// not run because no plane implements them.
pub fn is_data_map(ty: rdx_bpf::MapType) -> bool {
    use rdx_bpf::MapType as M;
    matches!(
        ty,
        M::Hash | M::Array | M::PerCpuHash | M::PerCpuArray | M::LpmTrie
    )
}

/// Largest size a memory argument may have: larger than any region rdx hands out, small enough
/// that `ptr + size` never overflows in the bounds checks.
pub const MAX_MEM_ARG: u64 = 1 << 29;

/// The standard helper of kernel id `id`, if rdx knows it.
pub fn standard(id: i32) -> Option<HelperProto> {
    use Arg::*;
    let any = Ret::Scalar(crate::scalar::Scalar::UNKNOWN);
    let u32r = Ret::Scalar(crate::scalar::Scalar::urange(0, u32::MAX as u64));
    Some(match id {
        1 => HelperProto::new(
            "map_lookup_elem",
            vec![DataMap, MapKey],
            Ret::MapValueOrNull,
        ),
        2 => HelperProto::new(
            "map_update_elem",
            vec![DataMap, MapKey, MapValue, Scalar],
            any,
        ),
        3 => HelperProto::new("map_delete_elem", vec![DataMap, MapKey], any),
        5 => HelperProto::new("ktime_get_ns", vec![], any),
        6 => HelperProto::new(
            "trace_printk",
            vec![
                ReadMem { size_arg: 1 },
                Size {
                    max: MAX_MEM_ARG,
                    declared: false,
                },
            ],
            any,
        ),
        7 => HelperProto::new("get_prandom_u32", vec![], u32r),
        8 => HelperProto::new("get_smp_processor_id", vec![], u32r),
        12 => HelperProto {
            tail_call: true,
            ..HelperProto::new(
                "tail_call",
                vec![
                    Ctx,
                    Map {
                        ty: Some(PROG_ARRAY),
                    },
                    Scalar,
                ],
                any,
            )
        },
        26 => HelperProto::new(
            "skb_load_bytes",
            vec![
                Ctx,
                Scalar,
                WriteMem { size_arg: 3 },
                Size {
                    max: MAX_MEM_ARG,
                    declared: false,
                },
            ],
            any,
        ),
        130 => HelperProto::new(
            "ringbuf_output",
            vec![
                Map { ty: Some(RINGBUF) },
                ReadMem { size_arg: 2 },
                Size {
                    max: MAX_MEM_ARG,
                    declared: false,
                },
                Scalar,
            ],
            any,
        ),
        131 => HelperProto::new(
            "ringbuf_reserve",
            vec![Map { ty: Some(RINGBUF) }, ConstSize, Scalar],
            Ret::RecordOrNull,
        ),
        132 => HelperProto::new("ringbuf_submit", vec![Record, Scalar], any),
        133 => HelperProto::new("ringbuf_discard", vec![Record, Scalar], any),
        _ => return None,
    })
}

/// Names of the standard helpers, for EIM classes that grant them by name.
pub fn standard_by_name(name: &str) -> Option<i32> {
    [1, 2, 3, 5, 6, 7, 8, 12, 26, 130, 131, 132, 133]
        .into_iter()
        .find(|id| standard(*id).is_some_and(|p| p.name == name))
}
