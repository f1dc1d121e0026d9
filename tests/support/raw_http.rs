#![allow(dead_code)]
//! A tiny HTTP/1.x client over a plain `TcpStream`, for tests that need to send exact
//! bytes (half requests, garbage, oversized heads) and read a `Connection: close`
//! response to the end. Each test binary uses only part of the support modules.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long a test waits for the server before failing instead of hanging.
pub const PATIENCE: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Header names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("the body is UTF-8")
    }
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(PATIENCE))
        .expect("read timeout");
    stream
        .set_write_timeout(Some(PATIENCE))
        .expect("write timeout");
    stream
}

/// Sends `raw` on a new connection and reads the response until the server closes.
pub fn exchange(addr: SocketAddr, raw: &[u8]) -> Response {
    parse_response(&exchange_bytes(addr, raw), true)
}

/// Sends `raw` and returns every byte the server sent until it closed.
pub fn exchange_bytes(addr: SocketAddr, raw: &[u8]) -> Vec<u8> {
    let mut stream = connect(addr);
    stream.write_all(raw).expect("send the request");
    read_to_close(&mut stream)
}

pub fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("reading the response: {e} (got {} bytes)", raw.len()));
    raw
}

/// `GET path` with HTTP/1.1 and a Host header, as Prometheus sends it.
pub fn get(addr: SocketAddr, path: &str) -> Response {
    exchange(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: test\r\nAccept: */*\r\n\r\n")
            .as_bytes(),
    )
}

/// Reads to the end of the stream and parses the response.
pub fn read_response(stream: &mut TcpStream) -> Response {
    parse_response(&read_to_close(stream), true)
}

/// Parses a response; panics with the bytes received if it is not well formed or,
/// when `with_body` (any response but one to HEAD), its Content-Length does not
/// match its body.
pub fn parse_response(raw: &[u8], with_body: bool) -> Response {
    let shown = || String::from_utf8_lossy(&raw[..raw.len().min(400)]).into_owned();
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {:?}", shown()));
    let head = std::str::from_utf8(&raw[..end]).expect("the head is UTF-8");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    assert!(
        version == "HTTP/1.1" || version == "HTTP/1.0",
        "status line {status_line:?}"
    );
    let status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l
                .split_once(':')
                .unwrap_or_else(|| panic!("header line {l:?}"));
            (n.to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    let body = raw[end + 4..].to_vec();
    let response = Response {
        status,
        headers,
        body,
    };
    if let Some(len) = response.header("content-length").filter(|_| with_body) {
        assert_eq!(
            len.parse::<usize>().ok(),
            Some(response.body.len()),
            "Content-Length and body differ in {:?}",
            shown()
        );
    }
    response
}
