//! Differential property test: random programs (`support/random_programs.rs`) give the same
//! r0, the same memory and the same stack in the JIT as in the interpreter, in both code
//! generators; the baseline tier also leaves the same budget as the optimizing one.

use proptest::prelude::*;
use rdx_jit::{Compiler, Pipeline};
use rdx_region::layout::Arch;
#[path = "support/random_programs.rs"]
mod random_programs;
use random_programs::{build, interpret, jit, Raw, MEM};

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn jit_matches_interpreter(raw in proptest::collection::vec(any::<Raw>(), 1..48), seed in any::<u64>(), budget in any::<bool>()) {
        let insns = build(&raw);
        let compiler = Compiler::new(Arch::HOST.unwrap()).unwrap();
        let init: Vec<u8> = (0..MEM as u64).map(|i| (seed.rotate_left(i as u32 * 7) ^ i) as u8).collect();
        let mut a = init.clone();
        let mut b = init;
        let want = interpret(&insns, &mut a);
        let (got, _) = jit(&compiler, Pipeline::Optimizing, &insns, &mut b, budget);
        prop_assert_eq!(got, want, "r0 differs for {:?}", insns);
        prop_assert_eq!(b, a, "memory differs for {:?}", insns);
    }

    /// The baseline tier against the interpreter (r0, memory, stack), and against the
    /// optimizing tier for the budget left.
    #[test]
    fn baseline_matches_interpreter(raw in proptest::collection::vec(any::<Raw>(), 1..48), seed in any::<u64>(), budget in any::<bool>()) {
        let insns = build(&raw);
        let compiler = Compiler::new(Arch::HOST.unwrap()).unwrap();
        let init: Vec<u8> = (0..MEM as u64).map(|i| (seed.rotate_left(i as u32 * 7) ^ i) as u8).collect();
        let mut a = init.clone();
        let mut b = init.clone();
        let mut c = init;
        let want = interpret(&insns, &mut a);
        let (got, left) = jit(&compiler, Pipeline::Baseline, &insns, &mut b, budget);
        prop_assert_eq!(got, want, "r0 differs for {:?}", insns);
        prop_assert_eq!(b, a, "memory differs for {:?}", insns);
        let (_, optimizing_left) = jit(&compiler, Pipeline::Optimizing, &insns, &mut c, budget);
        prop_assert_eq!(left, optimizing_left, "budget left differs for {:?}", insns);
    }
}
