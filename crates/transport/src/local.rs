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
        let mut i = 0usize;
        while i < buf.len() {
            let at = offset + i as u64;
            if at.is_multiple_of(8) && buf.len() - i >= 8 {
                let v = self.word(at)?.load(Ordering::Relaxed);
                buf[i..i + 8].copy_from_slice(&v.to_le_bytes());
                i += 8;
            } else {
                buf[i] = self.byte(at).load(Ordering::Relaxed);
                i += 1;
            }
        }
        fence(Ordering::Acquire);
        Ok(())
    }

    #[inline]
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), TransportError> {
        self.check(offset, data.len() as u64)?;
        fence(Ordering::Release);
        let mut i = 0usize;
        while i < data.len() {
            let at = offset + i as u64;
            if at.is_multiple_of(8) && data.len() - i >= 8 {
                let v = u64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"));
                self.word(at)?.store(v, Ordering::Relaxed);
                i += 8;
            } else {
                self.byte(at).store(data[i], Ordering::Relaxed);
                i += 1;
            }
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
        let mut i = 0usize;
        while i < bytes.len() {
            let at = offset + i as u64;
            if at.is_multiple_of(8) && bytes.len() - i >= 8 {
                let v = self.word(at)?.load(Ordering::Relaxed);
                if v.to_le_bytes() != bytes[i..i + 8] {
                    return Ok(false);
                }
                i += 8;
            } else {
                if self.byte(at).load(Ordering::Relaxed) != bytes[i] {
                    return Ok(false);
                }
                i += 1;
            }
        }
        Ok(true)
    }
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
}
