//! AF_PACKET capture: every Ethernet frame arriving on one interface, from a `TPACKET_V3`
//! receive ring shared with the kernel.
//!
//! The socket is `AF_PACKET`/`SOCK_RAW`, bound to the interface with `ETH_P_ALL` (it is
//! created with protocol 0 and bound after its ring is set up, so it never holds frames of
//! other interfaces). The kernel fills fixed-size blocks of the ring with frames and hands a
//! block over when it is full or after [`BLOCK_TIMEOUT_MS`]; [`Capture::next_block`] walks a
//! handed-over block's frames and gives it back. Frames the host itself sends out of the
//! interface are skipped. A VLAN tag the kernel stripped into the frame's metadata (as it
//! does on receive) is put back in its place, so the parser sees the frame as it was on the
//! wire.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Bytes per ring block (a multiple of the page size and of [`FRAME_SIZE`]).
const BLOCK_SIZE: u32 = 1 << 20;
/// Blocks in the ring.
const BLOCKS: u32 = 8;
/// Largest frame slot: jumbo RoCEv2 frames (MTU 9000) fit whole.
const FRAME_SIZE: u32 = 1 << 14;
/// A block holding at least one frame is handed over after this long even if not full.
pub const BLOCK_TIMEOUT_MS: u32 = 10;

/// Why a capture could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// No interface of that name in this network namespace.
    #[error("no such interface {0:?} (in this network namespace)")]
    NoSuchInterface(String),
    /// The process lacks `CAP_NET_RAW`.
    #[error("{op}: permission denied: AF_PACKET sockets need root or CAP_NET_RAW")]
    Permission {
        /// The step that was refused.
        op: &'static str,
    },
    /// Any other system call failure.
    #[error("{op}: {source}")]
    Io {
        /// The step that failed.
        op: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
}

fn last_error(op: &'static str) -> CaptureError {
    let source = io::Error::last_os_error();
    match source.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => CaptureError::Permission { op },
        _ => CaptureError::Io { op, source },
    }
}

/// Frames of one block that were not handed to the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockCounts {
    /// Frames handed to the caller.
    pub frames: u64,
    /// Frames the host sent out of the interface (not decided).
    pub outgoing: u64,
    /// Frames longer than their ring slot, handed over cut short (the parser denies them).
    pub truncated: u64,
}

/// An AF_PACKET socket with a `TPACKET_V3` receive ring, bound to one interface.
pub struct Capture {
    fd: OwnedFd,
    ring: *mut u8,
    ring_len: usize,
    next: u32,
    ifindex: u32,
    /// A frame with its VLAN tag put back.
    scratch: Vec<u8>,
}

// SAFETY: the ring mapping is owned by this value alone (no copies of the pointer escape), so
// moving it to another thread moves the only access to it.
unsafe impl Send for Capture {}

fn setsockopt<T>(
    fd: &OwnedFd,
    level: i32,
    name: i32,
    value: &T,
    op: &'static str,
) -> Result<(), CaptureError> {
    // SAFETY: `value` points to a live `T` of the size passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(last_error(op))
    }
}

