//! The abstract state: typed registers, the stack of each call frame as an array of 8-byte
//! slots (spilled registers or per-byte initialisation), and the references a path holds.
//! Also the order between states ([`State::subsumes`]) that path pruning relies on.

use crate::scalar::Scalar;
use std::fmt;

/// What a pointer points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PtrKind {
    /// The hook's context structure.
    Ctx,
    /// The stack of call frame `frame` (0 = the entry program).
    Stack {
        /// Call depth of the frame (0 = the entry program).
        frame: u8,
    },
    /// A value of map `map` (index into the program's map table).
    MapValue {
        /// Index into the program's map table.
        map: u32,
    },
    /// The result of a map lookup before its null check.
    MapValueOrNull {
        /// Index into the program's map table.
        map: u32,
    },
    /// A map handle, only good as a helper argument.
    MapObj {
        /// Index into the program's map table.
        map: u32,
    },
    /// Packet data start plus an offset.
    Packet,
    /// One past the last packet byte; only good for comparisons.
    PacketEnd,
    /// Packet metadata start.
    PacketMeta,
    /// A ring-buffer record of `size` bytes, holding reference `ref_id` until submitted.
    Record {
        /// The reference the record holds until submitted or discarded.
        ref_id: u32,
        /// Bytes of the record.
        size: u32,
    },
    /// The result of `ringbuf_reserve` before its null check.
    RecordOrNull {
        /// The reference the record will hold once checked non-null.
        ref_id: u32,
        /// Bytes requested.
        size: u32,
    },
    /// A host variable (EIM state capability) by spec index.
    HostVar {
        /// Index into the environment's host variables.
        var: u32,
    },
}

impl PtrKind {
    /// Whether the pointer may be null until a comparison rules it out.
    pub fn is_nullable(self) -> bool {
        matches!(
            self,
            PtrKind::MapValueOrNull { .. } | PtrKind::RecordOrNull { .. }
        )
    }

    /// The kind's name in logs and messages (the kernel verifier's where it has one).
    pub fn name(self) -> &'static str {
        match self {
            PtrKind::Ctx => "ctx",
            PtrKind::Stack { .. } => "stack",
            PtrKind::MapValue { .. } => "map_value",
            PtrKind::MapValueOrNull { .. } => "map_value_or_null",
            PtrKind::MapObj { .. } => "map_ptr",
            PtrKind::Packet => "pkt",
            PtrKind::PacketEnd => "pkt_end",
            PtrKind::PacketMeta => "pkt_meta",
            PtrKind::Record { .. } => "ringbuf_mem",
            PtrKind::RecordOrNull { .. } => "ringbuf_mem_or_null",
            PtrKind::HostVar { .. } => "host_var",
        }
    }
}

/// A typed pointer: base of `kind`, plus a fixed offset `off` and a variable offset `var`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ptr {
    /// What the pointer points into.
    pub kind: PtrKind,
    /// Constant offset from the base, in bytes.
    pub off: i64,
    /// Variable offset from the base, in bytes.
    pub var: Scalar,
    /// Nullable kinds: the identity shared by copies, so that one null check refines all.
    /// Packet pointers: the identity of the variable offset (0 when `var` is constant zero).
    pub id: u32,
    /// Packet pointers: `base + var + range <= pkt_end` is known.
    pub range: i64,
}

impl Ptr {
    /// A pointer to the start of `kind`, with no offset.
    pub fn new(kind: PtrKind) -> Ptr {
        Ptr {
            kind,
            off: 0,
            var: Scalar::constant(0),
            id: 0,
            range: 0,
        }
    }

    /// Whether the offset has a variable part (not just `off`).
    pub fn has_var_off(&self) -> bool {
        !self.var.is_const(0)
    }
}

/// The abstract value of one register or spilled slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Value {
    /// Never written: reading it is an error.
    #[default]
    Uninit,
    /// A number; copies share a nonzero `id` so that a comparison refines every copy.
    Scalar {
        /// The set of values it may hold.
        val: Scalar,
        /// Identity shared by copies (0: none).
        id: u32,
    },
    /// A pointer.
    Ptr(Ptr),
}

impl Value {
    /// A scalar in `val`, with no copies to refine.
    pub fn scalar(val: Scalar) -> Value {
        Value::Scalar { val, id: 0 }
    }

