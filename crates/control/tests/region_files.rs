//! Region takeover by another local user (`docs/security.md`, "Shared-memory transport"):
//! each attack is run as an unprivileged user ([`Stranger`]) against a host (this test
//! process, root, linking the runtime) and a control plane (the CodeFlow API).

use rdx_control::{create_codeflow, create_codeflow_read_only, AttachOptions, ControlError};
use rdx_runtime::{Runtime, RuntimeError};
use rdx_test_support::{EimSpec, LocalHost, ScratchDir, ShmPath, Stranger};
use rdx_transport::region_file::UntrustedRegion;
use rdx_transport::shm::{ShmOptions, ShmTransport};
use rdx_transport::TransportError;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn eim() -> String {
    EimSpec::value_out(&["on_request"]).yaml()
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
}

fn untrusted_source(e: &RuntimeError) -> &UntrustedRegion {
    match e {
        RuntimeError::UntrustedRegion { source, .. } => source,
        other => panic!("expected a refused region file, got: {other}"),
    }
}

#[test]
fn a_file_another_user_created_at_the_region_path_is_refused_and_left_untouched() {
    let Some(stranger) = Stranger::new("region pre-creation attack") else {
        return;
    };
    let region = ShmPath::new("sec-precreated");
    // The attacker makes the file first, private to itself so that only the owner is wrong.
    stranger.must(&format!(
        "printf attacker-bytes > {p} && chmod 0600 {p}",
        p = region.as_str()
    ));
    let e = LocalHost::builder(&region, &eim()).build().unwrap_err();
    assert_eq!(
        untrusted_source(&e),
        &UntrustedRegion::Owner {
            owner: stranger.uid(),
            euid: 0
        }
    );
    let message = e.to_string();
    assert!(
        message.contains(region.as_str()) && message.contains("owned by uid"),
        "{message}"
    );
    assert_eq!(std::fs::read(&region).unwrap(), b"attacker-bytes");
    assert_eq!(std::fs::metadata(&region).unwrap().uid(), stranger.uid());
}

#[test]
fn a_symbolic_link_at_the_region_path_is_refused_and_its_target_untouched() {
    let Some(stranger) = Stranger::new("region symlink attack") else {
        return;
    };
    let dir = ScratchDir::new("sec-symlink-victim");
    let victim = dir.write("precious", b"the host's own data");
    let region = ShmPath::new("sec-symlink");
    stranger.must(&format!("ln -s {} {}", victim.display(), region.as_str()));
    let e = LocalHost::builder(&region, &eim()).build().unwrap_err();
    assert_eq!(untrusted_source(&e), &UntrustedRegion::Symlink);
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"the host's own data");
    // The control plane does not follow it either.
    let e = ShmTransport::open(region.path()).unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::Untrusted {
                source: UntrustedRegion::Symlink,
                ..
            }
        ),
        "{e}"
    );
}

/// Another user can plant this link only where `fs.protected_hardlinks` is off (it is on in
/// most distributions, and the kernel then refuses `ln` to a file one cannot write); the link
/// is made here by the test itself so that the host's check runs on every machine.
#[test]
fn a_hard_link_to_another_hosts_region_at_the_path_is_refused_and_that_region_untouched() {
    let victim = LocalHost::start("sec-hardlink-victim", &eim());
    let before = std::fs::read(victim.path()).unwrap();
    let region = ShmPath::new("sec-hardlink");
    std::fs::hard_link(victim.path(), &region).unwrap();
    let e = LocalHost::builder(&region, &eim()).build().unwrap_err();
    assert_eq!(
        untrusted_source(&e),
        &UntrustedRegion::HardLinked { links: 2 }
    );
    assert_eq!(std::fs::read(victim.path()).unwrap(), before);
    assert_eq!(victim.request(5), (0, 0), "the victim still serves");
}

