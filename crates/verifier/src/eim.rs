//! The Extension Interface Model: a YAML spec in which a host declares its hooks (context
//! layout, return-value meaning), state capabilities (host variables), function capabilities
//! (host functions with prototypes and constraints), and in which the operator declares
//! extension classes that bind a hook to a subset of those capabilities plus resource limits.
//!
//! [`EimSpec::env`] turns one hook and class into the [`Env`] the verifier checks against.
//! The format is documented, with examples, in `docs/verifier.md` and `eim/*.yaml`.

use crate::env::{CtxField, CtxLayout, Denied, Env, FieldKind, HostVar, Perm};
use crate::error::Rule;
use crate::helpers::{self, Arg, HelperProto, Ret};
use crate::scalar::Scalar;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Host function and variable ids start here so that they never collide with standard helpers.
pub const FIRST_HOST_ID: i32 = 1000;

/// Why an EIM spec cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EimError {
    /// The text is not YAML of the spec's shape; the parser's message.
    #[error("EIM spec is not valid YAML for the format: {0}")]
    Parse(String),
    /// The spec parses but breaks a rule (overlapping fields, unbounded sizes, ...); which.
    #[error("EIM spec: {0}")]
    Invalid(String),
    /// No hook has the name asked for.
    #[error("EIM spec has no hook named `{0}`")]
    UnknownHook(String),
    /// No class has the name asked for.
    #[error("EIM spec has no class named `{0}`")]
    UnknownClass(String),
    /// The class asked for is bound to another hook.
    #[error("class `{class}` binds hook `{bound}`, not `{asked}`")]
    ClassHookMismatch {
        /// The class.
        class: String,
        /// The hook it binds.
        bound: String,
        /// The hook asked for.
        asked: String,
    },
}

/// Who may access a field or variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AccessSpec {
    /// Nobody (the default).
    #[default]
    None,
    /// Read only.
    Read,
    /// Write only.
    Write,
    /// Read and write.
    ReadWrite,
}

impl AccessSpec {
    fn read(self) -> bool {
        matches!(self, AccessSpec::Read | AccessSpec::ReadWrite)
    }
    fn write(self) -> bool {
        matches!(self, AccessSpec::Write | AccessSpec::ReadWrite)
    }
}

/// What reading a context field yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FieldKindSpec {
    /// A number (the default).
    #[default]
    Scalar,
    /// The pointer to the packet's first byte (8-byte, read-only).
    PacketStart,
    /// The pointer one past the packet's last byte (8-byte, read-only).
    PacketEnd,
    /// The pointer to the packet metadata's first byte (8-byte, read-only).
    PacketMeta,
}

/// One field of a hook's context.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    /// The name classes grant it by.
    pub name: String,
    /// Byte offset in the context.
    pub offset: u32,
    /// Bytes (over 8: a byte array).
    pub size: u32,
    /// The most any class may do with it.
    #[serde(default)]
    pub access: AccessSpec,
    /// What reading it yields.
    #[serde(default)]
    pub kind: FieldKindSpec,
}

/// A hook's context structure, passed in `r1`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextSpec {
    /// Bytes of the structure.
    pub size: u32,
    /// Its fields, non-overlapping and inside `size`.
    pub fields: Vec<FieldSpec>,
}

/// What the hook's return value means, and which values it may take.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReturnSpec {
    /// What the host does with the value, for people.
    #[serde(default)]
    pub meaning: String,
    /// Inclusive allowed range of the returned value.
    #[serde(default)]
    pub range: Option<[i64; 2]>,
}

/// One hook a host declares.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookSpec {
    /// The name classes bind to and sections (`rdx/<name>`) name.
    pub name: String,
    /// What the hook is for, for people.
    #[serde(default)]
    pub description: String,
    /// The context structure the hook passes.
    pub context: ContextSpec,
    /// The return value's meaning and range; without it any value is allowed.
    #[serde(default, rename = "return")]
    pub ret: Option<ReturnSpec>,
    /// Packet bytes (between `packet_start` and `packet_end` fields) may be written.
    #[serde(default)]
    pub packet_writable: bool,
}

/// A host variable extensions may reach (a state capability).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariableSpec {
    /// The name classes grant it by.
    pub name: String,
    /// The helper id that returns a pointer to it (1000 and up).
    pub id: i32,
    /// Its size in bytes.
    pub size: u32,
    /// The most any class may do with it.
    pub access: AccessSpec,
    /// What it holds, for people.
    #[serde(default)]
    pub description: String,
}

