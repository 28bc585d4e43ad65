//! Context models: what `r1` points to when a program starts, and how loads and stores in that
//! structure are served.
//!
//! The kernel never lets a program read its context structure directly: the verifier rewrites
//! every context access (for `struct __sk_buff` and `struct xdp_md`, a 32-bit load of `data`
//! becomes a 64-bit load of the real packet pointer). A [`ContextModel`] plays that role for
//! the interpreter: `r1` holds the address of a private, never-read buffer of
//! [`ContextModel::size`] bytes, and every load or store that lands in it is passed to the
//! model instead of memory. Packet bytes are real memory the model owns; their addresses are
//! what the model's `data`/`data_end` fields return.

use crate::isa::Size;

/// Why the model refused a context access.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// A load that does not lie within one readable field.
    #[error("{size}-byte read at context offset {offset} is not a readable field")]
    BadRead {
        /// Byte offset in the context structure.
        offset: usize,
        /// Bytes loaded.
        size: usize,
    },
    /// A store that does not lie within one writable field.
    #[error("{size}-byte write at context offset {offset} is not a writable field")]
    BadWrite {
        /// Byte offset in the context structure.
        offset: usize,
        /// Bytes stored.
        size: usize,
    },
}

/// A memory area a context hands out pointers to (the packet, its metadata).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketRegion {
    /// Address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Whether the program may store to it.
    pub writable: bool,
}

/// A program context the interpreter serves accesses to.
pub trait ContextModel {
    /// Size of the structure as the program sees it (`sizeof(struct __sk_buff)`, ...).
    fn size(&self) -> usize;
    /// A load of `size` bytes at `offset` in the structure.
    fn load(&self, offset: usize, size: Size) -> Result<u64, ContextError>;
    /// A store of the low `size` bytes of `value` at `offset`.
    fn store(&mut self, offset: usize, size: Size, value: u64) -> Result<(), ContextError>;
    /// The packet memory the context's pointers address, if any. The interpreter takes this
    /// once at the start of a run; the model must not move or resize the packet during it.
    fn packet(&mut self) -> Option<PacketRegion>;
    /// The packet bytes, for helpers that copy out of the packet (`bpf_skb_load_bytes`).
    fn packet_bytes(&self) -> &[u8];
    /// The private buffer whose address `r1` holds; never read or written through.
    fn anchor(&self) -> *const u8;
}

/// Reads `size` bytes at `offset` of a little-endian image of a structure.
fn image_read(image: &[u8], offset: usize, size: Size) -> u64 {
    let mut b = [0u8; 8];
    b[..size.bytes()].copy_from_slice(&image[offset..offset + size.bytes()]);
    u64::from_le_bytes(b)
}

/// A model backed by a fixed image of the structure plus a table of field permissions.
#[derive(Clone, Copy)]
struct Field {
    offset: usize,
    size: usize,
    writable: bool,
}

fn field_at(fields: &[Field], offset: usize, size: usize) -> Option<Field> {
    fields
        .iter()
        .copied()
        .find(|f| offset >= f.offset && offset + size <= f.offset + f.size)
}

/// `struct __sk_buff`, as a socket filter or tc program sees it.
///
/// Readable: `len`, `pkt_type`, `mark`, `queue_mapping`, `protocol`, `vlan_present`,
/// `vlan_tci`, `vlan_proto`, `priority`, `ingress_ifindex`, `ifindex`, `tc_index`, `cb[5]`,
/// `hash`, `napi_id`, and the packet pointers `data`, `data_end`, `data_meta` (32-bit loads
/// yielding full 64-bit pointers). Writable: `mark`, `priority`, `tc_index`, `cb[5]`.
/// (The kernel hides `data`/`data_end` from socket filters, which reach packet bytes through
/// `bpf_skb_load_bytes`; tc programs may read them. rdx's model serves both.)
#[derive(Debug, Clone)]
pub struct SkBuff {
    /// `pkt_type`: who the packet is for (`PACKET_HOST`, `PACKET_BROADCAST`, ...).
    pub pkt_type: u32,
    /// `mark`: the packet's mark (writable).
    pub mark: u32,
    /// `queue_mapping`: the device queue the packet is mapped to.
    pub queue_mapping: u32,
    /// `skb->protocol`: the EtherType in network byte order, as the kernel stores it.
    pub protocol: u32,
    /// `vlan_present`: 1 when the packet carried a VLAN tag (now in `vlan_tci`).
    pub vlan_present: u32,
    /// `vlan_tci`: the VLAN tag's control information.
    pub vlan_tci: u32,
    /// `vlan_proto`: the VLAN tag's EtherType, in network byte order.
    pub vlan_proto: u32,
    /// `priority`: the queueing priority (writable).
    pub priority: u32,
    /// `ingress_ifindex`: the interface the packet arrived on.
    pub ingress_ifindex: u32,
    /// `ifindex`: the interface the packet is on.
    pub ifindex: u32,
    /// `tc_index`: the traffic-control index (writable).
    pub tc_index: u32,
    /// `cb`: five words programs pass state in (writable).
    pub cb: [u32; 5],
    /// `hash`: the packet's flow hash.
    pub hash: u32,
    /// `napi_id`: the id of the receive queue's NAPI context.
    pub napi_id: u32,
    packet: Vec<u8>,
    anchor: Box<[u64; SkBuff::SIZE / 8]>,
}

