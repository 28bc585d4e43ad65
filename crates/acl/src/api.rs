//! What the CLI calls: `rdx acl check FILE`, `rdx acl compile FILE`, `rdx acl test FILE PCAP`.
//!
//! Every function returns a report whose `Display` is the command's output, or an
//! [`AclError`] that names the file and, for policy errors, shows the offending line.

use std::fmt;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::cm::CmCounters;
use crate::compile::{compile, CompileError, RuleImage, RuleSet};
use crate::engine::{Cause, Counters, Engine};
use crate::pcap::{self, TraceError};
use crate::policy::{self, Action, PolicyError, PolicySet, Warning};
use crate::rule::RULE_SIZE;

/// Failures of the ACL commands.
#[derive(Debug, Error)]
pub enum AclError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The policy file is invalid.
    #[error("{path}:{error}\n{excerpt}")]
    Policy {
        /// The file.
        path: PathBuf,
        /// The error with line and column.
        error: PolicyError,
        /// The offending source line with a caret under the column.
        excerpt: String,
    },
    /// The policies do not compile into a rule table.
    #[error("{path}: {source}")]
    Compile {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: CompileError,
    },
    /// The trace could not be read.
    #[error("{path}: {source}")]
    Trace {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: TraceError,
    },
}

fn excerpt(src: &str, line: u32, col: u32) -> String {
    let text = src
        .lines()
        .nth(line.saturating_sub(1) as usize)
        .unwrap_or("");
    format!(
        "  {text}\n  {}^",
        " ".repeat(col.saturating_sub(1) as usize)
    )
}

/// Reads and checks a policy file.
pub fn load(path: &Path) -> Result<PolicySet, AclError> {
    let src = std::fs::read_to_string(path).map_err(|source| AclError::Io {
        path: path.to_owned(),
        source,
    })?;
    policy::parse(&src).map_err(|error| AclError::Policy {
        path: path.to_owned(),
        excerpt: excerpt(&src, error.line, error.col),
        error,
    })
}

/// Result of `rdx acl check`.
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// The file.
    pub path: PathBuf,
    /// Checked policies.
    pub set: PolicySet,
    /// Rules they compile to.
    pub rules: usize,
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for w in &self.set.warnings {
            writeln!(f, "{}:{w}", self.path.display())?;
        }
        writeln!(
            f,
            "{}: ok: {} policies, {} rules, default {}, {} warning(s)",
            self.path.display(),
            self.set.policies.len(),
            self.rules,
            self.set.default,
            self.set.warnings.len()
        )
    }
}

/// `rdx acl check FILE`: parse, normalise, compile; report warnings.
pub fn check(path: &Path) -> Result<CheckReport, AclError> {
    let set = load(path)?;
    let rules = compile(&set).map_err(|source| AclError::Compile {
        path: path.to_owned(),
        source,
    })?;
    Ok(CheckReport {
        path: path.to_owned(),
        rules: rules.rules.len(),
        set,
    })
}

/// Result of `rdx acl compile`.
#[derive(Clone, Debug)]
pub struct CompileReport {
    /// The file.
    pub path: PathBuf,
    /// Warnings from the checker.
    pub warnings: Vec<Warning>,
    /// The rule table.
    pub rules: RuleSet,
    /// The serialised image (what goes into XState).
    pub image: Vec<u8>,
    /// Why `rdx acl apply` would refuse the policy, if it would ([`enforcement_refusal`]).
    pub enforcement: Option<String>,
}

/// Why the enforcement program (`rdx acl apply`) would refuse `rules` — its classifier
/// does not fit a bank, a leaf is longer than the program scans, or a frame could need more
/// than the class's instruction budget — or `None` when it would take them. `check`,
/// `compile` and `test` say so too, so that a policy they accept is not refused only at
/// deployment.
pub fn enforcement_refusal(rules: &RuleSet) -> Option<String> {
    crate::enforce::image(rules).err().map(|e| e.to_string())
}

impl fmt::Display for CompileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for w in &self.warnings {
            writeln!(f, "{}:{w}", self.path.display())?;
        }
        if let Some(why) = &self.enforcement {
            writeln!(
                f,
                "{}: warning: rdx acl apply would refuse this policy: {why}",
                self.path.display()
            )?;
        }
        writeln!(
            f,
            "{} rules x {RULE_SIZE} bytes = {} byte image, default {}",
            self.rules.rules.len(),
            self.image.len(),
            self.rules.default
        )?;
        for r in &self.rules.rules {
            let name = self
                .rules
                .policy_names
                .get(r.policy as usize)
                .map_or("?", String::as_str);
            writeln!(f, "  rule {:>5}  {:<5} from {name}", r.priority, r.action())?;
        }
        Ok(())
    }
}

