//! A collective update's record in each node's region ([`UpdateIntent`], declared in
//! `rdx-region`'s layout): the update's id, every slot it holds there with the word it
//! replaces and the word that publishes it, and the decision. Broadcasts and migrations
//! write it on every node before holding any slot, so that any control plane that reaches
//! the nodes can finish or undo the update without the disk of the one that started it.
//!
//! The decision has one home: the decision node (the update's first node). Its `state`
//! going from prepared to committed, one compare-and-swap by the coordinator, is the commit
//! point; a recovery that finds it still prepared decides abort with the same
//! compare-and-swap, so exactly one of the two wins. The decision is then copied to every
//! other node before anything depends on it (before any flip, before any release of an
//! abort). docs/broadcast.md argues why no outcome is mixed.

use crate::error::{transport_err, FleetError, Result};
use rdx_region::layout::{
    fnv1a64, intent_state, intent_tag, intent_word, offsets, IntentSlot, UpdateIntent,
    INTENT_ABORTED, INTENT_COMMITTED, INTENT_NONE, INTENT_PREPARED, UPDATE_INTENT_ADDRESS_LEN,
    UPDATE_INTENT_ID_LEN, UPDATE_INTENT_NAME_LEN, UPDATE_INTENT_OFFSET, UPDATE_INTENT_SLOTS,
};
use rdx_transport::{Transport, TransportError};
use serde::Serialize;
use std::mem::{offset_of, size_of};

/// What a node's record says about the update it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Prepared, not decided on this node.
    Prepared,
    /// Decided committed: every slot ends on its new word.
    Committed,
    /// Decided aborted: every slot ends on the word it replaced.
    Aborted,
}

impl Decision {
    fn from_state(state: u64) -> Option<Decision> {
        match state {
            INTENT_PREPARED => Some(Decision::Prepared),
            INTENT_COMMITTED => Some(Decision::Committed),
            INTENT_ABORTED => Some(Decision::Aborted),
            _ => None,
        }
    }

    fn state(self) -> u64 {
        match self {
            Decision::Prepared => INTENT_PREPARED,
            Decision::Committed => INTENT_COMMITTED,
            Decision::Aborted => INTENT_ABORTED,
        }
    }

    /// `prepared`, `committed` or `aborted`.
    pub fn name(self) -> &'static str {
        match self {
            Decision::Prepared => "prepared",
            Decision::Committed => "committed",
            Decision::Aborted => "aborted",
        }
    }
}

/// One node's [`UpdateIntent`], decoded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeIntent {
    /// The update's id (a broadcast's or a migration's).
    pub id: String,
    /// What this node's record says.
    pub decision: Decision,
    /// This node's slots are settled (and, on the decision node, every participant's).
    pub settled: bool,
    /// The host incarnation the record was written for.
    pub incarnation: u64,
    /// The coordinating control plane's holder record (machine tag, pid).
    pub coordinator: u64,
    /// The lease holder id the update used on every node.
    pub holder: u32,
    /// Nodes taking part.
    pub participants: u32,
    /// This node holds the decision.
    pub is_decider: bool,
    /// This node's name in the update (cut to the record's 32 bytes).
    pub node_name: String,
    /// The decision node's address, redacted (`rdx_control::node::redact_address`): a
    /// token never goes into a region.
    pub decider_address: String,
    /// This node's slots in the update.
    #[serde(skip)]
    pub slots: Vec<IntentSlot>,
}

impl NodeIntent {
    /// The tag of [`NodeIntent::id`] in the record's state word.
    pub fn tag(&self) -> u64 {
        tag_of(&self.id)
    }

    /// Whether the record may still matter on a host of `incarnation`: written for it and
    /// not settled.
    pub fn is_unfinished(&self, incarnation: u64) -> bool {
        self.incarnation == incarnation && !self.settled
    }
}

/// The tag an update's id has in [`UpdateIntent::state`]: 56 bits of its hash, never 0.
pub fn tag_of(id: &str) -> u64 {
    (fnv1a64(id.as_bytes()) >> 8).max(1)
}

const RECORD_LEN: usize = size_of::<UpdateIntent>();

