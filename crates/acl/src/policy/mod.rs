//! The policy language: parsing, normalisation to cubes, and the checker's warnings.
//!
//! ```text
//! policy p1 {
//!     predicate = match(sip = 10.0.1.101) & match(dport = 4791) &
//!                 match(type in {ConnectRequest, ConnectReply}) & match(dQPN in {200, 500})
//!     action = allow
//! }
//! apply(p1)
//! default deny
//! ```
//!
//! The JANUS paper's notation is this language too: `match(f = any)` (a wildcard that holds
//! whether or not the packet carries `f`), open ranges `[lo, inf]`, prefix membership
//! `match(sip in 10.0.4.0/24)` and GIDs as plain integers (`match(dGID = 500)`, the GID's
//! big-endian value). `docs/acl.md` defines each.
//!
//! [`parse`] returns a [`PolicySet`]: the applied policies in evaluation order, each as a union
//! of [`Cube`]s, the default action, and warnings (shadowed, empty or unapplied policies).

mod lexer;
mod parser;
mod suggest;

use std::fmt;

use thiserror::Error;

use crate::field::Field;
use crate::set::{covered_within, Coverage, Cube, ValueSet};
pub use lexer::Pos;
pub use parser::MAX_NESTING;

/// Most cubes one predicate may normalise to; beyond it the policy is rejected, because a
/// rule table that large would not be what the author meant.
pub const MAX_CUBES_PER_POLICY: usize = 4096;

/// Work budget for proving one policy shadowed (pieces explored).
const SHADOW_BUDGET: usize = 50_000;
/// Work budget of the shadowing proofs of a whole file: without it, a file of many
/// overlapping policies spent the per-policy budget on each (16,000 such policies took
/// minutes). Once spent, later policies are not checked, and a warning says so.
const FILE_SHADOW_BUDGET: usize = 1_000_000;

/// What a matching policy does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Action {
    /// Let the packet through.
    Allow = 0,
    /// Drop the packet.
    Deny = 1,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
        })
    }
}

/// A syntax or semantic error, with the 1-based line and column it was found at.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{line}:{col}: {kind}")]
pub struct PolicyError {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub col: u32,
    /// What is wrong.
    pub kind: ErrorKind,
}

/// The kinds of policy errors.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ErrorKind {
    /// A character that starts no token.
    #[error("unexpected character `{0}`")]
    UnexpectedChar(char),
    /// A token where another was required.
    #[error("unexpected {found}, expected {expected}")]
    Unexpected {
        /// What was found.
        found: String,
        /// What the grammar allows here.
        expected: &'static str,
    },
    /// `match(foo = ..)` with an unknown field.
    #[error("unknown field `{name}`; {}fields are sip, dip, sport, dport, sLID, dLID, sGID, dGID, type, lQPN, dQPN, opcode, VA, cmForged", did_you_mean(*suggestion))]
    UnknownField {
        /// The name as written.
        name: String,
        /// The field it is nearest to (same letters in another case, or a close spelling).
        suggestion: Option<&'static str>,
    },
    /// A value that does not fit its field.
    #[error("invalid value `{value}` for {field}: {reason}")]
    BadValue {
        /// The field matched.
        field: Field,
        /// The value as written.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// `[hi, lo]`.
    #[error("empty range for {field}: the lower bound is above the upper bound")]
    EmptyRange {
        /// The field matched.
        field: Field,
    },
    /// A prefix whose address has bits set below the prefix length (`10.0.4.1/24`).
    #[error("`{value}` has host bits set below its /{len} prefix for {field}; did you mean `{suggestion}`?")]
    HostBitsSet {
        /// The field matched.
        field: Field,
        /// The prefix as written.
        value: String,
        /// The prefix length as written.
        len: u32,
        /// The same prefix with the host bits cleared.
        suggestion: String,
    },
    /// `any` inside a value set or range, or after `in`: it is a whole constraint of its own.
    #[error("`any` matches every {field} value and its absence, so it stands alone: write `match({field} = any)`")]
    MisplacedAny {
        /// The field matched.
        field: Field,
    },
    /// `inf` anywhere but as the upper bound of a range.
    #[error("`inf` is only the upper bound of a range: write `match({field} in [lo, inf])`")]
    MisplacedInf {
        /// The field matched.
        field: Field,
    },
    /// `[10.0.0.0/8, ..]`.
    #[error("a range bound for {field} must be a single address, not a prefix")]
    PrefixInRange {
        /// The field matched.
        field: Field,
    },
    /// Two policies with one name.
    #[error("policy `{name}` is already defined on line {first_line}")]
    DuplicatePolicy {
        /// The name.
        name: String,
        /// Where the first definition is.
        first_line: u32,
    },
    /// `predicate` or `action` given twice in a policy.
    #[error("`{0}` given twice in one policy")]
    DuplicateItem(&'static str),
    /// A policy without `predicate` or `action`.
    #[error("policy `{policy}` has no `{item}`")]
    MissingItem {
        /// The policy.
        policy: String,
        /// What is missing.
        item: &'static str,
    },
    /// More than one `apply(...)`.
    #[error("only one `apply(...)` statement is allowed")]
    DuplicateApply,
    /// More than one `default`.
    #[error("only one `default` statement is allowed")]
    DuplicateDefault,
    /// A name listed twice in `apply`.
    #[error("policy `{0}` is listed twice in apply(...)")]
    AppliedTwice(String),
    /// `apply` names a policy that is not defined.
    #[error("apply(...) names `{name}`, which is not defined{}", match suggestion {
        Some(s) => format!("; did you mean `{s}`?"),
        None => String::new(),
    })]
    UnknownPolicy {
        /// The name as written in `apply(...)`.
        name: String,
        /// The defined policy whose name is nearest.
        suggestion: Option<String>,
    },
    /// Parentheses or negations nested too deeply.
    #[error("expression nested deeper than {0} levels")]
    TooDeep(usize),
    /// Normalisation would produce too many cubes.
    #[error("predicate of `{policy}` expands to more than {limit} conjunctions; simplify it (negations of disjunctions multiply out)")]
    TooComplex {
        /// The policy.
        policy: String,
        /// The limit.
        limit: usize,
    },
}

