//! The metrics and health server: `/metrics` (the Prometheus text exposition of the
//! registry), `/healthz` (liveness) and `/readyz` (readiness), served by one thread
//! around a `mio::Poll`. Two kinds run from the same code:
//!
//! - the **secure port** ([`spawn_secure_server`], `--secure-port`, 10270 by default; the CCM's is 10258):
//!   HTTPS, and every path but the always-allowed probes needs a bearer token that a
//!   TokenReview authenticates and a SubjectAccessReview allows (see `access`);
//! - the **plain port** ([`spawn_server`], `--metrics-bind-address`, off by default):
//!   HTTP without authentication, for local use.
//!
//! It answers `GET` and `HEAD` over HTTP/1.0 and 1.1 and closes every connection after
//! its response, so a connection is a small state machine: read the request head,
//! (on the secure port) wait for its review, write the response, then drain what the
//! client still sends until it closes (closing a socket with unread input would reset
//! it and could destroy the response on its way). That machine, `Conn`, and the table
//! of connections are written against `Read + Write` and the current instant, so
//! their timing, partial reads and writes and evictions are tested without sockets or
//! sleeps; the poll loop only moves readiness events and deadlines to them.
//!
//! Nobody can starve the probes: a request head must arrive within
//! [`ServerConfig::head_timeout`] of the accept (about a second), and when all
//! [`ServerConfig::max_connections`] slots are taken a new connection evicts the
//! oldest one that has not sent its request within a short grace, so idle and
//! slow-loris connections only ever push each other out. The API server calls of a review run on their own
//! thread, so a slow API server delays scrapes, never a probe. It must never panic on
//! client input and never block its thread on one client.

mod access;
mod http;
mod tls;

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Registry, Token, Waker};

use crate::metrics::Metrics;
use access::{Access, Ask, Decision, ReviewDone, ReviewJob, ReviewKey};
use http::{METRICS_CONTENT_TYPE, Parsed, Status, TEXT_CONTENT_TYPE, parse_head, response, text};
use tls::TlsStream;

pub use crate::secret::Secret;
pub use access::{AccessConfig, DEFAULT_ALWAYS_ALLOW_PATHS, DelegatedReviewer, Reviewer};
pub use tls::{CertSource, SELF_SIGNED_CERT, SELF_SIGNED_KEY, server_config as tls_config};

/// What `/healthz` and `/readyz` report, computed by the caller on each probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    /// The process does its job (the node watch is alive); `/healthz` answers 200.
    pub live: bool,
    /// The process should count as available (synced, and leading or standing by);
    /// `/readyz` answers 200.
    pub ready: bool,
    /// A short sentence for humans, e.g. "watch connected; synced; leading".
    pub detail: String,
}

/// The health callback. It runs on the server thread for every probe, so it must be
/// quick and must not block (read atomics, not locks held across IO).
pub type HealthFn = Arc<dyn Fn() -> Health + Send + Sync>;

/// Limits of the server. The defaults suit a metrics endpoint scraped by a few
/// Prometheus servers and probed by the kubelet.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Connections served at once (default 64, at least 1). A new connection beyond
    /// it evicts the oldest one still sending its request head 100 ms after its
    /// accept; when no slot can be freed so, it waits in the listen backlog.
    pub max_connections: usize,
    /// Time a client has from its accept to send its whole request head, TLS
    /// handshake included (default 1 s: the kubelet and Prometheus send theirs at
    /// once; a client that trickles it cannot hold a slot longer).
    pub head_timeout: Duration,
    /// The longest wait for a review, and the longest pause while the client reads
    /// the response (default 10 s).
    pub idle_timeout: Duration,
    /// Largest request head accepted, in bytes; larger gets 431 (default 8 KiB). A
    /// declared body larger than this gets 413.
    pub max_head: usize,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            max_connections: 64,
            head_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(10),
            max_head: 8 * 1024,
        }
    }
}

