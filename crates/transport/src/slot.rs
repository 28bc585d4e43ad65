//! The writer side of the hook-slot and epoch protocol: publishing a version on a hook,
//! holding and releasing a hook for a collective update, waiting until no host thread can
//! still run what was unpublished, and finishing or undoing a hold that a dead control
//! plane left behind. Every control plane (a single deploy in `rdx-control`, a broadcast or
//! a migration in `rdx-fleet`) changes a hook slot's active word through this module and
//! nothing else, so the ordering argument below is the only one to check.
//!
//! # The reader it must be correct against
//!
//! A host thread runs a hook (`crates/runtime/src/hook.rs`, `thread.rs`) as follows:
//!
//! 1. makes its thread slot's epoch odd: a plain store and a compiler fence, no hardware
//!    fence (the hook path must stay a few nanoseconds);
//! 2. loads the slot's active word with acquire ordering;
//! 3. if the hold bit ([`ACTIVE_HOLD`]) is set: makes its epoch even, waits (spinning, then
//!    yielding) and goes back to 1; after the header's `hold_timeout_ns` it stops waiting and
//!    runs the word without its hold bit;
//! 4. validates the entry, serialises its instruction stream the first time it runs that
//!    word, loads the slot's budget (relaxed) and runs the code;
//! 5. makes its epoch even with a release store.
//!
//! A thread of another sandbox that runs this region's code through a cross-sandbox call
//! (`crates/xcall/src/call.rs`) takes the same steps on a thread slot of this region; such a
//! sandbox is an rdx host too, registered for the same barrier as the region's own host.
//!
//! # Publish: [`publish`]
//!
//! Budget store, [`Transport::fence`], compare-and-swap of the active word, generation
//! increment. The caller has written everything the new version needs (code, maps, records)
//! before calling.
//!
//! - The fence completes every earlier write of the control plane (the code's bytes are
//!   plain writes, not atomic as a whole; on the fabric a write is only done once completed)
//!   before the swap. The swap is sequentially consistent, so it is also a release: a reader
//!   whose acquire load (step 2) returns the new word sees every byte written before it,
//!   and the budget written for it. A reader sees the old word or the new one, never a mix.
//! - The budget is stored before the swap, so no run of the new version reads the old
//!   class's budget. A run of the old version that starts between the two runs under the
//!   new budget: both are budgets bound to this hook by an operator.
//! - A compare-and-swap, not a store: a publish replaces exactly the word its caller saw
//!   (prepared against, or held). A word changed meanwhile (another control plane, a lease
//!   breaker, a hold) is reported as [`SlotError::Changed`] and left alone.
//! - The region's generation is incremented after the swap: a generation a control plane
//!   reads counts only publications that happened. The hook path never reads it.
//! - Instruction-side coherence is the reader's part (step 4, and on aarch64 the cache
//!   maintenance docs/region.md describes); a control plane never publishes different code
//!   under a word a host may remember, because versions only grow.
//!
//! # Hold, flip, release: [`hold`], [`publish`], [`release`]
//!
//! A collective update holds each hook with `w -> w|1` ([`hold`]), flips it while held with
//! `w|1 -> new|1` ([`publish`] of [`held`] words) and releases it with `new|1 -> new`
//! ([`release`]); undoing a hold before the flip is `w|1 -> w`. Each is a compare-and-swap
//! of the exact word the protocol expects, so two control planes (or a control plane and
//! recovery) never undo each other's step silently. While the bit is set, readers wait
//! outside their epoch (step 3); a reader that gives up runs the word without its hold bit,
//! which is always a complete version (the old one before the flip, the new one after), so
//! a control plane that dies holding a hook delays requests but never stalls the host or
//! shows it a half-written version.
//!
//! # Quiescence: [`wait_quiescent`]
//!
//! After new callers stopped entering a word (a flip or a detach, or a hold, after which
//! callers wait instead), a control plane that wants to free its code or maps, or to know
//! that no request is still inside it, calls [`wait_quiescent`]:
//! [`Transport::remote_barrier`], a snapshot of every owned thread slot's epoch
//! ([`thread_epochs`]), then a wait until each odd one has changed.
//!
//! - The barrier is the other half of step 1: the reader's epoch store has no hardware
//!   fence, so it could still sit in its store buffer when its load of the active word
//!   (step 2) reads the old word, and a snapshot would then see an even epoch for a thread
//!   about to run the old code. The barrier makes every host thread pass a full barrier
//!   (`membarrier` on shared memory, the node's barrier service on the fabric): a thread
//!   that loaded the word before it shows its odd epoch to the snapshot; a thread that
//!   loads the word after it sees the swap, which happened before the barrier.
//! - An odd epoch in the snapshot means the thread may run the old version; once the word
//!   changed, the thread left (step 5 is a release store, so all it did inside happened
//!   before we read the change). An even epoch means the thread was outside, and its next
//!   entry loads the new word. Unowned thread slots run nothing.
//! - Readers waiting on a hold are outside their epoch, so a wait inside a bubble never
//!   waits for the bubble's own callers.
//!
//! # Recovery: [`recover`]
//!
//! A control plane that died inside a bubble leaves slots at `w|1` or `new|1`. From the
//! update's intent record and whether its commit record was written, [`recover`] rolls the
//! slot forward ([`publish`] of the held words, then [`release`]) or back (`w|1 -> w`) with
//! the same steps as above; a slot found at any other word was changed by someone else
//! since and is left as it is.