impl SkBuff {
    /// `sizeof(struct __sk_buff)`.
    pub const SIZE: usize = 192;
    /// Offset of `len`, the packet's length in bytes (computed from the packet).
    pub const OFF_LEN: usize = 0;
    /// Offset of [`SkBuff::pkt_type`].
    pub const OFF_PKT_TYPE: usize = 4;
    /// Offset of [`SkBuff::mark`].
    pub const OFF_MARK: usize = 8;
    /// Offset of [`SkBuff::queue_mapping`].
    pub const OFF_QUEUE_MAPPING: usize = 12;
    /// Offset of [`SkBuff::protocol`].
    pub const OFF_PROTOCOL: usize = 16;
    /// Offset of [`SkBuff::vlan_present`].
    pub const OFF_VLAN_PRESENT: usize = 20;
    /// Offset of [`SkBuff::vlan_tci`].
    pub const OFF_VLAN_TCI: usize = 24;
    /// Offset of [`SkBuff::vlan_proto`].
    pub const OFF_VLAN_PROTO: usize = 28;
    /// Offset of [`SkBuff::priority`].
    pub const OFF_PRIORITY: usize = 32;
    /// Offset of [`SkBuff::ingress_ifindex`].
    pub const OFF_INGRESS_IFINDEX: usize = 36;
    /// Offset of [`SkBuff::ifindex`].
    pub const OFF_IFINDEX: usize = 40;
    /// Offset of [`SkBuff::tc_index`].
    pub const OFF_TC_INDEX: usize = 44;
    /// Offset of [`SkBuff::cb`] (five 4-byte words).
    pub const OFF_CB: usize = 48;
    /// Offset of [`SkBuff::hash`].
    pub const OFF_HASH: usize = 68;
    /// Offset of `data`: a 32-bit load of it yields the packet's first byte's address.
    pub const OFF_DATA: usize = 76;
    /// Offset of `data_end`: a 32-bit load of it yields the address one past the packet.
    pub const OFF_DATA_END: usize = 80;
    /// Offset of [`SkBuff::napi_id`].
    pub const OFF_NAPI_ID: usize = 84;
    /// Offset of `data_meta`: a 32-bit load of it yields the metadata's first byte's address.
    pub const OFF_DATA_META: usize = 140;

