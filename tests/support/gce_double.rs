//! A Compute Engine API test double: a loopback HTTP/1.1 server (std only, one thread
//! per connection) that serves what the GCE provider uses, as the Compute API v1 does
//! (checked against google.golang.org/api/compute/v1 by `tests/gce_conformance.rs`):
//!
//! - `/compute/v1/projects/{p}/global/routes`: list (with the API's `filter`
//!   expressions of `(field eq regexp)` predicates, `maxResults` and `pageToken`),
//!   insert and delete (each answering an Operation; the change happens when the
//!   operation is done), get;
//! - `/compute/v1/projects/{p}/global/operations/{op}` (get) and `…/{op}/wait` (POST, a
//!   long poll that returns when the operation is done or after [`WAIT_SLICE`]);
//! - `/compute/v1/projects/{p}/zones/{z}/instances/{name}` (get, with `canIpForward`);
//! - `/compute/v1/projects/{p}/zones` (list: the region's zones, which
//!   cloud-provider-gcp reads once at start with `multizone = true`);
//! - `/compute/v1/projects/{p}` (get, with the `ROUTES` quota's limit and usage);
//! - the metadata server's token (`/computeMetadata/v1/...`, `Metadata-Flavor: Google`)
//!   and an OAuth token endpoint (`POST /token`) that checks a service-account JWT's
//!   RS256 signature with the test key's public part.
//!
//! Faults: slow operations, an operation that ends in error, any status and reason
//! for a request (403 `rateLimitExceeded`, 409, ...), and a reply lost after the
//! change was made. Every request is recorded with its method, path, token and when it
//! was answered (the last [`LOG_LIMIT`]), the token endpoints' requests by endpoint
//! ([`GceDouble::token_calls`]), and every route change when it took effect
//! ([`GceDouble::applied`]), so that a benchmark can count a controller's requests by
//! method and time its routes.
#![allow(dead_code)]
// Each test binary uses only part of this support module.

#[allow(clippy::duplicate_mod)]
#[path = "double_server.rs"]
mod double_server;
#[path = "http_wire.rs"]
mod http_wire;

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use serde_json::{Value, json};

use double_server::DoubleServer;

/// The longest a `wait` call holds its reply (GCE holds up to two minutes).
pub const WAIT_SLICE: Duration = Duration::from_secs(2);

/// How many requests (and, separately, token requests and applied route changes) the
/// double remembers; the oldest go first. A benchmark's run is far below it.
pub const LOG_LIMIT: usize = 200_000;

/// The zones of the double's region (`europe-west1`), in `zones.list` order.
pub const ZONES: [&str; 3] = ["europe-west1-b", "europe-west1-c", "europe-west1-d"];

/// What an injected fault does to a matching request.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer with this status and Google's error reason, changing nothing.
    Error { status: u16, reason: String },
    /// Make the change, then close the connection without an answer.
    LostReply,
}

impl Fault {
    pub fn error(status: u16, reason: &str) -> Fault {
        Fault::Error {
            status,
            reason: reason.to_string(),
        }
    }
}

/// One request as the double saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub method: String,
    /// The path without `/compute/v1`, e.g. `/projects/p/global/routes`.
    pub path: String,
    pub query: String,
    /// The status answered; 0 when the connection was closed instead.
    pub status: u16,
    pub token: String,
    /// When the double answered (or closed the connection).
    pub at: SystemTime,
}

/// A route change as it took effect (its operation done without error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// `insert` or `delete`.
    pub kind: &'static str,
    pub name: String,
    pub dest_range: String,
    pub at: SystemTime,
}

impl Recorded {
    /// `routes.list`, `routes.insert`, `routes.delete`, `routes.get`,
    /// `globalOperations.get`, `globalOperations.wait`, `instances.get`,
    /// `zones.list`, `projects.get`, or `other`.
    pub fn call(&self) -> &'static str {
        let parts: Vec<&str> = self.path.trim_matches('/').split('/').collect();
        match (self.method.as_str(), parts.as_slice()) {
            ("GET", ["projects", _]) => "projects.get",
            ("GET", ["projects", _, "global", "routes"]) => "routes.list",
            ("POST", ["projects", _, "global", "routes"]) => "routes.insert",
            ("GET", ["projects", _, "global", "routes", _]) => "routes.get",
            ("DELETE", ["projects", _, "global", "routes", _]) => "routes.delete",
            ("GET", ["projects", _, "global", "operations", _]) => "globalOperations.get",
            ("POST", ["projects", _, "global", "operations", _, "wait"]) => "globalOperations.wait",
            ("GET", ["projects", _, "zones", _, "instances", _]) => "instances.get",
            ("GET", ["projects", _, "zones"]) => "zones.list",
            _ => "other",
        }
    }
}