/// "did you mean `x`? " before the list of fields, when there is a nearest one.
fn did_you_mean(suggestion: Option<&str>) -> String {
    match suggestion {
        Some(s) => format!("did you mean `{s}`? "),
        None => String::new(),
    }
}

/// A predicate as parsed (values already resolved to sets).
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// Matches every packet.
    Any,
    /// `match(field ...)`.
    Match {
        /// The field.
        field: Field,
        /// The values that match; absence is in it only for the wildcard `match(f = any)`.
        set: ValueSet,
        /// Where the `match` is.
        pos: Pos,
    },
    /// `!e`.
    Not(Box<Expr>),
    /// `a & b & ...`.
    And(Vec<Expr>),
    /// `a | b | ...`.
    Or(Vec<Expr>),
}

/// A policy block as written.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyDef {
    /// Its name.
    pub name: String,
    /// Position of the name.
    pub pos: Pos,
    /// Its predicate.
    pub predicate: Expr,
    /// Its action.
    pub action: Action,
}

/// A parsed file before normalisation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceFile {
    /// Policies in definition order.
    pub policies: Vec<PolicyDef>,
    /// The `apply(...)` list and its position.
    pub apply: Option<(Vec<(String, Pos)>, Pos)>,
    /// The `default` action, if given.
    pub default: Option<Action>,
}

/// A checker warning: the file is valid but probably not what was meant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// Line of the policy concerned.
    pub line: u32,
    /// Column of the policy concerned.
    pub col: u32,
    /// Human-readable message.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: warning: {}", self.line, self.col, self.message)
    }
}

/// A policy in normal form.
#[derive(Clone, Debug, PartialEq)]
pub struct NormalPolicy {
    /// Its name.
    pub name: String,
    /// Where it is defined.
    pub pos: Pos,
    /// Its action.
    pub action: Action,
    /// Its predicate as a union of conjunctions.
    pub cubes: Vec<Cube>,
}

/// Applied policies in evaluation order, the default action and the checker's warnings.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySet {
    /// Policies in `apply` order; the first that matches decides.
    pub policies: Vec<NormalPolicy>,
    /// The action when none matches (allow unless `default deny`).
    pub default: Action,
    /// Warnings found while checking.
    pub warnings: Vec<Warning>,
}

impl PolicySet {
    /// The reference semantics: index of the first policy whose predicate holds, and the action.
    pub fn evaluate(
        &self,
        values: &[Option<u128>; crate::field::FIELD_COUNT],
    ) -> (Option<usize>, Action) {
        for (i, p) in self.policies.iter().enumerate() {
            if p.cubes.iter().any(|c| c.contains(values)) {
                return (Some(i), p.action);
            }
        }
        (None, self.default)
    }
}

/// Parses, normalises and checks a policy file.
pub fn parse(src: &str) -> Result<PolicySet, PolicyError> {
    parse_with_shadow_budget(src, FILE_SHADOW_BUDGET)
}

/// [`parse`] with another work budget for the file's shadowing proofs.
fn parse_with_shadow_budget(src: &str, budget: usize) -> Result<PolicySet, PolicyError> {
    let toks = lexer::lex(src)?;
    let file = parser::Parser::new(toks).file()?;
    normalise_file(file, budget)
}