/// What a host-function argument must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgKind {
    /// Any number (optionally constrained).
    Scalar,
    /// A pointer to initialised memory the function reads; its size is `size` or the
    /// argument named by `size_arg`.
    MemRead,
    /// A pointer to memory the function writes.
    MemWrite,
    /// The byte size of a memory argument (at least 1; `constraints` must bound it).
    Size,
    /// The hook's context pointer.
    Ctx,
}

/// One argument of a host function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgSpec {
    /// The name constraints and `size_arg` refer to it by.
    pub name: String,
    /// What the argument must be.
    pub kind: ArgKind,
    /// `mem_read`: a fixed size of the memory.
    #[serde(default)]
    pub size: Option<u32>,
    /// `mem_read` and `mem_write`: the `size` argument giving the memory's size.
    #[serde(default)]
    pub size_arg: Option<String>,
    /// Conditions such as `len <= 4096` the verifier proves at every call.
    #[serde(default)]
    pub constraints: Vec<String>,
}

/// What a host function's result is known to satisfy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ReturnsSpec {
    /// Facts such as `ret > 0` the verifier may assume about the result.
    #[serde(default)]
    pub facts: Vec<String>,
}

/// A host function extensions may call (a function capability).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    /// The name classes grant it by.
    pub name: String,
    /// The helper id programs call it by (1000 and up).
    pub id: i32,
    /// What it does, for people.
    #[serde(default)]
    pub description: String,
    /// Its arguments, `r1` first (at most five).
    #[serde(default)]
    pub args: Vec<ArgSpec>,
    /// What its result is known to satisfy.
    #[serde(default)]
    pub returns: ReturnsSpec,
}

/// The context fields a class grants, by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ClassContext {
    /// Fields the class may read.
    #[serde(default)]
    pub read: Vec<String>,
    /// Fields the class may write.
    #[serde(default)]
    pub write: Vec<String>,
}

/// `instructions: unlimited`, `instructions: "< 100000"` or `instructions: 100000`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum InstructionLimit {
    /// At most this many instructions.
    Count(u64),
    /// `unlimited` or `< N`.
    Expr(String),
}

/// An extension class: a hook and the subset of its capabilities an operator grants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSpec {
    /// The name extensions are verified under.
    pub name: String,
    /// The hook it binds.
    pub hook: String,
    /// What it is for, for people.
    #[serde(default)]
    pub description: String,
    /// The context fields it grants.
    #[serde(default)]
    pub context: ClassContext,
    /// Host functions granted, by name.
    #[serde(default)]
    pub functions: Vec<String>,
    /// Host variables granted, by name, with the access granted.
    #[serde(default)]
    pub variables: BTreeMap<String, AccessSpec>,
    /// Standard helpers granted, by name (`map_lookup_elem`, `ringbuf_reserve`, ...).
    #[serde(default)]
    pub helpers: Vec<String>,
    /// The instruction budget of a run.
    pub instructions: InstructionLimit,
    /// XState bytes the program's maps may use in total.
    pub xstate_bytes: u64,
}

/// A whole spec file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EimSpec {
    /// Format version: 1.
    pub version: u32,
    /// The hooks the host declares.
    pub hooks: Vec<HookSpec>,
    /// Host variables (state capabilities).
    #[serde(default)]
    pub variables: Vec<VariableSpec>,
    /// Host functions (function capabilities).
    #[serde(default)]
    pub functions: Vec<FunctionSpec>,
    /// Extension classes.
    #[serde(default)]
    pub classes: Vec<ClassSpec>,
}

fn invalid(msg: impl Into<String>) -> EimError {
    EimError::Invalid(msg.into())
}

