#![allow(dead_code)]
//! An HTTP-aware fault layer in front of an EC2 Query API emulator (moto), for the
//! chaos runs: moto cannot fail on purpose, so this layer answers a request itself
//! with EC2's throttling or server errors, or forwards it and loses the reply (the
//! change is made, the client never learns it: a timeout with effect), or holds
//! replies back until released. It also keeps the request log the chaos checker
//! reads: every request with the credential that signed it, when it reached moto and
//! what moto answered, also when the client never saw that answer.
//!
//! With [`HttpFaultLayer::ec2_buckets`] it also throttles as EC2 does: each action in
//! a token bucket of its own, of EC2's documented size and refill rate
//! ([`EC2_BUCKETS`]), answering `RequestLimitExceeded` when the action's bucket is
//! empty, so a test can show that the controller's budget never gets one.
//!
//! With [`HttpFaultLayer::ec2_interfaces`] it also enforces what EC2 does with
//! instances of several network interfaces and moto does not (each rule cites the EC2
//! API Reference):
//!
//! - `CreateRoute`, `ReplaceRoute` and `ModifyInstanceAttribute` with the
//!   `InstanceId` of such an instance are answered 400 `InvalidInstanceID`, "There
//!   are multiple interfaces attached to instance '…'. Please specify an interface ID
//!   for the operation instead." (CreateRoute, `InstanceId`: "The operation fails if
//!   you specify an instance ID unless exactly one network interface is attached.";
//!   ReplaceRoute's `InstanceId` is the same parameter; ModifyInstanceAttribute
//!   changes the attribute of the instance's one interface, kubernetes/kubernetes#92783
//!   shows EC2's answer);
//! - `DescribeRouteTables` lists a route to an instance with its interface too, and a
//!   route to an attached interface with its instance (the `Route` data type has both
//!   `instanceId` and `networkInterfaceId`; EC2 fills both, moto only the one given).
//!
//! [`HttpFaultLayer::rewrite`] changes moto's replies of one action, for what moto
//! cannot hold at all (a route propagated from a virtual private gateway).
//!
//! [`HttpFaultLayer::start_neutron`] puts the same layer in front of a real Neutron
//! (the OpenStack chaos run): a request's action is Neutron's call as the provider's
//! metrics name it (`routers.add_extraroutes`, `ports.update`, …), its credential the
//! Keystone token it carries, and the injected errors are Neutron's JSON faults.
//!
//! One request per connection to the server (`Connection: close`), so a reply is
//! read to its end; clients keep their connection to the layer. Loopback only;
//! threads end when the layer is dropped.

// The Hetzner double has its own copy of this module in the same test binaries.
#[allow(clippy::duplicate_mod)]
#[path = "http_wire.rs"]
mod http_wire;

use std::collections::BTreeMap;
use std::io::{BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_wire::{WireRequest, percent_decode, read_request};

/// How quickly held replies notice a release.
const TICK: Duration = Duration::from_millis(20);
/// How often an idle client connection checks whether the layer stopped.
const IDLE_POLL: Duration = Duration::from_millis(500);

/// What the layer does to one request instead of passing it through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 503 `RequestLimitExceeded`, as EC2 throttles; nothing reaches moto.
    Throttle,
    /// 500 `InternalError`; nothing reaches moto.
    InternalError,
    /// 503 `Unavailable`; nothing reaches moto.
    Unavailable,
    /// Forwarded, moto acts and answers, and the client's connection is closed
    /// without the reply.
    LoseReply,
}

impl Answer {
    fn error(self, dialect: Dialect) -> Option<(u16, &'static str)> {
        match (dialect, self) {
            (_, Answer::LoseReply) => None,
            (Dialect::Ec2, Answer::Throttle) => Some((503, "RequestLimitExceeded")),
            (Dialect::Ec2, Answer::InternalError) => Some((500, "InternalError")),
            (Dialect::Ec2, Answer::Unavailable) => Some((503, "Unavailable")),
            // What a rate-limiting front (e.g. HAProxy) and Neutron's WSGI layer answer.
            (Dialect::Neutron, Answer::Throttle) => Some((429, "HTTPTooManyRequests")),
            (Dialect::Neutron, Answer::InternalError) => Some((500, "HTTPInternalServerError")),
            (Dialect::Neutron, Answer::Unavailable) => Some((503, "HTTPServiceUnavailable")),
        }
    }
}

/// The API behind the layer: how a request names its action and credential, and how
/// an error is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dialect {
    /// EC2's Query API (moto).
    #[default]
    Ec2,
    /// Neutron's REST API.
    Neutron,
}

