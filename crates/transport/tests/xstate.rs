//! XState map behaviour over a region in this process (the same code runs over a remote
//! transport; see the runtime's cross-process tests).

use proptest::prelude::*;
use rdx_region::geometry::{encode_header, HeaderInfo, RegionParams};
use rdx_region::layout::{Arch, MapType, SectionId, ELEM_BUSY, ELEM_STATE_MASK};
use rdx_transport::local::LocalRegion;
use rdx_transport::xstate::{
    self, ringbuf, Copies, MapError, MapSpec, UPDATE_ANY, UPDATE_EXIST, UPDATE_NOEXIST,
};
use rdx_transport::Transport;

struct Region {
    _mem: Vec<u64>,
    t: LocalRegion,
    info: HeaderInfo,
}

fn region() -> Region {
    let params = RegionParams {
        scratch_size: 1 << 20,
        code_size: 1 << 16,
        thread_slots: 4,
        ..RegionParams::default()
    };
    let (head, info) = encode_header(&params, Arch::X86_64, 0, 0, 0, 0, 0, 0, 0).unwrap();
    let mut mem = vec![0u64; info.region_size as usize / 8];
    // SAFETY: `mem` lives as long as the returned Region and is 8-aligned.
    let t = unsafe { LocalRegion::from_raw(mem.as_mut_ptr() as *mut u8, info.region_size) };
    t.write(0, &head).unwrap();
    Region { _mem: mem, t, info }
}

fn spec(map_type: MapType, key: u32, value: u32, max: u32) -> MapSpec {
    MapSpec {
        map_type,
        key_size: key,
        value_size: value,
        max_entries: max,
        flags: 0,
        name: format!("{map_type:?}").to_lowercase(),
    }
}

fn at(r: &Region, n: u64) -> u64 {
    r.info.section(SectionId::Scratch).offset + n * 4096
}

#[test]
fn hash_update_lookup_delete_and_flags() {
    let r = region();
    let m = xstate::create(&r.t, &r.info, 3, at(&r, 0), &spec(MapType::Hash, 8, 16, 4)).unwrap();
    let k = 7u64.to_le_bytes();
    let mut out = [0u8; 16];
    assert!(!xstate::lookup(&r.t, &m, &k, &mut out).unwrap());
    assert!(matches!(
        xstate::update(&r.t, &m, &k, &[1; 16], UPDATE_EXIST, Copies::All, 1),
        Err(MapError::NotFound)
    ));
    xstate::update(&r.t, &m, &k, &[1; 16], UPDATE_NOEXIST, Copies::All, 1).unwrap();
    assert!(matches!(
        xstate::update(&r.t, &m, &k, &[2; 16], UPDATE_NOEXIST, Copies::All, 1),
        Err(MapError::Exists)
    ));
    xstate::update(&r.t, &m, &k, &[2; 16], UPDATE_ANY, Copies::All, 1).unwrap();
    assert!(xstate::lookup(&r.t, &m, &k, &mut out).unwrap());
    assert_eq!(out, [2; 16]);
    for i in 100..103u64 {
        xstate::update(
            &r.t,
            &m,
            &i.to_le_bytes(),
            &[3; 16],
            UPDATE_ANY,
            Copies::All,
            1,
        )
        .unwrap();
    }
    assert!(matches!(
        xstate::update(
            &r.t,
            &m,
            &200u64.to_le_bytes(),
            &[3; 16],
            UPDATE_ANY,
            Copies::All,
            1
        ),
        Err(MapError::Full { max_entries: 4, .. })
    ));
    xstate::delete(&r.t, &m, &k, 1).unwrap();
    assert!(matches!(
        xstate::delete(&r.t, &m, &k, 1),
        Err(MapError::NotFound)
    ));
    xstate::update(
        &r.t,
        &m,
        &200u64.to_le_bytes(),
        &[4; 16],
        UPDATE_ANY,
        Copies::All,
        1,
    )
    .unwrap();
    assert_eq!(xstate::keys(&r.t, &m).unwrap().len(), 4);
    let opened = xstate::open(&r.t, &r.info, 3).unwrap();
    assert_eq!(opened.name, "hash");
    assert_eq!(opened.map, m);
    assert!(matches!(
        xstate::update(&r.t, &m, &[0; 4], &[4; 16], UPDATE_ANY, Copies::All, 1),
        Err(MapError::Invalid(_))
    ));
}

