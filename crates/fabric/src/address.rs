//! Node addresses of the `fabric` scheme, as the control plane's registry stores them:
//!
//! ```text
//! fabric://HOST:PORT[?token-file=PATH][&token=HEX][&timeout-ms=N]
//! ```
//!
//! `HOST:PORT` is the node's bootstrap listener (a name or an IP address; IPv6 in
//! brackets). The token comes from `token-file` (a file holding the hex token), `token`
//! (inline hex; convenient, but the registry, `rdx node ls` and shell history then hold the
//! secret), or, with neither, `$RDX_FABRIC_TOKEN_FILE` or `$RDX_FABRIC_TOKEN`.
//! `timeout-ms` bounds every remote operation (default 3000).

use crate::client::{ConnectOptions, FabricTransport};
use crate::{FabricError, Token};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// The scheme prefix of fabric node addresses.
pub const SCHEME: &str = "fabric";

/// Where the token of an address comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `token=HEX` in the address itself (the registry then holds the secret).
    Inline(String),
    /// `token-file=PATH`: a file holding the hex token.
    File(PathBuf),
    /// `$RDX_FABRIC_TOKEN_FILE`, else `$RDX_FABRIC_TOKEN`.
    Environment,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Inline(_) => write!(f, "Inline(<redacted>)"),
            Self::File(p) => write!(f, "File({})", p.display()),
            Self::Environment => write!(f, "Environment"),
        }
    }
}

/// A parsed `fabric://` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricAddress {
    /// `HOST:PORT` as written.
    pub bootstrap: String,
    /// Where the token presented to the node's bootstrap listener comes from.
    pub token: TokenSource,
    /// `timeout-ms`: the bound on every remote operation; `None` keeps the connect default.
    pub op_timeout: Option<Duration>,
}

impl FabricAddress {
    /// Parses `fabric://HOST:PORT[?k=v&...]`; errors name the part that is wrong.
    pub fn parse(address: &str) -> Result<Self, FabricError> {
        let bad = |reason: String| FabricError::BadAddress {
            address: redact(address),
            reason,
        };
        let rest = address
            .strip_prefix("fabric://")
            .ok_or_else(|| bad("does not start with fabric://".into()))?;
        let (bootstrap, query) = rest.split_once('?').unwrap_or((rest, ""));
        let port = bootstrap
            .rsplit_once(':')
            .filter(|(host, _)| !host.is_empty() && !host.ends_with(':'))
            .ok_or_else(|| bad(format!("{bootstrap:?} is not HOST:PORT")))?
            .1;
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(bad(format!("port {port:?} is not a number in 1..=65535")));
        }
        let mut parsed = Self {
            bootstrap: bootstrap.to_string(),
            token: TokenSource::Environment,
            op_timeout: None,
        };
        let mut token_given = false;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| bad(format!("query part {pair:?} is not KEY=VALUE")))?;
            match key {
                "token" | "token-file" if token_given => {
                    return Err(bad("more than one token or token-file".into()))
                }
                "token" => {
                    Token::from_hex(value).map_err(|e| bad(e.to_string()))?;
                    parsed.token = TokenSource::Inline(value.to_string());
                    token_given = true;
                }
                "token-file" if value.is_empty() => return Err(bad("empty token-file".into())),
                "token-file" => {
                    parsed.token = TokenSource::File(PathBuf::from(value));
                    token_given = true;
                }
                "timeout-ms" => {
                    let ms: u64 = value
                        .parse()
                        .ok()
                        .filter(|ms| (1..=3_600_000).contains(ms))
                        .ok_or_else(|| {
                            bad(format!("timeout-ms {value:?} is not in 1..=3600000"))
                        })?;
                    parsed.op_timeout = Some(Duration::from_millis(ms));
                }
                other => {
                    return Err(bad(format!(
                        "unknown parameter {other:?} (known: token, token-file, timeout-ms)"
                    )))
                }
            }
        }
        Ok(parsed)
    }

    /// The bootstrap listener's socket address (resolving a host name).
    pub fn resolve(&self) -> Result<SocketAddr, FabricError> {
        self.bootstrap
            .to_socket_addrs()
            .map_err(|e| FabricError::Io {
                what: format!("resolving {}", self.bootstrap),
                source: e,
            })?
            .next()
            .ok_or_else(|| FabricError::BadAddress {
                address: format!("fabric://{}", self.bootstrap),
                reason: "the host name resolves to no address".into(),
            })
    }

    /// The node's token, from wherever the address says.
    pub fn token(&self) -> Result<Token, FabricError> {
        let from_file = |path: &PathBuf| crate::auth::read_token_file(path);
        match &self.token {
            TokenSource::Inline(hex) => Token::from_hex(hex),
            TokenSource::File(path) => from_file(path),
            TokenSource::Environment => {
                if let Some(path) = std::env::var_os("RDX_FABRIC_TOKEN_FILE") {
                    from_file(&PathBuf::from(path))
                } else if let Ok(hex) = std::env::var("RDX_FABRIC_TOKEN") {
                    Token::from_hex(&hex)
                } else {
                    Err(FabricError::BadToken(format!(
                        "fabric://{} names no token: add ?token-file=PATH or set RDX_FABRIC_TOKEN_FILE",
                        self.bootstrap
                    )))
                }
            }
        }
    }

    /// Connect options: the defaults with this address's timeout.
    pub fn options(&self) -> ConnectOptions {
        let mut o = ConnectOptions::default();
        if let Some(t) = self.op_timeout {
            o.op_timeout = t;
        }
        o
    }

    /// Presents the token and opens the transport.
    pub fn connect(&self) -> Result<FabricTransport, FabricError> {
        let token = self.token()?;
        FabricTransport::connect(self.resolve()?, &token, &self.options())
    }
}

