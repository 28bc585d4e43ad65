//! `rdx deploy --tier`: two live hosts (this test process, one region each) get the same
//! programs, one node through the optimizing tier and the other through the baseline tier, as
//! separate `rdx` processes sharing one state directory. Every request gives the same answer
//! on both (and the one the program computes), the maps and ring buffer end equal, and the
//! tier of each version is visible in `rdx deploy --json`, `rdx node show` and `rdx history`.

use rdx_test_support::eim::{self, MAP_AND_RINGBUF_HELPERS};
use rdx_test_support::{LocalHost, Rdx};
use serde_json::Value;

fn object(path: &str) -> String {
    rdx_testdata::object_path(path).display().to_string()
}

/// Requests of the mix: zero, small and large values (request_classify's three classes),
/// repeated values (plus_one's `seen` hash counts them).
const VALUES: [u64; 10] = [5, 0, 999, 1000, 7, 123_456, 0, 1, 4242, 5];

fn deploy(env: &Rdx, object: &str, node: &str, tier: Option<&str>) -> Value {
    let mut args = vec!["deploy", object, "--node", node, "--hook", "on_request"];
    if let Some(t) = tier {
        args.extend(["--tier", t]);
    }
    env.json(&args)
}

/// A map's entries as `(key, value)` strings, in key order.
fn dump(env: &Rdx, node: &str, map: &str) -> Vec<(String, String)> {
    let mut entries: Vec<(String, String)> = env
        .json(&["map", "dump", "--node", node, map])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["key"].to_string(), e["value"].to_string()))
        .collect();
    entries.sort();
    entries
}

