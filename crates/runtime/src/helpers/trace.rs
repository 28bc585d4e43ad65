//! `bpf_trace_printk` into the region's trace ring buffer (map id 0, `rdx_trace`), which a
//! control plane tails remotely.

use super::{host_token, EINVAL};
use crate::thread;
use rdx_transport::xstate::ringbuf;
use std::fmt::Write;

/// Longest formatted message, as in the kernel.
const MAX_MESSAGE: usize = 1024;

/// Formats `fmt` with up to three 64-bit arguments. Supports the kernel's integer
/// conversions (`%d %i %u %x %X %p %c %%` with `l`/`ll` length modifiers); `%s` would need
/// safe reads of arbitrary memory and is printed as `(str?)`.
pub(crate) fn format(fmt: &[u8], args: [u64; 3]) -> Result<String, ()> {
    let mut out = String::new();
    let mut next = args.iter();
    let mut i = 0;
    while i < fmt.len() {
        let c = fmt[i];
        i += 1;
        if c == 0 {
            break;
        }
        if c != b'%' {
            out.push(c as char);
            continue;
        }
        let mut long = 0;
        while i < fmt.len() && fmt[i] == b'l' {
            long += 1;
            i += 1;
        }
        let Some(&conv) = fmt.get(i) else {
            return Err(());
        };
        i += 1;
        if conv == b'%' {
            out.push('%');
            continue;
        }
        let v = *next.next().ok_or(())?;
        let v32 = long == 0;
        let _ = match conv {
            b'd' | b'i' if v32 => write!(out, "{}", v as u32 as i32),
            b'd' | b'i' => write!(out, "{}", v as i64),
            b'u' if v32 => write!(out, "{}", v as u32),
            b'u' => write!(out, "{v}"),
            b'x' if v32 => write!(out, "{:x}", v as u32),
            b'x' => write!(out, "{v:x}"),
            b'X' if v32 => write!(out, "{:X}", v as u32),
            b'X' => write!(out, "{v:X}"),
            b'p' => write!(out, "{v:#x}"),
            b'c' => write!(out, "{}", (v as u8) as char),
            b's' => write!(out, "(str?)"),
            _ => return Err(()),
        };
    }
    Ok(out)
}

/// `bpf_trace_printk(fmt, fmt_size, a1, a2, a3)`: bytes written, or a negative errno.
pub(crate) unsafe extern "C" fn trace_printk(
    fmt: u64,
    fmt_size: u64,
    a1: u64,
    a2: u64,
    a3: u64,
) -> u64 {
    let Some(ts) = thread::current() else {
        return EINVAL;
    };
    if fmt == 0 || fmt_size == 0 || fmt_size > MAX_MESSAGE as u64 {
        return EINVAL;
    }
    // SAFETY: the verifier proved `fmt` readable for `fmt_size` bytes.
    let fmt = unsafe { std::slice::from_raw_parts(fmt as *const u8, fmt_size as usize) };
    let Ok(mut msg) = format(fmt, [a1, a2, a3]) else {
        return EINVAL;
    };
    msg.truncate(MAX_MESSAGE);
    match ringbuf::output(
        &ts.inner.data,
        &ts.inner.trace,
        msg.as_bytes(),
        host_token(ts.slot_index),
    ) {
        Ok(true) => msg.len() as u64,
        Ok(false) => (-(libc::EAGAIN as i64)) as u64,
        Err(e) => e.errno() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::format;

    #[test]
    fn formats_kernel_conversions() {
        assert_eq!(
            format(b"a=%d b=%llx c=%u%%\0", [u32::MAX as u64, 255, 7]).unwrap(),
            "a=-1 b=ff c=7%"
        );
        assert_eq!(
            format(b"%lld %c %s", [-5i64 as u64, b'z' as u64, 0]).unwrap(),
            "-5 z (str?)"
        );
        assert!(format(b"%d %d %d %d", [0; 3]).is_err());
        assert!(format(b"%q", [0; 3]).is_err());
        assert!(format(b"%", [0; 3]).is_err());
    }
}
