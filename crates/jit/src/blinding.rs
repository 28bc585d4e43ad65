//! Constant blinding, shared by both code generators: whether a compilation blinds, which
//! constants must be hidden, and the random keys that hide them (`docs/jit.md`, "Constant
//! blinding").

use rdx_bpf::isa::{AluOp, ImmKind, Insn, Operand};

use crate::options::CompileOptions;
use crate::target::Arch;

/// Whether constants are blinded in code compiled with `opts`: asked for, and the target is
/// x86-64. aarch64 instructions are fixed 4-byte words decoded only at 4-byte boundaries,
/// and a constant enters them at most 16 bits at a time inside an opcode (`movz`/`movk`,
/// 12-bit arithmetic immediates), so no program-chosen byte sequence there is an
/// instruction of the program's choosing.
pub(crate) fn blinds_constants(opts: &CompileOptions) -> bool {
    opts.blind_constants && opts.arch == Arch::X86_64
}

/// Whether a program constant may appear in code as it is when blinding: one that fits in
/// 16 bits (sign- or zero-extended) puts at most two chosen bytes next to each other, the
/// rest being all zeros or all ones, as the offsets, masks, ports, ethertypes and loop
/// bounds of real programs do.
pub(crate) fn plain_constant(value: i64) -> bool {
    (-(1 << 15)..(1 << 16)).contains(&value)
}

/// The random keys of one compilation's constant blinding: a stream (splitmix64) that
/// starts from a process-wide secret drawn once from the kernel's random source, at a
/// position no other compilation of this process uses, and gives a fresh key per constant,
/// so that nothing about one key tells anything about another. (One `getrandom` per
/// compilation cost the baseline tier a tenth of its compile time.)
pub(crate) struct BlindingKeys(u64);

impl BlindingKeys {
    pub(crate) fn new() -> Self {
        static SECRET: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        static COMPILATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let secret = *SECRET.get_or_init(|| {
            let mut seed = [0u8; 8];
            // SAFETY: getrandom writes at most `seed.len()` bytes into the buffer.
            let got = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), seed.len(), 0) };
            if got == seed.len() as isize {
                u64::from_le_bytes(seed)
            } else {
                // No random source (seccomp, very early boot): the clock and an address,
                // still unknown to the programs being compiled.
                let clock = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                clock ^ (&seed as *const _ as u64).rotate_left(32)
            }
        });
        let n = COMPILATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A starting point on the stream that depends on the secret and this compilation's
        // number through the mixing function: unrelated to any other compilation's.
        Self(secret ^ mix64(n ^ 0x5851_f42d_4c95_7f2d))
    }

    /// The next key.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }
}

/// splitmix64's output function.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Whether `insn` carries a constant that blinding must hide (see
/// [`plain_constant`]).
pub(crate) fn has_chosen_constant(insn: &Insn) -> bool {
    match *insn {
        Insn::Alu {
            op: AluOp::Lsh | AluOp::Rsh | AluOp::Arsh,
            ..
        } => false,
        Insn::Alu {
            src: Operand::Imm(k),
            ..
        }
        | Insn::Jmp {
            src: Operand::Imm(k),
            ..
        }
        | Insn::Store {
            src: Operand::Imm(k),
            ..
        } => !plain_constant(k as i64),
        Insn::LoadImm64 {
            kind: ImmKind::Imm,
            imm_lo,
            imm_hi,
            ..
        } => !plain_constant(Insn::imm64(imm_lo, imm_hi) as i64),
        _ => false,
    }
}