/// TLS and delegated authorization of the secure port.
#[derive(Clone)]
pub struct Secure {
    /// The serving certificate and TLS settings ([`tls_config`]).
    pub tls: Arc<rustls::ServerConfig>,
    /// Which paths are open, and how long review answers are trusted.
    pub access: AccessConfig,
    /// Asks the API server (a [`crate::kube::Client`] in the binary).
    pub reviewer: Arc<dyn Reviewer>,
}

impl std::fmt::Debug for Secure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secure")
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

/// After its response, how long a connection may take to close its side.
const LINGER: Duration = Duration::from_secs(2);
/// After its response, how much more a client may send (and we discard) before we
/// close regardless.
const LINGER_MAX_BYTES: usize = 64 * 1024;
/// How long to wait before accepting again after `accept` failed for want of
/// resources (file descriptors, memory).
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// How long a new connection is safe from eviction: a client sends its request at
/// once, so one that has not after this long keeps a slot without using it. It
/// bounds the attack it withstands: pushing a probe out would take more than
/// `max_connections` new connections per grace (640 a second with the defaults).
const EVICTION_GRACE: Duration = Duration::from_millis(100);
/// Reviews waiting for the reviewer thread; beyond, a request gets 503 at once.
const REVIEW_QUEUE: usize = 64;

/// Starts the plain-HTTP server on `addr` with the default [`ServerConfig`].
pub fn spawn_server(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: HealthFn,
) -> io::Result<ServerHandle> {
    spawn_server_with(addr, metrics, health, ServerConfig::default())
}

/// Starts the plain-HTTP server on `addr`: no TLS, no authentication. Binding happens
/// before this returns, so a port in use is reported here, and
/// [`ServerHandle::local_addr`] gives the port chosen for port 0.
pub fn spawn_server_with(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: HealthFn,
    config: ServerConfig,
) -> io::Result<ServerHandle> {
    spawn(addr, metrics, health, config, None)
}

/// Starts the secure server on `addr`: HTTPS, and every path but
/// [`AccessConfig::always_allow_paths`] reviewed with the API server.
pub fn spawn_secure_server(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: HealthFn,
    config: ServerConfig,
    secure: Secure,
) -> io::Result<ServerHandle> {
    spawn(addr, metrics, health, config, Some(secure))
}

fn spawn(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: HealthFn,
    config: ServerConfig,
    secure: Option<Secure>,
) -> io::Result<ServerHandle> {
    let config = ServerConfig {
        max_connections: config.max_connections.max(1),
        ..config
    };
    let mut listener = TcpListener::bind(addr)?;
    let local_addr = listener.local_addr()?;
    let poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let stop = Arc::new(AtomicBool::new(false));
    let guard = match secure {
        Some(secure) => Some(Guard::spawn(secure, Arc::clone(&waker))?),
        None => None,
    };
    let scheme = if guard.is_some() { "https" } else { "http" };
    let server = Server {
        poll,
        listener,
        table: Table::new(config.max_connections),
        next_token: FIRST_CONN,
        config,
        metrics,
        health,
        guard,
        stop: Arc::clone(&stop),
        backlog_waiting: false,
        accept_retry_at: None,
    };
    let thread = std::thread::Builder::new()
        .name(format!("{scheme}-server"))
        .spawn(move || server.run())?;
    log::info!("serving /metrics, /healthz and /readyz on {scheme}://{local_addr}");
    Ok(ServerHandle {
        local_addr,
        stop,
        waker,
        thread: Some(thread),
    })
}

