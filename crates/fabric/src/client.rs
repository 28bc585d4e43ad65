//! The control plane's side: [`FabricTransport`], one-sided RMA and atomics on a remote
//! region through a libfabric RDM endpoint.

use crate::auth::{encode_request, Doorbell, Grant, ReplyError, Token};
use crate::sys::{self, Completion, Endpoint, Registration};
use crate::FabricError;
use rdx_region::geometry::{check_header, HeaderInfo};
use rdx_region::layout::{Arch, RegionHeader};
use rdx_transport::{Op, Transport, TransportError};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes of registered staging memory every operation goes through (providers that need
/// FI_MR_LOCAL only accept registered local buffers).
const STAGING: usize = 1 << 20;
/// Largest single RMA transfer; bigger writes are split.
const MAX_CHUNK: usize = 64 << 10;
/// Operations in flight at once.
const MAX_DEPTH: usize = 64;
/// One operation context (libfabric's `struct fi_context2`).
const CTX_BYTES: usize = 64;

/// How to reach a node.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// How long a batch may wait for completions before the node counts as unreachable.
    pub op_timeout: Duration,
    /// The architecture the node's region must declare.
    pub arch: Arch,
    /// How long [`Transport::remote_barrier`] waits for the node's barrier service (one
    /// `membarrier`, usually milliseconds).
    pub barrier_timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            op_timeout: Duration::from_secs(3),
            barrier_timeout: Duration::from_secs(10),
            arch: Arch::HOST.expect("rdx supports x86_64 and aarch64 hosts"),
        }
    }
}

struct Client {
    // Field order is drop order: the staging registration, then the endpoint (which cancels
    // anything in flight), then the memory in-flight operations pointed at.
    staging_mr: Registration,
    ep: Endpoint,
    staging: Vec<u64>,
    contexts: Vec<[u64; CTX_BYTES / 8]>,
    dest: u64,
    key: u64,
    remote_base: u64,
    depth: usize,
    chunk: usize,
    timeout: Duration,
    /// Set once a batch failed in flight: later operations fail at once with this.
    broken: Option<String>,
    completions: Vec<Completion>,
}

/// A one-sided view of a remote node's region over libfabric.
pub struct FabricTransport {
    client: Mutex<Client>,
    region_len: u64,
    peer: String,
    provider: String,
    session: u64,
    doorbell: Option<Doorbell>,
    barrier_timeout: Duration,
    info: std::sync::OnceLock<HeaderInfo>,
}

impl std::fmt::Debug for FabricTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FabricTransport")
            .field("peer", &self.peer)
            .field("provider", &self.provider)
            .field("region_len", &self.region_len)
            .finish()
    }
}

impl FabricTransport {
    /// Presents `token` to the node's bootstrap listener at `bootstrap`, opens an endpoint
    /// of the provider the node serves with, and checks the region's header remotely.
    pub fn connect(
        bootstrap: SocketAddr,
        token: &Token,
        options: &ConnectOptions,
    ) -> Result<Self, FabricError> {
        let peer = format!("fabric://{bootstrap}");
        let io = |what: &str, source| FabricError::Io {
            what: format!("{what} {bootstrap}"),
            source,
        };
        let mut stream = TcpStream::connect_timeout(&bootstrap, options.op_timeout)
            .map_err(|e| io("connecting to bootstrap listener", e))?;
        stream
            .set_read_timeout(Some(options.op_timeout))
            .map_err(|e| io("setting timeout on", e))?;
        crate::auth::reply(&mut stream, &encode_request(token))
            .map_err(|e| io("sending token to", e))?;
        let grant = Grant::decode(&mut stream).map_err(|e| match e {
            ReplyError::WrongToken => FabricError::Refused { node: peer.clone() },
            ReplyError::Malformed(m) => FabricError::Protocol {
                node: peer.clone(),
                message: m,
            },
            ReplyError::Io(e) => io("reading bootstrap reply from", e),
        })?;
        drop(stream);
        Self::attach(&peer, &grant, options)
    }