/// `rdx acl compile FILE`: the rule table and its image.
pub fn compile_file(path: &Path) -> Result<CompileReport, AclError> {
    let set = load(path)?;
    let rules = compile(&set).map_err(|source| AclError::Compile {
        path: path.to_owned(),
        source,
    })?;
    Ok(CompileReport {
        path: path.to_owned(),
        warnings: set.warnings,
        image: RuleImage::to_bytes(&rules),
        enforcement: enforcement_refusal(&rules),
        rules,
    })
}

/// One packet's outcome in `rdx acl test`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketVerdict {
    /// Index in the trace, from 0.
    pub index: usize,
    /// The decision.
    pub action: Action,
    /// Why.
    pub cause: Cause,
    /// `cause` in words.
    pub reason: String,
}

/// Result of `rdx acl test`.
#[derive(Clone, Debug)]
pub struct TestReport {
    /// Per-packet verdicts, in trace order.
    pub verdicts: Vec<PacketVerdict>,
    /// Counters.
    pub counters: Counters,
    /// CM table counters.
    pub cm: CmCounters,
    /// Policy names in apply order (for the per-policy counters).
    pub policy_names: Vec<String>,
    /// Why `rdx acl apply` would refuse the policy, if it would.
    pub enforcement: Option<String>,
}

impl fmt::Display for TestReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for v in &self.verdicts {
            writeln!(f, "{:>6}  {:<5}  {}", v.index, v.action, v.reason)?;
        }
        writeln!(f, "--")?;
        write!(f, "{}", self.counters)?;
        for (name, n) in self.policy_names.iter().zip(&self.counters.per_policy) {
            writeln!(f, "policy.{name:<20} {n}")?;
        }
        writeln!(
            f,
            "cm.created {}  cm.removed {}  cm.unknown_connection {}  cm.table_full {}",
            self.cm.created, self.cm.removed, self.cm.unknown_connection, self.cm.table_full
        )?;
        if let Some(why) = &self.enforcement {
            writeln!(f, "warning: rdx acl apply would refuse this policy: {why}")?;
        }
        Ok(())
    }
}

/// `rdx acl test FILE TRACE`: run every packet of a pcap through the policies.
pub fn test(policy_path: &Path, trace_path: &Path) -> Result<TestReport, AclError> {
    let compiled = compile_file(policy_path)?;
    let trace = pcap::read(trace_path).map_err(|source| AclError::Trace {
        path: trace_path.to_owned(),
        source,
    })?;
    let mut report = run_trace(compiled.rules, &trace);
    report.enforcement = compiled.enforcement;
    Ok(report)
}

/// Runs a trace through an engine over `rules`.
pub fn run_trace(rules: RuleSet, trace: &pcap::Trace) -> TestReport {
    let policy_names = rules.policy_names.clone();
    let mut engine = Engine::new(rules).with_flow_cache(256);
    let verdicts = trace
        .packets
        .iter()
        .enumerate()
        .map(|(index, p)| {
            let v = engine.process(trace.link, p);
            PacketVerdict {
                index,
                action: v.action,
                reason: engine.describe(&v.cause),
                cause: v.cause,
            }
        })
        .collect();
    TestReport {
        verdicts,
        counters: engine.counters().clone(),
        cm: engine.cm_counters(),
        policy_names,
        enforcement: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `compile` and `test` say when `rdx acl apply` would refuse a policy they accept: here
    /// 2,500 rules that differ only in their opcode share one leaf, which a CNP frame
    /// checks rule by rule past the instruction budget.
    #[test]
    fn reports_say_when_apply_would_refuse() {
        let one = compile(
            &crate::policy::parse(
                "policy p { predicate = match(opcode = SEND_ONLY) action = allow }\napply(p)\n",
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(enforcement_refusal(&one), None);
        let mut many = one.clone();
        many.rules = (0..2500u32)
            .map(|i| {
                let mut r = one.rules[0];
                r.priority = i;
                r
            })
            .collect();
        let why = enforcement_refusal(&many).expect("over the budget");
        assert!(why.contains("budget") && why.contains("leaf of"), "{why}");
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/acl-traffic/policies");
        let report = compile_file(&root.join("server.acl")).unwrap();
        assert_eq!(report.enforcement, None);
        assert!(!report.to_string().contains("would refuse"));
    }
}