/// The running server. Stops it when dropped.
#[derive(Debug)]
pub struct ServerHandle {
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl ServerHandle {
    /// The address the server listens on (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops the server: wakes its poll loop, closes every connection and the
    /// listener, and waits for the thread. The port is free when this returns. A
    /// review in flight finishes on its own thread, which then ends.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stop.store(true, Ordering::SeqCst);
        if let Err(e) = self.waker.wake() {
            // Without the wake the loop still sees the flag at its next event or
            // deadline; say why stopping may be slow.
            log::warn!("waking the metrics server to stop it failed: {e}");
        }
        if thread.join().is_err() {
            log::error!("the metrics server thread panicked");
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

// --- the poll loop ------------------------------------------------------------------

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const FIRST_CONN: usize = 2;

struct Server {
    poll: Poll,
    listener: TcpListener,
    table: Table<Stream>,
    next_token: usize,
    config: ServerConfig,
    metrics: Arc<Metrics>,
    health: HealthFn,
    /// The secure port's TLS and access decisions; `None` on the plain port.
    guard: Option<Guard>,
    stop: Arc<AtomicBool>,
    /// Connections may be waiting in the backlog that no readiness event will announce
    /// again (edge-triggered): accepting stopped at the cap or on an error.
    backlog_waiting: bool,
    /// When to try `accept` again after it failed for want of resources.
    accept_retry_at: Option<Instant>,
}

/// The secure port's state: TLS, the access decision and its caches, the requests
/// waiting for a review, and the channels to the reviewer thread.
struct Guard {
    tls: Arc<rustls::ServerConfig>,
    access: Access,
    waiting: HashMap<ReviewKey, Vec<Token>>,
    jobs: Sender<ReviewJob>,
    done: Receiver<ReviewDone>,
}

impl Guard {
    /// Starts the reviewer thread; it ends when the server drops its job queue.
    fn spawn(secure: Secure, waker: Arc<Waker>) -> io::Result<Guard> {
        let (jobs, job_rx) = crossbeam_channel::bounded::<ReviewJob>(REVIEW_QUEUE);
        let (done_tx, done) = crossbeam_channel::unbounded();
        let reviewer = secure.reviewer;
        std::thread::Builder::new()
            .name("access-reviews".into())
            .spawn(move || {
                for job in job_rx {
                    if done_tx.send(access::run_review(&reviewer, job)).is_err() {
                        return;
                    }
                    let _ = waker.wake();
                }
            })?;
        Ok(Guard {
            tls: secure.tls,
            access: Access::new(secure.access),
            waiting: HashMap::new(),
            jobs,
            done,
        })
    }

    /// The decision for `conn`'s request, or `None` when it must wait for a review.
    fn decide(
        &mut self,
        conn: Token,
        path: &str,
        bearer: Option<&Secret>,
        now: Instant,
    ) -> Option<Decision> {
        match self.access.ask(path, bearer, now) {
            Ask::Now(decision) => Some(decision),
            Ask::Wait(key) => {
                self.waiting.entry(key).or_default().push(conn);
                None
            }
            Ask::Review(job) => {
                let key = job.key.clone();
                match self.jobs.try_send(job) {
                    Ok(()) => {
                        self.waiting.entry(key).or_default().push(conn);
                        None
                    }
                    Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                        self.access.not_queued(&key);
                        Some(Decision::Unavailable(
                            "too many requests wait for a review by the API server".into(),
                        ))
                    }
                }
            }
        }
    }
}

impl Server {
    fn run(mut self) {
        let mut events = Events::with_capacity(256);
        loop {
            let timeout = self
                .next_deadline()
                .map(|d| d.saturating_duration_since(Instant::now()));
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                log::error!("metrics server stopped: polling its sockets failed: {e}");
                return;
            }
            if self.stop.load(Ordering::SeqCst) {
                log::debug!("metrics server stopping");
                return;
            }
            let now = Instant::now();
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept_all(now),
                    WAKER => self.reviews_done(now),
                    token => self.serve(token, now),
                }
            }
            self.expire(now);
            let may_accept = match self.accept_retry_at {
                Some(at) => at <= now,
                None => self.backlog_waiting && self.table.has_room_or_victim(now),
            };
            if may_accept {
                self.accept_all(now);
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let eviction = self
            .backlog_waiting
            .then(|| self.table.next_eviction())
            .flatten();
        self.table
            .next_deadline()
            .into_iter()
            .chain(self.accept_retry_at)
            .chain(eviction)
            .min()
    }

    /// Accepts until the listener has nothing more (edge-triggered readiness fires
    /// once per burst) or every slot is busy answering.
    fn accept_all(&mut self, now: Instant) {
        self.accept_retry_at = None;
        while self.table.has_room_or_victim(now) {
            match self.listener.accept() {
                Ok((stream, peer)) => self.admit(stream, peer, now),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.backlog_waiting = false;
                    return;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) => {}
                Err(e) => {
                    log::warn!(
                        "metrics server: accepting a connection failed: {e}; retrying in {ACCEPT_RETRY:?}"
                    );
                    self.backlog_waiting = true;
                    self.accept_retry_at = Some(now + ACCEPT_RETRY);
                    return;
                }
            }
        }
        self.backlog_waiting = true;
    }

