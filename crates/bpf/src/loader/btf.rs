//! The part of BTF the loader needs: enough of the type graph to read BTF-defined map
//! declarations in `.maps` (`__uint`, `__type` members) and the sizes of their key and value
//! types. Every read is bounds-checked and every type walk has a depth limit, because the
//! bytes come from an untrusted object.

use std::borrow::Cow;

const MAGIC: u16 = 0xeb9f;
const HEADER_LEN: usize = 24;
/// Typedef/const/volatile chains and nested arrays are never this deep in real objects; a
/// deeper chain is a loop in a hostile file.
const MAX_DEPTH: usize = 32;

/// Why `.BTF` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BtfError {
    /// The section ends before the part named.
    #[error("truncated: {0}")]
    Truncated(&'static str),
    /// The first two bytes are not BTF's magic: the value found.
    #[error("bad magic {0:#06x}")]
    BadMagic(u16),
    /// A BTF version other than 1: the version found.
    #[error("unsupported version {0}")]
    BadVersion(u8),
    /// A type of a kind this reader does not know.
    #[error("type {id}: unknown kind {kind}")]
    UnknownKind {
        /// The type's id.
        id: u32,
        /// Its kind number.
        kind: u32,
    },
    /// A reference to a type id past the last type.
    #[error("type id {0} does not exist")]
    NoSuchType(u32),
    /// A name offset past the end of the string section.
    #[error("string offset {0} is outside the string section")]
    BadString(u32),
    /// A chain of references longer than any real object has, from the type given.
    #[error("type {0}: reference chain too deep (a loop?)")]
    TooDeep(u32),
    /// A type whose size is asked for has none (a function, `void`, ...).
    #[error("type {0} has no size")]
    Unsized(u32),
    /// A type's size does not fit in 32 bits.
    #[error("type {0}: size overflows")]
    SizeOverflow(u32),
}

#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub name_off: u32,
    pub type_id: u32,
}

#[derive(Clone, Debug)]
pub(crate) struct VarSecInfo {
    pub type_id: u32,
    pub offset: u32,
}

#[derive(Clone, Debug)]
pub(crate) enum Kind {
    Void,
    Int {
        size: u32,
    },
    Ptr {
        target: u32,
    },
    Array {
        elem: u32,
        nelems: u32,
    },
    Struct {
        size: u32,
        members: Vec<Member>,
    },
    Union {
        size: u32,
    },
    Enum {
        size: u32,
    },
    /// typedef, volatile, const, restrict, type_tag: same layout as `target`.
    Alias {
        target: u32,
    },
    Var {
        target: u32,
    },
    DataSec {
        entries: Vec<VarSecInfo>,
    },
    Float {
        size: u32,
    },
    /// fwd, func, func_proto, decl_tag: no size, never part of a map layout.
    Unsized,
}

#[derive(Clone, Debug)]
pub(crate) struct Type {
    pub name_off: u32,
    pub kind: Kind,
}

pub(crate) struct Btf<'a> {
    strings: &'a [u8],
    types: Vec<Type>,
}

struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn u32(&mut self, what: &'static str) -> Result<u32, BtfError> {
        let end = self.pos.checked_add(4).ok_or(BtfError::Truncated(what))?;
        let b = self
            .data
            .get(self.pos..end)
            .ok_or(BtfError::Truncated(what))?;
        self.pos = end;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn skip(&mut self, n: usize, what: &'static str) -> Result<(), BtfError> {
        let end = self.pos.checked_add(n).ok_or(BtfError::Truncated(what))?;
        if end > self.data.len() {
            return Err(BtfError::Truncated(what));
        }
        self.pos = end;
        Ok(())
    }
}

fn subslice<'d>(
    data: &'d [u8],
    off: u32,
    len: u32,
    what: &'static str,
) -> Result<&'d [u8], BtfError> {
    let start = off as usize;
    let end = start
        .checked_add(len as usize)
        .ok_or(BtfError::Truncated(what))?;
    data.get(start..end).ok_or(BtfError::Truncated(what))
}

