//! The state-embedding run shared by the soundness tests, in the shape they report.

use rdx_bpf::interp::{self, ContextModel, Vm};
use rdx_bpf::maps::MapSet;
use rdx_verifier::embed::{run_embedded, EmbeddedRun};
use rdx_verifier::state::State;
use std::cell::RefCell;

/// Runs `vm` on `ctx` under state embedding; the first divergence goes to `divergence`.
pub fn embedded_run(
    vm: &Vm,
    maps: &MapSet,
    ctx: &mut dyn ContextModel,
    states: &[Vec<State>],
    divergence: &RefCell<Option<String>>,
) -> Result<u64, interp::RunError> {
    match run_embedded(vm, maps, ctx, states) {
        EmbeddedRun::Agreed(out) => out,
        EmbeddedRun::Diverged(d) => {
            *divergence.borrow_mut() = Some(d);
            Ok(0)
        }
    }
}