fn text<const N: usize>(what: &str, s: &str) -> Result<[u8; N]> {
    let bytes = s.as_bytes();
    if bytes.len() > N || bytes.contains(&0) {
        return Err(FleetError::PlanInvalid(format!(
            "{what} {s:?} does not fit the node's update record ({N} bytes)"
        )));
    }
    let mut out = [0u8; N];
    out[..bytes.len()].copy_from_slice(bytes);
    Ok(out)
}

/// `s` cut to at most `N` bytes on a character boundary: for names that only inform.
fn truncated<const N: usize>(s: &str) -> [u8; N] {
    let mut end = s.len().min(N);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = [0u8; N];
    out[..end].copy_from_slice(&s.as_bytes()[..end]);
    out
}

fn untext(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4"))
}

/// Reads the node's record: `None` when it names no update.
pub fn read(t: &dyn Transport) -> std::result::Result<Option<NodeIntent>, TransportError> {
    let mut b = vec![0u8; RECORD_LEN];
    t.read(UPDATE_INTENT_OFFSET, &mut b)?;
    let word = u64_at(&b, offset_of!(UpdateIntent, state));
    let Some(decision) = Decision::from_state(intent_state(word)) else {
        return Ok(None);
    };
    let id = untext(&b[offset_of!(UpdateIntent, id)..][..UPDATE_INTENT_ID_LEN]);
    if intent_tag(word) != tag_of(&id) {
        // Being rewritten (body before state): no update to speak of yet.
        return Ok(None);
    }
    let count =
        (u32_at(&b, offset_of!(UpdateIntent, slot_count)) as usize).min(UPDATE_INTENT_SLOTS);
    let slots = (0..count)
        .map(|i| {
            let at = offset_of!(UpdateIntent, slots) + i * size_of::<IntentSlot>();
            IntentSlot {
                slot_offset: u64_at(&b, at),
                expected: u64_at(&b, at + 8),
                new_word: u64_at(&b, at + 16),
                budget: u64_at(&b, at + 24),
            }
        })
        .collect();
    Ok(Some(NodeIntent {
        id,
        decision,
        settled: u64_at(&b, offset_of!(UpdateIntent, settled)) != 0,
        incarnation: u64_at(&b, offset_of!(UpdateIntent, incarnation)),
        coordinator: u64_at(&b, offset_of!(UpdateIntent, coordinator)),
        holder: u32_at(&b, offset_of!(UpdateIntent, holder)),
        participants: u32_at(&b, offset_of!(UpdateIntent, participants)),
        is_decider: u32_at(&b, offset_of!(UpdateIntent, is_decider)) != 0,
        node_name: untext(&b[offset_of!(UpdateIntent, node_name)..][..UPDATE_INTENT_NAME_LEN]),
        decider_address: untext(
            &b[offset_of!(UpdateIntent, decider_address)..][..UPDATE_INTENT_ADDRESS_LEN],
        ),
        slots,
    }))
}

/// The unfinished update recorded on a node of host incarnation `incarnation`, if any.
pub fn unfinished(
    t: &dyn Transport,
    incarnation: u64,
) -> std::result::Result<Option<NodeIntent>, TransportError> {
    Ok(read(t)?.filter(|r| r.is_unfinished(incarnation)))
}

