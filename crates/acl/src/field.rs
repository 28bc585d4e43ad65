//! The fields a policy can match on, their value domains and their names.
//!
//! Every field value lives in a `u128` domain `0..=max`; a packet either carries the field
//! (a value) or does not (the field is *absent*, e.g. `VA` on an ACKNOWLEDGE or `sip` on a
//! native InfiniBand packet). `match(..)` on an absent field is false, so `!match(..)` on it is
//! true. Addresses (IPv4, IPv6, GIDs) share one 128-bit domain: IPv4 `a.b.c.d` is stored as
//! the IPv4-mapped IPv6 address `::ffff:a.b.c.d`, exactly as RoCEv2 forms GIDs from IPv4.

use std::fmt;

/// Number of matchable fields.
pub const FIELD_COUNT: usize = 14;

/// A matchable packet field. The discriminant is the field's index in compiled rules
/// (bit `1 << index` in [`crate::rule::Rule::absent_ok`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Field {
    /// RoCEv2 IP source address (IPv4 mapped into IPv6).
    Sip = 0,
    /// RoCEv2 IP destination address.
    Dip = 1,
    /// RoCEv2 UDP source port.
    Sport = 2,
    /// RoCEv2 UDP destination port (4791 for every packet the parser accepts).
    Dport = 3,
    /// InfiniBand LRH source LID.
    SLid = 4,
    /// InfiniBand LRH destination LID.
    DLid = 5,
    /// Source GID: the GRH's on InfiniBand, the IP source address on RoCEv2.
    SGid = 6,
    /// Destination GID: the GRH's on InfiniBand, the IP destination address on RoCEv2.
    DGid = 7,
    /// Communication-management message type (present only on CM MADs).
    CmType = 8,
    /// QPN of the sender's queue pair of a CM message (see docs/acl.md).
    LQpn = 9,
    /// Destination queue pair: BTH DestQP on the data path, the receiver's QP on CM.
    DQpn = 10,
    /// BTH opcode.
    Opcode = 11,
    /// Virtual address from a RETH or AtomicETH.
    Va = 12,
    /// CM MAD whose DETH source QP is not 1 (present only on CM MADs).
    CmForged = 13,
}

impl Field {
    /// All fields in index order.
    pub const ALL: [Field; FIELD_COUNT] = [
        Field::Sip,
        Field::Dip,
        Field::Sport,
        Field::Dport,
        Field::SLid,
        Field::DLid,
        Field::SGid,
        Field::DGid,
        Field::CmType,
        Field::LQpn,
        Field::DQpn,
        Field::Opcode,
        Field::Va,
        Field::CmForged,
    ];

    /// The name used in policy files.
    pub fn name(self) -> &'static str {
        match self {
            Field::Sip => "sip",
            Field::Dip => "dip",
            Field::Sport => "sport",
            Field::Dport => "dport",
            Field::SLid => "sLID",
            Field::DLid => "dLID",
            Field::SGid => "sGID",
            Field::DGid => "dGID",
            Field::CmType => "type",
            Field::LQpn => "lQPN",
            Field::DQpn => "dQPN",
            Field::Opcode => "opcode",
            Field::Va => "VA",
            Field::CmForged => "cmForged",
        }
    }

    /// Looks a field up by its policy name (exact spelling, as documented).
    pub fn from_name(name: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Largest value of the field's domain.
    pub fn max(self) -> u128 {
        match self {
            Field::Sip | Field::Dip | Field::SGid | Field::DGid => u128::MAX,
            Field::Sport | Field::Dport | Field::SLid | Field::DLid => 0xffff,
            Field::CmType => CmType::MAX_VALUE as u128,
            Field::LQpn | Field::DQpn => 0xff_ffff,
            Field::Opcode => 0xff,
            Field::Va => u64::MAX as u128,
            Field::CmForged => 1,
        }
    }

    /// Whether the field holds an address (IPv4/IPv6/GID literals, CIDR prefixes).
    pub fn is_address(self) -> bool {
        matches!(self, Field::Sip | Field::Dip | Field::SGid | Field::DGid)
    }

    /// The field's index in compiled rules.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Communication-management message types (the CM MAD attribute ID minus 0x10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CmType {
    /// REQ (attribute 0x0010).
    ConnectRequest = 0,
    /// MRA (0x0011).
    MessageReceiptAck = 1,
    /// REJ (0x0012).
    ConnectReject = 2,
    /// REP (0x0013).
    ConnectReply = 3,
    /// RTU (0x0014).
    ReadyToUse = 4,
    /// DREQ (0x0015).
    DisconnectRequest = 5,
    /// DREP (0x0016).
    DisconnectReply = 6,
    /// SIDR_REQ (0x0017).
    SidrRequest = 7,
    /// SIDR_REP (0x0018).
    SidrReply = 8,
    /// LAP (0x0019).
    LoadAlternatePath = 9,
    /// APR (0x001A).
    AlternatePathResponse = 10,
    /// Any other CM attribute (ClassPortInfo, vendor attributes, ...).
    Other = 15,
}

