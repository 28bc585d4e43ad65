//! Connection-manager state: what ties RTU, REJ, DREQ and DREP to queue pairs.
//!
//! Only REQ and REP name a QP of their sender, and DREQ names the QP of its receiver; every
//! other message carries communication IDs only. The table remembers, per connection, both
//! sides' endpoint addresses, communication IDs and QPNs, keyed by the *active* side (the
//! REQ sender): `(active endpoint, active comm ID)`.
//!
//! Field meaning on CM messages: `lQPN` is the QP of the message's **sender**, `dQPN` the QP
//! of its **receiver** — the same direction as BTH DestQP on the data path.
//!
//! | message | lQPN (sender's QP)                 | dQPN (receiver's QP)               |
//! |---------|------------------------------------|------------------------------------|
//! | REQ     | REQ.LocalQPN                        | absent (not chosen yet)            |
//! | REP     | REP.LocalQPN                        | state: the REQ's LocalQPN          |
//! | RTU     | state: active QPN                   | state: passive QPN                 |
//! | REJ     | state: rejecter's QPN, if known     | state: the other side's QPN        |
//! | DREQ    | state: sender's QPN                 | DREQ.RemoteQPN                     |
//! | DREP    | state: sender's QPN                 | state: receiver's QPN              |
//! | others  | absent                              | absent                             |
//!
//! "state" values are absent when no connection matches: the message's comm IDs, sender and
//! receiver must all agree with a recorded connection. A DREQ for a connection nobody set up
//! therefore has no `lQPN`, which is what a policy against fraudulent disconnects keys on.
//!
//! The table changes only for messages the ACL **allowed** ([`CmTable::commit`]): a denied REQ
//! leaves no state behind, so a connect flood the policy rejects cannot fill it. It is bounded;
//! a REQ arriving when it is full is counted and gets no entry.

use rustc_hash::FxHashMap;

use crate::field::{CmType, Field};
use crate::packet::{Endpoint, PacketInfo};
use crate::rule::PacketKey;

/// One connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connection {
    /// Endpoint of the active side (REQ sender).
    pub active: Endpoint,
    /// Endpoint of the passive side.
    pub passive: Endpoint,
    /// Active side's communication ID.
    pub active_comm_id: u32,
    /// Passive side's communication ID, once a REP was allowed.
    pub passive_comm_id: Option<u32>,
    /// Active side's QPN (from the REQ).
    pub active_qpn: u32,
    /// Passive side's QPN (from the REP).
    pub passive_qpn: Option<u32>,
    /// An RTU was allowed.
    pub established: bool,
}

/// Counters of the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// REQs that found the table full.
    pub table_full: u64,
    /// CM messages (other than REQ) that matched no connection.
    pub unknown_connection: u64,
    /// Connections created.
    pub created: u64,
    /// Connections removed (REJ or DREP).
    pub removed: u64,
}

/// Which side of a connection sent a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Active,
    Passive,
}

/// The lookup result carried from [`CmTable::resolve`] to [`CmTable::commit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolution {
    key: Option<(Endpoint, u32)>,
    sender: Option<Side>,
}

/// The per-connection state table.
#[derive(Clone, Debug)]
pub struct CmTable {
    conns: FxHashMap<(Endpoint, u32), Connection>,
    capacity: usize,
    counters: CmCounters,
}

impl CmTable {
    /// A table of at most `capacity` connections.
    pub fn new(capacity: usize) -> CmTable {
        CmTable {
            conns: FxHashMap::default(),
            capacity,
            counters: CmCounters::default(),
        }
    }

    /// Counters so far.
    pub fn counters(&self) -> CmCounters {
        self.counters
    }

    /// Number of connections.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// The connection of an active endpoint and comm ID.
    pub fn get(&self, active: Endpoint, active_comm_id: u32) -> Option<&Connection> {
        self.conns.get(&(active, active_comm_id))
    }

