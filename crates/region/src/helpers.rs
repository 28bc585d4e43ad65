//! The helpers extension code may call, declared once.
//!
//! Every helper rdx knows is one entry of [`HELPERS`]: its number, its canonical name, the
//! kinds of its arguments and of its result, whether the verifier accepts calls to it, and
//! which implementations bind it. The verifier derives its prototypes from these entries;
//! the interpreter and native helpers of `rdx-bpf`, the runtime's hook helpers and xcall's
//! callee helpers each bind functions to entries, and each has a test that it binds exactly
//! the entries whose [`Binders`] name it. Adding a helper is one entry here plus its
//! implementations; a binder that misses it fails its test.
//!
//! Numbers and names are the kernel's (`___BPF_FUNC_MAPPER` in `include/uapi/linux/bpf.h`:
//! `FN(map_lookup_elem, 1, ...)`), so objects built for libbpf call rdx's helpers unchanged.
//! The canonical name is the kernel's, without the `bpf_` prefix C code puts before it
//! (`bpf_map_lookup_elem` in C is `map_lookup_elem` here, in EIM specs, in verifier
//! messages and in a region's context table).

/// A helper's number: the immediate of a `call` instruction, and the index of the helper's
/// slot in a region's helper table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HelperId(u32);

impl HelperId {
    /// The helper of number `raw`.
    pub const fn new(raw: u32) -> HelperId {
        HelperId(raw)
    }

    /// The helper a `call` instruction's immediate names (`None` for a negative immediate,
    /// which names no helper).
    pub const fn from_imm(imm: i32) -> Option<HelperId> {
        if imm < 0 {
            None
        } else {
            Some(HelperId(imm as u32))
        }
    }

    /// The number.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The number as a `call` instruction's immediate.
    pub const fn imm(self) -> i32 {
        self.0 as i32
    }
}

impl std::fmt::Display for HelperId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What an argument register holds, as the ABI states it. The verifier turns each kind into
/// its own argument type (with its bounds policy); implementations may rely on what it proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// Any initialised scalar.
    Scalar,
    /// The program's context pointer, unmodified.
    Ctx,
    /// A map holding data the program reads and writes: hash, array, their per-thread forms,
    /// LPM trie. Never a program array (its elements are jump words only control planes
    /// write) nor a ring buffer (its memory is records).
    DataMap,
    /// A program array (tail-call targets).
    ProgArray,
    /// A ring buffer map.
    RingBuf,
    /// Readable, initialised memory of the key size of the map in the first argument.
    MapKey,
    /// Readable, initialised memory of the value size of the map in the first argument.
    MapValue,
    /// Readable, initialised memory whose size is argument `size_arg` (0-based).
    ReadMem {
        /// Index of the argument that holds the size.
        size_arg: u8,
    },
    /// Writable memory whose size is argument `size_arg` (0-based); the call initialises it.
    WriteMem {
        /// Index of the argument that holds the size.
        size_arg: u8,
    },
    /// The size of a memory argument: nonzero and bounded.
    MemSize,
    /// A size known when the program is verified (ring-buffer reservations).
    ConstSize,
    /// A ring-buffer record from `ringbuf_reserve`; the call releases it.
    Record,
}

/// What `r0` holds after the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetKind {
    /// Any scalar (results and negative errnos).
    Scalar,
    /// A scalar in `0..=u32::MAX`.
    U32,
    /// A pointer to a value of the map in the first argument, or null.
    MapValueOrNull,
    /// A new ring-buffer record of the size in the second argument, or null; the program
    /// must submit or discard it.
    RecordOrNull,
    /// A tail call: on success the program ends and the target runs in its place; only a
    /// failure returns (a negative errno) and the program goes on.
    TailCall,
}

/// The implementations that bind a helper: a set of planes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Binders(u8);

impl Binders {
    /// `rdx-bpf`'s reference interpreter (`Helpers::standard`).
    pub const INTERPRETER: Binders = Binders(1);
    /// `rdx-bpf`'s native (C ABI) twins, for JIT-compiled code run outside a region (tests,
    /// benchmarks, reference hosts).
    pub const NATIVE: Binders = Binders(1 << 1);
    /// The runtime's helpers, published in every region's helper table for hook code.
    pub const RUNTIME: Binders = Binders(1 << 2);
    /// xcall's helpers for cross-sandbox callees (the deploy step refuses any other).
    pub const CALLEE: Binders = Binders(1 << 3);
    /// The interpreter's helpers for the bpf_conformance vectors only
    /// (`Helpers::conformance`): test-suite helpers whose numbers may coincide with real ones.
    pub const CONFORMANCE: Binders = Binders(1 << 4);

    /// Both sets.
    pub const fn with(self, other: Binders) -> Binders {
        Binders(self.0 | other.0)
    }

