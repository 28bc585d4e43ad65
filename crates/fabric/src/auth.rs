//! The node token and the bootstrap exchange that hands out a region's fabric address and
//! key only to a control plane presenting that token.
//!
//! Wire format (TCP, one exchange per connection, little endian):
//! - request: `b"RDXFAB02"`, token length (u16), token bytes;
//! - reply: status (u8: 0 granted, 1 wrong token, 2 malformed request); when granted,
//!   provider name (u16 length + bytes), endpoint address (u16 length + bytes), MR key (u64),
//!   remote address of region offset 0 (u64), region length (u64), session (u64, random per
//!   serving start), then the barrier doorbell: a presence byte (0 or 1) and, when present,
//!   its MR key (u64) and remote address (u64).

use crate::FabricError;
use std::io::{Read, Write};

pub(crate) const REQUEST_MAGIC: &[u8; 8] = b"RDXFAB02";
pub(crate) const STATUS_GRANTED: u8 = 0;
pub(crate) const STATUS_WRONG_TOKEN: u8 = 1;
pub(crate) const STATUS_MALFORMED: u8 = 2;
/// Longest token accepted on the wire; anything longer is malformed.
pub(crate) const MAX_TOKEN: usize = 256;
const MAX_FIELD: usize = 1024;

/// A node's secret: whoever presents it gets the keys to its region.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token(<{} bytes>)", self.0.len())
    }
}

impl Token {
    /// 32 bytes from the kernel's random generator.
    pub fn generate() -> Result<Self, FabricError> {
        Ok(Self(random_bytes(32)?))
    }

    /// A token from its hexadecimal form (as stored in a node's token file).
    pub fn from_hex(text: &str) -> Result<Self, FabricError> {
        let text = text.trim();
        let bad = || {
            FabricError::BadToken(format!(
                "{} characters, not an even-length hex string of 2..={} bytes",
                text.len(),
                MAX_TOKEN
            ))
        };
        if !text.len().is_multiple_of(2) || text.is_empty() || text.len() > 2 * MAX_TOKEN {
            return Err(bad());
        }
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|_| bad()))
            .collect::<Result<Vec<u8>, _>>()
            .map(Self)
    }

    /// The token in hexadecimal, the form token files hold (a secret: never log it).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The raw token bytes, as presented to the bootstrap listener.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Equality whose running time depends only on the lengths, not on where the first
    /// differing byte is.
    pub fn matches(&self, presented: &[u8]) -> bool {
        constant_time_eq(&self.0, presented)
    }
}

