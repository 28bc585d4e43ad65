//! Stage 1, verify: the class a hook binds, and [`CodeFlow::validate_code`], whose
//! [`Validated`] is the only way to a [`super::Compiled`]. A verdict is bound to its hook,
//! class, program code and the node's EIM spec ([`VerifiedFor`]); using it for anything else
//! is refused here.

use super::{CodeFlow, Extension};
use crate::error::{ControlError, Result, Unverified};
use rdx_verifier::{Verified, VerifyOptions};

/// What a verdict was given for: a hook and class of one node's EIM spec, and a program's
/// code ([`Extension::code_hash`]). A [`Validated`] and every [`Compiled`] built from it
/// carry it, and nothing is compiled or written for anything else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct VerifiedFor {
    pub(super) hook: String,
    pub(super) class: String,
    pub(super) code: [u8; 32],
    /// SHA-256 of the EIM spec text the class was read from.
    pub(super) spec: [u8; 32],
}

/// A program the verifier accepted for one hook and class of a node's EIM spec. Only
/// [`CodeFlow::validate_code`] makes one.
#[derive(Clone, Debug)]
pub struct Validated {
    pub(super) verified: VerifiedFor,
    pub(super) facts: Verified,
}

impl Validated {
    /// The hook it was verified for.
    pub fn hook(&self) -> &str {
        &self.verified.hook
    }

    /// The extension class it was verified against.
    pub fn class(&self) -> &str {
        &self.verified.class
    }

    /// What the verifier proved about the program (budget, stack depth, helpers used).
    pub fn facts(&self) -> &Verified {
        &self.facts
    }
}

fn list_or_none(v: &[&str]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

impl CodeFlow {
    /// The class a hook binds by default: the one named, or the only one the spec declares
    /// for the hook.
    pub fn resolve_class(&self, hook: &str, class: Option<&str>) -> Result<String> {
        let eim = self.eim.as_ref().ok_or(ControlError::NoEimSpec)?;
        let classes: Vec<&str> = eim
            .classes
            .iter()
            .filter(|c| c.hook == hook)
            .map(|c| c.name.as_str())
            .collect();
        match class {
            Some(c) if classes.contains(&c) => Ok(c.into()),
            Some(c) => Err(ControlError::NoClass {
                hook: hook.into(),
                reason: format!(
                    "no class {c:?} (classes for this hook: {})",
                    list_or_none(&classes)
                ),
            }),
            None => match classes.as_slice() {
                [one] => Ok((*one).into()),
                [] => Err(ControlError::NoClass {
                    hook: hook.into(),
                    reason: "the node's EIM spec binds no class to it".into(),
                }),
                _ => Err(ControlError::NoClass {
                    hook: hook.into(),
                    reason: format!(
                        "several classes; choose one with --class ({})",
                        classes.join(", ")
                    ),
                }),
            },
        }
    }

    /// `validate_code`: the verifier, against the hook's context and the class's
    /// capabilities and limits. A program that fails never reaches the node.
    pub fn validate_code(
        &self,
        ext: &Extension,
        hook: &str,
        class: Option<&str>,
    ) -> Result<Validated> {
        self.view.hook(hook)?;
        let class = self.resolve_class(hook, class)?;
        let eim = self.eim.as_ref().ok_or(ControlError::NoEimSpec)?;
        let opts =
            VerifyOptions::eim(eim, hook, &class).map_err(|source| ControlError::ClassOptions {
                hook: hook.into(),
                source,
            })?;
        let facts =
            rdx_verifier::verify_insns(ext.insns(), ext.maps(), &opts).map_err(|source| {
                ControlError::Verify {
                    hook: hook.into(),
                    class: class.clone(),
                    source: Box::new(source),
                }
            })?;
        Ok(Validated {
            verified: VerifiedFor {
                hook: hook.into(),
                class,
                code: *ext.code_hash(),
                spec: self.spec_hash,
            },
            facts,
        })
    }

    /// Refuses to use a verdict given for `verified` on anything else: `ext` must be the
    /// program judged (its [`Extension::code_hash`]), this node's EIM spec the one the
    /// class was read from, and `hook` (when preparing) the hook it was verified for.
    pub(super) fn check_verified_for(
        &self,
        verified: &VerifiedFor,
        ext: &Extension,
        hook: Option<&str>,
    ) -> Result<()> {
        let mismatch = if hook.is_some_and(|h| h != verified.hook) {
            Unverified::Hook(hook.unwrap_or_default().into())
        } else if *ext.code_hash() != verified.code {
            Unverified::Program
        } else if self.spec_hash != verified.spec {
            Unverified::Spec
        } else {
            return Ok(());
        };
        Err(ControlError::NotVerifiedFor {
            hook: verified.hook.clone(),
            class: verified.class.clone(),
            mismatch,
        })
    }
}