    /// Opens the fabric side from a grant already obtained.
    pub fn attach(
        peer: &str,
        grant: &Grant,
        options: &ConnectOptions,
    ) -> Result<Self, FabricError> {
        let fab = |what: &str, message: String| FabricError::Fabric {
            what: format!("{what} for {peer} ({})", grant.provider),
            message,
        };
        let ep = Endpoint::open(Some(&grant.provider), None, None, false)
            .map_err(|m| fab("opening endpoint", m))?;
        let dest = ep
            .insert_peer(&grant.address)
            .map_err(|m| fab("inserting node address", m))?;
        if (ep.props.context_size as usize) > CTX_BYTES {
            return Err(fab(
                "operation context",
                format!("{} bytes needed", ep.props.context_size),
            ));
        }
        let mut staging = vec![0u64; STAGING / 8];
        // SAFETY: `staging` is owned by the Client next to the registration, which is dropped
        // first (field order), and its heap buffer never moves (never resized).
        let staging_mr = unsafe {
            ep.register(staging.as_mut_ptr().cast(), STAGING, false, 1)
                .map_err(|m| fab("registering staging memory", m))?
        };
        let depth = (ep.props.tx_depth as usize).clamp(1, MAX_DEPTH);
        let chunk = (ep.props.max_msg_size as usize).clamp(8, MAX_CHUNK);
        let provider = ep.provider();
        let client = Client {
            staging_mr,
            ep,
            staging,
            contexts: vec![[0; CTX_BYTES / 8]; depth],
            dest,
            key: grant.key,
            remote_base: grant.remote_base,
            depth,
            chunk,
            timeout: options.op_timeout,
            broken: None,
            completions: Vec::new(),
        };
        let t = Self {
            client: Mutex::new(client),
            region_len: grant.region_len,
            peer: peer.to_string(),
            provider,
            session: grant.session,
            doorbell: grant.barrier,
            barrier_timeout: options.barrier_timeout,
            info: std::sync::OnceLock::new(),
        };
        let mut head = vec![0u8; std::mem::size_of::<RegionHeader>()];
        t.read(0, &mut head).map_err(|e| FabricError::Region {
            node: peer.to_string(),
            source: e,
        })?;
        let info = check_header(&head, grant.region_len, options.arch).map_err(|source| {
            FabricError::Region {
                node: peer.to_string(),
                source: TransportError::Layout {
                    path: peer.to_string(),
                    source,
                },
            }
        })?;
        let _ = t.info.set(info);
        Ok(t)
    }

    /// The header as checked at connect.
    pub fn info(&self) -> &HeaderInfo {
        self.info
            .get()
            .expect("attach checks the header before returning")
    }

    /// The libfabric provider in use (the node's).
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// Random per serving start of the node: a change means the node restarted.
    pub fn session(&self) -> u64 {
        self.session
    }

    /// The node as a `fabric://HOST:PORT` address, for errors and logs.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    fn check(&self, offset: u64, len: u64) -> Result<(), TransportError> {
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.region_len)
        {
            return Err(TransportError::OutOfBounds {
                offset,
                len,
                region_len: self.region_len,
            });
        }
        Ok(())
    }

    fn check_atomic(&self, offset: u64) -> Result<(), TransportError> {
        self.check(offset, 8)?;
        if !offset.is_multiple_of(8) {
            return Err(TransportError::Misaligned { offset });
        }
        Ok(())
    }

    fn failure(&self, what: &'static str, message: String) -> TransportError {
        TransportError::Io {
            what,
            path: self.peer.clone(),
            source: std::io::Error::other(message),
        }
    }
}

impl FabricTransport {
    /// Runs one fetch-and-add (adding `operand`) or 8-byte read on the barrier doorbell;
    /// returns the previous or read value.
    fn doorbell_op(&self, piece: Piece, operand: u64) -> Result<u64, TransportError> {
        let mut guard = self.client.lock().unwrap_or_else(|p| p.into_inner());
        let c = &mut *guard;
        if let Some(m) = &c.broken {
            return Err(self.failure("remote barrier on", m.clone()));
        }
        c.staging[0] = operand;
        c.staging[1] = 0;
        if let Err(m) = c.run_wave(&[piece]) {
            c.broken = Some(m.clone());
            return Err(self.failure("remote barrier on", m));
        }
        Ok(match piece {
            Piece::Faa { .. } => c.staging[1],
            _ => c.staging[0],
        })
    }

