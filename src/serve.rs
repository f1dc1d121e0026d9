//! The metrics and health server: `/metrics` (the Prometheus text exposition of the
//! registry), `/healthz` (liveness) and `/readyz` (readiness), served by one thread
//! around a `mio::Poll`.
//!
//! It answers `GET` and `HEAD` over HTTP/1.0 and 1.1 and closes every connection after
//! its response, so a connection is a small state machine: read the request head,
//! write the response, then drain what the client still sends until it closes
//! (closing a socket with unread input would reset it and could destroy the response
//! on its way). That machine, `Conn`, is written against `Read + Write` and the
//! current instant, so its timing and its partial reads and writes are tested without
//! sockets or sleeps; the poll loop only moves readiness events and deadlines to it.
//!
//! It must never panic on client input, never block the thread on one client, and
//! never hold more than [`ServerConfig::max_connections`] connections with at most
//! [`ServerConfig::max_head`] bytes of request each. Connections beyond the cap are not
//! accepted until a slot frees: they wait in the kernel's listen backlog, so that a
//! burst of scrapers is served a little later instead of being reset.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Registry, Token, Waker};

use crate::metrics::Metrics;

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
    /// Connections served at once; more wait in the listen backlog (default 64, at
    /// least 1).
    pub max_connections: usize,
    /// Time a client has to send its whole request head, and the longest pause while
    /// it reads the response (default 10 s).
    pub idle_timeout: Duration,
    /// Largest request head accepted, in bytes; larger gets 431 (default 8 KiB). A
    /// declared body larger than this gets 413.
    pub max_head: usize,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            max_connections: 64,
            idle_timeout: Duration::from_secs(10),
            max_head: 8 * 1024,
        }
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

/// Starts the server on `addr` with the default [`ServerConfig`].
pub fn spawn_server(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: HealthFn,
) -> io::Result<ServerHandle> {
    spawn_server_with(addr, metrics, health, ServerConfig::default())
}

