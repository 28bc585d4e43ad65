//! Longest-prefix-match maps (`BPF_MAP_TYPE_LPM_TRIE` semantics). Keys are
//! `[prefixlen: u32][data: key_size - 4 bytes]`, bits counted from the first data byte's most
//! significant bit, as in the kernel.
//!
//! Layout: a binary trie (the kernel's: path-compressed, with intermediate nodes where two
//! prefixes diverge) of nodes in the map's data:
//! - `data + 0`: root node index + 1 (0: empty); `+ 8`: nodes ever allocated (high water);
//!   `+ 16`: head of the free list (index + 1); `+ 24`: reserved. Nodes start at
//!   `data + TRIE_HEADER`, `entry_stride` bytes each, `buckets` (2 × `max_entries`) of them.
//! - node: `[flags: u32][prefixlen: u32]`, `[child0: u32][child1: u32]` (index + 1, 0 =
//!   none; a free node's `child0` links the free list), the key (`key_stride` bytes, bits
//!   beyond the prefix cleared), the value (`value_stride` bytes).
//!
//! A lookup walks at most one node per prefix length: O(key bits), independent of the number
//! of entries. Writers take the map lock and make the map's `write_seq` odd for the duration
//! of a change; readers — the host's helpers and remote control planes alike — walk the trie
//! between two equal, even loads of `write_seq` and retry otherwise, so a lookup never
//! returns a torn value or a match that did not exist at one instant. New nodes are written
//! completely before they are linked, and unlinked before they are freed.

use super::{
    invalid, locked, Copies, MapError, MapOps, MapRef, BUSY_SPIN_LIMIT, MAX_KEY_SIZE, UPDATE_EXIST,
    UPDATE_NOEXIST,
};
use crate::Transport;
use rdx_region::layout::offsets;

/// [`MapOps`] of longest-prefix-match tries.
pub struct LpmMap;

/// Bytes before the first node.
pub const TRIE_HEADER: u64 = 32;
/// Bytes of a node before its key.
pub const NODE_HEADER: u64 = 16;
/// Node flag: the node is allocated (linked, or about to be).
pub const NODE_USED: u32 = 1;
/// Node flag: an intermediate node (a branch point with no value of its own).
pub const NODE_INTERMEDIATE: u32 = 2;

const KEY_BUF: usize = MAX_KEY_SIZE as usize;
const ROOT: u64 = 0;
const HIGH_WATER: u64 = 8;
const FREE_HEAD: u64 = 16;

fn node_at(m: &MapRef, i: u32) -> u64 {
    m.data + TRIE_HEADER + i as u64 * m.entry_stride as u64
}

fn max_bits(m: &MapRef) -> u32 {
    (m.key_size - 4) * 8
}

/// Prefix length of `key`, checked against the map's data size.
fn prefixlen(m: &MapRef, key: &[u8]) -> Result<u32, MapError> {
    m.check_key(key)?;
    let p = u32::from_le_bytes(key[..4].try_into().expect("4"));
    if p > max_bits(m) {
        return invalid(format!("prefix length {p} above {} bits", max_bits(m)));
    }
    Ok(p)
}

/// `key` with the bits beyond its prefix cleared.
fn masked(key: &[u8], bits: u32, out: &mut [u8]) {
    out[..key.len()].copy_from_slice(key);
    let data = &mut out[4..key.len()];
    let full = (bits / 8) as usize;
    let rest = bits % 8;
    for (i, b) in data.iter_mut().enumerate() {
        if i > full || (i == full && rest == 0) {
            *b = 0;
        } else if i == full {
            *b &= 0xffu8 << (8 - rest);
        }
    }
}

/// Bit `index` of `data`, most significant bit of byte 0 first.
fn bit(data: &[u8], index: u32) -> usize {
    ((data[(index / 8) as usize] >> (7 - index % 8)) & 1) as usize
}

/// Leading bits on which `a` and `b` agree, at most `limit`.
fn common_bits(a: &[u8], b: &[u8], limit: u32) -> u32 {
    let mut n = 0;
    for (x, y) in a.iter().zip(b) {
        if n >= limit {
            break;
        }
        let diff = x ^ y;
        if diff != 0 {
            n += diff.leading_zeros();
            break;
        }
        n += 8;
    }
    n.min(limit)
}

/// A node as read (possibly mid-change; only a read under an unchanged `write_seq` counts).
/// Its key is read into a buffer of the caller's ([`KeyBuf`]).
struct Node {
    index: u32,
    flags: u32,
    prefixlen: u32,
    child: [u32; 2],
}

