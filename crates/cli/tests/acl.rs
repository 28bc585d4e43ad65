//! `rdx acl` end to end: the real binary on the policies and traces of tools/acl-traffic.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn rdx(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdx"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_compile_and_test() {
    let policy = repo("tools/acl-traffic/policies/server.acl");
    let policy = policy.to_str().unwrap();
    let (ok, out, err) = rdx(&["acl", "check", policy]);
    assert!(ok, "{err}");
    assert!(out.contains("ok: 11 policies"), "{out}");

    let image = std::env::temp_dir().join(format!("rdx-acl-cli-{}.bin", std::process::id()));
    let (ok, out, err) = rdx(&["acl", "compile", policy, "-o", image.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("from cm_forged"), "{out}");
    let bytes = std::fs::read(&image).unwrap();
    assert_eq!(&bytes[..6], b"RDXACL");
    std::fs::remove_file(&image).unwrap();

    let trace = repo("crates/acl/tests/data/attacks.pcap");
    let (ok, out, err) = rdx(&["acl", "test", policy, trace.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("deny   policy cm_connect_others"), "{out}");
    assert!(out.contains("malformed.unknown_opcode"), "{out}");
}

#[test]
fn errors_point_at_the_line() {
    let dir = std::env::temp_dir().join(format!("rdx-acl-cli-err-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.acl");
    std::fs::write(
        &bad,
        "policy a {\n  predicate = match(sport = 99999)\n  action = deny\n}\n",
    )
    .unwrap();
    let (ok, _, err) = rdx(&["acl", "check", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("bad.acl:2:29: invalid value `99999` for sport"),
        "{err}"
    );
    assert!(err.contains("^"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The JANUS paper's notation through the CLI: a file of paper-style policies checks clean,
/// and a prefix with host bits set or an `apply` of a misspelt policy is refused with the
/// fix it probably needs, under a caret at the offending token.
#[test]
fn paper_notation_checks_and_errors_suggest_a_fix() {
    let paper = repo("crates/acl/tests/data/paper-style.acl");
    let (ok, out, err) = rdx(&["acl", "check", paper.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("ok: 7 policies"), "{out}");

    let dir = std::env::temp_dir().join(format!("rdx-acl-cli-paper-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text, want) in [
        (
            "host-bits.acl",
            "policy a {\n  predicate = match(sip in 10.0.4.1/24) & match(dQPN = any)\n  action = deny\n}\napply(a)\n",
            "host-bits.acl:2:28: `10.0.4.1/24` has host bits set below its /24 prefix for sip; did you mean `10.0.4.0/24`?",
        ),
        (
            "apply.acl",
            "policy deny_atomics {\n  predicate = match(opcode in {CAS, FAA}) & match(VA in [0, inf])\n  action = deny\n}\napply(deny_atomic)\n",
            "apply.acl:5:7: apply(...) names `deny_atomic`, which is not defined; did you mean `deny_atomics`?",
        ),
    ] {
        let file = dir.join(name);
        std::fs::write(&file, text).unwrap();
        let (ok, _, err) = rdx(&["acl", "check", file.to_str().unwrap()]);
        assert!(!ok, "{name}");
        assert!(err.contains(want), "{err}");
        assert!(err.contains("^"), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `rdx acl apply` against a live host that declares the ACL packet hook (this test process,
/// through the runtime library): the policy takes effect, a second apply replaces it, and a
/// program the policy does not fit is refused while the node keeps its version.
#[cfg(target_arch = "x86_64")]
#[test]
fn apply_deploys_the_policy_into_a_running_hook() {
    use rdx_acl::enforce::{self, AclContext};
    use rdx_acl::packet::LinkType;
    use rdx_acl::policy::Action;
    use rdx_runtime::{HookSpec, Runtime};

    let region = format!("/dev/shm/rdx-acl-cli-apply-{}", std::process::id());
    let rt = Runtime::builder()
        .path(&region)
        .eim_spec(enforce::EIM_SPEC.as_bytes().to_vec())
        .code_size(8 << 20)
        .scratch_size(512 << 20)
        .hook(
            enforce::HOOK,
            HookSpec::for_context::<AclContext>().default_return(1),
        )
        .build()
        .unwrap();
    rt.register().unwrap();
    let state = std::env::temp_dir().join(format!("rdx-acl-cli-state-{}", std::process::id()));
    let node = format!("shm:{region}");
    let policy = repo("tools/acl-traffic/policies/server.acl");
    let (ok, out, err) = rdx(&[
        "acl",
        "apply",
        policy.to_str().unwrap(),
        "--node",
        &node,
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("version 1 (was 0)"), "{out}");

    let trace = rdx_acl::pcap::read(&repo("crates/acl/tests/data/attacks.pcap")).unwrap();
    let report = rdx_acl::api::test(&policy, &repo("crates/acl/tests/data/attacks.pcap")).unwrap();
    let hook = rt.hook(enforce::HOOK).unwrap();
    for (i, (frame, want)) in trace.packets.iter().zip(&report.verdicts).enumerate() {
        let mut ctx = AclContext::for_frame(trace.link, frame);
        let ret = hook.run(&mut ctx);
        assert_eq!(ctx.outcome(ret).action, want.action, "frame {i}");
    }
    // The program's counters, read by `rdx acl stats`, agree with the native engine's.
    let (ok, out, err) = rdx(&[
        "acl",
        "stats",
        "--node",
        &node,
        "--json",
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let c = &report.counters;
    assert_eq!(v["packets"], trace.packets.len() as u64, "{out}");
    assert_eq!(v["budget_exhausted"], 0, "{out}");
    assert_eq!(v["allowed"], c.allowed, "{out}");
    assert_eq!(v["denied"], c.denied, "{out}");
    for (r, n) in rdx_acl::packet::MalformedReason::ALL
        .iter()
        .zip(c.malformed)
    {
        assert_eq!(v["malformed"][r.name()], n, "{out}");
    }
    assert!(c.malformed.iter().sum::<u64>() > 0);

    // A policy that denies everything replaces it.
    let deny_all = std::env::temp_dir().join(format!("rdx-acl-deny-{}.acl", std::process::id()));
    std::fs::write(&deny_all, "default deny\n").unwrap();
    let (ok, out, err) = rdx(&[
        "acl",
        "apply",
        deny_all.to_str().unwrap(),
        "--node",
        &node,
        "--generation",
        "77",
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("version 2 (was 1)"), "{out}");
    let benign = &trace.packets[0];
    let mut ctx = AclContext::for_frame(LinkType::Ethernet, benign);
    let ret = hook.run(&mut ctx);
    assert_eq!(ctx.outcome(ret).action, Action::Deny);
    assert_eq!(ctx.generation, 77);

    // Not the enforcement program: refused, version 2 stays.
    let other = rdx_testdata::object_path("control/plus_one");
    let (ok, _, err) = rdx(&[
        "acl",
        "apply",
        deny_all.to_str().unwrap(),
        "--node",
        &node,
        "--object",
        other.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("not the ACL enforcement program"), "{err}");
    let mut ctx = AclContext::for_frame(LinkType::Ethernet, benign);
    hook.run(&mut ctx);
    assert_eq!(ctx.generation, 77);

    // A policy whose worst frame would spend the instruction budget: 2,500 rules that
    // differ only in opcode and CM type share one leaf, and a CM frame checks each in full.
    // `compile` warns, `apply` refuses saying why, and the node keeps its version.
    let mut cubes = Vec::new();
    for op in 0..=255u32 {
        for t in [
            "REQ", "REP", "RTU", "REJ", "DREQ", "DREP", "MRA", "LAP", "APR", "SIDR_REQ",
        ] {
            cubes.push(format!("(match(opcode = {op}) & match(type = {t}))"));
        }
    }
    cubes.truncate(2500);
    let wide = std::env::temp_dir().join(format!("rdx-acl-wide-{}.acl", std::process::id()));
    std::fs::write(
        &wide,
        format!(
            "policy wide {{\n predicate = {}\n action = allow\n}}\napply(wide)\ndefault deny\n",
            cubes.join(" |\n ")
        ),
    )
    .unwrap();
    let (ok, out, err) = rdx(&["acl", "compile", wide.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        out.contains("rdx acl apply would refuse this policy"),
        "{out}"
    );
    let (ok, _, err) = rdx(&[
        "acl",
        "apply",
        wide.to_str().unwrap(),
        "--node",
        &node,
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("instructions, more than the acl class's budget")
            && err.contains("leaf of 1476 rules"),
        "{err}"
    );
    let mut ctx = AclContext::for_frame(LinkType::Ethernet, benign);
    hook.run(&mut ctx);
    assert_eq!(ctx.generation, 77);

    let _ = std::fs::remove_file(&wide);
    let _ = std::fs::remove_file(&deny_all);
    let _ = std::fs::remove_dir_all(&state);
    let _ = rt.teardown(std::time::Duration::from_millis(200));
    let _ = rt.unlink();
}

/// Two policies that deny every probe, each by its own rule: under A probe `i` is denied by
/// rule `i`; under B by rule `PAD + PROBES - 1 - i` (B starts with `PAD > PROBES` allow rules for
/// QPNs no probe carries, and lists the deny rules in the opposite order). Both end in
/// `allow any`. A probe decided by a mix of the two (one version's control block walking a
/// bank holding the other's rules, or a half-written bank) is allowed or decided by a rule
/// the reported generation's policy does not give it.
#[cfg(target_arch = "x86_64")]
fn detectable_policy_pair() -> (String, String) {
    const PROBES: u32 = 64;
    const PAD: u32 = PROBES + 1;
    let deny = |i: u32| {
        format!(
            "policy d{i} {{ predicate = match(dQPN = {}) action = deny }}\n",
            0x100 + i
        )
    };
    let tail = "policy pass { predicate = any action = allow }\n";
    let mut a = String::new();
    let mut names = Vec::new();
    for i in 0..PROBES {
        a.push_str(&deny(i));
        names.push(format!("d{i}"));
    }
    a.push_str(tail);
    a.push_str(&format!(
        "apply({}, pass)\ndefault deny\n",
        names.join(", ")
    ));
    let mut b = String::new();
    let mut names = Vec::new();
    for k in 0..PAD {
        b.push_str(&format!(
            "policy pad{k} {{ predicate = match(dQPN = {}) action = allow }}\n",
            0x90_0000 + k
        ));
        names.push(format!("pad{k}"));
    }
    for i in (0..PROBES).rev() {
        b.push_str(&deny(i));
        names.push(format!("d{i}"));
    }
    b.push_str(tail);
    b.push_str(&format!(
        "apply({}, pass)\ndefault deny\n",
        names.join(", ")
    ));
    (a, b)
}

/// `rdx acl apply` swaps two policies under traffic, and is killed (`SIGKILL`) at every step
/// of an apply: before anything is prepared, with the version prepared, with half of the
/// bank written, with all of it written and after publishing. Two threads decide probes all
/// along; every probe must be denied by exactly the rule the reported generation's policy
/// gives it, so a version deciding from a bank it does not own, or from a half-written one,
/// is caught.
#[cfg(target_arch = "x86_64")]
#[test]
fn apply_under_traffic_is_atomic_even_when_killed_at_every_step() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use rdx_acl::enforce::{self, AclContext, Outcome};
    use rdx_acl::engine::Engine;
    use rdx_acl::packet::LinkType;
    use rdx_acl::policy::Action;
    use rdx_runtime::{HookSpec, Runtime};

    let pid = std::process::id();
    let region = format!("/dev/shm/rdx-acl-cli-atomic-{pid}");
    let rt = Arc::new(
        Runtime::builder()
            .path(&region)
            .eim_spec(enforce::EIM_SPEC.as_bytes().to_vec())
            .code_size(8 << 20)
            .scratch_size(512 << 20)
            .hook(
                enforce::HOOK,
                HookSpec::for_context::<AclContext>().default_return(1),
            )
            .build()
            .unwrap(),
    );
    rt.register().unwrap();
    let dir = std::env::temp_dir().join(format!("rdx-acl-cli-atomic-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state");
    let node = format!("shm:{region}");
    let (text_a, text_b) = detectable_policy_pair();
    let (file_a, file_b) = (dir.join("a.acl"), dir.join("b.acl"));
    std::fs::write(&file_a, &text_a).unwrap();
    std::fs::write(&file_b, &text_b).unwrap();
    let (gen_a, gen_b) = (0xa11u64, 0xb22u64);

    let probes: Vec<Vec<u8>> = (0..64u32)
        .map(|i| {
            let ep = rdx_acl::craft::Endpoints {
                sip: "10.0.1.7".parse().unwrap(),
                dip: "10.0.1.105".parse().unwrap(),
                sport: 50000,
            };
            let bth = rdx_acl::craft::Bth {
                opcode: 0x0a, // RDMA_WRITE_ONLY
                dest_qp: 0x100 + i,
                psn: i,
            };
            rdx_acl::craft::roce(&ep, bth, &rdx_acl::craft::reth(0x1000, 1, 8), &[0; 8])
        })
        .collect();
    let oracle = |text: &str| -> Vec<Outcome> {
        let set = rdx_acl::policy::parse(text).unwrap();
        let mut e = Engine::new(rdx_acl::compile::compile(&set).unwrap());
        probes
            .iter()
            .map(|f| Outcome::from(&e.process(LinkType::Ethernet, f)))
            .collect()
    };
    let (want_a, want_b) = (oracle(&text_a), oracle(&text_b));
    for (x, y) in want_a.iter().zip(&want_b) {
        assert_eq!(x.action, Action::Deny);
        assert_eq!(y.action, Action::Deny);
        assert_ne!(
            x, y,
            "the two policies must deny every probe by different rules"
        );
    }

    let apply = |file: &std::path::Path, generation: u64, pause: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rdx"));
        cmd.args([
            "acl",
            "apply",
            file.to_str().unwrap(),
            "--node",
            &node,
            "--generation",
            &generation.to_string(),
            "--state-dir",
            state.to_str().unwrap(),
        ]);
        if let Some(step) = pause {
            cmd.env("RDX_ACL_APPLY_PAUSE_AT", step);
        }
        cmd
    };
    // An apply run to the end; a killed one leaves the node's lease held until it expires
    // (10 s), so the next apply retries until then.
    let apply_to_end = |file: &std::path::Path, generation: u64| {
        let start = Instant::now();
        loop {
            let out = apply(file, generation, None).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            if out.status.success() {
                return;
            }
            assert!(
                err.contains("lease") && start.elapsed() < Duration::from_secs(30),
                "rdx acl apply failed: {err}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    };
    apply_to_end(&file_a, gen_a);

    let stop = Arc::new(AtomicBool::new(false));
    let decided = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..2)
        .map(|t| {
            let (rt, stop, decided) = (rt.clone(), stop.clone(), decided.clone());
            let probes = probes.clone();
            let (want_a, want_b) = (want_a.clone(), want_b.clone());
            std::thread::spawn(move || {
                let hook = rt.hook(enforce::HOOK).unwrap();
                let mut seen = [0u64; 2];
                let mut i = t * 31;
                let mut frame = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let p = i % probes.len();
                    // A new UDP source port (bytes 34..36 of the untagged IPv4 frame) for
                    // every probe: no rule tests it, but it is part of the flow key, so the
                    // hot-flow table misses and every probe walks the bank.
                    frame.clone_from(&probes[p]);
                    frame[34..36].copy_from_slice(&((i as u16) ^ (t as u16) << 15).to_be_bytes());
                    let mut ctx = AclContext::for_frame(LinkType::Ethernet, &frame);
                    let ret = hook.run(&mut ctx);
                    let outcome = ctx.outcome(ret);
                    let want = match ctx.generation {
                        g if g == gen_a => &want_a[p],
                        g if g == gen_b => &want_b[p],
                        g => panic!("probe {p} decided by unknown generation {g:#x}: {outcome:?}"),
                    };
                    assert_eq!(
                        &outcome, want,
                        "probe {p} under generation {:#x} decided by a mix of two policies",
                        ctx.generation
                    );
                    seen[(ctx.generation == gen_b) as usize] += 1;
                    decided.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                seen
            })
        })
        .collect();
    let wait_for = |n: u64| {
        let start = Instant::now();
        let target = decided.load(Ordering::Relaxed) + n;
        while decided.load(Ordering::Relaxed) < target {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the deciding threads stalled (or one failed)"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    wait_for(500);

    // Plain swaps first, then one apply killed at each step, each followed by a plain one.
    let mut next_is_b = true;
    let mut swap = |pause: Option<&str>| {
        let (file, generation) = if next_is_b {
            (&file_b, gen_b)
        } else {
            (&file_a, gen_a)
        };
        match pause {
            None => {
                apply_to_end(file, generation);
                next_is_b = !next_is_b;
            }
            Some(step) => {
                let start = Instant::now();
                let mut child = loop {
                    let mut child = apply(file, generation, Some(step))
                        .stderr(Stdio::piped())
                        .stdout(Stdio::null())
                        .spawn()
                        .unwrap();
                    let mut err = BufReader::new(child.stderr.take().unwrap());
                    let mut seen = String::new();
                    let mut line = String::new();
                    let paused = loop {
                        line.clear();
                        if err.read_line(&mut line).unwrap() == 0 {
                            break false;
                        }
                        seen.push_str(&line);
                        if line.contains(&format!("paused at {step}")) {
                            break true;
                        }
                    };
                    if paused {
                        break child;
                    }
                    let status = child.wait().unwrap();
                    assert!(
                        seen.contains("lease") && start.elapsed() < Duration::from_secs(30),
                        "rdx acl apply ended ({status}) before reaching {step}: {seen}"
                    );
                    std::thread::sleep(Duration::from_millis(250));
                };
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                if step == "published" {
                    next_is_b = !next_is_b;
                }
            }
        }
        wait_for(2000);
    };
    for _ in 0..4 {
        swap(None);
    }
    for step in [
        "verified",
        "prepared",
        "half-written",
        "written",
        "published",
    ] {
        swap(Some(step));
        swap(None);
    }
    stop.store(true, Ordering::Relaxed);
    let seen = workers
        .into_iter()
        .map(|w| w.join().unwrap())
        .fold([0u64; 2], |acc, s| [acc[0] + s[0], acc[1] + s[1]]);
    assert!(
        seen[0] > 0 && seen[1] > 0,
        "both policies must have decided probes: {seen:?}"
    );

    let _ = std::fs::remove_dir_all(&dir);
    let _ = rt.teardown(std::time::Duration::from_millis(200));
    let _ = rt.unlink();
}

/// `rdx acl apply` deploys the enforcement program the binary carries: a copy of `rdx` run
/// where neither the source tree nor the target directory exists (hidden under empty mounts
/// in a mount namespace of its own) still applies a policy, and the hook enforces it.
#[test]
fn apply_runs_from_a_copy_of_the_binary_without_the_build_tree() {
    use rdx_acl::enforce::{self, AclContext};
    use rdx_runtime::{HookSpec, Runtime};
    use rdx_test_support::{ScratchDir, ShmPath};

    let unshare_works = Command::new("unshare")
        .args(["--mount", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !unshare_works {
        eprintln!("SKIPPED: needs root and unshare(1) for a mount namespace");
        return;
    }
    let scratch = ScratchDir::new("acl-shipped");
    let rdx = scratch.join("rdx");
    std::fs::copy(env!("CARGO_BIN_EXE_rdx"), &rdx).unwrap();
    let policy = scratch.join("server.acl");
    std::fs::copy(repo("tools/acl-traffic/policies/server.acl"), &policy).unwrap();
    let region = ShmPath::new("acl-shipped");
    let rt = Runtime::builder()
        .path(region.path())
        .eim_spec(enforce::EIM_SPEC.as_bytes().to_vec())
        .code_size(8 << 20)
        .scratch_size(512 << 20)
        .hook(
            enforce::HOOK,
            HookSpec::for_context::<AclContext>().default_return(1),
        )
        .build()
        .unwrap();
    rt.register().unwrap();

    let source_tree = repo("").canonicalize().unwrap();
    let target_dir = Path::new(env!("CARGO_BIN_EXE_rdx"))
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .canonicalize()
        .unwrap();
    // The target directory first: it may lie inside the source tree.
    let script = format!(
        "mount -t tmpfs none '{}' && mount -t tmpfs none '{}' && \
         test ! -e '{}' && cd / && exec '{}' acl apply '{}' --node '{}' --state-dir '{}'",
        target_dir.display(),
        source_tree.display(),
        env!("CARGO_BIN_EXE_rdx"),
        rdx.display(),
        policy.display(),
        region.address(),
        scratch.join("state").display(),
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("version 1 (was 0)"), "{stdout}");

    // The policy decides: every frame of the attack trace gets the native engine's verdict.
    let trace_path = repo("crates/acl/tests/data/attacks.pcap");
    let trace = rdx_acl::pcap::read(&trace_path).unwrap();
    let report = rdx_acl::api::test(&policy, &trace_path).unwrap();
    let hook = rt.hook(enforce::HOOK).unwrap();
    for (i, (frame, want)) in trace.packets.iter().zip(&report.verdicts).enumerate() {
        let mut ctx = AclContext::for_frame(trace.link, frame);
        let ret = hook.run(&mut ctx);
        assert_eq!(ctx.outcome(ret).action, want.action, "frame {i}");
    }
    rt.teardown(std::time::Duration::from_millis(100)).unwrap();
}