/// A route as the double holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteEntry {
    pub name: String,
    pub network: String,
    pub dest_range: String,
    pub next_hop_instance: String,
    pub priority: i64,
    pub description: String,
    pub id: u64,
}

#[derive(Clone, Debug)]
struct InstanceEntry {
    id: u64,
    can_ip_forward: bool,
}

#[derive(Clone, Debug)]
enum Change {
    Insert(RouteEntry),
    Delete(String),
}

#[derive(Clone, Debug)]
struct OperationEntry {
    id: u64,
    name: String,
    kind: &'static str,
    target: String,
    target_id: u64,
    change: Option<Change>,
    finishes: Instant,
    error: Option<(String, String)>,
    done: bool,
}

struct State {
    routes: BTreeMap<String, RouteEntry>,
    instances: BTreeMap<(String, String, String), InstanceEntry>,
    networks: Vec<(String, String)>,
    operations: BTreeMap<String, OperationEntry>,
    next_id: u64,
    operation_duration: Duration,
    failing_operations: VecDeque<(String, String)>,
    faults: Vec<(String, String, usize, Fault)>,
    routes_quota: usize,
    tokens: Vec<String>,
    token_lifetime: u64,
    issued: u64,
    log: VecDeque<Recorded>,
    token_log: VecDeque<(&'static str, SystemTime)>,
    applied: VecDeque<Applied>,
    jwt_exchanges: Vec<Value>,
    metadata_zone: String,
    alt_token_body: String,
    alt_bodies: u64,
}

struct Inner {
    state: Mutex<State>,
    changed: Condvar,
    base: String,
    project: String,
    public_key: Option<Vec<u8>>,
}

/// The double; stops when dropped.
pub struct GceDouble {
    inner: Arc<Inner>,
    server: DoubleServer,
}

impl GceDouble {
    /// A double for project `project` with network `network`, no routes, no
    /// instances, operations done after 50 ms and a `ROUTES` quota of 250 (GCE's
    /// default). Tokens are issued by its metadata server and token endpoint only;
    /// `public_key` (an RSA public key, DER) checks JWTs at `POST /token`.
    pub fn start(project: &str, network: &str, public_key: Option<Vec<u8>>) -> GceDouble {
        let bound = DoubleServer::bind("gce-double");
        let addr = bound.addr();
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                routes: BTreeMap::new(),
                instances: BTreeMap::new(),
                networks: vec![(project.to_string(), network.to_string())],
                operations: BTreeMap::new(),
                next_id: 1_000_000,
                operation_duration: Duration::from_millis(50),
                failing_operations: VecDeque::new(),
                faults: Vec::new(),
                routes_quota: 250,
                tokens: Vec::new(),
                token_lifetime: 3599,
                issued: 0,
                log: VecDeque::new(),
                token_log: VecDeque::new(),
                applied: VecDeque::new(),
                jwt_exchanges: Vec::new(),
                metadata_zone: "europe-west1-b".into(),
                alt_token_body: String::new(),
                alt_bodies: 0,
            }),
            changed: Condvar::new(),
            base: format!("http://{addr}/compute/v1/"),
            project: project.to_string(),
            public_key,
        });
        let server = bound.serve({
            let inner = inner.clone();
            move |stream, _| serve_connection(stream, &inner)
        });
        GceDouble { inner, server }
    }

    /// `http://127.0.0.1:PORT/compute/v1/`, for `api-endpoint`.
    pub fn api_endpoint(&self) -> String {
        self.inner.base.clone()
    }

    /// `127.0.0.1:PORT`, for `GCE_METADATA_HOST`.
    pub fn metadata_host(&self) -> String {
        self.server.addr().to_string()
    }

    /// `http://127.0.0.1:PORT/token`, a key file's `token_uri`.
    pub fn token_uri(&self) -> String {
        format!("http://{}/token", self.server.addr())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A token the double accepts, as if issued.
    pub fn issue_token(&self) -> String {
        issue(&mut self.state())
    }

    pub fn set_token_lifetime(&self, seconds: u64) {
        self.state().token_lifetime = seconds;
    }

    /// Tokens issued so far (metadata server and token endpoint).
    pub fn tokens_issued(&self) -> u64 {
        self.state().issued
    }

    /// `http://127.0.0.1:PORT/alt-token`, a `token-url` that accepts `body`.
    pub fn alt_token_url(&self, body: &str) -> String {
        self.state().alt_token_body = body.to_string();
        format!("http://{}/alt-token", self.server.addr())
    }

    /// Tokens handed out by the `token-url`.
    pub fn alt_tokens(&self) -> u64 {
        self.state().alt_bodies
    }

    /// The JWT claims of every accepted exchange at `POST /token`.
    pub fn jwt_exchanges(&self) -> Vec<Value> {
        self.state().jwt_exchanges.clone()
    }

    /// Adds instance `name` in `zone` of the double's project.
    pub fn add_instance(&self, zone: &str, name: &str, can_ip_forward: bool) -> String {
        let mut s = self.state();
        s.next_id += 1;
        let id = s.next_id;
        s.instances.insert(
            (
                self.inner.project.clone(),
                zone.to_string(),
                name.to_string(),
            ),
            InstanceEntry { id, can_ip_forward },
        );
        self.instance_url(zone, name)
    }

    /// The full URL of an instance, as GCE writes `nextHopInstance`.
    pub fn instance_url(&self, zone: &str, name: &str) -> String {
        format!(
            "{}projects/{}/zones/{zone}/instances/{name}",
            self.inner.base, self.inner.project
        )
    }

    /// The network's full URL.
    pub fn network_url(&self, network: &str) -> String {
        format!(
            "{}projects/{}/global/networks/{network}",
            self.inner.base, self.inner.project
        )
    }

    /// Adds another network (its routes are someone else's).
    pub fn add_network(&self, network: &str) {
        self.state()
            .networks
            .push((self.inner.project.clone(), network.to_string()));
    }

    /// Puts a route straight into the table (as another writer would).
    pub fn put_route(&self, route: RouteEntry) {
        let mut s = self.state();
        s.next_id += 1;
        let id = s.next_id;
        s.routes
            .insert(route.name.clone(), RouteEntry { id, ..route });
    }

    /// Every route, by name.
    pub fn routes(&self) -> Vec<RouteEntry> {
        let mut s = self.state();
        settle(&mut s, Instant::now());
        s.routes.values().cloned().collect()
    }

    pub fn route(&self, name: &str) -> Option<RouteEntry> {
        self.routes().into_iter().find(|r| r.name == name)
    }

    pub fn set_operation_duration(&self, d: Duration) {
        self.state().operation_duration = d;
    }

    /// The next operation ends in error `code` without making its change.
    pub fn fail_next_operation(&self, code: &str, message: &str) {
        self.state()
            .failing_operations
            .push_back((code.to_string(), message.to_string()));
    }

    pub fn set_routes_quota(&self, limit: usize) {
        self.state().routes_quota = limit;
    }

    /// The next `times` requests of `method` whose path (without `/compute/v1`)
    /// starts with `path_prefix` meet `fault`.
    pub fn inject(&self, method: &str, path_prefix: &str, times: usize, fault: Fault) {
        self.state()
            .faults
            .push((method.to_string(), path_prefix.to_string(), times, fault));
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state().log.iter().cloned().collect()
    }

    /// Forgets the requests, token requests and applied changes so far.
    pub fn clear_requests(&self) {
        let mut s = self.state();
        s.log.clear();
        s.token_log.clear();
        s.applied.clear();
    }

    /// Requests to the token endpoints, by endpoint (`metadata.token`, `tokenUrl`,
    /// `oauth2.token`), with when they were answered.
    pub fn token_calls(&self) -> Vec<(&'static str, SystemTime)> {
        self.state().token_log.iter().cloned().collect()
    }

    /// Route changes as they took effect, in order.
    pub fn applied(&self) -> Vec<Applied> {
        let mut s = self.state();
        settle(&mut s, Instant::now());
        s.applied.iter().cloned().collect()
    }

    /// Removes an instance (as a node group does when it replaces one); routes to it
    /// stay, as GCE keeps them.
    pub fn remove_instance(&self, zone: &str, name: &str) {
        let key = (
            self.inner.project.clone(),
            zone.to_string(),
            name.to_string(),
        );
        self.state().instances.remove(&key);
    }

    /// Ends every running operation now, its change made, as if its time had come.
    pub fn finish_operations(&self) {
        let mut s = self.state();
        let now = Instant::now();
        for op in s.operations.values_mut().filter(|o| !o.done) {
            op.finishes = op.finishes.min(now);
        }
        settle(&mut s, now);
    }

    /// Deletes every route at once (as another writer would), uncounted.
    pub fn clear_routes(&self) {
        let mut s = self.state();
        settle(&mut s, Instant::now());
        s.routes.clear();
    }

    /// Requests of one call (`routes.insert`, ...), any outcome.
    pub fn count(&self, call: &str) -> usize {
        self.state().log.iter().filter(|r| r.call() == call).count()
    }

    /// Requests refused for their token.
    pub fn unauthorized(&self) -> Vec<Recorded> {
        self.state()
            .log
            .iter()
            .filter(|r| r.status == 401)
            .cloned()
            .collect()
    }
}