/// One request as the layer saw it.
#[derive(Clone, Debug)]
pub struct Exchange {
    /// When it was sent on to moto, or answered by the layer.
    pub at: Instant,
    /// The access key ID of the request's SigV4 `Credential` (EC2), or the
    /// request's Keystone token (Neutron).
    pub key_id: String,
    /// `Action` and the other form parameters (EC2); the call, and `id` (the
    /// resource's) and `body` (the request's JSON) (Neutron).
    pub action: String,
    pub params: BTreeMap<String, String>,
    /// Moto's status, or 0 when the request never reached moto.
    pub status: u16,
    /// Moto's error code, if it answered one.
    pub code: Option<String>,
    /// The fault injected, if any.
    pub fault: Option<Answer>,
}

impl Exchange {
    pub fn reached_cloud(&self) -> bool {
        self.status != 0
    }
}

struct Injected {
    /// `None` matches any action.
    action: Option<String>,
    remaining: usize,
    answer: Answer,
}

/// EC2's request buckets for the actions the AWS provider sends, as "Request
/// throttling for the Amazon EC2 API" documents them
/// (<https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html>):
/// `(action, size, refill per second)`. Non-mutating actions (with filters): 100
/// and 20 a second; mutating actions: 200 and 5 a second. Each action has a bucket
/// of its own.
pub const EC2_BUCKETS: &[(&str, f64, f64)] = &[
    ("DescribeRouteTables", 100.0, 20.0),
    ("DescribeInstances", 100.0, 20.0),
    ("CreateRoute", 200.0, 5.0),
    ("ReplaceRoute", 200.0, 5.0),
    ("DeleteRoute", 200.0, 5.0),
    ("ModifyInstanceAttribute", 200.0, 5.0),
    ("ModifyNetworkInterfaceAttribute", 200.0, 5.0),
    ("DescribeSubnets", 100.0, 20.0),
    ("DescribeManagedPrefixLists", 100.0, 20.0),
];

/// One action's bucket, refilled from `updated`.
struct Bucket {
    size: f64,
    per_second: f64,
    tokens: f64,
    updated: Instant,
}

impl Bucket {
    /// Takes a token if there is one.
    fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.size);
        self.updated = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Rewrites the body of a reply.
type Rewrite = Box<dyn Fn(&str) -> String + Send + Sync>;

#[derive(Default)]
struct Shared {
    dialect: Dialect,
    injected: Mutex<Vec<Injected>>,
    /// Each instance's network interfaces, primary first, when EC2's interface rules
    /// are on.
    interfaces: Mutex<BTreeMap<String, Vec<String>>>,
    rewrites: Mutex<Vec<(String, Rewrite)>>,
    /// EC2's buckets by action, when on.
    buckets: Mutex<BTreeMap<String, Bucket>>,
    hold: AtomicBool,
    stop: AtomicBool,
    log: Mutex<Vec<Exchange>>,
}

pub struct HttpFaultLayer {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl HttpFaultLayer {
    /// Listens on a loopback port chosen by the OS and forwards to `target`, an EC2
    /// Query API.
    pub fn start(target: SocketAddr) -> HttpFaultLayer {
        HttpFaultLayer::start_for(target, Dialect::Ec2)
    }

    /// The same in front of a Neutron.
    pub fn start_neutron(target: SocketAddr) -> HttpFaultLayer {
        HttpFaultLayer::start_for(target, Dialect::Neutron)
    }

    fn start_for(target: SocketAddr, dialect: Dialect) -> HttpFaultLayer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fault layer");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("layer address");
        let shared = Arc::new(Shared {
            dialect,
            ..Shared::default()
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name(format!("http-fault {addr}"))
            .spawn(move || {
                while !s.stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            let s = s.clone();
                            let _ = std::thread::Builder::new()
                                .name("http-fault conn".into())
                                .spawn(move || serve(client, target, &s));
                        }
                        Err(_) => std::thread::sleep(TICK),
                    }
                }
            })
            .expect("spawn the fault layer");
        HttpFaultLayer { addr, shared }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next `times` requests of `action` (any action if `None`) get `answer`.
    pub fn inject(&self, action: Option<&str>, times: usize, answer: Answer) {
        self.shared
            .injected
            .lock()
            .expect("injected")
            .push(Injected {
                action: action.map(str::to_string),
                remaining: times,
                answer,
            });
    }

