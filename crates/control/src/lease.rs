//! `mutual_excl`: the lease that keeps two control planes from writing one region at once.
//!
//! The lease is one 8-byte word in the region header ([`RegionHeader::lease`]), so it is
//! taken, renewed and released with a single compare-and-swap over any transport. The word
//! holds both who holds it and until when:
//!
//! ```text
//!   63            44 43                                0
//!  +----------------+-----------------------------------+
//!  |  holder (20 b) |  expiry, ms since the Unix epoch  |
//!  +----------------+-----------------------------------+
//! ```
//!
//! Keeping the expiry in the same word as the holder is what makes breaking an expired lease
//! safe: a control plane that saw word `w` expired replaces exactly `w`; if the holder renewed
//! in the meantime the word changed and the CAS fails. (A separate expiry word could be read
//! stale after another party re-took the lease.) `lease_expires_ns` is still written, for
//! humans and tools that read the header. A holder that dies simply stops renewing; its lease
//! can be broken once the expiry passed.
//!
//! [`RegionHeader::lease`]: rdx_region::layout::RegionHeader::lease

use crate::error::{ControlError, Result};
use rdx_region::layout::offsets;
use rdx_transport::Transport;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const EXPIRY_BITS: u32 = 44;
const EXPIRY_MASK: u64 = (1 << EXPIRY_BITS) - 1;
/// Largest holder id (20 bits, nonzero).
pub const HOLDER_MAX: u32 = (1 << 20) - 1;

/// Default lease duration: long enough that a deploy never races its own expiry, short
/// enough that a crashed control plane blocks its node only briefly.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// Operations start only with at least this much lease left (else it is renewed first), so
/// that the lease cannot expire between the check and the publishing CAS.
pub const MIN_REMAINING: Duration = Duration::from_secs(2);

/// Encodes a lease word.
pub fn lease_word(holder: u32, expiry_ms: u64) -> u64 {
    debug_assert!(holder != 0 && holder <= HOLDER_MAX);
    ((holder as u64) << EXPIRY_BITS) | (expiry_ms & EXPIRY_MASK)
}

/// Holder of a lease word (0 = free).
pub fn lease_holder(word: u64) -> u32 {
    (word >> EXPIRY_BITS) as u32
}

/// Expiry of a lease word, in ms since the Unix epoch.
pub fn lease_expiry_ms(word: u64) -> u64 {
    word & EXPIRY_MASK
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A fresh holder id: random enough that two control planes started together differ.
pub fn new_holder_id() -> u32 {
    let mut x = std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    x ^= t.rotate_left(17);
    let stack_addr = &x as *const u64 as u64;
    x ^= stack_addr.rotate_left(31);
    x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 29;
    let id = (x as u32) & HOLDER_MAX;
    if id == 0 {
        1
    } else {
        id
    }
}

/// What a lease looks like from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    Free,
    Held { holder: u32, expiry_ms: u64 },
    Expired { holder: u32, expiry_ms: u64 },
}

/// Reads the lease word and classifies it.
pub fn inspect(t: &dyn Transport) -> Result<(u64, LeaseState)> {
    let word = t.read_u64(offsets::HEADER_LEASE)?;
    Ok((word, classify(word, now_ms())))
}

fn classify(word: u64, now: u64) -> LeaseState {
    if word == 0 {
        return LeaseState::Free;
    }
    let (holder, expiry_ms) = (lease_holder(word), lease_expiry_ms(word));
    if expiry_ms <= now {
        LeaseState::Expired { holder, expiry_ms }
    } else {
        LeaseState::Held { holder, expiry_ms }
    }
}

/// A lease this control plane holds (or held) on one node.
#[derive(Debug)]
pub struct Lease {
    holder: u32,
    ttl: Duration,
    /// The word we last wrote, 0 when we do not hold the lease.
    word: u64,
}

impl Lease {
    pub fn new(holder: u32, ttl: Duration) -> Self {
        Self {
            holder,
            ttl,
            word: 0,
        }
    }

    pub fn holder(&self) -> u32 {
        self.holder
    }

    pub fn is_held(&self) -> bool {
        self.word != 0
    }

    /// Takes the lease if it is free or expired, or renews ours when less than
    /// [`MIN_REMAINING`] is left. `holder_pid` reads who holds it, for the error.
    pub fn ensure(&mut self, t: &dyn Transport, holder_pid: impl Fn() -> u32) -> Result<()> {
        let now = now_ms();
        if self.word != 0 && lease_expiry_ms(self.word) > now + MIN_REMAINING.as_millis() as u64 {
            // Still ours in our books; the publishing CAS re-checks nothing else, so make
            // sure nobody broke it (it can only be broken after expiry, which is far).
            return Ok(());
        }
        let new = lease_word(self.holder, now + self.ttl.as_millis() as u64);
        let current = t.read_u64(offsets::HEADER_LEASE)?;
        let takeable = current == 0
            || current == self.word
            || lease_holder(current) == self.holder
            || lease_expiry_ms(current) <= now;
        if !takeable {
            self.word = 0;
            return Err(ControlError::LeaseHeld {
                holder: lease_holder(current),
                pid: holder_pid(),
                remaining_ms: lease_expiry_ms(current).saturating_sub(now),
            });
        }
        let prev = t.compare_and_swap(offsets::HEADER_LEASE, current, new)?;
        if prev != current {
            self.word = 0;
            return Err(ControlError::LeaseHeld {
                holder: lease_holder(prev),
                pid: holder_pid(),
                remaining_ms: lease_expiry_ms(prev).saturating_sub(now),
            });
        }
        self.word = new;
        t.write_u64(
            offsets::HEADER_LEASE_EXPIRES,
            lease_expiry_ms(new).saturating_mul(1_000_000),
        )?;
        Ok(())
    }

    /// Checks, by reading the word, that the lease is still ours. Used right before a
    /// publishing CAS on operations that took long (large writes, reclamation waits).
    pub fn verify(&mut self, t: &dyn Transport) -> Result<()> {
        let current = t.read_u64(offsets::HEADER_LEASE)?;
        if self.word == 0 || current != self.word {
            self.word = 0;
            return Err(ControlError::LeaseLost { word: current });
        }
        Ok(())
    }

    /// Gives the lease up (best effort: if it already changed hands, leaves it).
    pub fn release(&mut self, t: &dyn Transport) -> Result<()> {
        if self.word == 0 {
            return Ok(());
        }
        let word = std::mem::take(&mut self.word);
        t.compare_and_swap(offsets::HEADER_LEASE, word, 0)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_round_trips() {
        let w = lease_word(0xabcde, 1_763_000_000_123);
        assert_eq!(lease_holder(w), 0xabcde);
        assert_eq!(lease_expiry_ms(w), 1_763_000_000_123);
        assert_ne!(w, 0);
    }

    #[test]
    fn classify_expiry() {
        assert_eq!(classify(0, 5), LeaseState::Free);
        let w = lease_word(7, 100);
        assert!(matches!(
            classify(w, 50),
            LeaseState::Held { holder: 7, .. }
        ));
        assert!(matches!(
            classify(w, 100),
            LeaseState::Expired { holder: 7, .. }
        ));
    }

    #[test]
    fn holder_ids_are_nonzero_and_in_range() {
        for _ in 0..100 {
            let h = new_holder_id();
            assert!(h != 0 && h <= HOLDER_MAX);
        }
    }
}
