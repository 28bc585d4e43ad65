use super::*;
use crate::field::Field;
use crate::policy::Action;
use crate::rule::{AddrRange, PacketKey, Rule};
use crate::synth::{self, Mix};
use proptest::prelude::*;

const MAPPED: u128 = 0xffff << 32;

/// Rules over tiny domains so that random rules overlap a lot.
fn small_rule() -> impl Strategy<Value = Rule> {
    (
        (
            proptest::option::of((0u32..16, prop_oneof![Just(28u32), Just(30), Just(32)])),
            proptest::option::of((0u32..16, prop_oneof![Just(29u32), Just(32)])),
        ),
        (
            proptest::option::of((0u16..6, 0u16..3)),
            proptest::option::of(0u16..4),
        ),
        (
            proptest::option::of((0u32..6, 0u32..2)),
            proptest::option::of(0u32..4),
        ),
        (
            proptest::option::of(any::<u8>()),
            proptest::option::of((0u64..8, 0u64..4)),
        ),
        (any::<u16>(), any::<bool>()),
    )
        .prop_map(
            |((sip, dip), (sport, dport), (dqpn, lqpn), (ops, va), (absent, deny))| {
                let mut r = Rule::any(if deny { Action::Deny } else { Action::Allow }, 0, 0);
                let need = |r: &mut Rule, f: Field| r.absent_ok &= !(1 << f.index());
                if let Some((a, len)) = sip {
                    let host = if len == 32 { 0 } else { u32::MAX >> len };
                    let base = (a << 2) & !host;
                    r.sip = AddrRange::new(MAPPED | base as u128, MAPPED | (base | host) as u128);
                    need(&mut r, Field::Sip);
                }
                if let Some((a, len)) = dip {
                    let host = if len == 32 { 0 } else { u32::MAX >> len };
                    let base = (a << 2) & !host;
                    r.dip = AddrRange::new(MAPPED | base as u128, MAPPED | (base | host) as u128);
                    need(&mut r, Field::Dip);
                }
                if let Some((lo, w)) = sport {
                    (r.sport_lo, r.sport_hi) = (lo, lo + w);
                    need(&mut r, Field::Sport);
                }
                if let Some(p) = dport {
                    (r.dport_lo, r.dport_hi) = (p, p);
                    need(&mut r, Field::Dport);
                }
                if let Some((lo, w)) = dqpn {
                    (r.dqpn_lo, r.dqpn_hi) = (lo, lo + w);
                    need(&mut r, Field::DQpn);
                }
                if let Some(q) = lqpn {
                    (r.lqpn_lo, r.lqpn_hi) = (q, q);
                    need(&mut r, Field::LQpn);
                }
                if let Some(bits) = ops {
                    r.opcode_mask = [bits as u64 & 0x1f_ffff, 0, 0, 0];
                    if bits == 0 {
                        r.opcode_mask[0] = 1;
                    }
                }
                if let Some((lo, w)) = va {
                    (r.va_lo, r.va_hi) = (lo, lo + w);
                    need(&mut r, Field::Va);
                }
                // Randomly allow absence on a few constrained fields too.
                r.absent_ok |= absent & ((1 << Field::Va.index()) | (1 << Field::LQpn.index()));
                r
            },
        )
}

fn small_packet() -> impl Strategy<Value = PacketKey> {
    (
        (
            proptest::option::of(0u128..64),
            proptest::option::of(0u128..64),
        ),
        (
            proptest::option::of(0u128..9),
            proptest::option::of(0u128..5),
        ),
        (
            proptest::option::of(0u128..8),
            proptest::option::of(0u128..5),
        ),
        (0u128..0x15, proptest::option::of(0u128..13)),
    )
        .prop_map(|((sip, dip), (sport, dport), (dqpn, lqpn), (op, va))| {
            let mut k = PacketKey::default();
            let mut put = |f: Field, v: Option<u128>| {
                if let Some(v) = v {
                    k.set(f, v);
                }
            };
            put(Field::Sip, sip.map(|a| MAPPED | a));
            put(Field::Dip, dip.map(|a| MAPPED | a));
            put(Field::Sport, sport);
            put(Field::Dport, dport);
            put(Field::DQpn, dqpn);
            put(Field::LQpn, lqpn);
            put(Field::Opcode, Some(op));
            put(Field::Va, va);
            k
        })
}