#[test]
fn creation_is_refused_for_bad_placement_and_reused_ids() {
    let r = region();
    let s = spec(MapType::Array, 4, 8, 16);
    assert!(matches!(
        xstate::create(&r.t, &r.info, 0, at(&r, 0) + 8, &s),
        Err(MapError::Invalid(_))
    ));
    assert!(matches!(
        xstate::create(&r.t, &r.info, 0, 64, &s),
        Err(MapError::Invalid(_))
    ));
    xstate::create(&r.t, &r.info, 0, at(&r, 0), &s).unwrap();
    assert!(matches!(
        xstate::create(&r.t, &r.info, 0, at(&r, 1), &s),
        Err(MapError::Invalid(_))
    ));
    assert!(matches!(
        xstate::create(&r.t, &r.info, 1, at(&r, 1), &spec(MapType::Array, 8, 8, 1)),
        Err(MapError::Invalid(_))
    ));
}

#[test]
fn corrupt_map_header_is_detected() {
    let r = region();
    let m = xstate::create(&r.t, &r.info, 0, at(&r, 0), &spec(MapType::Hash, 4, 4, 8)).unwrap();
    // Claim more buckets than the data holds.
    r.t.write(m.offset + 36, &1024u32.to_le_bytes()).unwrap();
    assert!(matches!(
        xstate::open(&r.t, &r.info, 0),
        Err(MapError::Corrupt { id: 0, .. })
    ));
}

#[test]
fn arrays_and_per_thread_copies() {
    let r = region();
    let a = xstate::create(
        &r.t,
        &r.info,
        0,
        at(&r, 0),
        &spec(MapType::PerThreadArray, 4, 4, 8),
    )
    .unwrap();
    assert_eq!(a.copies, 4);
    xstate::update(
        &r.t,
        &a,
        &2u32.to_le_bytes(),
        &9u32.to_le_bytes(),
        UPDATE_ANY,
        Copies::One(1),
        1,
    )
    .unwrap();
    let mut out = vec![0u8; a.lookup_len()];
    assert!(xstate::lookup(&r.t, &a, &2u32.to_le_bytes(), &mut out).unwrap());
    assert_eq!(&out[8..12], &9u32.to_le_bytes());
    assert_eq!(&out[0..4], &[0; 4]);
    assert!(!xstate::lookup(&r.t, &a, &8u32.to_le_bytes(), &mut out).unwrap());
    assert_eq!(xstate::keys(&r.t, &a).unwrap().len(), 8);

    let h = xstate::create(
        &r.t,
        &r.info,
        1,
        at(&r, 1),
        &spec(MapType::PerThreadHash, 4, 8, 8),
    )
    .unwrap();
    xstate::update(
        &r.t,
        &h,
        &5u32.to_le_bytes(),
        &7u64.to_le_bytes(),
        UPDATE_ANY,
        Copies::All,
        1,
    )
    .unwrap();
    xstate::update(
        &r.t,
        &h,
        &5u32.to_le_bytes(),
        &8u64.to_le_bytes(),
        UPDATE_ANY,
        Copies::One(3),
        1,
    )
    .unwrap();
    let mut out = vec![0u8; h.lookup_len()];
    assert!(xstate::lookup(&r.t, &h, &5u32.to_le_bytes(), &mut out).unwrap());
    assert_eq!(&out[0..8], &7u64.to_le_bytes());
    assert_eq!(&out[24..32], &8u64.to_le_bytes());
}

#[test]
fn ring_buffer_wraps_and_keeps_order() {
    let r = region();
    let m = xstate::create(
        &r.t,
        &r.info,
        0,
        at(&r, 0),
        &spec(MapType::RingBuf, 0, 0, 4096),
    )
    .unwrap();
    let mut seen = Vec::new();
    for round in 0..50u32 {
        for i in 0..10u32 {
            let rec = vec![(round * 10 + i) as u8; 1 + (i as usize * 37) % 200];
            assert!(ringbuf::output(&r.t, &m, &rec, 1).unwrap());
        }
        ringbuf::consume(&r.t, &m, |rec| seen.push(rec[0])).unwrap();
    }
    assert_eq!(seen, (0..500u32).map(|v| v as u8).collect::<Vec<_>>());
    // Full ring: records are dropped and counted, not overwritten.
    let mut accepted = 0;
    while ringbuf::output(&r.t, &m, &[1; 100], 1).unwrap() {
        accepted += 1;
    }
    assert!(accepted > 30);
    assert_eq!(ringbuf::dropped(&r.t, &m).unwrap(), 1);
    // A reserved, uncommitted record stops the consumer; discard skips it.
    let mut n = 0;
    ringbuf::consume(&r.t, &m, |_| n += 1).unwrap();
    assert_eq!(n, accepted);
    let a = ringbuf::reserve(&r.t, &m, 8, 1).unwrap().unwrap();
    assert!(ringbuf::output(&r.t, &m, &[5; 8], 1).unwrap());
    assert_eq!(ringbuf::consume(&r.t, &m, |_| {}).unwrap(), 0);
    ringbuf::commit(&r.t, a, true).unwrap();
    let mut got = Vec::new();
    assert_eq!(
        ringbuf::consume(&r.t, &m, |rec| got.push(rec.to_vec())).unwrap(),
        1
    );
    assert_eq!(got, vec![vec![5; 8]]);
}

