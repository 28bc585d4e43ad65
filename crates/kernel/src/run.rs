use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use crate::error::{Errno, KernelError};

/// Input of one `BPF_PROG_TEST_RUN`.
///
/// For socket filters and TC programs `data_in` is an Ethernet frame from which the kernel
/// builds an skb (it pulls the 14-byte Ethernet header with `eth_type_trans`, so a socket
/// filter sees `skb->len = data_in.len() - 14`); for XDP it is the frame itself. The kernel
/// refuses frames shorter than 14 bytes. `ctx_in` is an optional `struct __sk_buff` or
/// `struct xdp_md` whose settable fields the kernel copies in (others must be zero).
#[derive(Clone, Copy, Debug)]
pub struct TestRunInput<'a> {
    /// The packet bytes (`data_in`); socket filters and XDP need at least 14 (an Ethernet header).
    pub data_in: &'a [u8],
    /// An optional `struct __sk_buff` or `struct xdp_md` (`ctx_in`); `None` passes no context.
    pub ctx_in: Option<&'a [u8]>,
    /// Number of runs the kernel times (0 counts as 1); the reported duration is the mean.
    pub repeat: u32,
}

impl<'a> TestRunInput<'a> {
    /// One run over `packet`, no context input.
    pub fn packet(packet: &'a [u8]) -> Self {
        TestRunInput {
            data_in: packet,
            ctx_in: None,
            repeat: 1,
        }
    }
}

/// What `BPF_PROG_TEST_RUN` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRunOutput {
    /// The program's return value. The kernel reports only the low 32 bits of r0.
    pub retval: u32,
    /// The packet after the (last) run, including any Ethernet header.
    pub data_out: Vec<u8>,
    /// The context after the run, when `ctx_in` was given (same size as `ctx_in`).
    pub ctx_out: Option<Vec<u8>>,
    /// Mean time of one run as measured by the kernel.
    pub duration: Duration,
}

/// Headroom for programs that grow the packet (XDP tail adjustment, skb pushes).
const DATA_OUT_SLACK: usize = 4096;

/// Runs the program behind `prog` (`BPF_PROG_TEST_RUN`); `name` is for errors.
pub fn test_run(
    prog: BorrowedFd<'_>,
    name: &str,
    input: &TestRunInput<'_>,
) -> Result<TestRunOutput, KernelError> {
    if input.data_in.len() < 14 {
        return Err(KernelError::InvalidInput {
            what: format!("BPF_PROG_TEST_RUN of {name:?}"),
            reason: format!(
                "data_in has {} bytes; the kernel needs at least an Ethernet header (14)",
                input.data_in.len()
            ),
        });
    }
    let mut data_out = vec![0u8; input.data_in.len() + DATA_OUT_SLACK];
    let mut ctx_out = input.ctx_in.map(|c| vec![0u8; c.len()]);
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        data_in: input.data_in.as_ptr().cast(),
        data_size_in: input.data_in.len() as u32,
        data_out: data_out.as_mut_ptr().cast(),
        data_size_out: data_out.len() as u32,
        ctx_in: input.ctx_in.map_or(std::ptr::null(), |c| c.as_ptr().cast()),
        ctx_size_in: input.ctx_in.map_or(0, |c| c.len() as u32),
        ctx_out: ctx_out
            .as_mut()
            .map_or(std::ptr::null_mut(), |c| c.as_mut_ptr().cast()),
        ctx_size_out: ctx_out.as_ref().map_or(0, |c| c.len() as u32),
        repeat: input.repeat as i32,
        ..Default::default()
    };
    // SAFETY: all buffers in `opts` are live for the call and have the sizes given next to
    // them; the kernel writes at most `data_size_out`/`ctx_size_out` bytes.
    let ret = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) };
    if ret < 0 {
        return Err(KernelError::TestRun {
            program: name.into(),
            errno: Errno::from_ret(ret),
        });
    }
    data_out.truncate(opts.data_size_out as usize);
    if let Some(ctx) = ctx_out.as_mut() {
        ctx.truncate(opts.ctx_size_out as usize);
    }
    Ok(TestRunOutput {
        retval: opts.retval,
        data_out,
        ctx_out,
        duration: Duration::from_nanos(opts.duration.into()),
    })
}