impl CmType {
    /// Largest encoded value.
    pub const MAX_VALUE: u8 = 15;

    const NAMES: [(CmType, &'static str); 12] = [
        (CmType::ConnectRequest, "ConnectRequest"),
        (CmType::MessageReceiptAck, "MessageReceiptAck"),
        (CmType::ConnectReject, "ConnectReject"),
        (CmType::ConnectReply, "ConnectReply"),
        (CmType::ReadyToUse, "ReadyToUse"),
        (CmType::DisconnectRequest, "DisconnectRequest"),
        (CmType::DisconnectReply, "DisconnectReply"),
        (CmType::SidrRequest, "SidrRequest"),
        (CmType::SidrReply, "SidrReply"),
        (CmType::LoadAlternatePath, "LoadAlternatePath"),
        (CmType::AlternatePathResponse, "AlternatePathResponse"),
        (CmType::Other, "Other"),
    ];

    /// Maps a CM MAD attribute ID to a type.
    pub fn from_attribute(attr: u16) -> CmType {
        match attr {
            0x10 => CmType::ConnectRequest,
            0x11 => CmType::MessageReceiptAck,
            0x12 => CmType::ConnectReject,
            0x13 => CmType::ConnectReply,
            0x14 => CmType::ReadyToUse,
            0x15 => CmType::DisconnectRequest,
            0x16 => CmType::DisconnectReply,
            0x17 => CmType::SidrRequest,
            0x18 => CmType::SidrReply,
            0x19 => CmType::LoadAlternatePath,
            0x1a => CmType::AlternatePathResponse,
            _ => CmType::Other,
        }
    }

    /// The policy-language name.
    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(t, _)| *t == self)
            .map(|(_, n)| *n)
            .unwrap_or("Other")
    }

    /// Looks a type up by name; also accepts the specification's abbreviations (REQ, REP, ...).
    pub fn from_name(name: &str) -> Option<CmType> {
        if let Some((t, _)) = Self::NAMES.iter().find(|(_, n)| *n == name) {
            return Some(*t);
        }
        Some(match name {
            "REQ" => CmType::ConnectRequest,
            "MRA" => CmType::MessageReceiptAck,
            "REJ" => CmType::ConnectReject,
            "REP" => CmType::ConnectReply,
            "RTU" => CmType::ReadyToUse,
            "DREQ" => CmType::DisconnectRequest,
            "DREP" => CmType::DisconnectReply,
            "SIDR_REQ" => CmType::SidrRequest,
            "SIDR_REP" => CmType::SidrReply,
            "LAP" => CmType::LoadAlternatePath,
            "APR" => CmType::AlternatePathResponse,
            _ => return None,
        })
    }
}