/// Reads a token file, refusing one that another user owns or that group or others may read
/// (or write): whoever reads a token owns the node, so a token file must be as private as an
/// SSH key. The checks run on the opened file, so a file swapped in between cannot slip by.
pub fn read_token_file(path: &std::path::Path) -> Result<Token, FabricError> {
    use std::os::unix::fs::MetadataExt;
    let io = |source| FabricError::Io {
        what: format!("reading token file {}", path.display()),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.file_type().is_file() {
        return Err(FabricError::BadToken(format!(
            "token file {} is not a regular file",
            path.display()
        )));
    }
    if meta.uid() != euid {
        return Err(FabricError::BadToken(format!(
            "token file {} is owned by uid {}, not by this process's user (uid {euid}); refusing a secret another user controls",
            path.display(),
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(FabricError::BadToken(format!(
            "token file {} has mode {mode:04o}: group or others can read or write it (chmod 600 it)",
            path.display()
        )));
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io)?;
    Token::from_hex(&text)
        .map_err(|e| FabricError::BadToken(format!("token file {}: {e}", path.display())))
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

pub(crate) fn random_bytes(n: usize) -> Result<Vec<u8>, FabricError> {
    let mut out = vec![0u8; n];
    let mut done = 0;
    while done < n {
        // SAFETY: writing at most n - done bytes into our buffer.
        let rc = unsafe { libc::getrandom(out[done..].as_mut_ptr().cast(), n - done, 0) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(FabricError::Io {
                what: "getrandom".into(),
                source: e,
            });
        }
        done += rc as usize;
    }
    Ok(out)
}

pub(crate) fn random_u64() -> Result<u64, FabricError> {
    let b = random_bytes(8)?;
    Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// What a granted bootstrap returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The libfabric provider the node serves with; the control plane opens the same one.
    pub provider: String,
    /// The node endpoint's libfabric address (opaque, provider-specific bytes).
    pub address: Vec<u8>,
    /// Memory-registration key of the region for remote reads, writes and atomics.
    pub key: u64,
    /// Remote address of the region's first byte, or 0 when the provider addresses
    /// registrations by offset (no `FI_MR_VIRT_ADDR`).
    pub remote_base: u64,
    /// Length of the registered region in bytes.
    pub region_len: u64,
    /// Random per serving start of the node: a change means the node restarted.
    pub session: u64,
    /// The node's barrier doorbell, if it runs the barrier service (`docs/fabric.md`).
    pub barrier: Option<Doorbell>,
}

/// Where a control plane rings a node's barrier service: two 8-byte words in their own
/// registration (`requested` at +0, incremented with fetch-and-add; `completed` at +8,
/// written by the node after every host thread passed a full barrier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doorbell {
    /// Memory-registration key of the doorbell's two words.
    pub key: u64,
    /// Remote address of the `requested` word, or 0 when the provider addresses
    /// registrations by offset.
    pub remote_addr: u64,
}

impl Grant {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![STATUS_GRANTED];
        for field in [self.provider.as_bytes(), &self.address] {
            out.extend_from_slice(&(field.len() as u16).to_le_bytes());
            out.extend_from_slice(field);
        }
        for v in [self.key, self.remote_base, self.region_len, self.session] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        match self.barrier {
            None => out.push(0),
            Some(d) => {
                out.push(1);
                out.extend_from_slice(&d.key.to_le_bytes());
                out.extend_from_slice(&d.remote_addr.to_le_bytes());
            }
        }
        out
    }

    /// Parses a reply (status byte included).
    pub(crate) fn decode(mut r: impl Read) -> Result<Self, ReplyError> {
        let mut status = [0u8];
        r.read_exact(&mut status)?;
        match status[0] {
            STATUS_GRANTED => {}
            STATUS_WRONG_TOKEN => return Err(ReplyError::WrongToken),
            s => return Err(ReplyError::Malformed(format!("status {s}"))),
        }
        let mut field = |what: &str| -> Result<Vec<u8>, ReplyError> {
            let mut len = [0u8; 2];
            r.read_exact(&mut len)?;
            let len = u16::from_le_bytes(len) as usize;
            if len > MAX_FIELD {
                return Err(ReplyError::Malformed(format!("{what} of {len} bytes")));
            }
            let mut v = vec![0u8; len];
            r.read_exact(&mut v)?;
            Ok(v)
        };
        let provider = String::from_utf8(field("provider name")?)
            .map_err(|_| ReplyError::Malformed("provider name is not UTF-8".into()))?;
        let address = field("endpoint address")?;
        fn word(r: &mut impl Read) -> Result<u64, ReplyError> {
            let mut b = [0u8; 8];
            r.read_exact(&mut b)?;
            Ok(u64::from_le_bytes(b))
        }
        let words = [word(&mut r)?, word(&mut r)?, word(&mut r)?, word(&mut r)?];
        let mut present = [0u8];
        r.read_exact(&mut present)?;
        let barrier = match present[0] {
            0 => None,
            1 => Some(Doorbell {
                key: word(&mut r)?,
                remote_addr: word(&mut r)?,
            }),
            b => return Err(ReplyError::Malformed(format!("barrier presence byte {b}"))),
        };
        Ok(Self {
            barrier,
            provider,
            address,
            key: words[0],
            remote_base: words[1],
            region_len: words[2],
            session: words[3],
        })
    }
}

/// Parses a bootstrap reply as a control plane does (for fuzzing and tools); the error says
/// why it is not a grant.
pub fn decode_reply(bytes: &[u8]) -> Result<Grant, String> {
    Grant::decode(bytes).map_err(|e| e.to_string())
}

/// Parses a bootstrap request as a node does; `None` if it is malformed or truncated.
pub fn decode_request(bytes: &[u8]) -> Option<Vec<u8>> {
    read_request(bytes).ok().flatten()
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplyError {
    #[error("the node refused the token")]
    WrongToken,
    #[error("malformed reply: {0}")]
    Malformed(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

pub(crate) fn encode_request(token: &Token) -> Vec<u8> {
    let mut out = REQUEST_MAGIC.to_vec();
    out.extend_from_slice(&(token.0.len() as u16).to_le_bytes());
    out.extend_from_slice(&token.0);
    out
}

/// Reads one request; `Ok(None)` if it is malformed (the caller replies so).
pub(crate) fn read_request(mut r: impl Read) -> std::io::Result<Option<Vec<u8>>> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)?;
    if &magic != REQUEST_MAGIC {
        return Ok(None);
    }
    let mut len = [0u8; 2];
    r.read_exact(&mut len)?;
    let len = u16::from_le_bytes(len) as usize;
    if len == 0 || len > MAX_TOKEN {
        return Ok(None);
    }
    let mut token = vec![0u8; len];
    r.read_exact(&mut token)?;
    Ok(Some(token))
}

pub(crate) fn reply(mut w: impl Write, bytes: &[u8]) -> std::io::Result<()> {
    w.write_all(bytes)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn tokens_roundtrip_through_hex_and_compare() {
        let t = Token::generate().unwrap();
        assert_eq!(t.as_bytes().len(), 32);
        let back = Token::from_hex(&t.to_hex()).unwrap();
        assert!(t.matches(back.as_bytes()));
        let mut wrong = t.as_bytes().to_vec();
        wrong[31] ^= 1;
        assert!(!t.matches(&wrong));
        assert!(!t.matches(&wrong[..31]));
        assert_ne!(Token::generate().unwrap(), t);
        assert!(Token::from_hex("abc").is_err());
        assert!(Token::from_hex("zz").is_err());
        assert!(Token::from_hex("").is_err());
    }

    #[test]
    fn grant_roundtrips() {
        let g = Grant {
            provider: "sockets".into(),
            address: vec![1, 2, 3],
            key: 7,
            remote_base: 0x7f00_0000_0000,
            region_len: 1 << 20,
            session: 99,
            barrier: None,
        };
        assert_eq!(Grant::decode(&g.encode()[..]).unwrap(), g);
        let with_barrier = Grant {
            barrier: Some(Doorbell {
                key: 3,
                remote_addr: 0x7f00_1000_0000,
            }),
            ..g.clone()
        };
        assert_eq!(
            Grant::decode(&with_barrier.encode()[..]).unwrap(),
            with_barrier
        );
        let mut bad = g.encode();
        *bad.last_mut().unwrap() = 7;
        assert!(matches!(
            Grant::decode(&bad[..]),
            Err(ReplyError::Malformed(_))
        ));
        assert!(matches!(
            Grant::decode(&[STATUS_WRONG_TOKEN][..]),
            Err(ReplyError::WrongToken)
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_replies_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Grant::decode(&bytes[..]);
        }

        #[test]
        fn arbitrary_requests_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = read_request(&bytes[..]);
        }

        #[test]
        fn constant_time_eq_is_eq(a in proptest::collection::vec(any::<u8>(), 0..8),
                                  b in proptest::collection::vec(any::<u8>(), 0..8)) {
            prop_assert_eq!(constant_time_eq(&a, &b), a == b);
        }
    }
}
