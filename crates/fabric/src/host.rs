//! The data plane's opt-in to the fabric, driven by the environment so that a host needs no
//! flag of its own: call [`serve_from_env`] right after the runtime registered its region
//! (`Runtime::register`, or `ctx_register` in C) and keep the server for as long as the
//! region should be reachable.
//!
//! | variable | meaning |
//! |---|---|
//! | `RDX_FABRIC_LISTEN` | `IP` or `IP:PORT` to serve on (bootstrap port; 0 or none: a free one). Unset: no fabric. |
//! | `RDX_FABRIC_TOKEN_FILE` | hex token file; created with a fresh random token (mode 0600) if missing. Required. |
//! | `RDX_FABRIC_PROVIDER` | provider name (`sockets`, `tcp;ofi_rxm`, `verbs;ofi_rxm`, ...); default: `FI_PROVIDER`, then the preference order. |
//! | `RDX_FABRIC_PROGRESS` | `auto` (default), `always` or `never`: the progress-only thread. |
//! | `RDX_FABRIC_BARRIER` | `0` to run without the barrier service (reclamation over the fabric is then refused). |

use crate::serve::{serve, FabricServer, ProgressThread, ServeConfig};
use crate::{FabricError, Provider, Token};
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// Names the variable holding `IP` or `IP:PORT` to serve on; unset means no fabric.
pub const ENV_LISTEN: &str = "RDX_FABRIC_LISTEN";
/// Names the variable holding the path of the hex token file (created if missing).
pub const ENV_TOKEN_FILE: &str = "RDX_FABRIC_TOKEN_FILE";
/// Names the variable choosing the libfabric provider.
pub const ENV_PROVIDER: &str = "RDX_FABRIC_PROVIDER";
const ENV_PROGRESS: &str = "RDX_FABRIC_PROGRESS";
const ENV_BARRIER: &str = "RDX_FABRIC_BARRIER";

/// Serves the region file at `region` as the environment says; `Ok(None)` when
/// `RDX_FABRIC_LISTEN` is unset (the host did not opt in).
pub fn serve_from_env(region: impl AsRef<Path>) -> Result<Option<FabricServer>, FabricError> {
    let var = |name: &'static str| match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(FabricError::BadEnvironment {
            var: name,
            reason: "not UTF-8".into(),
        }),
    };
    let Some(listen) = var(ENV_LISTEN)? else {
        return Ok(None);
    };
    let (bind, port) = parse_listen(&listen).map_err(|reason| FabricError::BadEnvironment {
        var: ENV_LISTEN,
        reason,
    })?;
    let token_file = var(ENV_TOKEN_FILE)?.ok_or(FabricError::BadEnvironment {
        var: ENV_TOKEN_FILE,
        reason: format!("required when {ENV_LISTEN} is set"),
    })?;
    let progress = match var(ENV_PROGRESS)?.as_deref() {
        None | Some("auto") => ProgressThread::WhenNeeded,
        Some("always") => ProgressThread::Always,
        Some("never") => ProgressThread::Never,
        Some(other) => {
            return Err(FabricError::BadEnvironment {
                var: ENV_PROGRESS,
                reason: format!("{other:?} is not auto, always or never"),
            })
        }
    };
    let barrier = match var(ENV_BARRIER)?.as_deref() {
        None | Some("1") => true,
        Some("0") => false,
        Some(other) => {
            return Err(FabricError::BadEnvironment {
                var: ENV_BARRIER,
                reason: format!("{other:?} is not 0 or 1"),
            })
        }
    };
    let token = load_or_create_token(Path::new(&token_file))?;
    serve(
        region,
        ServeConfig {
            bind,
            bootstrap_port: port,
            provider: Provider::from_flag(var(ENV_PROVIDER)?.as_deref()),
            token,
            progress,
            barrier,
        },
    )
    .map(Some)
}

/// `IP`, `IP:PORT` or `[IPv6]:PORT`.
fn parse_listen(text: &str) -> Result<(IpAddr, u16), String> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok((ip, 0));
    }
    text.parse::<SocketAddr>()
        .map(|s| (s.ip(), s.port()))
        .map_err(|_| format!("{text:?} is not IP or IP:PORT"))
}

/// Reads the node's token, or creates the file with a fresh one readable only by its owner.
fn load_or_create_token(path: &Path) -> Result<Token, FabricError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => crate::auth::read_token_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = Token::generate()?;
            let io = |source| FabricError::Io {
                what: format!("creating token file {}", path.display()),
                source,
            };
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(io)?;
            f.write_all(format!("{}\n", token.to_hex()).as_bytes())
                .map_err(io)?;
            Ok(token)
        }
        Err(e) => Err(FabricError::Io {
            what: format!("reading token file {}", path.display()),
            source: e,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_forms() {
        assert_eq!(
            parse_listen("10.0.0.2").unwrap(),
            ("10.0.0.2".parse().unwrap(), 0)
        );
        assert_eq!(
            parse_listen("10.0.0.2:7000").unwrap(),
            ("10.0.0.2".parse().unwrap(), 7000)
        );
        assert_eq!(
            parse_listen("[::1]:9").unwrap(),
            ("::1".parse().unwrap(), 9)
        );
        assert!(parse_listen("node-1:7000").unwrap_err().contains("node-1"));
    }

    #[test]
    fn token_file_is_created_private_then_reused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("rdx-fabric-host-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        let _ = std::fs::remove_file(&path);
        let first = load_or_create_token(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "token file mode {mode:o}");
        assert_eq!(load_or_create_token(&path).unwrap(), first);
        std::fs::write(&path, "zz").unwrap();
        assert!(load_or_create_token(&path)
            .unwrap_err()
            .to_string()
            .contains("token"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