    const FIELDS: &'static [Field] = &[
        Field {
            offset: 0,
            size: 8,
            writable: false,
        }, // len, pkt_type
        Field {
            offset: 8,
            size: 4,
            writable: true,
        }, // mark
        Field {
            offset: 12,
            size: 20,
            writable: false,
        }, // queue_mapping .. vlan_proto
        Field {
            offset: 32,
            size: 4,
            writable: true,
        }, // priority
        Field {
            offset: 36,
            size: 8,
            writable: false,
        }, // ingress_ifindex, ifindex
        Field {
            offset: 44,
            size: 4,
            writable: true,
        }, // tc_index
        Field {
            offset: 48,
            size: 20,
            writable: true,
        }, // cb[5]
        Field {
            offset: 68,
            size: 4,
            writable: false,
        }, // hash
        Field {
            offset: 84,
            size: 4,
            writable: false,
        }, // napi_id
    ];

    /// A buffer holding `packet` (starting at the network or link layer, as the caller
    /// decides) with every other field zero.
    pub fn new(packet: Vec<u8>) -> Self {
        Self {
            pkt_type: 0,
            mark: 0,
            queue_mapping: 0,
            protocol: 0,
            vlan_present: 0,
            vlan_tci: 0,
            vlan_proto: 0,
            priority: 0,
            ingress_ifindex: 0,
            ifindex: 0,
            tc_index: 0,
            cb: [0; 5],
            hash: 0,
            napi_id: 0,
            packet,
            anchor: Box::new([0; Self::SIZE / 8]),
        }
    }

    /// The `__sk_buff` a socket filter sees under the kernel's `BPF_PROG_TEST_RUN` for the
    /// Ethernet frame `frame`: the kernel runs `eth_type_trans` on the loopback device, so the
    /// data starts after the 14-byte Ethernet header, `len` excludes it, and `ifindex` is 1.
    /// `pkt_type` follows from the destination MAC: any multicast address is
    /// `PACKET_MULTICAST` (the loopback device's broadcast address is all zeroes, so not even
    /// ff:ff:ff:ff:ff:ff counts as broadcast), the device address (all zeroes) is
    /// `PACKET_HOST`, anything else `PACKET_OTHERHOST`. `protocol` is the EtherType when it is
    /// at least 0x0600; below that (an 802.3 length) it is `ETH_P_802_3` when the payload
    /// starts with ff ff and `ETH_P_802_2` otherwise. Returns `None` for frames shorter than
    /// 14 bytes, which the kernel rejects too.
    pub fn socket_filter_test_run(frame: &[u8]) -> Option<Self> {
        const ETH_HLEN: usize = 14;
        const ETH_P_802_3: u16 = 0x0001;
        const ETH_P_802_2: u16 = 0x0004;
        if frame.len() < ETH_HLEN {
            return None;
        }
        let dst = &frame[..6];
        let pkt_type = if dst[0] & 1 != 0 {
            2 // PACKET_MULTICAST
        } else if dst.iter().all(|&b| b == 0) {
            0 // PACKET_HOST
        } else {
            3 // PACKET_OTHERHOST
        };
        let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
        let payload = &frame[ETH_HLEN..];
        let protocol = if ethertype >= 0x0600 {
            ethertype
        } else if payload.starts_with(&[0xff, 0xff]) {
            ETH_P_802_3
        } else {
            ETH_P_802_2
        };
        let mut skb = Self::new(payload.to_vec());
        // `skb->protocol` is big-endian; the field exposes its two bytes as stored.
        skb.protocol = u16::from_le_bytes(protocol.to_be_bytes()) as u32;
        skb.pkt_type = pkt_type;
        skb.ifindex = 1;
        Some(skb)
    }

    /// The packet bytes.
    pub fn packet_data(&self) -> &[u8] {
        &self.packet
    }

    fn image(&self) -> [u8; Self::SIZE] {
        let mut img = [0u8; Self::SIZE];
        let mut put = |off: usize, v: u32| img[off..off + 4].copy_from_slice(&v.to_le_bytes());
        put(Self::OFF_LEN, self.packet.len() as u32);
        put(Self::OFF_PKT_TYPE, self.pkt_type);
        put(Self::OFF_MARK, self.mark);
        put(Self::OFF_QUEUE_MAPPING, self.queue_mapping);
        put(Self::OFF_PROTOCOL, self.protocol);
        put(Self::OFF_VLAN_PRESENT, self.vlan_present);
        put(Self::OFF_VLAN_TCI, self.vlan_tci);
        put(Self::OFF_VLAN_PROTO, self.vlan_proto);
        put(Self::OFF_PRIORITY, self.priority);
        put(Self::OFF_INGRESS_IFINDEX, self.ingress_ifindex);
        put(Self::OFF_IFINDEX, self.ifindex);
        put(Self::OFF_TC_INDEX, self.tc_index);
        for (i, cb) in self.cb.iter().enumerate() {
            put(Self::OFF_CB + 4 * i, *cb);
        }
        put(Self::OFF_HASH, self.hash);
        put(Self::OFF_NAPI_ID, self.napi_id);
        img
    }
}

impl ContextModel for SkBuff {
    fn size(&self) -> usize {
        Self::SIZE
    }

    fn load(&self, offset: usize, size: Size) -> Result<u64, ContextError> {
        let data = self.packet.as_ptr() as u64;
        match (offset, size) {
            (Self::OFF_DATA, Size::W) | (Self::OFF_DATA_META, Size::W) => return Ok(data),
            (Self::OFF_DATA_END, Size::W) => return Ok(data + self.packet.len() as u64),
            _ => {}
        }
        let bad = ContextError::BadRead {
            offset,
            size: size.bytes(),
        };
        field_at(Self::FIELDS, offset, size.bytes()).ok_or(bad)?;
        Ok(image_read(&self.image(), offset, size))
    }