    /// Any number.
    pub fn unknown() -> Value {
        Value::scalar(Scalar::UNKNOWN)
    }

    /// A pointer to the start of `kind`.
    pub fn ptr(kind: PtrKind) -> Value {
        Value::Ptr(Ptr::new(kind))
    }

    /// The value's set, when it is a number.
    pub fn as_scalar(&self) -> Option<Scalar> {
        match self {
            Value::Scalar { val, .. } => Some(*val),
            _ => None,
        }
    }
}

/// Initialisation state of one stack byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteState {
    /// Never written (or overwritten by part of a pointer): reading it is an error.
    Invalid,
    /// Some written scalar data.
    Misc,
    /// Known zero.
    Zero,
}

/// One aligned 8-byte stack slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Slot {
    /// A whole register stored with an aligned 8-byte write: pointers keep their type.
    Spill(Value),
    /// Byte-by-byte initialisation state, byte 0 at the lowest address.
    Bytes([ByteState; 8]),
}

impl Slot {
    /// A slot never written.
    pub const INVALID: Slot = Slot::Bytes([ByteState::Invalid; 8]);

    /// The initialisation state of byte `i` (0 = lowest address).
    pub fn byte(&self, i: usize) -> ByteState {
        match self {
            Slot::Spill(Value::Scalar { val, .. }) => {
                if val.const_value() == Some(0) {
                    ByteState::Zero
                } else {
                    ByteState::Misc
                }
            }
            Slot::Spill(Value::Uninit) => ByteState::Invalid,
            Slot::Spill(_) => ByteState::Misc,
            Slot::Bytes(b) => b[i],
        }
    }

    /// Whether the slot holds a spilled pointer.
    pub fn holds_pointer(&self) -> bool {
        matches!(self, Slot::Spill(Value::Ptr(_)))
    }
}

/// One call frame: registers and the stack below its frame pointer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// `r0`..`r10`.
    pub regs: [Value; 11],
    /// Slot `k` holds bytes `[-8(k+1), -8k)` relative to `r10`; missing slots are invalid.
    pub stack: Vec<Slot>,
    /// Instruction index of the call that created this frame (unused for frame 0).
    pub callsite: usize,
    /// First instruction of the subprogram this frame runs.
    pub subprog: usize,
    /// Which call created this frame: the path's count of calls made before it
    /// ([`State::calls`]). Two frames at the same depth with the same number are one
    /// activation; a frame entered again by a later call has a larger one.
    pub activation: u32,
    /// Fall-through edges of `may_goto` this activation has taken. Each takes one unit of
    /// the activation's hidden counter at run time, so a cycle along which this grows
    /// ends when the counter runs out; a cycle along which it does not (through a taken
    /// edge, or through a new activation whose counter starts full) is not bounded by it.
    pub may_goto_passes: u32,
}

impl Frame {
    /// A fresh frame for the subprogram starting at `subprog`, called from `callsite`: every
    /// register uninitialised, the stack invalid.
    pub fn new(subprog: usize, callsite: usize) -> Frame {
        Frame {
            regs: [Value::Uninit; 11],
            stack: Vec::new(),
            callsite,
            subprog,
            activation: 0,
            may_goto_passes: 0,
        }
    }

    /// Stack slot `k` (bytes `[-8(k+1), -8k)` from `r10`); slots never touched are invalid.
    pub fn slot(&self, k: usize) -> Slot {
        self.stack.get(k).copied().unwrap_or(Slot::INVALID)
    }

    /// Stack slot `k` for writing, grown if needed.
    pub fn slot_mut(&mut self, k: usize) -> &mut Slot {
        if self.stack.len() <= k {
            self.stack.resize(k + 1, Slot::INVALID);
        }
        &mut self.stack[k]
    }

    /// Slot index and byte within the slot of stack offset `off` (negative).
    pub fn locate(off: i64) -> (usize, usize) {
        let pos = (-off - 1) as usize; // 0 = byte at -1
        let k = pos / 8;
        // Byte order inside a slot: byte 0 is the lowest address (-8(k+1)).
        let within = 7 - pos % 8;
        (k, within)
    }
}

