//! Zero-copy parsing of RoCEv2 and native InfiniBand packets down to the fields policies match.
//!
//! Layouts (InfiniBand Architecture Specification vol. 1 ch. 9 and 12, RoCEv2 annex A17):
//!
//! - RoCEv2: Ethernet [802.1Q/802.1ad tags] · IPv4 or IPv6 · UDP (dport 4791) · BTH · ext. headers
//!   · payload · ICRC (4 bytes). The datagram ends where the UDP length says.
//! - InfiniBand (pcap link type 247): LRH · [GRH when LNH = 0b11] · BTH · ext. headers · payload
//!   · ICRC. The LRH `PktLen` (4-byte words, LRH through ICRC) bounds the packet.
//! - BTH (12): opcode, SE/M/PadCnt/TVer, P_Key, FECN/BECN/resv, DestQP (24), AckReq, PSN (24).
//! - Extension headers in wire order: DETH (8: Q_Key, resv, SrcQP), RETH (16: VA, R_Key, DMA
//!   length), AtomicETH (28: VA, R_Key, swap/add, compare), AETH (4), AtomicAckETH (8),
//!   ImmDt (4), IETH (4).
//! - CM: a MAD (24-byte common header: base version 1, management class 0x07, class version,
//!   method, status, class-specific, transaction ID, attribute ID, reserved, attribute
//!   modifier) in a UD SEND to QP1. Message fields are at these offsets from the MAD data:
//!   local comm ID @0 (all), remote comm ID @4 (all but REQ), REQ local QPN @32 (24 bits),
//!   REP local QPN @12, DREQ remote QPN @8.
//!
//! Nothing here allocates or panics: every read is bounds-checked and a packet that does not
//! fit its own headers is [`Malformed`], with the [`MalformedReason`] it is counted under.

use std::fmt;

use thiserror::Error;

use crate::field::{opcode_headers, CmType};

/// UDP destination port of RoCEv2.
pub const ROCEV2_PORT: u16 = 4791;
/// pcap link type of Ethernet.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// pcap link type of native InfiniBand (LRH first).
pub const LINKTYPE_INFINIBAND: u32 = 247;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
/// The pre-standard service-tag TPIDs switches still emit (0x9100, 0x9200, 0x9300): tags
/// like 802.1ad's, parsed through so that a frame cannot hide its RoCEv2 behind them.
const ETHERTYPE_LEGACY_QINQ: [u16; 3] = [0x9100, 0x9200, 0x9300];
/// RoCE v1: a GRH and a BTH straight over Ethernet.
const ETHERTYPE_ROCE_V1: u16 = 0x8915;
/// VXLAN's UDP port: an inner Ethernet frame, which may be RoCE.
pub const VXLAN_PORT: u16 = 4789;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_ESP: u8 = 50;
const IPPROTO_AH: u8 = 51;
/// IPv6 extension headers the parser does not walk (Mobility, HIP, Shim6, the two
/// experimental codes): what follows them could be UDP 4791 to a receiver that does.
const IPV6_OPAQUE_EXTENSIONS: [u8; 5] = [135, 139, 140, 253, 254];
const GRH_NEXT_HEADER_BTH: u8 = 0x1b;
const MAD_CLASS_CM: u8 = 0x07;
/// The general services QP every CM MAD is addressed to and sent from.
pub const GSI_QPN: u32 = 1;
const ICRC_LEN: usize = 4;
const MAX_VLAN_TAGS: usize = 2;
const MAX_IPV6_EXT_HEADERS: usize = 4;

/// The link layer a packet was captured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkType {
    /// Ethernet: RoCEv2.
    Ethernet,
    /// Native InfiniBand, starting at the LRH.
    InfiniBand,
}

impl LinkType {
    /// From a pcap link-type number.
    pub fn from_pcap(linktype: u32) -> Option<LinkType> {
        match linktype {
            LINKTYPE_ETHERNET => Some(LinkType::Ethernet),
            LINKTYPE_INFINIBAND => Some(LinkType::InfiniBand),
            _ => None,
        }
    }
}

