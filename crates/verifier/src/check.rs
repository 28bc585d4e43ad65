//! Evaluation of the assertions of `assertions.rs` against an abstract state. Nothing here
//! changes the state: a failed check is a [`Violation`] naming the rule.

use crate::assertions::{Access, Assertion};
use crate::env::{CtxField, FieldKind, Perm};
use crate::error::{Rule, Violation};
use crate::explore::Explorer;
use crate::helpers::{Arg, HelperProto};
use crate::scalar::Scalar;
use crate::state::{ByteState, Frame, Ptr, PtrKind, State, Value};
use rdx_bpf::isa::{AluOp, JmpCond, Operand, Reg, Size, Width};

/// Where a checked access goes: recorded per instruction for the JIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Region {
    /// Context field at this byte offset of the context structure.
    Ctx {
        offset: u32,
    },
    Stack,
    MapValue {
        map: u32,
    },
    Packet,
    Record,
    HostVar {
        var: u32,
    },
}

fn v(rule: Rule, msg: impl Into<String>) -> Violation {
    Violation::new(rule, msg)
}

pub fn operand_value(state: &State, src: Operand) -> Value {
    match src {
        Operand::Reg(r) => state.reg(r.index()),
        Operand::Imm(i) => Value::scalar(Scalar::constant(i as i64 as u64)),
    }
}