    /// Takes a new connection into the table, evicting the oldest idle one if full.
    fn admit(&mut self, tcp: TcpStream, peer: SocketAddr, now: Instant) {
        let mut stream = match &self.guard {
            Some(guard) => match TlsStream::new(Arc::clone(&guard.tls), tcp) {
                Ok(tls) => Stream::Tls(Box::new(tls)),
                Err(e) => {
                    log::warn!("metrics server: cannot start TLS with {peer}: {e}");
                    return;
                }
            },
            None => Stream::Plain(tcp),
        };
        let token = Token(self.next_token);
        self.next_token += 1;
        if let Err(e) = self
            .poll
            .registry()
            .register(stream.socket(), token, Interest::READABLE)
        {
            log::warn!("metrics server: cannot watch the connection from {peer}: {e}");
            return;
        }
        if let Some(victim) = self.table.victim_if_full(now) {
            if let Some(conn) = self.table.conns.get(&victim) {
                log::debug!(
                    "metrics server: all {} slots taken; dropping {} ({}) for {peer}",
                    self.config.max_connections,
                    conn.peer,
                    conn.phase.name()
                );
            }
            self.close(victim);
        }
        let conn = Conn::new(stream, peer, now, &self.config);
        self.table.conns.insert(token, conn);
        // Data may have arrived before registration; an edge is reported for it on
        // registration, so no read is needed here.
    }

    fn serve(&mut self, token: Token, now: Instant) {
        let Some(conn) = self.table.conns.get_mut(&token) else {
            return; // closed earlier in this batch of events
        };
        let site = Site {
            metrics: &self.metrics,
            health: &self.health,
        };
        let guard = &mut self.guard;
        let step = conn.on_ready(now, &self.config, &mut |req| match (req, guard.as_mut()) {
            (
                Parsed::Request {
                    head_only,
                    path,
                    bearer,
                },
                Some(guard),
            ) => match guard.decide(token, path, bearer.as_ref(), now) {
                Some(decision) => Reply::Now(site.answer(&decision, path, *head_only)),
                None => Reply::Review,
            },
            (req, _) => Reply::Now(site.respond(req)),
        });
        self.apply(token, step);
    }

    fn apply(&mut self, token: Token, step: Step) {
        let Some(conn) = self.table.conns.get_mut(&token) else {
            return;
        };
        match step {
            Step::Wait(interest) if interest != conn.interest => {
                conn.interest = interest;
                if let Err(e) =
                    self.poll
                        .registry()
                        .reregister(conn.stream.socket(), token, interest)
                {
                    log::debug!("metrics server: dropping {}: {e}", conn.peer);
                    self.close(token);
                }
            }
            Step::Wait(_) => {}
            Step::Close => self.close(token),
        }
    }

    /// Answers the requests whose reviews finished.
    fn reviews_done(&mut self, now: Instant) {
        let Some(guard) = self.guard.as_mut() else {
            return;
        };
        let mut answers = Vec::new();
        while let Ok(done) = guard.done.try_recv() {
            let key = done.key.clone();
            let decision = guard.access.done(done, now);
            for token in guard.waiting.remove(&key).unwrap_or_default() {
                answers.push((token, decision.clone(), key.path.clone()));
            }
        }
        let site = Site {
            metrics: &self.metrics,
            health: &self.health,
        };
        let mut ready = Vec::new();
        for (token, decision, path) in answers {
            if let Some(conn) = self.table.conns.get_mut(&token)
                && let Phase::Reviewing { head_only } = conn.phase
            {
                conn.answer(site.answer(&decision, &path, head_only), now, &self.config);
                ready.push(token);
            }
        }
        for token in ready {
            self.serve(token, now);
        }
    }