/// BTH opcodes with their names. Reliable Connection opcodes carry no prefix (they are what
/// policies talk about); the other transports are prefixed `UC_`, `UD_`, `RD_`, `XRC_`.
pub const OPCODES: &[(u8, &str)] = &[
    (0x00, "SEND_FIRST"),
    (0x01, "SEND_MIDDLE"),
    (0x02, "SEND_LAST"),
    (0x03, "SEND_LAST_WITH_IMMEDIATE"),
    (0x04, "SEND_ONLY"),
    (0x05, "SEND_ONLY_WITH_IMMEDIATE"),
    (0x06, "RDMA_WRITE_FIRST"),
    (0x07, "RDMA_WRITE_MIDDLE"),
    (0x08, "RDMA_WRITE_LAST"),
    (0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE"),
    (0x0a, "RDMA_WRITE_ONLY"),
    (0x0b, "RDMA_WRITE_ONLY_WITH_IMMEDIATE"),
    (0x0c, "RDMA_READ_REQUEST"),
    (0x0d, "RDMA_READ_RESPONSE_FIRST"),
    (0x0e, "RDMA_READ_RESPONSE_MIDDLE"),
    (0x0f, "RDMA_READ_RESPONSE_LAST"),
    (0x10, "RDMA_READ_RESPONSE_ONLY"),
    (0x11, "ACKNOWLEDGE"),
    (0x12, "ATOMIC_ACKNOWLEDGE"),
    (0x13, "COMPARE_SWAP"),
    (0x14, "FETCH_ADD"),
    (0x16, "SEND_LAST_WITH_INVALIDATE"),
    (0x17, "SEND_ONLY_WITH_INVALIDATE"),
    (0x20, "UC_SEND_FIRST"),
    (0x21, "UC_SEND_MIDDLE"),
    (0x22, "UC_SEND_LAST"),
    (0x23, "UC_SEND_LAST_WITH_IMMEDIATE"),
    (0x24, "UC_SEND_ONLY"),
    (0x25, "UC_SEND_ONLY_WITH_IMMEDIATE"),
    (0x26, "UC_RDMA_WRITE_FIRST"),
    (0x27, "UC_RDMA_WRITE_MIDDLE"),
    (0x28, "UC_RDMA_WRITE_LAST"),
    (0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE"),
    (0x2a, "UC_RDMA_WRITE_ONLY"),
    (0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"),
    (0x64, "UD_SEND_ONLY"),
    (0x65, "UD_SEND_ONLY_WITH_IMMEDIATE"),
    (0x81, "CNP"),
];

/// Opcode groups: the short names a policy uses for a verb. `SEND` and `WRITE` hold the
/// Unreliable Connection opcodes as well as the Reliable Connection ones (a UC write is as
/// much a write into a window as an RC one); the UD sends are not in `SEND` (CM messages
/// travel in them: name `UD_SEND_ONLY` for those).
pub const OPCODE_GROUPS: &[(&str, &[u8])] = &[
    (
        "SEND",
        &[
            0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x16, 0x17, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25,
        ],
    ),
    (
        "WRITE",
        &[
            0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b,
        ],
    ),
    ("READ", &[0x0c, 0x0d, 0x0e, 0x0f, 0x10]),
    ("CAS", &[0x13]),
    ("FAA", &[0x14]),
    ("ATOMIC", &[0x13, 0x14]),
    ("ACK", &[0x11, 0x12]),
];

/// Name of an opcode, if it has one.
pub fn opcode_name(op: u8) -> Option<&'static str> {
    OPCODES.iter().find(|(o, _)| *o == op).map(|(_, n)| *n)
}

/// The opcodes a name stands for: a single opcode or a group.
pub fn opcodes_by_name(name: &str) -> Option<Vec<u8>> {
    if let Some((op, _)) = OPCODES.iter().find(|(_, n)| *n == name) {
        return Some(vec![*op]);
    }
    OPCODE_GROUPS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, ops)| ops.to_vec())
}