/// The state of one path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The call frames, the entry program's first; never empty.
    pub frames: Vec<Frame>,
    /// Ring-buffer records reserved and not yet submitted or discarded.
    pub refs: Vec<u32>,
    /// Calls made along the path so far (saturating): numbers each frame's activation.
    pub calls: u32,
}

impl State {
    /// The innermost frame.
    pub fn cur(&self) -> &Frame {
        self.frames.last().expect("a state always has a frame")
    }

    /// The innermost frame, for writing.
    pub fn cur_mut(&mut self) -> &mut Frame {
        self.frames.last_mut().expect("a state always has a frame")
    }

    /// Register `r` of the innermost frame.
    pub fn reg(&self, r: usize) -> Value {
        self.cur().regs[r]
    }

    /// Sets register `r` of the innermost frame.
    pub fn set(&mut self, r: usize, v: Value) {
        self.cur_mut().regs[r] = v;
    }

    /// Applies `f` to every register and spilled slot of every frame.
    pub fn for_each_value(&mut self, mut f: impl FnMut(&mut Value)) {
        for fr in &mut self.frames {
            for r in fr.regs.iter_mut() {
                f(r);
            }
            for s in fr.stack.iter_mut() {
                if let Slot::Spill(v) = s {
                    f(v);
                }
            }
        }
    }

    /// True when every concrete state `other` describes is also described by `self`, so that
    /// a path reaching `other` behaves as some path already verified from `self`.
    pub fn subsumes(&self, other: &State) -> bool {
        self.subsumes_live(other, &[u16::MAX; 8], &[u64::MAX; 8])
    }

    /// [`State::subsumes`] restricted to what is live: in frame `i`, only the registers in
    /// `regs[i]` (bit `r` for `r`) and the stack slots in `slots[i]` (bit `k` for slot `k`)
    /// are compared; the others may differ, because no path from here reads them before
    /// overwriting them. Frames beyond the masks' length compare in full.
    pub fn subsumes_live(&self, other: &State, regs: &[u16], slots: &[u64]) -> bool {
        if self.frames.len() != other.frames.len() || self.refs.len() != other.refs.len() {
            return false;
        }
        let mut ids = IdMap::default();
        for (a, b) in self.refs.iter().zip(&other.refs) {
            if !ids.map(*a, *b) {
                return false;
            }
        }
        for (i, (fa, fb)) in self.frames.iter().zip(&other.frames).enumerate() {
            if fa.callsite != fb.callsite || fa.subprog != fb.subprog {
                return false;
            }
            let live_regs = regs.get(i).copied().unwrap_or(u16::MAX);
            let live_slots = slots.get(i).copied().unwrap_or(u64::MAX);
            for (r, (a, b)) in fa.regs.iter().zip(&fb.regs).enumerate() {
                if live_regs & (1 << r) != 0 && !value_subsumes(a, b, &mut ids) {
                    return false;
                }
            }
            for k in 0..fa.stack.len() {
                // A frame has at most 64 slots (512 bytes).
                if k < 64 && live_slots & (1 << k) == 0 {
                    continue;
                }
                if !slot_subsumes(&fa.slot(k), &fb.slot(k), &mut ids) {
                    return false;
                }
            }
        }
        true
    }

    /// Number of stack bytes frame `i` has touched so far, rounded up to slots.
    pub fn depth(&self, i: usize) -> usize {
        self.frames[i].stack.len() * 8
    }
}

/// A consistent renaming of ids from an explored state to a new one (few ids per state, so a
/// vector beats a map).
#[derive(Default)]
struct IdMap {
    pairs: Vec<(u32, u32)>,
}

impl IdMap {
    fn map(&mut self, old: u32, new: u32) -> bool {
        if old == 0 {
            return true;
        }
        if new == 0 {
            return false;
        }
        for &(o, n) in &self.pairs {
            if o == old || n == new {
                return o == old && n == new;
            }
        }
        self.pairs.push((old, new));
        true
    }
}

fn kind_subsumes(a: PtrKind, b: PtrKind, ids: &mut IdMap) -> bool {
    match (a, b) {
        (PtrKind::Record { ref_id: x, size: s }, PtrKind::Record { ref_id: y, size: t })
        | (
            PtrKind::RecordOrNull { ref_id: x, size: s },
            PtrKind::RecordOrNull { ref_id: y, size: t },
        ) => s == t && ids.map(x, y),
        _ => a == b,
    }
}

