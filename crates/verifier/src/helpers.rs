//! Helper prototypes: what each argument register must hold and what `r0` holds afterwards.
//! The standard helpers' prototypes are derived from the ABI's helper table
//! ([`rdx_region::helpers`], which keeps the kernel's ids so that objects written for libbpf
//! call them unchanged); host functions and variables of an EIM spec get the ids and
//! prototypes their spec assigns.

use crate::scalar::Scalar;
use rdx_bpf::ObjectMapType;
use rdx_region::helpers::{by_id, ArgKind, Helper, HelperId, RetKind, HELPERS};
use rdx_region::layout::MapType;

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

/// Whether the data-map helpers (`map_lookup_elem`, `map_update_elem`, `map_delete_elem`)
/// may take a map of this type. Program arrays are excluded because their elements are the
/// jump words `bpf_tail_call` enters (a program writing one would choose native code the
/// host runs); ring buffers because their memory is records, not values; types rdx does
/// not run because no plane implements them.
pub fn is_data_map(ty: ObjectMapType) -> bool {
    use MapType as M;
    matches!(
        ty.supported(),
        Some(M::Hash | M::Array | M::PerThreadHash | M::PerThreadArray | M::LpmTrie)
    )
}

/// Largest size a memory argument may have: larger than any region rdx hands out, small enough
/// that `ptr + size` never overflows in the bounds checks.
pub const MAX_MEM_ARG: u64 = 1 << 29;

/// The prototype of the verified helper `id` of the ABI table ([`rdx_region::helpers`]), if
/// there is one.
pub fn standard(id: i32) -> Option<HelperProto> {
    let helper = rdx_region::helpers::by_id(HelperId::from_imm(id)?)?;
    helper.verified.then(|| proto_of(helper))
}

/// The verified helper of canonical name `name`, for EIM classes that grant helpers by name.
pub fn standard_by_name(name: &str) -> Option<i32> {
    rdx_region::helpers::by_name(name)
        .filter(|h| h.verified)
        .map(|h| h.id.imm())
}

/// The ids of every verified helper of the ABI table.
pub fn standard_ids() -> impl Iterator<Item = i32> {
    HELPERS
        .iter()
        .filter(|h| h.verified && by_id(h.id) == Some(*h))
        .map(|h| h.id.imm())
}

/// The verifier's reading of a table entry: each ABI kind becomes the argument type whose
/// checks prove what the kind promises implementations.
fn proto_of(helper: &Helper) -> HelperProto {
    let mem_size = Arg::Size {
        max: MAX_MEM_ARG,
        declared: false,
    };
    let args = helper
        .args
        .iter()
        .map(|kind| match *kind {
            ArgKind::Scalar => Arg::Scalar,
            ArgKind::Ctx => Arg::Ctx,
            ArgKind::DataMap => Arg::DataMap,
            ArgKind::ProgArray => Arg::Map {
                ty: Some(MapType::ProgArray as u32),
            },
            ArgKind::RingBuf => Arg::Map {
                ty: Some(MapType::RingBuf as u32),
            },
            ArgKind::MapKey => Arg::MapKey,
            ArgKind::MapValue => Arg::MapValue,
            ArgKind::ReadMem { size_arg } => Arg::ReadMem {
                size_arg: size_arg as usize,
            },
            ArgKind::WriteMem { size_arg } => Arg::WriteMem {
                size_arg: size_arg as usize,
            },
            ArgKind::MemSize => mem_size,
            ArgKind::ConstSize => Arg::ConstSize,
            ArgKind::Record => Arg::Record,
        })
        .collect();
    let ret = match helper.ret {
        RetKind::Scalar | RetKind::TailCall => Ret::Scalar(Scalar::UNKNOWN),
        RetKind::U32 => Ret::Scalar(Scalar::urange(0, u32::MAX as u64)),
        RetKind::MapValueOrNull => Ret::MapValueOrNull,
        RetKind::RecordOrNull => Ret::RecordOrNull,
    };
    HelperProto {
        tail_call: helper.ret == RetKind::TailCall,
        ..HelperProto::new(helper.name, args, ret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verified_entry_has_a_prototype_and_no_other() {
        for h in HELPERS.iter().filter(|h| by_id(h.id) == Some(*h)) {
            let proto = standard(h.id.imm());
            assert_eq!(proto.is_some(), h.verified, "{}", h.name);
            if let Some(p) = proto {
                assert_eq!(p.name, h.name);
                assert_eq!(p.args.len(), h.args.len());
                assert_eq!(standard_by_name(h.name), Some(h.id.imm()));
            }
        }
        assert_eq!(standard(-1), None);
        assert_eq!(standard_by_name("bpf_map_lookup_elem"), None);
    }
}