/// Extension headers that follow the BTH for an opcode, in wire order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpcodeHeaders {
    /// Reliable Datagram ETH (4 bytes) — RD only.
    pub rdeth: bool,
    /// Datagram ETH (8 bytes): Q_Key, source QP.
    pub deth: bool,
    /// RDMA ETH (16 bytes): VA, R_Key, DMA length.
    pub reth: bool,
    /// Atomic ETH (28 bytes): VA, R_Key, swap/add, compare.
    pub atomic_eth: bool,
    /// ACK ETH (4 bytes): syndrome, MSN.
    pub aeth: bool,
    /// Atomic ACK ETH (8 bytes): original remote data.
    pub atomic_ack_eth: bool,
    /// Immediate data (4 bytes).
    pub imm: bool,
    /// Invalidate ETH (4 bytes): R_Key to invalidate.
    pub ieth: bool,
}

/// The extension headers an opcode carries, or `None` for an opcode the parser does not know
/// (such packets are denied as malformed: an unknown opcode cannot be sized).
pub fn opcode_headers(op: u8) -> Option<OpcodeHeaders> {
    let h = OpcodeHeaders::default();
    let transport = op >> 5;
    let code = op & 0x1f;
    // UC reuses the RC codes 0x00-0x0b; RD and XRC are not carried on RoCEv2 in practice.
    let rc_like = match transport {
        0 => true,
        1 => code <= 0x0b,
        _ => false,
    };
    if rc_like {
        return Some(match code {
            0x00..=0x02 | 0x04 => h,
            0x03 | 0x05 => OpcodeHeaders { imm: true, ..h },
            0x06 | 0x0a => OpcodeHeaders { reth: true, ..h },
            0x07 | 0x08 => h,
            0x09 => OpcodeHeaders { imm: true, ..h },
            0x0b => OpcodeHeaders {
                reth: true,
                imm: true,
                ..h
            },
            0x0c => OpcodeHeaders { reth: true, ..h },
            0x0d | 0x0f | 0x10 | 0x11 => OpcodeHeaders { aeth: true, ..h },
            0x0e => h,
            0x12 => OpcodeHeaders {
                aeth: true,
                atomic_ack_eth: true,
                ..h
            },
            0x13 | 0x14 => OpcodeHeaders {
                atomic_eth: true,
                ..h
            },
            0x16 | 0x17 => OpcodeHeaders { ieth: true, ..h },
            _ => return None,
        });
    }
    match op {
        0x64 => Some(OpcodeHeaders { deth: true, ..h }),
        0x65 => Some(OpcodeHeaders {
            deth: true,
            imm: true,
            ..h
        }),
        // CNP: BTH followed by 16 reserved bytes, which the parser does not need.
        0x81 => Some(h),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for f in Field::ALL {
            assert_eq!(Field::from_name(f.name()), Some(f));
            assert_eq!(f.index(), Field::ALL.iter().position(|g| *g == f).unwrap());
        }
        for (op, name) in OPCODES {
            assert_eq!(opcodes_by_name(name), Some(vec![*op]));
            assert_eq!(opcode_name(*op), Some(*name));
            assert!(opcode_headers(*op).is_some(), "{name} must be sizable");
        }
        for t in CmType::NAMES.iter().map(|(t, _)| *t) {
            assert_eq!(CmType::from_name(t.name()), Some(t));
        }
        assert_eq!(CmType::from_attribute(0x15), CmType::DisconnectRequest);
        assert_eq!(opcodes_by_name("READ").unwrap().len(), 5);
        assert!(opcodes_by_name("NOPE").is_none());
    }

    /// `WRITE` and `SEND` cover every connected transport's writes and sends: a UC write
    /// does not escape a `WRITE` deny. The UD sends (CM travels in them) are not in `SEND`.
    #[test]
    fn verb_groups_include_unreliable_connection() {
        let group = |g: &str| opcodes_by_name(g).unwrap();
        for (op, name) in OPCODES {
            if name.contains("RDMA_WRITE") {
                assert!(group("WRITE").contains(op), "{name} not in WRITE");
            }
            if name.contains("SEND") && !name.starts_with("UD_") {
                assert!(group("SEND").contains(op), "{name} not in SEND");
            }
        }
        assert!(!group("SEND").contains(&0x64));
    }
}