use crate::{Transport, TransportError};
use rdx_region::geometry::HeaderInfo;
use rdx_region::layout::{offsets, ThreadSlot, ACTIVE_HOLD};
use std::mem::size_of;
use std::time::{Duration, Instant};

/// Why a step on a hook slot's active word did not happen.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// The active word was not the one the step replaces: someone else changed it. Nothing
    /// was written to the word.
    #[error("active word changed: expected {expected:#018x}, found {found:#018x}")]
    Changed {
        /// The word the step replaces.
        expected: u64,
        /// The word found instead.
        found: u64,
    },
    /// The transport failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// Why [`wait_quiescent`] returned before every host thread left.
#[derive(Debug, thiserror::Error)]
pub enum QuiesceError {
    /// This thread slot was still inside extension code at the deadline.
    #[error("thread slot {thread_slot} stayed inside extension code")]
    StillInside {
        /// Index of the thread slot.
        thread_slot: u32,
    },
    /// The transport failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// How [`wait_quiescent`] waits between two reads of an epoch word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Poll {
    /// Busy-wait: inside a bubble, where callers wait for us.
    Spin,
    /// Sleep: reclamation, which nobody waits for.
    Sleep(Duration),
}

/// `word` with the hold bit set: what a held slot shows for `word`.
pub const fn held(word: u64) -> u64 {
    word | ACTIVE_HOLD
}

/// Whether an active word has its hold bit set.
pub const fn is_held(word: u64) -> bool {
    word & ACTIVE_HOLD != 0
}

/// The active word of the hook slot at region offset `slot_offset` (acquire load).
pub fn read_active<T: Transport + ?Sized>(t: &T, slot_offset: u64) -> Result<u64, TransportError> {
    t.read_u64(slot_offset + offsets::HOOK_ACTIVE)
}

/// The instruction budget per run stored in the hook slot at `slot_offset`.
pub fn read_budget<T: Transport + ?Sized>(t: &T, slot_offset: u64) -> Result<u64, TransportError> {
    t.read_u64(slot_offset + offsets::HOOK_BUDGET)
}

/// The region's generation: how many publications it has seen.
pub fn generation<T: Transport + ?Sized>(t: &T) -> Result<u64, TransportError> {
    t.read_u64(offsets::HEADER_GENERATION)
}

/// Publishes `new_word` on the hook slot at `slot_offset` in place of `expected`: stores
/// `budget` (when given), fences, swaps the word, increments the generation. Returns the new
/// generation. See the module doc for why in this order.
pub fn publish<T: Transport + ?Sized>(
    t: &T,
    slot_offset: u64,
    expected: u64,
    new_word: u64,
    budget: Option<u64>,
) -> Result<u64, SlotError> {
    if let Some(b) = budget {
        t.write_u64(slot_offset + offsets::HOOK_BUDGET, b)?;
    }
    t.fence()?;
    swap(t, slot_offset, expected, new_word)?;
    Ok(t.fetch_and_add(offsets::HEADER_GENERATION, 1)? + 1)
}

/// Holds the hook slot at `slot_offset`, which must show `word`: `word -> word|1`. Callers
/// of the hook wait from now on (at most the region's hold timeout).
pub fn hold<T: Transport + ?Sized>(t: &T, slot_offset: u64, word: u64) -> Result<(), SlotError> {
    swap(t, slot_offset, word, held(word))
}

/// Releases the hook slot at `slot_offset`, held on `word`: `word|1 -> word`. Callers run
/// `word` from now on.
pub fn release<T: Transport + ?Sized>(t: &T, slot_offset: u64, word: u64) -> Result<(), SlotError> {
    swap(t, slot_offset, held(word), word)
}

