//! The data plane's side: register the region with a provider and hand its address and
//! key to control planes that present the node's token.
//!
//! Nothing here reads a request for the region: remote reads, writes and atomics are served
//! by the provider. The bootstrap listener only answers "here is my token" with the endpoint
//! address and keys; the barrier service only compares two counters of its own doorbell and
//! makes every thread on the machine pass a memory barrier (`membarrier`), the one thing a
//! one-sided operation cannot do (see docs/fabric.md, "Remote barrier").

use crate::auth::{self, Doorbell, Grant, Token};
use crate::provider::Provider;
use crate::sys::{Completion, Endpoint, Registration};
use crate::FabricError;
use rdx_transport::shm::ShmTransport;
use rdx_transport::Transport;
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// When to run a thread that drives the provider's progress on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressThread {
    /// Only when the provider reports manual data progress (e.g. `tcp;ofi_rxm`).
    #[default]
    WhenNeeded,
    /// Always, so remote operations progress whatever the provider reports.
    Always,
    /// Never: remote operations on manual-progress providers then stall while the host is
    /// idle (useful to measure which providers are truly one-sided).
    Never,
}

/// How a node serves its region.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The address the fabric endpoint and the bootstrap listener bind to.
    pub bind: IpAddr,
    /// Bootstrap TCP port; 0 picks a free one.
    pub bootstrap_port: u16,
    /// Which libfabric provider to open.
    pub provider: Provider,
    /// The secret control planes must present to get the region's address and keys.
    pub token: Token,
    /// When to run a thread that only drives libfabric progress.
    pub progress: ProgressThread,
    /// Run the barrier service, without which control planes cannot reclaim old code or
    /// maps over the fabric (their `remote_barrier` is refused).
    pub barrier: bool,
}

impl ServeConfig {
    /// Binds to `bind`, a free bootstrap port, the preferred provider, a progress thread
    /// only when the provider needs one, and the barrier service.
    pub fn new(bind: IpAddr, token: Token) -> Self {
        Self {
            bind,
            bootstrap_port: 0,
            provider: Provider::Auto,
            token,
            progress: ProgressThread::WhenNeeded,
            barrier: true,
        }
    }
}

/// The barrier service's doorbell: its own registration, apart from the region, so that a
/// control plane's ring is not a region write.
#[repr(C, align(64))]
#[derive(Default)]
struct DoorbellWords {
    /// Incremented by control planes (remote fetch-and-add).
    requested: AtomicU64,
    /// The last `requested` value after which every thread passed a barrier.
    completed: AtomicU64,
}

/// How often the barrier service looks at its doorbell: a reclamation waits at most this
/// long plus one `membarrier`, and an idle node wakes this often.
const BARRIER_POLL: Duration = Duration::from_millis(2);

/// Counters of the bootstrap listener.
#[derive(Debug, Default)]
pub struct BootstrapStats {
    /// Bootstrap requests that presented the right token and got the grant.
    pub granted: AtomicU64,
    /// Bootstrap requests that presented a wrong token.
    pub refused: AtomicU64,
    /// Bootstrap requests that did not parse or timed out.
    pub malformed: AtomicU64,
}

/// What the bootstrap listener hands out, and to whom: replaced as a whole by
/// [`FabricServer::rotate`].
struct BootstrapSecret {
    token: Token,
    /// The encoded grant (status byte included).
    reply: Vec<u8>,
}

/// A region being served. Dropping it stops serving: the listener and progress thread end,
/// the registration and endpoint close, the alias mapping goes away.
pub struct FabricServer {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    // Drop order after the threads: registrations, endpoint, doorbell memory, mapping.
    mr: Option<Registration>,
    doorbell_mr: Option<Registration>,
    _endpoint: Arc<Mutex<Endpoint>>,
    _doorbell: Arc<DoorbellWords>,
    _alias: ShmTransport,
    bootstrap: SocketAddr,
    grant: Grant,
    secret: Arc<RwLock<BootstrapSecret>>,
    manual_progress: bool,
    progress_thread: bool,
    stats: Arc<BootstrapStats>,
}

