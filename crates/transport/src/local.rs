//! Region access through a mapping in this process: plain atomics on shared memory.

use crate::{Transport, TransportError};
use std::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};

/// A region mapped in this process, accessed by offset with bounds checks.
///
/// All accesses go through atomics (relaxed for bulk bytes), because the other side of the
/// mapping writes concurrently; nothing here ever creates a Rust reference to region bytes.
#[derive(Clone, Copy, Debug)]
pub struct LocalRegion {
    base: *mut u8,
    len: u64,
}

// SAFETY: the region is shared memory accessed only through atomics.
unsafe impl Send for LocalRegion {}
// SAFETY: as above.
unsafe impl Sync for LocalRegion {}

impl LocalRegion {
    /// # Safety
    /// `base` must point to `len` bytes of memory that stay mapped read+write for as long as
    /// this value (or a copy) is used, and `base` must be 8-byte aligned.
    pub unsafe fn from_raw(base: *mut u8, len: u64) -> Self {
        debug_assert_eq!(base as usize % 8, 0);
        Self { base, len }
    }

    /// The mapping's first byte in this process.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    #[inline]
    fn check(&self, offset: u64, len: u64) -> Result<(), TransportError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(TransportError::OutOfBounds {
                offset,
                len,
                region_len: self.len,
            }),
        }
    }

    #[inline]
    fn word(&self, offset: u64) -> Result<&AtomicU64, TransportError> {
        self.check(offset, 8)?;
        if !offset.is_multiple_of(8) {
            return Err(TransportError::Misaligned { offset });
        }
        // SAFETY: in bounds and aligned (checked above, base is 8-aligned); the memory is
        // mapped for the lifetime promised by `from_raw`, and is only accessed atomically.
        Ok(unsafe { &*(self.base.add(offset as usize) as *const AtomicU64) })
    }

    /// An aligned word the caller already bounds-checked (as part of a larger range).
    #[inline]
    fn word_in_bounds(&self, offset: u64) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + 8 <= self.len);
        // SAFETY: callers checked `offset..offset + 8` is in bounds and `offset` is 8-aligned
        // (base is 8-aligned); the memory stays mapped as promised by `from_raw` and is only
        // accessed atomically.
        unsafe { &*(self.base.add(offset as usize) as *const AtomicU64) }
    }

    #[inline]
    fn byte(&self, offset: u64) -> &AtomicU8 {
        // SAFETY: callers checked `offset` is in bounds.
        unsafe { &*(self.base.add(offset as usize) as *const AtomicU8) }
    }
}

impl Transport for LocalRegion {
    fn region_len(&self) -> u64 {
        self.len
    }

