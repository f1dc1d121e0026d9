#![allow(dead_code)]
//! A fake Kubernetes API server for fault injection, on loopback (HTTP, or HTTPS with
//! optional client-certificate checks). Each test binary uses only part of it.
//!
//! It serves paginated node lists with continue tokens, watch streams scripted by the
//! test (events, bookmarks, pauses, lines cut short, 410 as HTTP status or ERROR
//! event, garbage, stalls), streaming lists (a watch with `sendInitialEvents=true`:
//! served, refused, without their end bookmark or cut by a 410, see
//! [`InitialEvents`]), node status PATCH, events POST/PATCH and leases
//! GET/PUT/POST with resourceVersion checks, and answers 4xx/5xx on demand. Every
//! request is recorded for assertions. Each connection carries one request
//! (`Connection: close`), so a stalled watch never blocks other calls.
//!
//! It is for faults only; behaviour tests against the real API run elsewhere.

#[path = "http_wire.rs"]
mod http_wire;

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One step of a scripted watch stream.
#[derive(Clone, Debug)]
pub enum WatchStep {
    /// `{"type": TYPE, "object": OBJECT}` and a newline.
    Event(&'static str, Value),
    /// A BOOKMARK at this resourceVersion.
    Bookmark(String),
    /// The BOOKMARK annotated `k8s.io/initial-events-end: "true"` at this
    /// resourceVersion, which ends a streaming list's initial events.
    InitialEventsEnd(String),
    /// An ERROR event with a 410 Expired Status.
    Expired,
    /// An ERROR event with another status code.
    Error(u16, &'static str),
    /// This text and a newline, as sent (garbage, huge lines).
    Line(String),
    /// These bytes without a newline (a line cut short when followed by `Drop`).
    Raw(Vec<u8>),
    Pause(Duration),
    /// Wait until the test sets the flag.
    WaitFor(Arc<AtomicBool>),
    /// End the stream cleanly (the last chunk), as a server timeout does.
    End,
    /// Close the connection without ending the chunked body.
    Drop,
    /// Send nothing more and keep the connection open until the server stops.
    Stall,
}

/// The answer to one watch request.
#[derive(Clone, Debug)]
pub enum WatchScript {
    Stream(Vec<WatchStep>),
    /// An HTTP error status with a Status body (e.g. 410 Expired).
    Status(u16, &'static str),
}

/// How the server answers a streaming list (a watch with `sendInitialEvents=true`).
/// The replay is of the nodes held (`put_node`), as ADDED events in name order; after
/// the end bookmark the stream goes on with the next scripted watch (or stalls).
#[derive(Clone, Debug)]
pub enum InitialEvents {
    /// As a server with the WatchList gate on (1.34 and later): the nodes, then the
    /// end bookmark at the current resourceVersion.
    Send,
    /// As a server with the gate off: this status, with the Status the real server
    /// sends ("sendInitialEvents is forbidden for watch unless ...").
    Refuse(u16),
    /// As a server that ignores the parameter: the nodes, no end bookmark, then the
    /// next scripted watch.
    NoEndBookmark,
    /// The first `n` nodes, then an ERROR 410 Expired; the stream ends there.
    ExpireAfter(usize),
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When the request had been read.
    pub at: Instant,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn is_watch(&self) -> bool {
        self.path == "/api/v1/nodes" && self.query("watch").is_some()
    }

    /// A streaming list: a watch that asks for the initial events.
    pub fn is_watch_list(&self) -> bool {
        self.is_watch() && self.query("sendInitialEvents") == Some("true")
    }

    pub fn is_list(&self) -> bool {
        self.method == "GET" && self.path == "/api/v1/nodes" && self.query("watch").is_none()
    }
}

/// An injected failure: the next `times` requests matching `method` and a path
/// starting with `path_prefix` get `status` (with `Retry-After` if set).
#[derive(Clone, Debug)]
struct Fault {
    method: String,
    path_prefix: String,
    status: u16,
    retry_after: Option<u64>,
    times: u32,
}

#[derive(Default)]
struct State {
    nodes: BTreeMap<String, Value>,
    resource_version: u64,
    /// Continue requests still to answer with 410.
    expire_continues: u32,
    watches: VecDeque<WatchScript>,
    /// Answers to the next streaming lists; `initial_events` once these are used.
    scripted_initial_events: VecDeque<InitialEvents>,
    initial_events: Option<InitialEvents>,
    faults: Vec<Fault>,
    leases: BTreeMap<String, Value>,
    events: BTreeMap<String, Value>,
    requests: Vec<Recorded>,
    /// Accepted bearer tokens; `None` accepts anything.
    tokens: Option<Vec<String>>,
    /// Bearer tokens whose requests fail with 500 (a replica cut off from the API).
    blocked_tokens: Vec<String>,
    /// Group versions (`coordination.k8s.io/v1`) that are not served: every path
    /// under `/apis/GROUP/VERSION` answers 404 as a real server's mux does.
    absent_apis: Vec<String>,
}

struct Shared {
    state: Mutex<State>,
    stopping: AtomicBool,
}

/// TLS settings of the fake server.
pub struct TlsOptions {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    /// When set, clients must present a certificate signed by this CA.
    pub client_ca_pem: Option<Vec<u8>>,
}

/// The running server; stops when dropped.
pub struct FakeApiServer {
    addr: SocketAddr,
    https: bool,
    shared: Arc<Shared>,
}

impl FakeApiServer {
    /// A plain-HTTP server on 127.0.0.1, with resourceVersion 10 and no nodes.
    pub fn start() -> FakeApiServer {
        FakeApiServer::start_with(None)
    }

    pub fn start_tls(tls: TlsOptions) -> FakeApiServer {
        FakeApiServer::start_with(Some(tls))
    }

    fn start_with(tls: Option<TlsOptions>) -> FakeApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                resource_version: 10,
                ..State::default()
            }),
            stopping: AtomicBool::new(false),
        });
        let tls_config = tls.map(|t| Arc::new(server_tls_config(t)));
        let https = tls_config.is_some();
        let thread_shared = shared.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if thread_shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = conn else { continue };
                let shared = thread_shared.clone();
                let tls = tls_config.clone();
                std::thread::spawn(move || serve_connection(stream, tls, shared));
            }
        });
        FakeApiServer {
            addr,
            https,
            shared,
        }
    }

    /// `http://127.0.0.1:PORT` or `https://…`.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds or replaces a node (as in a list; watch events are scripted separately).
    pub fn put_node(&self, node: Value) {
        let name = node["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.state().nodes.insert(name, node);
    }

    pub fn remove_node(&self, name: &str) {
        self.state().nodes.remove(name);
    }

    pub fn node(&self, name: &str) -> Option<Value> {
        self.state().nodes.get(name).cloned()
    }

    pub fn set_resource_version(&self, rv: u64) {
        self.state().resource_version = rv;
    }

    /// The next `n` list requests that carry a continue token answer 410.
    pub fn expire_continue_tokens(&self, n: u32) {
        self.state().expire_continues = n;
    }

    /// Queues the answer to the next watch request. Without a script, a watch stalls.
    pub fn script_watch(&self, script: WatchScript) {
        self.state().watches.push_back(script);
    }

    /// How every streaming list is answered from now on (default [`InitialEvents::Send`]).
    pub fn set_initial_events(&self, answer: InitialEvents) {
        self.state().initial_events = Some(answer);
    }

    /// Queues the answer to the next streaming list only.
    pub fn script_initial_events(&self, answer: InitialEvents) {
        self.state().scripted_initial_events.push_back(answer);
    }

    /// The next `times` requests of `method` on paths starting with `path_prefix`
    /// answer `status` with a Status body (and `Retry-After` if given).
    pub fn fail_next(
        &self,
        method: &str,
        path_prefix: &str,
        status: u16,
        retry_after: Option<u64>,
        times: u32,
    ) {
        self.state().faults.push(Fault {
            method: method.into(),
            path_prefix: path_prefix.into(),
            status,
            retry_after,
            times,
        });
    }

    /// Serves no `group_version` (e.g. `coordination.k8s.io/v1`) from now on, as an
    /// API server of another version or with the group switched off
    /// (`--runtime-config=GROUP/VERSION=false`): its discovery document and every
    /// resource under it answer 404 with the mux's plain-text body.
    pub fn remove_api(&self, group_version: &str) {
        self.state().absent_apis.push(group_version.to_string());
    }

    /// Only these bearer tokens are accepted; others get 401.
    pub fn accept_tokens(&self, tokens: &[&str]) {
        self.state().tokens = Some(tokens.iter().map(|t| t.to_string()).collect());
    }

    /// Requests with this bearer token fail with 500 from now on.
    pub fn block_token(&self, token: &str) {
        self.state().blocked_tokens.push(token.to_string());
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state().requests.clone()
    }

    pub fn lease(&self, namespace: &str, name: &str) -> Option<Value> {
        self.state()
            .leases
            .get(&format!("{namespace}/{name}"))
            .cloned()
    }

    pub fn events(&self) -> Vec<Value> {
        self.state().events.values().cloned().collect()
    }

    /// Waits until `pred` holds for the recorded requests; false on timeout.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&[Recorded]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if pred(&self.state().requests) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// A node object as the API server returns it, with the bulky fields real nodes have.
pub fn node_json(name: &str, rv: u64, pod_cidrs: &[&str], internal_ip: &str) -> Value {
    json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": format!("uid-{name}"),
            "resourceVersion": rv.to_string(),
            "labels": {"kubernetes.io/hostname": name},
            "managedFields": [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}]
        },
        "spec": {"podCIDR": pod_cidrs.first().copied().unwrap_or(""), "podCIDRs": pod_cidrs, "providerID": format!("fake://{name}")},
        "status": {
            "addresses": [{"type": "InternalIP", "address": internal_ip}, {"type": "Hostname", "address": name}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320000}]
        }
    })
}

