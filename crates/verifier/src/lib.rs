//! `rdx-verifier`: proves an eBPF program safe to run natively inside a host process, and
//! checks it against the host's Extension Interface Model (EIM).
//!
//! It owns the safety analysis (abstract interpretation over typed registers and stack, path
//! exploration with pruning, helper prototypes, reference tracking) and the EIM format. It
//! must not load ELF, compile, or run anything: it takes decoded instructions and map
//! definitions from `rdx-bpf` and returns facts (or the rule broken). The one exception is
//! [`embed`], which runs the reference interpreter to check the verifier's recorded states
//! against real runs (tests and fuzzing).
//!
//! The layers follow PREVAIL's separation:
//! - the instruction model is `rdx_bpf::isa` (decoded, slot-indexed) plus [`cfg`](mod@cfg);
//! - [`assertions`] lists what each instruction requires, independent of any state;
//! - the abstract domains are [`tnum`], [`scalar`] and [`state`];
//! - the explorer (`explore`) drives them over every path and evaluates the assertions.
//!
//! ```
//! use rdx_bpf::isa::{Insn, Operand, Reg, AluOp, Width};
//! use rdx_verifier::{verify_insns, KernelProgType, VerifyOptions};
//!
//! // r0 = 2; exit  (XDP_PASS)
//! let prog = [
//!     Insn::Alu { width: Width::W64, op: AluOp::Mov, dst: Reg(0), src: Operand::Imm(2) },
//!     Insn::Exit,
//! ];
//! let ok = verify_insns(&prog, &[], &VerifyOptions::kernel(KernelProgType::Xdp)).unwrap();
//! assert_eq!(ok.worst_case_insns, Some(2));
//! ```

pub mod assertions;
pub mod cfg;
mod check;
pub mod eim;
pub mod embed;
pub mod env;
pub mod error;
mod explore;
pub mod helpers;
pub mod liveness;
pub mod scalar;
pub mod state;
pub mod tnum;

pub use eim::{EimError, EimSpec};
pub use env::{Env, KernelProgType};
pub use error::{Rule, VerifyError};

use rdx_bpf::isa::Insn;
use rdx_bpf::{MapDef, MapType, Program};
use std::collections::{BTreeMap, BTreeSet};

/// How much the verifier records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogLevel {
    /// Errors only.
    #[default]
    Off,
    /// Every processed instruction with the state before it.
    Verbose,
}

/// Bounds that keep verification finite on hostile input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Instructions processed over all paths (the kernel's 1M).
    pub max_processed: u64,
    /// Branches waiting to be explored.
    pub max_pending: usize,
    /// States kept for pruning.
    pub max_states: usize,
    /// Program size in slots.
    pub max_insns: usize,
    /// Verbose log size.
    pub max_log_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_processed: 1_000_000,
            max_pending: 8192,
            max_states: 64 * 1024,
            max_insns: 1_000_000,
            max_log_bytes: 64 << 20,
        }
    }
}

/// What a program is verified against, and how.
#[derive(Clone, Debug)]
pub struct VerifyOptions {
    /// The context layout, helpers and limits programs are checked against.
    pub env: Env,
    /// How much of the exploration to log.
    pub log: LogLevel,
    /// Bounds on the exploration's work.
    pub limits: Limits,
    /// Compare only live registers and stack slots when pruning (the default). Off, every
    /// value is compared: the same verdicts, more paths; there to cross-check the analysis.
    pub liveness: bool,
    /// Keep every abstract state the exploration reaches, per instruction, in
    /// [`Verified::states`], for the state embedding that checks real runs against them
    /// ([`embed`]). Costs memory proportional to the instructions processed: tests and
    /// fuzzing only. Pair it with `liveness: false`, so that a pruned path's whole state
    /// (dead registers included) is covered by the state that pruned it.
    pub record_states: bool,
}

impl VerifyOptions {
    /// Kernel-compatible mode for a program type (context layout and helpers as the kernel's).
    pub fn kernel(ty: KernelProgType) -> Self {
        VerifyOptions {
            env: Env::kernel(ty),
            log: LogLevel::Off,
            limits: Limits::default(),
            liveness: true,
            record_states: false,
        }
    }

    /// An rdx hook of an EIM spec under one extension class.
    pub fn eim(spec: &EimSpec, hook: &str, class: &str) -> Result<Self, EimError> {
        Ok(VerifyOptions {
            env: spec.env(hook, class)?,
            log: LogLevel::Off,
            limits: Limits::default(),
            liveness: true,
            record_states: false,
        })
    }

    /// The same options, logging at `log`.
    pub fn with_log(mut self, log: LogLevel) -> Self {
        self.log = log;
        self
    }
}