    fn store(&mut self, offset: usize, size: Size, value: u64) -> Result<(), ContextError> {
        let bad = ContextError::BadWrite {
            offset,
            size: size.bytes(),
        };
        let f = field_at(Self::FIELDS, offset, size.bytes()).ok_or(bad.clone())?;
        if !f.writable || !offset.is_multiple_of(size.bytes()) {
            return Err(bad);
        }
        // `cb` takes naturally aligned writes of any size within it, as in the kernel
        // (`bpf_skb_is_valid_access`); the other writable fields only whole 32-bit ones.
        if (Self::OFF_CB..Self::OFF_CB + 20).contains(&offset) {
            let end = offset + size.bytes();
            if end > Self::OFF_CB + 20 {
                return Err(bad);
            }
            let mut bytes = [0u8; 20];
            for (i, w) in self.cb.iter().enumerate() {
                bytes[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
            }
            bytes[offset - Self::OFF_CB..end - Self::OFF_CB]
                .copy_from_slice(&value.to_le_bytes()[..size.bytes()]);
            for (i, w) in self.cb.iter_mut().enumerate() {
                *w = u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4 bytes"));
            }
            return Ok(());
        }
        if size != Size::W {
            return Err(bad);
        }
        let v = value as u32;
        match offset {
            Self::OFF_MARK => self.mark = v,
            Self::OFF_PRIORITY => self.priority = v,
            Self::OFF_TC_INDEX => self.tc_index = v,
            o => self.cb[(o - Self::OFF_CB) / 4] = v,
        }
        Ok(())
    }

    fn packet(&mut self) -> Option<PacketRegion> {
        Some(PacketRegion {
            addr: self.packet.as_mut_ptr() as u64,
            len: self.packet.len() as u64,
            writable: true,
        })
    }

    fn packet_bytes(&self) -> &[u8] {
        &self.packet
    }

    fn anchor(&self) -> *const u8 {
        self.anchor.as_ptr() as *const u8
    }
}

/// `struct xdp_md`: `data`, `data_end`, `data_meta` (32-bit loads yielding 64-bit pointers),
/// `ingress_ifindex`, `rx_queue_index`, `egress_ifindex`; nothing is writable.
#[derive(Debug, Clone)]
pub struct XdpMd {
    /// `ingress_ifindex`: the interface the packet arrived on.
    pub ingress_ifindex: u32,
    /// `rx_queue_index`: the receive queue the packet arrived on.
    pub rx_queue_index: u32,
    /// `egress_ifindex`: the interface of a redirect (0 on receive).
    pub egress_ifindex: u32,
    packet: Vec<u8>,
    anchor: Box<[u64; XdpMd::SIZE / 8]>,
}

impl XdpMd {
    /// `sizeof(struct xdp_md)`.
    pub const SIZE: usize = 24;
    /// Offset of `data`: a 32-bit load of it yields the packet's first byte's address.
    pub const OFF_DATA: usize = 0;
    /// Offset of `data_end`: a 32-bit load of it yields the address one past the packet.
    pub const OFF_DATA_END: usize = 4;
    /// Offset of `data_meta`: a 32-bit load of it yields the metadata's first byte's address.
    pub const OFF_DATA_META: usize = 8;
    /// Offset of [`XdpMd::ingress_ifindex`].
    pub const OFF_INGRESS_IFINDEX: usize = 12;
    /// Offset of [`XdpMd::rx_queue_index`].
    pub const OFF_RX_QUEUE_INDEX: usize = 16;
    /// Offset of [`XdpMd::egress_ifindex`].
    pub const OFF_EGRESS_IFINDEX: usize = 20;

    /// The `xdp_md` the kernel's `BPF_PROG_TEST_RUN` builds for `packet`: received on queue 0
    /// of the loopback device (`ingress_ifindex` 1), no metadata.
    pub fn new(packet: Vec<u8>) -> Self {
        Self {
            ingress_ifindex: 1,
            rx_queue_index: 0,
            egress_ifindex: 0,
            packet,
            anchor: Box::new([0; Self::SIZE / 8]),
        }
    }

    /// The packet bytes.
    pub fn packet_data(&self) -> &[u8] {
        &self.packet
    }
}

impl ContextModel for XdpMd {
    fn size(&self) -> usize {
        Self::SIZE
    }