    fn expire(&mut self, now: Instant) {
        for token in self.table.expired(now) {
            if let Some(conn) = self.table.conns.get(&token) {
                log::debug!(
                    "metrics server: dropping {}: its time ran out while {}",
                    conn.peer,
                    conn.phase.name()
                );
            }
            self.close(token);
        }
    }

    fn close(&mut self, token: Token) {
        if let Some(mut conn) = self.table.conns.remove(&token) {
            deregister(self.poll.registry(), conn.stream.socket());
        }
    }
}

/// `now + d`, saturating far in the future for an absurd configured timeout.
fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

fn deregister(registry: &Registry, stream: &mut TcpStream) {
    // The socket is closed right after, which removes it from the poll set anyway.
    let _ = registry.deregister(stream);
}

// --- the table of connections -------------------------------------------------------

/// The connections being served, and which one gives way when a new one arrives.
struct Table<S> {
    conns: HashMap<Token, Conn<S>>,
    max: usize,
}

impl<S> Table<S> {
    fn new(max: usize) -> Table<S> {
        Table {
            conns: HashMap::new(),
            max,
        }
    }

    /// Whether a new connection can be taken at `now`, possibly by evicting another.
    fn has_room_or_victim(&self, now: Instant) -> bool {
        self.conns.len() < self.max || self.victim(now).is_some()
    }

    /// The connection to drop at `now` for a new one, if the table is full.
    fn victim_if_full(&self, now: Instant) -> Option<Token> {
        (self.conns.len() >= self.max)
            .then(|| self.victim(now))
            .flatten()
    }

    /// The oldest connection still sending its request head after
    /// [`EVICTION_GRACE`], else the oldest one waiting for its client to close after
    /// the answer. Connections being answered (reviewed or written) are never
    /// evicted: they are doing what the server is for. Young connections are spared
    /// so that a burst of honest clients, whose requests are on their way, waits in
    /// the backlog instead of pushing each other out.
    fn victim(&self, now: Instant) -> Option<Token> {
        let oldest = |want: &dyn Fn(&Conn<S>) -> bool| {
            self.conns
                .iter()
                .filter(|(_, c)| want(c))
                .min_by_key(|(t, c)| (c.accepted, t.0))
                .map(|(t, _)| *t)
        };
        oldest(&|c| matches!(c.phase, Phase::Reading { .. }) && c.evictable_at() <= now)
            .or_else(|| oldest(&|c| matches!(c.phase, Phase::Lingering { .. })))
    }

    /// When a full table next gets a victim, if only the grace keeps it from one.
    fn next_eviction(&self) -> Option<Instant> {
        if self.conns.len() < self.max {
            return None;
        }
        self.conns
            .values()
            .filter(|c| matches!(c.phase, Phase::Reading { .. }))
            .map(Conn::evictable_at)
            .min()
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.conns.values().map(|c| c.deadline).min()
    }

    fn expired(&self, now: Instant) -> Vec<Token> {
        self.conns
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(t, _)| *t)
            .collect()
    }
}

// --- one connection -----------------------------------------------------------------

/// A byte stream that can close its sending side (a TCP socket, TLS over one, or a
/// script in tests).
trait Transport: Read + Write {
    fn shutdown_write(&mut self);
    /// Bytes the transport made itself (a TLS handshake) wait for the socket.
    fn wants_write(&self) -> bool {
        false
    }
}

/// A connection's stream: plain TCP, or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    fn socket(&mut self) -> &mut TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.socket_mut(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

impl Transport for Stream {
    fn shutdown_write(&mut self) {
        // Fails only if the peer is gone, which the next read reports.
        match self {
            Stream::Plain(s) => {
                let _ = s.shutdown(Shutdown::Write);
            }
            Stream::Tls(s) => s.close_write(|tcp| {
                let _ = tcp.shutdown(Shutdown::Write);
            }),
        }
    }

    fn wants_write(&self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls(s) => s.wants_write(),
        }
    }
}

/// One client connection, from accept to close.
struct Conn<S> {
    stream: S,
    peer: SocketAddr,
    phase: Phase,
    /// When it was accepted: the oldest idle connection is evicted first.
    accepted: Instant,
    /// The connection is dropped when this passes without it being finished.
    deadline: Instant,
    /// What the poll registration currently asks for.
    interest: Interest,
}