fn issue(s: &mut State) -> String {
    s.issued += 1;
    let token = format!("ya29.double-token-{}", s.issued);
    s.tokens.push(token.clone());
    token
}

struct Request {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn query_value(&self, key: &str) -> Option<String> {
        self.query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| http_wire::percent_decode(v, true))
    }
}

enum Outcome {
    Reply(u16, Value),
    /// A body that is not JSON (the metadata server's values).
    Text(u16, String),
    Close,
}

fn serve_connection(stream: TcpStream, inner: &Inner) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut stream = stream;
    while let Some(wire) = http_wire::read_request(&mut reader) {
        let (path, query) = wire.path_and_query();
        let request = Request {
            method: wire.method.clone(),
            path: path.to_string(),
            query: query.to_string(),
            headers: wire.headers.clone(),
            body: wire.body.clone(),
        };
        match handle(inner, &request) {
            Outcome::Close => {
                // The acceptor keeps a clone of the stream, so dropping ours would
                // leave the connection open.
                let _ = stream.shutdown(std::net::Shutdown::Both);
                return;
            }
            reply @ (Outcome::Reply(..) | Outcome::Text(..)) => {
                let (status, body) = match reply {
                    Outcome::Reply(status, body) => {
                        (status, serde_json::to_vec(&body).unwrap_or_default())
                    }
                    Outcome::Text(status, text) => (status, text.into_bytes()),
                    Outcome::Close => return,
                };
                let head = format!(
                    "HTTP/1.1 {status} {}\r\nContent-Type: application/json; charset=UTF-8\r\nContent-Length: {}\r\n\r\n",
                    reason(status),
                    body.len()
                );
                let mut message = head.into_bytes();
                message.extend_from_slice(&body);
                if stream.write_all(&message).is_err() {
                    return;
                }
            }
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        429 => "Too Many Requests",
        _ => "Status",
    }
}