/// The one compare-and-swap every step above is made of.
fn swap<T: Transport + ?Sized>(
    t: &T,
    slot_offset: u64,
    expected: u64,
    new: u64,
) -> Result<(), SlotError> {
    let found = t.compare_and_swap(slot_offset + offsets::HOOK_ACTIVE, expected, new)?;
    if found != expected {
        return Err(SlotError::Changed { expected, found });
    }
    Ok(())
}

/// Epoch words of every owned thread slot: (slot index, epoch). Odd means the thread is
/// inside extension code.
pub fn thread_epochs<T: Transport + ?Sized>(
    t: &T,
    info: &HeaderInfo,
) -> Result<Vec<(u32, u64)>, TransportError> {
    let n = info.thread_slots as usize;
    let mut bytes = vec![0u8; n * size_of::<ThreadSlot>()];
    t.read(info.thread_offset(0), &mut bytes)?;
    let mut out = Vec::new();
    for (i, s) in bytes.chunks_exact(size_of::<ThreadSlot>()).enumerate() {
        let owner = u64::from_le_bytes(s[0..8].try_into().expect("8"));
        if owner != 0 {
            out.push((
                i as u32,
                t.read_u64(info.thread_offset(i as u32) + offsets::THREAD_EPOCH)?,
            ));
        }
    }
    Ok(out)
}

/// Waits until no host thread can still be running a word that stopped being published
/// before this call: remote barrier, epoch snapshot, then until every odd epoch changed
/// (see the module doc). Gives up at `deadline` with [`QuiesceError::StillInside`].
pub fn wait_quiescent<T: Transport + ?Sized>(
    t: &T,
    info: &HeaderInfo,
    deadline: Instant,
    poll: Poll,
) -> Result<(), QuiesceError> {
    t.remote_barrier()?;
    let inside = thread_epochs(t, info)?
        .into_iter()
        .filter(|(_, e)| e % 2 == 1);
    for (slot, epoch) in inside {
        let at = info.thread_offset(slot) + offsets::THREAD_EPOCH;
        while t.read_u64(at)? == epoch {
            if Instant::now() > deadline {
                return Err(QuiesceError::StillInside { thread_slot: slot });
            }
            match poll {
                Poll::Spin => std::hint::spin_loop(),
                Poll::Sleep(d) => std::thread::sleep(d),
            }
        }
    }
    Ok(())
}

/// One slot's share of an interrupted collective update, as its intent record gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldUpdate {
    /// The word the update replaces (held as `expected|1`).
    pub expected: u64,
    /// The word that publishes the update (flipped to `new_word|1`, then released).
    pub new_word: u64,
    /// The class budget written with the flip.
    pub budget: u64,
}