enum Phase {
    /// Waiting for the request head; the whole head must arrive within the head
    /// timeout of the accept, so a client trickling bytes cannot hold its slot.
    Reading { head: Vec<u8> },
    /// The request waits for the API server's review of its token.
    Reviewing { head_only: bool },
    /// Writing the response; each bit of progress moves the deadline.
    Writing { out: Vec<u8>, written: usize },
    /// Response sent and our side shut; discarding input until the client closes.
    Lingering { discarded: usize },
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::Reading { .. } => "reading the request",
            Phase::Reviewing { .. } => "waiting for the review of its token",
            Phase::Writing { .. } => "writing the response",
            Phase::Lingering { .. } => "waiting for the client to close",
        }
    }
}

/// What the site makes of a request head.
enum Reply {
    /// The complete response.
    Now(Vec<u8>),
    /// A review must answer first; [`Conn::answer`] follows.
    Review,
}

/// What the poll loop should do with a connection after an event.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Nothing more can be done now; wake the connection on this readiness.
    Wait(Interest),
    Close,
}

impl<S> Conn<S> {
    /// From when the connection may be evicted while it sends its request head.
    fn evictable_at(&self) -> Instant {
        later(self.accepted, EVICTION_GRACE)
    }
}

impl<S: Transport> Conn<S> {
    fn new(stream: S, peer: SocketAddr, now: Instant, config: &ServerConfig) -> Conn<S> {
        Conn {
            stream,
            peer,
            phase: Phase::Reading { head: Vec::new() },
            accepted: now,
            deadline: later(now, config.head_timeout),
            interest: Interest::READABLE,
        }
    }

    /// Makes all the progress the socket allows. Every read and write loops until
    /// `WouldBlock`, because readiness is reported once per change (edge-triggered).
    fn on_ready(
        &mut self,
        now: Instant,
        config: &ServerConfig,
        respond: &mut dyn FnMut(&Parsed) -> Reply,
    ) -> Step {
        loop {
            match &mut self.phase {
                Phase::Reading { head } => match read_head(&mut self.stream, head, config) {
                    HeadRead::Blocked if self.stream.wants_write() => {
                        return Step::Wait(Interest::READABLE | Interest::WRITABLE);
                    }
                    HeadRead::Blocked => return Step::Wait(Interest::READABLE),
                    HeadRead::Gone => return Step::Close,
                    HeadRead::Done(parsed) => {
                        log::debug!("metrics server: {} {}", self.peer, parsed.describe());
                        match respond(&parsed) {
                            Reply::Now(out) => self.answer(out, now, config),
                            Reply::Review => {
                                let head_only = matches!(
                                    parsed,
                                    Parsed::Request {
                                        head_only: true,
                                        ..
                                    }
                                );
                                self.phase = Phase::Reviewing { head_only };
                                self.deadline = later(now, config.idle_timeout);
                                return Step::Wait(Interest::READABLE);
                            }
                        }
                    }
                },
                // Nothing to read or write until the review is done.
                Phase::Reviewing { .. } => return Step::Wait(Interest::READABLE),
                Phase::Writing { out, written } => {
                    match write_out(&mut self.stream, out, written) {
                        Ok(true) => {
                            self.stream.shutdown_write();
                            self.phase = Phase::Lingering { discarded: 0 };
                            self.deadline = later(now, LINGER.min(config.idle_timeout));
                        }
                        Ok(false) => {
                            self.deadline = later(now, config.idle_timeout);
                            return Step::Wait(Interest::READABLE | Interest::WRITABLE);
                        }
                        Err(e) => {
                            log::debug!("metrics server: writing to {} failed: {e}", self.peer);
                            return Step::Close;
                        }
                    }
                }
                Phase::Lingering { discarded } => return linger(&mut self.stream, discarded),
            }
        }
    }

    /// Starts writing `out`, the response; the next [`Conn::on_ready`] sends it.
    fn answer(&mut self, out: Vec<u8>, now: Instant, config: &ServerConfig) {
        self.phase = Phase::Writing { out, written: 0 };
        self.deadline = later(now, config.idle_timeout);
    }
}

