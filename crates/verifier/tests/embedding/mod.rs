//! Runs a program in the checked interpreter with the verifier's state embedding: every
//! instruction's machine state is checked against the abstract states recorded there.

use rdx_bpf::interp::{self, ContextModel, Input, Vm};
use rdx_bpf::maps::MapSet;
use rdx_verifier::embed;
use rdx_verifier::state::State;
use std::cell::RefCell;

/// Runs `vm` on `ctx`, checking every instruction's machine state against `states` (per
/// instruction, from `Verified::states`); the first divergence goes to `divergence`.
pub fn embedded_run(
    vm: &Vm,
    maps: &MapSet,
    ctx: &mut dyn ContextModel,
    states: &[Vec<State>],
    divergence: &RefCell<Option<String>>,
) -> Result<u64, interp::RunError> {
    let world_ctx = ctx.anchor() as u64;
    let packet = ctx.packet().map(|p| embed::PacketAddrs {
        data: p.addr,
        data_end: p.addr + p.len,
        data_meta: p.addr,
    });
    let map_value = |m: u32, addr: u64| {
        maps.get(m as usize).is_some_and(|map| {
            map.value_access(addr, map.def().value_size as u64)
                .is_some()
        })
    };
    let world = embed::World {
        ctx: world_ctx,
        packet,
        map_value: &map_value,
    };
    vm.run_observed(Input::Context(ctx), &mut |obs| {
        if divergence.borrow().is_some() {
            return;
        }
        let at = states.get(obs.pc).map(Vec::as_slice).unwrap_or(&[]);
        if let Err(e) = embed::check_observation(at, obs, &world) {
            *divergence.borrow_mut() = Some(e);
        }
    })
}