    /// Whether every binder of `other` is in `self`.
    pub const fn contains(self, other: Binders) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::fmt::Debug for Binders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = [
            (Binders::INTERPRETER, "interpreter"),
            (Binders::NATIVE, "native"),
            (Binders::RUNTIME, "runtime"),
            (Binders::CALLEE, "callee"),
            (Binders::CONFORMANCE, "conformance"),
        ];
        f.debug_set()
            .entries(
                names
                    .iter()
                    .filter(|(b, _)| self.contains(*b))
                    .map(|(_, n)| n),
            )
            .finish()
    }
}

/// One helper of the ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Helper {
    /// Its number.
    pub id: HelperId,
    /// Its canonical name (the kernel's, without `bpf_`).
    pub name: &'static str,
    /// Its arguments, `r1` first.
    pub args: &'static [ArgKind],
    /// Its result.
    pub ret: RetKind,
    /// Whether the verifier knows its prototype, so that verified programs may call it
    /// (when their hook's class or program type grants it). Helpers without one exist only
    /// for unverified interpreter runs and test suites.
    pub verified: bool,
    /// The implementations that bind it.
    pub binders: Binders,
}

impl Helper {
    /// Whether `binder` binds this helper.
    pub const fn bound_by(&self, binder: Binders) -> bool {
        self.binders.contains(binder)
    }
}

/// Declares the helper table once: an id constant on [`HelperId`] and an entry of
/// [`HELPERS`] per line, so an id and its entry cannot drift apart.
macro_rules! declare_helpers {
    ($(
        $(#[$doc:meta])*
        $konst:ident = $id:literal, $name:literal, [$($arg:expr),*] -> $ret:ident,
        verified: $verified:literal, binders: $binders:expr;
    )*) => {
        impl HelperId {
            $(
                $(#[$doc])*
                pub const $konst: HelperId = HelperId($id);
            )*
        }

        /// Every helper of the ABI, in id order (conformance-only entries last).
        pub static HELPERS: &[Helper] = &[
            $(
                Helper {
                    id: HelperId::$konst,
                    name: $name,
                    args: &[$($arg),*],
                    ret: RetKind::$ret,
                    verified: $verified,
                    binders: $binders,
                },
            )*
        ];
    };
}

use ArgKind::*;

const I: Binders = Binders::INTERPRETER;
const N: Binders = Binders::NATIVE;
const R: Binders = Binders::RUNTIME;
const C: Binders = Binders::CALLEE;
const EVERY_PLANE: Binders = I.with(N).with(R).with(C);
const IN_PROCESS: Binders = I.with(N).with(R);

declare_helpers! {
    /// `map_lookup_elem(map, key)`: a pointer to the key's value, or null.
    MAP_LOOKUP_ELEM = 1, "map_lookup_elem", [DataMap, MapKey] -> MapValueOrNull,
        verified: true, binders: EVERY_PLANE;
    /// `map_update_elem(map, key, value, flags)`: 0 or a negative errno.
    MAP_UPDATE_ELEM = 2, "map_update_elem", [DataMap, MapKey, MapValue, Scalar] -> Scalar,
        verified: true, binders: EVERY_PLANE;
    /// `map_delete_elem(map, key)`: 0 or a negative errno.
    MAP_DELETE_ELEM = 3, "map_delete_elem", [DataMap, MapKey] -> Scalar,
        verified: true, binders: EVERY_PLANE;
    /// `ktime_get_ns()`: monotonic nanoseconds.
    KTIME_GET_NS = 5, "ktime_get_ns", [] -> Scalar,
        verified: true, binders: EVERY_PLANE;
    /// `trace_printk(fmt, fmt_size, a, b, c)`: formats a line for the trace output.
    TRACE_PRINTK = 6, "trace_printk", [ReadMem { size_arg: 1 }, MemSize] -> Scalar,
        verified: true, binders: IN_PROCESS;
    /// `get_prandom_u32()`: a pseudo-random 32-bit number.
    GET_PRANDOM_U32 = 7, "get_prandom_u32", [] -> U32,
        verified: true, binders: EVERY_PLANE;
    /// `get_smp_processor_id()`: the caller's thread slot (what per-thread maps index by).
    GET_SMP_PROCESSOR_ID = 8, "get_smp_processor_id", [] -> U32,
        verified: true, binders: EVERY_PLANE;
    /// `tail_call(ctx, prog_array, index)`: continues in the program at `index`. Only hooks
    /// have program arrays the control plane publishes into.
    TAIL_CALL = 12, "tail_call", [Ctx, ProgArray, Scalar] -> TailCall,
        verified: true, binders: R;
    /// `skb_load_bytes(skb, offset, to, len)`: copies packet bytes. Only the interpreter's
    /// context model has the socket buffer it reads.
    SKB_LOAD_BYTES = 26, "skb_load_bytes", [Ctx, Scalar, WriteMem { size_arg: 3 }, MemSize] -> Scalar,
        verified: true, binders: I;
    /// `ringbuf_output(ringbuf, data, size, flags)`: copies a record into the ring.
    RINGBUF_OUTPUT = 130, "ringbuf_output", [RingBuf, ReadMem { size_arg: 2 }, MemSize, Scalar] -> Scalar,
        verified: true, binders: IN_PROCESS;
    /// `ringbuf_reserve(ringbuf, size, flags)`: a record to fill, or null.
    RINGBUF_RESERVE = 131, "ringbuf_reserve", [RingBuf, ConstSize, Scalar] -> RecordOrNull,
        verified: true, binders: IN_PROCESS;
    /// `ringbuf_submit(data, flags)`: publishes a reserved record.
    RINGBUF_SUBMIT = 132, "ringbuf_submit", [Record, Scalar] -> Scalar,
        verified: true, binders: IN_PROCESS;
    /// `ringbuf_discard(data, flags)`: drops a reserved record.
    RINGBUF_DISCARD = 133, "ringbuf_discard", [Record, Scalar] -> Scalar,
        verified: true, binders: IN_PROCESS;
    /// `ringbuf_query(ringbuf, flags)`: a position or size of the ring. Not verified (no plane
    /// that runs verified code implements it): for unverified interpreter runs.
    RINGBUF_QUERY = 134, "ringbuf_query", [RingBuf, Scalar] -> Scalar,
        verified: false, binders: I.with(N);
    /// The bpf_conformance suite's `unwind(value)`: returns `value`, and ends the program
    /// when it is zero. It shares its number with `ktime_get_ns`, so only the conformance
    /// helper set binds it.
    CONFORMANCE_UNWIND = 5, "unwind", [Scalar] -> Scalar,
        verified: false, binders: Binders::CONFORMANCE;
}

/// The helper of number `id` that rdx programs call (conformance-only entries, whose numbers
/// coincide with real ones, are not found here).
pub fn by_id(id: HelperId) -> Option<&'static Helper> {
    HELPERS
        .iter()
        .find(|h| h.id == id && !h.bound_by(Binders::CONFORMANCE))
}

/// The helper of canonical name `name` (conformance-only entries excluded).
pub fn by_name(name: &str) -> Option<&'static Helper> {
    HELPERS
        .iter()
        .find(|h| h.name == name && !h.bound_by(Binders::CONFORMANCE))
}

