//! State embedding: checks the concrete machine state of a real run against the abstract
//! states the verifier recorded at the same instruction.
//!
//! The verifier claims that at every instruction, every run is described by one of the
//! abstract states it explored there: each register's type, region, offset, id-shared range
//! and scalar bounds, each stack byte's initialisation and each spilled value. Checking that
//! claim on real runs finds a wrong transfer function or refinement at the instruction where
//! it goes wrong, even when no out-of-bounds access follows (the method of "Validating the
//! eBPF Verifier via State Embedding", OSDI 2024). Tests and fuzzing verify a program with
//! [`VerifyOptions::record_states`](crate::VerifyOptions::record_states) and `liveness: false`,
//! and run it with [`run_embedded`], which calls [`check_observation`] before every
//! instruction of a checked interpreter run ([`rdx_bpf::interp::Vm::run_observed`]).
//!
//! What is checked, for the abstract state of the same call depth:
//! - scalars: the value lies in the tnum and in both intervals;
//! - pointers: the value minus the region's base and the fixed offset lies in the variable
//!   offset's scalar; packet pointers with a range satisfy `base + var + range <= data_end`
//!   (`<= data` for metadata pointers); `pkt_end` is the packet end; map-value pointers
//!   point at a whole value of their map (searched over the variable offset's members when
//!   there are at most [`MAX_ENUMERATED`]); nullable pointers are 0 or that;
//! - a register the verifier holds initialised holds a value in the run;
//! - spilled slots of every frame hold a value of the spilled abstract value; bytes known
//!   zero are zero;
//! - values that share a nonzero id (scalar copies, packet pointers with one variable part)
//!   hold the same number (the same variable offset): a comparison refines them all;
//! - no number (a scalar register or spilled scalar) is an address of the run's stack, packet,
//!   context or a map value, give or take [`ADDRESS_SLACK`] bytes: the verifier claims no
//!   pointer ever becomes a number. This catches a leaked address even when its bounds are
//!   unknown (an unknown scalar contains every value); a leak of only some of its bits (a
//!   shifted or truncated address) is not caught.
//!
//! Map handles, ring-buffer records and host variables are not checked (their addresses are
//! the runtime's, not a region the interpreter models).

use crate::state::{ByteState, PtrKind, Slot, State, Value};
use rdx_bpf::interp::{ContextModel, Input, Observation, RunError, Vm};
use rdx_bpf::maps::MapSet;

/// How an embedded run ended.
#[derive(Debug)]
pub enum EmbeddedRun {
    /// Every instruction's machine state was described by a recorded state; the run ended
    /// with this result (an error here is a run-time fault of an accepted program).
    Agreed(Result<u64, RunError>),
    /// The first instruction whose machine state no recorded state describes.
    Diverged(String),
}

/// Runs `vm` (the verified program, over `maps`) on `ctx` in the checked interpreter,
/// checking every instruction's machine state against `states` (`Verified::states`).
///
/// This is the one place the verifier crate runs anything: the reference interpreter, to check
/// the verifier's own claims in tests and fuzzing.
pub fn run_embedded(
    vm: &Vm,
    maps: &MapSet,
    ctx: &mut dyn ContextModel,
    states: &[Vec<State>],
) -> EmbeddedRun {
    let world_ctx = ctx.anchor() as u64;
    let packet = ctx.packet().map(|p| PacketAddrs {
        data: p.addr,
        data_end: p.addr + p.len,
        data_meta: p.addr,
    });
    let map_address = |addr: u64| maps.iter().any(|m| m.value_slot(addr, 1));
    // A value slot, live or not: an entry deleted during the run leaves the pointers to its
    // slot valid memory (as in the kernel), which is what the verifier claims.
    let map_value = |m: u32, addr: u64| {
        maps.get(m as usize)
            .is_some_and(|map| map.value_slot(addr, map.def().value_size as u64))
    };
    let world = World {
        ctx: world_ctx,
        packet,
        map_value: &map_value,
        map_address: &map_address,
    };
    let mut divergence = None;
    let out = vm.run_observed(Input::Context(ctx), &mut |obs| {
        if divergence.is_some() {
            return;
        }
        let at = states.get(obs.pc).map(Vec::as_slice).unwrap_or(&[]);
        if let Err(e) = check_observation(at, obs, &world) {
            divergence = Some(e);
        }
    });
    match divergence {
        Some(d) => EmbeddedRun::Diverged(d),
        None => EmbeddedRun::Agreed(out),
    }
}

/// Largest number of variable-offset members tried when looking for a map value's start.
pub const MAX_ENUMERATED: u64 = 4096;

/// The addresses of the regions a run's pointers point into.
pub struct World<'a> {
    /// The context structure (`r1` at entry).
    pub ctx: u64,
    /// Packet start, end and metadata start, for hooks with a packet.
    pub packet: Option<PacketAddrs>,
    /// Whether `[addr, addr + size)` is exactly one value of map `map` (size is the map's
    /// value size); `None` when the map index is unknown.
    pub map_value: &'a dyn Fn(u32, u64) -> bool,
    /// Whether `addr` is a byte of some map value.
    pub map_address: &'a dyn Fn(u64) -> bool,
}