/// Why a packet was rejected as malformed; each reason has its own counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MalformedReason {
    /// Shorter than an Ethernet header or VLAN tag, or too many tags.
    TruncatedL2 = 0,
    /// IP header truncated, or its length fields disagree with the frame.
    BadIpHeader = 1,
    /// A fragment of a UDP datagram (RoCEv2 never fragments; fragments hide headers).
    IpFragment = 2,
    /// UDP header truncated or its length disagrees with the IP payload.
    BadUdpLength = 3,
    /// LRH truncated, unknown link next header, or packet length beyond the capture.
    BadLrh = 4,
    /// GRH truncated or its next header is not BTH.
    BadGrh = 5,
    /// BTH or an extension header does not fit before the ICRC.
    TruncatedTransport = 6,
    /// BTH transport header version is not 0.
    BadTransportVersion = 7,
    /// An opcode the parser cannot size.
    UnknownOpcode = 8,
    /// A MAD on QP1 shorter than its header or than the CM message it claims to be.
    TruncatedMad = 9,
    /// A MAD with an unsupported base version.
    BadMad = 10,
}

impl MalformedReason {
    /// Number of reasons (size of a counter array).
    pub const COUNT: usize = 11;

    /// All reasons in counter order.
    pub const ALL: [MalformedReason; Self::COUNT] = [
        MalformedReason::TruncatedL2,
        MalformedReason::BadIpHeader,
        MalformedReason::IpFragment,
        MalformedReason::BadUdpLength,
        MalformedReason::BadLrh,
        MalformedReason::BadGrh,
        MalformedReason::TruncatedTransport,
        MalformedReason::BadTransportVersion,
        MalformedReason::UnknownOpcode,
        MalformedReason::TruncatedMad,
        MalformedReason::BadMad,
    ];

    /// Short stable name (for counters and reports).
    pub fn name(self) -> &'static str {
        match self {
            MalformedReason::TruncatedL2 => "truncated_l2",
            MalformedReason::BadIpHeader => "bad_ip_header",
            MalformedReason::IpFragment => "ip_fragment",
            MalformedReason::BadUdpLength => "bad_udp_length",
            MalformedReason::BadLrh => "bad_lrh",
            MalformedReason::BadGrh => "bad_grh",
            MalformedReason::TruncatedTransport => "truncated_transport",
            MalformedReason::BadTransportVersion => "bad_transport_version",
            MalformedReason::UnknownOpcode => "unknown_opcode",
            MalformedReason::TruncatedMad => "truncated_mad",
            MalformedReason::BadMad => "bad_mad",
        }
    }
}

impl fmt::Display for MalformedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A malformed packet: the reason and the byte offset where parsing stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("malformed packet ({reason}) at byte {offset}")]
pub struct Malformed {
    /// Counter reason.
    pub reason: MalformedReason,
    /// Offset of the header that failed.
    pub offset: usize,
}

/// What parsing found.
// Boxing the large variant would cost an allocation per packet; the parser must not allocate.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// An RDMA packet with its fields.
    Rdma(PacketInfo),
    /// Not RDMA traffic (another ethertype, IP protocol or UDP port): the ACL does not judge it.
    NotRdma,
    /// Traffic that may carry RDMA the parser does not look into: the policy's default
    /// decides it (no rule can match it), so `default deny` does not let it pass as "not
    /// RDMA".
    Uninspected(Uninspected),
}

/// What kind of traffic [`Parsed::Uninspected`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Uninspected {
    /// RoCE v1 (ethertype 0x8915).
    RoceV1,
    /// VXLAN (UDP port 4789): the inner frame is not parsed.
    Vxlan,
    /// IPsec ESP (either IP version) or AH over IPv4: encrypted or not walked.
    IpSecurity,
    /// An IPv6 extension header the parser does not walk (Mobility, HIP, Shim6,
    /// experimental).
    Ipv6Extension,
}

/// A CM message's identifying fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmMessage {
    /// Message type.
    pub kind: CmType,
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's communication ID (0 in a REQ).
    pub remote_comm_id: u32,
    /// The QPN the message itself carries: REQ/REP local QPN, DREQ remote QPN.
    pub qpn: Option<u32>,
    /// DETH source QP was not 1.
    pub forged: bool,
}

