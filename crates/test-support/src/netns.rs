//! Network namespaces for multi-host tests on one machine: a hub namespace (the control
//! plane's) joined to each spoke (a data plane's) by a veth pair, with addresses that exist
//! only inside the namespaces. Needs root and `ip`.

use std::ffi::OsStr;
use std::process::Command;

/// Whether this process runs as root (namespaces need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `ip ARGS`; the error names the command and what `ip` said.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `ip netns exec NS PROGRAM`: add the program's arguments to it.
pub fn exec_in(ns: &str, program: impl AsRef<OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(program);
    c
}

/// A hub namespace and `spokes` spoke namespaces, deleted on drop (which also deletes their
/// veth pairs). Spoke `i` (1-based) is `10.NET.i.2/24`; its peer in the hub is `10.NET.i.1`,
/// and every spoke routes `10.NET.0.0/16` through its peer, so it answers whichever of the
/// hub's addresses a connection came from.
pub struct NetnsStar {
    names: Vec<String>,
    net: u8,
}

impl NetnsStar {
    /// Creates the namespaces `{prefix}{pid}-cp` and `{prefix}{pid}-n{i}` with addresses in
    /// `10.{net}.0.0/16` (each test that runs at the same time as another needs its own
    /// `net`). `Err` says why it could not (no root, no `ip`, ...): the test then skips.
    pub fn create(prefix: &str, net: u8, spokes: usize) -> Result<NetnsStar, String> {
        if !is_root() {
            return Err("network namespaces need root".into());
        }
        let tag = std::process::id() % 100_000;
        // Dropped (and so deleted) if anything below fails.
        let mut star = NetnsStar {
            names: Vec::new(),
            net,
        };
        for suffix in std::iter::once("cp".to_string()).chain((1..=spokes).map(|i| format!("n{i}")))
        {
            let name = format!("{prefix}{tag}-{suffix}");
            ip(&["netns", "add", &name])?;
            star.names.push(name.clone());
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
        }
        for i in 1..=spokes {
            // Created directly in the namespaces: the names need to be unique only there.
            let (hub_dev, spoke_dev) = (format!("veth{i}"), "veth0".to_string());
            let (hub, spoke) = (star.hub().to_string(), star.spoke(i).to_string());
            ip(&[
                "link", "add", &hub_dev, "netns", &hub, "type", "veth", "peer", "name", &spoke_dev,
                "netns", &spoke,
            ])?;
            let hub_addr = format!("{}/24", star.hub_ip(i));
            let spoke_addr = format!("{}/24", star.spoke_ip(i));
            ip(&["-n", &hub, "addr", "add", &hub_addr, "dev", &hub_dev])?;
            ip(&["-n", &spoke, "addr", "add", &spoke_addr, "dev", &spoke_dev])?;
            ip(&["-n", &hub, "link", "set", &hub_dev, "up"])?;
            ip(&["-n", &spoke, "link", "set", &spoke_dev, "up"])?;
            let net = format!("10.{net}.0.0/16");
            ip(&["-n", &spoke, "route", "add", &net, "via", &star.hub_ip(i)])?;
        }
        Ok(star)
    }

    /// [`NetnsStar::create`], or `None` after printing `SKIPPED: ...` and why (for tests
    /// that need namespaces and pass without them on machines that cannot make them).
    pub fn create_or_skip(prefix: &str, net: u8, spokes: usize) -> Option<NetnsStar> {
        NetnsStar::create(prefix, net, spokes)
            .map_err(|e| eprintln!("SKIPPED: cannot set up network namespaces: {e}"))
            .ok()
    }

    /// The hub's (control plane's) namespace.
    pub fn hub(&self) -> &str {
        &self.names[0]
    }

    /// Spoke `i`'s namespace (1-based).
    pub fn spoke(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Spoke `i`'s address: `10.NET.i.2`.
    pub fn spoke_ip(&self, i: usize) -> String {
        format!("10.{}.{i}.2", self.net)
    }

    /// The hub's address on spoke `i`'s link: `10.NET.i.1`.
    pub fn hub_ip(&self, i: usize) -> String {
        format!("10.{}.{i}.1", self.net)
    }
}

impl Drop for NetnsStar {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spokes_route_to_the_hub_and_nothing_is_left_after_drop() {
        let Some(star) = NetnsStar::create_or_skip("rdxts", 233, 2) else {
            return;
        };
        for i in 1..=2 {
            let route = Command::new("ip")
                .args(["-n", star.spoke(i), "route", "get", &star.hub_ip(i)])
                .output()
                .unwrap();
            let route = String::from_utf8_lossy(&route.stdout);
            assert!(route.contains("dev veth0"), "spoke {i}: {route}");
        }
        let names: Vec<String> = (0..=2).map(|i| star.names[i].clone()).collect();
        drop(star);
        let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
        let list = String::from_utf8_lossy(&list.stdout);
        for n in names {
            assert!(!list.contains(&n), "{n} left behind");
        }
    }
}