/// Where a load or store goes, for the JIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemFact {
    /// The context field starting at this byte offset.
    Ctx {
        /// Byte offset of the field in the context.
        offset: u32,
    },
    /// The stack of the current frame.
    Stack,
    /// A value of a map.
    MapValue {
        /// Index into the program's map table.
        map: u32,
    },
    /// The packet, between `data` and `data_end` (or its metadata).
    Packet,
    /// A ring-buffer record.
    Record,
    /// A host variable (index into the environment's granted variables).
    HostVar {
        /// Index into the environment's granted variables.
        var: u32,
    },
    /// Different non-context regions on different paths.
    Mixed,
}

/// A verified program's facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// Longest path in executed instructions, when every path was explored to its exit.
    pub worst_case_insns: Option<u64>,
    /// The JIT must meter instructions: a loop could not be bounded, the worst case exceeds
    /// the class's budget, or the program tail-calls (the callee's count adds to this run's).
    pub needs_budget: bool,
    /// The class's instruction budget, if it has one.
    pub budget: Option<u64>,
    /// Largest stack use along any call chain, in bytes.
    pub max_stack_depth: u32,
    /// Stack bytes of each function, by first instruction.
    pub frame_stack: BTreeMap<usize, u32>,
    /// Helper (and host function / variable) ids the program calls.
    pub helpers_used: BTreeSet<i32>,
    /// The program calls `tail_call`.
    pub tail_calls: bool,
    /// Per instruction: where its memory access goes (`None` for other instructions).
    pub mem_facts: Vec<Option<MemFact>>,
    /// Instructions processed over all paths.
    pub processed_insns: u64,
    /// States stored for pruning.
    pub states_stored: usize,
    /// XState bytes the program's maps use.
    pub xstate_bytes: u64,
    /// The verification log, when [`VerifyOptions::log`] asked for one.
    pub log: Option<String>,
    /// With [`VerifyOptions::record_states`]: per instruction, every abstract state a path
    /// reached there before the instruction ran (empty otherwise).
    pub states: Vec<Vec<state::State>>,
}

/// Bytes of XState a map occupies: keys and values of every entry (ring buffers: their data
/// size). Per-thread maps count one copy; the runtime multiplies by its thread slots.
pub fn map_memory(m: &MapDef) -> u64 {
    let (k, v, n) = (m.key_size as u64, m.value_size as u64, m.max_entries as u64);
    match m.map_type {
        MapType::Array | MapType::PerCpuArray => v * n,
        MapType::RingBuf => n,
        MapType::ProgArray => 8 * n,
        _ => (k + v) * n,
    }
}

/// Verifies a loaded program against `opts`.
pub fn verify(
    prog: &Program,
    maps: &[MapDef],
    opts: &VerifyOptions,
) -> Result<Verified, VerifyError> {
    verify_insns(&prog.insns, maps, opts)
}