/// How far from a region a number still counts as its address (a leaked pointer with a
/// small offset, or with its low byte overwritten).
pub const ADDRESS_SLACK: u64 = 4096;

/// Numbers below this are not taken for addresses.
pub const MIN_ADDRESS: u64 = 1 << 20;

impl World<'_> {
    /// The region `x` is an address of (within [`ADDRESS_SLACK`]), if any.
    fn address_of(&self, x: u64, obs: &Observation<'_>) -> Option<&'static str> {
        // Small numbers are never addresses (an empty packet's "address" is a dangling 1).
        if x < MIN_ADDRESS {
            return None;
        }
        let near = |lo: u64, hi: u64| {
            x >= lo.saturating_sub(ADDRESS_SLACK) && x <= hi.saturating_add(ADDRESS_SLACK)
        };
        let stack_lo = obs.stack_top - obs.stack.len() as u64;
        if near(stack_lo, obs.stack_top) {
            return Some("the stack");
        }
        if near(self.ctx, self.ctx) {
            return Some("the context");
        }
        if let Some(p) = self.packet {
            if near(p.data_meta.min(p.data), p.data_end) {
                return Some("the packet");
            }
        }
        if (self.map_address)(x) {
            return Some("a map value");
        }
        None
    }
}

/// Packet addresses of one run.
#[derive(Clone, Copy, Debug)]
pub struct PacketAddrs {
    /// Address of the first packet byte (`data`).
    pub data: u64,
    /// Address one past the last packet byte (`data_end`).
    pub data_end: u64,
    /// Address of the first metadata byte (`data_meta`; equals `data` without metadata).
    pub data_meta: u64,
}

/// Checks `obs` against the states recorded at its instruction: `Ok` when one of them
/// describes it, else a description of how each candidate fails.
pub fn check_observation(
    states: &[State],
    obs: &Observation<'_>,
    world: &World<'_>,
) -> Result<(), String> {
    if states.is_empty() {
        return Err(format!(
            "instruction {} ran, but the verifier recorded no state there",
            obs.pc
        ));
    }
    let mut why = Vec::new();
    for (i, st) in states.iter().enumerate() {
        match check_state(st, obs, world) {
            Ok(()) => return Ok(()),
            Err(e) => why.push(format!("  state {i}: {e}\n    {st}")),
        }
    }
    Err(format!(
        "at instruction {} no recorded state describes the run (depth {}, r0..r10 = {:#x?}):\n{}",
        obs.pc,
        obs.depth,
        obs.regs,
        why.join("\n")
    ))
}