enum HeadRead {
    Blocked,
    /// The client closed or failed before sending anything worth answering.
    Gone,
    Done(Parsed),
}

fn read_head(stream: &mut impl Read, head: &mut Vec<u8>, config: &ServerConfig) -> HeadRead {
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) if head.is_empty() => return HeadRead::Gone,
            // The client closed its side after half a request: answer what we have.
            Ok(0) => {
                return HeadRead::Done(match parse_head(head, config.max_head) {
                    Parsed::Partial => Parsed::Reject(Status::BadRequest, "incomplete request"),
                    done => done,
                });
            }
            Ok(n) => {
                head.extend_from_slice(&chunk[..n]);
                match parse_head(head, config.max_head) {
                    Parsed::Partial => {}
                    done => return HeadRead::Done(done),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return HeadRead::Blocked,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                log::debug!("metrics server: reading a request failed: {e}");
                return HeadRead::Gone;
            }
        }
    }
}

/// Writes as much of `out` as the socket takes; `Ok(true)` once all of it has left
/// (for TLS: once the encrypted bytes are on the socket too).
fn write_out(stream: &mut impl Write, out: &[u8], written: &mut usize) -> io::Result<bool> {
    while *written < out.len() {
        match stream.write(&out[*written..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => *written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    match stream.flush() {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
}

fn linger(stream: &mut impl Read, discarded: &mut usize) -> Step {
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return Step::Close,
            Ok(n) => {
                *discarded += n;
                if *discarded > LINGER_MAX_BYTES {
                    return Step::Close;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Step::Wait(Interest::READABLE);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Step::Close,
        }
    }
}

// --- the site -----------------------------------------------------------------------

struct Site<'a> {
    metrics: &'a Metrics,
    health: &'a HealthFn,
}

impl Site<'_> {
    /// The complete response (head and, unless `HEAD`, body) to a parsed request, on
    /// the plain port or once access is allowed.
    fn respond(&self, parsed: &Parsed) -> Vec<u8> {
        match parsed {
            Parsed::Request {
                head_only, path, ..
            } => self.page(path, *head_only),
            Parsed::Reject(status, why) => text(*status, why, false),
            Parsed::Partial => text(Status::BadRequest, "incomplete request", false),
        }
    }

    /// The response on the secure port after the access decision.
    fn answer(&self, decision: &Decision, path: &str, head_only: bool) -> Vec<u8> {
        match decision {
            Decision::Allow => self.page(path, head_only),
            Decision::Unauthenticated(why) => text(
                Status::Unauthorized,
                &format!("unauthorized: {why}"),
                head_only,
            ),
            Decision::Forbidden(why) => {
                text(Status::Forbidden, &format!("forbidden: {why}"), head_only)
            }
            Decision::Unavailable(why) => text(Status::ServiceUnavailable, why, head_only),
        }
    }

    fn page(&self, path: &str, head_only: bool) -> Vec<u8> {
        let (status, content_type, body) = match path {
            "/metrics" => (Status::Ok, METRICS_CONTENT_TYPE, self.metrics.encode()),
            // /livez is the name newer probes use; the same answer as /healthz.
            "/healthz" | "/livez" => {
                let h = (self.health)();
                probe(h.live, "ok", "not live", &h.detail)
            }
            "/readyz" => {
                let h = (self.health)();
                probe(h.ready, "ready", "not ready", &h.detail)
            }
            _ => (
                Status::NotFound,
                TEXT_CONTENT_TYPE,
                "not found; this server has /metrics, /healthz, /livez and /readyz\n".to_string(),
            ),
        };
        response(status, content_type, &body, head_only)
    }
}

fn probe(up: bool, yes: &str, no: &str, detail: &str) -> (Status, &'static str, String) {
    let (status, word) = if up {
        (Status::Ok, yes)
    } else {
        (Status::ServiceUnavailable, no)
    };
    (status, TEXT_CONTENT_TYPE, format!("{word}: {detail}\n"))
}

#[cfg(test)]
mod tests;
