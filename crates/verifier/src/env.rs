//! What the verifier checks a program *against*: the hook's context layout, the helpers and
//! host functions the program may call with their prototypes, host variables, the return-value
//! contract and the class's resource limits. Built either from a kernel program type
//! ([`Env::kernel`]) or from an EIM spec ([`crate::eim`]).

use crate::helpers::{self, HelperProto};
use std::collections::BTreeMap;

/// How a context field may be accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Perm {
    /// The access is allowed.
    Allowed,
    /// The hook does not offer this access at all.
    NotInHook,
    /// The hook offers it but the extension class does not grant it.
    NotInClass,
}

/// What reading a context field yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// A number.
    Scalar,
    /// The pointer to the packet's first byte (`data`).
    PacketStart,
    /// The pointer one past the packet's last byte (`data_end`).
    PacketEnd,
    /// The pointer to the packet metadata's first byte (`data_meta`).
    PacketMeta,
}

/// One field of the hook's context structure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtxField {
    /// The field's name, for messages and EIM grants.
    pub name: String,
    /// Byte offset in the context.
    pub offset: u32,
    /// Bytes (over 8: a byte array).
    pub size: u32,
    /// Whether the class may read it.
    pub read: Perm,
    /// Whether the class may write it.
    pub write: Perm,
    /// What a read yields.
    pub kind: FieldKind,
}

impl CtxField {
    /// Fields wider than a register are byte arrays: any access inside them is allowed.
    pub fn is_array(&self) -> bool {
        self.size > 8
    }
}

/// The hook's context structure: what a program may do at each offset of `r1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtxLayout {
    /// Bytes of the structure.
    pub size: u32,
    /// Its fields, by offset; offsets no field covers cannot be accessed.
    pub fields: Vec<CtxField>,
    /// Narrow and array accesses must be naturally aligned within the structure (the kernel's
    /// rule for its own contexts).
    pub aligned_access: bool,
    /// Loads narrower than a scalar field are allowed (the kernel allows them in `__sk_buff`
    /// but not in `xdp_md`).
    pub narrow_reads: bool,
}

impl CtxLayout {
    /// Two or more adjacent scalar fields of at most 8 bytes each that together cover
    /// exactly `size` bytes at `off`, with no gap, for a naturally aligned access.
    pub fn fields_spanning(&self, off: i64, size: u32) -> Option<Vec<&CtxField>> {
        if size == 0 || off < 0 || off % size as i64 != 0 {
            return None;
        }
        let end = off + size as i64;
        let mut at = off;
        let mut span = Vec::new();
        while at < end {
            let f = self.fields.iter().find(|f| f.offset as i64 == at)?;
            if f.kind != FieldKind::Scalar || f.is_array() || f.size == 0 {
                return None;
            }
            at += f.size as i64;
            span.push(f);
        }
        (at == end && span.len() >= 2).then_some(span)
    }

    /// The field that a `size`-byte access at `off` lies within, if one does.
    pub fn field_at(&self, off: i64, size: u32) -> Option<&CtxField> {
        self.fields
            .iter()
            .find(|f| off >= f.offset as i64 && off + size as i64 <= (f.offset + f.size) as i64)
    }
}

/// A host variable an extension may reach through the helper id the spec assigns: calling it
/// returns a pointer to the variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostVar {
    /// The variable's name, for messages and EIM grants.
    pub name: String,
    /// The helper id that returns a pointer to it.
    pub id: i32,
    /// Its size in bytes: accesses must stay inside.
    pub size: u32,
    /// Whether the class may read it.
    pub read: Perm,
    /// Whether the class may write it.
    pub write: Perm,
}

/// A helper id known to the environment but not granted to the class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    /// The helper's (or host function's or variable's) name, for messages.
    pub name: String,
    /// The rule a call breaks: `eim-function` or `eim-variable`.
    pub rule: crate::error::Rule,
}

