//! Branch profiles: how often each conditional jump went each way, and what an elite
//! compilation should assume.

use std::collections::BTreeMap;

use rdx_bpf::isa::Insn;
use rdx_jit::{branch_sites, Expect, Speculation};
use serde::{Deserialize, Serialize};

/// Bytes of the counter area of an instrumented build of `insns` (16 per conditional jump).
pub fn counter_bytes(insns: &[Insn]) -> usize {
    16 * branch_sites(insns).len()
}

/// Runs through one conditional jump.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchCount {
    /// Slot of the jump.
    pub pc: usize,
    /// Runs that fell through (the jump not taken).
    pub fell_through: u64,
    /// Runs that took the jump.
    pub taken: u64,
}

/// What a profile says about one branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Bias {
    /// (Almost) always taken: the fall-through is cold.
    Likely,
    /// (Almost) never taken: the jump target is cold.
    Unlikely,
    /// Both directions are warm, or too few runs to tell.
    Unknown,
}

/// When a direction counts as cold.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// Runs through a branch below which it is [`Bias::Unknown`].
    pub min_runs: u64,
    /// Largest share of runs a direction may have and still be cold (0.0 = never seen).
    pub cold_share: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            min_runs: 64,
            cold_share: 0.0,
        }
    }
}

/// A profile that does not fit the program it is applied to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// The counter area's size does not match the program's conditional jumps.
    #[error("counter area is {got} bytes, the program's {sites} conditional jumps need {need}")]
    CounterSize {
        /// Bytes in the counter area.
        got: usize,
        /// Bytes the program's jumps need (16 each).
        need: usize,
        /// Conditional jumps in the program.
        sites: usize,
    },
    #[error(
        "profile entry {index} names slot {pc}, which is not a conditional jump of the program"
    )]
    /// A profile entry names a slot that is not a conditional jump.
    NotABranch {
        /// The entry's index in the profile.
        index: usize,
        /// The slot it names.
        pc: usize,
    },
}

/// Per-branch counts of one program, in [`branch_sites`] order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchProfile {
    /// One count per conditional jump, in [`branch_sites`] order.
    pub branches: Vec<BranchCount>,
}

impl BranchProfile {
    /// Decodes the counter area of an instrumented build (`[fell through, taken]` little-endian
    /// `u64` pairs, one per conditional jump in slot order).
    pub fn from_counters(insns: &[Insn], bytes: &[u8]) -> Result<BranchProfile, ProfileError> {
        let sites = branch_sites(insns);
        if bytes.len() != 16 * sites.len() {
            return Err(ProfileError::CounterSize {
                got: bytes.len(),
                need: 16 * sites.len(),
                sites: sites.len(),
            });
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        Ok(BranchProfile {
            branches: sites
                .iter()
                .enumerate()
                .map(|(i, &pc)| BranchCount {
                    pc,
                    fell_through: word(16 * i),
                    taken: word(16 * i + 8),
                })
                .collect(),
        })
    }

    /// Checks that every entry names a conditional jump of `insns`.
    pub fn check(&self, insns: &[Insn]) -> Result<(), ProfileError> {
        for (index, b) in self.branches.iter().enumerate() {
            if !matches!(insns.get(b.pc), Some(Insn::Jmp { .. })) {
                return Err(ProfileError::NotABranch { index, pc: b.pc });
            }
        }
        Ok(())
    }

    /// Each branch's bias under `policy`.
    pub fn classify(&self, policy: &Policy) -> Vec<(usize, Bias)> {
        self.branches
            .iter()
            .map(|b| {
                let total = b.taken + b.fell_through;
                let cold = |n: u64| n as f64 <= policy.cold_share * total as f64;
                let bias = if total < policy.min_runs.max(1) {
                    Bias::Unknown
                } else if cold(b.fell_through) {
                    Bias::Likely
                } else if cold(b.taken) {
                    Bias::Unlikely
                } else {
                    Bias::Unknown
                };
                (b.pc, bias)
            })
            .collect()
    }

    /// The guards of an elite compilation: every likely or unlikely branch, expecting its
    /// hot direction.
    pub fn speculation(&self, policy: &Policy) -> Speculation {
        let guards: BTreeMap<usize, Expect> = self
            .classify(policy)
            .into_iter()
            .filter_map(|(pc, bias)| match bias {
                Bias::Likely => Some((pc, Expect::Taken)),
                Bias::Unlikely => Some((pc, Expect::NotTaken)),
                Bias::Unknown => None,
            })
            .collect();
        Speculation { guards }
    }

    /// Adds another profile of the same program (e.g. a fresh scouting window).
    pub fn merge(&mut self, other: &BranchProfile) {
        for (a, b) in self.branches.iter_mut().zip(&other.branches) {
            if a.pc == b.pc {
                a.taken += b.taken;
                a.fell_through += b.fell_through;
            }
        }
    }
}

/// What to do about an elite version after watching it for a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reprofile {
    /// Deoptimisations stay under the threshold: keep the elite version.
    Keep,
    /// Too many runs leave the fast path: profile again and redeploy (or revert).
    Reprofile,
}