pub fn status_json(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn reason_of(code: u16) -> &'static str {
    match code {
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    }
}

// ---------------------------------------------------------------------------------

trait Conn: Read + Write + Send {}
impl<T: Read + Write + Send> Conn for T {}

fn server_tls_config(t: TlsOptions) -> rustls::ServerConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&t.cert_pem)
        .collect::<Result<_, _>>()
        .expect("server certificate PEM");
    let key = PrivateKeyDer::from_pem_slice(&t.key_pem).expect("server key PEM");
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("protocol versions");
    let builder = match t.client_ca_pem {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&ca) {
                roots.add(c.expect("client CA PEM")).expect("client CA");
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    builder
        .with_single_cert(chain, key)
        .expect("server certificate and key")
}

fn serve_connection(
    stream: TcpStream,
    tls: Option<Arc<rustls::ServerConfig>>,
    shared: Arc<Shared>,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let conn: Box<dyn Conn> = match tls {
        Some(config) => match rustls::ServerConnection::new(config) {
            Ok(c) => Box::new(rustls::StreamOwned::new(c, stream)),
            Err(_) => return,
        },
        None => Box::new(stream),
    };
    let mut reader = BufReader::new(conn);
    let Some(request) = read_request(&mut reader) else {
        return;
    };
    let mut conn = reader.into_inner();
    let response = route(&shared, request);
    match response {
        Response::Full {
            status,
            body,
            retry_after,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            if let Some(s) = retry_after {
                head.push_str(&format!("Retry-After: {s}\r\n"));
            }
            head.push_str("\r\n");
            let _ = conn.write_all(head.as_bytes());
            let _ = conn.write_all(&body);
            let _ = conn.flush();
        }
        Response::Watch(steps) => stream_watch(conn, steps, &shared),
    }
}