impl<'a> Btf<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Self, BtfError> {
        let mut hdr = Cursor { data, pos: 0 };
        let magic_and_version = hdr.u32("header")?;
        let magic = magic_and_version as u16;
        if magic != MAGIC {
            return Err(BtfError::BadMagic(magic));
        }
        let version = (magic_and_version >> 16) as u8;
        if version != 1 {
            return Err(BtfError::BadVersion(version));
        }
        let hdr_len = hdr.u32("header")?;
        let type_off = hdr.u32("header")?;
        let type_len = hdr.u32("header")?;
        let str_off = hdr.u32("header")?;
        let str_len = hdr.u32("header")?;
        if (hdr_len as usize) < HEADER_LEN {
            return Err(BtfError::Truncated("header"));
        }
        let body = data
            .get(hdr_len as usize..)
            .ok_or(BtfError::Truncated("header"))?;
        let type_bytes = subslice(body, type_off, type_len, "type section")?;
        let strings = subslice(body, str_off, str_len, "string section")?;

        let mut types = vec![Type {
            name_off: 0,
            kind: Kind::Void,
        }];
        let mut c = Cursor {
            data: type_bytes,
            pos: 0,
        };
        while c.pos < type_bytes.len() {
            let id = types.len() as u32;
            let name_off = c.u32("type")?;
            let info = c.u32("type")?;
            let size_or_type = c.u32("type")?;
            let vlen = (info & 0xffff) as usize;
            let kind_num = (info >> 24) & 0x1f;
            let kind = match kind_num {
                1 => {
                    c.skip(4, "int")?;
                    Kind::Int { size: size_or_type }
                }
                2 => Kind::Ptr {
                    target: size_or_type,
                },
                3 => {
                    let elem = c.u32("array")?;
                    let _index_type = c.u32("array")?;
                    let nelems = c.u32("array")?;
                    Kind::Array { elem, nelems }
                }
                4 => {
                    let mut members = Vec::with_capacity(vlen.min(1024));
                    for _ in 0..vlen {
                        let name_off = c.u32("struct member")?;
                        let type_id = c.u32("struct member")?;
                        let _offset = c.u32("struct member")?;
                        members.push(Member { name_off, type_id });
                    }
                    Kind::Struct {
                        size: size_or_type,
                        members,
                    }
                }
                5 => {
                    c.skip(vlen.saturating_mul(12), "union members")?;
                    Kind::Union { size: size_or_type }
                }
                6 => {
                    c.skip(vlen.saturating_mul(8), "enum values")?;
                    Kind::Enum { size: size_or_type }
                }
                19 => {
                    c.skip(vlen.saturating_mul(12), "enum64 values")?;
                    Kind::Enum { size: size_or_type }
                }
                8 | 9 | 10 | 11 | 18 => Kind::Alias {
                    target: size_or_type,
                },
                14 => {
                    c.skip(4, "var")?;
                    Kind::Var {
                        target: size_or_type,
                    }
                }
                15 => {
                    let mut entries = Vec::with_capacity(vlen.min(1024));
                    for _ in 0..vlen {
                        let type_id = c.u32("datasec entry")?;
                        let offset = c.u32("datasec entry")?;
                        let _size = c.u32("datasec entry")?;
                        entries.push(VarSecInfo { type_id, offset });
                    }
                    Kind::DataSec { entries }
                }
                16 => Kind::Float { size: size_or_type },
                7 | 12 => Kind::Unsized,
                13 => {
                    c.skip(vlen.saturating_mul(8), "func_proto params")?;
                    Kind::Unsized
                }
                17 => {
                    c.skip(4, "decl_tag")?;
                    Kind::Unsized
                }
                kind => return Err(BtfError::UnknownKind { id, kind }),
            };
            types.push(Type { name_off, kind });
        }
        Ok(Btf { strings, types })
    }

    pub fn ty(&self, id: u32) -> Result<&Type, BtfError> {
        self.types.get(id as usize).ok_or(BtfError::NoSuchType(id))
    }

    pub fn types(&self) -> impl Iterator<Item = &Type> {
        self.types.iter()
    }

    pub fn name(&self, name_off: u32) -> Result<Cow<'a, str>, BtfError> {
        let tail = self
            .strings
            .get(name_off as usize..)
            .ok_or(BtfError::BadString(name_off))?;
        let len = tail
            .iter()
            .position(|&b| b == 0)
            .ok_or(BtfError::BadString(name_off))?;
        Ok(String::from_utf8_lossy(&tail[..len]))
    }

    /// Follows typedefs and qualifiers to the type that carries the layout.
    pub fn resolve(&self, mut id: u32) -> Result<(u32, &Type), BtfError> {
        for _ in 0..MAX_DEPTH {
            let t = self.ty(id)?;
            match t.kind {
                Kind::Alias { target } => id = target,
                _ => return Ok((id, t)),
            }
        }
        Err(BtfError::TooDeep(id))
    }

    /// Size in bytes of a type, as a map key or value.
    pub fn size_of(&self, id: u32) -> Result<u64, BtfError> {
        self.size_at_depth(id, 0)
    }

    fn size_at_depth(&self, id: u32, depth: usize) -> Result<u64, BtfError> {
        if depth > MAX_DEPTH {
            return Err(BtfError::TooDeep(id));
        }
        let (id, t) = self.resolve(id)?;
        Ok(match t.kind {
            Kind::Int { size }
            | Kind::Struct { size, .. }
            | Kind::Union { size }
            | Kind::Enum { size }
            | Kind::Float { size } => size as u64,
            Kind::Ptr { .. } => 8,
            Kind::Array { elem, nelems } => self
                .size_at_depth(elem, depth + 1)?
                .checked_mul(nelems as u64)
                .ok_or(BtfError::SizeOverflow(id))?,
            Kind::Var { target } => self.size_at_depth(target, depth + 1)?,
            Kind::Void | Kind::Alias { .. } | Kind::DataSec { .. } | Kind::Unsized => {
                return Err(BtfError::Unsized(id))
            }
        })
    }
}

/// Size of the CO-RE relocation subsection `.BTF.ext` declares, if it declares one.
///
/// Only this field of `.BTF.ext` matters to the loader (function and line info are debug
/// aids), so an unreadable header is treated as declaring none.
pub(crate) fn core_relocation_bytes(ext: &[u8]) -> Option<u32> {
    let mut c = Cursor { data: ext, pos: 0 };
    let magic_and_version = c.u32("btf.ext").ok()?;
    if magic_and_version as u16 != MAGIC {
        return None;
    }
    let hdr_len = c.u32("btf.ext").ok()?;
    // hdr_len, func_info_off/len, line_info_off/len, then core_relo_off/len from 32 bytes on.
    if hdr_len < 32 {
        return None;
    }
    c.skip(16, "btf.ext").ok()?;
    let _core_relo_off = c.u32("btf.ext").ok()?;
    let core_relo_len = c.u32("btf.ext").ok()?;
    (core_relo_len > 0).then_some(core_relo_len)
}
