use rdx_region::geometry::LayoutError;

/// Why a remote operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// An access reaches outside the region.
    #[error("access [{offset:#x}, +{len}) outside the {region_len:#x}-byte region")]
    OutOfBounds {
        /// Region offset of the access.
        offset: u64,
        /// Its length in bytes.
        len: u64,
        /// The region's length in bytes.
        region_len: u64,
    },
    /// An 8-byte atomic access at an offset that is not a multiple of 8.
    #[error("atomic access at {offset:#x} is not 8-byte aligned")]
    Misaligned {
        /// The offset given.
        offset: u64,
    },
    /// The region's header or layout is not one this side can trust.
    #[error("region {path}: {source}")]
    Layout {
        /// The region file or node address.
        path: String,
        /// What the header check found.
        #[source]
        source: LayoutError,
    },
    /// A system call on the region file failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// The operation that failed (`open`, `mmap`, ...).
        what: &'static str,
        /// The region file.
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The region file was refused before any of its bytes were read.
    #[error("refusing region file {path}: {source}")]
    Untrusted {
        /// The region file.
        path: String,
        /// Why it was refused.
        #[source]
        source: crate::region_file::UntrustedRegion,
    },
    /// A write through a transport opened read-only.
    #[error("region {path} is mapped read-only; this operation writes")]
    ReadOnly {
        /// The region file.
        path: String,
    },
    /// The host has not registered the region (or has torn it down).
    #[error("region {path} is not ready (state {state}): {reason}")]
    NotReady {
        /// The region file or node address.
        path: String,
        /// The header's [`rdx_region::layout::RegionState`] value.
        state: u32,
        /// What the operation needed.
        reason: &'static str,
    },
}

/// One operation of a batch; results are written into the operation itself.
#[derive(Debug)]
pub enum Op<'a> {
    /// Copy `buf.len()` bytes at `offset` into `buf`.
    Read {
        /// Region offset of the first byte.
        offset: u64,
        /// Where the bytes land.
        buf: &'a mut [u8],
    },
    /// Write `data` at `offset`.
    Write {
        /// Region offset of the first byte.
        offset: u64,
        /// The bytes to write.
        data: &'a [u8],
    },
    /// 8-byte compare-and-swap at `offset`, as [`Transport::compare_and_swap`].
    CompareAndSwap {
        /// Region offset of the word (8-byte aligned).
        offset: u64,
        /// The value the word must hold for the swap to happen.
        expected: u64,
        /// The value stored if it does.
        new: u64,
        /// Set on completion: the word's value before the operation.
        previous: u64,
    },
    /// 8-byte fetch-and-add at `offset`, as [`Transport::fetch_and_add`].
    FetchAndAdd {
        /// Region offset of the word (8-byte aligned).
        offset: u64,
        /// Added to the word, wrapping.
        delta: u64,
        /// Set on completion: the word's value before the addition.
        previous: u64,
    },
}

/// One-sided access to a region, by offset from its first byte.
///
/// Ordering: byte reads and writes are not atomic as a whole (8-byte aligned chunks are);
/// [`Transport::read_u64`] is an acquire load, [`Transport::write_u64`] a release store,
/// compare-and-swap and fetch-and-add are sequentially consistent. A write followed by a
/// compare-and-swap is seen in that order by the target, which is what publication needs.
pub trait Transport: Send + Sync {
    /// Bytes in the region.
    fn region_len(&self) -> u64;
    /// Copies `buf.len()` bytes at `offset` into `buf` (8-byte aligned chunks atomically).
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), TransportError>;
    /// Writes `data` at `offset` (8-byte aligned chunks atomically).
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), TransportError>;
    /// Loads the 8-byte word at `offset` (8-byte aligned) with acquire ordering.
    fn read_u64(&self, offset: u64) -> Result<u64, TransportError>;
    /// Stores `value` to the 8-byte word at `offset` (8-byte aligned) with release ordering.
    fn write_u64(&self, offset: u64, value: u64) -> Result<(), TransportError>;
    /// Returns the previous value; the swap happened iff it equals `expected`.
    fn compare_and_swap(&self, offset: u64, expected: u64, new: u64)
        -> Result<u64, TransportError>;
    /// Returns the previous value.
    fn fetch_and_add(&self, offset: u64, delta: u64) -> Result<u64, TransportError>;
    /// Every operation issued before the fence completes before any issued after it.
    fn fence(&self) -> Result<(), TransportError>;
    /// Makes every store the target's threads issued before this call visible to us, and
    /// our earlier stores visible to their later loads: the asymmetric half of the epoch
    /// protocol (the hook fast path has no fence of its own). See [`crate::slot`].
    fn remote_barrier(&self) -> Result<(), TransportError>;

    /// Whether process ids of the region's users (the pid in a control plane's lock token)
    /// name the same processes on this side, so that a dead holder can be told by its pid.
    /// True for transports within one machine; remote transports keep the default.
    fn shares_pid_namespace(&self) -> bool {
        false
    }

    /// Whether the bytes at `offset` equal `bytes`.
    fn equals(&self, offset: u64, bytes: &[u8]) -> Result<bool, TransportError> {
        let mut chunk = [0u8; 64];
        let mut done = 0;
        while done < bytes.len() {
            let n = (bytes.len() - done).min(chunk.len());
            self.read(offset + done as u64, &mut chunk[..n])?;
            if chunk[..n] != bytes[done..done + n] {
                return Ok(false);
            }
            done += n;
        }
        Ok(true)
    }

    /// Executes a batch. Operations of one batch may complete in any order; all have
    /// completed when this returns. Put a [`Transport::fence`] between dependent batches.
    fn submit(&self, ops: &mut [Op<'_>]) -> Result<(), TransportError> {
        for op in ops.iter_mut() {
            match op {
                Op::Read { offset, buf } => self.read(*offset, buf)?,
                Op::Write { offset, data } => self.write(*offset, data)?,
                Op::CompareAndSwap {
                    offset,
                    expected,
                    new,
                    previous,
                } => *previous = self.compare_and_swap(*offset, *expected, *new)?,
                Op::FetchAndAdd {
                    offset,
                    delta,
                    previous,
                } => *previous = self.fetch_and_add(*offset, *delta)?,
            }
        }
        Ok(())
    }
}