/// A key-sized buffer, on the stack for keys up to 64 bytes (every address family).
struct KeyBuf {
    stack: [u8; 64],
    heap: Vec<u8>,
    len: usize,
}

impl KeyBuf {
    fn new(m: &MapRef) -> Self {
        let len = m.key_size as usize;
        Self {
            stack: [0; 64],
            heap: if len > 64 { vec![0; len] } else { Vec::new() },
            len,
        }
    }

    fn key(&mut self) -> &mut [u8] {
        if self.len > 64 {
            &mut self.heap
        } else {
            &mut self.stack[..self.len]
        }
    }

    fn data(&self) -> &[u8] {
        if self.len > 64 {
            &self.heap[4..]
        } else {
            &self.stack[4..self.len]
        }
    }
}

fn read_node<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    index: u32,
    key: Option<&mut KeyBuf>,
) -> Result<Node, MapError> {
    if index >= m.buckets {
        return Err(MapError::Corrupt {
            id: m.id,
            reason: format!("trie link to node {index} of {}", m.buckets),
        });
    }
    let at = node_at(m, index);
    let w0 = t.read_u64(at)?;
    let w1 = t.read_u64(at + 8)?;
    if let Some(key) = key {
        t.read(at + NODE_HEADER, key.key())?;
    }
    Ok(Node {
        index,
        flags: w0 as u32,
        prefixlen: (w0 >> 32) as u32,
        child: [w1 as u32, (w1 >> 32) as u32],
    })
}

fn link_of(link: u32) -> Option<u32> {
    link.checked_sub(1)
}

/// The node holding the longest prefix of `key`, walking from the root. Not consistent on
/// its own: callers validate with `write_seq`. Bounded by the node capacity, so a walk
/// through links that change under it ends.
fn walk<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    key: &[u8],
    want: u32,
) -> Result<Option<u32>, MapError> {
    let data = &key[4..];
    let mut found = None;
    let mut nk = KeyBuf::new(m);
    let mut link = t.read_u64(m.data + ROOT)? as u32;
    for _ in 0..m.buckets {
        let Some(i) = link_of(link) else { break };
        let n = read_node(t, m, i, Some(&mut nk))?;
        let limit = n.prefixlen.min(want);
        let matched = common_bits(nk.data(), data, limit);
        if matched < n.prefixlen {
            break;
        }
        if n.flags & NODE_INTERMEDIATE == 0 {
            found = Some(i);
        }
        if n.prefixlen >= want {
            break;
        }
        link = n.child[bit(data, n.prefixlen)];
    }
    Ok(found)
}

/// Runs `f` between two equal, even loads of `write_seq`, retrying while a writer works.
fn consistent<T: Transport + ?Sized, R>(
    t: &T,
    m: &MapRef,
    mut f: impl FnMut() -> Result<R, MapError>,
) -> Result<R, MapError> {
    let seq_at = m.offset + offsets::MAP_WRITE_SEQ;
    for spin in 0..BUSY_SPIN_LIMIT {
        let s = t.read_u64(seq_at)?;
        if s & 1 == 0 {
            // A walk over links that changed under it may fail; only a failure under an
            // unchanged sequence is real.
            let r = f();
            if t.read_u64(seq_at)? == s {
                return r;
            }
        }
        if spin > 64 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    Err(MapError::Busy {
        id: m.id,
        holder: 0,
    })
}

fn value_of(m: &MapRef, i: u32) -> u64 {
    node_at(m, i) + NODE_HEADER + m.key_stride as u64
}

/// Everything a writer (holding the map lock) does, bracketed by `write_seq`.
struct Writer<'a, T: Transport + ?Sized> {
    t: &'a T,
    m: &'a MapRef,
}