fn encode(r: &NodeIntent) -> Result<Vec<u8>> {
    if r.slots.len() > UPDATE_INTENT_SLOTS {
        return Err(FleetError::PlanInvalid(format!(
            "node {}: {} hooks in one update, a node's record holds at most {UPDATE_INTENT_SLOTS}",
            r.node_name,
            r.slots.len()
        )));
    }
    let mut b = vec![0u8; RECORD_LEN];
    let put64 =
        |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    let put32 =
        |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    put64(&mut b, offset_of!(UpdateIntent, incarnation), r.incarnation);
    put64(&mut b, offset_of!(UpdateIntent, coordinator), r.coordinator);
    put32(&mut b, offset_of!(UpdateIntent, holder), r.holder);
    put32(
        &mut b,
        offset_of!(UpdateIntent, slot_count),
        r.slots.len() as u32,
    );
    put32(
        &mut b,
        offset_of!(UpdateIntent, participants),
        r.participants,
    );
    put32(
        &mut b,
        offset_of!(UpdateIntent, is_decider),
        r.is_decider as u32,
    );
    let id: [u8; UPDATE_INTENT_ID_LEN] = text("update id", &r.id)?;
    b[offset_of!(UpdateIntent, id)..][..UPDATE_INTENT_ID_LEN].copy_from_slice(&id);
    let name: [u8; UPDATE_INTENT_NAME_LEN] = truncated(&r.node_name);
    b[offset_of!(UpdateIntent, node_name)..][..UPDATE_INTENT_NAME_LEN].copy_from_slice(&name);
    let address: [u8; UPDATE_INTENT_ADDRESS_LEN] = text(
        "decision node address",
        &rdx_control::node::redact_address(&r.decider_address),
    )?;
    b[offset_of!(UpdateIntent, decider_address)..][..UPDATE_INTENT_ADDRESS_LEN]
        .copy_from_slice(&address);
    for (i, s) in r.slots.iter().enumerate() {
        let at = offset_of!(UpdateIntent, slots) + i * size_of::<IntentSlot>();
        put64(&mut b, at, s.slot_offset);
        put64(&mut b, at + 8, s.expected);
        put64(&mut b, at + 16, s.new_word);
        put64(&mut b, at + 24, s.budget);
    }
    Ok(b)
}

/// Writes `r` (decision [`Decision::Prepared`], not settled) as the node's record, under the
/// node's lease. Refused while the node's record names an unfinished update of this host
/// incarnation: that one must be recovered first (`rdx recover`).
pub fn write(t: &dyn Transport, node: &str, r: &NodeIntent) -> Result<()> {
    let bytes = encode(r)?;
    if let Some(old) = unfinished(t, r.incarnation).map_err(transport_err(node))? {
        return Err(FleetError::Unfinished {
            node: node.into(),
            id: old.id,
            decision: old.decision.name(),
        });
    }
    let te = transport_err(node);
    let old = t
        .read_u64(offsets::INTENT_STATE)
        .map_err(transport_err(node))?;
    // Readers see no update while the body changes (state none), then the new one whole.
    let cleared = t
        .compare_and_swap(offsets::INTENT_STATE, old, INTENT_NONE)
        .map_err(transport_err(node))?;
    if cleared != old {
        return Err(FleetError::Conflict {
            node: node.into(),
            hook: "(update record)".into(),
            expected: old,
            found: cleared,
        });
    }
    let body = offset_of!(UpdateIntent, settled);
    t.write(UPDATE_INTENT_OFFSET + body as u64, &bytes[body..])
        .and_then(|()| t.fence())
        .and_then(|()| {
            t.compare_and_swap(
                offsets::INTENT_STATE,
                INTENT_NONE,
                intent_word(r.tag(), INTENT_PREPARED),
            )
        })
        .map_err(te)?;
    Ok(())
}

/// Decides the update tagged `tag` on this node: `prepared -> to` with one compare-and-swap.
/// Returns the decision the node holds afterwards (`to`, or the one someone else made
/// first); `None` when the node's record names another update.
pub fn decide(
    t: &dyn Transport,
    tag: u64,
    to: Decision,
) -> std::result::Result<Option<Decision>, TransportError> {
    let prepared = intent_word(tag, INTENT_PREPARED);
    let found = t.compare_and_swap(
        offsets::INTENT_STATE,
        prepared,
        intent_word(tag, to.state()),
    )?;
    if found == prepared {
        return Ok(Some(to));
    }
    if intent_tag(found) != tag {
        return Ok(None);
    }
    Ok(Decision::from_state(intent_state(found)))
}

/// Marks the node's record settled, if it still names the update tagged `tag`.
pub fn settle(t: &dyn Transport, tag: u64) -> std::result::Result<(), TransportError> {
    if intent_tag(t.read_u64(offsets::INTENT_STATE)?) == tag {
        t.write_u64(offsets::INTENT_SETTLED, 1)?;
    }
    Ok(())
}

/// One node of an update as its coordinator sees it: name and transport, the decision node
/// first.
pub(crate) type Participant<'a> = (&'a str, &'a dyn Transport);