/// `name op value` with op one of `< <= > >= == !=`.
fn parse_constraint(text: &str, name: &str) -> Result<(i64, i64), EimError> {
    let t = text.trim();
    let ops = ["<=", ">=", "==", "!=", "<", ">"];
    let (lhs, op, rhs) = ops
        .iter()
        .find_map(|op| t.split_once(op).map(|(l, r)| (l.trim(), *op, r.trim())))
        .ok_or_else(|| invalid(format!("constraint `{t}`: expected `{name} <op> <number>`")))?;
    if lhs != name {
        return Err(invalid(format!("constraint `{t}` must be about `{name}`")));
    }
    let n: i64 = rhs
        .parse()
        .map_err(|_| invalid(format!("constraint `{t}`: `{rhs}` is not an integer")))?;
    Ok(match op {
        "<" => (
            i64::MIN,
            n.checked_sub(1)
                .ok_or_else(|| invalid("constraint out of range"))?,
        ),
        "<=" => (i64::MIN, n),
        ">" => (
            n.checked_add(1)
                .ok_or_else(|| invalid("constraint out of range"))?,
            i64::MAX,
        ),
        ">=" => (n, i64::MAX),
        "==" => (n, n),
        _ => {
            return Err(invalid(format!(
                "constraint `{t}`: `!=` cannot be expressed as a range"
            )))
        }
    })
}

fn range_of(constraints: &[String], name: &str) -> Result<(i64, i64), EimError> {
    let mut lo = i64::MIN;
    let mut hi = i64::MAX;
    for c in constraints {
        let (a, b) = parse_constraint(c, name)?;
        lo = lo.max(a);
        hi = hi.min(b);
    }
    if lo > hi {
        return Err(invalid(format!("constraints on `{name}` admit no value")));
    }
    Ok((lo, hi))
}