/// `address` with any inline token replaced, for messages and logs.
pub fn redact(address: &str) -> String {
    let Some((head, query)) = address.split_once('?') else {
        return address.to_string();
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some(("token", _)) => "token=<redacted>".to_string(),
            _ => p.to_string(),
        })
        .collect();
    format!("{head}?{}", parts.join("&"))
}

/// Parses `address` and connects (the body of the control plane's `fabric` scheme).
pub fn connect_address(address: &str) -> Result<FabricTransport, FabricError> {
    FabricAddress::parse(address)?.connect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_documented_forms() {
        let a =
            FabricAddress::parse("fabric://10.0.0.2:7000?token-file=/etc/rdx/n1.token").unwrap();
        assert_eq!(a.bootstrap, "10.0.0.2:7000");
        assert_eq!(a.token, TokenSource::File("/etc/rdx/n1.token".into()));
        assert_eq!(a.resolve().unwrap(), "10.0.0.2:7000".parse().unwrap());
        let b = FabricAddress::parse("fabric://[::1]:9?token=0a0b&timeout-ms=250").unwrap();
        assert_eq!(b.token, TokenSource::Inline("0a0b".into()));
        assert_eq!(b.options().op_timeout, Duration::from_millis(250));
        assert_eq!(b.token().unwrap().as_bytes(), &[10, 11]);
        let c = FabricAddress::parse("fabric://localhost:7000").unwrap();
        assert_eq!(c.token, TokenSource::Environment);
        assert!(c.resolve().unwrap().ip().is_loopback());
    }

    #[test]
    fn refuses_bad_addresses_naming_the_part() {
        for (address, part) in [
            ("shm:/dev/shm/x", "fabric://"),
            ("fabric://10.0.0.2", "HOST:PORT"),
            ("fabric://:7000", "HOST:PORT"),
            ("fabric://h:0", "port"),
            ("fabric://h:99999", "port"),
            ("fabric://h:1?token=xyz", "hex"),
            ("fabric://h:1?token=00&token-file=/x", "more than one"),
            ("fabric://h:1?token-file=", "empty token-file"),
            ("fabric://h:1?timeout-ms=0", "timeout-ms"),
            ("fabric://h:1?colour=red", "unknown parameter"),
            ("fabric://h:1?oops", "KEY=VALUE"),
        ] {
            let e = FabricAddress::parse(address).unwrap_err().to_string();
            assert!(e.contains(part), "{address}: {e}");
        }
    }

    #[test]
    fn inline_tokens_never_reach_messages() {
        let e = FabricAddress::parse("fabric://h:1?token=00ff&colour=red")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("00ff"), "{e}");
        assert_eq!(
            redact("fabric://h:1?timeout-ms=5&token=00ff"),
            "fabric://h:1?timeout-ms=5&token=<redacted>"
        );
        assert_eq!(redact("fabric://h:1"), "fabric://h:1");
        let a = FabricAddress::parse("fabric://h:1?token=00ff").unwrap();
        assert!(!format!("{a:?}").contains("00ff"));
    }

    #[test]
    fn token_files_are_read_and_checked() {
        let dir = std::env::temp_dir().join(format!("rdx-fabric-addr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        let token = Token::generate().unwrap();
        std::fs::write(&good, format!("{}\n", token.to_hex())).unwrap();
        let private = |p: &std::path::Path| {
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap()
        };
        private(&good);
        let a =
            FabricAddress::parse(&format!("fabric://h:1?token-file={}", good.display())).unwrap();
        assert_eq!(a.token().unwrap(), token);
        let bad = dir.join("bad");
        std::fs::write(&bad, "not hex").unwrap();
        private(&bad);
        let e = FabricAddress::parse(&format!("fabric://h:1?token-file={}", bad.display()))
            .unwrap()
            .token()
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad") && e.contains("hex"), "{e}");
        let missing = FabricAddress::parse("fabric://h:1?token-file=/nonexistent/rdx-token")
            .unwrap()
            .token()
            .unwrap_err()
            .to_string();
        assert!(missing.contains("/nonexistent/rdx-token"), "{missing}");
        // Readable by others: refused before its bytes are read.
        for loose in [0o640, 0o604, 0o620] {
            std::fs::set_permissions(&good, std::os::unix::fs::PermissionsExt::from_mode(loose))
                .unwrap();
            let e = FabricAddress::parse(&format!("fabric://h:1?token-file={}", good.display()))
                .unwrap()
                .token()
                .unwrap_err()
                .to_string();
            assert!(e.contains("group or others"), "{loose:o}: {e}");
            assert!(!e.contains(&token.to_hex()), "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    proptest! {
        #[test]
        fn arbitrary_addresses_never_panic(s in "fabric://[a-z0-9:.\\[\\]]{0,20}(\\?[a-z=&0-9-]{0,30})?") {
            let _ = FabricAddress::parse(&s);
        }
    }
}
