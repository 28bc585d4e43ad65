//! A small XDP program verified with every state recorded, run under state embedding: the
//! fixture of the tests that show the embedding catches wrong states.

#![allow(dead_code)]

use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{self, Vm, XdpMd};
use rdx_bpf::isa::Insn;
use rdx_bpf::maps::MapSet;
use rdx_bpf::MapDef;
use rdx_verifier::embed::{run_embedded, EmbeddedRun};
use rdx_verifier::state::State;
use rdx_verifier::{verify_insns, KernelProgType, VerifyOptions};

pub struct EmbeddedXdp {
    maps: MapSet,
    vm: Vm,
    /// What the verifier recorded (liveness off, every state kept).
    pub states: Vec<Vec<State>>,
}

impl EmbeddedXdp {
    /// Verifies `insns` as XDP, recording every state; panics if it is refused.
    pub fn new(insns: &[Insn], maps: &[MapDef]) -> Self {
        let opts = VerifyOptions {
            liveness: false,
            record_states: true,
            ..VerifyOptions::kernel(KernelProgType::Xdp)
        };
        let states = verify_insns(insns, maps, &opts).unwrap().states;
        let maps = MapSet::new(maps).unwrap();
        let vm = Vm::new(
            insns,
            &maps,
            &Helpers::standard(),
            interp::Config::default(),
        )
        .unwrap();
        Self { maps, vm, states }
    }

    /// Runs on a zeroed 16-byte packet against `states`.
    pub fn run(&self, states: &[Vec<State>]) -> EmbeddedRun {
        let mut ctx = XdpMd::new(vec![0; 16]);
        run_embedded(&self.vm, &self.maps, &mut ctx, states)
    }

    /// The divergence of a run against `states` (`None`: they describe it); panics if the run
    /// itself fails.
    pub fn divergence(&self, states: &[Vec<State>]) -> Option<String> {
        match self.run(states) {
            EmbeddedRun::Agreed(out) => {
                out.unwrap();
                None
            }
            EmbeddedRun::Diverged(d) => Some(d),
        }
    }
}