/// Starts the server on `addr`. Binding happens before this returns, so a port in use
/// is reported here, and [`ServerHandle::local_addr`] gives the port chosen for port 0.
pub fn spawn_server_with(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: HealthFn,
    config: ServerConfig,
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
    let server = Server {
        poll,
        listener,
        conns: HashMap::new(),
        next_token: FIRST_CONN,
        config,
        metrics,
        health,
        stop: Arc::clone(&stop),
        backlog_waiting: false,
        accept_retry_at: None,
    };
    let thread = std::thread::Builder::new()
        .name("metrics-server".into())
        .spawn(move || server.run())?;
    log::info!("serving /metrics, /healthz and /readyz on http://{local_addr}");
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
    /// listener, and waits for the thread. The port is free when this returns.
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
    conns: HashMap<Token, Conn<TcpStream>>,
    next_token: usize,
    config: ServerConfig,
    metrics: Arc<Metrics>,
    health: HealthFn,
    stop: Arc<AtomicBool>,
    /// Connections may be waiting in the backlog that no readiness event will announce
    /// again (edge-triggered): accepting stopped at the cap or on an error.
    backlog_waiting: bool,
    /// When to try `accept` again after it failed for want of resources.
    accept_retry_at: Option<Instant>,
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
                    WAKER => {}
                    token => self.serve(token, now),
                }
            }
            self.expire(now);
            let may_accept = match self.accept_retry_at {
                Some(at) => at <= now,
                None => self.backlog_waiting && self.conns.len() < self.config.max_connections,
            };
            if may_accept {
                self.accept_all(now);
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.conns
            .values()
            .map(|c| c.deadline)
            .chain(self.accept_retry_at)
            .min()
    }

    /// Accepts until the listener has nothing more (edge-triggered readiness fires
    /// once per burst) or the cap is reached.
    fn accept_all(&mut self, now: Instant) {
        self.accept_retry_at = None;
        while self.conns.len() < self.config.max_connections {
            match self.listener.accept() {
                Ok((mut stream, peer)) => {
                    let token = Token(self.next_token);
                    self.next_token += 1;
                    if let Err(e) =
                        self.poll
                            .registry()
                            .register(&mut stream, token, Interest::READABLE)
                    {
                        log::warn!("metrics server: cannot watch the connection from {peer}: {e}");
                        continue;
                    }
                    let deadline = later(now, self.config.idle_timeout);
                    self.conns.insert(token, Conn::new(stream, peer, deadline));
                    // Data may have arrived before registration; an edge is reported
                    // for it on registration, so no read is needed here.
                }
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

    fn serve(&mut self, token: Token, now: Instant) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return; // closed earlier in this batch of events
        };
        let site = Site {
            metrics: &self.metrics,
            health: &self.health,
        };
        let step = conn.on_ready(now, &self.config, &mut |req| site.respond(req));
        match step {
            Step::Wait(interest) if interest != conn.interest => {
                conn.interest = interest;
                if let Err(e) = self
                    .poll
                    .registry()
                    .reregister(&mut conn.stream, token, interest)
                {
                    log::debug!("metrics server: dropping {}: {e}", conn.peer);
                    self.close(token);
                }
            }
            Step::Wait(_) => {}
            Step::Close => self.close(token),
        }
    }

    fn expire(&mut self, now: Instant) {
        let expired: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(t, _)| *t)
            .collect();
        for token in expired {
            if let Some(conn) = self.conns.get(&token) {
                log::debug!(
                    "metrics server: dropping {} after {:?} without progress ({})",
                    conn.peer,
                    self.config.idle_timeout,
                    conn.phase.name()
                );
            }
            self.close(token);
        }
    }

    fn close(&mut self, token: Token) {
        if let Some(mut conn) = self.conns.remove(&token) {
            deregister(self.poll.registry(), &mut conn.stream);
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

// --- one connection -----------------------------------------------------------------

/// A byte stream that can close its sending side (a TCP socket, or a script in tests).
trait Transport: Read + Write {
    fn shutdown_write(&mut self);
}

impl Transport for TcpStream {
    fn shutdown_write(&mut self) {
        // Fails only if the peer is gone, which the next read reports.
        let _ = self.shutdown(Shutdown::Write);
    }
}

/// One client connection, from accept to close.
struct Conn<S> {
    stream: S,
    peer: SocketAddr,
    phase: Phase,
    /// The connection is dropped when this passes without it being finished.
    deadline: Instant,
    /// What the poll registration currently asks for.
    interest: Interest,
}

enum Phase {
    /// Waiting for the request head; the whole head must arrive before the deadline
    /// set at accept, so a client trickling bytes cannot hold its slot.
    Reading { head: Vec<u8> },
    /// Writing the response; each bit of progress moves the deadline.
    Writing { out: Vec<u8>, written: usize },
    /// Response sent and our side shut; discarding input until the client closes.
    Lingering { discarded: usize },
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::Reading { .. } => "reading the request",
            Phase::Writing { .. } => "writing the response",
            Phase::Lingering { .. } => "waiting for the client to close",
        }
    }
}

/// What the poll loop should do with a connection after an event.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Nothing more can be done now; wake the connection on this readiness.
    Wait(Interest),
    Close,
}

impl<S: Transport> Conn<S> {
    fn new(stream: S, peer: SocketAddr, deadline: Instant) -> Conn<S> {
        Conn {
            stream,
            peer,
            phase: Phase::Reading { head: Vec::new() },
            deadline,
            interest: Interest::READABLE,
        }
    }