    /// Finds the connection a message belongs to and who sent it.
    fn lookup(
        &self,
        p: &PacketInfo,
        kind: CmType,
        local: u32,
        remote: u32,
    ) -> Option<((Endpoint, u32), Side)> {
        let (src, dst) = (p.src_endpoint(), p.dst_endpoint());
        // Sent by the active side: keyed by (sender, local comm ID).
        if kind != CmType::ConnectReply {
            if let Some(c) = self.conns.get(&(src, local)) {
                let remote_ok = match c.passive_comm_id {
                    Some(pc) => pc == remote,
                    // Before a REP the active side knows no remote ID (REJ of a REQ it sent
                    // cannot come from the active side; only a timeout-driven REJ with 0).
                    None => remote == 0,
                };
                if c.passive == dst && remote_ok {
                    return Some(((src, local), Side::Active));
                }
            }
        }
        // Sent by the passive side: keyed by (receiver, remote comm ID).
        if let Some(c) = self.conns.get(&(dst, remote)) {
            let local_ok = match (kind, c.passive_comm_id) {
                (CmType::ConnectReply, None) => true,
                (CmType::ConnectReject, None) => true,
                (_, Some(pc)) => pc == local,
                _ => false,
            };
            if c.passive == src && local_ok {
                return Some(((dst, remote), Side::Passive));
            }
        }
        None
    }

    /// Fills in `type`'s companions `lQPN` and `dQPN` for a CM message (see the module table).
    pub fn resolve(&mut self, p: &PacketInfo, key: &mut PacketKey) -> Resolution {
        let none = Resolution {
            key: None,
            sender: None,
        };
        let Some(cm) = p.cm else {
            return none;
        };
        let (local, remote) = (cm.local_comm_id, cm.remote_comm_id);
        match cm.kind {
            CmType::ConnectRequest => {
                if let Some(q) = cm.qpn {
                    key.set(Field::LQpn, q as u128);
                }
                Resolution {
                    key: Some((p.src_endpoint(), local)),
                    sender: Some(Side::Active),
                }
            }
            CmType::ConnectReply
            | CmType::ReadyToUse
            | CmType::ConnectReject
            | CmType::DisconnectRequest
            | CmType::DisconnectReply => {
                let found = self.lookup(p, cm.kind, local, remote);
                if found.is_none() {
                    self.counters.unknown_connection += 1;
                }
                let conn = found.and_then(|(k, _)| self.conns.get(&k).copied());
                let side = found.map(|(_, s)| s);
                let (mine, theirs) = match (conn, side) {
                    (Some(c), Some(Side::Active)) => (Some(c.active_qpn), c.passive_qpn),
                    (Some(c), Some(Side::Passive)) => (c.passive_qpn, Some(c.active_qpn)),
                    _ => (None, None),
                };
                let (lqpn, dqpn) = match cm.kind {
                    CmType::ConnectReply => (cm.qpn, theirs),
                    CmType::DisconnectRequest => (mine, cm.qpn),
                    _ => (mine, theirs),
                };
                if let Some(q) = lqpn {
                    key.set(Field::LQpn, q as u128);
                }
                if let Some(q) = dqpn {
                    key.set(Field::DQpn, q as u128);
                }
                Resolution {
                    key: found.map(|(k, _)| k),
                    sender: side,
                }
            }
            _ => none,
        }
    }