/// The helpers `binder` binds.
pub fn bound_by(binder: Binders) -> impl Iterator<Item = &'static Helper> {
    HELPERS.iter().filter(move |h| h.bound_by(binder))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn numbers_and_names_are_unique_outside_the_conformance_set() {
        let real: Vec<_> = HELPERS
            .iter()
            .filter(|h| !h.bound_by(Binders::CONFORMANCE))
            .collect();
        let ids: HashSet<_> = real.iter().map(|h| h.id).collect();
        let names: HashSet<_> = real.iter().map(|h| h.name).collect();
        assert_eq!(ids.len(), real.len());
        assert_eq!(names.len(), real.len());
        for h in &real {
            assert_eq!(by_id(h.id), Some(*h));
            assert_eq!(by_name(h.name), Some(*h));
            assert!(
                !h.name.starts_with("bpf_"),
                "{}: canonical names drop bpf_",
                h.name
            );
        }
    }

    #[test]
    fn every_entry_is_well_formed() {
        for h in HELPERS {
            assert!(
                h.args.len() <= 5,
                "{}: at most five argument registers",
                h.name
            );
            assert_ne!(h.binders, Binders(0), "{}: bound by nothing", h.name);
            for (i, a) in h.args.iter().enumerate() {
                match *a {
                    ReadMem { size_arg } | WriteMem { size_arg } => {
                        assert_eq!(
                            h.args.get(size_arg as usize),
                            Some(&MemSize),
                            "{} arg {i}",
                            h.name
                        )
                    }
                    MapKey | MapValue => assert_eq!(h.args[0], DataMap, "{} arg {i}", h.name),
                    _ => {}
                }
            }
            if h.ret == RetKind::MapValueOrNull {
                assert_eq!(h.args.first(), Some(&DataMap), "{}", h.name);
            }
        }
    }

    #[test]
    fn call_immediates_round_trip() {
        assert_eq!(HelperId::from_imm(-1), None);
        assert_eq!(HelperId::from_imm(12), Some(HelperId::TAIL_CALL));
        assert_eq!(HelperId::TAIL_CALL.imm(), 12);
    }
}
