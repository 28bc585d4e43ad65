//! Which JIT tier builds the code a [`crate::CodeFlow`] deploys, and how a deployed version
//! remembers it (its allocator record in the node's region, so any control plane reading the
//! node sees which tier each hook runs).

use crate::error::ControlError;

/// The code generator behind a deploy: [`Tier::Optimizing`] (Cranelift, the default, the
/// fastest code) or [`Tier::Baseline`] (one linear pass, compiles an order of magnitude
/// faster, slower code; `docs/jit.md` compares them). The baseline tier builds generic
/// programs only: an elite build on a baseline CodeFlow is refused with
/// [`ControlError::NotInBaseline`].
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Cranelift: the fastest code.
    #[default]
    Optimizing,
    /// One linear pass: much faster to compile, slower code, generic programs only.
    Baseline,
}

impl Tier {
    /// Every tier.
    pub const ALL: [Tier; 2] = [Tier::Optimizing, Tier::Baseline];

    /// The tier's name in flags, listings and the registry (`optimizing`, `baseline`).
    pub fn name(self) -> &'static str {
        match self {
            Tier::Optimizing => "optimizing",
            Tier::Baseline => "baseline",
        }
    }

    /// The JIT pipeline that builds this tier's code.
    pub fn pipeline(self) -> rdx_jit::Pipeline {
        match self {
            Tier::Optimizing => rdx_jit::Pipeline::Optimizing,
            Tier::Baseline => rdx_jit::Pipeline::Baseline,
        }
    }

    /// The value a code record stores (0 for optimizing, so records written before tiers
    /// existed read as what built them).
    pub(crate) fn code(self) -> u32 {
        match self {
            Tier::Optimizing => 0,
            Tier::Baseline => 1,
        }
    }

    pub(crate) fn from_code(code: u32) -> Option<Tier> {
        match code {
            0 => Some(Tier::Optimizing),
            1 => Some(Tier::Baseline),
            _ => None,
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Tier {
    type Err = ControlError;

    fn from_str(s: &str) -> Result<Tier, ControlError> {
        Tier::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| {
                ControlError::Invalid(format!("unknown tier {s:?} (tiers: optimizing, baseline)"))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_codes_and_json_agree() {
        for t in Tier::ALL {
            assert_eq!(t.name().parse::<Tier>().unwrap(), t);
            assert_eq!(Tier::from_code(t.code()), Some(t));
            assert_eq!(serde_json::to_value(t).unwrap(), t.name());
        }
        assert_eq!(Tier::default(), Tier::Optimizing);
        assert_eq!(Tier::from_code(0), Some(Tier::Optimizing));
        assert_eq!(Tier::from_code(2), None);
        assert!("fast".parse::<Tier>().is_err());
    }
}