/// Google's error body, with only the fields googleapi.Error decodes.
fn error(status: u16, reason: &str, message: &str) -> Outcome {
    Outcome::Reply(
        status,
        json!({"error": {"code": status, "message": message,
                         "errors": [{"message": message, "reason": reason}]}}),
    )
}

fn handle(inner: &Inner, request: &Request) -> Outcome {
    if request.path.starts_with("/computeMetadata/") {
        return metadata(inner, request);
    }
    if request.path == "/token" {
        return token_exchange(inner, request);
    }
    if request.path == "/alt-token" {
        return alt_token(inner, request);
    }
    let Some(path) = request.path.strip_prefix("/compute/v1") else {
        return error(404, "notFound", "no such API");
    };
    let token = request
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_string();
    let mut state = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    let record = |state: &mut State, status: u16| {
        push_bounded(
            &mut state.log,
            Recorded {
                method: request.method.clone(),
                path: path.to_string(),
                query: request.query.clone(),
                status,
                token: token.clone(),
                at: SystemTime::now(),
            },
        )
    };
    if !state.tokens.contains(&token) {
        record(&mut state, 401);
        return error(
            401,
            "authError",
            "Request had invalid authentication credentials.",
        );
    }
    let fault = state
        .faults
        .iter()
        .position(|(m, p, n, _)| *m == request.method && path.starts_with(p.as_str()) && *n > 0);
    let fault = fault.map(|i| {
        state.faults[i].2 -= 1;
        state.faults[i].3.clone()
    });
    if let Some(Fault::Error { status, reason }) = &fault {
        record(&mut state, *status);
        return error(*status, reason, "injected failure");
    }
    settle(&mut state, Instant::now());
    let parts: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(str::to_string)
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let wait_for = match (request.method.as_str(), parts.as_slice()) {
        ("POST", ["projects", _, "global", "operations", op, "wait"]) => Some(op.to_string()),
        _ => None,
    };
    if let Some(op) = wait_for {
        // The long poll: hold the reply until the operation is done, or a slice passes.
        let until = Instant::now() + WAIT_SLICE;
        loop {
            settle(&mut state, Instant::now());
            let done = state.operations.get(&op).is_none_or(|o| o.done);
            let now = Instant::now();
            if done || now >= until {
                break;
            }
            let next = state
                .operations
                .get(&op)
                .map_or(until, |o| o.finishes.min(until));
            let pause = next
                .saturating_duration_since(now)
                .max(Duration::from_millis(1));
            state = inner
                .changed
                .wait_timeout(state, pause)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
    let outcome = route_request(inner, &mut state, request, &parts);
    let status = match &outcome {
        Outcome::Reply(s, _) | Outcome::Text(s, _) => *s,
        Outcome::Close => 0,
    };
    if matches!(fault, Some(Fault::LostReply)) {
        record(&mut state, 0);
        return Outcome::Close;
    }
    record(&mut state, status);
    outcome
}

fn push_bounded<T>(log: &mut VecDeque<T>, entry: T) {
    if log.len() >= LOG_LIMIT {
        log.pop_front();
    }
    log.push_back(entry);
}

fn route_request(inner: &Inner, state: &mut State, request: &Request, parts: &[&str]) -> Outcome {
    let project = inner.project.as_str();
    match (request.method.as_str(), parts) {
        ("GET", ["projects", p]) if *p == project => {
            let usage = state.routes.len();
            Outcome::Reply(
                200,
                json!({
                    "kind": "compute#project",
                    "id": "4711",
                    "name": project,
                    "selfLink": format!("{}projects/{project}", inner.base),
                    "quotas": [
                        {"metric": "ROUTES", "limit": state.routes_quota as f64, "usage": usage as f64},
                        {"metric": "NETWORKS", "limit": 15.0, "usage": state.networks.len() as f64},
                    ],
                }),
            )
        }
        ("GET", ["projects", p, "global", "routes"]) if *p == project => {
            list_routes(inner, state, request)
        }
        ("POST", ["projects", p, "global", "routes"]) if *p == project => {
            insert_route(inner, state, request)
        }
        ("GET", ["projects", p, "global", "routes", name]) if *p == project => {
            match state.routes.get(*name) {
                Some(r) => Outcome::Reply(200, route_json(inner, r)),
                None => not_found(&format!("projects/{project}/global/routes/{name}")),
            }
        }
        ("DELETE", ["projects", p, "global", "routes", name]) if *p == project => {
            let Some(route) = state.routes.get(*name).cloned() else {
                return not_found(&format!("projects/{project}/global/routes/{name}"));
            };
            let link = format!("{}projects/{project}/global/routes/{name}", inner.base);
            let op = start_operation(state, "delete", link, route.id, Change::Delete(route.name));
            Outcome::Reply(200, operation_json(inner, &op))
        }
        ("GET", ["projects", p, "global", "operations", op])
        | ("POST", ["projects", p, "global", "operations", op, "wait"])
            if *p == project =>
        {
            match state.operations.get(*op) {
                Some(o) => Outcome::Reply(200, operation_json(inner, o)),
                None => not_found(&format!("projects/{project}/global/operations/{op}")),
            }
        }
        ("GET", ["projects", p, "zones"]) if *p == project => {
            let items: Vec<Value> = ZONES
                .iter()
                .map(|z| {
                    json!({
                        "kind": "compute#zone",
                        "id": "2100",
                        "name": z,
                        "status": "UP",
                        "region": format!("{}projects/{project}/regions/europe-west1", inner.base),
                        "selfLink": format!("{}projects/{project}/zones/{z}", inner.base),
                    })
                })
                .collect();
            Outcome::Reply(
                200,
                json!({
                    "kind": "compute#zoneList",
                    "id": format!("projects/{project}/zones"),
                    "items": items,
                    "selfLink": format!("{}projects/{project}/zones", inner.base),
                }),
            )
        }
        ("GET", ["projects", p, "zones", zone, "instances", name]) => {
            let key = (p.to_string(), zone.to_string(), name.to_string());
            match state.instances.get(&key) {
                Some(i) => Outcome::Reply(
                    200,
                    json!({
                        "kind": "compute#instance",
                        "id": i.id.to_string(),
                        "name": name,
                        "zone": format!("{}projects/{p}/zones/{zone}", inner.base),
                        "status": "RUNNING",
                        "canIpForward": i.can_ip_forward,
                        "selfLink": format!("{}projects/{p}/zones/{zone}/instances/{name}", inner.base),
                    }),
                ),
                None => not_found(&format!("projects/{p}/zones/{zone}/instances/{name}")),
            }
        }
        _ => error(404, "notFound", "The requested URL was not found"),
    }
}

fn not_found(resource: &str) -> Outcome {
    error(
        404,
        "notFound",
        &format!("The resource '{resource}' was not found"),
    )
}

fn list_routes(inner: &Inner, state: &State, request: &Request) -> Outcome {
    let filter = match request.query_value("filter") {
        Some(f) => match parse_filter(&f) {
            Some(p) => p,
            None => {
                return error(
                    400,
                    "invalid",
                    &format!("Invalid value for field 'filter': '{f}'"),
                );
            }
        },
        None => Vec::new(),
    };
    let max = request
        .query_value("maxResults")
        .and_then(|m| m.parse::<usize>().ok())
        .unwrap_or(500)
        .clamp(1, 500);
    let start = match request.query_value("pageToken").filter(|t| !t.is_empty()) {
        None => 0,
        Some(t) => match t
            .strip_prefix("page-")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(n) => n,
            None => return error(400, "invalid", "Invalid value for field 'pageToken'"),
        },
    };
    let matching: Vec<Value> = state
        .routes
        .values()
        .map(|r| route_json(inner, r))
        .filter(|r| {
            filter.iter().all(|(field, pattern)| {
                let value = match &r[field.as_str()] {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => String::new(),
                };
                regex_full_match(pattern, &value)
            })
        })
        .collect();
    let page: Vec<Value> = matching.iter().skip(start).take(max).cloned().collect();
    let mut body = json!({
        "kind": "compute#routeList",
        "id": format!("projects/{}/global/routes", inner.project),
        "items": page,
        "selfLink": format!("{}projects/{}/global/routes", inner.base, inner.project),
    });
    if start + max < matching.len() {
        body["nextPageToken"] = json!(format!("page-{}", start + max));
    }
    Outcome::Reply(200, body)
}

fn insert_route(inner: &Inner, state: &mut State, request: &Request) -> Outcome {
    let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
        return error(
            400,
            "parseError",
            "This API does not support parsing form-encoded input.",
        );
    };
    let field = |k: &str| body[k].as_str().unwrap_or("").to_string();
    let name = field("name");
    let valid_name = name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid_name {
        return error(
            400,
            "invalid",
            &format!("Invalid value for field 'resource.name': '{name}'"),
        );
    }
    if state.routes.contains_key(&name) {
        return error(
            409,
            "alreadyExists",
            &format!(
                "The resource 'projects/{}/global/routes/{name}' already exists",
                inner.project
            ),
        );
    }
    let Some(network) = canonical(inner, &field("network"), "global/networks") else {
        return error(400, "invalid", "Invalid value for field 'resource.network'");
    };
    let known_network = state
        .networks
        .iter()
        .any(|(p, n)| network == format!("{}projects/{p}/global/networks/{n}", inner.base));
    if !known_network {
        return error(
            404,
            "notFound",
            &format!("The resource '{network}' was not found"),
        );
    }
    let Some(hop) = canonical(inner, &field("nextHopInstance"), "zones") else {
        return error(
            400,
            "invalid",
            "Invalid value for field 'resource.nextHopInstance'",
        );
    };
    let dest = field("destRange");
    if parse_cidr(&dest).is_none() {
        return error(
            400,
            "invalid",
            &format!("Invalid value for field 'resource.destRange': '{dest}'"),
        );
    }
    if state.routes.len() >= state.routes_quota {
        return error(
            403,
            "quotaExceeded",
            &format!(
                "Quota 'ROUTES' exceeded.  Limit: {}.0 globally.",
                state.routes_quota
            ),
        );
    }
    state.next_id += 1;
    let route = RouteEntry {
        name: name.clone(),
        network,
        dest_range: dest,
        next_hop_instance: hop,
        priority: body["priority"].as_i64().unwrap_or(1000),
        description: field("description"),
        id: state.next_id,
    };
    let link = format!(
        "{}projects/{}/global/routes/{name}",
        inner.base, inner.project
    );
    let op = start_operation(state, "insert", link, route.id, Change::Insert(route));
    Outcome::Reply(200, operation_json(inner, &op))
}