    /// Applies an **allowed** CM message to the table.
    pub fn commit(&mut self, p: &PacketInfo, r: Resolution) {
        let Some(cm) = p.cm else {
            return;
        };
        let Some(key) = r.key else {
            return;
        };
        match cm.kind {
            CmType::ConnectRequest => {
                let Some(qpn) = cm.qpn else {
                    return;
                };
                // A REQ for a connection the table already holds (a retransmission, or a
                // copy replayed by someone else) changes nothing: resetting it would undo
                // an allowed REP and RTU, and deny the legitimate RTU and DREQ after it.
                if self.conns.contains_key(&key) {
                    return;
                }
                if self.conns.len() >= self.capacity {
                    self.counters.table_full += 1;
                    return;
                }
                self.counters.created += 1;
                self.conns.insert(
                    key,
                    Connection {
                        active: key.0,
                        passive: p.dst_endpoint(),
                        active_comm_id: key.1,
                        passive_comm_id: None,
                        active_qpn: qpn,
                        passive_qpn: None,
                        established: false,
                    },
                );
            }
            CmType::ConnectReply => {
                if let Some(c) = self.conns.get_mut(&key) {
                    c.passive_comm_id = Some(cm.local_comm_id);
                    c.passive_qpn = cm.qpn;
                }
            }
            CmType::ReadyToUse => {
                if let Some(c) = self.conns.get_mut(&key) {
                    c.established = true;
                }
            }
            CmType::ConnectReject | CmType::DisconnectReply
                if self.conns.remove(&key).is_some() =>
            {
                self.counters.removed += 1;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::craft::{self, Bth, Endpoints};
    use crate::packet::{parse, LinkType, Parsed};
    use std::net::{IpAddr, Ipv4Addr};

    fn cm(from: u8, to: u8, kind: CmType, local: u32, remote: u32, qpn: u32) -> PacketInfo {
        let ep = Endpoints {
            sip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, from)),
            dip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, to)),
            sport: 1000,
        };
        let f = craft::roce(
            &ep,
            Bth {
                opcode: 0x64,
                dest_qp: 1,
                psn: 0,
            },
            &craft::deth(craft::GSI_QKEY, 1),
            &craft::cm_mad(kind, local, remote, qpn),
        );
        match parse(LinkType::Ethernet, &f).unwrap() {
            Parsed::Rdma(i) => i,
            Parsed::NotRdma | Parsed::Uninspected(_) => unreachable!(),
        }
    }

    fn step(t: &mut CmTable, p: &PacketInfo) -> (Option<u128>, Option<u128>) {
        let mut k = PacketKey::from_packet(p);
        let r = t.resolve(p, &mut k);
        t.commit(p, r);
        (k.get(Field::LQpn), k.get(Field::DQpn))
    }

    #[test]
    fn full_connection_lifecycle_fills_qpns() {
        let mut t = CmTable::new(16);
        // A=10.0.0.1 (active, QP 0x100, comm 7) connects to B=10.0.0.2 (QP 0x200, comm 9).
        assert_eq!(
            step(&mut t, &cm(1, 2, CmType::ConnectRequest, 7, 0, 0x100)),
            (Some(0x100), None)
        );
        assert_eq!(
            step(&mut t, &cm(2, 1, CmType::ConnectReply, 9, 7, 0x200)),
            (Some(0x200), Some(0x100))
        );
        assert_eq!(
            step(&mut t, &cm(1, 2, CmType::ReadyToUse, 7, 9, 0)),
            (Some(0x100), Some(0x200))
        );
        assert!(
            t.get(
                Endpoint {
                    kind: crate::packet::EndpointKind::Address,
                    addr: u128::from(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped())
                },
                7
            )
            .unwrap()
            .established
        );
        // Passive side disconnects: DREQ carries the active QPN as remote QPN.
        assert_eq!(
            step(&mut t, &cm(2, 1, CmType::DisconnectRequest, 9, 7, 0x100)),
            (Some(0x200), Some(0x100))
        );
        assert_eq!(
            step(&mut t, &cm(1, 2, CmType::DisconnectReply, 7, 9, 0)),
            (Some(0x100), Some(0x200))
        );
        assert!(t.is_empty());
        assert_eq!(t.counters().removed, 1);
    }

    #[test]
    fn messages_of_unknown_connections_get_no_state() {
        let mut t = CmTable::new(16);
        step(&mut t, &cm(1, 2, CmType::ConnectRequest, 7, 0, 0x100));
        step(&mut t, &cm(2, 1, CmType::ConnectReply, 9, 7, 0x200));
        // An attacker at .66 sends a DREQ naming the connection's comm IDs and QP.
        assert_eq!(
            step(&mut t, &cm(66, 2, CmType::DisconnectRequest, 7, 9, 0x200)),
            (None, Some(0x200))
        );
        // Right sender, wrong comm IDs.
        assert_eq!(
            step(&mut t, &cm(1, 2, CmType::DisconnectRequest, 7, 10, 0x200)),
            (None, Some(0x200))
        );
        assert_eq!(t.counters().unknown_connection, 2);
        assert_eq!(t.len(), 1);
        // A REJ from the passive side before any REP removes the pending connection.
        step(&mut t, &cm(3, 2, CmType::ConnectRequest, 8, 0, 0x300));
        assert_eq!(
            step(&mut t, &cm(2, 3, CmType::ConnectReject, 11, 8, 0)),
            (None, Some(0x300))
        );
        assert_eq!(t.len(), 1);
    }

    /// A CM message over native InfiniBand from LID `slid` to LID `dlid`, with a GRH when
    /// `gids` is given.
    fn ib_cm(
        slid: u16,
        dlid: u16,
        gids: Option<(u128, u128)>,
        kind: CmType,
        local: u32,
        remote: u32,
        qpn: u32,
    ) -> PacketInfo {
        let f = craft::infiniband(
            slid,
            dlid,
            gids,
            Bth {
                opcode: 0x64,
                dest_qp: 1,
                psn: 0,
            },
            &craft::deth(craft::GSI_QKEY, 1),
            &craft::cm_mad(kind, local, remote, qpn),
        );
        match parse(LinkType::InfiniBand, &f).unwrap() {
            Parsed::Rdma(i) => i,
            Parsed::NotRdma | Parsed::Uninspected(_) => unreachable!(),
        }
    }

    /// A connection between LIDs 5 and 7 (no GRH) is not found by a third party whose GRH
    /// names the GIDs `8000::5` and `8000::7`: a LID endpoint is not an address.
    #[test]
    fn lid_endpoints_are_not_gids() {
        let mut t = CmTable::new(16);
        step(
            &mut t,
            &ib_cm(5, 7, None, CmType::ConnectRequest, 7, 0, 0x100),
        );
        step(
            &mut t,
            &ib_cm(7, 5, None, CmType::ConnectReply, 9, 7, 0x200),
        );
        let forged = Some(((1u128 << 127) | 5, (1u128 << 127) | 7));
        assert_eq!(
            step(&mut t, &ib_cm(66, 7, forged, CmType::ReadyToUse, 7, 9, 0)),
            (None, None),
            "a third party's RTU from GID 8000::5 found the LID connection"
        );
        assert_eq!(
            step(
                &mut t,
                &ib_cm(66, 7, forged, CmType::DisconnectRequest, 7, 9, 0x200)
            ),
            (None, Some(0x200)),
            "a third party's DREQ from GID 8000::5 found the LID connection"
        );
        assert_eq!(t.counters().unknown_connection, 2);
        // The real active side, by LID, still finds it.
        assert_eq!(
            step(&mut t, &ib_cm(5, 7, None, CmType::ReadyToUse, 7, 9, 0)),
            (Some(0x100), Some(0x200))
        );
    }

    /// A REQ retransmitted after the REP leaves the connection as it was: the RTU and a DREQ
    /// still find it with both QPNs.
    #[test]
    fn a_retransmitted_req_does_not_reset_the_connection() {
        let mut t = CmTable::new(16);
        step(&mut t, &cm(1, 2, CmType::ConnectRequest, 7, 0, 0x100));
        step(&mut t, &cm(2, 1, CmType::ConnectReply, 9, 7, 0x200));
        assert_eq!(
            step(&mut t, &cm(1, 2, CmType::ConnectRequest, 7, 0, 0x100)),
            (Some(0x100), None)
        );
        assert_eq!(
            step(&mut t, &cm(1, 2, CmType::ReadyToUse, 7, 9, 0)),
            (Some(0x100), Some(0x200))
        );
        assert_eq!(
            step(&mut t, &cm(2, 1, CmType::DisconnectRequest, 9, 7, 0x100)),
            (Some(0x200), Some(0x100))
        );
        assert_eq!(t.counters().created, 1);
        assert_eq!(t.counters().unknown_connection, 0);
    }

    #[test]
    fn denied_messages_leave_no_state_and_capacity_is_bounded() {
        let mut t = CmTable::new(2);
        let req = cm(1, 2, CmType::ConnectRequest, 1, 0, 5);
        let mut k = PacketKey::from_packet(&req);
        let _ = t.resolve(&req, &mut k); // denied: no commit
        assert!(t.is_empty());
        for i in 0..4 {
            step(&mut t, &cm(1, 2, CmType::ConnectRequest, 100 + i, 0, 5));
        }
        assert_eq!(t.len(), 2);
        assert_eq!(t.counters().table_full, 2);
    }
}