impl EimSpec {
    /// Parses and validates a spec ([`EimError::Parse`] or [`EimError::Invalid`]).
    pub fn from_yaml(text: &str) -> Result<EimSpec, EimError> {
        let spec: EimSpec =
            serde_yaml_ng::from_str(text).map_err(|e| EimError::Parse(e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    /// The spec as YAML (field order as declared here).
    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).unwrap_or_default()
    }

    /// Structural checks that do not depend on a class.
    pub fn validate(&self) -> Result<(), EimError> {
        if self.version != 1 {
            return Err(invalid(format!(
                "unsupported version {} (expected 1)",
                self.version
            )));
        }
        let mut ids = BTreeSet::new();
        let mut names = BTreeSet::new();
        for (name, id) in self
            .variables
            .iter()
            .map(|v| (&v.name, v.id))
            .chain(self.functions.iter().map(|f| (&f.name, f.id)))
        {
            if id < FIRST_HOST_ID {
                return Err(invalid(format!(
                    "`{name}` has id {id}: host ids start at {FIRST_HOST_ID}"
                )));
            }
            if !ids.insert(id) {
                return Err(invalid(format!("id {id} is used twice")));
            }
            if !names.insert(name.clone()) {
                return Err(invalid(format!("`{name}` is declared twice")));
            }
        }
        for v in &self.variables {
            if v.size == 0 || v.size > 1 << 20 {
                return Err(invalid(format!(
                    "variable `{}` has size {}",
                    v.name, v.size
                )));
            }
        }
        for h in &self.hooks {
            let mut fields: Vec<&FieldSpec> = h.context.fields.iter().collect();
            fields.sort_by_key(|f| f.offset);
            for w in fields.windows(2) {
                if w[0].offset + w[0].size > w[1].offset {
                    return Err(invalid(format!(
                        "hook `{}`: fields `{}` and `{}` overlap",
                        h.name, w[0].name, w[1].name
                    )));
                }
            }
            for f in &fields {
                if f.size == 0
                    || f.offset
                        .checked_add(f.size)
                        .is_none_or(|e| e > h.context.size)
                {
                    return Err(invalid(format!(
                        "hook `{}`: field `{}` lies outside the {}-byte context",
                        h.name, f.name, h.context.size
                    )));
                }
                if f.kind != FieldKindSpec::Scalar && (f.size != 8 || f.access.write()) {
                    return Err(invalid(format!(
                        "hook `{}`: pointer field `{}` must be 8 bytes and read-only",
                        h.name, f.name
                    )));
                }
                if f.size <= 8 && !f.size.is_power_of_two() {
                    return Err(invalid(format!(
                        "hook `{}`: field `{}` has size {}",
                        h.name, f.name, f.size
                    )));
                }
            }
        }
        for f in &self.functions {
            if f.args.len() > 5 {
                return Err(invalid(format!(
                    "function `{}` has more than 5 arguments",
                    f.name
                )));
            }
            self.function_proto(f)?;
        }
        for c in &self.classes {
            self.hooks
                .iter()
                .find(|h| h.name == c.hook)
                .ok_or_else(|| {
                    invalid(format!(
                        "class `{}` binds unknown hook `{}`",
                        c.name, c.hook
                    ))
                })?;
            self.env(&c.hook, &c.name)?;
        }
        Ok(())
    }

    fn function_proto(&self, f: &FunctionSpec) -> Result<HelperProto, EimError> {
        let idx = |n: &str| {
            f.args
                .iter()
                .position(|a| a.name == n)
                .ok_or_else(|| invalid(format!("function `{}`: no argument named `{n}`", f.name)))
        };
        let mut args = Vec::new();
        for a in &f.args {
            let (lo, hi) = range_of(&a.constraints, &a.name)?;
            args.push(match a.kind {
                ArgKind::Scalar if a.constraints.is_empty() => Arg::Scalar,
                ArgKind::Scalar => Arg::ScalarIn { min: lo, max: hi },
                ArgKind::Ctx => Arg::Ctx,
                ArgKind::Size => {
                    if hi == i64::MAX || hi < 1 {
                        return Err(invalid(format!("function `{}`: size `{}` needs an upper bound constraint", f.name, a.name)));
                    }
                    Arg::Size { max: (hi as u64).min(helpers::MAX_MEM_ARG), declared: true }
                }
                ArgKind::MemRead | ArgKind::MemWrite => match (&a.size, &a.size_arg) {
                    (Some(n), None) if a.kind == ArgKind::MemRead => Arg::ReadMemFixed { size: *n },
                    (None, Some(s)) => {
                        let i = idx(s)?;
                        if f.args[i].kind != ArgKind::Size {
                            return Err(invalid(format!("function `{}`: `{s}` must be of kind size", f.name)));
                        }
                        if a.kind == ArgKind::MemRead {
                            Arg::ReadMem { size_arg: i }
                        } else {
                            Arg::WriteMem { size_arg: i }
                        }
                    }
                    _ => return Err(invalid(format!("function `{}`: memory argument `{}` needs `size_arg` (or `size` when read-only)", f.name, a.name))),
                },
            });
        }
        let (lo, hi) = range_of(&f.returns.facts, "ret")?;
        Ok(HelperProto::new(
            &f.name,
            args,
            Ret::Scalar(Scalar::srange(lo, hi)),
        ))
    }

    /// The environment of `hook` under `class`.
    pub fn env(&self, hook: &str, class: &str) -> Result<Env, EimError> {
        let h = self
            .hooks
            .iter()
            .find(|h| h.name == hook)
            .ok_or_else(|| EimError::UnknownHook(hook.into()))?;
        let c = self
            .classes
            .iter()
            .find(|c| c.name == class)
            .ok_or_else(|| EimError::UnknownClass(class.into()))?;
        if c.hook != h.name {
            return Err(EimError::ClassHookMismatch {
                class: c.name.clone(),
                bound: c.hook.clone(),
                asked: hook.into(),
            });
        }
        for n in c.context.read.iter().chain(&c.context.write) {
            if !h.context.fields.iter().any(|f| &f.name == n) {
                return Err(invalid(format!(
                    "class `{}` grants unknown field `{n}`",
                    c.name
                )));
            }
        }
        let perm = |hook_ok: bool, class_ok: bool| match (hook_ok, class_ok) {
            (false, _) => Perm::NotInHook,
            (true, false) => Perm::NotInClass,
            (true, true) => Perm::Allowed,
        };
        let fields = h
            .context
            .fields
            .iter()
            .map(|f| CtxField {
                name: f.name.clone(),
                offset: f.offset,
                size: f.size,
                read: perm(f.access.read(), c.context.read.contains(&f.name)),
                write: perm(f.access.write(), c.context.write.contains(&f.name)),
                kind: match f.kind {
                    FieldKindSpec::Scalar => FieldKind::Scalar,
                    FieldKindSpec::PacketStart => FieldKind::PacketStart,
                    FieldKindSpec::PacketEnd => FieldKind::PacketEnd,
                    FieldKindSpec::PacketMeta => FieldKind::PacketMeta,
                },
            })
            .collect();
        let mut helpers_map = BTreeMap::new();
        let mut denied = BTreeMap::new();
        for name in &c.helpers {
            let id = helpers::standard_by_name(name).ok_or_else(|| {
                invalid(format!("class `{}` grants unknown helper `{name}`", c.name))
            })?;
            helpers_map.insert(id, helpers::standard(id).expect("known helper"));
        }
        for id in [1, 2, 3, 5, 6, 7, 8, 12, 26, 130, 131, 132, 133] {
            if !helpers_map.contains_key(&id) {
                if let Some(p) = helpers::standard(id) {
                    denied.insert(
                        id,
                        Denied {
                            name: p.name,
                            rule: Rule::EimFunction,
                        },
                    );
                }
            }
        }
        for name in &c.functions {
            if !self.functions.iter().any(|f| &f.name == name) {
                return Err(invalid(format!(
                    "class `{}` grants unknown function `{name}`",
                    c.name
                )));
            }
        }
        for f in &self.functions {
            if c.functions.contains(&f.name) {
                helpers_map.insert(f.id, self.function_proto(f)?);
            } else {
                denied.insert(
                    f.id,
                    Denied {
                        name: f.name.clone(),
                        rule: Rule::EimFunction,
                    },
                );
            }
        }
        let mut vars = Vec::new();
        for n in c.variables.keys() {
            if !self.variables.iter().any(|v| &v.name == n) {
                return Err(invalid(format!(
                    "class `{}` grants unknown variable `{n}`",
                    c.name
                )));
            }
        }
        for v in &self.variables {
            match c.variables.get(&v.name) {
                Some(a) if *a != AccessSpec::None => {
                    let idx = vars.len() as u32;
                    vars.push(HostVar {
                        name: v.name.clone(),
                        id: v.id,
                        size: v.size,
                        read: perm(v.access.read(), a.read()),
                        write: perm(v.access.write(), a.write()),
                    });
                    helpers_map.insert(
                        v.id,
                        HelperProto::new(&v.name, vec![], Ret::HostVar { var: idx }),
                    );
                }
                _ => {
                    denied.insert(
                        v.id,
                        Denied {
                            name: v.name.clone(),
                            rule: Rule::EimVariable,
                        },
                    );
                }
            }
        }
        let budget = match &c.instructions {
            InstructionLimit::Count(n) => Some(*n),
            InstructionLimit::Expr(e) => {
                let e = e.trim();
                if e == "unlimited" {
                    None
                } else if let Some(n) = e.strip_prefix("<=") {
                    Some(
                        n.trim()
                            .parse::<u64>()
                            .map_err(|_| invalid(format!("bad instruction limit `{e}`")))?,
                    )
                } else if let Some(n) = e.strip_prefix('<') {
                    let n = n
                        .trim()
                        .parse::<u64>()
                        .map_err(|_| invalid(format!("bad instruction limit `{e}`")))?;
                    Some(
                        n.checked_sub(1)
                            .ok_or_else(|| invalid("instruction limit `< 0` admits nothing"))?,
                    )
                } else {
                    Some(e.parse::<u64>().map_err(|_| {
                        invalid(format!(
                            "bad instruction limit `{e}`: use `< N` or `unlimited`"
                        ))
                    })?)
                }
            }
        };
        Ok(Env {
            name: h.name.clone(),
            eim: true,
            ctx: CtxLayout {
                size: h.context.size,
                fields,
                aligned_access: false,
                narrow_reads: true,
            },
            helpers: helpers_map,
            denied_helpers: denied,
            vars,
            ret_range: h.ret.as_ref().and_then(|r| r.range).map(|[a, b]| (a, b)),
            packet_writable: h.packet_writable,
            budget,
            memory_limit: Some(c.xstate_bytes),
            allow_budgeted_loops: budget.is_some(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constraints_parse() {
        assert_eq!(
            parse_constraint("len <= 4096", "len").unwrap(),
            (i64::MIN, 4096)
        );
        assert_eq!(parse_constraint("ret > 0", "ret").unwrap(), (1, i64::MAX));
        assert!(parse_constraint("x <= 4", "len").is_err());
        assert!(parse_constraint("len <= many", "len").is_err());
    }

    #[test]
    fn bad_specs_are_refused_with_reasons() {
        let e = EimSpec::from_yaml("version: 2\nhooks: []\n").unwrap_err();
        assert!(e.to_string().contains("version"), "{e}");
        let e = EimSpec::from_yaml("version: 1\nhooks: [{name: h, context: {size: 8, fields: [{name: a, offset: 4, size: 8}]}}]\n").unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");
        let e = EimSpec::from_yaml("version: 1\nhooks: []\nfunctions: [{name: f, id: 5}]\n")
            .unwrap_err();
        assert!(e.to_string().contains("host ids"), "{e}");
        assert!(matches!(
            EimSpec::from_yaml("version: [").unwrap_err(),
            EimError::Parse(_)
        ));
    }
}