impl std::fmt::Debug for FabricServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FabricServer")
            .field("bootstrap", &self.bootstrap)
            .field("provider", &self.grant.provider)
            .field("progress_thread", &self.progress_thread)
            .finish()
    }
}

/// Registers the region file at `path` (created by the host's runtime) with the fabric and
/// starts answering bootstrap requests.
///
/// The region is registered through a second, read+write mapping of the file (the host's
/// own mapping keeps its code arena read+execute): that alias's address appears nowhere in
/// the region, so extension code has no pointer to it.
pub fn serve(path: impl AsRef<Path>, config: ServeConfig) -> Result<FabricServer, FabricError> {
    let path = path.as_ref();
    let alias = ShmTransport::open(path).map_err(|source| FabricError::Region {
        node: path.display().to_string(),
        source,
    })?;
    let bind = config.bind.to_string();
    let endpoint = config.provider.open(Some(&bind), true)?;
    let fab = |what: &str, message: String| FabricError::Fabric {
        what: format!("{what} ({})", endpoint.provider()),
        message,
    };
    let requested_key = auth::random_u64()?;
    let local = alias.local().ok_or_else(|| FabricError::Region {
        node: path.display().to_string(),
        source: rdx_transport::TransportError::ReadOnly {
            path: path.display().to_string(),
        },
    })?;
    // SAFETY: the alias mapping lives in the server until after the registration is closed
    // (field order and Drop below).
    let mr = unsafe {
        endpoint
            .register(
                local.base(),
                local.region_len() as usize,
                true,
                requested_key,
            )
            .map_err(|m| fab("registering the region", m))?
    };
    let doorbell = Arc::new(DoorbellWords::default());
    let doorbell_mr = if config.barrier {
        // SAFETY: the doorbell's heap allocation is kept by the server (and the barrier
        // thread) until after this registration is closed (Drop below); its words are
        // atomics, so the provider writing them behind our back is defined.
        Some(unsafe {
            endpoint
                .register(
                    Arc::as_ptr(&doorbell).cast_mut().cast(),
                    std::mem::size_of::<DoorbellWords>(),
                    true,
                    auth::random_u64()?,
                )
                .map_err(|m| fab("registering the barrier doorbell", m))?
        })
    } else {
        None
    };
    let address = endpoint
        .name()
        .map_err(|m| fab("reading the endpoint address", m))?;
    let grant = Grant {
        provider: endpoint.provider(),
        address,
        key: mr.key,
        remote_base: if endpoint.props.virt_addr != 0 {
            local.base() as u64
        } else {
            0
        },
        region_len: alias.region_len(),
        session: auth::random_u64()?,
        barrier: doorbell_mr.as_ref().map(|mr| Doorbell {
            key: mr.key,
            remote_addr: if endpoint.props.virt_addr != 0 {
                Arc::as_ptr(&doorbell) as u64
            } else {
                0
            },
        }),
    };
    let manual_progress = endpoint.props.manual_progress != 0;
    let progress_thread = match config.progress {
        ProgressThread::WhenNeeded => manual_progress,
        ProgressThread::Always => true,
        ProgressThread::Never => false,
    };
    let listener =
        TcpListener::bind((config.bind, config.bootstrap_port)).map_err(|e| FabricError::Io {
            what: format!(
                "binding the bootstrap listener on {}:{}",
                config.bind, config.bootstrap_port
            ),
            source: e,
        })?;
    let bootstrap = listener.local_addr().map_err(|e| FabricError::Io {
        what: "reading the bootstrap listener's address".into(),
        source: e,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| FabricError::Io {
            what: "configuring the bootstrap listener".into(),
            source: e,
        })?;
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(BootstrapStats::default());
    let endpoint = Arc::new(Mutex::new(endpoint));
    let secret = Arc::new(RwLock::new(BootstrapSecret {
        token: config.token,
        reply: grant.encode(),
    }));
    let mut threads = Vec::new();
    {
        let (stop, stats, secret) = (stop.clone(), stats.clone(), secret.clone());
        threads.push(
            std::thread::Builder::new()
                .name("rdx-fabric-bootstrap".into())
                .spawn(move || bootstrap_loop(listener, &secret, &stop, &stats))
                .map_err(|e| FabricError::Io {
                    what: "spawning the bootstrap thread".into(),
                    source: e,
                })?,
        );
    }
    if progress_thread {
        let (stop, endpoint) = (stop.clone(), endpoint.clone());
        threads.push(
            std::thread::Builder::new()
                .name("rdx-fabric-progress".into())
                .spawn(move || progress_loop(&endpoint, &stop))
                .map_err(|e| FabricError::Io {
                    what: "spawning the progress thread".into(),
                    source: e,
                })?,
        );
    }
    if doorbell_mr.is_some() {
        let (stop, doorbell) = (stop.clone(), doorbell.clone());
        threads.push(
            std::thread::Builder::new()
                .name("rdx-fabric-barrier".into())
                .spawn(move || barrier_loop(&doorbell, &stop))
                .map_err(|e| FabricError::Io {
                    what: "spawning the barrier thread".into(),
                    source: e,
                })?,
        );
    }
    Ok(FabricServer {
        stop,
        threads,
        mr: Some(mr),
        doorbell_mr,
        _endpoint: endpoint,
        _doorbell: doorbell,
        _alias: alias,
        bootstrap,
        grant,
        secret,
        manual_progress,
        progress_thread,
        stats,
    })
}

impl FabricServer {
    /// Where control planes present the token.
    pub fn bootstrap_addr(&self) -> SocketAddr {
        self.bootstrap
    }
    /// The libfabric provider the node serves with.
    pub fn provider(&self) -> &str {
        &self.grant.provider
    }
    /// Whether the provider needs the node to call into libfabric for data to land.
    pub fn manual_progress(&self) -> bool {
        self.manual_progress
    }
    /// Whether a thread that only drives libfabric progress runs for this node.
    pub fn has_progress_thread(&self) -> bool {
        self.progress_thread
    }
    /// Whether control planes can ask this node for a barrier (reclamation).
    pub fn has_barrier_service(&self) -> bool {
        self.grant.barrier.is_some()
    }
    /// Random per serving start (and per token rotation): a change tells control planes
    /// to reconnect.
    pub fn session(&self) -> u64 {
        self.grant.session
    }
    /// Counters of the bootstrap listener.
    pub fn stats(&self) -> &BootstrapStats {
        &self.stats
    }
    /// The MR key currently handed out (random per start unless the provider picks keys).
    pub fn key(&self) -> u64 {
        self.grant.key
    }

    /// Rotates the node's token and revokes every key handed out so far, without stopping
    /// the host: the region (and the barrier doorbell) are registered anew under fresh
    /// random keys, the bootstrap listener starts answering only `token` with the new keys
    /// and a new session number, and then the old registrations are closed, so a control
    /// plane holding an old key (or the old token) can no longer read or write the region.
    /// Control planes that should keep access bootstrap again with the new token.
    ///
    /// Call it when a token may have leaked; `rdx-test-host` does on its `rotate` command.
    pub fn rotate(&mut self, token: Token) -> Result<(), FabricError> {
        let local = self._alias.local().ok_or_else(|| FabricError::Fabric {
            what: "rotating keys".into(),
            message: "the region alias is not writable".into(),
        })?;
        let endpoint = self._endpoint.lock().unwrap_or_else(|p| p.into_inner());
        let fab = |what: &str, message: String| FabricError::Fabric {
            what: format!("{what} ({})", endpoint.provider()),
            message,
        };
        // SAFETY: the alias mapping lives in the server until after every registration of
        // it is closed (field order and Drop), as for the first registration in `serve`.
        let mr = unsafe {
            endpoint
                .register(
                    local.base(),
                    local.region_len() as usize,
                    true,
                    auth::random_u64()?,
                )
                .map_err(|m| fab("re-registering the region", m))?
        };
        let doorbell_mr = match self.doorbell_mr {
            None => None,
            // SAFETY: the doorbell allocation is kept by the server until after its
            // registrations are closed, as in `serve`.
            Some(_) => Some(unsafe {
                endpoint
                    .register(
                        Arc::as_ptr(&self._doorbell).cast_mut().cast(),
                        std::mem::size_of::<DoorbellWords>(),
                        true,
                        auth::random_u64()?,
                    )
                    .map_err(|m| fab("re-registering the barrier doorbell", m))?
            }),
        };
        let mut grant = self.grant.clone();
        grant.key = mr.key;
        grant.session = auth::random_u64()?;
        grant.barrier = match (grant.barrier, &doorbell_mr) {
            (Some(d), Some(mr)) => Some(Doorbell { key: mr.key, ..d }),
            _ => None,
        };
        // Hand out the new keys first, then close the old registrations (with the endpoint
        // locked, so the progress thread is not inside the provider meanwhile).
        *self.secret.write().unwrap_or_else(|p| p.into_inner()) = BootstrapSecret {
            token,
            reply: grant.encode(),
        };
        self.mr = Some(mr);
        self.doorbell_mr = doorbell_mr;
        drop(endpoint);
        self.grant = grant;
        Ok(())
    }
}

impl Drop for FabricServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.mr.take();
        self.doorbell_mr.take();
        // The endpoint (last Arc), the doorbell and the alias mapping drop next, in field
        // order.
    }
}

