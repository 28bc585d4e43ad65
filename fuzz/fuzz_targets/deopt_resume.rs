//! Arbitrary deoptimisation states handed to the interpreter's checked resume: a state from
//! a broken or hostile fast path must be refused (`ResumeError::BadState`) or fail with a run
//! error naming the instruction — never panic, never touch memory outside the run's regions.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Resume, ResumeFrame, Vm};
use rdx_bpf::maps::MapSet;

fn vm() -> &'static Vm {
    static VM: OnceLock<Vm> = OnceLock::new();
    VM.get_or_init(|| {
        let insns = rdx_bpf::asm::assemble(
            "mov %r6, 7\nstdw [%r10-8], 42\nmov %r1, %r10\nadd %r1, -8\ncall local, +2\n\
             add %r0, %r6\nexit\nldxdw %r0, [%r1]\njgt %r0, 40, +1\nexit\nldxdw %r3, [%r1]\n\
             add %r0, %r3\nexit",
        )
        .expect("program");
        let config = Config {
            max_steps: 10_000,
            ..Config::default()
        };
        Vm::new(&insns, &MapSet::default(), &Helpers::standard(), config).expect("vm")
    })
}

#[repr(C, align(16))]
struct Stack([u8; 8 * 512]);

fuzz_target!(|data: &[u8]| {
    let word = |i: usize| -> u64 {
        let mut b = [0u8; 8];
        for (k, x) in b.iter_mut().enumerate() {
            *x = data.get(i * 8 + k).copied().unwrap_or(0);
        }
        u64::from_le_bytes(b)
    };
    let mut stack = Box::new(Stack([0; 8 * 512]));
    let top = stack.0.as_ptr() as u64 + stack.0.len() as u64;
    let depth = (word(0) % 9) as usize;
    let frames: Vec<ResumeFrame> = (0..depth)
        .map(|k| ResumeFrame {
            ret: (word(1 + k) % 20) as usize,
            saved: [word(9 + k), 0, 0, 0],
        })
        .collect();
    let mut regs = [0u64; 11];
    for (i, r) in regs.iter_mut().enumerate().take(10) {
        // Mix raw values with addresses inside the stack so both paths are reached.
        let w = word(17 + i);
        *r = if w & 1 == 0 { w } else { top - (w >> 1) % 4096 };
    }
    // Usually a consistent frame pointer, sometimes not.
    regs[10] = if word(27) % 4 == 0 {
        word(28)
    } else {
        top - (depth as u64) * 512
    };
    let state = Resume {
        pc: (word(29) % 20) as usize,
        regs,
        frames: &frames,
        stack: &mut stack.0[..],
        packet: None,
        max_steps: Some(10_000),
    };
    let _ = vm().resume_checked(Input::Empty, state);
});
