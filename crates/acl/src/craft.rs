//! Builds well-formed RoCEv2 and InfiniBand packets: the fixtures of tests, benchmarks and
//! fuzz seeds, and the Rust twin of `tools/acl-traffic/gen.py`.
//!
//! The ICRC is written as zeros: the ACL never checks it (the RNIC does).

use std::net::IpAddr;

use crate::field::CmType;

/// Addresses of a RoCEv2 packet.
#[derive(Clone, Copy, Debug)]
pub struct Endpoints {
    /// IP source (v4 or v6; both must be the same family).
    pub sip: IpAddr,
    /// IP destination.
    pub dip: IpAddr,
    /// UDP source port.
    pub sport: u16,
}

/// BTH fields a fixture sets.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bth {
    /// Opcode.
    pub opcode: u8,
    /// Destination QP.
    pub dest_qp: u32,
    /// Packet sequence number.
    pub psn: u32,
}

impl Bth {
    fn bytes(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[0] = self.opcode;
        b[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
        b[4..8].copy_from_slice(&(self.dest_qp & 0xff_ffff).to_be_bytes());
        b[8..12].copy_from_slice(&(self.psn & 0xff_ffff).to_be_bytes());
        b
    }
}

/// RETH: VA, R_Key, DMA length.
pub fn reth(va: u64, rkey: u32, len: u32) -> Vec<u8> {
    let mut b = va.to_be_bytes().to_vec();
    b.extend_from_slice(&rkey.to_be_bytes());
    b.extend_from_slice(&len.to_be_bytes());
    b
}

/// AtomicETH: VA, R_Key, swap/add, compare.
pub fn atomic_eth(va: u64, rkey: u32, swap_add: u64, compare: u64) -> Vec<u8> {
    let mut b = va.to_be_bytes().to_vec();
    b.extend_from_slice(&rkey.to_be_bytes());
    b.extend_from_slice(&swap_add.to_be_bytes());
    b.extend_from_slice(&compare.to_be_bytes());
    b
}

/// AETH: syndrome, MSN.
pub fn aeth(syndrome: u8, msn: u32) -> Vec<u8> {
    let mut b = (msn & 0xff_ffff).to_be_bytes().to_vec();
    b[0] = syndrome;
    b
}

/// DETH: Q_Key, source QP.
pub fn deth(qkey: u32, src_qp: u32) -> Vec<u8> {
    let mut b = qkey.to_be_bytes().to_vec();
    b.extend_from_slice(&(src_qp & 0xff_ffff).to_be_bytes());
    b
}

/// The well-known Q_Key of QP1.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// A 256-byte CM MAD. `qpn` goes where the message type carries one (REQ/REP local QPN,
/// DREQ remote QPN); `remote_comm_id` is ignored for REQ.
pub fn cm_mad(kind: CmType, local_comm_id: u32, remote_comm_id: u32, qpn: u32) -> Vec<u8> {
    let mut m = vec![0u8; 256];
    m[0] = 1; // base version
    m[1] = 0x07; // management class: CM
    m[2] = 2; // class version
    m[3] = 0x03; // method: Send
    m[8..16].copy_from_slice(&(local_comm_id as u64).to_be_bytes());
    let attr: u16 = match kind {
        CmType::Other => 0x0001,
        k => 0x10 + k as u16,
    };
    m[16..18].copy_from_slice(&attr.to_be_bytes());
    let d = &mut m[24..];
    d[0..4].copy_from_slice(&local_comm_id.to_be_bytes());
    if kind != CmType::ConnectRequest {
        d[4..8].copy_from_slice(&remote_comm_id.to_be_bytes());
    }
    let qpn = (qpn & 0xff_ffff).to_be_bytes();
    match kind {
        CmType::ConnectRequest => d[32..35].copy_from_slice(&qpn[1..]),
        CmType::ConnectReply => d[12..15].copy_from_slice(&qpn[1..]),
        CmType::DisconnectRequest => d[8..11].copy_from_slice(&qpn[1..]),
        _ => {}
    }
    m
}

/// A RoCEv2 Ethernet frame: BTH, extension headers, payload, ICRC.
pub fn roce(ep: &Endpoints, bth: Bth, ext: &[u8], payload: &[u8]) -> Vec<u8> {
    let udp_len = 8 + 12 + ext.len() + payload.len() + 4;
    let mut f = Vec::with_capacity(14 + 40 + udp_len);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01]);
    match (ep.sip, ep.dip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            let total = (20 + udp_len) as u16;
            f.extend_from_slice(&[0x45, 0]);
            f.extend_from_slice(&total.to_be_bytes());
            f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(v) => v.to_ipv6_mapped(),
                IpAddr::V6(v) => v,
            };
            f.extend_from_slice(&0x86ddu16.to_be_bytes());
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&(udp_len as u16).to_be_bytes());
            f.extend_from_slice(&[17, 64]);
            f.extend_from_slice(&v6(s).octets());
            f.extend_from_slice(&v6(d).octets());
        }
    }
    f.extend_from_slice(&ep.sport.to_be_bytes());
    f.extend_from_slice(&crate::packet::ROCEV2_PORT.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&bth.bytes());
    f.extend_from_slice(ext);
    f.extend_from_slice(payload);
    f.extend_from_slice(&[0; 4]);
    f
}