impl<T: Transport + ?Sized> Writer<'_, T> {
    fn begin(&self) -> Result<u64, MapError> {
        let at = self.m.offset + offsets::MAP_WRITE_SEQ;
        let odd = self.t.read_u64(at)? | 1;
        self.t.write_u64(at, odd)?;
        Ok(odd)
    }

    fn end(&self, odd: u64) -> Result<(), MapError> {
        self.t
            .write_u64(self.m.offset + offsets::MAP_WRITE_SEQ, odd + 1)?;
        Ok(())
    }

    fn set_link(
        &self,
        parent: Option<u32>,
        side: usize,
        target: Option<u32>,
    ) -> Result<(), MapError> {
        let v = target.map_or(0, |i| i + 1);
        match parent {
            None => self.t.write_u64(self.m.data + ROOT, v as u64)?,
            Some(p) => {
                let at = node_at(self.m, p) + 8;
                let w = self.t.read_u64(at)?;
                let w = if side == 0 {
                    (w & !0xffff_ffff) | v as u64
                } else {
                    (w & 0xffff_ffff) | ((v as u64) << 32)
                };
                self.t.write_u64(at, w)?;
            }
        }
        Ok(())
    }

    fn alloc(&self) -> Result<u32, MapError> {
        let (t, m) = (self.t, self.m);
        if let Some(i) = link_of(t.read_u64(m.data + FREE_HEAD)? as u32) {
            let next = t.read_u64(node_at(m, i) + 8)? as u32;
            t.write_u64(m.data + FREE_HEAD, next as u64)?;
            return Ok(i);
        }
        let hw = t.read_u64(m.data + HIGH_WATER)?;
        if hw >= m.buckets as u64 {
            return Err(MapError::Full {
                id: m.id,
                max_entries: m.max_entries,
            });
        }
        t.write_u64(m.data + HIGH_WATER, hw + 1)?;
        Ok(hw as u32)
    }

    fn free(&self, i: u32) -> Result<(), MapError> {
        let (t, m) = (self.t, self.m);
        let head = t.read_u64(m.data + FREE_HEAD)?;
        t.write_u64(node_at(m, i), 0)?;
        t.write_u64(node_at(m, i) + 8, head & 0xffff_ffff)?;
        t.write_u64(m.data + FREE_HEAD, i as u64 + 1)?;
        Ok(())
    }

    /// Writes a complete node (before anything links to it).
    fn write_node(
        &self,
        i: u32,
        flags: u32,
        prefixlen: u32,
        child: [Option<u32>; 2],
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), MapError> {
        let (t, m) = (self.t, self.m);
        let at = node_at(m, i);
        let c = |x: Option<u32>| x.map_or(0, |i| i as u64 + 1);
        t.write_u64(at + 8, c(child[0]) | (c(child[1]) << 32))?;
        t.write(at + NODE_HEADER, &key[..m.key_stride as usize])?;
        if let Some(v) = value {
            t.write(value_of(m, i), v)?;
        }
        t.write_u64(at, (flags | NODE_USED) as u64 | ((prefixlen as u64) << 32))?;
        Ok(())
    }

    fn update(&self, key: &[u8], value: &[u8], flags: u64) -> Result<(), MapError> {
        let (t, m) = (self.t, self.m);
        let want = prefixlen(m, key)?;
        let mut k = [0u8; KEY_BUF];
        masked(key, want, &mut k);
        let data = &k[4..m.key_size as usize];
        // Find where the new prefix belongs.
        let mut parent: Option<u32> = None;
        let mut side = 0usize;
        let mut node: Option<Node> = None;
        let mut matched = 0;
        let mut nk = KeyBuf::new(m);
        let mut link = t.read_u64(m.data + ROOT)? as u32;
        for _ in 0..m.buckets {
            let Some(i) = link_of(link) else { break };
            let n = read_node(t, m, i, Some(&mut nk))?;
            matched = common_bits(nk.data(), data, n.prefixlen.min(want));
            if n.prefixlen != matched || n.prefixlen == want {
                node = Some(n);
                break;
            }
            parent = Some(i);
            side = bit(data, n.prefixlen);
            link = n.child[side];
            node = None;
        }
        let count_at = m.offset + offsets::MAP_COUNT;
        let exact = node
            .as_ref()
            .is_some_and(|n| n.prefixlen == want && matched == want);
        if exact {
            let n = node.as_ref().expect("exact");
            if n.flags & NODE_INTERMEDIATE == 0 {
                if flags == UPDATE_NOEXIST {
                    return Err(MapError::Exists);
                }
                let odd = self.begin()?;
                t.write(value_of(m, n.index), value)?;
                return self.end(odd);
            }
        }
        if flags == UPDATE_EXIST {
            return Err(MapError::NotFound);
        }
        if t.read_u64(count_at)? >= m.max_entries as u64 {
            return Err(MapError::Full {
                id: m.id,
                max_entries: m.max_entries,
            });
        }
        let odd = self.begin()?;
        let r = (|| {
            match node {
                None => {
                    let new = self.alloc()?;
                    self.write_node(new, 0, want, [None, None], &k, Some(value))?;
                    self.set_link(parent, side, Some(new))?;
                }
                Some(n) if exact => {
                    // An intermediate node becomes a real one: value first, then the flag.
                    t.write(value_of(m, n.index), value)?;
                    t.write_u64(
                        node_at(m, n.index),
                        NODE_USED as u64 | ((want as u64) << 32),
                    )?;
                }
                Some(n) if matched == want => {
                    // The new prefix is a prefix of `n`: it goes above it.
                    let new = self.alloc()?;
                    let mut child = [None, None];
                    child[bit(nk.data(), want)] = Some(n.index);
                    self.write_node(new, 0, want, child, &k, Some(value))?;
                    self.set_link(parent, side, Some(new))?;
                }
                Some(n) => {
                    // They diverge at bit `matched`: a branch node with both below it.
                    let new = self.alloc()?;
                    self.write_node(new, 0, want, [None, None], &k, Some(value))?;
                    let branch = self.alloc()?;
                    let mut child = [Some(n.index), Some(n.index)];
                    child[bit(data, matched)] = Some(new);
                    let mut bk = [0u8; KEY_BUF];
                    masked(&k[..m.key_size as usize], matched, &mut bk);
                    bk[..4].copy_from_slice(&matched.to_le_bytes());
                    self.write_node(branch, NODE_INTERMEDIATE, matched, child, &bk, None)?;
                    self.set_link(parent, side, Some(branch))?;
                }
            }
            t.fetch_and_add(count_at, 1)?;
            Ok(())
        })();
        self.end(odd)?;
        r
    }

    fn delete(&self, key: &[u8]) -> Result<(), MapError> {
        let (t, m) = (self.t, self.m);
        let want = prefixlen(m, key)?;
        let mut k = [0u8; KEY_BUF];
        masked(key, want, &mut k);
        let data = &k[4..m.key_size as usize];
        // (node, side taken from it) along the path, root first.
        let mut path: Vec<(u32, usize)> = Vec::new();
        let mut nk = KeyBuf::new(m);
        let mut link = t.read_u64(m.data + ROOT)? as u32;
        let mut target = None;
        for _ in 0..m.buckets {
            let Some(i) = link_of(link) else { break };
            let n = read_node(t, m, i, Some(&mut nk))?;
            let matched = common_bits(nk.data(), data, n.prefixlen.min(want));
            if n.prefixlen != matched || n.prefixlen == want {
                target = Some(n);
                break;
            }
            let side = bit(data, n.prefixlen);
            path.push((i, side));
            link = n.child[side];
        }
        let Some(n) = target else {
            return Err(MapError::NotFound);
        };
        if n.prefixlen != want || nk.data() != data || n.flags & NODE_INTERMEDIATE != 0 {
            return Err(MapError::NotFound);
        }
        let odd = self.begin()?;
        let r = (|| {
            let children: Vec<u32> = n.child.iter().filter_map(|&c| link_of(c)).collect();
            let (parent, side) = match path.last() {
                Some(&(p, s)) => (Some(p), s),
                None => (None, 0),
            };
            match children.len() {
                2 => {
                    // Still a branch point: keep it as an intermediate node.
                    t.write_u64(
                        node_at(m, n.index),
                        (NODE_USED | NODE_INTERMEDIATE) as u64 | ((n.prefixlen as u64) << 32),
                    )?;
                }
                1 => {
                    self.set_link(parent, side, Some(children[0]))?;
                    self.free(n.index)?;
                }
                _ => {
                    let p = parent.map(|p| read_node(t, m, p, None)).transpose()?;
                    match p {
                        Some(p) if p.flags & NODE_INTERMEDIATE != 0 => {
                            // Its parent branched only for it: the sibling takes the parent's
                            // place.
                            let sibling = link_of(p.child[1 - side]);
                            let (gp, gside) = match path.len() {
                                n if n >= 2 => (Some(path[n - 2].0), path[n - 2].1),
                                _ => (None, 0),
                            };
                            self.set_link(gp, gside, sibling)?;
                            self.free(p.index)?;
                        }
                        _ => self.set_link(parent, side, None)?,
                    }
                    self.free(n.index)?;
                }
            }
            t.fetch_and_add(m.offset + offsets::MAP_COUNT, u64::MAX)?;
            Ok(())
        })();
        self.end(odd)?;
        r
    }
}