/// A resource reference as GCE stores it: a full URL on this API, from a full URL or a
/// partial one (`projects/p/...`, or `zones/...` and `global/...` in the project).
fn canonical(inner: &Inner, reference: &str, kind: &str) -> Option<String> {
    let path = reference
        .strip_prefix(inner.base.as_str())
        .or_else(|| reference.strip_prefix("https://www.googleapis.com/compute/v1/"))
        .or_else(|| reference.strip_prefix("https://compute.googleapis.com/compute/v1/"))
        .unwrap_or(reference);
    let path = if path.starts_with(kind) {
        format!("projects/{}/{path}", inner.project)
    } else {
        path.to_string()
    };
    let valid = path.starts_with("projects/") && path.contains(&format!("/{kind}/"));
    valid.then(|| format!("{}{path}", inner.base))
}

fn start_operation(
    state: &mut State,
    kind: &'static str,
    target: String,
    target_id: u64,
    change: Change,
) -> OperationEntry {
    state.next_id += 1;
    let id = state.next_id;
    let op = OperationEntry {
        id,
        name: format!("operation-{id}-{kind}"),
        kind,
        target,
        target_id,
        change: Some(change),
        finishes: Instant::now() + state.operation_duration,
        error: state.failing_operations.pop_front(),
        done: false,
    };
    state.operations.insert(op.name.clone(), op.clone());
    settle(state, Instant::now());
    state.operations.get(&op.name).cloned().unwrap_or(op)
}

