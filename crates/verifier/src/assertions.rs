//! What each instruction requires before it may run, listed from the instruction alone.
//!
//! This is the middle layer between the instruction model (`rdx_bpf::isa`) and the abstract
//! domains: the explorer evaluates every assertion of an instruction against the current
//! state, and a failed assertion *is* the error message. Changing a rule means changing the
//! listing here or its evaluation in `check.rs`, never the transfer functions.

use rdx_bpf::isa::{AluOp, AtomicOp, Insn, JmpCond, Operand, Reg, Size, Width};

/// Kind of memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A load.
    Read,
    /// A store.
    Write,
    /// Atomic read-modify-write.
    Atomic,
}

/// One requirement of an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Assertion {
    /// The register holds an initialised value.
    Init(Reg),
    /// The register holds a scalar (not a pointer).
    IsScalar(Reg),
    /// `dst op= src` is a legal operation on the types involved (pointer-arithmetic rules).
    Arith {
        /// The ALU operation.
        op: AluOp,
        /// 64-bit, or 32-bit on the low halves.
        width: Width,
        /// The destination register (also the left operand).
        dst: Reg,
        /// The right operand.
        src: Operand,
    },
    /// `size` bytes at `base + off` are valid for the access.
    Mem {
        /// The register holding the base pointer.
        base: Reg,
        /// The instruction's constant offset.
        off: i16,
        /// Bytes accessed.
        size: Size,
        /// Load, store or atomic.
        access: Access,
    },
    /// Storing `src` through `base` does not turn a pointer into readable data.
    StoreNoLeak {
        /// The register holding the destination pointer.
        base: Reg,
        /// The register whose value is stored.
        src: Reg,
        /// Bytes stored.
        size: Size,
    },
    /// `dst <cond> src` compares types that may be compared.
    Compare {
        /// The left operand.
        dst: Reg,
        /// The right operand.
        src: Operand,
        /// 64-bit, or 32-bit on the low halves.
        width: Width,
        /// The comparison.
        cond: JmpCond,
    },
    /// The helper exists, is granted, and its arguments match its prototype.
    HelperArgs {
        /// The helper id the call names.
        id: i32,
    },
    /// The program may leave here: `r0` is an initialised scalar within the hook's range and
    /// no reference is held (entry frame), or `r0` is initialised (subprogram).
    ExitValue,
}

/// The assertions of `insn`, in the order they are checked.
pub fn of(insn: &Insn) -> Vec<Assertion> {
    use Assertion::*;
    match *insn {
        Insn::Alu {
            width,
            op,
            dst,
            src,
        } => {
            let mut v = Vec::with_capacity(3);
            if let Operand::Reg(r) = src {
                v.push(Init(r));
            }
            if !matches!(op, AluOp::Mov | AluOp::MovSx(_)) {
                v.push(Init(dst));
            }
            if let AluOp::MovSx(_) = op {
                if let Operand::Reg(r) = src {
                    v.push(IsScalar(r));
                }
            }
            v.push(Arith {
                op,
                width,
                dst,
                src,
            });
            v
        }
        Insn::Endian { dst, .. } => vec![Init(dst), IsScalar(dst)],
        Insn::Ja { .. } | Insn::MayGoto { .. } | Insn::LoadImm64 { .. } | Insn::LoadImm64Hi => {
            vec![]
        }
        Insn::Jmp {
            width,
            cond,
            dst,
            src,
            ..
        } => {
            let mut v = vec![Init(dst)];
            if let Operand::Reg(r) = src {
                v.push(Init(r));
            }
            v.push(Compare {
                dst,
                src,
                width,
                cond,
            });
            v
        }
        Insn::Call(rdx_bpf::isa::CallTarget::Helper(id)) => vec![HelperArgs { id }],
        Insn::Call(_) => vec![],
        Insn::Exit => vec![ExitValue],
        Insn::Load {
            size, base, off, ..
        } => vec![
            Init(base),
            Mem {
                base,
                off,
                size,
                access: Access::Read,
            },
        ],
        Insn::Store {
            size,
            base,
            off,
            src,
        } => {
            let mut v = vec![Init(base)];
            if let Operand::Reg(r) = src {
                v.push(Init(r));
                v.push(StoreNoLeak { base, src: r, size });
            }
            v.push(Mem {
                base,
                off,
                size,
                access: Access::Write,
            });
            v
        }
        Insn::Atomic {
            size,
            op,
            base,
            off,
            src,
            ..
        } => {
            let mut v = vec![Init(base), Init(src), IsScalar(src)];
            if op == AtomicOp::CmpXchg {
                v.push(Init(Reg(0)));
                v.push(IsScalar(Reg(0)));
            }
            v.push(Mem {
                base,
                off,
                size,
                access: Access::Atomic,
            });
            v
        }
    }
}

impl std::fmt::Display for Assertion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Assertion::Init(r) => write!(f, "{r} initialised"),
            Assertion::IsScalar(r) => write!(f, "{r} is a scalar"),
            Assertion::Arith { op, dst, src, .. } => write!(f, "{dst} {op:?} {src:?} allowed"),
            Assertion::Mem {
                base,
                off,
                size,
                access,
            } => {
                write!(
                    f,
                    "{access:?} of {} bytes at {base}{off:+} valid",
                    size.bytes()
                )
            }
            Assertion::StoreNoLeak { base, src, .. } => {
                write!(f, "storing {src} through {base} leaks no pointer")
            }
            Assertion::Compare { dst, src, .. } => write!(f, "{dst} comparable with {src:?}"),
            Assertion::HelperArgs { id } => write!(f, "arguments of helper {id} valid"),
            Assertion::ExitValue => write!(f, "exit conditions hold"),
        }
    }
}