/// The commit point and the copies: `prepared -> committed` on the decision node
/// (`parts[0]`), then on every other node, before anything depends on it. Fails with
/// [`FleetError::DecidedAbort`] when a recovery decided abort first (nothing was flipped).
pub(crate) fn commit(parts: &[Participant], tag: u64, after_decision: impl FnOnce()) -> Result<()> {
    let (decider, t) = parts[0];
    match decide(t, tag, Decision::Committed).map_err(transport_err(decider))? {
        Some(Decision::Committed) => {}
        other => {
            return Err(FleetError::DecidedAbort {
                node: decider.into(),
                found: other.map_or("another update", Decision::name),
            })
        }
    }
    after_decision();
    for &(node, t) in &parts[1..] {
        decide(t, tag, Decision::Committed).map_err(transport_err(node))?;
    }
    Ok(())
}

/// Records an abort decided by the coordinator before its commit point, the decision node
/// first, and settles every record (best effort: a record left prepared is aborted by
/// recovery, which finds the decision node undecided). Does nothing when the decision node
/// says committed.
pub(crate) fn abort(parts: &[Participant], tag: u64) {
    let Some(&(_, decider)) = parts.first() else {
        return;
    };
    if let Ok(Some(Decision::Committed)) = decide(decider, tag, Decision::Aborted) {
        // Committed after all: only rolling forward is right, which is recovery's to do.
        return;
    }
    for &(_, t) in &parts[1..] {
        let _ = decide(t, tag, Decision::Aborted);
    }
    settle_all(parts, tag);
}

/// Marks every record settled, the decision node's last (it must stay readable until every
/// other node is settled).
pub(crate) fn settle_all(parts: &[Participant], tag: u64) {
    for &(_, t) in parts.iter().skip(1).chain(parts.first()) {
        // Best effort: an unsettled record only makes the next update there ask for
        // `rdx recover`, which settles it.
        let _ = settle(t, tag);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdx_region::layout::DATA_ALIGN;
    use rdx_transport::local::LocalRegion;

    fn intent(id: &str, incarnation: u64) -> NodeIntent {
        NodeIntent {
            id: id.into(),
            decision: Decision::Prepared,
            settled: false,
            incarnation,
            coordinator: 7,
            holder: 9,
            participants: 2,
            is_decider: true,
            node_name: "a".into(),
            decider_address: "shm:/dev/shm/a".into(),
            slots: vec![IntentSlot {
                slot_offset: 0x4000,
                expected: 0x1_0000_1000,
                new_word: 0x2_0000_2000,
                budget: 5,
            }],
        }
    }

    #[test]
    fn one_decision_per_update_and_no_second_update_before_the_first_is_settled() {
        let mut page = vec![0u64; DATA_ALIGN as usize / 8];
        // SAFETY: `page` outlives `t` and is 8-aligned.
        let t = unsafe { LocalRegion::from_raw(page.as_mut_ptr() as *mut u8, DATA_ALIGN) };
        assert_eq!(read(&t).unwrap(), None);
        let first = intent("b-1", 3);
        write(&t, "a", &first).unwrap();
        assert_eq!(read(&t).unwrap(), Some(first.clone()));
        assert!(matches!(
            write(&t, "a", &intent("b-2", 3)),
            Err(FleetError::Unfinished { .. })
        ));
        let tag = first.tag();
        assert_eq!(
            decide(&t, tag, Decision::Committed).unwrap(),
            Some(Decision::Committed)
        );
        // A late abort finds the decision made.
        assert_eq!(
            decide(&t, tag, Decision::Aborted).unwrap(),
            Some(Decision::Committed)
        );
        assert_eq!(decide(&t, tag_of("b-2"), Decision::Aborted).unwrap(), None);
        assert!(unfinished(&t, 3).unwrap().is_some());
        // A record of an earlier host incarnation is not unfinished for this one.
        assert!(unfinished(&t, 4).unwrap().is_none());
        settle(&t, tag).unwrap();
        assert!(unfinished(&t, 3).unwrap().is_none());
        write(&t, "a", &intent("b-2", 3)).unwrap();
        let now = read(&t).unwrap().unwrap();
        assert_eq!(
            (now.id.as_str(), now.decision, now.settled),
            ("b-2", Decision::Prepared, false)
        );
    }
}