impl Capture {
    /// Opens a capture on interface `name` of the calling thread's network namespace.
    pub fn open(name: &str) -> Result<Capture, CaptureError> {
        let cname =
            CString::new(name).map_err(|_| CaptureError::NoSuchInterface(name.to_string()))?;
        // SAFETY: `cname` is a NUL-terminated string that outlives the call.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(CaptureError::NoSuchInterface(name.to_string()));
        }
        // Protocol 0: no frames at all until the bind below names the interface.
        // SAFETY: plain socket creation; the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(last_error("socket(AF_PACKET, SOCK_RAW)"));
        }
        // SAFETY: `raw` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &version,
            "PACKET_VERSION (TPACKET_V3)",
        )?;
        let req = libc::tpacket_req3 {
            tp_block_size: BLOCK_SIZE,
            tp_block_nr: BLOCKS,
            tp_frame_size: FRAME_SIZE,
            tp_frame_nr: BLOCK_SIZE / FRAME_SIZE * BLOCKS,
            tp_retire_blk_tov: BLOCK_TIMEOUT_MS,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            &req,
            "PACKET_RX_RING",
        )?;
        // Only frames the interface received (kernels before 4.20 refuse the option; the
        // per-frame packet type filters outgoing frames there).
        let _ = setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            &1i32,
            "",
        );
        let ring_len = (BLOCK_SIZE * BLOCKS) as usize;
        // SAFETY: maps the ring the kernel just allocated for this socket; checked below.
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ring == libc::MAP_FAILED {
            return Err(last_error("mmap of the receive ring"));
        }
        let capture = Capture {
            fd,
            ring: ring.cast(),
            ring_len,
            next: 0,
            ifindex,
            scratch: Vec::with_capacity(FRAME_SIZE as usize + 4),
        };
        // SAFETY: an all-zero sockaddr_ll is valid; the fields that matter are set below.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: `addr` is a valid sockaddr_ll of the size passed.
        let rc = unsafe {
            libc::bind(
                capture.fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                // The interface went away between the lookup and the bind.
                Some(libc::ENODEV) => CaptureError::NoSuchInterface(name.to_string()),
                _ => CaptureError::Io {
                    op: "bind to the interface",
                    source: e,
                },
            });
        }
        Ok(capture)
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    fn block(&self, i: u32) -> *mut libc::tpacket_block_desc {
        // SAFETY: `i < BLOCKS`, so the offset stays inside the mapping.
        unsafe { self.ring.add((i * BLOCK_SIZE) as usize).cast() }
    }

    /// Waits up to `timeout` for the kernel to hand over a block, then passes each received
    /// frame of it to `frame` and gives the block back. Returns what the block held (all
    /// zero on a timeout).
    pub fn next_block(
        &mut self,
        timeout: Duration,
        mut frame: impl FnMut(&[u8]),
    ) -> Result<BlockCounts, CaptureError> {
        let block = self.block(self.next);
        // SAFETY: `block` points at a block header inside the live mapping; the status word
        // is written by the kernel, so it is read atomically with acquire ordering (what the
        // kernel's release store of TP_STATUS_USER pairs with).
        let status = unsafe { block_status(block) };
        if status.load(std::sync::atomic::Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            };
            let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: `pfd` is one valid pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return Err(last_error("poll"));
            }
            if status.load(std::sync::atomic::Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                return Ok(BlockCounts::default());
            }
        }
        let mut counts = BlockCounts::default();
        // SAFETY: the kernel handed the block to user space (TP_STATUS_USER): until the
        // status is set back below, its header and frames are ours to read, and every offset
        // in it was written by the kernel to stay inside the block.
        unsafe {
            let bh = &(*block).hdr.bh1;
            let mut at = (block as *const u8).add(bh.offset_to_first_pkt as usize);
            for _ in 0..bh.num_pkts {
                let h = &*(at as *const libc::tpacket3_hdr);
                let ll = &*(at.add(sockaddr_offset()) as *const libc::sockaddr_ll);
                if ll.sll_pkttype == libc::PACKET_OUTGOING {
                    counts.outgoing += 1;
                } else {
                    let data = std::slice::from_raw_parts(
                        at.add(h.tp_mac as usize),
                        h.tp_snaplen as usize,
                    );
                    if h.tp_snaplen < h.tp_len {
                        counts.truncated += 1;
                    }
                    counts.frames += 1;
                    if h.tp_status & libc::TP_STATUS_VLAN_VALID != 0 && data.len() >= 12 {
                        let tpid = if h.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                            h.hv1.tp_vlan_tpid
                        } else {
                            0x8100
                        };
                        self.scratch.clear();
                        self.scratch.extend_from_slice(&data[..12]);
                        self.scratch.extend_from_slice(&tpid.to_be_bytes());
                        self.scratch
                            .extend_from_slice(&(h.hv1.tp_vlan_tci as u16).to_be_bytes());
                        self.scratch.extend_from_slice(&data[12..]);
                        frame(&self.scratch);
                    } else {
                        frame(data);
                    }
                }
                at = at.add(h.tp_next_offset as usize);
            }
        }
        status.store(libc::TP_STATUS_KERNEL, std::sync::atomic::Ordering::Release);
        self.next = (self.next + 1) % BLOCKS;
        Ok(counts)
    }

    /// The kernel's counters since the last call: frames it received for this socket and
    /// frames it dropped because the ring was full (`PACKET_STATISTICS`, which resets them).
    pub fn kernel_stats(&self) -> Result<(u64, u64), CaptureError> {
        // SAFETY: all-zero is a valid tpacket_stats_v3.
        let mut s: libc::tpacket_stats_v3 = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: `s` is writable for `len` bytes; the kernel writes at most that much.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut s as *mut libc::tpacket_stats_v3).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(last_error("PACKET_STATISTICS"));
        }
        Ok((s.tp_packets as u64, s.tp_drops as u64))
    }
}

/// Offset of a frame's `sockaddr_ll` from its `tpacket3_hdr`.
const fn sockaddr_offset() -> usize {
    let a = libc::TPACKET_ALIGNMENT;
    (std::mem::size_of::<libc::tpacket3_hdr>() + a - 1) & !(a - 1)
}

/// The block's status word as an atomic.
///
/// # Safety
/// `block` must point at a block header inside a live ring mapping.
unsafe fn block_status<'a>(
    block: *mut libc::tpacket_block_desc,
) -> &'a std::sync::atomic::AtomicU32 {
    // SAFETY: the caller guarantees the header is mapped; the status word is a 4-byte
    // aligned u32 at the start of `bh1`, which the kernel also accesses atomically.
    unsafe {
        std::sync::atomic::AtomicU32::from_ptr(std::ptr::addr_of_mut!(
            (*block).hdr.bh1.block_status
        ))
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`; no reference into it outlives
        // `next_block`.
        unsafe {
            libc::munmap(self.ring.cast(), self.ring_len);
        }
    }
}