/// A native InfiniBand packet (LRH, optional GRH, BTH, ..., ICRC, VCRC).
pub fn infiniband(
    slid: u16,
    dlid: u16,
    gids: Option<(u128, u128)>,
    bth: Bth,
    ext: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let grh_len = if gids.is_some() { 40 } else { 0 };
    let words = (8 + grh_len + 12 + ext.len() + payload.len() + 4).div_ceil(4);
    let mut p = Vec::with_capacity(words * 4 + 2);
    p.push(0x00);
    p.push(if gids.is_some() { 0x03 } else { 0x02 });
    p.extend_from_slice(&dlid.to_be_bytes());
    p.extend_from_slice(&(words as u16 & 0x07ff).to_be_bytes());
    p.extend_from_slice(&slid.to_be_bytes());
    if let Some((s, d)) = gids {
        p.extend_from_slice(&[0x60, 0, 0, 0]);
        let pay = (12 + ext.len() + payload.len() + 4) as u16;
        p.extend_from_slice(&pay.to_be_bytes());
        p.extend_from_slice(&[0x1b, 64]);
        p.extend_from_slice(&s.to_be_bytes());
        p.extend_from_slice(&d.to_be_bytes());
    }
    p.extend_from_slice(&bth.bytes());
    p.extend_from_slice(ext);
    p.extend_from_slice(payload);
    p.resize(words * 4 - 4, 0);
    p.extend_from_slice(&[0; 4]); // ICRC
    p.extend_from_slice(&[0; 2]); // VCRC
    p
}