/// Header fields of one RDMA packet. Addresses use the 128-bit form of [`crate::field`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PacketInfo {
    /// IP source (RoCEv2).
    pub sip: Option<u128>,
    /// IP destination (RoCEv2).
    pub dip: Option<u128>,
    /// UDP source port (RoCEv2).
    pub sport: Option<u16>,
    /// UDP destination port (RoCEv2).
    pub dport: Option<u16>,
    /// LRH source LID (InfiniBand).
    pub slid: Option<u16>,
    /// LRH destination LID (InfiniBand).
    pub dlid: Option<u16>,
    /// Source GID (GRH, or the IP source on RoCEv2).
    pub sgid: Option<u128>,
    /// Destination GID.
    pub dgid: Option<u128>,
    /// BTH opcode.
    pub opcode: u8,
    /// BTH destination QP.
    pub dest_qp: u32,
    /// BTH PSN.
    pub psn: u32,
    /// BTH partition key.
    pub pkey: u16,
    /// RETH/AtomicETH virtual address.
    pub va: Option<u64>,
    /// RETH/AtomicETH R_Key.
    pub rkey: Option<u32>,
    /// DETH source QP.
    pub src_qp: Option<u32>,
    /// The CM message, when this is a CM MAD on QP1.
    pub cm: Option<CmMessage>,
}

impl PacketInfo {
    /// The address identifying the sender for CM state: IP, else GID, else LID.
    pub fn src_endpoint(&self) -> Endpoint {
        Endpoint::of(self.sip.or(self.sgid), self.slid)
    }

    /// The address identifying the receiver.
    pub fn dst_endpoint(&self) -> Endpoint {
        Endpoint::of(self.dip.or(self.dgid), self.dlid)
    }
}

/// What identifies a side of a CM exchange: its IP address (RoCEv2) or GID (InfiniBand with
/// a GRH), else its LID. The kind is part of the identity: LID 5 and the GID `8000::5` are
/// different endpoints (a LID folded into the 128-bit address space would be forgeable by
/// any sender choosing that GID).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// Which address space `addr` lives in.
    pub kind: EndpointKind,
    /// The IP address or GID (IPv4 as `::ffff:a.b.c.d`), or the LID.
    pub addr: u128,
}

/// The address space of an [`Endpoint`] (the codes are the program's, `enforce.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum EndpointKind {
    /// The packet carries no address at all.
    None = 0,
    /// An IP address or GID.
    Address = 1,
    /// An InfiniBand LID (no GRH).
    Lid = 2,
}

impl Endpoint {
    fn of(address: Option<u128>, lid: Option<u16>) -> Endpoint {
        match (address, lid) {
            (Some(addr), _) => Endpoint {
                kind: EndpointKind::Address,
                addr,
            },
            (None, Some(l)) => Endpoint {
                kind: EndpointKind::Lid,
                addr: l as u128,
            },
            (None, None) => Endpoint {
                kind: EndpointKind::None,
                addr: 0,
            },
        }
    }
}

fn bad(reason: MalformedReason, offset: usize) -> Malformed {
    Malformed { reason, offset }
}

