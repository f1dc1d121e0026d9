#![allow(dead_code)]
//! A TCP proxy for fault injection, put in front of the API server or a cloud: it
//! passes bytes through until the test tells it to refuse new connections, stall
//! (accept and forward nothing either way), hold replies (forward requests, keep the
//! server's bytes until released) or cut every open connection. Loopback only; its
//! threads end when the proxy is dropped.
//!
//! Each connection is two pumps, one per direction, that read with a short timeout so
//! that they see a change of mode within [`TICK`].
//!
//! It also logs when the client's bytes of each EC2 Query request (`Action=…` in a
//! form body) were passed to the server ([`FaultProxy::requests`]): with one proxy per
//! replica, that attributes every request moto saw to the replica that sent it.
//!
//! It counts the bytes it passed on each way ([`FaultProxy::bytes`]): in front of the
//! API server, what a controller read from it (TLS records, so the encrypted size).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How quickly pumps and the acceptor notice a new mode.
pub const TICK: Duration = Duration::from_millis(20);

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Bytes flow both ways.
    Pass,
    /// New connections are closed at once; open ones keep flowing.
    Refuse,
    /// Nothing flows either way (a black hole): clients see timeouts.
    Stall,
    /// Requests reach the server; its replies wait in the proxy until the mode
    /// changes (a reply held back across, say, a lease handover).
    HoldReplies,
}

struct Shared {
    mode: Mutex<Mode>,
    /// Bumped by `cut`: pumps of older connections close both sides.
    generation: AtomicU64,
    stop: AtomicBool,
    /// Counters for the test's report.
    connections: AtomicU64,
    refused: AtomicU64,
    cuts: AtomicU64,
    /// When each `Action=…` request was passed on, and its action.
    requests: Mutex<Vec<(Instant, String)>>,
    /// Bytes passed on to the server, and to the client.
    to_server: AtomicU64,
    to_client: AtomicU64,
}

pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on a loopback port chosen by the OS and forwards to `target`.
    pub fn start(target: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Pass),
            generation: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            connections: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            cuts: AtomicU64::new(0),
            requests: Mutex::new(Vec::new()),
            to_server: AtomicU64::new(0),
            to_client: AtomicU64::new(0),
        });
        let s = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name(format!("fault-proxy {addr}"))
            .spawn(move || accept_loop(listener, target, s))
            .expect("spawn the proxy");
        FaultProxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn set(&self, mode: Mode) {
        *self.shared.mode.lock().expect("mode") = mode;
    }

    pub fn mode(&self) -> Mode {
        *self.shared.mode.lock().expect("mode")
    }

    /// Closes every open connection (both sides, at once); new ones are served
    /// according to the mode.
    pub fn cut(&self) {
        self.shared.cuts.fetch_add(1, Ordering::SeqCst);
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// The EC2 Query requests passed on to the server so far: when, and the action.
    pub fn requests(&self) -> Vec<(Instant, String)> {
        self.shared.requests.lock().expect("requests").clone()
    }

    /// Bytes passed on so far: `(to the server, to the client)`.
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.shared.to_server.load(Ordering::SeqCst),
            self.shared.to_client.load(Ordering::SeqCst),
        )
    }

    /// Connections accepted and passed on, refused, and cuts so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.shared.connections.load(Ordering::SeqCst),
            self.shared.refused.load(Ordering::SeqCst),
            self.shared.cuts.load(Ordering::SeqCst),
        )
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.cut();
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(TICK);
                continue;
            }
            Err(_) => continue,
        };
        if *shared.mode.lock().expect("mode") == Mode::Refuse {
            shared.refused.fetch_add(1, Ordering::SeqCst);
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
            // The target is down (restarting): the client sees its connection close.
            shared.refused.fetch_add(1, Ordering::SeqCst);
            continue;
        };
        shared.connections.fetch_add(1, Ordering::SeqCst);
        let generation = shared.generation.load(Ordering::SeqCst);
        for (from, to, replies) in [
            (client.try_clone(), server.try_clone(), false),
            (server.try_clone(), client.try_clone(), true),
        ] {
            let (Ok(from), Ok(to)) = (from, to) else {
                continue;
            };
            let s = shared.clone();
            let _ = std::thread::Builder::new()
                .name("fault-proxy pump".into())
                .spawn(move || pump(from, to, replies, generation, s));
        }
    }
}

/// Copies `from` to `to` as the mode allows, until either side closes or a cut.
fn pump(mut from: TcpStream, mut to: TcpStream, replies: bool, generation: u64, s: Arc<Shared>) {
    let _ = from.set_read_timeout(Some(TICK));
    let mut held: Vec<u8> = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let flowing_in = |mode: Mode| match mode {
        Mode::Pass | Mode::Refuse => true,
        Mode::Stall => false,
        Mode::HoldReplies => !replies,
    };
    loop {
        if s.generation.load(Ordering::SeqCst) != generation {
            break;
        }
        let mode = *s.mode.lock().expect("mode");
        let flowing = flowing_in(mode);
        if flowing && !held.is_empty() {
            if !replies {
                log_actions(&s, &held);
            }
            if to.write_all(&held).is_err() {
                break;
            }
            count_bytes(&s, replies, held.len());
            held.clear();
        }
        if mode == Mode::Stall {
            // Read nothing: the sender's buffers fill, as behind a black hole.
            std::thread::sleep(TICK);
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => {
                if !held.is_empty() {
                    // The server closed; deliver what it said once released.
                    std::thread::sleep(TICK);
                    continue;
                }
                break;
            }
            // The mode may have changed while the read waited. Bytes held before go
            // first (the next turn writes them): written past them, a reply reached
            // the client out of order ("invalid HTTP version").
            Ok(n) if held.is_empty() && flowing_in(*s.mode.lock().expect("mode")) => {
                if !replies {
                    log_actions(&s, &buf[..n]);
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
                count_bytes(&s, replies, n);
            }
            Ok(n) => held.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

fn count_bytes(s: &Shared, replies: bool, n: usize) {
    let counter = if replies { &s.to_client } else { &s.to_server };
    counter.fetch_add(n as u64, Ordering::SeqCst);
}

/// Notes the `Action=…` of each request in `bytes` (a form body: the action is the
/// first field, as the provider and moto's clients write it).
fn log_actions(s: &Shared, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for part in text.split("Action=").skip(1) {
        let action: String = part
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        if !action.is_empty() {
            let entry = (Instant::now(), action);
            s.requests.lock().expect("requests").push(entry);
        }
    }
}