    /// From now on, throttles each action in `buckets` as EC2 does
    /// (`(action, size, refill per second)`, e.g. [`EC2_BUCKETS`]), starting full.
    pub fn ec2_buckets(&self, buckets: &[(&str, f64, f64)]) {
        let now = Instant::now();
        let mut map = self.shared.buckets.lock().expect("buckets");
        for &(action, size, per_second) in buckets {
            map.insert(
                action.to_string(),
                Bucket {
                    size,
                    per_second,
                    tokens: size,
                    updated: now,
                },
            );
        }
    }

    /// From now on, enforces EC2's rules for instances with several interfaces (see
    /// the module documentation); `interfaces`: `(interface, instance, device index)`
    /// of every attached interface, as moto's `DescribeNetworkInterfaces` says.
    pub fn ec2_interfaces(&self, interfaces: &[(String, String, u32)]) {
        let mut sorted = interfaces.to_vec();
        sorted.sort_by_key(|(_, instance, index)| (instance.clone(), *index));
        let mut map = self.shared.interfaces.lock().expect("interfaces");
        map.clear();
        for (eni, instance, _) in sorted {
            map.entry(instance).or_default().push(eni);
        }
    }

    /// From now on, passes the body of every successful reply to `action` through
    /// `rewrite`.
    pub fn rewrite(&self, action: &str, rewrite: impl Fn(&str) -> String + Send + Sync + 'static) {
        self.shared
            .rewrites
            .lock()
            .expect("rewrites")
            .push((action.to_string(), Box::new(rewrite)));
    }

    /// Requests the layer refused for an empty bucket or an injected throttle.
    pub fn throttled(&self) -> Vec<Exchange> {
        self.log()
            .into_iter()
            .filter(|e| e.fault == Some(Answer::Throttle))
            .collect()
    }

    /// Forgets faults not yet used and releases held replies.
    pub fn clear(&self) {
        self.shared.injected.lock().expect("injected").clear();
        self.hold(false);
    }

    /// While on, moto's replies wait in the layer (the requests are forwarded).
    pub fn hold(&self, on: bool) {
        self.shared.hold.store(on, Ordering::SeqCst);
    }

    /// Forgets the requests seen so far.
    pub fn clear_log(&self) {
        self.shared.log.lock().expect("log").clear();
    }

    pub fn log(&self) -> Vec<Exchange> {
        self.shared.log.lock().expect("log").clone()
    }
}

impl Drop for HttpFaultLayer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.hold(false);
    }
}

fn serve(client: TcpStream, target: SocketAddr, s: &Shared) {
    let _ = client.set_read_timeout(Some(IDLE_POLL));
    let mut out = match client.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    };
    let mut reader = BufReader::new(client);
    while !s.stop.load(Ordering::SeqCst) {
        let Some(request) = read_request_patiently(&mut reader, s) else {
            break;
        };
        let (action, params, key_id) = match s.dialect {
            Dialect::Ec2 => {
                let (action, params) = form(&request);
                (action, params, key_id(&request))
            }
            Dialect::Neutron => {
                let (action, params) = neutron_call(&request);
                let token = request.header("x-auth-token").unwrap_or_default();
                (action, params, token.to_string())
            }
        };
        let fault = take_fault(s, &action).or_else(|| over_budget(s, &action));
        let mut exchange = Exchange {
            at: Instant::now(),
            key_id,
            action,
            params,
            status: 0,
            code: None,
            fault,
        };
        let refusal = fault
            .and_then(|f| f.error(s.dialect))
            .map(|(status, code)| (status, code.to_string(), "injected by the chaos run".into()))
            .or_else(|| ec2_refusal(s, &exchange.action, &exchange.params));
        if let Some((status, code, message)) = refusal {
            if fault.is_none() {
                exchange.code = Some(code.clone());
            }
            s.log.lock().expect("log").push(exchange);
            let (content_type, body) = match s.dialect {
                Dialect::Ec2 => (
                    "text/xml",
                    format!(
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
                         <Message>{message}</Message></Error></Errors>\
                         <RequestID>fault-layer</RequestID></Response>"
                    ),
                ),
                Dialect::Neutron => (
                    "application/json",
                    serde_json::json!({"NeutronError": {"type": code, "message": message,
                        "detail": ""}})
                    .to_string(),
                ),
            };
            if write_reply(&mut out, status, content_type, body.as_bytes()).is_err() {
                break;
            }
            continue;
        }
        let reply = forward(&request, target);
        let Some((status, content_type, mut body)) = reply else {
            // Moto unreachable: the client sees its connection close.
            s.log.lock().expect("log").push(exchange);
            break;
        };
        if status == 200 {
            body = rewritten(s, &exchange.action, body);
        }
        exchange.status = status;
        exchange.code = match s.dialect {
            Dialect::Ec2 => error_code(&body),
            Dialect::Neutron => neutron_error_type(&body),
        };
        s.log.lock().expect("log").push(exchange);
        if fault == Some(Answer::LoseReply) {
            break;
        }
        while s.hold.load(Ordering::SeqCst) && !s.stop.load(Ordering::SeqCst) {
            std::thread::sleep(TICK);
        }
        if write_reply(&mut out, status, &content_type, &body).is_err() {
            break;
        }
    }
    let _ = out.shutdown(Shutdown::Both);
}