fn normalise_file(file: SourceFile, shadow_budget: usize) -> Result<PolicySet, PolicyError> {
    let mut warnings = Vec::new();
    let order: Vec<&PolicyDef> = match &file.apply {
        Some((names, _)) => names
            .iter()
            .map(|(name, pos)| {
                file.policies
                    .iter()
                    .find(|p| p.name == *name)
                    .ok_or_else(|| PolicyError {
                        line: pos.line,
                        col: pos.col,
                        kind: ErrorKind::UnknownPolicy {
                            name: name.clone(),
                            suggestion: suggest::nearest(
                                name,
                                file.policies.iter().map(|p| p.name.as_str()),
                            )
                            .map(str::to_owned),
                        },
                    })
            })
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    for p in &file.policies {
        if !order.iter().any(|q| q.name == p.name) {
            warnings.push(Warning {
                line: p.pos.line,
                col: p.pos.col,
                message: format!(
                    "policy `{}` is defined but not listed in apply(...), so it never runs",
                    p.name
                ),
            });
        }
    }
    let mut policies: Vec<NormalPolicy> = Vec::with_capacity(order.len());
    let mut file_budget = shadow_budget;
    for def in order {
        let cubes = normalise(&def.predicate).map_err(|TooComplex| PolicyError {
            line: def.pos.line,
            col: def.pos.col,
            kind: ErrorKind::TooComplex {
                policy: def.name.clone(),
                limit: MAX_CUBES_PER_POLICY,
            },
        })?;
        if cubes.is_empty() {
            warnings.push(Warning {
                line: def.pos.line,
                col: def.pos.col,
                message: format!("the predicate of `{}` can never match a packet", def.name),
            });
        } else if file_budget == 0 {
            // The proofs' budget for the file is spent (said once, below).
        } else {
            // Only earlier cubes that meet this policy's can take anything from it.
            let earlier: Vec<&Cube> = policies
                .iter()
                .flat_map(|p| p.cubes.iter())
                .filter(|b| cubes.iter().any(|c| c.overlaps(b)))
                .collect();
            let mut budget = SHADOW_BUDGET.min(file_budget);
            let spent_before = budget;
            let coverage = covered_within(&cubes, &earlier, &mut budget);
            file_budget -= spent_before - budget;
            if coverage == Coverage::Unknown && budget == 0 && file_budget == 0 {
                warnings.push(Warning {
                    line: def.pos.line,
                    col: def.pos.col,
                    message: format!(
                        "shadowing not checked from `{}` on: the proof's work budget for the file \
                         ({shadow_budget} pieces) is spent",
                        def.name
                    ),
                });
            }
            if coverage == Coverage::Covered {
                let by: Vec<&str> = policies
                    .iter()
                    .filter(|p| p.cubes.iter().any(|c| cubes.iter().any(|d| c.overlaps(d))))
                    .map(|p| p.name.as_str())
                    .collect();
                warnings.push(Warning {
                    line: def.pos.line,
                    col: def.pos.col,
                    message: format!(
                        "policy `{}` is shadowed: every packet it matches is already decided by {}",
                        def.name,
                        by.iter()
                            .map(|n| format!("`{n}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
        }
        policies.push(NormalPolicy {
            name: def.name.clone(),
            pos: def.pos,
            action: def.action,
            cubes,
        });
    }
    Ok(PolicySet {
        policies,
        default: file.default.unwrap_or(Action::Allow),
        warnings,
    })
}

/// Normalisation exceeded [`MAX_CUBES_PER_POLICY`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("predicate expands to more than {MAX_CUBES_PER_POLICY} conjunctions")]
pub struct TooComplex;

fn dedup(mut cubes: Vec<Cube>) -> Result<Vec<Cube>, TooComplex> {
    cubes.retain(|c| !c.is_empty());
    let mut seen = std::collections::HashSet::new();
    cubes.retain(|c| seen.insert(c.clone()));
    if cubes.len() > MAX_CUBES_PER_POLICY {
        return Err(TooComplex);
    }
    Ok(cubes)
}

fn and(a: &[Cube], b: &[Cube]) -> Result<Vec<Cube>, TooComplex> {
    if a.len().saturating_mul(b.len()) > MAX_CUBES_PER_POLICY * 4 {
        return Err(TooComplex);
    }
    let mut out = Vec::new();
    for x in a {
        for y in b {
            let c = x.intersect(y);
            if !c.is_empty() {
                out.push(c);
            }
        }
    }
    dedup(out)
}

/// Converts a predicate to a union of non-empty cubes.
pub fn normalise(e: &Expr) -> Result<Vec<Cube>, TooComplex> {
    match e {
        Expr::Any => Ok(vec![Cube::any()]),
        Expr::Match { field, set, .. } => dedup(vec![Cube::single(*field, set.clone())]),
        Expr::Or(es) => {
            let mut out = Vec::new();
            for e in es {
                out.extend(normalise(e)?);
                if out.len() > MAX_CUBES_PER_POLICY * 4 {
                    return Err(TooComplex);
                }
            }
            dedup(out)
        }
        Expr::And(es) => {
            let mut acc = vec![Cube::any()];
            for e in es {
                acc = and(&acc, &normalise(e)?)?;
                if acc.is_empty() {
                    break;
                }
            }
            Ok(acc)
        }
        Expr::Not(inner) => {
            let mut acc = vec![Cube::any()];
            for cube in normalise(inner)? {
                acc = and(&acc, &cube.complement())?;
                if acc.is_empty() {
                    break;
                }
            }
            Ok(acc)
        }
    }
}

#[cfg(test)]
mod tests;