impl Explorer<'_> {
    pub(crate) fn check(&self, a: &Assertion, st: &State) -> Result<(), Violation> {
        match *a {
            Assertion::Init(r) => match st.reg(r.index()) {
                Value::Uninit => Err(v(
                    Rule::UninitRegister,
                    format!("{r} is read before it is written"),
                )),
                _ => Ok(()),
            },
            Assertion::IsScalar(r) => match st.reg(r.index()) {
                Value::Ptr(p) => Err(v(
                    Rule::PointerArith,
                    format!("{r} holds a pointer ({p}) where a scalar is required"),
                )),
                _ => Ok(()),
            },
            Assertion::Arith {
                op,
                width,
                dst,
                src,
            } => self.check_arith(st, op, width, dst, src),
            Assertion::Mem {
                base,
                off,
                size,
                access,
            } => self
                .check_mem(
                    st,
                    base,
                    off as i64,
                    size.bytes() as u64,
                    access,
                    Some(size),
                )
                .map(|_| ()),
            Assertion::StoreNoLeak { base, src, size } => {
                let Value::Ptr(p) = st.reg(src.index()) else {
                    return Ok(());
                };
                match st.reg(base.index()) {
                    Value::Ptr(b) if matches!(b.kind, PtrKind::Stack { .. }) => {
                        if size != Size::DW {
                            Err(v(
                                Rule::PointerLeak,
                                format!("partial spill of pointer {src} ({p}) to the stack"),
                            ))
                        } else {
                            Ok(())
                        }
                    }
                    Value::Ptr(b) => Err(v(
                        Rule::PointerLeak,
                        format!(
                            "storing pointer {src} ({p}) into {} memory leaks an address",
                            b.kind.name()
                        ),
                    )),
                    _ => Ok(()),
                }
            }
            Assertion::Compare {
                dst,
                src,
                width,
                cond,
            } => self.check_compare(st, dst, src, width, cond),
            Assertion::HelperArgs { id } => self.check_helper(st, id),
            Assertion::ExitValue => self.check_exit(st),
        }
    }

    fn check_arith(
        &self,
        st: &State,
        op: AluOp,
        width: Width,
        dst: Reg,
        src: Operand,
    ) -> Result<(), Violation> {
        let a = st.reg(dst.index());
        let b = operand_value(st, src);
        let is_mov = matches!(op, AluOp::Mov | AluOp::MovSx(_));
        let (dp, sp) = (
            matches!(a, Value::Ptr(_)) && !is_mov,
            matches!(b, Value::Ptr(_)),
        );
        if !dp && !sp {
            return Ok(());
        }
        if is_mov {
            if width == Width::W32 {
                return Err(v(
                    Rule::PointerLeak,
                    format!("32-bit move of pointer {src:?} truncates an address"),
                ));
            }
            return Ok(());
        }
        if width == Width::W32 {
            // The one 32-bit operation on pointers real code needs: clang computes
            // `ctx->data_end - ctx->data` of `u32` fields as `w2 -= w1`. The difference of
            // two pointers into one region is an offset, not an address: nothing leaks.
            if let (Value::Ptr(p), Value::Ptr(q), AluOp::Sub) = (a, b, op) {
                if same_region(p.kind, q.kind) {
                    return Ok(());
                }
            }
            return Err(v(
                Rule::PointerArith,
                format!("32-bit arithmetic on pointer in {dst}"),
            ));
        }
        match (a, b, op) {
            (Value::Ptr(p), Value::Ptr(q), AluOp::Sub) => {
                if same_region(p.kind, q.kind) {
                    Ok(())
                } else {
                    Err(v(
                        Rule::PointerArith,
                        format!(
                            "subtracting pointers into different regions ({} - {})",
                            p.kind.name(),
                            q.kind.name()
                        ),
                    ))
                }
            }
            (Value::Ptr(_), Value::Ptr(_), _) => {
                Err(v(Rule::PointerArith, format!("{op:?} of two pointers")))
            }
            (Value::Ptr(p), Value::Scalar { val, .. }, AluOp::Add | AluOp::Sub)
            | (Value::Scalar { val, .. }, Value::Ptr(p), AluOp::Add) => ptr_offset_ok(&p, &val, op),
            (Value::Ptr(p), _, _) | (_, Value::Ptr(p), _) => Err(v(
                Rule::PointerArith,
                format!(
                    "{op:?} on a pointer ({p}): only adding or subtracting a scalar is allowed"
                ),
            )),
            _ => Ok(()),
        }
    }

    fn check_compare(
        &self,
        st: &State,
        dst: Reg,
        src: Operand,
        width: Width,
        cond: JmpCond,
    ) -> Result<(), Violation> {
        let a = st.reg(dst.index());
        let b = operand_value(st, src);
        match (a, b) {
            (Value::Scalar { .. }, Value::Scalar { .. }) => Ok(()),
            (Value::Ptr(p), Value::Scalar { val, .. })
            | (Value::Scalar { val, .. }, Value::Ptr(p)) => {
                let null_check = matches!(cond, JmpCond::Eq | JmpCond::Ne);
                if null_check
                    && val.is_const(0)
                    && width == Width::W64
                    && p.off == 0
                    && !p.has_var_off()
                {
                    Ok(())
                } else {
                    Err(v(
                        Rule::PointerCompare,
                        format!("comparing pointer {p} with a number other than a null check"),
                    ))
                }
            }
            (Value::Ptr(p), Value::Ptr(q)) => {
                let pkt = |k| {
                    matches!(
                        k,
                        PtrKind::Packet | PtrKind::PacketEnd | PtrKind::PacketMeta
                    )
                };
                if width == Width::W64
                    && cond != JmpCond::Set
                    && !matches!(
                        cond,
                        JmpCond::Sgt | JmpCond::Sge | JmpCond::Slt | JmpCond::Sle
                    )
                    && pkt(p.kind)
                    && pkt(q.kind)
                {
                    Ok(())
                } else {
                    Err(v(
                        Rule::PointerCompare,
                        format!("comparing pointers {p} and {q}"),
                    ))
                }
            }
            _ => Ok(()),
        }
    }

    fn check_exit(&self, st: &State) -> Result<(), Violation> {
        let r0 = st.reg(0);
        if st.frames.len() > 1 {
            // As in the kernel, a subprogram may return without setting r0 (a `void`
            // function): the caller gets an uninitialised r0, which it may not read.
            return match r0 {
                Value::Ptr(p)
                    if p.kind
                        == (PtrKind::Stack {
                            frame: (st.frames.len() - 1) as u8,
                        }) =>
                {
                    Err(v(
                        Rule::PointerLeak,
                        "a function returns a pointer to its own stack",
                    ))
                }
                _ => Ok(()),
            };
        }
        match r0 {
            Value::Uninit => return Err(v(Rule::ReturnValue, "r0 is not set at program exit")),
            Value::Ptr(p) => {
                return Err(v(
                    Rule::PointerLeak,
                    format!("r0 holds a pointer ({p}) at program exit"),
                ))
            }
            Value::Scalar { val, .. } => {
                if let Some((lo, hi)) = self.env.ret_range {
                    if val.smin < lo || val.smax > hi {
                        return Err(v(
                            Rule::ReturnValue,
                            format!(
                                "r0 = {val} may be outside the hook's return range [{lo}, {hi}]"
                            ),
                        ));
                    }
                }
            }
        }
        if let Some(r) = st.refs.first() {
            return Err(v(
                Rule::UnreleasedReference,
                format!(
                    "ring-buffer record (ref {r}) is neither submitted nor discarded on this path"
                ),
            ));
        }
        Ok(())
    }

    /// Checks an access of `size` bytes at `reg + off`; returns where it goes.
    pub(crate) fn check_mem(
        &self,
        st: &State,
        base: Reg,
        off: i64,
        size: u64,
        access: Access,
        insn_size: Option<Size>,
    ) -> Result<Region, Violation> {
        match st.reg(base.index()) {
            Value::Uninit => Err(v(
                Rule::UninitRegister,
                format!("{base} is read before it is written"),
            )),
            Value::Scalar { val, .. } => Err(v(
                Rule::InvalidMemBase,
                format!("{base} = {val} is a number, not a pointer: memory access through it"),
            )),
            Value::Ptr(p) => {
                self.check_ptr_mem(st, &p, off, size, access, insn_size, &base.to_string())
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check_ptr_mem(
        &self,
        st: &State,
        p: &Ptr,
        off: i64,
        size: u64,
        access: Access,
        insn_size: Option<Size>,
        what: &str,
    ) -> Result<Region, Violation> {
        let write = access != Access::Read;
        // The fixed part of the address, relative to the region start. Pointer arithmetic
        // keeps `p.off` within 2^29 and an instruction's offset is 16 bits, but this is where
        // a wrong offset would become an access: compute it so that it cannot wrap, and keep
        // every later `start + size` (size <= 2^29) far from overflow.
        let start = match p.off.checked_add(off) {
            Some(s) if s.unsigned_abs() < (MAX_PTR_OFF as u64) << 1 => s,
            _ => {
                return Err(v(
                    Rule::OutOfBounds,
                    format!("{what} = {p}: offset {off} takes the access out of any region"),
                ))
            }
        };
        if size > crate::helpers::MAX_MEM_ARG {
            return Err(v(
                Rule::OutOfBounds,
                format!("{what}: access of {size} bytes is larger than any region"),
            ));
        }
        // Range of offsets touched, relative to the region start, in wide arithmetic.
        let lo = p.off as i128 + p.var.smin as i128 + off as i128;
        let hi = p.off as i128 + p.var.smax as i128 + off as i128 + size as i128;
        let bounded = |limit: u64, name: &str| -> Result<(), Violation> {
            if p.var.smin < 0 && p.has_var_off() {
                return Err(v(
                    Rule::OutOfBounds,
                    format!("{what} = {p}: variable offset may be negative"),
                ));
            }
            if lo < 0 || hi > limit as i128 {
                return Err(v(
                    Rule::OutOfBounds,
                    format!("{what} = {p}: access of {size} bytes at offset {off} reaches [{lo}, {hi}) outside the {limit}-byte {name}"),
                ));
            }
            Ok(())
        };
        if access == Access::Atomic {
            if let Some(sz) = insn_size {
                let align = sz.bytes() as u64;
                let known =
                    p.var.bits.mask & (align - 1) == 0 && p.var.bits.value & (align - 1) == 0;
                if !known || start.rem_euclid(align as i64) != 0 {
                    return Err(v(
                        Rule::Misaligned,
                        format!("atomic access of {align} bytes at {what}{off:+} is not aligned"),
                    ));
                }
            }
        }
        match p.kind {
            PtrKind::MapValueOrNull { .. } | PtrKind::RecordOrNull { .. } => Err(v(
                Rule::NullDeref,
                format!("{what} = {p} may be null: check it against 0 before the access"),
            )),
            PtrKind::MapObj { .. } | PtrKind::PacketEnd => Err(v(
                Rule::InvalidMemBase,
                format!("{what} = {p} cannot be dereferenced"),
            )),
            PtrKind::MapValue { map } => {
                let m = &self.maps[map as usize];
                if write && m.read_only {
                    return Err(v(
                        Rule::ReadOnly,
                        format!("map `{}` is read-only for programs", m.name),
                    ));
                }
                bounded(m.value_size as u64, "map value").map(|_| Region::MapValue { map })
            }
            PtrKind::Record { size: rs, .. } => {
                bounded(rs as u64, "ring-buffer record").map(|_| Region::Record)
            }
            PtrKind::HostVar { var } => {
                let hv = &self.env.vars[var as usize];
                let perm = if write { hv.write } else { hv.read };
                if access == Access::Atomic && hv.read != Perm::Allowed {
                    return Err(v(
                        Rule::EimVariable,
                        format!("atomic access to variable `{}` needs read access", hv.name),
                    ));
                }
                match perm {
                    Perm::Allowed => {}
                    Perm::NotInHook | Perm::NotInClass => {
                        return Err(v(
                            Rule::EimVariable,
                            format!(
                                "{} of host variable `{}` is not granted{}",
                                if write { "write" } else { "read" },
                                hv.name,
                                if perm == Perm::NotInClass {
                                    " to this class"
                                } else {
                                    " by the host"
                                }
                            ),
                        ))
                    }
                }
                bounded(hv.size as u64, "host variable").map(|_| Region::HostVar { var })
            }
            PtrKind::Packet | PtrKind::PacketMeta => {
                if write && !self.env.packet_writable {
                    return Err(v(
                        Rule::ReadOnly,
                        format!("packet data is read-only in {}", self.env.name),
                    ));
                }
                if access == Access::Atomic {
                    return Err(v(
                        Rule::InvalidMemBase,
                        "atomic operations on packet data are not allowed",
                    ));
                }
                if p.var.smin < 0 {
                    return Err(v(
                        Rule::OutOfBounds,
                        format!("{what} = {p}: variable offset may be negative"),
                    ));
                }
                if start < 0 || start + size as i64 > p.range {
                    return Err(v(
                        Rule::OutOfBounds,
                        format!(
                            "{what} = {p}: access of {size} bytes at offset {start} is beyond the {} bytes checked against the packet end",
                            p.range
                        ),
                    ));
                }
                Ok(Region::Packet)
            }
            PtrKind::Stack { frame } => {
                if p.has_var_off() {
                    // Only loads: a write at a variable offset would have to mark every byte
                    // it may touch and drop every spill it may hit; a helper buffer would
                    // need the same care for the bytes the helper reads and writes.
                    if access != Access::Read || insn_size.is_none() {
                        return Err(v(
                            Rule::VarStackOffset,
                            format!(
                                "{what} = {p}: stack write or helper buffer at a variable offset"
                            ),
                        ));
                    }
                    let fr = &st.frames[frame as usize];
                    return check_stack_var_read(fr, p, off, size, lo, hi, what)
                        .map(|_| Region::Stack);
                }
                if start < -(rdx_bpf::isa::STACK_SIZE as i64) {
                    return Err(v(
                        Rule::StackLimit,
                        format!("stack access at fp{start} is below the 512-byte frame"),
                    ));
                }
                if start + size as i64 > 0 {
                    return Err(v(
                        Rule::OutOfBounds,
                        format!(
                            "stack access of {size} bytes at fp{start} is above the frame pointer"
                        ),
                    ));
                }
                if insn_size.is_some() && start.rem_euclid(size as i64) != 0 {
                    return Err(v(
                        Rule::Misaligned,
                        format!("stack access of {size} bytes at fp{start} is misaligned"),
                    ));
                }
                let fr = &st.frames[frame as usize];
                if access == Access::Atomic && fr.slot(Frame::locate(start).0).holds_pointer() {
                    return Err(v(
                        Rule::PointerLeak,
                        format!("atomic operation on the spilled pointer at fp{start}"),
                    ));
                }
                if access != Access::Write {
                    check_stack_init(fr, start, size, insn_size.is_none(), what)?;
                }
                Ok(Region::Stack)
            }
            PtrKind::Ctx => {
                if p.has_var_off() {
                    return Err(v(
                        Rule::CtxAccess,
                        format!("{what} = {p}: context access with a variable offset"),
                    ));
                }
                if insn_size.is_none() {
                    return Err(v(
                        Rule::HelperArg,
                        "the context cannot be passed as a memory buffer",
                    ));
                }
                if access == Access::Atomic {
                    return Err(v(
                        Rule::CtxAccess,
                        "atomic operations on the context are not allowed",
                    ));
                }
                let layout = &self.env.ctx;
                let Some(f) = layout.field_at(start, size as u32) else {
                    if self.env.eim {
                        if let Some(span) = layout.fields_spanning(start, size as u32) {
                            // One access covering whole adjacent fields (a store the
                            // compiler merged): each field needs the access.
                            for f in &span {
                                self.ctx_perm(f, write)?;
                            }
                            return Ok(Region::Ctx {
                                offset: span[0].offset,
                            });
                        }
                    }
                    return Err(v(
                        Rule::CtxAccess,
                        format!(
                            "no context field of {} covers {size} bytes at offset {start}",
                            self.env.name
                        ),
                    ));
                };
                let inner = start - f.offset as i64;
                if !f.is_array() && size < f.size as u64 && (write || !layout.narrow_reads) {
                    return Err(v(
                        Rule::CtxAccess,
                        format!("{size}-byte access to the {}-byte field `{}` of {}: only full-width accesses", f.size, f.name, self.env.name),
                    ));
                }
                let aligned = if f.is_array() || size < f.size as u64 {
                    !layout.aligned_access || start % size as i64 == 0
                } else {
                    inner == 0
                };
                if !aligned
                    || (f.kind != FieldKind::Scalar && (inner != 0 || size != f.size as u64))
                {
                    return Err(v(
                        Rule::CtxAccess,
                        format!("access of {size} bytes at offset {start} does not match field `{}` ({} bytes at {})", f.name, f.size, f.offset),
                    ));
                }
                self.ctx_perm(f, write)
                    .map(|_| Region::Ctx { offset: f.offset })
            }
        }
    }

    /// Whether the class may read (or write) context field `f`.
    fn ctx_perm(&self, f: &CtxField, write: bool) -> Result<(), Violation> {
        let perm = if write { f.write } else { f.read };
        match perm {
            Perm::Allowed => Ok(()),
            Perm::NotInHook => Err(v(
                if write {
                    Rule::ReadOnly
                } else {
                    Rule::CtxAccess
                },
                format!(
                    "field `{}` of {} is not {}",
                    f.name,
                    self.env.name,
                    if write { "writable" } else { "readable" }
                ),
            )),
            Perm::NotInClass => Err(v(
                Rule::EimContext,
                format!(
                    "the extension class does not grant {} access to field `{}`",
                    if write { "write" } else { "read" },
                    f.name
                ),
            )),
        }
    }

    fn check_helper(&self, st: &State, id: i32) -> Result<(), Violation> {
        let Some(proto) = self.env.helpers.get(&id) else {
            if let Some(d) = self.env.denied_helpers.get(&id) {
                return Err(v(
                    d.rule,
                    format!(
                        "`{}` (id {id}) is not granted to this extension class",
                        d.name
                    ),
                ));
            }
            return Err(v(
                Rule::UnknownHelper,
                format!("helper id {id} does not exist in {}", self.env.name),
            ));
        };
        self.check_args(st, proto)
    }

    fn check_args(&self, st: &State, proto: &HelperProto) -> Result<(), Violation> {
        let arg = |i: usize| st.reg(i + 1);
        let scalar_arg = |i: usize| -> Result<Scalar, Violation> {
            match arg(i) {
                Value::Scalar { val, .. } => Ok(val),
                Value::Uninit => Err(v(
                    Rule::UninitRegister,
                    format!(
                        "r{} (argument {} of {}) is not set",
                        i + 1,
                        i + 1,
                        proto.name
                    ),
                )),
                Value::Ptr(p) => Err(v(
                    Rule::PointerLeak,
                    format!(
                        "r{} = {p} passed where {} expects a number",
                        i + 1,
                        proto.name
                    ),
                )),
            }
        };
        let map_of_arg0 = || match arg(0) {
            Value::Ptr(Ptr {
                kind: PtrKind::MapObj { map },
                ..
            }) => Some(map),
            _ => None,
        };
        // Numbers first, so that a size constraint is reported before the memory it sizes.
        let order = proto
            .args
            .iter()
            .enumerate()
            .filter(|(_, a)| {
                matches!(
                    a,
                    Arg::Scalar | Arg::ScalarIn { .. } | Arg::Size { .. } | Arg::ConstSize
                )
            })
            .chain(proto.args.iter().enumerate().filter(|(_, a)| {
                !matches!(
                    a,
                    Arg::Scalar | Arg::ScalarIn { .. } | Arg::Size { .. } | Arg::ConstSize
                )
            }));
        for (i, a) in order {
            let reg = format!("r{}", i + 1);
            let bad = |msg: String| {
                v(
                    Rule::HelperArg,
                    format!("{reg} (argument {} of {}): {msg}", i + 1, proto.name),
                )
            };
            let mem = |size: u64, access: Access| -> Result<(), Violation> {
                match arg(i) {
                    Value::Ptr(p) => self
                        .check_ptr_mem(st, &p, 0, size, access, None, &reg)
                        .map(|_| ()),
                    Value::Uninit => Err(v(Rule::UninitRegister, format!("{reg} is not set"))),
                    Value::Scalar { val, .. } => {
                        Err(bad(format!("expected a pointer to memory, found {val}")))
                    }
                }
            };
            match *a {
                Arg::Scalar => {
                    scalar_arg(i)?;
                }
                Arg::ScalarIn { min, max } => {
                    let s = scalar_arg(i)?;
                    if s.smin < min || s.smax > max {
                        return Err(v(
                            Rule::EimArgument,
                            format!(
                                "{reg} = {s} may violate the constraint [{min}, {max}] of {}",
                                proto.name
                            ),
                        ));
                    }
                }
                Arg::Ctx => match arg(i) {
                    Value::Ptr(p) if p.kind == PtrKind::Ctx && p.off == 0 && !p.has_var_off() => {}
                    other => {
                        return Err(bad(format!("expected the context pointer, found {other}")))
                    }
                },
                Arg::Map { ty } => match arg(i) {
                    Value::Ptr(Ptr {
                        kind: PtrKind::MapObj { map },
                        ..
                    }) => {
                        if let Some(t) = ty {
                            let m = &self.maps[map as usize];
                            if m.map_type.to_kernel() != t {
                                return Err(bad(format!(
                                    "map `{}` has the wrong type ({:?})",
                                    m.name, m.map_type
                                )));
                            }
                        }
                    }
                    other => return Err(bad(format!("expected a map, found {other}"))),
                },
                Arg::DataMap => match arg(i) {
                    Value::Ptr(Ptr {
                        kind: PtrKind::MapObj { map },
                        ..
                    }) => {
                        let m = &self.maps[map as usize];
                        if !crate::helpers::is_data_map(m.map_type) {
                            return Err(bad(format!(
                                "cannot pass map `{}` of type {:?} (kernel type {}) to {}: only hash, array and LPM maps hold values a program may read or write",
                                m.name,
                                m.map_type,
                                m.map_type.to_kernel(),
                                proto.name
                            )));
                        }
                    }
                    other => return Err(bad(format!("expected a map, found {other}"))),
                },
                Arg::MapKey | Arg::MapValue => {
                    let Some(map) = map_of_arg0() else {
                        return Err(bad("no map in r1".into()));
                    };
                    let m = &self.maps[map as usize];
                    let size = if *a == Arg::MapKey {
                        m.key_size
                    } else {
                        m.value_size
                    };
                    mem(size as u64, Access::Read)?;
                }
                Arg::ReadMem { size_arg } | Arg::WriteMem { size_arg } => {
                    let s = scalar_arg(size_arg)?;
                    let access = if matches!(a, Arg::ReadMem { .. }) {
                        Access::Read
                    } else {
                        Access::Write
                    };
                    mem(s.umax.max(1), access)?;
                }
                Arg::ReadMemFixed { size } => mem(size as u64, Access::Read)?,
                Arg::Size { max, declared } => {
                    let s = scalar_arg(i)?;
                    if s.umin == 0 || s.umax > max {
                        let msg = format!("size {s} must be within [1, {max}]");
                        return Err(if declared && s.umin > 0 {
                            v(
                                Rule::EimArgument,
                                format!("{reg} (argument {} of {}): {msg}", i + 1, proto.name),
                            )
                        } else {
                            bad(msg)
                        });
                    }
                }
                Arg::ConstSize => {
                    let s = scalar_arg(i)?;
                    match s.const_value() {
                        Some(c) if c > 0 && c <= crate::helpers::MAX_MEM_ARG => {}
                        _ => return Err(bad(format!("size {s} must be a positive constant"))),
                    }
                }
                Arg::Record => match arg(i) {
                    Value::Ptr(p)
                        if matches!(p.kind, PtrKind::Record { .. })
                            && p.off == 0
                            && !p.has_var_off() => {}
                    other => {
                        return Err(bad(format!(
                            "expected an unmodified ring-buffer record, found {other}"
                        )))
                    }
                },
            }
        }
        if proto.tail_call && !st.refs.is_empty() {
            return Err(v(
                Rule::UnreleasedReference,
                "tail call while holding a ring-buffer record",
            ));
        }
        Ok(())
    }
}

/// A load at a variable stack offset: every address it may read, `[lo, hi)` relative to the
/// frame pointer (computed wide by the caller), lies in the frame, every possible start is
/// aligned to `size`, and every byte of the range is initialised and no part of a spilled
/// pointer (reading pointer bytes as a number would hand the program a host address).
fn check_stack_var_read(
    fr: &Frame,
    p: &Ptr,
    off: i64,
    size: u64,
    lo: i128,
    hi: i128,
    what: &str,
) -> Result<(), Violation> {
    if lo < -(rdx_bpf::isa::STACK_SIZE as i128) {
        return Err(v(
            Rule::StackLimit,
            format!("{what} = {p}: a read of {size} bytes at offset {off} may start at fp{lo}, below the 512-byte frame"),
        ));
    }
    if hi > 0 {
        return Err(v(
            Rule::OutOfBounds,
            format!("{what} = {p}: a read of {size} bytes at offset {off} may reach fp+{hi}, above the frame pointer"),
        ));
    }
    // Every start is `p.off + off + var`; its low bits are known when the variable part's are.
    let low = size - 1;
    let fixed = (p.off + off) as u64;
    if p.var.bits.mask & low != 0 || fixed.wrapping_add(p.var.bits.value) & low != 0 {
        return Err(v(
            Rule::Misaligned,
            format!("{what} = {p}: a read of {size} bytes at offset {off} may be misaligned"),
        ));
    }
    // The range lies in [-512, 0), so these fit an i64.
    for b in lo as i64..hi as i64 {
        let (k, i) = Frame::locate(b);
        let slot = fr.slot(k);
        if slot.holds_pointer() {
            return Err(v(
                Rule::PointerLeak,
                format!("{what} = {p}: a read at a variable offset may cover the spilled pointer at fp{}", -8 * (k as i64 + 1)),
            ));
        }
        if slot.byte(i) == ByteState::Invalid {
            return Err(v(
                Rule::UninitStack,
                format!("{what} = {p}: a read at a variable offset may cover stack byte fp{b}, never written"),
            ));
        }
    }
    Ok(())
}

fn check_stack_init(
    fr: &Frame,
    start: i64,
    size: u64,
    as_buffer: bool,
    what: &str,
) -> Result<(), Violation> {
    for b in 0..size as i64 {
        let (k, i) = Frame::locate(start + b);
        let slot = fr.slot(k);
        if as_buffer && slot.holds_pointer() {
            return Err(v(
                Rule::PointerLeak,
                format!(
                    "{what}: the buffer at fp{} contains a spilled pointer",
                    start + b
                ),
            ));
        }
        if slot.byte(i) == ByteState::Invalid {
            return Err(v(
                Rule::UninitStack,
                format!(
                    "{what}: stack byte fp{} is read before it is written",
                    start + b
                ),
            ));
        }
    }
    Ok(())
}

fn same_region(a: PtrKind, b: PtrKind) -> bool {
    let pkt = |k| {
        matches!(
            k,
            PtrKind::Packet | PtrKind::PacketEnd | PtrKind::PacketMeta
        )
    };
    (pkt(a) && pkt(b))
        || (a == b && !a.is_nullable() && !matches!(a, PtrKind::MapObj { .. } | PtrKind::Ctx))
}

/// Largest magnitude of a pointer's fixed offset, and of a constant added to a pointer (the
/// kernel's `BPF_MAX_VAR_OFF`). Anything larger is refused: with it, no offset computation
/// the checks do can overflow.
pub(crate) const MAX_PTR_OFF: i64 = 1 << 29;

/// Largest packet offset a bounds check can teach (the kernel's `MAX_PACKET_OFF`).
pub(crate) const MAX_PACKET_OFF: u128 = 0xffff;

/// The fixed offset `off ± c` of a pointer after adding (or subtracting) constant `c`, or
/// `None` when `c` or the result reaches 2^29 in magnitude (computed wide: nothing wraps). The
/// one rule both the check and the transfer function use.
pub(crate) fn const_offset(off: i64, c: u64, sub: bool) -> Option<i64> {
    let c = c as i64 as i128;
    let new = if sub {
        off as i128 - c
    } else {
        off as i128 + c
    };
    let limit = MAX_PTR_OFF as u128;
    (c.unsigned_abs() < limit && new.unsigned_abs() < limit).then_some(new as i64)
}

fn ptr_offset_ok(p: &Ptr, val: &Scalar, op: AluOp) -> Result<(), Violation> {
    if let Some(c) = val.const_value() {
        if const_offset(p.off, c, op == AluOp::Sub).is_none() {
            return Err(v(
                Rule::PointerArith,
                format!(
                    "{op:?} of {} to a {} pointer at offset {} leaves (-2^29, 2^29)",
                    c as i64,
                    p.kind.name(),
                    p.off
                ),
            ));
        }
    }
    match p.kind {
        PtrKind::MapObj { .. } | PtrKind::PacketEnd => Err(v(
            Rule::PointerArith,
            format!("arithmetic on {} is not allowed", p.kind.name()),
        )),
        k if k.is_nullable() => Err(v(
            Rule::PointerArith,
            format!("arithmetic on {p} before its null check"),
        )),
        PtrKind::Ctx if val.const_value().is_none() => Err(v(
            Rule::PointerArith,
            "only constant offsets may be added to the context pointer",
        )),
        PtrKind::Packet | PtrKind::PacketMeta
            if val.const_value().is_none() && (op == AluOp::Sub || val.umax > 0xffff) =>
        {
            Err(v(
                Rule::PointerArith,
                format!("variable packet offset {val} must be added and at most 65535"),
            ))
        }
        _ => Ok(()),
    }
}

/// What `a cond b` (taken or not) says about pointers `a` and `b`: `Some((true, strict))` for
/// `a <= b` (`a < b` when `strict`), `Some((false, strict))` for `b <= a` (`b < a`), `None`
/// when it says neither.
pub(crate) fn implies_le(cond: JmpCond, taken: bool) -> Option<(bool, bool)> {
    use JmpCond::*;
    match (cond, taken) {
        (Le, true) | (Gt, false) => Some((true, false)),
        (Lt, true) | (Ge, false) => Some((true, true)),
        (Ge, true) | (Lt, false) => Some((false, false)),
        (Gt, true) | (Le, false) => Some((false, true)),
        _ => None,
    }
}