/// Checks `obs` against one abstract state.
pub fn check_state(st: &State, obs: &Observation<'_>, world: &World<'_>) -> Result<(), String> {
    if st.frames.len() != obs.depth + 1 {
        return Err(format!(
            "{} frames, the run is {} calls deep",
            st.frames.len(),
            obs.depth
        ));
    }
    let cur = st.frames.last().expect("at least one frame");
    // Values sharing an id: (kind, id) -> the number (scalars) or variable offset (packet
    // pointers) every one of them must hold, and where it was first seen.
    let mut shared: Vec<((u8, u32), u64, String)> = Vec::new();
    let mut same = |v: &Value, x: u64, at: &dyn Fn() -> String| -> Result<(), String> {
        let key = match v {
            Value::Scalar { id, .. } if *id != 0 => ((0u8, *id), x),
            Value::Ptr(p)
                if p.id != 0 && matches!(p.kind, PtrKind::Packet | PtrKind::PacketMeta) =>
            {
                let Some(pk) = world.packet else {
                    return Ok(());
                };
                let base = if p.kind == PtrKind::Packet {
                    pk.data
                } else {
                    pk.data_meta
                };
                let tag = if p.kind == PtrKind::Packet { 1 } else { 2 };
                ((tag, p.id), x.wrapping_sub(base).wrapping_sub(p.off as u64))
            }
            _ => return Ok(()),
        };
        match shared.iter().find(|(k, _, _)| *k == key.0) {
            Some((_, y, first)) if *y != key.1 => Err(format!(
                "{} = {v} shares id {} with {first}, but holds {:#x} where it holds {y:#x}",
                at(),
                key.0 .1,
                key.1
            )),
            Some(_) => Ok(()),
            None => {
                shared.push((key.0, key.1, at()));
                Ok(())
            }
        }
    };
    for (r, v) in cur.regs.iter().enumerate() {
        if matches!(v, Value::Uninit) {
            continue;
        }
        if obs.init & (1 << r) == 0 {
            return Err(format!("r{r} = {v} but the run has no value in r{r}"));
        }
        value_contains(v, obs.regs[r], obs, world).map_err(|e| format!("r{r} = {v}: {e}"))?;
        same(v, obs.regs[r], &|| format!("r{r}"))?;
    }
    for (k, fr) in st.frames.iter().enumerate() {
        let fp = obs.frame_pointer(k);
        for (j, slot) in fr.stack.iter().enumerate() {
            let lo = fp - 8 * (j as u64 + 1);
            match slot {
                Slot::Spill(v) => {
                    if matches!(v, Value::Uninit) {
                        continue;
                    }
                    let x = obs
                        .stack_u64(lo)
                        .ok_or_else(|| format!("frame {k} slot fp-{}: not stack", 8 * (j + 1)))?;
                    value_contains(v, x, obs, world)
                        .map_err(|e| format!("frame {k} spill at fp-{} = {v}: {e}", 8 * (j + 1)))?;
                    same(v, x, &|| format!("frame {k} fp-{}", 8 * (j + 1)))?;
                }
                Slot::Bytes(bytes) => {
                    for (i, b) in bytes.iter().enumerate() {
                        if *b == ByteState::Zero {
                            let x = obs.stack_u8(lo + i as u64).unwrap_or(0xff);
                            if x != 0 {
                                return Err(format!(
                                    "frame {k} byte fp-{} is known zero but holds {x:#x}",
                                    8 * (j + 1) - i
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// Whether concrete `x` is a member of abstract value `v`.
fn value_contains(
    v: &Value,
    x: u64,
    obs: &Observation<'_>,
    world: &World<'_>,
) -> Result<(), String> {
    let p = match v {
        Value::Uninit => return Ok(()),
        Value::Scalar { val, .. } => {
            if !val.contains_value(x) {
                return Err(format!("{x:#x} is not a member"));
            }
            return match world.address_of(x, obs) {
                Some(r) => Err(format!(
                    "{x:#x} is an address of {r}: a pointer became a number"
                )),
                None => Ok(()),
            };
        }
        Value::Ptr(p) => p,
    };
    let packet = || {
        world
            .packet
            .ok_or_else(|| "a packet pointer, but the run has no packet".to_string())
    };
    let base = match p.kind {
        PtrKind::Ctx => world.ctx,
        PtrKind::Stack { frame } => {
            if frame as usize > obs.depth {
                return Err(format!(
                    "stack of frame {frame}, the run is {} deep",
                    obs.depth
                ));
            }
            obs.frame_pointer(frame as usize)
        }
        PtrKind::Packet => packet()?.data,
        PtrKind::PacketMeta => packet()?.data_meta,
        PtrKind::PacketEnd => {
            let end = packet()?.data_end;
            return if x == end {
                Ok(())
            } else {
                Err(format!("{x:#x} is not the packet end {end:#x}"))
            };
        }
        PtrKind::MapValueOrNull { map } if x == 0 => {
            let _ = map;
            return Ok(());
        }
        PtrKind::MapValue { map } | PtrKind::MapValueOrNull { map } => {
            return map_value_contains(p, map, x, world);
        }
        PtrKind::RecordOrNull { .. } if x == 0 => return Ok(()),
        PtrKind::MapObj { .. }
        | PtrKind::Record { .. }
        | PtrKind::RecordOrNull { .. }
        | PtrKind::HostVar { .. } => return Ok(()),
    };
    // The variable part: what is left after the base and the fixed offset.
    let var = x.wrapping_sub(base).wrapping_sub(p.off as u64);
    if !p.var.contains_value(var) {
        return Err(format!(
            "{x:#x} is base {base:#x} + off {} + {var:#x}, outside the variable offset",
            p.off
        ));
    }
    if p.range > 0 {
        let pk = packet()?;
        let limit = match p.kind {
            PtrKind::Packet => pk.data_end,
            _ => pk.data,
        };
        // `base + var + range <= limit`, in wide arithmetic.
        let reach = base as u128 + var as u128 + p.range as u128;
        if reach > limit as u128 {
            return Err(format!(
                "range {} from {:#x} reaches {reach:#x}, past {limit:#x}",
                p.range,
                base.wrapping_add(var)
            ));
        }
    }
    Ok(())
}

fn map_value_contains(
    p: &crate::state::Ptr,
    map: u32,
    x: u64,
    world: &World<'_>,
) -> Result<(), String> {
    let at = x.wrapping_sub(p.off as u64);
    if let Some(c) = p.var.const_value() {
        return if (world.map_value)(map, at.wrapping_sub(c)) {
            Ok(())
        } else {
            Err(format!(
                "{x:#x} - off {} - {c:#x} is not the start of a value of map {map}",
                p.off
            ))
        };
    }
    if p.var.umax - p.var.umin >= MAX_ENUMERATED {
        return Ok(());
    }
    let found = (p.var.umin..=p.var.umax)
        .filter(|d| p.var.contains_value(*d))
        .any(|d| (world.map_value)(map, at.wrapping_sub(d)));
    if found {
        Ok(())
    } else {
        Err(format!(
            "{x:#x} - off {} is no value of map {map} plus a member of the variable offset",
            p.off
        ))
    }
}