/// Verifies decoded instructions (slot-indexed, as `rdx_bpf::isa::decode` returns them).
pub fn verify_insns(
    insns: &[Insn],
    maps: &[MapDef],
    opts: &VerifyOptions,
) -> Result<Verified, VerifyError> {
    let env = &opts.env;
    if insns.is_empty() {
        return Err(VerifyError::global(Rule::BadCfg, "the program is empty"));
    }
    if insns.len() > opts.limits.max_insns {
        return Err(VerifyError::global(
            Rule::TooComplex,
            format!(
                "{} instructions exceed the limit of {}",
                insns.len(),
                opts.limits.max_insns
            ),
        ));
    }
    for (i, m) in maps.iter().enumerate() {
        if let MapType::Other(t) = m.map_type {
            return Err(VerifyError::global(
                Rule::Unsupported,
                format!("map {i} `{}` has unsupported type {t}", m.name),
            ));
        }
        if m.map_type != MapType::RingBuf
            && m.map_type != MapType::ProgArray
            && (m.value_size == 0 || m.key_size == 0)
        {
            return Err(VerifyError::global(
                Rule::Unsupported,
                format!("map {i} `{}` has a zero key or value size", m.name),
            ));
        }
    }
    let xstate: u64 = maps.iter().map(map_memory).sum();
    if let Some(limit) = env.memory_limit {
        if xstate > limit {
            return Err(VerifyError::global(
                Rule::EimMemory,
                format!(
                    "the program's maps need {xstate} bytes of XState; the class allows {limit}"
                ),
            ));
        }
    }
    let cfg = cfg::Cfg::build(insns).map_err(|mut e| {
        if let Some(pc) = e.pc {
            e.insn = Some(disasm(insns, pc));
        }
        e
    })?;
    // Explore exactly first, so that bounded loops get an exact worst case. Only when that
    // fails on a loop, and the class meters instructions at run time, explore again with
    // widening at loop heads (which proves safety but not termination).
    let exact_env;
    let first_env = if env.allow_budgeted_loops {
        exact_env = Env {
            allow_budgeted_loops: false,
            ..env.clone()
        };
        &exact_env
    } else {
        env
    };
    let mut ex = explore::Explorer::new(insns, maps, first_env, cfg, opts.limits, opts.log);
    ex.liveness = opts.liveness;
    ex.record_states = opts.record_states;
    if env.allow_budgeted_loops {
        ex.abort_past = env.budget;
    }
    if let Err(mut e) = ex.run() {
        let retry =
            env.allow_budgeted_loops && matches!(e.rule, Rule::TooComplex | Rule::InfiniteLoop);
        if !retry {
            if opts.log == LogLevel::Verbose {
                e.log = Some(std::mem::take(&mut ex.log));
            }
            return Err(e);
        }
        let cfg = cfg::Cfg::build(insns)?;
        ex = explore::Explorer::new(insns, maps, env, cfg, opts.limits, opts.log);
        ex.liveness = opts.liveness;
        ex.record_states = opts.record_states;
        if let Err(mut e) = ex.run() {
            if opts.log == LogLevel::Verbose {
                e.log = Some(std::mem::take(&mut ex.log));
            }
            return Err(e);
        }
    }
    // Stack limit along every call chain (the call graph is acyclic: recursion was refused).
    fn chain(
        f: usize,
        depth: &BTreeMap<usize, usize>,
        edges: &BTreeSet<(usize, usize)>,
        memo: &mut BTreeMap<usize, usize>,
    ) -> usize {
        if let Some(d) = memo.get(&f) {
            return *d;
        }
        let own = depth.get(&f).copied().unwrap_or(0);
        let callee = edges
            .range((f, 0)..(f + 1, 0))
            .map(|&(_, t)| chain(t, depth, edges, memo))
            .max()
            .unwrap_or(0);
        memo.insert(f, own + callee);
        own + callee
    }
    let mut memo = BTreeMap::new();
    let max_stack = chain(0, &ex.frame_depth, &ex.call_edges, &mut memo);
    if max_stack > rdx_bpf::isa::STACK_SIZE {
        return Err(VerifyError::global(
            Rule::StackLimit,
            format!(
                "combined stack of {max_stack} bytes along a call chain exceeds {}",
                rdx_bpf::isa::STACK_SIZE
            ),
        ));
    }
    let worst = if ex.unbounded { None } else { Some(ex.worst) };
    // A tail-called program's instructions add to this run's count, so chains are metered.
    let needs_budget = ex.tail_calls
        || match (worst, env.budget) {
            (None, _) => true,
            (Some(w), Some(b)) => w > b,
            (Some(_), None) => false,
        };
    Ok(Verified {
        worst_case_insns: worst,
        needs_budget,
        budget: env.budget,
        max_stack_depth: max_stack as u32,
        frame_stack: ex
            .frame_depth
            .iter()
            .map(|(k, v)| (*k, *v as u32))
            .collect(),
        helpers_used: std::mem::take(&mut ex.helpers_used),
        tail_calls: ex.tail_calls,
        mem_facts: std::mem::take(&mut ex.facts),
        processed_insns: ex.processed,
        states_stored: ex.states_stored(),
        xstate_bytes: xstate,
        log: (opts.log == LogLevel::Verbose).then(|| std::mem::take(&mut ex.log)),
        states: std::mem::take(&mut ex.recorded),
    })
}

/// Disassembly of the instruction at `pc`, for messages.
pub fn disasm(insns: &[Insn], pc: usize) -> String {
    rdx_bpf::disasm::insn_text(&insns[pc], pc)
}

/// A human-readable report of a verification result: the facts of an accepted program or the
/// error with its state, followed by the log when one was recorded.
pub fn format_report(result: &Result<Verified, VerifyError>) -> String {
    let mut s = String::new();
    match result {
        Ok(v) => {
            s.push_str("accepted\n");
            match v.worst_case_insns {
                Some(w) => s.push_str(&format!("  worst-case instructions: {w}\n")),
                None => {
                    s.push_str("  worst-case instructions: unbounded (loops not fully explored)\n")
                }
            }
            s.push_str(&format!(
                "  needs run-time budget: {}{}\n",
                v.needs_budget,
                v.budget
                    .map(|b| format!(" (class budget {b})"))
                    .unwrap_or_default()
            ));
            s.push_str(&format!("  max stack depth: {} bytes\n", v.max_stack_depth));
            s.push_str(&format!("  helpers used: {:?}\n", v.helpers_used));
            s.push_str(&format!("  xstate bytes: {}\n", v.xstate_bytes));
            s.push_str(&format!(
                "  processed {} instructions, stored {} states\n",
                v.processed_insns, v.states_stored
            ));
            if let Some(l) = &v.log {
                s.push_str("log:\n");
                s.push_str(l);
            }
        }
        Err(e) => {
            s.push_str(&format!("rejected: {e}\n"));
            if let Some(l) = &e.log {
                s.push_str("log:\n");
                s.push_str(l);
            }
        }
    }
    s
}
