//! The compiler driver, last of the compiler's stages: checks the [`CompileOptions`] against
//! its target, has [`crate::plan`] find the program's functions, hands the
//! [`Pipeline::Baseline`] to [`crate::baseline`] and every other pipeline to
//! [`crate::translate`] (one eBPF function at a time into Cranelift IR), compiles that IR for
//! the requested [`Arch`] and lays the machine code out as one relocatable [`Artifact`].
//! Nothing else in the compiler depends on it.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{ExternalName, UserExternalName};
use cranelift_codegen::isa::{self, OwnedTargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::{binemit::Reloc, FinalizedRelocTarget};
use cranelift_frontend::FunctionBuilderContext;
use rdx_bpf::isa::Insn;
use target_lexicon::Triple;

use crate::artifact::{Artifact, RelocKind, Relocation, Symbol};
use crate::baseline;
use crate::blinding::BlindingKeys;
use crate::error::CompileError;
use crate::options::{self, CompileOptions, Pipeline};
use crate::plan;
use crate::translate::{self, NS_FUNC, NS_SYMBOL};
use rdx_region::layout::Arch;

/// Compile-time statistics, for benchmarks and `rdx compile`.
#[derive(Clone, Debug, Default)]
pub struct CompileStats {
    /// Instruction slots compiled.
    pub insns: usize,
    /// Functions compiled (entry plus subprograms).
    pub functions: usize,
    /// Bytes of machine code.
    pub code_bytes: usize,
    /// Wall-clock time of the compilation.
    pub elapsed: Duration,
    /// Guards compiled (elite artifacts).
    pub guards: usize,
    /// Instruction slots not compiled because only cold directions reach them.
    pub dropped_insns: usize,
}

/// A Cranelift code generator for one target, reusable across compilations (and shareable
/// between threads).
pub struct Compiler {
    isa: OwnedTargetIsa,
    /// The same target with [`Pipeline::Fast`] settings, built on first use.
    fast_isa: OnceLock<Result<OwnedTargetIsa, String>>,
    arch: Arch,
    /// Cranelift's per-function working memory, kept between compilations so that each one
    /// does not allocate it afresh. A thread that finds it in use makes its own.
    scratch: Mutex<Scratch>,
}

#[derive(Default)]
struct Scratch {
    ctx: Option<cranelift_codegen::Context>,
    fctx: FunctionBuilderContext,
}

impl Compiler {
    /// A compiler for `arch` with the optimizing pipeline ready (others are built on first use).
    pub fn new(arch: Arch) -> Result<Self, CompileError> {
        Ok(Self {
            isa: build_isa(arch, Pipeline::Optimizing)?,
            fast_isa: OnceLock::new(),
            arch,
            scratch: Mutex::new(Scratch::default()),
        })
    }

    fn isa_for(
        &self,
        pipeline: Pipeline,
        slots: usize,
    ) -> Result<&dyn isa::TargetIsa, CompileError> {
        let fast = match pipeline {
            Pipeline::Optimizing | Pipeline::Baseline => false,
            Pipeline::Fast => true,
            Pipeline::FastAbove(n) => slots > n as usize,
        };
        if !fast {
            return Ok(&*self.isa);
        }
        match self
            .fast_isa
            .get_or_init(|| build_isa(self.arch, Pipeline::Fast).map_err(|e| e.to_string()))
        {
            Ok(isa) => Ok(&**isa),
            Err(reason) => Err(CompileError::Isa {
                arch: self.arch,
                reason: reason.clone(),
            }),
        }
    }

    /// The architecture this compiler emits code for.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// Compiles a decoded, verified program (slot-indexed, subprograms appended).
    pub fn compile(
        &self,
        insns: &[Insn],
        opts: &CompileOptions,
    ) -> Result<(Artifact, CompileStats), CompileError> {
        let start = Instant::now();
        if opts.arch != self.arch {
            return Err(CompileError::Isa {
                arch: opts.arch,
                reason: format!("this compiler targets {}", self.arch),
            });
        }
        if opts.pipeline == Pipeline::Baseline {
            let (artifact, live_slots) = baseline::compile(insns, opts)?;
            let stats = CompileStats {
                insns: insns.len(),
                functions: artifact.meta.functions as usize,
                code_bytes: artifact.code.len(),
                elapsed: start.elapsed(),
                guards: 0,
                dropped_insns: insns.len() - live_slots,
            };
            return Ok((artifact, stats));
        }
        refuse_may_goto(insns)?;
        let opts = &*plan::effective_options(opts, insns);
        if insns.is_empty() {
            return Err(CompileError::Empty);
        }
        let plans = plan::plan_functions(insns)?;
        let depth = plan::max_call_depth(&plans, insns)?;
        plan::check_speculation(insns, opts, depth)?;
        let mut live_slots = 0usize;
        let mut keys = BlindingKeys::new();

        let mut symbols: Vec<Symbol> = Vec::new();
        let mut code: Vec<u8> = Vec::new();
        let mut func_offsets = vec![0u32; plans.len()];
        // Calls between our own functions, patched once every function has an offset.
        let mut local_calls: Vec<(u32, Reloc, u32, i64)> = Vec::new();
        let mut relocations = Vec::new();
        let mut local = None;
        let mut guard = self.scratch.try_lock().ok();
        let scratch: &mut Scratch = match guard.as_deref_mut() {
            Some(s) => s,
            None => local.insert(Scratch::default()),
        };
        let Scratch { ctx, fctx } = scratch;
        let ctx = ctx.get_or_insert_with(cranelift_codegen::Context::new);

        for (fi, plan) in plans.iter().enumerate() {
            let isa = self.isa_for(opts.pipeline, plan.end - plan.start)?;
            ctx.clear();
            live_slots += translate::translate_function(
                &mut ctx.func,
                fctx,
                isa,
                insns,
                &plans,
                fi,
                opts,
                &mut symbols,
                &mut keys,
            )?;
            if opts.verify_ir {
                ctx.verify(isa).map_err(|e| CompileError::Codegen {
                    function: plan.start,
                    reason: format!("IR verifier: {e}"),
                })?;
            }
            let names = ctx.func.params.user_named_funcs().clone();
            let compiled = ctx
                .compile(isa, &mut ControlPlane::default())
                .map_err(|e| CompileError::Codegen {
                    function: plan.start,
                    reason: format!("{:?}", e.inner),
                })?;
            let at = code.len().next_multiple_of(16);
            // An elite artifact's entry stays at offset 0, where the runtime's fallback
            // locator expects it (docs/deopt.md).
            let start = if fi == 0 && opts.speculation().is_some() {
                at
            } else {
                at + loop_padding(
                    self.arch,
                    at,
                    compiled.code_buffer(),
                    &compiled.bb_starts,
                    &compiled.bb_edges,
                )
            };
            // Pad with trapping bytes where the architecture has one (x86-64's `int3`;
            // aarch64's all-zero word is permanently undefined), so a stray jump into
            // padding stops instead of sliding.
            code.resize(start, if self.arch == Arch::X86_64 { 0xcc } else { 0 });
            let base = code.len() as u32;
            func_offsets[fi] = base;
            code.extend_from_slice(compiled.code_buffer());
            for r in compiled.buffer.relocs() {
                let offset = base + r.offset;
                match &r.target {
                    FinalizedRelocTarget::ExternalName(ExternalName::User(nref)) => {
                        let UserExternalName { namespace, index } = names[*nref].clone();
                        match (namespace, r.kind) {
                            (NS_FUNC, Reloc::X86CallPCRel4 | Reloc::Arm64Call) => {
                                local_calls.push((offset, r.kind, index, r.addend))
                            }
                            (NS_SYMBOL, Reloc::Abs8) => relocations.push(Relocation {
                                offset,
                                kind: RelocKind::Abs64,
                                symbol: index,
                                addend: r.addend,
                            }),
                            (_, kind) => {
                                return Err(CompileError::UnexpectedReloc {
                                    kind: format!("{kind:?} to namespace {namespace}"),
                                })
                            }
                        }
                    }
                    FinalizedRelocTarget::Func(target) if r.kind == Reloc::Abs8 => relocations
                        .push(Relocation {
                            offset,
                            kind: RelocKind::CodeAbs64,
                            symbol: 0,
                            addend: (base + target) as i64 + r.addend,
                        }),
                    other => {
                        return Err(CompileError::UnexpectedReloc {
                            kind: format!("{:?} to {other:?}", r.kind),
                        })
                    }
                }
            }
        }

        for (offset, kind, callee, addend) in local_calls {
            let target = func_offsets[callee as usize] as i64;
            let at = offset as usize;
            match kind {
                Reloc::X86CallPCRel4 => {
                    let rel = i32::try_from(target + addend - offset as i64).map_err(|_| {
                        CompileError::UnexpectedReloc {
                            kind: "call displacement beyond 2 GiB".into(),
                        }
                    })?;
                    code[at..at + 4].copy_from_slice(&rel.to_le_bytes());
                }
                Reloc::Arm64Call => {
                    let delta = target + addend - offset as i64;
                    if delta % 4 != 0 || !(-(1 << 27)..(1 << 27)).contains(&delta) {
                        return Err(CompileError::UnexpectedReloc {
                            kind: "aarch64 call displacement out of range".into(),
                        });
                    }
                    let mut word = u32::from_le_bytes(code[at..at + 4].try_into().unwrap());
                    word = (word & !0x03ff_ffff) | (((delta >> 2) as u32) & 0x03ff_ffff);
                    code[at..at + 4].copy_from_slice(&word.to_le_bytes());
                }
                _ => unreachable!("filtered above"),
            }
        }

        let artifact = Artifact {
            meta: options::metadata(insns, opts, func_offsets[0], depth, plans.len()),
            code,
            symbols,
            relocations,
        };
        let stats = CompileStats {
            insns: insns.len(),
            functions: plans.len(),
            code_bytes: artifact.code.len(),
            elapsed: start.elapsed(),
            guards: opts.speculation().map_or(0, |s| s.guards.len()),
            dropped_insns: insns.len() - live_slots,
        };
        Ok((artifact, stats))
    }
}

fn build_isa(arch: Arch, pipeline: Pipeline) -> Result<OwnedTargetIsa, CompileError> {
    let isa_err = |reason: String| CompileError::Isa { arch, reason };
    let triple: Triple = crate::target::triple(arch)
        .parse()
        .map_err(|e| isa_err(format!("{e}")))?;
    let mut flags = settings::builder();
    let (opt_level, regalloc) = match pipeline {
        Pipeline::Fast => ("none", "single_pass"),
        _ => ("speed", "backtracking"),
    };
    for (k, v) in [
        ("opt_level", opt_level),
        ("regalloc_algorithm", regalloc),
        // Every address the code uses is an absolute relocation the linker fills in, so
        // code can be placed anywhere; no GOT, no PLT.
        ("is_pic", "false"),
        ("enable_verifier", "false"),
        ("preserve_frame_pointers", "true"),
        // Block offsets and edges of the machine code, where `loop_padding` finds loops.
        ("machine_code_cfg_info", "true"),
    ] {
        flags.set(k, v).map_err(|e| isa_err(format!("{k}: {e}")))?;
    }
    let builder = isa::lookup(triple).map_err(|e| isa_err(e.to_string()))?;
    builder
        .finish(settings::Flags::new(flags))
        .map_err(|e| isa_err(e.to_string()))
}

/// Bytes of a cache line: the unit in which the front end fetches code (and, on the x86-64
/// machines this was measured on, what a loop must not straddle to run at full speed).
const CACHE_LINE: usize = 64;

/// Padding (a multiple of 16, below [`CACHE_LINE`]) to put before a function of `len` bytes
/// that would otherwise start at `at`, so that its loops straddle as few cache lines as
/// possible, given the block starts and edges Cranelift reports (a loop: an edge back to a
/// block at or before its source; it spans from that block to the end of the source block).
/// Assumes a load address aligned to [`CACHE_LINE`] (the runtime's code arena allocates in
/// 64-byte granules; `ExecutableCode` maps pages); any 16-byte-aligned address stays correct.
///
/// On the AMD EPYC this was measured on, the `checksum` kernel's five-instruction loop runs
/// in 196 ns when it sits in one 64-byte line and 286 ns when it straddles two.
fn loop_padding(arch: Arch, at: usize, code: &[u8], starts: &[u32], edges: &[(u32, u32)]) -> usize {
    let end_of = |block: u32| {
        starts
            .iter()
            .copied()
            .filter(|&s| s > block)
            .min()
            .map_or(code.len(), |s| s as usize)
    };
    let mut loops: Vec<(usize, usize)> = edges
        .iter()
        .filter(|(from, to)| to <= from)
        .map(|&(from, to)| (to as usize, end_of(from)))
        // Long spans (large loops, or a cold block laid out last jumping back) gain little;
        // the reported edges include some of blocks the code buffer merged away, so a loop
        // counts only if its last block really ends with a branch back to its head.
        .filter(|&(s, e)| s < e && e - s <= 4 * CACHE_LINE && branches_back(arch, code, e, s))
        .collect();
    loops.sort_unstable();
    loops.dedup();
    if loops.is_empty() {
        return 0;
    }
    // Lines each loop touches beyond the fewest its length needs, weighed by the inverse of
    // its length: an extra line costs about the same per iteration whatever the loop, so it
    // matters most to the shortest loops (a versioned loop's unchecked copy is shorter than
    // the checked one).
    let extra = |pad: usize| -> usize {
        loops
            .iter()
            .map(|&(s, e)| {
                let (s, e) = (at + pad + s, at + pad + e);
                let lines = (e - 1) / CACHE_LINE - s / CACHE_LINE + 1;
                (lines - (e - s).div_ceil(CACHE_LINE)) * (1 << 16) / (e - s)
            })
            .sum()
    };
    (0..CACHE_LINE)
        .step_by(16)
        .min_by_key(|&pad| (extra(pad), pad))
        .unwrap_or(0)
}

/// Whether the code ending at byte `end` ends with a branch to byte `to` (its last
/// instruction, or the one before a final unconditional branch).
fn branches_back(arch: Arch, code: &[u8], end: usize, to: usize) -> bool {
    let word = |at: usize| u32::from_le_bytes(code[at..at + 4].try_into().expect("4 bytes"));
    let lands = |next: usize, disp: i64| next as i64 + disp == to as i64;
    match arch {
        Arch::X86_64 => {
            // `jmp rel32` (e9) and `jcc rel32` (0f 8x), as Cranelift emits them.
            let jmp = |end: usize| end >= 5 && code[end - 5] == 0xe9;
            let jcc = |end: usize| end >= 6 && code[end - 6] == 0x0f && code[end - 5] >> 4 == 8;
            let target = |end: usize| lands(end, word(end - 4) as i32 as i64);
            ((jmp(end) || jcc(end)) && target(end)) || (jmp(end) && jcc(end - 5) && target(end - 5))
        }
        Arch::Aarch64 => {
            // `b`, `b.cond`, `cbz`/`cbnz` and `tbz`/`tbnz`, at `pc` (byte offset).
            let to_of = |pc: usize| -> Option<i64> {
                let w = word(pc);
                let signed = |v: u32, bits: u32| ((v << (32 - bits)) as i32 >> (32 - bits)) as i64;
                let disp = if w & 0xfc00_0000 == 0x1400_0000 {
                    signed(w & 0x03ff_ffff, 26)
                } else if w & 0xff00_0010 == 0x5400_0000 || w & 0x7e00_0000 == 0x3400_0000 {
                    signed((w >> 5) & 0x7_ffff, 19)
                } else if w & 0x7e00_0000 == 0x3600_0000 {
                    signed((w >> 5) & 0x3fff, 14)
                } else {
                    return None;
                };
                Some(pc as i64 + 4 * disp)
            };
            let hits = |pc: usize| to_of(pc) == Some(to as i64);
            let unconditional = |pc: usize| word(pc) & 0xfc00_0000 == 0x1400_0000;
            end >= 4
                && end.is_multiple_of(4)
                && (hits(end - 4) || (end >= 8 && unconditional(end - 4) && hits(end - 8)))
        }
    }
}

/// The refusal of `may_goto` at `pc`: neither code generator keeps the per-frame counter yet
/// (the interpreter does), and a tier must not run an instruction it cannot run as specified.
pub(crate) fn may_goto_unsupported(pc: usize) -> CompileError {
    CompileError::Unsupported {
        pc,
        what: "may_goto (its per-frame loop counter is kept by the interpreter only)".into(),
    }
}

/// Refuses a program with `may_goto` anywhere, before any planning looks at it.
pub(crate) fn refuse_may_goto(insns: &[Insn]) -> Result<(), CompileError> {
    match insns.iter().position(|i| matches!(i, Insn::MayGoto { .. })) {
        Some(pc) => Err(may_goto_unsupported(pc)),
        None => Ok(()),
    }
}

/// Compiles a program for `opts.arch` with a fresh [`Compiler`].
/// [`Pipeline::Baseline`] builds no Cranelift code generator at all.
pub fn compile(insns: &[Insn], opts: &CompileOptions) -> Result<Artifact, CompileError> {
    if opts.pipeline == Pipeline::Baseline {
        return Ok(baseline::compile(insns, opts)?.0);
    }
    Ok(Compiler::new(opts.arch)?.compile(insns, opts)?.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Build;

    #[test]
    fn back_branches_are_read_from_the_code() {
        // x86-64: 8 bytes of body, then `jb` back to 0; then `jcc` to 0 followed by a `jmp`.
        let mut x = vec![0x90u8; 8];
        x.extend([0x0f, 0x82]);
        x.extend((-14i32).to_le_bytes());
        assert!(branches_back(Arch::X86_64, &x, 14, 0));
        assert!(!branches_back(Arch::X86_64, &x, 14, 2));
        x.push(0xe9);
        x.extend(100i32.to_le_bytes());
        assert!(branches_back(Arch::X86_64, &x, 19, 0));
        assert!(branches_back(Arch::X86_64, &x, 19, 119));
        assert!(!branches_back(Arch::X86_64, &x, 8, 0));
        // aarch64: `b.lo` back 3 words, `b` back 4, `cbnz x1` back 4, and a plain `add`.
        let words: [u32; 4] = [0x54ff_ffa3, 0x17ff_fffc, 0xb5ff_ff81, 0x9100_0400];
        let a: Vec<u8> = [0xd503_201f; 8] // nop
            .into_iter()
            .chain(words)
            .flat_map(u32::to_le_bytes)
            .collect();
        assert!(branches_back(Arch::Aarch64, &a, 36, 20));
        assert!(branches_back(Arch::Aarch64, &a, 40, 20));
        assert!(branches_back(Arch::Aarch64, &a, 44, 24));
        assert!(!branches_back(Arch::Aarch64, &a, 48, 24));
    }

    #[test]
    fn compiler_is_shareable_between_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Compiler>();
    }

    #[test]
    fn threads_compile_with_one_compiler() {
        let compiler = Compiler::new(Arch::X86_64).unwrap();
        let prog = rdx_bpf::asm::assemble("mov %r0, 7\nexit").unwrap();
        let opts = CompileOptions::new(Arch::X86_64, Build::Generic);
        let code = |c: &Compiler| c.compile(&prog, &opts).unwrap().0.code;
        let alone = code(&compiler);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..4).map(|_| s.spawn(|| code(&compiler))).collect();
            for h in handles {
                assert_eq!(h.join().unwrap(), alone);
            }
        });
    }
}