/// After a dead writer's lock was broken (the caller holds the lock now): if it died in the
/// middle of a change (`write_seq` odd), the trie is rebuilt from its allocated value nodes,
/// so every entry whose node was complete survives, linked or not (a change cut short may
/// or may not have taken effect, and a value being written may be partly written).
pub(crate) fn repair<T: Transport + ?Sized>(t: &T, m: &MapRef) -> Result<(), MapError> {
    let seq_at = m.offset + offsets::MAP_WRITE_SEQ;
    let odd = t.read_u64(seq_at)?;
    if odd & 1 == 0 {
        return Ok(());
    }
    let hw = (t.read_u64(m.data + HIGH_WATER)?).min(m.buckets as u64) as u32;
    let mut entries = Vec::new();
    let mut nk = KeyBuf::new(m);
    for i in 0..hw {
        let n = read_node(t, m, i, Some(&mut nk))?;
        if n.flags & NODE_USED != 0
            && n.flags & NODE_INTERMEDIATE == 0
            && n.prefixlen <= max_bits(m)
        {
            let mut v = vec![0u8; m.value_size as usize];
            t.read(value_of(m, i), &mut v)?;
            let mut key = nk.key().to_vec();
            key[..4].copy_from_slice(&n.prefixlen.to_le_bytes());
            entries.push((key, v));
        }
    }
    for i in 0..hw {
        t.write_u64(node_at(m, i), 0)?;
    }
    t.write(m.data, &[0u8; TRIE_HEADER as usize])?;
    t.write_u64(m.offset + offsets::MAP_COUNT, 0)?;
    t.write_u64(seq_at, odd + 1)?;
    let w = Writer { t, m };
    for (key, value) in entries {
        match w.update(&key, &value, super::UPDATE_ANY) {
            Ok(()) | Err(MapError::Full { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl MapOps for LpmMap {
    fn lookup_ref<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        _copy: u32,
    ) -> Result<Option<u64>, MapError> {
        let want = prefixlen(m, key)?;
        let found = consistent(t, m, || walk(t, m, key, want))?;
        Ok(found.map(|i| value_of(m, i)))
    }

    fn lookup<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        out: &mut [u8],
    ) -> Result<bool, MapError> {
        let want = prefixlen(m, key)?;
        let len = m.value_size as usize;
        consistent(t, m, || {
            Ok(match walk(t, m, key, want)? {
                Some(i) => {
                    t.read(value_of(m, i), &mut out[..len])?;
                    true
                }
                None => false,
            })
        })
    }

    fn update<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        value: &[u8],
        flags: u64,
        _copies: Copies,
        token: u64,
    ) -> Result<(), MapError> {
        prefixlen(m, key)?;
        locked(t, m, token, || Writer { t, m }.update(key, value, flags))
    }

    fn delete<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        token: u64,
    ) -> Result<(), MapError> {
        prefixlen(m, key)?;
        locked(t, m, token, || Writer { t, m }.delete(key))
    }

    /// Iteration in node order: the value nodes after the node of `key` (or from the
    /// first), read under `write_seq`.
    fn next_key<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: Option<&[u8]>,
        out: &mut [u8],
    ) -> Result<bool, MapError> {
        let n = m.key_size as usize;
        let start_key = match key {
            None => None,
            Some(k) => {
                let bits = prefixlen(m, k)?;
                let mut want = [0u8; KEY_BUF];
                masked(k, bits, &mut want);
                Some((bits, want))
            }
        };
        let mut nk = KeyBuf::new(m);
        consistent(t, m, || {
            let hw = (t.read_u64(m.data + HIGH_WATER)?).min(m.buckets as u64) as u32;
            let mut from = 0;
            if let Some((bits, want)) = &start_key {
                for i in 0..hw {
                    let node = read_node(t, m, i, Some(&mut nk))?;
                    if node.flags & NODE_USED != 0
                        && node.flags & NODE_INTERMEDIATE == 0
                        && node.prefixlen == *bits
                        && nk.data() == &want[4..n]
                    {
                        from = i + 1;
                        break;
                    }
                }
            }
            for i in from..hw {
                let node = read_node(t, m, i, Some(&mut nk))?;
                if node.flags & NODE_USED != 0 && node.flags & NODE_INTERMEDIATE == 0 {
                    out[..4].copy_from_slice(&node.prefixlen.to_le_bytes());
                    out[4..n].copy_from_slice(nk.data());
                    return Ok(true);
                }
            }
            Ok(false)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_bits_and_common_prefixes() {
        let mut out = [0u8; 8];
        masked(&[12, 0, 0, 0, 0xab, 0xcd, 0xef, 0x12], 12, &mut out);
        assert_eq!(out, [12, 0, 0, 0, 0xab, 0xc0, 0, 0]);
        assert_eq!(common_bits(&[0xab, 0xc0], &[0xab, 0xcf], 16), 12);
        assert_eq!(common_bits(&[0xab, 0xc0], &[0xab, 0xc0], 16), 16);
        assert_eq!(common_bits(&[0xab, 0xc0], &[0xab, 0xdf], 10), 10);
        assert_eq!(common_bits(&[0x80], &[0x00], 8), 0);
        assert_eq!(bit(&[0x80, 0x01], 0), 1);
        assert_eq!(bit(&[0x80, 0x01], 15), 1);
        assert_eq!(bit(&[0x80, 0x01], 14), 0);
    }
}