    #[inline]
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), TransportError> {
        self.check(offset, buf.len() as u64)?;
        let (head, words, tail) = split_aligned(offset, buf.len());
        let mut at = offset;
        for b in &mut buf[..head] {
            *b = self.byte(at).load(Ordering::Relaxed);
            at += 1;
        }
        for chunk in buf[head..head + words * 8].chunks_exact_mut(8) {
            chunk.copy_from_slice(
                &self
                    .word_in_bounds(at)
                    .load(Ordering::Relaxed)
                    .to_le_bytes(),
            );
            at += 8;
        }
        for b in &mut buf[head + words * 8..][..tail] {
            *b = self.byte(at).load(Ordering::Relaxed);
            at += 1;
        }
        fence(Ordering::Acquire);
        Ok(())
    }

    #[inline]
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), TransportError> {
        self.check(offset, data.len() as u64)?;
        fence(Ordering::Release);
        let (head, words, tail) = split_aligned(offset, data.len());
        let mut at = offset;
        for &b in &data[..head] {
            self.byte(at).store(b, Ordering::Relaxed);
            at += 1;
        }
        for chunk in data[head..head + words * 8].chunks_exact(8) {
            let v = u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"));
            self.word_in_bounds(at).store(v, Ordering::Relaxed);
            at += 8;
        }
        for &b in &data[head + words * 8..][..tail] {
            self.byte(at).store(b, Ordering::Relaxed);
            at += 1;
        }
        Ok(())
    }

    #[inline]
    fn read_u64(&self, offset: u64) -> Result<u64, TransportError> {
        Ok(self.word(offset)?.load(Ordering::Acquire))
    }

    #[inline]
    fn write_u64(&self, offset: u64, value: u64) -> Result<(), TransportError> {
        self.word(offset)?.store(value, Ordering::Release);
        Ok(())
    }

    #[inline]
    fn compare_and_swap(
        &self,
        offset: u64,
        expected: u64,
        new: u64,
    ) -> Result<u64, TransportError> {
        Ok(
            match self.word(offset)?.compare_exchange(
                expected,
                new,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(v) | Err(v) => v,
            },
        )
    }

    #[inline]
    fn fetch_and_add(&self, offset: u64, delta: u64) -> Result<u64, TransportError> {
        Ok(self.word(offset)?.fetch_add(delta, Ordering::SeqCst))
    }

    fn fence(&self) -> Result<(), TransportError> {
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn remote_barrier(&self) -> Result<(), TransportError> {
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn shares_pid_namespace(&self) -> bool {
        true
    }

    #[inline]
    fn equals(&self, offset: u64, bytes: &[u8]) -> Result<bool, TransportError> {
        self.check(offset, bytes.len() as u64)?;
        let (head, words, tail) = split_aligned(offset, bytes.len());
        let mut at = offset;
        for &b in &bytes[..head] {
            if self.byte(at).load(Ordering::Relaxed) != b {
                return Ok(false);
            }
            at += 1;
        }
        for chunk in bytes[head..head + words * 8].chunks_exact(8) {
            if self
                .word_in_bounds(at)
                .load(Ordering::Relaxed)
                .to_le_bytes()
                != chunk
            {
                return Ok(false);
            }
            at += 8;
        }
        for &b in &bytes[head + words * 8..][..tail] {
            if self.byte(at).load(Ordering::Relaxed) != b {
                return Ok(false);
            }
            at += 1;
        }
        Ok(true)
    }
}

/// Splits `len` bytes at `offset` into leading bytes up to the first 8-byte boundary, whole
/// aligned words, and trailing bytes, so bulk copies check bounds once and move words.
#[inline]
fn split_aligned(offset: u64, len: usize) -> (usize, usize, usize) {
    let head = ((8 - (offset % 8)) % 8).min(len as u64) as usize;
    let words = (len - head) / 8;
    (head, words, len - head - words * 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_alignment_are_checked() {
        let mut mem = vec![0u64; 8];
        // SAFETY: `mem` outlives `r` and is 8-aligned.
        let r = unsafe { LocalRegion::from_raw(mem.as_mut_ptr() as *mut u8, 64) };
        assert!(matches!(
            r.read_u64(60),
            Err(TransportError::OutOfBounds { .. })
        ));
        assert!(matches!(
            r.read_u64(4),
            Err(TransportError::Misaligned { offset: 4 })
        ));
        r.write(3, b"hello world, region").unwrap();
        let mut back = [0u8; 19];
        r.read(3, &mut back).unwrap();
        assert_eq!(&back, b"hello world, region");
        assert!(r.equals(3, b"hello world, region").unwrap());
        assert!(!r.equals(3, b"hello world, regiox").unwrap());
        assert_eq!(r.compare_and_swap(32, 0, 5).unwrap(), 0);
        assert_eq!(r.compare_and_swap(32, 0, 6).unwrap(), 5);
        assert_eq!(r.fetch_and_add(32, 2).unwrap(), 5);
        assert_eq!(r.read_u64(32).unwrap(), 7);
    }

    proptest::proptest! {
        /// Byte-exact against a plain model at every alignment, length and bound: the bulk
        /// paths split ranges into bytes and words, so the split's edges must be right.
        #[test]
        fn bulk_access_matches_a_plain_model(
            offset in 0u64..80,
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            flip in 0usize..64,
        ) {
            const LEN: usize = 128;
            let mut mem = vec![0u64; LEN / 8];
            // SAFETY: `mem` outlives `r` and is 8-aligned.
            let r = unsafe { LocalRegion::from_raw(mem.as_mut_ptr() as *mut u8, LEN as u64) };
            let mut model = [0u8; LEN];
            let fits = offset as usize + data.len() <= LEN;
            proptest::prop_assert_eq!(r.write(offset, &data).is_ok(), fits);
            if fits {
                model[offset as usize..][..data.len()].copy_from_slice(&data);
            }
            let mut back = vec![0u8; LEN];
            r.read(0, &mut back).unwrap();
            proptest::prop_assert_eq!(&back[..], &model[..]);
            let mut part = vec![0u8; data.len()];
            proptest::prop_assert_eq!(r.read(offset, &mut part).is_ok(), fits);
            if fits {
                proptest::prop_assert_eq!(&part, &data);
                proptest::prop_assert!(r.equals(offset, &data).unwrap());
                if !data.is_empty() {
                    let mut other = data.clone();
                    other[flip % data.len()] ^= 1;
                    proptest::prop_assert!(!r.equals(offset, &other).unwrap());
                }
            }
        }
    }
}