    /// Makes all the progress the socket allows. Every read and write loops until
    /// `WouldBlock`, because readiness is reported once per change (edge-triggered).
    fn on_ready(
        &mut self,
        now: Instant,
        config: &ServerConfig,
        respond: &mut dyn FnMut(&Parsed) -> Vec<u8>,
    ) -> Step {
        loop {
            match &mut self.phase {
                Phase::Reading { head } => match read_head(&mut self.stream, head, config) {
                    HeadRead::Blocked => return Step::Wait(Interest::READABLE),
                    HeadRead::Gone => return Step::Close,
                    HeadRead::Done(parsed) => {
                        log::debug!("metrics server: {} {}", self.peer, parsed.describe());
                        let out = respond(&parsed);
                        self.phase = Phase::Writing { out, written: 0 };
                        self.deadline = later(now, config.idle_timeout);
                    }
                },
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

/// Writes as much of `out` as the socket takes; `Ok(true)` once all of it is written.
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
    Ok(true)
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

// --- HTTP: parsing the request head -------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    ContentTooLarge,
    HeaderFieldsTooLarge,
    ServiceUnavailable,
    VersionNotSupported,
}

impl Status {
    fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::BadRequest => 400,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::ContentTooLarge => 413,
            Status::HeaderFieldsTooLarge => 431,
            Status::ServiceUnavailable => 503,
            Status::VersionNotSupported => 505,
        }
    }

    fn reason(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::BadRequest => "Bad Request",
            Status::NotFound => "Not Found",
            Status::MethodNotAllowed => "Method Not Allowed",
            Status::ContentTooLarge => "Content Too Large",
            Status::HeaderFieldsTooLarge => "Request Header Fields Too Large",
            Status::ServiceUnavailable => "Service Unavailable",
            Status::VersionNotSupported => "HTTP Version Not Supported",
        }
    }
}

/// The outcome of reading a request head so far.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    /// More bytes are needed.
    Partial,
    /// A `GET` or `HEAD` for `path` (query removed).
    Request { head_only: bool, path: String },
    /// A request we answer with an error status and a short reason.
    Reject(Status, &'static str),
}

impl Parsed {
    fn describe(&self) -> String {
        match self {
            Parsed::Partial => "partial request".into(),
            Parsed::Request { head_only, path } => {
                format!("{} {path}", if *head_only { "HEAD" } else { "GET" })
            }
            Parsed::Reject(status, why) => format!("rejected with {}: {why}", status.code()),
        }
    }
}

/// Parses a request head (RFC 9112) once its blank line has arrived. Only what the
/// server needs is interpreted: the request line, `Host`, and the body framing, so
/// that a body is refused rather than misread.
fn parse_head(buf: &[u8], max_head: usize) -> Parsed {
    // A client may send empty lines before the request line (RFC 9112 section 2.2).
    let start = buf
        .iter()
        .position(|b| *b != b'\r' && *b != b'\n')
        .unwrap_or(buf.len());
    let Some(end) = find_blank_line(&buf[start..]) else {
        return if buf.len() > max_head {
            Parsed::Reject(Status::HeaderFieldsTooLarge, "request head too large")
        } else {
            Parsed::Partial
        };
    };
    if start + end > max_head {
        return Parsed::Reject(Status::HeaderFieldsTooLarge, "request head too large");
    }
    let mut lines = buf[start..start + end]
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = lines.next().unwrap_or_default();
    let (method, target, version) = match parse_request_line(request_line) {
        Ok(parts) => parts,
        Err(reject) => return reject,
    };
    let mut has_host = false;
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    for line in lines.filter(|l| !l.is_empty()) {
        let Some((name, value)) = split_header(line) else {
            return Parsed::Reject(Status::BadRequest, "malformed header line");
        };
        if name.eq_ignore_ascii_case(b"host") {
            has_host = true;
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let Some(n) = std::str::from_utf8(value)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
            else {
                return Parsed::Reject(Status::BadRequest, "invalid Content-Length");
            };
            if content_length.is_some_and(|m| m != n) {
                return Parsed::Reject(Status::BadRequest, "conflicting Content-Length");
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked = true;
        }
    }
    if version == 1 && !has_host {
        return Parsed::Reject(Status::BadRequest, "HTTP/1.1 request without Host");
    }
    let head_only = match method {
        b"GET" => false,
        b"HEAD" => true,
        _ => return Parsed::Reject(Status::MethodNotAllowed, "only GET and HEAD are served"),
    };
    // The body of a GET means nothing here; a small one is drained after the
    // response, a large or unbounded one is refused.
    if chunked || content_length.is_some_and(|n| n > max_head as u64) {
        return Parsed::Reject(
            Status::ContentTooLarge,
            "a GET or HEAD may carry a small body at most",
        );
    }
    Parsed::Request {
        head_only,
        path: path_of(target),
    }
}

/// The length of the head up to and including its blank line, if it has arrived.
/// Lines end in CRLF or, leniently, a bare LF.
fn find_blank_line(buf: &[u8]) -> Option<usize> {
    let mut line_start = 0;
    for (i, b) in buf.iter().enumerate() {
        if *b == b'\n' {
            let line = &buf[line_start..i];
            if (line.is_empty() || line == b"\r") && line_start > 0 {
                return Some(i + 1);
            }
            line_start = i + 1;
        }
    }
    None
}

/// `METHOD SP target SP HTTP/1.x`; returns the method, the target and the minor version.
fn parse_request_line(line: &[u8]) -> Result<(&[u8], &[u8], u8), Parsed> {
    let garbage = || Parsed::Reject(Status::BadRequest, "malformed request line");
    let mut parts = line.split(|b| *b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(garbage());
    };
    if method.is_empty() || !method.iter().all(|b| is_token(*b)) {
        return Err(garbage());
    }
    if target.is_empty() || target.iter().any(|b| b.is_ascii_control() || *b >= 0x80) {
        return Err(garbage());
    }
    match version {
        b"HTTP/1.0" => Ok((method, target, 0)),
        b"HTTP/1.1" => Ok((method, target, 1)),
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            Err(Parsed::Reject(
                Status::VersionNotSupported,
                "only HTTP/1.0 and HTTP/1.1 are served",
            ))
        }
        _ => Err(garbage()),
    }
}