    /// Whether the node runs the barrier service (reclamation over the fabric needs it).
    pub fn has_remote_barrier(&self) -> bool {
        self.doorbell.is_some()
    }
}

/// Where a piece lands on the node: a remote address (already based) and the key of the
/// registration holding it.
#[derive(Clone, Copy)]
struct Target {
    addr: u64,
    key: u64,
}

/// One posted piece of a batch.
#[derive(Clone, Copy)]
enum Piece {
    Read {
        op: usize,
        at: usize,
        staged: usize,
        len: usize,
        remote: Target,
    },
    Write {
        staged: usize,
        len: usize,
        remote: Target,
    },
    Cas {
        op: usize,
        staged: usize,
        remote: Target,
    },
    Faa {
        op: usize,
        staged: usize,
        remote: Target,
    },
}

impl Client {
    fn staging_bytes(&mut self) -> &mut [u8] {
        // SAFETY: viewing our own u64 buffer as bytes; no other reference is alive.
        unsafe { std::slice::from_raw_parts_mut(self.staging.as_mut_ptr().cast(), STAGING) }
    }

    fn post(&mut self, index: usize, piece: Piece) -> isize {
        let ctx = self.contexts[index].as_mut_ptr().cast();
        let base = self.staging.as_mut_ptr().cast::<u8>();
        let desc = self.staging_mr.desc;
        let raw = self.ep.raw();
        let dest = self.dest;
        // SAFETY: every staged range lies inside the registered staging buffer (planned by
        // `run`), contexts are distinct 64-byte slots, and both outlive the operation (they
        // are owned by self, which waits for completion or marks itself broken and keeps
        // the memory until the endpoint is closed).
        unsafe {
            match piece {
                Piece::Read {
                    staged,
                    len,
                    remote,
                    ..
                } => sys::rdxf_read(
                    raw,
                    base.add(staged).cast(),
                    len,
                    desc,
                    dest,
                    remote.addr,
                    remote.key,
                    ctx,
                ),
                Piece::Write {
                    staged,
                    len,
                    remote,
                } => sys::rdxf_write(
                    raw,
                    base.add(staged).cast(),
                    len,
                    desc,
                    dest,
                    remote.addr,
                    remote.key,
                    ctx,
                ),
                Piece::Cas { staged, remote, .. } => {
                    let words = base.add(staged).cast::<u64>();
                    sys::rdxf_cswap(
                        raw,
                        words,
                        words.add(1),
                        words.add(2),
                        desc,
                        dest,
                        remote.addr,
                        remote.key,
                        ctx,
                    )
                }
                Piece::Faa { staged, remote, .. } => {
                    let words = base.add(staged).cast::<u64>();
                    sys::rdxf_fetch_add(
                        raw,
                        words,
                        words.add(1),
                        desc,
                        dest,
                        remote.addr,
                        remote.key,
                        ctx,
                    )
                }
            }
        }
    }

    /// Reaps completions; returns the first error completion's description.
    fn drain(&mut self, outstanding: &mut [bool], pending: &mut usize) -> Option<String> {
        let ctx_base = self.contexts.as_ptr().cast::<u8>();
        let mut done = std::mem::take(&mut self.completions);
        done.clear();
        self.ep.poll(ctx_base, CTX_BYTES, &mut done);
        let mut error = None;
        for c in done.drain(..) {
            match c {
                Completion::Done(i) if i < outstanding.len() && outstanding[i] => {
                    outstanding[i] = false;
                    *pending -= 1;
                }
                Completion::Done(_) => {}
                Completion::Failed { err, message } => {
                    error.get_or_insert(format!("{message} [{}]", sys::strerror(err)));
                }
            }
        }
        self.completions = done;
        error
    }