fn value_subsumes(a: &Value, b: &Value, ids: &mut IdMap) -> bool {
    match (a, b) {
        (Value::Uninit, _) => true,
        (Value::Scalar { val: x, id: i }, Value::Scalar { val: y, id: j }) => {
            x.contains(y) && ids.map(*i, *j)
        }
        (Value::Ptr(p), Value::Ptr(q)) => {
            kind_subsumes(p.kind, q.kind, ids)
                && p.off == q.off
                && p.var.contains(&q.var)
                && p.range <= q.range
                && ids.map(p.id, q.id)
        }
        _ => false,
    }
}

fn slot_subsumes(a: &Slot, b: &Slot, ids: &mut IdMap) -> bool {
    match (a, b) {
        (Slot::Spill(x), Slot::Spill(y)) => value_subsumes(x, y, ids),
        (Slot::Spill(Value::Scalar { val, id: 0 }), Slot::Bytes(_)) if *val == Scalar::UNKNOWN => {
            (0..8).all(|i| b.byte(i) != ByteState::Invalid)
        }
        (Slot::Spill(Value::Uninit), _) => true,
        (Slot::Spill(_), _) => false,
        (Slot::Bytes(bytes), _) => {
            if !matches!(b, Slot::Bytes(_)) && b.holds_pointer() {
                // Old path saw plain bytes here; a pointer would read differently.
                return bytes.iter().all(|x| *x == ByteState::Invalid);
            }
            bytes.iter().enumerate().all(|(i, x)| match x {
                ByteState::Invalid => true,
                ByteState::Misc => b.byte(i) != ByteState::Invalid,
                ByteState::Zero => b.byte(i) == ByteState::Zero,
            })
        }
    }
}

impl fmt::Display for Ptr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind.name())?;
        match self.kind {
            PtrKind::MapValue { map }
            | PtrKind::MapValueOrNull { map }
            | PtrKind::MapObj { map } => write!(f, "(map={map}")?,
            PtrKind::Stack { frame } => write!(f, "(frame={frame}")?,
            PtrKind::Record { ref_id, size } | PtrKind::RecordOrNull { ref_id, size } => {
                write!(f, "(ref={ref_id},size={size}")?
            }
            PtrKind::HostVar { var } => write!(f, "(var={var}")?,
            _ => write!(f, "(")?,
        }
        write!(f, ",off={}", self.off)?;
        if self.has_var_off() {
            write!(f, ",var={}", self.var)?;
        }
        if self.id != 0 {
            write!(f, ",id={}", self.id)?;
        }
        if matches!(self.kind, PtrKind::Packet | PtrKind::PacketMeta) {
            write!(f, ",range={}", self.range)?;
        }
        write!(f, ")")
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Uninit => write!(f, "uninit"),
            Value::Scalar { val, id } => {
                write!(f, "{val}")?;
                if *id != 0 {
                    write!(f, "#{id}")?;
                }
                Ok(())
            }
            Value::Ptr(p) => write!(f, "{p}"),
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, fr) in self.frames.iter().enumerate() {
            if self.frames.len() > 1 {
                write!(f, "frame{i}: ")?;
            }
            let mut first = true;
            for (r, v) in fr.regs.iter().enumerate() {
                if *v == Value::Uninit {
                    continue;
                }
                if !first {
                    write!(f, " ")?;
                }
                first = false;
                write!(f, "r{r}={v}")?;
            }
            for (k, s) in fr.stack.iter().enumerate() {
                let off = -8 * (k as i64 + 1);
                match s {
                    Slot::Spill(v) => write!(f, " fp{off}={v}")?,
                    Slot::Bytes(b) if b.iter().all(|x| *x == ByteState::Invalid) => {}
                    Slot::Bytes(b) => {
                        let s: String = b
                            .iter()
                            .map(|x| match x {
                                ByteState::Invalid => '?',
                                ByteState::Misc => 'm',
                                ByteState::Zero => '0',
                            })
                            .collect();
                        write!(f, " fp{off}={s}")?
                    }
                }
            }
            if i + 1 < self.frames.len() {
                writeln!(f)?;
            }
        }
        if !self.refs.is_empty() {
            write!(f, " refs={:?}", self.refs)?;
        }
        Ok(())
    }
}