fn read_request(reader: &mut impl BufRead) -> Option<Recorded> {
    let request = http_wire::read_request(reader)?;
    let (path, query) = request.path_and_query();
    let (path, query) = (path.to_string(), parse_query(query));
    Some(Recorded {
        method: request.method,
        path,
        query,
        headers: request.headers,
        body: request.body,
        at: Instant::now(),
    })
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_string(), http_wire::percent_decode(v, false))
        })
        .collect()
}

enum Response {
    Full {
        status: u16,
        body: Vec<u8>,
        retry_after: Option<u64>,
    },
    Watch(Vec<WatchStep>),
}

fn full(status: u16, body: &Value) -> Response {
    Response::Full {
        status,
        body: body.to_string().into_bytes(),
        retry_after: None,
    }
}

fn error(status: u16, message: &str) -> Response {
    full(status, &status_json(status, reason_of(status), message))
}

fn route(shared: &Shared, request: Recorded) -> Response {
    let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    st.requests.push(request.clone());
    let token = request
        .header("authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_string();
    if st.blocked_tokens.contains(&token) {
        return error(500, "this client is cut off (test fault)");
    }
    if let Some(tokens) = &st.tokens
        && !tokens.contains(&token)
    {
        return error(401, "Unauthorized");
    }
    if st.absent_apis.iter().any(|gv| {
        let prefix = format!("/apis/{gv}");
        request.path == prefix || request.path.starts_with(&format!("{prefix}/"))
    }) {
        return Response::Full {
            status: 404,
            body: b"404 page not found\n".to_vec(),
            retry_after: None,
        };
    }
    if let Some(f) = st.faults.iter_mut().find(|f| {
        f.times > 0 && f.method == request.method && request.path.starts_with(&f.path_prefix)
    }) {
        f.times -= 1;
        let (status, retry_after) = (f.status, f.retry_after);
        let mut body = status_json(status, reason_of(status), "injected by the test");
        if let Some(s) = retry_after {
            body["details"] = json!({"retryAfterSeconds": s});
        }
        return Response::Full {
            status,
            body: body.to_string().into_bytes(),
            retry_after,
        };
    }
    let segments: Vec<&str> = request.path.trim_start_matches('/').split('/').collect();
    match (request.method.as_str(), segments.as_slice()) {
        ("GET", ["api", "v1", "nodes"]) if request.is_watch_list() => watch_list(&mut st, &request),
        ("GET", ["api", "v1", "nodes"]) if request.query("watch").is_some() => {
            match st.watches.pop_front() {
                Some(WatchScript::Status(code, reason)) => {
                    full(code, &status_json(code, reason, "scripted watch failure"))
                }
                Some(WatchScript::Stream(steps)) => Response::Watch(steps),
                None => Response::Watch(vec![WatchStep::Stall]),
            }
        }
        ("GET", ["api", "v1", "nodes"]) => list_nodes(&mut st, &request),
        ("GET", ["api", "v1"]) => discovery("v1", &["nodes", "nodes/status", "events"]),
        ("GET", ["apis", "coordination.k8s.io", "v1"]) => {
            discovery("coordination.k8s.io/v1", &["leases"])
        }
        ("GET", ["apis", "authentication.k8s.io", "v1"]) => {
            discovery("authentication.k8s.io/v1", &["tokenreviews"])
        }
        ("GET", ["apis", "authorization.k8s.io", "v1"]) => {
            discovery("authorization.k8s.io/v1", &["subjectaccessreviews"])
        }
        ("PATCH", ["api", "v1", "nodes", name, "status"]) => {
            patch_node_status(&mut st, name, &request)
        }
        ("POST", ["api", "v1", "namespaces", _, "events"]) => {
            let body = request.json();
            let name = body["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if st.events.contains_key(&name) {
                return error(409, "event already exists");
            }
            st.events.insert(name, body.clone());
            full(201, &body)
        }
        ("PATCH", ["api", "v1", "namespaces", _, "events", name]) => {
            let patch = request.json();
            let Some(event) = st.events.get_mut(*name) else {
                return error(404, "event not found");
            };
            if let (Some(e), Some(p)) = (event.as_object_mut(), patch.as_object()) {
                for (k, v) in p {
                    e.insert(k.clone(), v.clone());
                }
            }
            full(200, &event.clone())
        }
        (
            method,
            [
                "apis",
                "coordination.k8s.io",
                "v1",
                "namespaces",
                ns,
                "leases",
                rest @ ..,
            ],
        ) => lease(&mut st, method, ns, rest.first().copied(), &request),
        _ => error(404, "no such path in the fake API server"),
    }
}

/// The discovery document (`APIResourceList`) of `group_version`.
fn discovery(group_version: &str, resources: &[&str]) -> Response {
    let resources: Vec<Value> = resources
        .iter()
        .map(|name| json!({"name": name, "namespaced": false, "kind": "", "verbs": []}))
        .collect();
    full(
        200,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

fn list_nodes(st: &mut State, request: &Recorded) -> Response {
    let limit: usize = request
        .query("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let offset = match request.query("continue") {
        Some(token) => {
            if st.expire_continues > 0 {
                st.expire_continues -= 1;
                return full(
                    410,
                    &status_json(410, "Expired", "The provided continue parameter is too old"),
                );
            }
            match token.strip_prefix("page-").and_then(|o| o.parse().ok()) {
                Some(o) => o,
                None => return error(400, "bad continue token"),
            }
        }
        None => 0,
    };
    let items: Vec<Value> = st
        .nodes
        .values()
        .skip(offset)
        .take(limit)
        .cloned()
        .collect();
    let next = offset + items.len();
    let mut metadata = json!({"resourceVersion": st.resource_version.to_string()});
    if next < st.nodes.len() {
        metadata["continue"] = json!(format!("page-{next}"));
        metadata["remainingItemCount"] = json!(st.nodes.len() - next);
    }
    full(
        200,
        &json!({"kind": "NodeList", "apiVersion": "v1", "metadata": metadata, "items": items}),
    )
}

/// A streaming list: the parameters the real server requires, then the replay of
/// the nodes as [`InitialEvents`] says, then the next scripted watch.
fn watch_list(st: &mut State, request: &Recorded) -> Response {
    if request.query("resourceVersionMatch") != Some("NotOlderThan")
        || request.query("allowWatchBookmarks") != Some("true")
    {
        return error(
            422,
            "sendInitialEvents requires resourceVersionMatch=NotOlderThan and \
             allowWatchBookmarks=true (fake API server)",
        );
    }
    let answer = st
        .scripted_initial_events
        .pop_front()
        .or_else(|| st.initial_events.clone())
        .unwrap_or(InitialEvents::Send);
    let replay = |n: usize| -> Vec<WatchStep> {
        st.nodes
            .values()
            .take(n)
            .map(|node| WatchStep::Event("ADDED", node.clone()))
            .collect()
    };
    let mut steps = match answer {
        InitialEvents::Refuse(code) => {
            return full(
                code,
                &status_json(
                    code,
                    reason_of(code),
                    "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: \
                     sendInitialEvents is forbidden for watch unless the WatchList feature \
                     gate is enabled",
                ),
            );
        }
        InitialEvents::ExpireAfter(n) => {
            let mut steps = replay(n);
            steps.extend([WatchStep::Expired, WatchStep::End]);
            return Response::Watch(steps);
        }
        InitialEvents::Send => {
            let mut steps = replay(usize::MAX);
            steps.push(WatchStep::InitialEventsEnd(st.resource_version.to_string()));
            steps
        }
        InitialEvents::NoEndBookmark => replay(usize::MAX),
    };
    match st.watches.pop_front() {
        Some(WatchScript::Status(code, reason)) => {
            full(code, &status_json(code, reason, "scripted watch failure"))
        }
        Some(WatchScript::Stream(rest)) => {
            steps.extend(rest);
            Response::Watch(steps)
        }
        None => {
            steps.push(WatchStep::Stall);
            Response::Watch(steps)
        }
    }
}

fn patch_node_status(st: &mut State, name: &str, request: &Recorded) -> Response {
    st.resource_version += 1;
    let rv = st.resource_version;
    let Some(node) = st.nodes.get_mut(name) else {
        return error(404, &format!("nodes \"{name}\" not found"));
    };
    let patch = request.json();
    let conditions = node["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut merged: Vec<Value> = conditions;
    for c in patch["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        merged.retain(|old| old["type"] != c["type"]);
        merged.push(c);
    }
    node["status"]["conditions"] = Value::Array(merged);
    node["metadata"]["resourceVersion"] = json!(rv.to_string());
    full(200, &node.clone())
}

fn lease(
    st: &mut State,
    method: &str,
    ns: &str,
    name: Option<&str>,
    request: &Recorded,
) -> Response {
    match (method, name) {
        ("GET", Some(name)) => match st.leases.get(&format!("{ns}/{name}")) {
            Some(l) => full(200, l),
            None => error(
                404,
                &format!("leases.coordination.k8s.io \"{name}\" not found"),
            ),
        },
        ("POST", None) => {
            let mut body = request.json();
            let name = body["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let key = format!("{ns}/{name}");
            if st.leases.contains_key(&key) {
                return full(
                    409,
                    &status_json(
                        409,
                        "AlreadyExists",
                        "leases.coordination.k8s.io already exists",
                    ),
                );
            }
            st.resource_version += 1;
            body["metadata"]["resourceVersion"] = json!(st.resource_version.to_string());
            st.leases.insert(key, body.clone());
            full(201, &body)
        }
        ("PUT", Some(name)) => {
            let key = format!("{ns}/{name}");
            let mut body = request.json();
            let Some(current) = st.leases.get(&key) else {
                return error(404, "lease not found");
            };
            if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
                return full(
                    409,
                    &status_json(
                        409,
                        "Conflict",
                        "Operation cannot be fulfilled on leases.coordination.k8s.io: the object has been modified",
                    ),
                );
            }
            st.resource_version += 1;
            body["metadata"]["resourceVersion"] = json!(st.resource_version.to_string());
            st.leases.insert(key, body.clone());
            full(200, &body)
        }
        _ => error(405, "method not allowed"),
    }
}

fn stream_watch(mut conn: Box<dyn Conn>, steps: Vec<WatchStep>, shared: &Shared) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    if conn
        .write_all(head.as_bytes())
        .and_then(|_| conn.flush())
        .is_err()
    {
        return;
    }
    let stopping = || shared.stopping.load(Ordering::SeqCst);
    let chunk = |conn: &mut Box<dyn Conn>, data: &[u8]| -> bool {
        let mut out = format!("{:x}\r\n", data.len()).into_bytes();
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        conn.write_all(&out).and_then(|_| conn.flush()).is_ok()
    };
    let line = |v: Value| {
        let mut s = v.to_string().into_bytes();
        s.push(b'\n');
        s
    };
    for step in steps {
        let ok = match step {
            WatchStep::Event(kind, object) => {
                chunk(&mut conn, &line(json!({"type": kind, "object": object})))
            }
            WatchStep::Bookmark(rv) => chunk(
                &mut conn,
                &line(
                    json!({"type": "BOOKMARK", "object": {"kind": "Node", "apiVersion": "v1",
                        "metadata": {"resourceVersion": rv}}}),
                ),
            ),
            WatchStep::InitialEventsEnd(rv) => chunk(
                &mut conn,
                &line(
                    json!({"type": "BOOKMARK", "object": {"kind": "Node", "apiVersion": "v1",
                        "metadata": {"resourceVersion": rv,
                            "annotations": {"k8s.io/initial-events-end": "true"}}}}),
                ),
            ),
            WatchStep::Expired => chunk(
                &mut conn,
                &line(
                    json!({"type": "ERROR", "object": status_json(410, "Expired", "too old resource version")}),
                ),
            ),
            WatchStep::Error(code, reason) => chunk(
                &mut conn,
                &line(json!({"type": "ERROR", "object": status_json(code, reason, "scripted")})),
            ),
            WatchStep::Line(text) => {
                let mut b = text.into_bytes();
                b.push(b'\n');
                chunk(&mut conn, &b)
            }
            WatchStep::Raw(bytes) => chunk(&mut conn, &bytes),
            WatchStep::Pause(d) => {
                let end = Instant::now() + d;
                while Instant::now() < end && !stopping() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                true
            }
            WatchStep::WaitFor(flag) => {
                while !flag.load(Ordering::SeqCst) && !stopping() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                true
            }
            WatchStep::End => {
                let _ = conn.write_all(b"0\r\n\r\n");
                let _ = conn.flush();
                return;
            }
            WatchStep::Drop => return,
            WatchStep::Stall => {
                while !stopping() {
                    std::thread::sleep(Duration::from_millis(20));
                }
                return;
            }
        };
        if !ok {
            return;
        }
    }
    let _ = conn.write_all(b"0\r\n\r\n");
    let _ = conn.flush();
}