fn bootstrap_loop(
    listener: TcpListener,
    secret: &RwLock<BootstrapSecret>,
    stop: &AtomicBool,
    stats: &BootstrapStats,
) {
    while !stop.load(Ordering::Acquire) {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        // One bounded exchange per connection; a slow or silent client cannot hold the
        // listener for more than the timeout.
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
        let reply: Vec<u8> = match auth::read_request(&stream) {
            Ok(Some(presented)) => {
                // The token and the grant are read together: a rotation never pairs the
                // new token with the old keys or the other way round.
                let current = secret.read().unwrap_or_else(|p| p.into_inner());
                if current.token.matches(&presented) {
                    stats.granted.fetch_add(1, Ordering::Relaxed);
                    current.reply.clone()
                } else {
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                    vec![auth::STATUS_WRONG_TOKEN]
                }
            }
            Ok(None) | Err(_) => {
                stats.malformed.fetch_add(1, Ordering::Relaxed);
                vec![auth::STATUS_MALFORMED]
            }
        };
        let _ = auth::reply(&stream, &reply);
    }
}

/// Drives the provider's progress engine; the completion queue of the node's endpoint never
/// carries a request (remote RMA and atomics generate no target-side completions here).
fn progress_loop(endpoint: &Mutex<Endpoint>, stop: &AtomicBool) {
    let mut sink = Vec::new();
    while !stop.load(Ordering::Acquire) {
        {
            let ep = endpoint.lock().unwrap_or_else(|p| p.into_inner());
            ep.poll(std::ptr::null(), 1, &mut sink);
        }
        sink.retain(|c| matches!(c, Completion::Failed { .. }));
        sink.clear();
        std::thread::sleep(Duration::from_micros(20));
    }
}

/// The barrier service: whenever a control plane has rung the doorbell since the last
/// barrier, make every thread on the machine pass a full memory barrier, then publish the
/// ring count it covers. It reads nothing but the two counters.
fn barrier_loop(doorbell: &DoorbellWords, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        let requested = doorbell.requested.load(Ordering::Acquire);
        if requested != doorbell.completed.load(Ordering::Relaxed) {
            if let Err(e) = membarrier_global() {
                // Leave `completed` behind: the control plane's wait times out and its
                // reclamation is refused rather than done without a barrier.
                eprintln!("rdx-fabric: barrier service: membarrier failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            doorbell.completed.store(requested, Ordering::Release);
            continue;
        }
        std::thread::sleep(BARRIER_POLL);
    }
}

/// `membarrier(MEMBARRIER_CMD_GLOBAL)`: returns after every thread of every process on this
/// machine passed a full barrier (the same barrier the shared-memory transport uses).
fn membarrier_global() -> std::io::Result<()> {
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: a plain system call with no pointers.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
