#![allow(dead_code)]
// Each test binary uses only part of this module.

//! A tiny HTTP/1.1 server on 127.0.0.1 port 0 whose replies a test scripts with a
//! closure: for EC2 replies moto never produces (blackholes, paging, throttling,
//! timeouts) and for an IMDSv2 emulator. It records every request it saw.
//!
//! One thread per connection and `Connection: close` on every reply, so a reply that
//! hangs (to provoke a client timeout) never holds up the others. Everything stops
//! when the server is dropped; a hang is bounded by its duration.

#[path = "http_wire.rs"]
mod http_wire;

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A request as the server received it.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A field of a form-encoded body, decoded.
    pub fn form(&self, name: &str) -> Option<String> {
        self.body.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (http_wire::percent_decode(k, true) == name).then(|| http_wire::percent_decode(v, true))
        })
    }

    /// The EC2/IAM action of a Query API request.
    pub fn action(&self) -> String {
        self.form("Action").unwrap_or_default()
    }
}

/// What the server does with a request.
pub enum Reply {
    Respond {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Read the request, then answer nothing for this long (and close).
    Hang(Duration),
}

impl Reply {
    pub fn xml(status: u16, body: impl Into<String>) -> Reply {
        Reply::Respond {
            status,
            headers: vec![("Content-Type".into(), "text/xml".into())],
            body: body.into(),
        }
    }

    pub fn text(status: u16, body: impl Into<String>) -> Reply {
        Reply::Respond {
            status,
            headers: vec![("Content-Type".into(), "text/plain".into())],
            body: body.into(),
        }
    }

    /// An EC2 error reply.
    pub fn ec2_error(status: u16, code: &str, message: &str) -> Reply {
        Reply::xml(
            status,
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
                 <Message>{message}</Message></Error></Errors><RequestID>stub-{code}</RequestID></Response>"
            ),
        )
    }
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

pub struct StubServer {
    port: u16,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl StubServer {
    pub fn start(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> StubServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let acceptor = {
            let (requests, stop) = (requests.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let (requests, stop, handler) =
                        (requests.clone(), stop.clone(), handler.clone());
                    std::thread::spawn(move || serve(stream, &requests, &stop, handler.as_ref()));
                }
            })
        };
        StubServer {
            port,
            requests,
            stop,
            acceptor: Some(acceptor),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The actions of the Query API requests received, in order.
    pub fn actions(&self) -> Vec<String> {
        self.requests().iter().map(Request::action).collect()
    }
}

impl Drop for StubServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}

fn serve(stream: TcpStream, requests: &Mutex<Vec<Request>>, stop: &AtomicBool, handler: &Handler) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let Some(request) = read_request(&mut reader) else {
        return;
    };
    requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(request.clone());
    let mut stream = stream;
    match handler(&request) {
        Reply::Respond {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} Stub\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for (n, v) in headers {
                head.push_str(&format!("{n}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
            let _ = stream.flush();
        }
        Reply::Hang(duration) => {
            let until = Instant::now() + duration;
            while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let request = http_wire::read_request(reader)?;
    Some(Request {
        method: request.method,
        path: request.target,
        headers: request.headers,
        body: String::from_utf8_lossy(&request.body).into_owned(),
    })
}