fn slice(buf: &[u8], at: usize, len: usize, reason: MalformedReason) -> Result<&[u8], Malformed> {
    at.checked_add(len)
        .and_then(|end| buf.get(at..end))
        .ok_or(bad(reason, at))
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

fn be128(b: &[u8], at: usize) -> u128 {
    let mut x = [0u8; 16];
    x.copy_from_slice(&b[at..at + 16]);
    u128::from_be_bytes(x)
}

fn ipv4_mapped(b: &[u8], at: usize) -> u128 {
    (0xffffu128 << 32) | be32(b, at) as u128
}

/// Parses one captured packet.
pub fn parse(link: LinkType, buf: &[u8]) -> Result<Parsed, Malformed> {
    match link {
        LinkType::Ethernet => parse_ethernet(buf),
        LinkType::InfiniBand => parse_infiniband(buf).map(Parsed::Rdma),
    }
}

fn parse_ethernet(buf: &[u8]) -> Result<Parsed, Malformed> {
    use MalformedReason::*;
    let eth = slice(buf, 0, 14, TruncatedL2)?;
    let mut ethertype = be16(eth, 12);
    let mut off = 14;
    let mut tags = 0;
    while ethertype == ETHERTYPE_VLAN
        || ethertype == ETHERTYPE_QINQ
        || ETHERTYPE_LEGACY_QINQ.contains(&ethertype)
    {
        tags += 1;
        if tags > MAX_VLAN_TAGS {
            return Err(bad(TruncatedL2, off));
        }
        let tag = slice(buf, off, 4, TruncatedL2)?;
        ethertype = be16(tag, 2);
        off += 4;
    }
    let mut info = PacketInfo::default();
    let (udp_at, ip_end) = match ethertype {
        ETHERTYPE_IPV4 => {
            let ip = slice(buf, off, 20, BadIpHeader)?;
            let ihl = (ip[0] & 0x0f) as usize * 4;
            let total = be16(ip, 2) as usize;
            if ip[0] >> 4 != 4 || ihl < 20 || total < ihl || off + total > buf.len() {
                return Err(bad(BadIpHeader, off));
            }
            if ip[9] == IPPROTO_ESP || ip[9] == IPPROTO_AH {
                return Ok(Parsed::Uninspected(Uninspected::IpSecurity));
            }
            if ip[9] != IPPROTO_UDP {
                return Ok(Parsed::NotRdma);
            }
            let frag = be16(ip, 6);
            if frag & 0x3fff != 0 {
                // More-fragments set or a non-zero offset.
                return Err(bad(IpFragment, off));
            }
            info.sip = Some(ipv4_mapped(ip, 12));
            info.dip = Some(ipv4_mapped(ip, 16));
            (off + ihl, off + total)
        }
        ETHERTYPE_IPV6 => {
            let ip = slice(buf, off, 40, BadIpHeader)?;
            if ip[0] >> 4 != 6 {
                return Err(bad(BadIpHeader, off));
            }
            let end = off + 40 + be16(ip, 4) as usize;
            if end > buf.len() {
                return Err(bad(BadIpHeader, off));
            }
            info.sip = Some(be128(ip, 8));
            info.dip = Some(be128(ip, 24));
            let mut next = ip[6];
            let mut at = off + 40;
            let mut exts = 0;
            loop {
                match next {
                    IPPROTO_UDP => break,
                    // Hop-by-hop, routing, destination options, authentication: skip.
                    0 | 43 | 60 | IPPROTO_AH => {
                        exts += 1;
                        if exts > MAX_IPV6_EXT_HEADERS {
                            return Err(bad(BadIpHeader, at));
                        }
                        let h = slice(&buf[..end], at, 8, BadIpHeader)?;
                        // AH counts its length in 4-byte units, less 2; the others in
                        // 8-byte units, less 1.
                        at += if next == IPPROTO_AH {
                            (h[1] as usize + 2) * 4
                        } else {
                            (h[1] as usize + 1) * 8
                        };
                        next = h[0];
                    }
                    44 => return Err(bad(IpFragment, at)),
                    IPPROTO_ESP => return Ok(Parsed::Uninspected(Uninspected::IpSecurity)),
                    n if IPV6_OPAQUE_EXTENSIONS.contains(&n) => {
                        return Ok(Parsed::Uninspected(Uninspected::Ipv6Extension))
                    }
                    _ => return Ok(Parsed::NotRdma),
                }
            }
            (at, end)
        }
        ETHERTYPE_ROCE_V1 => return Ok(Parsed::Uninspected(Uninspected::RoceV1)),
        _ => return Ok(Parsed::NotRdma),
    };
    let ip_payload = &buf[..ip_end];
    let udp = slice(ip_payload, udp_at, 8, BadUdpLength)?;
    let udp_len = be16(udp, 4) as usize;
    if udp_len < 8 || udp_at + udp_len > ip_end {
        return Err(bad(BadUdpLength, udp_at));
    }
    let dport = be16(udp, 2);
    if dport == VXLAN_PORT {
        return Ok(Parsed::Uninspected(Uninspected::Vxlan));
    }
    if dport != ROCEV2_PORT {
        return Ok(Parsed::NotRdma);
    }
    info.sport = Some(be16(udp, 0));
    info.dport = Some(dport);
    // On RoCEv2 the IP header stands where the GRH would: GIDs are the IP addresses.
    info.sgid = info.sip;
    info.dgid = info.dip;
    let datagram_end = udp_at + udp_len;
    let transport_end = datagram_end
        .checked_sub(ICRC_LEN)
        .filter(|e| *e >= udp_at + 8)
        .ok_or(bad(TruncatedTransport, udp_at + 8))?;
    parse_transport(&buf[..transport_end], udp_at + 8, &mut info)?;
    Ok(Parsed::Rdma(info))
}

fn parse_infiniband(buf: &[u8]) -> Result<PacketInfo, Malformed> {
    use MalformedReason::*;
    let lrh = slice(buf, 0, 8, BadLrh)?;
    let lnh = lrh[1] & 0x03;
    let pkt_len = (be16(lrh, 4) & 0x07ff) as usize * 4;
    if pkt_len > buf.len() || pkt_len < 8 + 12 + ICRC_LEN {
        return Err(bad(BadLrh, 4));
    }
    let mut info = PacketInfo {
        dlid: Some(be16(lrh, 2)),
        slid: Some(be16(lrh, 6)),
        ..PacketInfo::default()
    };
    let end = pkt_len - ICRC_LEN;
    let at = match lnh {
        0b10 => 8,
        0b11 => {
            let grh = slice(&buf[..end], 8, 40, BadGrh)?;
            if grh[6] != GRH_NEXT_HEADER_BTH {
                return Err(bad(BadGrh, 8));
            }
            info.sgid = Some(be128(grh, 8));
            info.dgid = Some(be128(grh, 24));
            48
        }
        // Raw (non-IBA) transport: nothing for an RDMA ACL to judge, and no BTH to read.
        _ => return Err(bad(BadLrh, 1)),
    };
    parse_transport(&buf[..end], at, &mut info)?;
    Ok(info)
}

/// Parses BTH and what follows it; `buf` ends before the ICRC.
fn parse_transport(buf: &[u8], mut at: usize, info: &mut PacketInfo) -> Result<(), Malformed> {
    use MalformedReason::*;
    let bth = slice(buf, at, 12, TruncatedTransport)?;
    let opcode = bth[0];
    if bth[1] & 0x0f != 0 {
        return Err(bad(BadTransportVersion, at + 1));
    }
    info.opcode = opcode;
    info.pkey = be16(bth, 2);
    info.dest_qp = be24(bth, 5);
    info.psn = be24(bth, 9);
    let headers = opcode_headers(opcode).ok_or(bad(UnknownOpcode, at))?;
    at += 12;
    if headers.rdeth {
        slice(buf, at, 4, TruncatedTransport)?;
        at += 4;
    }
    if headers.deth {
        let deth = slice(buf, at, 8, TruncatedTransport)?;
        info.src_qp = Some(be24(deth, 5));
        at += 8;
    }
    if headers.reth {
        let reth = slice(buf, at, 16, TruncatedTransport)?;
        info.va = Some(be64(reth, 0));
        info.rkey = Some(be32(reth, 8));
        at += 16;
    }
    if headers.atomic_eth {
        let aeth = slice(buf, at, 28, TruncatedTransport)?;
        info.va = Some(be64(aeth, 0));
        info.rkey = Some(be32(aeth, 8));
        at += 28;
    }
    if headers.aeth {
        slice(buf, at, 4, TruncatedTransport)?;
        at += 4;
    }
    if headers.atomic_ack_eth {
        slice(buf, at, 8, TruncatedTransport)?;
        at += 8;
    }
    if headers.imm {
        slice(buf, at, 4, TruncatedTransport)?;
        at += 4;
    }
    if headers.ieth {
        slice(buf, at, 4, TruncatedTransport)?;
        at += 4;
    }
    if headers.deth && info.dest_qp == GSI_QPN {
        info.cm = parse_cm_mad(buf, at, info.src_qp)?;
    }
    Ok(())
}

/// A MAD to QP1: returns the CM message if its management class is CM.
fn parse_cm_mad(
    buf: &[u8],
    at: usize,
    src_qp: Option<u32>,
) -> Result<Option<CmMessage>, Malformed> {
    use MalformedReason::*;
    let hdr = slice(buf, at, 24, TruncatedMad)?;
    if hdr[0] != 1 {
        return Err(bad(BadMad, at));
    }
    if hdr[1] != MAD_CLASS_CM {
        return Ok(None);
    }
    let kind = CmType::from_attribute(be16(hdr, 16));
    let data_at = at + 24;
    // Bytes of MAD data each message needs for the fields we read.
    let need = match kind {
        CmType::ConnectRequest => 36,
        CmType::ConnectReply => 16,
        CmType::DisconnectRequest => 12,
        CmType::Other | CmType::SidrRequest | CmType::SidrReply => 4,
        _ => 8,
    };
    let data = slice(buf, data_at, need, TruncatedMad)?;
    let local_comm_id = be32(data, 0);
    let remote_comm_id = match kind {
        CmType::ConnectRequest | CmType::SidrRequest | CmType::SidrReply | CmType::Other => 0,
        _ => be32(data, 4),
    };
    let qpn = match kind {
        CmType::ConnectRequest => Some(be24(data, 32)),
        CmType::ConnectReply => Some(be24(data, 12)),
        CmType::DisconnectRequest => Some(be24(data, 8)),
        _ => None,
    };
    Ok(Some(CmMessage {
        kind,
        local_comm_id,
        remote_comm_id,
        qpn,
        forged: src_qp != Some(GSI_QPN),
    }))
}

#[cfg(test)]
pub(crate) mod tests;