#[test]
fn remote_readers_never_see_torn_hash_values() {
    let r = region();
    let m = xstate::create(&r.t, &r.info, 0, at(&r, 0), &spec(MapType::Hash, 4, 64, 16)).unwrap();
    let key = 1u32.to_le_bytes();
    xstate::update(&r.t, &m, &key, &[0; 64], UPDATE_ANY, Copies::All, 1).unwrap();
    let t = r.t;
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..20_000u32 {
                let v = [(i % 251) as u8; 64];
                xstate::update(&t, &m, &key, &v, UPDATE_ANY, Copies::All, 2).unwrap();
                if i % 7 == 0 {
                    xstate::delete(&t, &m, &key, 2).unwrap();
                    xstate::update(&t, &m, &key, &v, UPDATE_ANY, Copies::All, 2).unwrap();
                }
            }
        });
        let mut out = [0u8; 64];
        for _ in 0..20_000 {
            if xstate::lookup(&t, &m, &key, &mut out).unwrap() {
                assert!(out.iter().all(|&b| b == out[0]), "torn value {out:?}");
            }
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn hash_behaves_like_a_bounded_map(ops in proptest::collection::vec((0u8..3, 0u16..40, any::<u32>()), 1..300)) {
        let r = region();
        let m = xstate::create(&r.t, &r.info, 0, at(&r, 0), &spec(MapType::Hash, 2, 4, 16)).unwrap();
        let mut model = std::collections::BTreeMap::new();
        for (op, k, v) in ops {
            let key = k.to_le_bytes();
            match op {
                0 => {
                    let res = xstate::update(&r.t, &m, &key, &v.to_le_bytes(), UPDATE_ANY, Copies::All, 1);
                    if model.contains_key(&k) || model.len() < 16 {
                        res.unwrap();
                        model.insert(k, v);
                    } else {
                        prop_assert!(matches!(res, Err(MapError::Full { .. })), "expected Full");
                    }
                }
                1 => {
                    let res = xstate::delete(&r.t, &m, &key, 1);
                    prop_assert_eq!(res.is_ok(), model.remove(&k).is_some());
                }
                _ => {
                    let mut out = [0u8; 4];
                    let found = xstate::lookup(&r.t, &m, &key, &mut out).unwrap();
                    prop_assert_eq!(found.then(|| u32::from_le_bytes(out)), model.get(&k).copied());
                }
            }
        }
        let mut keys: Vec<u16> = xstate::keys(&r.t, &m).unwrap().iter().map(|k| u16::from_le_bytes([k[0], k[1]])).collect();
        keys.sort();
        prop_assert_eq!(keys, model.keys().copied().collect::<Vec<_>>());
    }
}

fn lpm_key(bits: u32, ip: [u8; 4]) -> [u8; 8] {
    let mut k = [0u8; 8];
    k[..4].copy_from_slice(&bits.to_le_bytes());
    k[4..].copy_from_slice(&ip);
    k
}

#[test]
fn lpm_returns_the_longest_matching_prefix() {
    let r = region();
    let m = xstate::create(
        &r.t,
        &r.info,
        0,
        at(&r, 0),
        &spec(MapType::LpmTrie, 8, 4, 16),
    )
    .unwrap();
    let put = |bits, ip, v: u32| {
        xstate::update(
            &r.t,
            &m,
            &lpm_key(bits, ip),
            &v.to_le_bytes(),
            UPDATE_ANY,
            Copies::All,
            1,
        )
        .unwrap()
    };
    put(8, [10, 99, 99, 99], 1); // stored masked: 10.0.0.0/8
    put(16, [10, 1, 0, 0], 2);
    put(24, [10, 1, 2, 0], 3);
    let get = |ip| {
        let mut out = [0u8; 4];
        xstate::lookup(&r.t, &m, &lpm_key(32, ip), &mut out)
            .unwrap()
            .then(|| u32::from_le_bytes(out))
    };
    assert_eq!(get([10, 1, 2, 3]), Some(3));
    assert_eq!(get([10, 1, 9, 9]), Some(2));
    assert_eq!(get([10, 9, 9, 9]), Some(1));
    assert_eq!(get([11, 0, 0, 0]), None);
    assert!(matches!(
        xstate::update(
            &r.t,
            &m,
            &lpm_key(8, [10, 0, 0, 0]),
            &[0; 4],
            UPDATE_NOEXIST,
            Copies::All,
            1
        ),
        Err(MapError::Exists)
    ));
    xstate::delete(&r.t, &m, &lpm_key(16, [10, 1, 77, 0]), 1).unwrap();
    assert_eq!(get([10, 1, 9, 9]), Some(1));
    assert!(matches!(
        xstate::update(
            &r.t,
            &m,
            &lpm_key(33, [0; 4]),
            &[0; 4],
            UPDATE_ANY,
            Copies::All,
            1
        ),
        Err(MapError::Invalid(_))
    ));
    let keys = xstate::keys(&r.t, &m).unwrap();
    assert_eq!(keys.len(), 2);
    assert!(keys.contains(&lpm_key(8, [10, 0, 0, 0]).to_vec()));
}