#[test]
fn default_region_names_cannot_be_taken_in_advance() {
    let Some(stranger) = Stranger::new("default region name capture") else {
        return;
    };
    // Every name the runtime used to pick for this process (`rdx-<pid>-<n>`), pre-created.
    let planted: Vec<String> = (0..64)
        .map(|n| format!("/dev/shm/rdx-{}-{n}", std::process::id()))
        .collect();
    stranger.must(&format!("touch {}", planted.join(" ")));
    let built = Runtime::builder().eim_spec(eim()).build();
    for p in &planted {
        let _ = std::fs::remove_file(p);
    }
    let rt = built.expect("a fresh, unpredictable name");
    let path = rt.path().to_path_buf();
    assert!(!planted.iter().any(|p| Path::new(p) == path), "{path:?}");
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert_eq!(meta.uid(), 0);
    assert_eq!(mode(&path), 0o600);
    drop(rt);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_host_refuses_its_own_leftover_if_others_can_write_it_and_reuses_it_otherwise() {
    let region = ShmPath::new("sec-leftover");
    std::fs::write(&region, b"").unwrap();
    chmod(region.path(), 0o666);
    let e = LocalHost::builder(&region, &eim()).build().unwrap_err();
    assert_eq!(
        untrusted_source(&e),
        &UntrustedRegion::Writable { mode: 0o666 }
    );
    chmod(region.path(), 0o600);
    let first = LocalHost::builder(&region, &eim()).build().unwrap();
    drop(first);
    // A restarted host reuses its own region file.
    let again = LocalHost::builder(&region, &eim()).build().unwrap();
    assert_eq!(again.path(), region.path());
}

#[test]
fn the_control_plane_refuses_regions_of_other_users_and_writable_by_others() {
    let Some(stranger) = Stranger::new("control plane owner check") else {
        return;
    };
    let host = LocalHost::start("sec-cp-owner", &eim());
    assert_eq!(mode(host.path()), 0o600);
    create_codeflow(&host.address(), AttachOptions::default()).expect("our own region");

    chown(host.path(), stranger.uid());
    let e = create_codeflow(&host.address(), AttachOptions::default()).unwrap_err();
    assert!(
        matches!(
            &e,
            ControlError::Transport(TransportError::Untrusted {
                source: UntrustedRegion::Owner { owner, .. },
                ..
            }) if *owner == stranger.uid()
        ),
        "{e}"
    );
    assert!(
        create_codeflow_read_only(&host.address(), AttachOptions::default()).is_err(),
        "read-only attaches check the owner too"
    );
    // A control plane told to trust that user accepts it: in the library, and in the
    // address the operator registers.
    ShmTransport::open_with(
        host.path(),
        &ShmOptions::default().trust_owner(stranger.uid()),
    )
    .expect("an explicitly trusted owner");
    create_codeflow(
        &format!("{}?owner={}", host.address(), stranger.uid()),
        AttachOptions::default(),
    )
    .expect("an owner the address trusts");

    chown(host.path(), 0);
    for writable in [0o620, 0o602, 0o666] {
        chmod(host.path(), writable);
        let e = create_codeflow(&host.address(), AttachOptions::default()).unwrap_err();
        assert!(
            matches!(
                &e,
                ControlError::Transport(TransportError::Untrusted {
                    source: UntrustedRegion::Writable { mode },
                    ..
                }) if *mode == writable
            ),
            "{writable:o}: {e}"
        );
    }
    chmod(host.path(), 0o600);
    create_codeflow(&host.address(), AttachOptions::default()).expect("private again");
}

#[test]
fn a_read_only_attach_cannot_change_the_node() {
    let host = LocalHost::start("sec-read-only", &eim());
    let before = std::fs::read(host.path()).unwrap();
    let mut cf = create_codeflow_read_only(&host.address(), AttachOptions::default()).unwrap();
    assert_eq!(cf.view().hooks().len(), 1);
    let e = cf.versions("on_request").unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
    // Only the lease word could have changed; the attempt was refused before any write.
    assert_eq!(std::fs::read(host.path()).unwrap(), before);
}