/// Finishes the operations whose time has come, making their changes.
fn settle(state: &mut State, now: Instant) {
    let due: Vec<String> = state
        .operations
        .values()
        .filter(|o| !o.done && o.finishes <= now)
        .map(|o| o.name.clone())
        .collect();
    for name in due {
        let Some(op) = state.operations.get_mut(&name) else {
            continue;
        };
        op.done = true;
        let change = op.change.take();
        if op.error.is_some() {
            continue;
        }
        // When it took effect, not when it was noticed.
        let at = SystemTime::now()
            .checked_sub(now.saturating_duration_since(op.finishes))
            .unwrap_or_else(SystemTime::now);
        match change {
            Some(Change::Insert(route)) => {
                let applied = Applied {
                    kind: "insert",
                    name: route.name.clone(),
                    dest_range: route.dest_range.clone(),
                    at,
                };
                push_bounded(&mut state.applied, applied);
                state.routes.insert(route.name.clone(), route);
            }
            Some(Change::Delete(name)) => {
                if let Some(route) = state.routes.remove(&name) {
                    let applied = Applied {
                        kind: "delete",
                        name,
                        dest_range: route.dest_range,
                        at,
                    };
                    push_bounded(&mut state.applied, applied);
                }
            }
            None => {}
        }
    }
}