/// `name: value` with a token name and no control characters in the value.
fn split_header(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = line.iter().position(|b| *b == b':')?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|b| is_token(*b)) {
        return None;
    }
    if value.iter().any(|b| b.is_ascii_control() && *b != b'\t') {
        return None;
    }
    Some((name, value.trim_ascii()))
}

/// RFC 9110 `tchar`.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The path of an origin-form (`/metrics?x`) or absolute-form
/// (`http://host:8080/metrics`) target, without query or fragment.
fn path_of(target: &[u8]) -> String {
    let target = String::from_utf8_lossy(target);
    let rest = match target.split_once("://") {
        Some((_, after_scheme)) => match after_scheme.find('/') {
            Some(i) => after_scheme[i..].to_string(),
            None => "/".to_string(),
        },
        None => target.into_owned(),
    };
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    rest[..end].to_string()
}

// --- HTTP: the site -----------------------------------------------------------------

/// The Prometheus text format, version 0.0.4.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

struct Site<'a> {
    metrics: &'a Metrics,
    health: &'a HealthFn,
}

impl Site<'_> {
    /// The complete response (head and, unless `HEAD`, body) to a parsed request.
    fn respond(&self, parsed: &Parsed) -> Vec<u8> {
        let (head_only, path) = match parsed {
            Parsed::Request { head_only, path } => (*head_only, path.as_str()),
            Parsed::Reject(status, why) => {
                return response(*status, TEXT_CONTENT_TYPE, &format!("{why}\n"), false);
            }
            Parsed::Partial => {
                return response(
                    Status::BadRequest,
                    TEXT_CONTENT_TYPE,
                    "incomplete request\n",
                    false,
                );
            }
        };
        let (status, content_type, body) = match path {
            "/metrics" => (Status::Ok, METRICS_CONTENT_TYPE, self.metrics.encode()),
            "/healthz" => {
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
                "not found; this server has /metrics, /healthz and /readyz\n".to_string(),
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

fn response(status: Status, content_type: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut head = String::with_capacity(160);
    let _ = write!(
        head,
        "HTTP/1.1 {} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        status.code(),
        status.reason(),
        body.len()
    );
    if status == Status::MethodNotAllowed {
        head.push_str("Allow: GET, HEAD\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    const MAX: usize = 8 * 1024;

    fn request(path: &str) -> Parsed {
        Parsed::Request {
            head_only: false,
            path: path.into(),
        }
    }

    #[test]
    fn a_complete_get_is_parsed_with_its_query_removed() {
        let p = parse_head(b"GET /metrics?name[]=x HTTP/1.1\r\nHost: a\r\n\r\n", MAX);
        assert_eq!(p, request("/metrics"));
        let p = parse_head(b"HEAD /readyz HTTP/1.0\r\n\r\n", MAX);
        assert_eq!(
            p,
            Parsed::Request {
                head_only: true,
                path: "/readyz".into()
            }
        );
    }

    #[test]
    fn lenient_forms_are_accepted() {
        for raw in [
            &b"\r\nGET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"[..],
            b"GET /healthz HTTP/1.1\nHost: a\n\n",
            b"GET http://10.0.0.1:8080/healthz HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET /healthz HTTP/1.0\r\nX-Empty:\r\n\r\n",
        ] {
            assert_eq!(
                parse_head(raw, MAX),
                request("/healthz"),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn a_head_without_its_blank_line_is_partial_until_it_passes_the_cap() {
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost: a\r\n", MAX),
            Parsed::Partial
        );
        assert_eq!(parse_head(b"GET /met", MAX), Parsed::Partial);
        assert_eq!(parse_head(b"", MAX), Parsed::Partial);
        let mut big = b"GET /metrics HTTP/1.1\r\nX-Filler: ".to_vec();
        big.resize(MAX + 1, b'a');
        assert!(matches!(
            parse_head(&big, MAX),
            Parsed::Reject(Status::HeaderFieldsTooLarge, _)
        ));
        big.extend_from_slice(b"\r\n\r\n");
        assert!(matches!(
            parse_head(&big, MAX),
            Parsed::Reject(Status::HeaderFieldsTooLarge, _)
        ));
    }

    #[test]
    fn bad_requests_get_the_status_that_names_their_fault() {
        for (raw, status) in [
            (&b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"[..], 400),
            (b"GET /metrics\r\n\r\n", 400),
            (b"GET  /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"GET /metrics HTTP/1.1\r\n\r\n", 400),
            (b"GET /metrics HTTP/1.1\r\nHost a\r\n\r\n", 400),
            (b"GET /metrics HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400),
            (b"GET /me\x00trics HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400),
            (
                b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                400,
            ),
            (b"GET /metrics FTP/1.1\r\n\r\n", 400),
            (b"PRI * HTTP/2.0\r\n\r\n", 505),
            (b"POST /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 405),
            (b"DELETE /metrics HTTP/1.0\r\n\r\n", 405),
            (b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 99999\r\n\r\n", 413),
            (b"GET /metrics HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 413),
        ] {
            match parse_head(raw, MAX) {
                Parsed::Reject(s, _) => {
                    assert_eq!(s.code(), status, "{}", String::from_utf8_lossy(raw))
                }
                other => panic!("{}: {other:?}", String::from_utf8_lossy(raw)),
            }
        }
    }

    #[test]
    fn random_bytes_never_panic_the_parser() {
        use rand::rngs::SmallRng;
        use rand::{RngExt, SeedableRng};
        let pieces: &[&[u8]] = &[
            b"GET",
            b"HEAD",
            b" ",
            b"/",
            b"?",
            b"://",
            b"HTTP/1.1",
            b"HTTP/9.",
            b"\r",
            b"\n",
            b"\r\n",
            b":",
            b"Host",
            b"Content-Length",
            b"99999999999999999999999",
            b"0",
            b"\xff",
            b"\xe2\x82",
            b"\x00",
            b"\t",
            b"#",
        ];
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..20_000 {
            let mut input = Vec::new();
            for _ in 0..rng.random_range(0..40) {
                input.extend_from_slice(pieces[rng.random_range(0..pieces.len())]);
            }
            let _ = parse_head(&input, 64);
            let _ = parse_head(&input, MAX).describe();
        }
    }

    #[test]
    fn a_small_declared_body_is_tolerated() {
        let raw = b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(parse_head(raw, MAX), request("/metrics"));
    }

    fn site_response(parsed: &Parsed, health: Health) -> String {
        let metrics = Metrics::new();
        for _ in 0..7 {
            metrics.pass_finished(
                crate::metrics::TriggerKind::NodeAdd,
                crate::metrics::SyncOutcome::Changed,
            );
        }
        let health: HealthFn = Arc::new(move || health.clone());
        let site = Site {
            metrics: &metrics,
            health: &health,
        };
        String::from_utf8(site.respond(parsed)).unwrap()
    }

    fn health(live: bool, ready: bool) -> Health {
        Health {
            live,
            ready,
            detail: "watch connected; synced; leading".into(),
        }
    }

    #[test]
    fn metrics_are_served_in_the_prometheus_text_format() {
        let text = site_response(&request("/metrics"), health(true, true));
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let head = format!("{head}\r\n");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
        assert!(head.contains("Connection: close\r\n"));
        assert!(
            body.contains("\nroute_controller_route_sync_total{outcome=\"changed\",trigger=\"node_change\"} 7\n"),
            "{body}"
        );
    }

    #[test]
    fn probes_answer_503_with_the_detail_when_down() {
        let text = site_response(&request("/healthz"), health(true, false));
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nok: watch connected; synced; leading\n"));
        let text = site_response(&request("/readyz"), health(true, false));
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{text}"
        );
        assert!(text.ends_with("\r\n\r\nnot ready: watch connected; synced; leading\n"));
        let text = site_response(&request("/healthz"), health(false, false));
        assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
    }

    #[test]
    fn head_gets_the_length_of_the_body_without_it() {
        let parsed = Parsed::Request {
            head_only: true,
            path: "/healthz".into(),
        };
        let text = site_response(&parsed, health(true, true));
        let body = "ok: watch connected; synced; leading\n";
        assert!(
            text.ends_with(&format!(
                "Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )),
            "{text}"
        );
    }

    #[test]
    fn method_not_allowed_names_the_allowed_methods() {
        let text = site_response(
            &Parsed::Reject(Status::MethodNotAllowed, "only GET and HEAD are served"),
            health(true, true),
        );
        assert!(
            text.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nAllow: GET, HEAD\r\n"), "{text}");
    }

    // --- the connection state machine, on a scripted stream and a virtual clock ---

    /// What the script's socket does on each call.
    enum Io {
        Data(&'static [u8]),
        Eof,
        Block,
    }

    #[derive(Default)]
    struct Script {
        reads: VecDeque<Io>,
        /// How many bytes each write call takes; `None` blocks. Empty: take all.
        writes: VecDeque<Option<usize>>,
        written: Vec<u8>,
        shut: bool,
    }

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.reads.pop_front() {
                Some(Io::Data(d)) => {
                    assert!(d.len() <= buf.len());
                    buf[..d.len()].copy_from_slice(d);
                    Ok(d.len())
                }
                Some(Io::Eof) => {
                    // A closed stream stays closed.
                    self.reads.push_front(Io::Eof);
                    Ok(0)
                }
                Some(Io::Block) | None => Err(io::ErrorKind::WouldBlock.into()),
            }
        }
    }

    impl Write for Script {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            match self.writes.pop_front() {
                Some(None) => Err(io::ErrorKind::WouldBlock.into()),
                Some(Some(n)) => {
                    let n = n.min(buf.len());
                    self.written.extend_from_slice(&buf[..n]);
                    Ok(n)
                }
                None => {
                    self.written.extend_from_slice(buf);
                    Ok(buf.len())
                }
            }
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Transport for Script {
        fn shutdown_write(&mut self) {
            self.shut = true;
        }
    }

    fn conn(script: Script, t0: Instant) -> Conn<Script> {
        let config = ServerConfig::default();
        Conn::new(
            script,
            "127.0.0.1:1".parse().unwrap(),
            t0 + config.idle_timeout,
        )
    }

    fn echo_path(p: &Parsed) -> Vec<u8> {
        p.describe().into_bytes()
    }

    #[test]
    fn a_request_in_pieces_is_answered_once_its_head_is_complete() {
        let t0 = Instant::now();
        let config = ServerConfig::default();
        let mut c = conn(
            Script {
                reads: VecDeque::from([
                    Io::Data(b"GET /met"),
                    Io::Block,
                    Io::Data(b"rics HTTP/1.1\r\nHost: x\r\n"),
                    Io::Block,
                    Io::Data(b"\r\n"),
                    Io::Block,
                    Io::Eof,
                ]),
                ..Script::default()
            },
            t0,
        );
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(
            c.on_ready(t1, &config, &mut echo_path),
            Step::Wait(Interest::READABLE)
        );
        assert_eq!(
            c.on_ready(t1, &config, &mut echo_path),
            Step::Wait(Interest::READABLE)
        );
        assert!(c.stream.written.is_empty());
        assert_eq!(
            c.deadline,
            t0 + config.idle_timeout,
            "trickling does not extend the head's time"
        );
        // The head completes: the response is written and our side shut.
        assert_eq!(
            c.on_ready(t1, &config, &mut echo_path),
            Step::Wait(Interest::READABLE)
        );
        assert_eq!(c.stream.written, b"GET /metrics");
        assert!(c.stream.shut);
        assert!(matches!(c.phase, Phase::Lingering { .. }));
        assert_eq!(c.deadline, t1 + LINGER);
        // The client closes.
        assert_eq!(c.on_ready(t1, &config, &mut echo_path), Step::Close);
    }

    #[test]
    fn a_response_larger_than_the_socket_takes_is_finished_on_writable() {
        let t0 = Instant::now();
        let config = ServerConfig::default();
        let mut c = conn(
            Script {
                reads: VecDeque::from([Io::Data(b"GET /metrics HTTP/1.0\r\n\r\n")]),
                writes: VecDeque::from([Some(3), None, Some(4), None]),
                ..Script::default()
            },
            t0,
        );
        let body = || b"0123456789".to_vec();
        let t1 = t0 + Duration::from_secs(1);
        let mut respond = |_: &Parsed| body();
        assert_eq!(
            c.on_ready(t1, &config, &mut respond),
            Step::Wait(Interest::READABLE | Interest::WRITABLE)
        );
        assert_eq!(c.stream.written, b"012");
        assert_eq!(c.deadline, t1 + config.idle_timeout);
        let t2 = t1 + Duration::from_secs(5);
        assert_eq!(
            c.on_ready(t2, &config, &mut respond),
            Step::Wait(Interest::READABLE | Interest::WRITABLE)
        );
        assert_eq!(c.stream.written, b"0123456");
        assert_eq!(
            c.deadline,
            t2 + config.idle_timeout,
            "progress moves the deadline"
        );
        assert_eq!(
            c.on_ready(t2, &config, &mut respond),
            Step::Wait(Interest::READABLE)
        );
        assert_eq!(c.stream.written, body());
        assert!(c.stream.shut);
    }

    #[test]
    fn a_client_that_closes_at_once_is_dropped_without_an_answer() {
        let t0 = Instant::now();
        let mut c = conn(
            Script {
                reads: VecDeque::from([Io::Eof]),
                ..Script::default()
            },
            t0,
        );
        let step = c.on_ready(t0, &ServerConfig::default(), &mut echo_path);
        assert_eq!(step, Step::Close);
        assert!(c.stream.written.is_empty());
    }

    #[test]
    fn half_a_request_then_close_gets_400() {
        let t0 = Instant::now();
        let mut c = conn(
            Script {
                reads: VecDeque::from([Io::Data(b"GET /metr"), Io::Eof]),
                ..Script::default()
            },
            t0,
        );
        let config = ServerConfig::default();
        let mut site = |p: &Parsed| format!("{p:?}").into_bytes();
        let step = c.on_ready(t0, &config, &mut site);
        assert_eq!(step, Step::Close, "the EOF is seen again while lingering");
        assert_eq!(
            String::from_utf8(c.stream.written).unwrap(),
            "Reject(BadRequest, \"incomplete request\")"
        );
    }

    #[test]
    fn a_client_that_keeps_sending_after_its_answer_is_cut_off() {
        let t0 = Instant::now();
        static JUNK: [u8; 4096] = [b'x'; 4096];
        let mut reads = VecDeque::from([Io::Data(b"GET /readyz HTTP/1.0\r\n\r\n")]);
        for _ in 0..=LINGER_MAX_BYTES / JUNK.len() {
            reads.push_back(Io::Data(&JUNK));
        }
        let mut c = conn(
            Script {
                reads,
                ..Script::default()
            },
            t0,
        );
        let step = c.on_ready(t0, &ServerConfig::default(), &mut echo_path);
        assert_eq!(step, Step::Close);
        assert_eq!(c.stream.written, b"GET /readyz");
    }
}