fn numbered(mut rules: Vec<Rule>) -> Vec<Rule> {
    for (i, r) in rules.iter_mut().enumerate() {
        r.priority = i as u32;
        r.policy = i as u32;
    }
    rules
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn tuple_space_agrees_with_linear_scan(
        rules in proptest::collection::vec(small_rule(), 0..60),
        packets in proptest::collection::vec(small_packet(), 1..80),
    ) {
        let rules = numbered(rules);
        let oracle = LinearScan::new(&rules);
        let tss = TupleSpace::new(rules.clone());
        for k in &packets {
            prop_assert_eq!(tss.classify(k), oracle.classify(k), "packet {:?}", k);
        }
    }

    #[test]
    fn hot_tier_agrees_with_linear_scan(
        rules in proptest::collection::vec(small_rule(), 1..60),
        packets in proptest::collection::vec(small_packet(), 1..40),
        order in proptest::collection::vec(0usize..1000, 200..400),
        capacity in 1usize..12,
    ) {
        let rules = numbered(rules);
        let oracle = LinearScan::new(&rules);
        let tss = TupleSpace::new(rules.clone());
        let mut tier = HotTier::new(capacity, 17);
        let mut cache = FlowCache::new(capacity);
        // Skewed: a few packets repeat most of the time.
        for (n, i) in order.iter().enumerate() {
            let k = if n % 5 == 0 { &packets[i % packets.len()] } else { &packets[i % 3 % packets.len()] };
            prop_assert_eq!(tier.classify(&tss, k), oracle.classify(k));
            prop_assert_eq!(cache.classify(&tss, k), oracle.classify(k));
        }
    }

    #[test]
    fn updates_agree_with_a_rebuild(
        rules in proptest::collection::vec(small_rule(), 1..50),
        replacements in proptest::collection::vec((0usize..50, small_rule()), 1..20),
        packets in proptest::collection::vec(small_packet(), 1..60),
    ) {
        let mut rules = numbered(rules);
        let mut tss = TupleSpace::new(rules.clone());
        let mut updates = Vec::new();
        for (at, mut r) in replacements {
            let p = at % rules.len();
            r.priority = p as u32;
            r.policy = p as u32;
            rules[p] = r;
            updates.push(r);
        }
        tss.replace_rules(&updates);
        let oracle = LinearScan::new(&rules);
        for k in &packets {
            prop_assert_eq!(tss.classify(k), oracle.classify(k));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn batches_agree_with_linear_scan(
        rules in proptest::collection::vec(small_rule(), 0..60),
        packets in proptest::collection::vec(small_packet(), 1..24),
        order in proptest::collection::vec(0usize..1000, 1..120),
        slots in 1usize..64,
    ) {
        let rules = numbered(rules);
        let oracle = LinearScan::new(&rules);
        let tss = TupleSpace::new(rules.clone());
        // Repeats, so the flow cache both hits and misses inside one batch.
        let keys: Vec<PacketKey> = order.iter().map(|i| packets[i % packets.len()]).collect();
        let want: Vec<Option<u32>> = keys.iter().map(|k| oracle.classify(k)).collect();
        let mut got = vec![Some(u32::MAX); keys.len()];
        tss.classify_batch(&keys, &mut got);
        prop_assert_eq!(&got, &want);
        let mut cache = FlowCache::new(slots);
        for _ in 0..2 {
            let mut got = vec![Some(u32::MAX); keys.len()];
            cache.classify_batch(&tss, &keys, &mut got);
            prop_assert_eq!(&got, &want);
        }
    }

    /// The flow cache is never flushed by hand here: it must notice every rule-set change by
    /// itself, through the table's generation.
    #[test]
    fn flow_cache_follows_rule_set_updates(
        rules in proptest::collection::vec(small_rule(), 1..50),
        rounds in proptest::collection::vec(
            proptest::collection::vec((0usize..50, small_rule()), 1..8), 1..4),
        packets in proptest::collection::vec(small_packet(), 1..30),
        slots in 1usize..64,
        batched in any::<bool>(),
    ) {
        let mut rules = numbered(rules);
        let mut tss = TupleSpace::new(rules.clone());
        let mut cache = FlowCache::new(slots);
        let check = |cache: &mut FlowCache, tss: &TupleSpace, rules: &[Rule]| {
            let oracle = LinearScan::new(rules);
            let want: Vec<Option<u32>> = packets.iter().map(|k| oracle.classify(k)).collect();
            let got: Vec<Option<u32>> = if batched {
                let mut got = vec![None; packets.len()];
                cache.classify_batch(tss, &packets, &mut got);
                got
            } else {
                packets.iter().map(|k| cache.classify(tss, k)).collect()
            };
            (got, want)
        };
        let (got, want) = check(&mut cache, &tss, &rules);
        prop_assert_eq!(got, want);
        for round in rounds {
            let mut updates = Vec::new();
            for (at, mut r) in round {
                let p = at % rules.len();
                r.priority = p as u32;
                r.policy = p as u32;
                rules[p] = r;
                updates.push(r);
            }
            let before = tss.generation();
            tss.replace_rules(&updates);
            prop_assert_ne!(tss.generation(), before);
            let (got, want) = check(&mut cache, &tss, &rules);
            prop_assert_eq!(got, want);
        }
    }
}

/// Many rules under one key that all pass the pre-filter overflow a batched lookup's candidate
/// list; the packet must then be classified alone, still exactly.
#[test]
fn batch_candidate_overflow_falls_back_exactly() {
    let mut rules: Vec<Rule> = (0..40)
        .map(|_| {
            let mut r = Rule::any(Action::Deny, 0, 0);
            (r.dport_lo, r.dport_hi) = (1, 1);
            r.absent_ok &= !(1 << Field::Dport.index());
            r
        })
        .collect();
    rules.push(Rule::any(Action::Allow, 0, 0));
    let rules = numbered(rules);
    let tss = TupleSpace::new(rules.clone());
    let mut k = PacketKey::default();
    k.set(Field::Dport, 4791);
    let keys = vec![k; 20];
    let mut got = vec![None; keys.len()];
    tss.classify_batch(&keys, &mut got);
    assert_eq!(got, vec![Some(40); 20]);
    k.set(Field::Dport, 1);
    tss.classify_batch(&[k], &mut got[..1]);
    assert_eq!(got[0], Some(0));
}

#[test]
fn synthetic_rules_agree_and_the_hot_tier_hits_on_skewed_traffic() {
    let rules = synth::rules(1500, 7);
    let tss = TupleSpace::new(rules.clone());
    let oracle = LinearScan::new(&rules);
    let packets = synth::traffic(
        &rules,
        6_000,
        Mix::Skewed {
            hot_pct: 80,
            flows: 16,
        },
        9,
    );
    let mut tier = HotTier::new(64, 1024);
    let mut cache = FlowCache::new(256);
    let mut matched = 0;
    for k in &packets {
        let want = oracle.classify(k);
        matched += want.is_some() as usize;
        assert_eq!(tss.classify(k), want);
        assert_eq!(tier.classify(&tss, k), want);
        assert_eq!(cache.classify(&tss, k), want);
    }
    let c = cache.stats();
    assert!(
        c.hits > c.misses * 2,
        "hot flows should be answered from the cache: {c:?}"
    );
    assert!(
        matched > packets.len() / 2,
        "traffic must exercise rules: {matched}"
    );
    let s = tier.stats();
    assert!(
        s.hot_hits > s.misses,
        "hot tier should absorb skewed traffic: {s:?}"
    );
    assert!(tss.stats().tuples > 4);
}

/// Rules over every field, with IPv6 and IPv4-mapped addresses, GIDs, LIDs, CM types, the
/// forged flag and opcodes past 63: the cases the cut tree's compact rule copy cannot decide
/// alone.
fn any_field_rule() -> impl Strategy<Value = Rule> {
    let addr = || {
        proptest::option::of((any::<bool>(), 0u128..32, 0u32..6)).prop_map(|a| {
            a.map(|(v6, base, host_bits)| {
                let base = if v6 {
                    (0xfe80u128 << 112) | base
                } else {
                    MAPPED | base
                };
                let host = (1u128 << host_bits) - 1;
                AddrRange::new(base & !host, base | host)
            })
        })
    };
    let small = || proptest::option::of((0u32..12, 0u32..4));
    (
        (addr(), addr(), addr(), addr()),
        (small(), small(), small(), small()),
        (
            proptest::option::of(any::<[u64; 4]>()),
            proptest::option::of(any::<u16>()),
            proptest::option::of(1u8..4),
            proptest::option::of((0u64..8, 0u64..4)),
        ),
        (any::<u16>(), any::<bool>()),
    )
        .prop_map(
            |(
                (sip, dip, sgid, dgid),
                (sport, slid, lqpn, dqpn),
                (ops, cm, forged, va),
                (absent, deny),
            )| {
                let mut r = Rule::any(if deny { Action::Deny } else { Action::Allow }, 0, 0);
                let need = |r: &mut Rule, f: Field| r.absent_ok &= !(1 << f.index());
                for (f, a) in [
                    (Field::Sip, sip),
                    (Field::Dip, dip),
                    (Field::SGid, sgid),
                    (Field::DGid, dgid),
                ] {
                    if let Some(a) = a {
                        match f {
                            Field::Sip => r.sip = a,
                            Field::Dip => r.dip = a,
                            Field::SGid => r.sgid = a,
                            _ => r.dgid = a,
                        }
                        need(&mut r, f);
                    }
                }
                if let Some((lo, w)) = sport {
                    (r.sport_lo, r.sport_hi) = (lo as u16, (lo + w) as u16);
                    need(&mut r, Field::Sport);
                }
                if let Some((lo, w)) = slid {
                    (r.slid_lo, r.slid_hi) = (lo as u16, (lo + w) as u16);
                    need(&mut r, Field::SLid);
                }
                if let Some((lo, w)) = lqpn {
                    (r.lqpn_lo, r.lqpn_hi) = (lo, lo + w);
                    need(&mut r, Field::LQpn);
                }
                if let Some((lo, w)) = dqpn {
                    (r.dqpn_lo, r.dqpn_hi) = (lo, lo + w);
                    need(&mut r, Field::DQpn);
                }
                if let Some(m) = ops {
                    r.opcode_mask = m;
                }
                if let Some(m) = cm {
                    r.cm_type_mask = m;
                    need(&mut r, Field::CmType);
                }
                if let Some(m) = forged {
                    r.forged_mask = m;
                    need(&mut r, Field::CmForged);
                }
                if let Some((lo, w)) = va {
                    (r.va_lo, r.va_hi) = (lo, lo + w);
                    need(&mut r, Field::Va);
                }
                r.absent_ok |= absent & 0x3fff;
                r
            },
        )
}

fn any_field_packet() -> impl Strategy<Value = PacketKey> {
    let addr = || {
        proptest::option::of((any::<bool>(), 0u128..40)).prop_map(|a| {
            a.map(|(v6, x)| {
                if v6 {
                    (0xfe80u128 << 112) | x
                } else {
                    MAPPED | x
                }
            })
        })
    };
    let small = || proptest::option::of(0u128..18);
    (
        (addr(), addr(), addr(), addr()),
        (small(), small(), small(), small(), small()),
        (
            proptest::option::of(prop_oneof![0u128..0x15, 0x60u128..0x66, Just(0x81)]),
            proptest::option::of(0u128..12),
            proptest::option::of(0u128..2),
            proptest::option::of(0u128..14),
        ),
    )
        .prop_map(
            |((sip, dip, sgid, dgid), (sport, slid, dlid, lqpn, dqpn), (op, cm, forged, va))| {
                let mut k = PacketKey::default();
                for (f, v) in [
                    (Field::Sip, sip),
                    (Field::Dip, dip),
                    (Field::SGid, sgid),
                    (Field::DGid, dgid),
                    (Field::Sport, sport),
                    (Field::SLid, slid),
                    (Field::DLid, dlid),
                    (Field::LQpn, lqpn),
                    (Field::DQpn, dqpn),
                    (Field::Opcode, op),
                    (Field::CmType, cm),
                    (Field::CmForged, forged),
                    (Field::Va, va),
                ] {
                    if let Some(v) = v {
                        k.set(f, v);
                    }
                }
                k
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn cut_tree_agrees_with_linear_scan(
        rules in proptest::collection::vec(small_rule(), 0..120),
        packets in proptest::collection::vec(small_packet(), 1..80),
    ) {
        let rules = numbered(rules);
        let oracle = LinearScan::new(&rules);
        let tree = CutTree::new(rules.clone());
        let tiered = CutTree::with_first_tier(rules.clone(), 9);
        for k in &packets {
            prop_assert_eq!(tree.classify(k), oracle.classify(k), "packet {:?}", k);
            prop_assert_eq!(tiered.classify(k), oracle.classify(k), "packet {:?}", k);
        }
        check_batches(&[&tree, &tiered], &oracle, &packets)?;
    }

    #[test]
    fn cut_tree_agrees_on_every_field(
        rules in proptest::collection::vec(any_field_rule(), 0..120),
        packets in proptest::collection::vec(any_field_packet(), 1..80),
    ) {
        let rules = numbered(rules);
        let oracle = LinearScan::new(&rules);
        let tree = CutTree::new(rules.clone());
        let tiered = CutTree::with_first_tier(rules.clone(), 13);
        let layered = Layered::with_first(rules.clone(), 17);
        for k in &packets {
            prop_assert_eq!(tree.classify(k), oracle.classify(k), "packet {:?}", k);
            prop_assert_eq!(tiered.classify(k), oracle.classify(k), "packet {:?}", k);
            prop_assert_eq!(layered.classify(k), oracle.classify(k), "packet {:?}", k);
        }
        check_batches(&[&tree, &tiered], &oracle, &packets)?;
    }

    #[test]
    fn every_small_tier_shape_agrees_on_every_field(
        rules in proptest::collection::vec(any_field_rule(), 0..100),
        packets in proptest::collection::vec(any_field_packet(), 1..60),
    ) {
        let rules = numbered(rules);
        let oracle = LinearScan::new(&rules);
        for shape in 0..CutTree::SMALL_SHAPES {
            let tree = CutTree::with_small_shape(rules.clone(), 11, shape);
            for k in &packets {
                prop_assert_eq!(tree.classify(k), oracle.classify(k), "shape {}, packet {:?}", shape, k);
            }
            check_batches(&[&tree], &oracle, &packets)?;
        }
    }

    #[test]
    fn tuple_space_agrees_on_every_field(
        rules in proptest::collection::vec(any_field_rule(), 0..80),
        packets in proptest::collection::vec(any_field_packet(), 1..60),
    ) {
        let rules = numbered(rules);
        let oracle = LinearScan::new(&rules);
        let tss = TupleSpace::new(rules.clone());
        for k in &packets {
            prop_assert_eq!(tss.classify(k), oracle.classify(k), "packet {:?}", k);
        }
    }

    #[test]
    fn five_tuple_tiers_agree_and_updates_leave_them(
        rules in proptest::collection::vec(small_rule(), 1..120),
        updates in proptest::collection::vec((0usize..120, small_rule()), 1..20),
        packets in proptest::collection::vec(small_packet(), 1..80),
    ) {
        // Rules over addresses and ports only: lookups skip the opcode, dQPN and VA tests.
        let five = |mut r: Rule| {
            let open = Rule::any(r.action(), 0, 0);
            (r.opcode_mask, r.dqpn_lo, r.dqpn_hi, r.va_lo, r.va_hi) =
                (open.opcode_mask, open.dqpn_lo, open.dqpn_hi, open.va_lo, open.va_hi);
            let keep = (1 << Field::Opcode.index()) | (1 << Field::DQpn.index()) | (1 << Field::Va.index());
            r.absent_ok |= open.absent_ok & keep;
            r
        };
        let mut rules = numbered(rules.into_iter().map(five).collect());
        let mut tree = CutTree::with_first_tier(rules.clone(), 9);
        prop_assert_eq!(tree.five_tuple_tiers(), tree.stats().tiers);
        let oracle = LinearScan::new(&rules);
        for k in &packets {
            prop_assert_eq!(tree.classify(k), oracle.classify(k), "packet {:?}", k);
        }
        // Updates that may bring the other fields back: the tiers they reach stop skipping.
        let mut batch = Vec::new();
        for (at, mut r) in updates {
            let p = at % rules.len();
            (r.priority, r.policy) = (p as u32, p as u32);
            rules[p] = r;
            batch.push(r);
        }
        tree.replace_rules(&batch);
        let oracle = LinearScan::new(&rules);
        for k in &packets {
            prop_assert_eq!(tree.classify(k), oracle.classify(k), "after updates, packet {:?}", k);
        }
        check_batches(&[&tree], &oracle, &packets)?;
    }

    #[test]
    fn a_tombstone_matches_no_packet(
        packets in proptest::collection::vec(any_field_packet(), 1..200),
    ) {
        for k in &packets {
            prop_assert_eq!(CutTree::dead_verdicts(k), [0, 0, 0], "packet {:?}", k);
        }
    }

    #[test]
    fn compact_verdicts_through_the_probe_agree_with_the_key(
        rules in proptest::collection::vec(any_field_rule(), 1..40),
        packets in proptest::collection::vec(any_field_packet(), 1..40),
    ) {
        for r in &rules {
            for k in &packets {
                prop_assert!(CutTree::probe_verdict_agrees(r, k), "rule {:?} packet {:?}", r, k);
            }
        }
    }

    #[test]
    fn flat_table_cuts_agree_with_node_cuts(
        f in 0usize..tree::CUT_FIELDS.len(),
        bits in 0u8..=8,
        top in 0u32..=128,
        anchor in any::<u128>(),
        place in 0u8..5,
        r in any::<u128>(),
        mapped in any::<bool>(),
        packet in any_field_packet(),
    ) {
        let field = tree::CUT_FIELDS[f];
        // Values inside the anchor's block, just above or below it, or anywhere; the
        // anchor IPv4-mapped or not.
        let anchor = if mapped { 0xffff_0000_0000 | (anchor & 0xffff_ffff) } else { anchor };
        let anchor = anchor & field.max();
        let width = 128 - field.max().leading_zeros();
        let top = (top % (width + 1)).max(bits as u32);
        let (lo, size) = if top >= 128 { (0, u128::MAX) } else { (anchor >> top << top, 1u128 << top) };
        let v = match place {
            0 => lo.wrapping_add(r % size),
            1 => lo.wrapping_add(size).wrapping_add(r % 4),
            2 => lo.wrapping_sub(1 + r % 4),
            // Inside in the low 64 bits, another high word.
            3 => (r << 64) | (lo.wrapping_add(r % size) & u64::MAX as u128),
            _ => r,
        };
        let mut k = packet;
        if k.present >> field.index() & 1 != 0 {
            k.set(field, v & field.max());
        }
        prop_assert!(CutTree::cut_agrees(field, bits, top, anchor, &k));
    }

    #[test]
    fn cut_tree_updates_agree_with_the_oracle(
        rules in proptest::collection::vec(any_field_rule(), 1..100),
        rounds in proptest::collection::vec(
            proptest::collection::vec((0usize..100, any_field_rule(), 0u8..3), 1..12), 1..4),
        packets in proptest::collection::vec(any_field_packet(), 1..60),
    ) {
        let mut rules = numbered(rules);
        let mut tree = CutTree::with_first_tier(rules.clone(), 11);
        let mut layered = Layered::with_first(rules.clone(), 7);
        let mut cache = FlowCache::new(16);
        for round in rounds {
            let mut updates = Vec::new();
            for (at, mut r, keep) in round {
                let p = at % rules.len();
                // Besides unrelated replacements, new versions that keep most of the old
                // one (so both versions reach some of the same leaves): only the addresses,
                // or only the VA range and opcodes, taken from the drawn rule.
                match keep {
                    1 => r = Rule { sip: r.sip, dip: r.dip, ..rules[p] },
                    2 => {
                        r = Rule {
                            va_lo: r.va_lo,
                            va_hi: r.va_hi,
                            opcode_mask: r.opcode_mask,
                            ..rules[p]
                        }
                    }
                    _ => {}
                }
                r.priority = p as u32;
                r.policy = p as u32;
                rules[p] = r;
                updates.push(r);
            }
            let before = tree.generation();
            tree.replace_rules(&updates);
            prop_assert_ne!(tree.generation(), before);
            let before = layered.generation();
            layered.replace_rules(&updates);
            prop_assert_ne!(layered.generation(), before);
            let oracle = LinearScan::new(&rules);
            for k in &packets {
                let want = oracle.classify(k);
                prop_assert_eq!(tree.classify(k), want, "packet {:?}", k);
                prop_assert_eq!(layered.classify(k), want, "packet {:?}", k);
                prop_assert_eq!(cache.classify(&tree, k), want);
            }
            check_batches(&[&tree], &oracle, &packets)?;
            let mut got = vec![None; packets.len()];
            cache.classify_batch(&tree, &packets, &mut got);
            for (k, g) in packets.iter().zip(&got) {
                prop_assert_eq!(*g, oracle.classify(k), "cached batch, packet {:?}", k);
            }
        }
    }
}

#[test]
fn cut_tree_agrees_on_synthetic_rules_and_updates() {
    // More than one tier's worth (1,024 + a quarter), so the second tier is exercised.
    let mut rules = synth::rules(2000, 11);
    let mut tree = CutTree::new(rules.clone());
    let s = tree.stats();
    assert!(s.nodes > 0 && s.groups > 1, "{s:?}");
    // Its first tier's tree is read through a flat two-level table, which the updates and
    // batches below go through too.
    assert!(tree.flat_tables() > 0);
    let packets = synth::traffic(&rules, 2000, Mix::Uniform, 3);
    let oracle = LinearScan::new(&rules);
    for k in &packets {
        assert_eq!(tree.classify(k), oracle.classify(k));
    }
    let mut rng = synth::Rng::new(8);
    let updates: Vec<Rule> = synth::rules(100, 12)
        .into_iter()
        .map(|mut r| {
            let p = rng.below(rules.len() as u64) as u32;
            (r.priority, r.policy) = (p, p);
            r
        })
        .collect();
    for u in &updates {
        rules[u.priority as usize] = *u;
    }
    tree.replace_rules(&updates);
    let oracle = LinearScan::new(&rules);
    let packets = synth::traffic(&rules, 2000, Mix::Uniform, 4);
    for k in &packets {
        assert_eq!(tree.classify(k), oracle.classify(k));
    }
    let mut got = vec![None; packets.len()];
    tree.classify_batch(&packets, &mut got);
    for (k, g) in packets.iter().zip(&got) {
        assert_eq!(*g, oracle.classify(k), "batched, packet {k:?}");
    }
}

/// Every cut tree's batched lookups (whole, and in odd-sized pieces so that partial lane
/// groups are exercised) against the oracle.
fn check_batches(
    trees: &[&CutTree],
    oracle: &LinearScan<'_>,
    packets: &[PacketKey],
) -> Result<(), TestCaseError> {
    for tree in trees {
        let mut got = vec![None; packets.len()];
        tree.classify_batch(packets, &mut got);
        for piece in [3, 11] {
            let mut pieces = vec![None; packets.len()];
            for (k, o) in packets.chunks(piece).zip(pieces.chunks_mut(piece)) {
                tree.classify_batch(k, o);
            }
            prop_assert_eq!(&pieces, &got);
        }
        for (k, g) in packets.iter().zip(&got) {
            prop_assert_eq!(*g, oracle.classify(k), "batched, packet {:?}", k);
        }
    }
    Ok(())
}

#[test]
fn cut_tree_batches_agree_on_a_large_second_tier() {
    // A second tier above FIRST_TIER rules takes the interleaved walk; specific rules send
    // most packets into it.
    let rules = synth::specific_rules(3000, 5);
    let tree = CutTree::new(rules.clone());
    assert_eq!(tree.stats().tiers, 2);
    let oracle = LinearScan::new(&rules);
    for mix in [
        Mix::Uniform,
        Mix::Skewed {
            hot_pct: 80,
            flows: 16,
        },
    ] {
        let packets = synth::traffic(&rules, 1500, mix, 6);
        let deep = packets
            .iter()
            .filter(|k| oracle.classify(k).is_none_or(|p| p >= 1024))
            .count();
        assert!(
            deep > packets.len() / 2,
            "only {deep} packets reach the second tier"
        );
        check_batches(&[&tree], &oracle, &packets).unwrap();
    }
}

/// Updates back and forth (a rule set's 100 rules replaced by others, then put back, and
/// again): removals leave tombstones and insertions take them, so once both versions have
/// been in place every update writes single entries in place — no leaf moves or shifts —
/// and lookups stay exact throughout, in the leaves holding tombstones too.
#[test]
fn back_and_forth_updates_reuse_tombstones_and_stay_exact() {
    let a = synth::rules(3000, 21);
    let other = synth::rules(100, 22);
    let mut rng = synth::Rng::new(23);
    let mut to_b = Vec::new();
    let mut to_a = Vec::new();
    for mut r in other {
        let p = rng.below(a.len() as u64) as u32;
        if to_b.iter().any(|u: &Rule| u.priority == p) {
            continue;
        }
        (r.priority, r.policy) = (p, a[p as usize].policy);
        to_b.push(r);
        to_a.push(a[p as usize]);
    }
    let mut b = a.clone();
    for u in &to_b {
        b[u.priority as usize] = *u;
    }
    let mut packets = synth::traffic(&a, 1500, Mix::Uniform, 24);
    packets.extend(synth::traffic(&b, 1500, Mix::Uniform, 25));
    let mut tree = CutTree::new(a.clone());
    let entries = tree.stats().entries;
    for round in 0..6 {
        let (updates, now) = if round % 2 == 0 {
            (&to_b, &b)
        } else {
            (&to_a, &a)
        };
        tree.replace_rules(updates);
        let oracle = LinearScan::new(now);
        for k in &packets {
            assert_eq!(
                tree.classify(k),
                oracle.classify(k),
                "round {round}, packet {k:?}"
            );
        }
        let mut got = vec![None; packets.len()];
        tree.classify_batch(&packets, &mut got);
        for (k, g) in packets.iter().zip(&got) {
            assert_eq!(
                *g,
                oracle.classify(k),
                "round {round}, batched, packet {k:?}"
            );
        }
        let mut written = 0;
        for t in 0..tree.tier_count() {
            let touched = tree.tier_view(t).touched();
            written += touched.entries.len();
            if round >= 2 {
                assert!(touched.leaves.is_empty(), "round {round}: {touched:?}");
                assert!(touched.refs.is_empty(), "round {round}: {touched:?}");
                assert!(
                    touched.entries.iter().all(|r| r.len() == 1),
                    "round {round}: {touched:?}"
                );
            }
        }
        assert!(written > 0, "round {round} wrote nothing");
    }
    // Leaves kept their tombstones rather than shrinking; what grew is what the other
    // versions brought.
    assert!(tree.stats().entries >= entries);
}