/// The environment of one verification.
#[derive(Clone, Debug)]
pub struct Env {
    /// Hook (or kernel program type) name, for messages.
    pub name: String,
    /// `kernel` for the kernel-compatible modes, `eim` for rdx hooks (selects the rule ids of
    /// capability violations).
    pub eim: bool,
    /// The context structure at `r1`.
    pub ctx: CtxLayout,
    /// Callable helpers and host functions (and variables), by id.
    pub helpers: BTreeMap<i32, HelperProto>,
    /// Ids that exist but are not granted, so a call gets the EIM rule instead of
    /// `unknown-helper`.
    pub denied_helpers: BTreeMap<i32, Denied>,
    /// Host variables granted, indexed by `HostVar` pointers.
    pub vars: Vec<HostVar>,
    /// Allowed range of `r0` at the entry program's exit.
    pub ret_range: Option<(i64, i64)>,
    /// Whether the program may store to packet bytes.
    pub packet_writable: bool,
    /// `instructions < N` of the class: the run-time budget, if any.
    pub budget: Option<u64>,
    /// XState byte limit of the class.
    pub memory_limit: Option<u64>,
    /// Loops that cannot be fully explored are accepted when a budget meters them at run time.
    pub allow_budgeted_loops: bool,
}

/// The kernel program types rdx can compare itself with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelProgType {
    /// `BPF_PROG_TYPE_SOCKET_FILTER` (`__sk_buff` context, no packet pointers).
    SocketFilter,
    /// `BPF_PROG_TYPE_XDP` (`xdp_md` context, packet pointers).
    Xdp,
}

impl KernelProgType {
    /// Kernel `enum bpf_prog_type` number.
    pub fn kernel_number(self) -> u32 {
        match self {
            KernelProgType::SocketFilter => 1,
            KernelProgType::Xdp => 6,
        }
    }

    /// The program type libbpf would infer from an ELF section name.
    pub fn from_section(section: &str) -> Option<Self> {
        let head = section.split('/').next().unwrap_or(section);
        match head {
            "socket" | "socket_filter" => Some(KernelProgType::SocketFilter),
            "xdp" => Some(KernelProgType::Xdp),
            _ => None,
        }
    }
}

fn field(name: &str, offset: u32, size: u32, read: bool, write: bool, kind: FieldKind) -> CtxField {
    let p = |b| if b { Perm::Allowed } else { Perm::NotInHook };
    CtxField {
        name: name.into(),
        offset,
        size,
        read: p(read),
        write: p(write),
        kind,
    }
}

impl Env {
    /// The kernel-compatible environment of a program type: its context structure and the
    /// standard helpers (see `docs/verifier.md` for the exact list).
    pub fn kernel(ty: KernelProgType) -> Env {
        let (name, ctx, ids): (&str, CtxLayout, &[i32]) = match ty {
            KernelProgType::SocketFilter => {
                let mut fields = Vec::new();
                for (i, n) in [
                    "len",
                    "pkt_type",
                    "mark",
                    "queue_mapping",
                    "protocol",
                    "vlan_present",
                    "vlan_tci",
                    "vlan_proto",
                    "priority",
                    "ingress_ifindex",
                    "ifindex",
                    "tc_index",
                ]
                .iter()
                .enumerate()
                {
                    fields.push(field(n, 4 * i as u32, 4, true, false, FieldKind::Scalar));
                }
                fields.push(field("cb", 48, 20, true, true, FieldKind::Scalar));
                fields.push(field("hash", 68, 4, true, false, FieldKind::Scalar));
                (
                    "socket_filter",
                    CtxLayout {
                        size: 192,
                        fields,
                        aligned_access: true,
                        narrow_reads: true,
                    },
                    &[1, 2, 3, 5, 6, 7, 8, 12, 26, 130, 131, 132, 133],
                )
            }
            KernelProgType::Xdp => (
                "xdp",
                CtxLayout {
                    size: 24,
                    fields: vec![
                        field("data", 0, 4, true, false, FieldKind::PacketStart),
                        field("data_end", 4, 4, true, false, FieldKind::PacketEnd),
                        field("data_meta", 8, 4, true, false, FieldKind::PacketMeta),
                        field("ingress_ifindex", 12, 4, true, false, FieldKind::Scalar),
                        field("rx_queue_index", 16, 4, true, false, FieldKind::Scalar),
                        field("egress_ifindex", 20, 4, true, false, FieldKind::Scalar),
                    ],
                    aligned_access: true,
                    narrow_reads: false,
                },
                &[1, 2, 3, 5, 6, 7, 8, 12, 130, 131, 132, 133],
            ),
        };
        Env {
            name: name.into(),
            eim: false,
            ctx,
            helpers: ids
                .iter()
                .filter_map(|id| helpers::standard(*id).map(|p| (*id, p)))
                .collect(),
            denied_helpers: BTreeMap::new(),
            vars: Vec::new(),
            ret_range: None,
            packet_writable: ty == KernelProgType::Xdp,
            budget: None,
            memory_limit: None,
            allow_budgeted_loops: false,
        }
    }
}
