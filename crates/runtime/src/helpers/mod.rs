//! The helpers extension code calls (kernel-compatible ids), published in the helper table
//! and the context table at `ctx_init`.
//!
//! Helpers find their runtime through the calling thread's state (set by the hook that is
//! running) and reach maps through the address the linker baked into the code (`map:<i>`,
//! the map object's header). Map operations run the same code a control plane runs
//! remotely ([`rdx_transport::xstate`]), over this process's mapping.

mod maps;
mod misc;
mod trace;

use rdx_region::abi::HelperFn;

/// Helper ids, as the kernel numbers them.
pub mod helper_ids {
    pub const MAP_LOOKUP_ELEM: u32 = 1;
    pub const MAP_UPDATE_ELEM: u32 = 2;
    pub const MAP_DELETE_ELEM: u32 = 3;
    pub const KTIME_GET_NS: u32 = 5;
    pub const TRACE_PRINTK: u32 = 6;
    pub const GET_PRANDOM_U32: u32 = 7;
    pub const GET_SMP_PROCESSOR_ID: u32 = 8;
    pub const TAIL_CALL: u32 = 12;
    pub const RINGBUF_OUTPUT: u32 = 130;
    pub const RINGBUF_RESERVE: u32 = 131;
    pub const RINGBUF_SUBMIT: u32 = 132;
    pub const RINGBUF_DISCARD: u32 = 133;
}

/// One built-in helper.
#[derive(Clone, Copy, Debug)]
pub struct HelperDef {
    pub id: u32,
    pub name: &'static str,
    pub func: HelperFn,
}

/// Every built-in helper.
pub static HELPERS: &[HelperDef] = &[
    HelperDef {
        id: helper_ids::MAP_LOOKUP_ELEM,
        name: "bpf_map_lookup_elem",
        func: maps::map_lookup_elem,
    },
    HelperDef {
        id: helper_ids::MAP_UPDATE_ELEM,
        name: "bpf_map_update_elem",
        func: maps::map_update_elem,
    },
    HelperDef {
        id: helper_ids::MAP_DELETE_ELEM,
        name: "bpf_map_delete_elem",
        func: maps::map_delete_elem,
    },
    HelperDef {
        id: helper_ids::KTIME_GET_NS,
        name: "bpf_ktime_get_ns",
        func: misc::ktime_get_ns,
    },
    HelperDef {
        id: helper_ids::TRACE_PRINTK,
        name: "bpf_trace_printk",
        func: trace::trace_printk,
    },
    HelperDef {
        id: helper_ids::GET_PRANDOM_U32,
        name: "bpf_get_prandom_u32",
        func: misc::get_prandom_u32,
    },
    HelperDef {
        id: helper_ids::GET_SMP_PROCESSOR_ID,
        name: "bpf_get_smp_processor_id",
        func: misc::get_smp_processor_id,
    },
    HelperDef {
        id: helper_ids::TAIL_CALL,
        name: "bpf_tail_call",
        func: maps::tail_call,
    },
    HelperDef {
        id: helper_ids::RINGBUF_OUTPUT,
        name: "bpf_ringbuf_output",
        func: maps::ringbuf_output,
    },
    HelperDef {
        id: helper_ids::RINGBUF_RESERVE,
        name: "bpf_ringbuf_reserve",
        func: maps::ringbuf_reserve,
    },
    HelperDef {
        id: helper_ids::RINGBUF_SUBMIT,
        name: "bpf_ringbuf_submit",
        func: maps::ringbuf_submit,
    },
    HelperDef {
        id: helper_ids::RINGBUF_DISCARD,
        name: "bpf_ringbuf_discard",
        func: maps::ringbuf_discard,
    },
];

/// Token with which host threads take map locks: top bit set, thread slot below. Control
/// planes use tokens with the top bit clear.
#[inline]
pub(crate) fn host_token(slot: u32) -> u64 {
    rdx_transport::xstate::TOKEN_HOST | slot as u64
}

pub(crate) const EINVAL: u64 = (-(libc::EINVAL as i64)) as u64;