/// Finishes (`committed`) or undoes one slot of a collective update whose control plane
/// died: committed, a slot at `expected|1` is flipped to `new_word|1` ([`publish`]) and a
/// slot at `new_word|1` released; not committed, a slot at `expected|1` is released to
/// `expected`. Any other word was changed by someone else since and is left alone.
/// Idempotent. Returns the word the slot shows afterwards.
pub fn recover<T: Transport + ?Sized>(
    t: &T,
    slot_offset: u64,
    update: &HeldUpdate,
    committed: bool,
) -> Result<u64, TransportError> {
    // A step that finds another word did nothing; the word read back says what is there.
    let step = |r: Result<(), SlotError>| match r {
        Ok(_) | Err(SlotError::Changed { .. }) => read_active(t, slot_offset),
        Err(SlotError::Transport(e)) => Err(e),
    };
    let mut word = read_active(t, slot_offset)?;
    if committed {
        if word == held(update.expected) {
            word = step(
                publish(
                    t,
                    slot_offset,
                    word,
                    held(update.new_word),
                    Some(update.budget),
                )
                .map(drop),
            )?;
        }
        if word == held(update.new_word) {
            word = step(release(t, slot_offset, update.new_word))?;
        }
    } else if word == held(update.expected) {
        word = step(release(t, slot_offset, update.expected))?;
    }
    Ok(word)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::LocalRegion;
    use rdx_region::geometry::{encode_header, RegionParams};
    use rdx_region::layout::{active_word, Arch};

    struct Region {
        _mem: Vec<u64>,
        t: LocalRegion,
        info: HeaderInfo,
    }

    fn region() -> Region {
        let params = RegionParams {
            thread_slots: 4,
            ..RegionParams::default()
        };
        let (head, info) = encode_header(&params, Arch::X86_64, 0, 0, 0, 0, 0, 0, 0).unwrap();
        let mut mem = vec![0u64; info.region_size as usize / 8];
        // SAFETY: `mem` lives as long as the returned Region and is 8-aligned.
        let t = unsafe { LocalRegion::from_raw(mem.as_mut_ptr() as *mut u8, info.region_size) };
        t.write(0, &head).unwrap();
        Region { _mem: mem, t, info }
    }

    const V1: u64 = active_word(1, 0x1000);
    const V2: u64 = active_word(2, 0x2000);

    #[test]
    fn publish_swaps_writes_the_budget_and_counts_and_refuses_a_changed_word() {
        let r = region();
        let slot = r.info.hook_offset(3);
        assert_eq!(publish(&r.t, slot, 0, V1, Some(77)).unwrap(), 1);
        assert_eq!(read_active(&r.t, slot).unwrap(), V1);
        assert_eq!(read_budget(&r.t, slot).unwrap(), 77);
        let e = publish(&r.t, slot, 0, V2, None).unwrap_err();
        assert!(matches!(
            e,
            SlotError::Changed {
                expected: 0,
                found: V1
            }
        ));
        assert_eq!(read_active(&r.t, slot).unwrap(), V1);
        assert_eq!(generation(&r.t).unwrap(), 1);
    }

    #[test]
    fn hold_flip_release() {
        let r = region();
        let slot = r.info.hook_offset(0);
        publish(&r.t, slot, 0, V1, None).unwrap();
        hold(&r.t, slot, V1).unwrap();
        assert!(is_held(read_active(&r.t, slot).unwrap()));
        assert!(matches!(
            hold(&r.t, slot, V1),
            Err(SlotError::Changed { .. })
        ));
        publish(&r.t, slot, held(V1), held(V2), Some(5)).unwrap();
        assert!(matches!(
            release(&r.t, slot, V1),
            Err(SlotError::Changed { .. })
        ));
        release(&r.t, slot, V2).unwrap();
        assert_eq!(read_active(&r.t, slot).unwrap(), V2);
    }

    #[test]
    fn recovery_rolls_forward_or_back_from_every_held_state_and_leaves_others_alone() {
        let update = HeldUpdate {
            expected: V1,
            new_word: V2,
            budget: 9,
        };
        for (found, committed, after) in [
            (held(V1), true, V2),
            (held(V2), true, V2),
            (V2, true, V2),
            (held(V1), false, V1),
            (V1, false, V1),
            // Someone else's word: untouched either way.
            (active_word(7, 0x3000), true, active_word(7, 0x3000)),
            (held(V2), false, held(V2)),
        ] {
            let r = region();
            let slot = r.info.hook_offset(1);
            r.t.write_u64(slot + offsets::HOOK_ACTIVE, found).unwrap();
            let now = recover(&r.t, slot, &update, committed).unwrap();
            assert_eq!(now, after, "{found:#x} committed={committed}");
            assert_eq!(read_active(&r.t, slot).unwrap(), after);
            // Idempotent.
            assert_eq!(recover(&r.t, slot, &update, committed).unwrap(), after);
        }
    }

    #[test]
    fn quiescence_waits_for_odd_epochs_of_owned_slots_only() {
        let r = region();
        let epoch_at = |s: u32| r.info.thread_offset(s) + offsets::THREAD_EPOCH;
        let owner_at = |s: u32| r.info.thread_offset(s) + offsets::THREAD_OWNER;
        // Slot 0: owned, outside. Slot 1: unowned with a stale odd epoch. Slot 2: owned,
        // inside.
        r.t.write_u64(owner_at(0), 11).unwrap();
        r.t.write_u64(epoch_at(0), 4).unwrap();
        r.t.write_u64(epoch_at(1), 5).unwrap();
        r.t.write_u64(owner_at(2), 12).unwrap();
        r.t.write_u64(epoch_at(2), 7).unwrap();
        assert_eq!(thread_epochs(&r.t, &r.info).unwrap(), vec![(0, 4), (2, 7)]);
        let soon = Instant::now() + Duration::from_millis(20);
        assert!(matches!(
            wait_quiescent(&r.t, &r.info, soon, Poll::Spin),
            Err(QuiesceError::StillInside { thread_slot: 2 })
        ));
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(5));
                r.t.write_u64(epoch_at(2), 8).unwrap();
            });
            let later = Instant::now() + Duration::from_secs(10);
            wait_quiescent(&r.t, &r.info, later, Poll::Sleep(Duration::from_micros(50))).unwrap();
        });
    }
}
