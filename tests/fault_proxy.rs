//! The TCP fault proxy of the chaos runs, against a line server: each mode does what
//! the proxy's docs say. These pin the test tool itself, so that a chaos run's
//! "faults injected" are real.

#[path = "support/fault_proxy.rs"]
mod fault_proxy;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fault_proxy::{FaultProxy, Mode};

/// Long enough for a loaded machine to pass bytes on; the proxy's tick is 20 ms.
const PATIENCE: Duration = Duration::from_secs(10);
/// How long "nothing arrives" is watched for.
const QUIET: Duration = Duration::from_millis(300);

/// Answers each line with `reply:<line>` and remembers the lines it got.
fn line_server() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let log = log.clone();
            std::thread::spawn(move || {
                let mut out = conn.try_clone().expect("clone");
                for line in BufReader::new(conn).lines() {
                    let Ok(line) = line else { return };
                    log.lock().expect("log").push(line.clone());
                    if out.write_all(format!("reply:{line}\n").as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

fn connect(proxy: &FaultProxy, read_timeout: Duration) -> TcpStream {
    let s = TcpStream::connect(proxy.addr()).expect("connect to the proxy");
    s.set_read_timeout(Some(read_timeout)).expect("timeout");
    s
}

/// Reads one line, or `None` on timeout or close.
fn read_line(s: &mut TcpStream) -> Option<String> {
    let mut out = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match s.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => return String::from_utf8(out).ok(),
            Ok(1) => out.push(byte[0]),
            _ => return None,
        }
    }
}

#[test]
fn pass_forwards_both_ways() {
    let (server, _) = line_server();
    let proxy = FaultProxy::start(server);
    let mut c = connect(&proxy, PATIENCE);
    c.write_all(b"a\n").expect("send");
    assert_eq!(read_line(&mut c).as_deref(), Some("reply:a"));
}

#[test]
fn held_replies_reach_the_client_only_when_released() {
    let (server, seen) = line_server();
    let proxy = FaultProxy::start(server);
    let mut c = connect(&proxy, QUIET);
    proxy.set(Mode::HoldReplies);
    c.write_all(b"create\n").expect("send");
    assert_eq!(read_line(&mut c), None, "the reply must be held");
    assert_eq!(
        *seen.lock().expect("log"),
        vec!["create"],
        "the request went through"
    );
    proxy.set(Mode::Pass);
    c.set_read_timeout(Some(PATIENCE)).expect("timeout");
    assert_eq!(read_line(&mut c).as_deref(), Some("reply:create"));
}

#[test]
fn stall_lets_nothing_through_until_it_ends() {
    let (server, seen) = line_server();
    let proxy = FaultProxy::start(server);
    let mut c = connect(&proxy, QUIET);
    c.write_all(b"warm\n").expect("send");
    c.set_read_timeout(Some(PATIENCE)).expect("timeout");
    assert_eq!(read_line(&mut c).as_deref(), Some("reply:warm"));
    proxy.set(Mode::Stall);
    c.write_all(b"x\n").expect("send");
    c.set_read_timeout(Some(QUIET)).expect("timeout");
    assert_eq!(read_line(&mut c), None);
    assert_eq!(
        *seen.lock().expect("log"),
        vec!["warm"],
        "nothing reached the server"
    );
    proxy.set(Mode::Pass);
    c.set_read_timeout(Some(PATIENCE)).expect("timeout");
    assert_eq!(read_line(&mut c).as_deref(), Some("reply:x"));
}

#[test]
fn refuse_closes_new_connections_and_keeps_open_ones() {
    let (server, _) = line_server();
    let proxy = FaultProxy::start(server);
    let mut open = connect(&proxy, PATIENCE);
    open.write_all(b"a\n").expect("send");
    assert_eq!(read_line(&mut open).as_deref(), Some("reply:a"));
    proxy.set(Mode::Refuse);
    let mut refused = connect(&proxy, PATIENCE);
    let _ = refused.write_all(b"b\n");
    assert_eq!(read_line(&mut refused), None, "closed at once");
    open.write_all(b"c\n").expect("send");
    assert_eq!(read_line(&mut open).as_deref(), Some("reply:c"));
    assert_eq!(proxy.counts().1, 1);
}

#[test]
fn cut_closes_every_open_connection() {
    let (server, _) = line_server();
    let proxy = FaultProxy::start(server);
    let mut c = connect(&proxy, PATIENCE);
    c.write_all(b"a\n").expect("send");
    assert_eq!(read_line(&mut c).as_deref(), Some("reply:a"));
    proxy.cut();
    assert_eq!(read_line(&mut c), None, "the connection must be closed");
    let mut again = connect(&proxy, PATIENCE);
    again.write_all(b"b\n").expect("send");
    assert_eq!(read_line(&mut again).as_deref(), Some("reply:b"));
}