/// The next request, waiting across read timeouts (an idle keep-alive connection)
/// until the client closes or the layer stops.
fn read_request_patiently(reader: &mut BufReader<TcpStream>, s: &Shared) -> Option<WireRequest> {
    while reader.buffer().is_empty() {
        if s.stop.load(Ordering::SeqCst) {
            return None;
        }
        // Waits for the first byte of the next request without consuming it.
        match reader.get_ref().peek(&mut [0u8; 1]) {
            Ok(0) => return None,
            Ok(_) => break,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return None,
        }
    }
    let _ = reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)));
    let request = read_request(reader);
    let _ = reader.get_ref().set_read_timeout(Some(IDLE_POLL));
    request
}

/// EC2's answer to a request moto would take but EC2 refuses: an `InstanceId` of an
/// instance with several interfaces where EC2 wants an interface (see the module
/// documentation for the rule and its source).
fn ec2_refusal(
    s: &Shared,
    action: &str,
    params: &BTreeMap<String, String>,
) -> Option<(u16, String, String)> {
    if !matches!(
        action,
        "CreateRoute" | "ReplaceRoute" | "ModifyInstanceAttribute"
    ) {
        return None;
    }
    let instance = params.get("InstanceId")?;
    let interfaces = s.interfaces.lock().expect("interfaces");
    (interfaces.get(instance)?.len() > 1).then(|| {
        (
            400,
            "InvalidInstanceID".to_string(),
            format!(
                "There are multiple interfaces attached to instance '{instance}'. Please \
                 specify an interface ID for the operation instead."
            ),
        )
    })
}

/// The body after the EC2 rules (`DescribeRouteTables` names instance and interface)
/// and the test's rewrites of `action`.
fn rewritten(s: &Shared, action: &str, body: Vec<u8>) -> Vec<u8> {
    let interfaces = s.interfaces.lock().expect("interfaces").clone();
    let rewrites = s.rewrites.lock().expect("rewrites");
    if (interfaces.is_empty() || action != "DescribeRouteTables")
        && !rewrites.iter().any(|(a, _)| a == action)
    {
        return body;
    }
    let mut text = String::from_utf8_lossy(&body).into_owned();
    if !interfaces.is_empty() && action == "DescribeRouteTables" {
        text = with_both_targets(&text, &interfaces);
    }
    for (_, rewrite) in rewrites.iter().filter(|(a, _)| a == action) {
        text = rewrite(&text);
    }
    text.into_bytes()
}