fn route_json(inner: &Inner, r: &RouteEntry) -> Value {
    let mut v = json!({
        "kind": "compute#route",
        "id": r.id.to_string(),
        "creationTimestamp": "2026-12-01T10:00:00.000-08:00",
        "name": r.name,
        "description": r.description,
        "network": r.network,
        "destRange": r.dest_range,
        "priority": r.priority,
        "nextHopInstance": r.next_hop_instance,
        "routeType": "STATIC",
        "selfLink": format!("{}projects/{}/global/routes/{}", inner.base, inner.project, r.name),
    });
    if r.description.is_empty()
        && let Some(o) = v.as_object_mut()
    {
        o.remove("description");
    }
    v
}

fn operation_json(inner: &Inner, o: &OperationEntry) -> Value {
    let mut v = json!({
        "kind": "compute#operation",
        "id": o.id.to_string(),
        "name": o.name,
        "operationType": o.kind,
        "targetLink": o.target,
        "targetId": o.target_id.to_string(),
        "status": if o.done { "DONE" } else { "RUNNING" },
        "user": "route-controller@e2e-project.iam.gserviceaccount.com",
        "progress": if o.done { 100 } else { 0 },
        "insertTime": "2026-12-01T10:00:00.000-08:00",
        "startTime": "2026-12-01T10:00:00.000-08:00",
        "selfLink": format!("{}projects/{}/global/operations/{}", inner.base, inner.project, o.name),
    });
    if o.done {
        v["endTime"] = json!("2026-12-01T10:00:01.000-08:00");
        if let Some((code, message)) = &o.error {
            v["error"] = json!({"errors": [{"code": code, "message": message}]});
            v["httpErrorStatusCode"] = json!(400);
            v["httpErrorMessage"] = json!("BAD REQUEST");
        }
    }
    v
}

// --- tokens ---------------------------------------------------------------------------

fn metadata(inner: &Inner, request: &Request) -> Outcome {
    if request.header("metadata-flavor") != Some("Google") {
        return Outcome::Reply(
            403,
            json!({"error": "Missing Metadata-Flavor:Google header"}),
        );
    }
    let mut state = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    match request.path.as_str() {
        "/computeMetadata/v1/instance/service-accounts/default/token" => {
            push_bounded(&mut state.token_log, ("metadata.token", SystemTime::now()));
            let token = issue(&mut state);
            Outcome::Reply(
                200,
                json!({"access_token": token, "expires_in": state.token_lifetime, "token_type": "Bearer"}),
            )
        }
        "/computeMetadata/v1/project/project-id" => text(&inner.project),
        "/computeMetadata/v1/instance/zone" => {
            text(&format!("projects/4711/zones/{}", state.metadata_zone))
        }
        "/computeMetadata/v1/instance/network-interfaces/0/network" => {
            text(&format!("projects/4711/networks/{}", state.networks[0].1))
        }
        _ => Outcome::Reply(404, json!({})),
    }
}

/// A plain-text metadata value (the double sends JSON strings' text as the body).
fn text(value: &str) -> Outcome {
    Outcome::Text(200, value.to_string())
}

/// cloud-provider-gcp's alternate token source: `POST /alt-token` with the instance's
/// token and the configured body, answered with `accessToken` and `expireTime`.
fn alt_token(inner: &Inner, request: &Request) -> Outcome {
    let mut state = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    push_bounded(&mut state.token_log, ("tokenUrl", SystemTime::now()));
    let bearer = request
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !state.tokens.iter().any(|t| t == bearer) {
        return error(401, "authError", "the token URL needs the instance's token");
    }
    if request.body != state.alt_token_body.as_bytes() {
        return error(403, "forbidden", "unexpected token body");
    }
    state.alt_bodies += 1;
    let token = issue(&mut state);
    Outcome::Reply(
        200,
        json!({"accessToken": token, "expireTime": "2099-01-01T00:00:00Z"}),
    )
}