    /// Posts `wave` and waits for all of it.
    fn run_wave(&mut self, wave: &[Piece]) -> Result<(), String> {
        let deadline = Instant::now() + self.timeout;
        let mut outstanding = vec![false; wave.len()];
        let mut pending = 0usize;
        let mut error: Option<String> = None;
        for (i, &piece) in wave.iter().enumerate() {
            loop {
                let rc = self.post(i, piece);
                if rc == 0 {
                    outstanding[i] = true;
                    pending += 1;
                    break;
                }
                if rc != sys::EAGAIN {
                    return Err(format!("posting: {}", sys::strerror(rc)));
                }
                if let Some(e) = self.drain(&mut outstanding, &mut pending) {
                    error.get_or_insert(e);
                }
                if Instant::now() > deadline {
                    return Err(format!("transmit queue stayed full for {:?}", self.timeout));
                }
            }
        }
        while pending > 0 {
            if let Some(e) = self.drain(&mut outstanding, &mut pending) {
                error.get_or_insert(e);
            }
            if let Some(e) = error.take() {
                return Err(e);
            }
            if pending > 0 && Instant::now() > deadline {
                return Err(format!(
                    "{pending} operation(s) got no completion within {:?}: the node is unreachable or dead",
                    self.timeout
                ));
            }
        }
        Ok(())
    }
}

impl Transport for FabricTransport {
    fn region_len(&self) -> u64 {
        self.region_len
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), TransportError> {
        self.submit(&mut [Op::Read { offset, buf }])
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), TransportError> {
        self.submit(&mut [Op::Write { offset, data }])
    }
    fn read_u64(&self, offset: u64) -> Result<u64, TransportError> {
        self.check_atomic(offset)?;
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }
    fn write_u64(&self, offset: u64, value: u64) -> Result<(), TransportError> {
        self.check_atomic(offset)?;
        self.write(offset, &value.to_ne_bytes())
    }
    fn compare_and_swap(
        &self,
        offset: u64,
        expected: u64,
        new: u64,
    ) -> Result<u64, TransportError> {
        let mut ops = [Op::CompareAndSwap {
            offset,
            expected,
            new,
            previous: 0,
        }];
        self.submit(&mut ops)?;
        match ops[0] {
            Op::CompareAndSwap { previous, .. } => Ok(previous),
            _ => unreachable!("the batch holds one CAS"),
        }
    }
    fn fetch_and_add(&self, offset: u64, delta: u64) -> Result<u64, TransportError> {
        let mut ops = [Op::FetchAndAdd {
            offset,
            delta,
            previous: 0,
        }];
        self.submit(&mut ops)?;
        match ops[0] {
            Op::FetchAndAdd { previous, .. } => Ok(previous),
            _ => unreachable!("the batch holds one FAA"),
        }
    }

    /// Every operation has completed (delivery-complete) when its call returns, so there is
    /// nothing left to order.
    fn fence(&self) -> Result<(), TransportError> {
        let client = self.client.lock().unwrap_or_else(|p| p.into_inner());
        match &client.broken {
            Some(m) => Err(self.failure("fence on", m.clone())),
            None => Ok(()),
        }
    }