/// Adds the missing half of each route's target as EC2 lists it: the primary
/// interface of a route's instance, the instance of a route's interface.
fn with_both_targets(xml: &str, interfaces: &BTreeMap<String, Vec<String>>) -> String {
    let value = |item: &str, tag: &str| -> Option<String> {
        let open = format!("<{tag}>");
        let start = item.find(&open)? + open.len();
        let end = item[start..].find(&format!("</{tag}>"))? + start;
        Some(item[start..end].to_string())
    };
    let mut out = String::with_capacity(xml.len() + 256);
    let mut rest = xml;
    while let Some(start) = rest.find("<routeSet>") {
        let Some(len) = rest[start..].find("</routeSet>") else {
            break;
        };
        let (head, set, tail) = (
            &rest[..start],
            &rest[start..start + len],
            &rest[start + len..],
        );
        out.push_str(head);
        let mut routes = Vec::new();
        for item in set.split("<item>").skip(1) {
            let instance = value(item, "instanceId");
            let interface = value(item, "networkInterfaceId");
            let extra = match (instance, interface) {
                (Some(i), None) => interfaces
                    .get(&i)
                    .and_then(|enis| enis.first())
                    .map(|eni| format!("<networkInterfaceId>{eni}</networkInterfaceId>")),
                (None, Some(eni)) => interfaces
                    .iter()
                    .find(|(_, enis)| enis.contains(&eni))
                    .map(|(i, _)| format!("<instanceId>{i}</instanceId>")),
                _ => None,
            };
            routes.push(match extra {
                Some(extra) => item.replacen("</item>", &format!("{extra}</item>"), 1),
                None => item.to_string(),
            });
        }
        out.push_str(set.split("<item>").next().unwrap_or_default());
        for r in routes {
            out.push_str("<item>");
            out.push_str(&r);
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// `Throttle` when the action's bucket (if it has one) is empty, as EC2 answers.
fn over_budget(s: &Shared, action: &str) -> Option<Answer> {
    let mut buckets = s.buckets.lock().expect("buckets");
    let bucket = buckets.get_mut(action)?;
    (!bucket.take(Instant::now())).then_some(Answer::Throttle)
}

fn take_fault(s: &Shared, action: &str) -> Option<Answer> {
    let mut injected = s.injected.lock().expect("injected");
    let i = injected
        .iter()
        .position(|f| f.action.as_deref().is_none_or(|a| a == action))?;
    let answer = injected[i].answer;
    injected[i].remaining -= 1;
    if injected[i].remaining == 0 {
        injected.remove(i);
    }
    Some(answer)
}

/// The form parameters of a Query API request (body, or query string).
fn form(request: &WireRequest) -> (String, BTreeMap<String, String>) {
    let body = String::from_utf8_lossy(&request.body);
    let (_, query) = request.path_and_query();
    let raw = if body.is_empty() { query } else { &body };
    let params: BTreeMap<String, String> = raw
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (percent_decode(k, true), percent_decode(v, true)))
        .collect();
    let action = params.get("Action").cloned().unwrap_or_default();
    (action, params)
}

/// A Neutron request as `(call, {id, body})`: the call named as the OpenStack
/// provider's metrics name it (`routers.show`, `routers.update`,
/// `routers.add_extraroutes`, `ports.list`, `ports.update`, …).
fn neutron_call(request: &WireRequest) -> (String, BTreeMap<String, String>) {
    let (path, _) = request.path_and_query();
    let parts: Vec<&str> = path
        .trim_start_matches("/v2.0/")
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let verb = match (request.method.as_str(), parts.len()) {
        ("GET", 1) => "list",
        ("GET", _) => "show",
        ("POST", _) => "create",
        ("DELETE", _) => "delete",
        ("PUT", 3) => parts[2],
        _ => "update",
    };
    let mut params = BTreeMap::new();
    if let Some(id) = parts.get(1) {
        params.insert("id".to_string(), (*id).to_string());
    }
    params.insert(
        "body".to_string(),
        String::from_utf8_lossy(&request.body).into_owned(),
    );
    let resource = parts.first().copied().unwrap_or_default();
    (format!("{resource}.{verb}"), params)
}

/// `type` of Neutron's `{"NeutronError": {"type": …}}`.
fn neutron_error_type(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value["NeutronError"]["type"].as_str().map(str::to_string)
}

/// `AKID` of `Authorization: AWS4-HMAC-SHA256 Credential=AKID/date/region/...`.
fn key_id(request: &WireRequest) -> String {
    request
        .header("authorization")
        .and_then(|a| a.split("Credential=").nth(1))
        .and_then(|c| c.split('/').next())
        .unwrap_or_default()
        .to_string()
}

/// Sends the request to moto on a fresh connection and reads the whole reply:
/// `(status, content type, body)`.
fn forward(request: &WireRequest, target: SocketAddr) -> Option<(u16, String, Vec<u8>)> {
    let mut server = TcpStream::connect_timeout(&target, Duration::from_secs(5)).ok()?;
    server
        .set_read_timeout(Some(Duration::from_secs(60)))
        .ok()?;
    let mut head = format!("{} {} HTTP/1.1\r\n", request.method, request.target);
    for (k, v) in &request.headers {
        if !k.eq_ignore_ascii_case("connection") && !k.eq_ignore_ascii_case("content-length") {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        request.body.len()
    ));
    server.write_all(head.as_bytes()).ok()?;
    server.write_all(&request.body).ok()?;
    let mut raw = Vec::new();
    server.read_to_end(&mut raw).ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
    let header = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    if let Some(n) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.truncate(n);
    } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        body = dechunk(&body)?;
    }
    let content_type = header("content-type").unwrap_or_else(|| "text/xml".into());
    Some((status, content_type, body))
}

fn dechunk(mut raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = raw.windows(2).position(|w| w == b"\r\n")?;
        let size_text = String::from_utf8_lossy(&raw[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(raw.get(..size)?);
        raw = raw.get(size + 2..)?;
    }
}

fn error_code(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let start = text.find("<Code>")? + "<Code>".len();
    let end = text[start..].find("</Code>")? + start;
    Some(text[start..end].to_string())
}

fn write_reply(
    out: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        reason(status),
        body.len()
    );
    out.write_all(head.as_bytes())?;
    out.write_all(body)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