/// The longest stored prefix of `ip` in `model` ((bits, masked ip) → value).
fn lpm_model_lookup(model: &std::collections::BTreeMap<(u32, u16), u32>, ip: u16) -> Option<u32> {
    (0..=16u32).rev().find_map(|bits| {
        let mask = if bits == 0 {
            0
        } else {
            u16::MAX << (16 - bits)
        };
        model.get(&(bits, ip & mask)).copied()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// The trie against a model over 16-bit addresses: inserts, deletes and lookups of
    /// random prefixes, then iteration.
    #[test]
    fn lpm_trie_behaves_like_longest_prefix_match(
        ops in proptest::collection::vec((0u8..3, 0u32..17, any::<u16>(), any::<u32>()), 1..200)
    ) {
        let r = region();
        let m = xstate::create(&r.t, &r.info, 0, at(&r, 0), &spec(MapType::LpmTrie, 6, 4, 24)).unwrap();
        let mut model = std::collections::BTreeMap::new();
        let key = |bits: u32, ip: u16| {
            let mut k = [0u8; 6];
            k[..4].copy_from_slice(&bits.to_le_bytes());
            k[4..].copy_from_slice(&ip.to_be_bytes());
            k
        };
        for (op, bits, ip, v) in ops {
            let mask = if bits == 0 { 0 } else { u16::MAX << (16 - bits) };
            let id = (bits, ip & mask);
            match op {
                0 => {
                    let res = xstate::update(&r.t, &m, &key(bits, ip), &v.to_le_bytes(), UPDATE_ANY, Copies::All, 1);
                    if model.contains_key(&id) || model.len() < 24 {
                        res.unwrap();
                        model.insert(id, v);
                    } else {
                        prop_assert!(matches!(res, Err(MapError::Full { .. })), "expected Full");
                    }
                }
                1 => {
                    let res = xstate::delete(&r.t, &m, &key(bits, ip), 1);
                    prop_assert_eq!(res.is_ok(), model.remove(&id).is_some());
                }
                _ => {
                    let mut out = [0u8; 4];
                    let found = xstate::lookup(&r.t, &m, &key(16, ip), &mut out).unwrap();
                    prop_assert_eq!(found.then(|| u32::from_le_bytes(out)), lpm_model_lookup(&model, ip));
                }
            }
        }
        for ip in (0..=u16::MAX).step_by(251) {
            let mut out = [0u8; 4];
            let found = xstate::lookup(&r.t, &m, &key(16, ip), &mut out).unwrap();
            prop_assert_eq!(found.then(|| u32::from_le_bytes(out)), lpm_model_lookup(&model, ip));
        }
        let mut keys: Vec<(u32, u16)> = xstate::keys(&r.t, &m)
            .unwrap()
            .iter()
            .map(|k| (u32::from_le_bytes(k[..4].try_into().unwrap()), u16::from_be_bytes([k[4], k[5]])))
            .collect();
        keys.sort();
        prop_assert_eq!(keys, model.keys().copied().collect::<Vec<_>>());
    }
}

#[test]
fn remote_readers_never_see_torn_lpm_or_wide_array_values() {
    let r = region();
    let lpm = xstate::create(
        &r.t,
        &r.info,
        0,
        at(&r, 0),
        &spec(MapType::LpmTrie, 8, 64, 16),
    )
    .unwrap();
    let arr = xstate::create(
        &r.t,
        &r.info,
        1,
        at(&r, 16),
        &spec(MapType::Array, 4, 64, 4),
    )
    .unwrap();
    let (k8, k16) = (lpm_key(8, [10, 0, 0, 0]), lpm_key(16, [10, 1, 0, 0]));
    xstate::update(&r.t, &lpm, &k8, &[7; 64], UPDATE_ANY, Copies::All, 2).unwrap();
    let t = r.t;
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..5_000u32 {
                let v = [(i % 251) as u8; 64];
                xstate::update(&t, &lpm, &k8, &v, UPDATE_ANY, Copies::All, 2).unwrap();
                // The /16 comes and goes: the trie's shape changes under the readers.
                if i % 2 == 0 {
                    xstate::update(&t, &lpm, &k16, &v, UPDATE_ANY, Copies::All, 2).unwrap();
                } else {
                    xstate::delete(&t, &lpm, &k16, 2).unwrap();
                }
                xstate::update(
                    &t,
                    &arr,
                    &1u32.to_le_bytes(),
                    &v,
                    UPDATE_ANY,
                    Copies::All,
                    2,
                )
                .unwrap();
            }
        });
        let mut out = [0u8; 64];
        for _ in 0..5_000 {
            assert!(xstate::lookup(&t, &lpm, &lpm_key(32, [10, 1, 2, 3]), &mut out).unwrap());
            assert!(out.iter().all(|&b| b == out[0]), "torn LPM value {out:?}");
            assert!(xstate::lookup(&t, &arr, &1u32.to_le_bytes(), &mut out).unwrap());
            assert!(out.iter().all(|&b| b == out[0]), "torn array value {out:?}");
        }
    });
}