    fn load(&self, offset: usize, size: Size) -> Result<u64, ContextError> {
        let data = self.packet.as_ptr() as u64;
        if size != Size::W || !offset.is_multiple_of(4) || offset >= Self::SIZE {
            return Err(ContextError::BadRead {
                offset,
                size: size.bytes(),
            });
        }
        Ok(match offset {
            Self::OFF_DATA | Self::OFF_DATA_META => data,
            Self::OFF_DATA_END => data + self.packet.len() as u64,
            Self::OFF_INGRESS_IFINDEX => self.ingress_ifindex as u64,
            Self::OFF_RX_QUEUE_INDEX => self.rx_queue_index as u64,
            _ => self.egress_ifindex as u64,
        })
    }

    fn store(&mut self, offset: usize, size: Size, _value: u64) -> Result<(), ContextError> {
        Err(ContextError::BadWrite {
            offset,
            size: size.bytes(),
        })
    }

    fn packet(&mut self) -> Option<PacketRegion> {
        Some(PacketRegion {
            addr: self.packet.as_mut_ptr() as u64,
            len: self.packet.len() as u64,
            writable: true,
        })
    }

    fn packet_bytes(&self) -> &[u8] {
        &self.packet
    }

    fn anchor(&self) -> *const u8 {
        self.anchor.as_ptr() as *const u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skb_fields_and_pointers() {
        let mut frame = vec![0u8; 20];
        frame[12] = 0x08;
        let mut skb = SkBuff::socket_filter_test_run(&frame).unwrap();
        assert_eq!(skb.load(SkBuff::OFF_LEN, Size::W).unwrap(), 6);
        assert_eq!(skb.load(SkBuff::OFF_PROTOCOL, Size::W).unwrap(), 0x8);
        assert_eq!(skb.load(SkBuff::OFF_IFINDEX, Size::W).unwrap(), 1);
        let data = skb.load(SkBuff::OFF_DATA, Size::W).unwrap();
        let end = skb.load(SkBuff::OFF_DATA_END, Size::W).unwrap();
        assert_eq!(end - data, 6);
        assert!(skb.load(SkBuff::OFF_DATA, Size::H).is_err());
        assert!(skb.load(100, Size::W).is_err());
        skb.store(SkBuff::OFF_CB + 8, Size::W, 42).unwrap();
        assert_eq!(skb.load(SkBuff::OFF_CB + 8, Size::W).unwrap(), 42);
        // Narrow, aligned writes into `cb` are allowed (the kernel allows them too); they
        // change only their bytes.
        skb.store(SkBuff::OFF_CB + 10, Size::H, 0xbeef).unwrap();
        assert_eq!(skb.load(SkBuff::OFF_CB + 8, Size::W).unwrap(), 0xbeef_002a);
        skb.store(SkBuff::OFF_CB + 19, Size::B, 7).unwrap();
        assert_eq!(skb.load(SkBuff::OFF_CB + 16, Size::W).unwrap(), 0x0700_0000);
        assert!(
            skb.store(SkBuff::OFF_CB + 9, Size::H, 1).is_err(),
            "misaligned"
        );
        assert!(
            skb.store(SkBuff::OFF_CB + 16, Size::DW, 1).is_err(),
            "past cb[4]"
        );
        assert!(
            skb.store(SkBuff::OFF_MARK, Size::H, 1).is_err(),
            "narrow write of mark"
        );
        assert!(skb.store(SkBuff::OFF_LEN, Size::W, 1).is_err());
        assert!(SkBuff::socket_filter_test_run(&[0; 13]).is_none());
        // Broadcast on loopback is multicast; short EtherTypes are 802.3 lengths.
        let mut f = vec![0xffu8; 6];
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&[0x00, 0x40, 0xff, 0xff]);
        let skb = SkBuff::socket_filter_test_run(&f).unwrap();
        assert_eq!(skb.pkt_type, 2);
        assert_eq!(skb.protocol, 0x0100);
        f[14] = 0xaa;
        assert_eq!(SkBuff::socket_filter_test_run(&f).unwrap().protocol, 0x0400);
        f[0] = 0x02;
        assert_eq!(SkBuff::socket_filter_test_run(&f).unwrap().pkt_type, 3);
    }

    #[test]
    fn xdp_fields() {
        let mut xdp = XdpMd::new(vec![1, 2, 3]);
        let d = xdp.load(XdpMd::OFF_DATA, Size::W).unwrap();
        assert_eq!(xdp.load(XdpMd::OFF_DATA_END, Size::W).unwrap(), d + 3);
        assert_eq!(xdp.load(XdpMd::OFF_INGRESS_IFINDEX, Size::W).unwrap(), 1);
        assert!(xdp.store(0, Size::W, 0).is_err());
        assert_eq!(xdp.packet().unwrap().len, 3);
    }
}