/// A RoCEv2 data packet carrying a packet key's values: addresses (IPv4-mapped keys become
/// IPv4 packets), UDP source port, opcode, dQPN as BTH DestQP, and VA in a RETH or AtomicETH
/// when the opcode has one. Keys without an IP address, or with CM fields, have no such
/// frame (`None`). The frame parses back to the same key (tested).
pub fn roce_frame(k: &crate::rule::PacketKey) -> Option<Vec<u8>> {
    use crate::field::{opcode_headers, Field};
    let (sip, dip) = (k.get(Field::Sip)?, k.get(Field::Dip)?);
    if k.get(Field::CmType).is_some() || k.get(Field::Opcode).is_none() {
        return None;
    }
    let mapped = |a: u128| a >> 32 == 0xffff;
    let addr = |a: u128| -> IpAddr {
        if mapped(sip) && mapped(dip) {
            IpAddr::V4((a as u32).into())
        } else {
            IpAddr::V6(a.into())
        }
    };
    let ep = Endpoints {
        sip: addr(sip),
        dip: addr(dip),
        sport: k.get(Field::Sport).unwrap_or(49152) as u16,
    };
    let headers = opcode_headers(k.opcode)?;
    if headers.deth {
        return None;
    }
    let va = k.get(Field::Va).unwrap_or(0) as u64;
    let mut ext = Vec::new();
    if headers.reth {
        ext.extend(reth(va, 0x1234, 64));
    }
    if headers.atomic_eth {
        ext.extend(atomic_eth(va, 0x1234, 1, 0));
    }
    if headers.aeth || headers.atomic_ack_eth {
        ext.extend(aeth(0, 1));
    }
    if headers.atomic_ack_eth {
        ext.extend([0; 8]);
    }
    if headers.imm || headers.ieth {
        ext.extend([0; 4]);
    }
    let bth = Bth {
        opcode: k.opcode,
        dest_qp: k.get(Field::DQpn).unwrap_or(0) as u32,
        psn: 1,
    };
    Some(roce(&ep, bth, &ext, &[0; 16]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{parse, LinkType, Parsed};
    use crate::rule::PacketKey;
    use crate::synth;

    #[test]
    fn synthetic_keys_survive_a_trip_through_a_frame() {
        let rules = synth::rules(200, 7);
        for k in synth::traffic(&rules, 500, synth::Mix::Uniform, 9) {
            let frame = roce_frame(&k).expect("synthetic keys are RoCEv2 data packets");
            let Ok(Parsed::Rdma(info)) = parse(LinkType::Ethernet, &frame) else {
                panic!("frame of {k:?} does not parse");
            };
            let mut want = k;
            want.dport = 4791;
            want.present |= 1 << crate::field::Field::Dport.index();
            assert_eq!(PacketKey::from_packet(&info), want);
        }
    }
}

/// Frames that carry RDMA in shapes a parser might take for something else — the shapes
/// of `docs/acl.md`'s "Traffic the parser does not inspect" — built from an untagged
/// RoCEv2 frame over IPv4 (`v4`) and one over IPv6 (`v6`), both as [`roce`] makes them.
pub mod evasion {
    /// `frame` behind one VLAN-style tag with this TPID (0x8100, 0x88a8, 0x9100, ...).
    pub fn tagged(frame: &[u8], tpid: u16) -> Vec<u8> {
        let mut f = frame[..12].to_vec();
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&0x0005u16.to_be_bytes()); // VLAN 5
        f.extend_from_slice(&frame[12..]);
        f
    }

    /// The IPv6 frame `v6` with one extension header (`next_header` code, `len` bytes,
    /// a multiple of 8 and at least 8) between the fixed header and UDP.
    pub fn ipv6_extension(v6: &[u8], next_header: u8, len: usize) -> Vec<u8> {
        let mut f = v6[..54].to_vec();
        let payload = u16::from_be_bytes([f[18], f[19]]) + len as u16;
        f[18..20].copy_from_slice(&payload.to_be_bytes());
        f[20] = next_header;
        let mut h = vec![0u8; len];
        h[0] = 17; // then UDP
        h[1] = if next_header == 51 {
            (len / 4 - 2) as u8 // AH: 4-byte units, less 2
        } else {
            (len / 8 - 1) as u8
        };
        f.extend_from_slice(&h);
        f.extend_from_slice(&v6[54..]);
        f
    }

    /// The IPv4 frame `v4` with its IP protocol replaced (50 ESP, 51 AH).
    pub fn ipv4_protocol(v4: &[u8], protocol: u8) -> Vec<u8> {
        let mut f = v4.to_vec();
        f[23] = protocol;
        f
    }

    /// RoCE v1: the ethertype 0x8915, a GRH and the BTH of `v4` onwards.
    pub fn roce_v1(v4: &[u8]) -> Vec<u8> {
        let mut f = v4[..12].to_vec();
        f.extend_from_slice(&0x8915u16.to_be_bytes());
        let mut grh = [0u8; 40];
        grh[0] = 0x60;
        let len = (v4.len() - 42) as u16;
        grh[4..6].copy_from_slice(&len.to_be_bytes());
        grh[6] = 0x1b; // BTH next
        grh[7] = 64;
        grh[8..24].copy_from_slice(&(0xffff_0a00_0107u128).to_be_bytes());
        grh[24..40].copy_from_slice(&(0xffff_0a00_0169u128).to_be_bytes());
        f.extend_from_slice(&grh);
        f.extend_from_slice(&v4[42..]);
        f
    }

    /// The whole frame `inner` in a VXLAN packet (outer IPv4, UDP port 4789, VNI 42).
    pub fn vxlan(inner: &[u8]) -> Vec<u8> {
        let udp_len = 8 + 8 + inner.len();
        let mut f = vec![0x02, 0, 0, 0, 0, 0x03, 0x02, 0, 0, 0, 0, 0x04];
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 192, 168, 0, 1, 192, 168, 0, 2]);
        f.extend_from_slice(&50_000u16.to_be_bytes());
        f.extend_from_slice(&crate::packet::VXLAN_PORT.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 42, 0]);
        f.extend_from_slice(inner);
        f
    }
}