#[test]
fn lock_tokens_of_live_and_dead_holders() {
    let r = region();
    let me = xstate::control_plane_token(std::process::id());
    // Host threads' locks are never broken; a live control plane's fresh lock is not.
    assert!(!xstate::lock_breakable(&r.t, xstate::TOKEN_HOST | 3));
    let m = xstate::create(&r.t, &r.info, 0, at(&r, 0), &spec(MapType::Hash, 4, 4, 4)).unwrap();
    let held = xstate::lock(&r.t, &m, me).unwrap();
    assert_ne!(held, me, "control-plane locks are time-stamped");
    assert!(!xstate::lock_breakable(&r.t, held));
    xstate::unlock(&r.t, &m, held).unwrap();
    // A live holder past the lease: breakable.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let stale = me | (((now_ms - xstate::LOCK_LEASE_MS - 1_000) & ((1 << 30) - 1)) << 32);
    assert!(xstate::lock_breakable(&r.t, stale));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Map data overwritten with arbitrary bytes (a buggy or hostile writer): every
    /// operation returns, with a result or a typed error, and never panics or loops. (Words
    /// that say "a writer is busy here" are cleared: a reader waits on those for its whole
    /// bound, about a second, which `dead_holders_lock_is_broken` in the runtime's tests
    /// covers.)
    #[test]
    fn corrupt_map_data_gives_errors_not_panics(
        map_type in prop_oneof![Just(MapType::LpmTrie), Just(MapType::Hash), Just(MapType::Array)],
        junk in proptest::collection::vec(any::<u8>(), 64..1024),
    ) {
        let r = region();
        let (key_size, value_size) = if map_type == MapType::LpmTrie { (8, 16) } else { (4, 16) };
        let m = xstate::create(&r.t, &r.info, 0, at(&r, 0), &spec(map_type, key_size, value_size, 8)).unwrap();
        r.t.write(m.data, &junk[..junk.len().min(m.data_size as usize)]).unwrap();
        match map_type {
            MapType::Hash => {
                for i in 0..m.buckets as u64 {
                    let e = m.data + i * m.entry_stride as u64;
                    let c = r.t.read_u64(e).unwrap();
                    if c & ELEM_STATE_MASK == ELEM_BUSY {
                        r.t.write_u64(e, c & !ELEM_STATE_MASK).unwrap();
                    }
                }
            }
            MapType::Array => {
                for i in 0..m.max_entries {
                    let s = xstate::array::seq_word(&m, i, 0);
                    r.t.write_u64(s, r.t.read_u64(s).unwrap() & !1).unwrap();
                }
            }
            _ => {}
        }
        let mut out = [0u8; 16];
        let key = lpm_key(32, [junk[0], junk[1], junk[2], junk[3]]);
        let key = &key[..key_size as usize];
        let _ = xstate::lookup(&r.t, &m, key, &mut out);
        let _ = xstate::lookup_ref(&r.t, &m, key, 0);
        let _ = xstate::update(&r.t, &m, key, &[1; 16], UPDATE_ANY, Copies::All, 1);
        let _ = xstate::delete(&r.t, &m, key, 1);
        let _ = xstate::keys(&r.t, &m);
    }
}
