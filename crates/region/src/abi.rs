//! The native calling convention between compiled extensions and the host runtime.
//!
//! A linked extension entry point is an [`EntryFn`]. eBPF `r1` is the context pointer; the
//! second argument carries per-run state that the generated code itself reads and writes (the
//! instruction budget), so that no process-private pointer has to be baked into code that
//! lives in a region. Helpers and host functions use the eBPF helper convention: up to five
//! 64-bit arguments (`r1`..`r5`), one 64-bit result (`r0`), C calling convention.

use std::ffi::c_void;

/// Per-invocation state passed to every native entry point.
#[repr(C)]
#[derive(Debug)]
pub struct RunState {
    /// Instructions the program may still execute. Only metered artifacts read it: they
    /// subtract at back-edges and calls and stop with [`RunStatus::BudgetExhausted`] when it
    /// would go below zero.
    pub budget: u64,
    /// A [`RunStatus`] value, written by generated code only when it stops abnormally.
    pub status: u32,
    pub reserved: u32,
    /// Opaque host pointer, for helpers that need the runtime's per-run environment.
    pub env: *mut c_void,
}

impl RunState {
    pub fn new(budget: u64) -> Self {
        Self {
            budget,
            status: RunStatus::Ok as u32,
            reserved: 0,
            env: std::ptr::null_mut(),
        }
    }
}

/// How a native run ended.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStatus {
    Ok = 0,
    /// The instruction budget ran out; the return value is meaningless.
    BudgetExhausted = 1,
    /// A `callx` named a helper outside the helper table; the return value is meaningless.
    BadHelper = 2,
}

/// A linked extension entry point: `r0 = entry(ctx, run_state)`.
pub type EntryFn = unsafe extern "C" fn(ctx: *mut u8, run: *mut RunState) -> u64;

/// A helper or host function as extension code calls it.
pub type HelperFn = unsafe extern "C" fn(u64, u64, u64, u64, u64) -> u64;

const _: () = assert!(std::mem::size_of::<RunState>() == 24);
const _: () = assert!(std::mem::align_of::<RunState>() == 8);
