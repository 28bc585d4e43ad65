//! The CodeFlow's JIT tier against real host processes: a baseline CodeFlow deploys code that
//! answers like the optimizing tier's, the node's records say which tier built each version
//! (read by a control plane that attached later), the compile cache keeps the tiers apart, and
//! an elite build on a baseline CodeFlow is refused with the typed error.

mod common;

use common::{extension, state_dir, Host};
use rdx_control::registry::Registry;
use rdx_control::{create_codeflow, AttachOptions, ControlError, Tier};
use rdx_jit::{branch_sites, Expect, Speculation};

const VALUES: [u64; 8] = [5, 0, 999, 1000, 7, 123_456, 1, 5];

#[test]
fn a_baseline_codeflow_deploys_records_and_caches_its_tier() {
    let mut opt = Host::start("tier-opt", &[]);
    let mut base = Host::start("tier-base", &[]);
    let reg = Registry::open(&state_dir("tier")).unwrap();
    let mut cf_opt = create_codeflow(&opt.address(), AttachOptions::default()).unwrap();
    assert_eq!(cf_opt.tier(), Tier::Optimizing, "the default");
    let mut cf_base = create_codeflow(
        &base.address(),
        AttachOptions {
            tier: Tier::Baseline,
            ..AttachOptions::default()
        },
    )
    .unwrap();

    for name in ["plus_one", "times_two"] {
        let ext = extension(name);
        let o = cf_opt.deploy("on_request", &ext, None, Some(&reg)).unwrap();
        let b = cf_base
            .deploy("on_request", &ext, None, Some(&reg))
            .unwrap();
        assert_eq!((o.tier, b.tier), (Tier::Optimizing, Tier::Baseline));
        let answers_opt: Vec<(u64, u64)> = VALUES.iter().map(|&v| opt.request(v)).collect();
        let answers_base: Vec<(u64, u64)> = VALUES.iter().map(|&v| base.request(v)).collect();
        assert_eq!(answers_base, answers_opt, "{name}");
        let want = |v: u64| {
            if name == "plus_one" {
                (1, v + 1)
            } else {
                (2, v * 2)
            }
        };
        assert_eq!(answers_base, VALUES.map(want), "{name}");
    }

    // The cache: the same bytecode under both tiers, two artifacts, each found again.
    let ext = extension("plus_one");
    let checked = cf_base.validate_code(&ext, "on_request", None).unwrap();
    let b = cf_base
        .jit_compile_code(&ext, &checked, Some(&reg))
        .unwrap();
    let o = cf_opt.jit_compile_code(&ext, &checked, Some(&reg)).unwrap();
    assert!(b.cached() && o.cached());
    assert_eq!((b.tier(), o.tier()), (Tier::Baseline, Tier::Optimizing));
    assert_ne!(b.artifact_hash(), o.artifact_hash());
    assert_ne!(
        cf_base.cache_key(&ext, &checked),
        cf_opt.cache_key(&ext, &checked)
    );

    // An optimizing version on the baseline node; the records say which is which, also to
    // a control plane that attaches afterwards with the default tier.
    cf_base.set_tier(Tier::Optimizing);
    let v3 = cf_base
        .deploy("on_request", &ext, None, Some(&reg))
        .unwrap();
    assert_eq!((v3.version, v3.tier), (3, Tier::Optimizing));
    drop(cf_base);
    let mut later = create_codeflow(&base.address(), AttachOptions::default()).unwrap();
    let tiers: Vec<(u32, bool, Tier)> = later
        .versions("on_request")
        .unwrap()
        .iter()
        .map(|v| (v.version, v.active, v.tier))
        .collect();
    assert_eq!(
        tiers,
        [
            (3, true, Tier::Optimizing),
            (2, false, Tier::Baseline),
            (1, false, Tier::Baseline)
        ]
    );
    let back = later.rollback("on_request", None).unwrap();
    assert_eq!((back.version, back.tier), (2, Tier::Baseline));
    assert_eq!(base.request(4), (2, 8));

    // Elite code is the optimizing tier's: a baseline CodeFlow refuses it, typed, and the
    // node keeps what it runs.
    later.set_tier(Tier::Baseline);
    let checked = later.validate_code(&ext, "on_request", None).unwrap();
    let speculation = Speculation {
        guards: branch_sites(ext.insns())
            .into_iter()
            .map(|pc| (pc, Expect::NotTaken))
            .collect(),
    };
    let err = later
        .jit_compile_elite(&ext, &checked, speculation.clone())
        .unwrap_err();
    assert!(
        matches!(&err, ControlError::NotInBaseline { what } if what.contains("elite")),
        "{err:?}"
    );
    assert!(err.to_string().contains("optimizing tier"), "{err}");
    later.set_tier(Tier::Optimizing);
    let (elite, _) = later
        .jit_compile_elite(&ext, &checked, speculation)
        .unwrap();
    assert!(elite.artifact().meta.deoptimises());
    assert_eq!(elite.tier(), Tier::Optimizing);
    assert_eq!(base.request(4), (2, 8));
    let _ = std::fs::remove_dir_all(reg.dir());
}