/// `POST /token` with `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer` and a
/// JWT whose RS256 signature must verify with the test key's public part.
fn token_exchange(inner: &Inner, request: &Request) -> Outcome {
    let form = String::from_utf8_lossy(&request.body).to_string();
    let field = |k: &str| {
        form.split('&')
            .filter_map(|p| p.split_once('='))
            .find(|(key, _)| *key == k)
            .map(|(_, v)| http_wire::percent_decode(v, true))
    };
    let refuse = |why: &str| {
        Outcome::Reply(
            400,
            json!({"error": "invalid_grant", "error_description": why}),
        )
    };
    if field("grant_type").as_deref() != Some("urn:ietf:params:oauth:grant-type:jwt-bearer") {
        return refuse("unsupported grant_type");
    }
    let Some(jwt) = field("assertion") else {
        return refuse("no assertion");
    };
    let parts: Vec<&str> = jwt.split('.').collect();
    let [header, claims, signature] = parts.as_slice() else {
        return refuse("not a JWT");
    };
    let decode = |s: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .ok()
    };
    let Some(key) = &inner.public_key else {
        return refuse("no key registered");
    };
    let public =
        ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, key);
    let signed = format!("{header}.{claims}");
    let Some(sig) = decode(signature) else {
        return refuse("bad signature encoding");
    };
    if public.verify(signed.as_bytes(), &sig).is_err() {
        return refuse("Invalid JWT Signature.");
    }
    let header: Value = decode(header)
        .and_then(|h| serde_json::from_slice(&h).ok())
        .unwrap_or(Value::Null);
    let claims: Value = decode(claims)
        .and_then(|c| serde_json::from_slice(&c).ok())
        .unwrap_or(Value::Null);
    if header["alg"] != "RS256" {
        return refuse("alg must be RS256");
    }
    let mut state = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    push_bounded(&mut state.token_log, ("oauth2.token", SystemTime::now()));
    state.jwt_exchanges.push(claims);
    let token = issue(&mut state);
    Outcome::Reply(
        200,
        json!({"access_token": token, "expires_in": state.token_lifetime, "token_type": "Bearer"}),
    )
}

// --- the API's filter expressions -----------------------------------------------------

/// `(field eq regexp) (field eq regexp)`, or a single `field eq regexp`.
fn parse_filter(filter: &str) -> Option<Vec<(String, String)>> {
    let filter = filter.trim();
    let predicates: Vec<&str> = if filter.starts_with('(') {
        filter
            .split(')')
            .map(|p| p.trim().trim_start_matches('('))
            .filter(|p| !p.is_empty())
            .collect()
    } else {
        vec![filter]
    };
    predicates
        .into_iter()
        .map(|p| {
            let mut words = p.splitn(3, ' ');
            let (field, op, value) = (words.next()?, words.next()?, words.next()?);
            (op == "eq").then(|| (field.to_string(), value.trim().to_string()))
        })
        .collect()
}

/// Whether `pattern` (RE2, the part GCE filters use: literals, `.`, `*`, `\` escapes,
/// `^` and `$`) matches all of `text`.
pub fn regex_full_match(pattern: &str, text: &str) -> bool {
    let pattern = pattern.trim_start_matches('^').trim_end_matches('$');
    let mut atoms: Vec<(Option<char>, bool)> = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' => {
                if let Some(last) = atoms.last_mut() {
                    last.1 = true;
                }
            }
            '.' => atoms.push((None, false)),
            '\\' => atoms.push((chars.next(), false)),
            c => atoms.push((Some(c), false)),
        }
    }
    let text: Vec<char> = text.chars().collect();
    fn matches(atoms: &[(Option<char>, bool)], text: &[char]) -> bool {
        let Some(&(atom, star)) = atoms.first() else {
            return text.is_empty();
        };
        let one = |c: char| atom.is_none_or(|a| a == c);
        if star {
            let mut i = 0;
            loop {
                if matches(&atoms[1..], &text[i..]) {
                    return true;
                }
                if i < text.len() && one(text[i]) {
                    i += 1;
                } else {
                    return false;
                }
            }
        }
        !text.is_empty() && one(text[0]) && matches(&atoms[1..], &text[1..])
    }
    matches(&atoms, &text)
}

fn parse_cidr(s: &str) -> Option<(std::net::Ipv4Addr, u8)> {
    let (a, p) = s.split_once('/')?;
    Some((a.parse().ok()?, p.parse().ok().filter(|p: &u8| *p <= 32)?))
}

/// The public part (RSA public key, DER) of a service-account key file's private key.
pub fn public_key_of(key_file: &Value) -> Vec<u8> {
    let pem = key_file["private_key"]
        .as_str()
        .expect("a key file with private_key");
    let b64: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .concat();
    let der = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("the key is base64");
    let pair = ring::signature::RsaKeyPair::from_pkcs8(&der).expect("an RSA PKCS#8 key");
    use ring::signature::KeyPair as _;
    pair.public_key().as_ref().to_vec()
}
