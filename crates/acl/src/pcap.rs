//! pcap traces in and out (classic pcap via the `pcap-file` crate; link types Ethernet and
//! InfiniBand).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;
use thiserror::Error;

use crate::packet::LinkType;

/// Failures reading or writing a trace.
#[derive(Debug, Error)]
pub enum TraceError {
    /// The file could not be opened or created.
    #[error("cannot open trace: {0}")]
    Io(#[from] std::io::Error),
    /// Not a classic pcap file, or a corrupt record.
    #[error("invalid pcap (record {record}): {message}")]
    Format {
        /// Index of the record that failed (0 = the file header).
        record: usize,
        /// The decoder's message.
        message: String,
    },
    /// A link type the ACL does not parse.
    #[error("unsupported pcap link type {0} (supported: 1 Ethernet, 247 InfiniBand)")]
    LinkType(u32),
}

/// A captured trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// Link layer of every packet.
    pub link: LinkType,
    /// Captured bytes of each packet.
    pub packets: Vec<Vec<u8>>,
}

/// Reads a trace from a file.
pub fn read(path: &Path) -> Result<Trace, TraceError> {
    read_from(BufReader::new(File::open(path)?))
}

/// Reads a trace from any reader.
pub fn read_from<R: Read>(r: R) -> Result<Trace, TraceError> {
    let mut reader = PcapReader::new(r).map_err(|e| TraceError::Format {
        record: 0,
        message: e.to_string(),
    })?;
    let linktype = u32::from(reader.header().datalink);
    let link = LinkType::from_pcap(linktype).ok_or(TraceError::LinkType(linktype))?;
    let mut packets = Vec::new();
    while let Some(p) = reader.next_packet() {
        let p = p.map_err(|e| TraceError::Format {
            record: packets.len() + 1,
            message: e.to_string(),
        })?;
        packets.push(p.data.into_owned());
    }
    Ok(Trace { link, packets })
}

/// Writes a trace (timestamps one microsecond apart).
pub fn write_to<W: Write>(w: W, trace: &Trace) -> Result<(), TraceError> {
    let header = PcapHeader {
        datalink: match trace.link {
            LinkType::Ethernet => DataLink::ETHERNET,
            LinkType::InfiniBand => DataLink::INFINIBAND,
        },
        endianness: pcap_file::Endianness::Little,
        ..PcapHeader::default()
    };
    let fmt = |e: pcap_file::PcapError| TraceError::Format {
        record: 0,
        message: e.to_string(),
    };
    let mut writer = PcapWriter::with_header(w, header).map_err(fmt)?;
    for (i, p) in trace.packets.iter().enumerate() {
        let pkt = PcapPacket::new(Duration::from_micros(i as u64), p.len() as u32, p);
        writer.write_packet(&pkt).map_err(fmt)?;
    }
    Ok(())
}

/// Writes a trace to a file.
pub fn write(path: &Path, trace: &Trace) -> Result<(), TraceError> {
    write_to(BufWriter::new(File::create(path)?), trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let t = Trace {
            link: LinkType::InfiniBand,
            packets: vec![vec![1, 2, 3], vec![], vec![9; 100]],
        };
        let mut buf = Vec::new();
        write_to(&mut buf, &t).unwrap();
        assert_eq!(read_from(&buf[..]).unwrap(), t);
        assert!(matches!(
            read_from(&buf[..10]),
            Err(TraceError::Format { record: 0, .. })
        ));
        let r = read_from(&buf[..buf.len() - 1]);
        assert!(
            matches!(r, Err(TraceError::Format { record: 3, .. })),
            "{r:?}"
        );
        let mut other = buf.clone();
        other[20..24].copy_from_slice(&105u32.to_le_bytes());
        assert!(matches!(
            read_from(&other[..]),
            Err(TraceError::LinkType(105))
        ));
    }
}