/// The re-profiling rule `rdx watch` applies: once at least `min_runs` runs were observed,
/// re-profile when more than `threshold` (a share, 0.0..=1.0) of them deoptimised.
pub fn reprofile_decision(runs: u64, deopts: u64, min_runs: u64, threshold: f64) -> Reprofile {
    if runs >= min_runs.max(1) && deopts as f64 > threshold * runs as f64 {
        Reprofile::Reprofile
    } else {
        Reprofile::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdx_bpf::asm::assemble;

    fn prog() -> Vec<Insn> {
        assemble("mov %r0, 0\njeq %r1, 0, +1\nmov %r0, 1\njgt %r1, 5, +1\nexit\nexit").unwrap()
    }

    #[test]
    fn counters_decode_and_classify() {
        let insns = prog();
        let mut bytes = Vec::new();
        for (f, t) in [(100u64, 0u64), (50, 50)] {
            bytes.extend_from_slice(&f.to_le_bytes());
            bytes.extend_from_slice(&t.to_le_bytes());
        }
        let p = BranchProfile::from_counters(&insns, &bytes).unwrap();
        assert_eq!(p.branches[0].pc, 1);
        assert_eq!(p.branches[1].pc, 3);
        let c = p.classify(&Policy::default());
        assert_eq!(c, vec![(1, Bias::Unlikely), (3, Bias::Unknown)]);
        let s = p.speculation(&Policy::default());
        assert_eq!(
            s.guards.into_iter().collect::<Vec<_>>(),
            vec![(1, Expect::NotTaken)]
        );
        assert!(matches!(
            BranchProfile::from_counters(&insns, &bytes[..16]),
            Err(ProfileError::CounterSize { .. })
        ));
        let bad = BranchProfile {
            branches: vec![BranchCount {
                pc: 0,
                ..Default::default()
            }],
        };
        assert_eq!(
            bad.check(&insns),
            Err(ProfileError::NotABranch { index: 0, pc: 0 })
        );
    }

    #[test]
    fn too_few_runs_are_unknown_and_decisions_follow_the_threshold() {
        let p = BranchProfile {
            branches: vec![BranchCount {
                pc: 1,
                fell_through: 3,
                taken: 0,
            }],
        };
        assert_eq!(p.classify(&Policy::default())[0].1, Bias::Unknown);
        assert_eq!(
            reprofile_decision(1000, 11, 100, 0.01),
            Reprofile::Reprofile
        );
        assert_eq!(reprofile_decision(1000, 10, 100, 0.01), Reprofile::Keep);
        assert_eq!(reprofile_decision(10, 10, 100, 0.01), Reprofile::Keep);
    }
}