    /// Rings the node's barrier service (a fetch-and-add on its doorbell) and waits until
    /// the node reports a `membarrier` that started after the ring: then every store a host
    /// thread issued before is visible to our reads, and our earlier writes to its later
    /// loads — the same guarantee as on shared memory. Refused if the node runs no barrier
    /// service (see docs/fabric.md, "Remote barrier").
    fn remote_barrier(&self) -> Result<(), TransportError> {
        let Some(doorbell) = self.doorbell else {
            return Err(TransportError::Io {
                what: "remote barrier on",
                path: self.peer.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "the node serves without its barrier service, so reclamation cannot be made safe",
                ),
            });
        };
        let requested = Target {
            addr: doorbell.remote_addr,
            key: doorbell.key,
        };
        let completed = Target {
            addr: doorbell.remote_addr.wrapping_add(8),
            key: doorbell.key,
        };
        let previous = self.doorbell_op(
            Piece::Faa {
                op: 0,
                staged: 0,
                remote: requested,
            },
            1,
        )?;
        let wanted = previous.wrapping_add(1);
        let deadline = Instant::now() + self.barrier_timeout;
        loop {
            let done = self.doorbell_op(
                Piece::Read {
                    op: 0,
                    at: 0,
                    staged: 0,
                    len: 8,
                    remote: completed,
                },
                0,
            )?;
            // Wrapping comparison: `done` has reached or passed our ring.
            if done.wrapping_sub(wanted) as i64 >= 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(TransportError::Io {
                    what: "remote barrier on",
                    path: self.peer.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "the node's barrier service did not complete ring {wanted} within {:?} (last completed {done})",
                            self.barrier_timeout
                        ),
                    ),
                });
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn submit(&self, ops: &mut [Op<'_>]) -> Result<(), TransportError> {
        for op in ops.iter() {
            match op {
                Op::Read { offset, buf } => self.check(*offset, buf.len() as u64)?,
                Op::Write { offset, data } => self.check(*offset, data.len() as u64)?,
                Op::CompareAndSwap { offset, .. } | Op::FetchAndAdd { offset, .. } => {
                    self.check_atomic(*offset)?
                }
            }
        }
        let mut guard = self.client.lock().unwrap_or_else(|p| p.into_inner());
        let c = &mut *guard;
        if let Some(m) = &c.broken {
            return Err(self.failure("operation on", m.clone()));
        }
        let mut wave: Vec<Piece> = Vec::with_capacity(c.depth);
        let mut used = 0usize;
        // Pieces are planned op by op, chunk by chunk; a wave is flushed when staging or
        // the queue depth would overflow.
        let flush =
            |c: &mut Client, wave: &mut Vec<Piece>, used: &mut usize, ops: &mut [Op<'_>]| {
                if wave.is_empty() {
                    return Ok(());
                }
                if let Err(m) = c.run_wave(wave) {
                    c.broken = Some(m.clone());
                    return Err(self.failure("remote access to", m));
                }
                for piece in wave.drain(..) {
                    match piece {
                        Piece::Read {
                            op,
                            at,
                            staged,
                            len,
                            ..
                        } => {
                            if let Op::Read { buf, .. } = &mut ops[op] {
                                buf[at..at + len]
                                    .copy_from_slice(&c.staging_bytes()[staged..staged + len]);
                            }
                        }
                        Piece::Cas { op, staged, .. } => {
                            let previous_value = c.staging[staged / 8 + 2];
                            if let Op::CompareAndSwap { previous, .. } = &mut ops[op] {
                                *previous = previous_value;
                            }
                        }
                        Piece::Faa { op, staged, .. } => {
                            let previous_value = c.staging[staged / 8 + 1];
                            if let Op::FetchAndAdd { previous, .. } = &mut ops[op] {
                                *previous = previous_value;
                            }
                        }
                        Piece::Write { .. } => {}
                    }
                }
                *used = 0;
                Ok(())
            };
        for index in 0..ops.len() {
            let (offset, len) = match &ops[index] {
                Op::Read { offset, buf } => (*offset, buf.len()),
                Op::Write { offset, data } => (*offset, data.len()),
                Op::CompareAndSwap { offset, .. } => (*offset, 24),
                Op::FetchAndAdd { offset, .. } => (*offset, 16),
            };
            let step = match &ops[index] {
                Op::Read { .. } | Op::Write { .. } => c.chunk,
                _ => len,
            };
            let mut at = 0;
            while at < len {
                let n = step.min(len - at);
                let need = n.div_ceil(8) * 8;
                if wave.len() == c.depth || used + need > STAGING {
                    flush(c, &mut wave, &mut used, ops)?;
                }
                let staged = used;
                used += need;
                let remote = Target {
                    addr: c.remote_base.wrapping_add(offset + at as u64),
                    key: c.key,
                };
                let piece = match &ops[index] {
                    Op::Read { .. } => Piece::Read {
                        op: index,
                        at,
                        staged,
                        len: n,
                        remote,
                    },
                    Op::Write { data, .. } => {
                        c.staging_bytes()[staged..staged + n].copy_from_slice(&data[at..at + n]);
                        Piece::Write {
                            staged,
                            len: n,
                            remote,
                        }
                    }
                    Op::CompareAndSwap { expected, new, .. } => {
                        c.staging[staged / 8] = *new;
                        c.staging[staged / 8 + 1] = *expected;
                        Piece::Cas {
                            op: index,
                            staged,
                            remote,
                        }
                    }
                    Op::FetchAndAdd { delta, .. } => {
                        c.staging[staged / 8] = *delta;
                        Piece::Faa {
                            op: index,
                            staged,
                            remote,
                        }
                    }
                };
                wave.push(piece);
                at += n;
            }
        }
        flush(c, &mut wave, &mut used, ops)
    }
}