#[test]
fn baseline_deploys_answer_like_optimizing_ones_and_show_their_tier() {
    let helpers = eim::on_request(&MAP_AND_RINGBUF_HELPERS);
    let opt = LocalHost::start("cli-tier-opt", &helpers);
    let base = LocalHost::start("cli-tier-base", &helpers);
    let env = Rdx::with_state(env!("CARGO_BIN_EXE_rdx"), "cli-tier-state");
    env.ok(&["node", "add", "opt", &opt.address()]);
    env.ok(&["node", "add", "base", &base.address()]);

    let help = env.ok(&["deploy", "--help"]);
    assert!(
        help.contains("--tier") && help.contains("baseline"),
        "{help}"
    );

    // plus_one: an inline array lookup with an atomic add, a hash map updated in place or
    // inserted, a ring-buffer record. The optimizing deploy goes first, so a baseline
    // deploy of the same bytecode finding it in the compile cache would show here.
    let plus_one = object("control/plus_one");
    let d_opt = deploy(&env, &plus_one, "opt", None);
    let d_base = deploy(&env, &plus_one, "base", Some("baseline"));
    assert_eq!(d_opt["tier"], "optimizing");
    assert_eq!(d_base["tier"], "baseline");
    assert_eq!(d_base["cached"], false, "{d_base}");
    assert_ne!(d_opt["artifact"], d_base["artifact"]);
    let opt_answers: Vec<(u64, u64)> = VALUES.iter().map(|&v| opt.request(v)).collect();
    let base_answers: Vec<(u64, u64)> = VALUES.iter().map(|&v| base.request(v)).collect();
    let expected: Vec<(u64, u64)> = VALUES.iter().map(|&v| (1, v + 1)).collect();
    assert_eq!(opt_answers, expected);
    assert_eq!(base_answers, expected);

    // request_classify: branches on the value, a per-class counter. Its baseline build is
    // not in the cache yet; a second baseline deploy of plus_one (below) is.
    let classify = object("deopt/request_classify");
    assert_eq!(deploy(&env, &classify, "opt", None)["version"], 2);
    let d2 = deploy(&env, &classify, "base", Some("baseline"));
    assert_eq!(
        (d2["version"].as_u64(), d2["tier"].as_str()),
        (Some(2), Some("baseline"))
    );
    let opt_answers: Vec<(u64, u64)> = VALUES.iter().map(|&v| opt.request(v)).collect();
    let base_answers: Vec<(u64, u64)> = VALUES.iter().map(|&v| base.request(v)).collect();
    assert_eq!(base_answers, opt_answers);
    assert_eq!(
        base_answers[..4],
        [(1, 10), (0, 0), (1, 1998), (2, 1000)],
        "request_classify's answers"
    );
    for map in ["hits", "seen", "classes"] {
        let (o, b) = (dump(&env, "opt", map), dump(&env, "base", map));
        assert!(!o.is_empty(), "{map} is empty");
        assert_eq!(b, o, "map {map}");
    }
    // The ring buffer: one JSON record per line, plus_one's values in order.
    let events = |node: &str| -> Vec<Value> {
        env.ok(&[
            "events", "--node", node, "events", "--limit", "100", "--json",
        ])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
    };
    let base_events = events("base");
    assert_eq!(base_events, events("opt"));
    let reported: Vec<u64> = base_events
        .iter()
        .map(|e| e["u64s"][0].as_u64().unwrap())
        .collect();
    assert_eq!(reported, VALUES);

    // node show: the active version's tier per hook and the tier of each held version.
    let show = env.json(&["node", "show", "base"]);
    let hook = &show["hooks"][0];
    assert_eq!(hook["tier"], "baseline");
    let held: Vec<(u64, &str)> = hook["held_versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["version"].as_u64().unwrap(), v["tier"].as_str().unwrap()))
        .collect();
    assert_eq!(held, [(2, "baseline"), (1, "baseline")]);
    assert_eq!(
        env.json(&["node", "show", "opt"])["hooks"][0]["tier"],
        "optimizing"
    );
    let text = env.ok(&["node", "show", "base"]);
    assert!(text.contains("TIER") && text.contains("baseline"), "{text}");

    // An optimizing deploy on the baseline node, then a rollback to the baseline version:
    // the node says which tier runs after each.
    let d3 = deploy(&env, &plus_one, "base", None);
    assert_eq!(
        (d3["version"].as_u64(), d3["cached"].as_bool()),
        (Some(3), Some(true))
    );
    assert_eq!(
        d3["artifact"], d_opt["artifact"],
        "the optimizing build, from the cache"
    );
    assert_eq!(
        env.json(&["node", "show", "base"])["hooks"][0]["tier"],
        "optimizing"
    );
    env.ok(&["rollback", "--node", "base", "--hook", "on_request"]);
    assert_eq!(
        env.json(&["node", "show", "base"])["hooks"][0]["tier"],
        "baseline"
    );
    assert_eq!(
        base.request(3),
        (1, 6),
        "request_classify (baseline) runs again"
    );
    let d4 = deploy(&env, &plus_one, "base", Some("baseline"));
    assert_eq!(
        (d4["cached"].as_bool(), d4["tier"].as_str()),
        (Some(true), Some("baseline"))
    );
    assert_eq!(d4["artifact"], d_base["artifact"]);
    assert_eq!(base.request(3), (1, 4));

    // history: the tier each deploy recorded; the rollback's from the version it republished.
    let history = env.json(&["history", "--node", "base"]);
    let rows: Vec<(&str, u64, &str)> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["version"].as_u64().unwrap(),
                e["tier"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("deploy", 1, "baseline"),
            ("deploy", 2, "baseline"),
            ("deploy", 3, "optimizing"),
            ("rollback", 2, "baseline"),
            ("deploy", 4, "baseline"),
        ]
    );
    let text = env.ok(&["history", "--node", "base"]);
    assert!(text.contains("TIER") && text.contains("baseline"), "{text}");

    assert!(env
        .fails(&[
            "deploy",
            &plus_one,
            "--node",
            "base",
            "--hook",
            "on_request",
            "--tier",
            "fast"
        ])
        .contains("optimizing, baseline"));
}
