//! Hostile packets through the ACL: the parser and the whole per-packet pipeline (CM state,
//! classification, counters) must never panic. First byte picks the link type.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rdx_acl::compile::{compile, RuleSet};
use rdx_acl::engine::Engine;
use rdx_acl::packet::{parse, LinkType};

const POLICY: &str = "
policy forged { predicate = match(cmForged = true) action = deny }
policy orphan { predicate = match(type in {DREQ, DREP, RTU, REP, REJ}) & !match(lQPN in [0, 0xffffff]) action = deny }
policy cm { predicate = match(type in {REQ, REP, RTU, REJ, DREQ, DREP}) action = allow }
policy mr { predicate = match(VA in [0x1000, 0x1fff]) & !match(sip = 10.0.0.0/8) action = deny }
policy ib { predicate = match(sLID in [1, 100]) | match(sGID = fe80::/64) action = allow }
apply(forged, orphan, cm, mr, ib)
default deny
";

fn rules() -> RuleSet {
    static RULES: OnceLock<RuleSet> = OnceLock::new();
    RULES
        .get_or_init(|| compile(&rdx_acl::policy::parse(POLICY).expect("policy")).expect("rules"))
        .clone()
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let link = if first & 1 == 0 {
        LinkType::Ethernet
    } else {
        LinkType::InfiniBand
    };
    let _ = parse(link, rest);
    // Feed the same bytes twice so CM state created by the first pass is consulted.
    let mut engine = Engine::new(rules()).with_flow_cache(16);
    engine.process(link, rest);
    engine.process(link, rest);
});
