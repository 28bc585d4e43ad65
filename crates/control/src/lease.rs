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
//! A holder on this machine that died is not waited for: the holder also records who it is
//! ([`holder_record`]: its pid, and a tag of the boot and pid namespace it runs in), and a
//! control plane in the same boot and pid namespace that finds no such process breaks the
//! lease at once ([`holder_is_dead_here`]). Breaking is the same compare-and-swap of the exact
//! word seen, so a live control plane that took the lease meanwhile is never overruled; a
//! reused pid only makes the breaker wait for the expiry, as before.
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

/// Wall-clock time in ms since the Unix epoch, the unit of lease expiries.
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

/// Where this process runs, as far as its pids mean anything: a 32-bit tag of the boot
/// (`/proc/sys/kernel/random/boot_id`) and the pid namespace (`/proc/self/ns/pid`). 0 when
/// either cannot be read, and then no lease is ever broken early.
pub fn local_holder_tag() -> u32 {
    static TAG: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *TAG.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id");
        let ns = std::fs::read_link("/proc/self/ns/pid");
        let (Ok(boot), Ok(ns)) = (boot, ns) else {
            return 0;
        };
        // FNV-1a over both: a tag, not a secret; equal tags say "same boot, same namespace".
        let mut h: u32 = 0x811c_9dc5;
        for b in boot.trim().bytes().chain(ns.to_string_lossy().bytes()) {
            h = (h ^ b as u32).wrapping_mul(0x0100_0193);
        }
        h.max(1)
    })
}

/// The record a lease holder leaves beside the lease: its tag in the high half, its pid in
/// the low half.
pub fn holder_record(pid: u32) -> u64 {
    ((local_holder_tag() as u64) << 32) | pid as u64
}

/// The pid in a holder record (older records hold the pid alone).
pub fn holder_record_pid(record: u64) -> u32 {
    record as u32
}

/// Whether the holder of `record` is a process of this boot and pid namespace that no longer
/// exists. Records of other machines, namespaces or older versions (tag 0) are never dead.
pub fn holder_is_dead_here(record: u64) -> bool {
    let (tag, pid) = ((record >> 32) as u32, holder_record_pid(record));
    if tag == 0 || tag != local_holder_tag() || pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill with signal 0 sends nothing; it only asks whether the pid exists.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// What a lease looks like from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Nobody holds the lease.
    Free,
    /// Held until `expiry_ms`.
    Held {
        /// The holder's id.
        holder: u32,
        /// Expiry, in ms since the Unix epoch.
        expiry_ms: u64,
    },
    /// Held by a control plane that stopped renewing it: any control plane may break it.
    Expired {
        /// The holder's id.
        holder: u32,
        /// When it expired, in ms since the Unix epoch.
        expiry_ms: u64,
    },
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
    /// A lease for holder id `holder` (nonzero, at most [`HOLDER_MAX`]), taken for `ttl`
    /// each time, not held yet.
    pub fn new(holder: u32, ttl: Duration) -> Self {
        Self {
            holder,
            ttl,
            word: 0,
        }
    }

    /// This control plane's holder id.
    pub fn holder(&self) -> u32 {
        self.holder
    }

    /// Whether this control plane believes it holds the lease (the next publish re-checks).
    pub fn is_held(&self) -> bool {
        self.word != 0
    }

    /// Takes the lease if it is free or expired (or its holder is a process of this machine
    /// that no longer exists), or renews ours when less than [`MIN_REMAINING`] is left.
    /// `holder` reads the holder's record ([`holder_record`]).
    pub fn ensure(&mut self, t: &dyn Transport, holder: impl Fn() -> u64) -> Result<()> {
        let holder_pid = || holder_record_pid(holder());
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
            || lease_expiry_ms(current) <= now
            || holder_is_dead_here(holder());
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
    fn a_dead_holder_of_this_machine_is_recognised_and_no_other() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        assert!(
            holder_is_dead_here(holder_record(dead)),
            "a reaped child is dead"
        );
        assert!(
            !holder_is_dead_here(holder_record(std::process::id())),
            "we are alive"
        );
        // A pid recorded by another machine or namespace, or by an older version: never.
        let foreign = ((local_holder_tag().wrapping_add(1) as u64) << 32) | dead as u64;
        assert!(!holder_is_dead_here(foreign));
        assert!(!holder_is_dead_here(dead as u64));
        assert_eq!(holder_record_pid(holder_record(dead)), dead);
    }

    #[test]
    fn a_live_lease_of_a_dead_local_holder_is_taken_at_once() {
        let mut mem = vec![0u64; 4096];
        // SAFETY: `mem` outlives the region view and is 8-byte aligned.
        let t = unsafe {
            rdx_transport::local::LocalRegion::from_raw(mem.as_mut_ptr().cast(), 4096 * 8)
        };
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        // Another holder's lease with most of its ten seconds left.
        let theirs = lease_word(0x1234, now_ms() + 9_000);
        t.write_u64(offsets::HEADER_LEASE, theirs).unwrap();
        let mut ours = Lease::new(0x4321, DEFAULT_TTL);
        // Alive (this process) or of another machine: refused, as before.
        let e = ours
            .ensure(&t, || holder_record(std::process::id()))
            .unwrap_err();
        assert!(
            matches!(e, ControlError::LeaseHeld { holder: 0x1234, .. }),
            "{e}"
        );
        assert!(ours.ensure(&t, || dead as u64).is_err());
        // Dead, here: taken.
        ours.ensure(&t, || holder_record(dead)).unwrap();
        assert_eq!(
            lease_holder(t.read_u64(offsets::HEADER_LEASE).unwrap()),
            0x4321
        );
    }

    #[test]
    fn holder_ids_are_nonzero_and_in_range() {
        for _ in 0..100 {
            let h = new_holder_id();
            assert!(h != 0 && h <= HOLDER_MAX);
        }
    }
}
