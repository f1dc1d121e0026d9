//! A Hetzner Cloud API test double: a loopback HTTP/1.1 server (std only, one thread
//! per connection) that follows the documented API closely enough to test a provider
//! against it: networks with subnets and routes, paginated servers, route actions that
//! run for a configurable time, validation and error bodies like the real API,
//! rate-limit headers on every reply and 429s when the budget is exceeded, bearer
//! token checks, and fault injection.
//!
//! It records every request so that tests can count requests per operation and
//! assert that no request was refused for the rate limit.
#![allow(dead_code)]
// Each test binary uses only part of this support module.

#[allow(clippy::duplicate_mod)]
#[path = "double_server.rs"]
mod double_server;
#[path = "http_wire.rs"]
mod http_wire;

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufReader, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use double_server::DoubleServer;

/// What an injected fault does to a matching request.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer with this status and JSON error code, without processing the request.
    Error { status: u16, code: String },
    /// Answer with this status and an empty body (a proxy's reply).
    BareStatus(u16),
    /// Wait this long, then process the request and answer (normally too late).
    Stall(Duration),
    /// Read the request and close the connection without processing or answering.
    Close,
    /// Process the request, then answer 200 with a body that is not JSON.
    Garbage,
    /// Process the request, then send the head of its answer and half of its body,
    /// and close the connection (a reply cut short).
    CutShort,
}

impl Fault {
    pub fn error(status: u16, code: &str) -> Fault {
        Fault::Error {
            status,
            code: code.to_string(),
        }
    }
}

/// One request as the double saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub method: String,
    /// The API path without the `/v1` prefix, e.g. `/networks/1/actions/add_route`.
    pub path: String,
    pub query: String,
    /// The status answered; 0 when the connection was closed instead.
    pub status: u16,
    pub at: Instant,
    /// The bearer token the request carried, so that tests with several clients can
    /// tell whose request it was.
    pub token: String,
    /// For `add_route` and `delete_route`: the `destination` of the body.
    pub destination: Option<String>,
}

/// A route of a network: destination and gateway as strings, as the API shows them.
pub type RouteEntry = (String, String);

#[derive(Clone, Debug)]
struct Network {
    id: u64,
    name: String,
    ip_range: String,
    subnets: Vec<String>,
    routes: Vec<RouteEntry>,
}

#[derive(Clone, Debug)]
struct Server {
    id: u64,
    name: String,
    /// (network ID, private IP).
    private_net: Vec<(u64, String)>,
}

#[derive(Clone, Debug)]
struct Action {
    id: u64,
    command: String,
    network: u64,
    route: RouteEntry,
    finishes: Instant,
    /// Set when the action ends in error instead of making the change.
    error: Option<(String, String)>,
    /// `running`, `success` or `error`.
    status: &'static str,
}

struct InjectedFault {
    method: String,
    path: String,
    remaining: usize,
    fault: Fault,
}

/// The server-side token bucket.
struct Budget {
    limit: f64,
    per_second: f64,
    tokens: f64,
    at: Instant,
}

impl Budget {
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.limit);
        self.at = now;
    }

    fn headers(&self) -> Vec<(String, String)> {
        let missing = (self.limit - self.tokens).max(0.0);
        let reset = unix_now() + (missing / self.per_second).ceil() as u64;
        vec![
            ("RateLimit-Limit".into(), format!("{}", self.limit as u64)),
            (
                "RateLimit-Remaining".into(),
                format!("{}", self.tokens.max(0.0).floor() as u64),
            ),
            ("RateLimit-Reset".into(), reset.to_string()),
        ]
    }
}

struct State {
    networks: BTreeMap<u64, Network>,
    servers: BTreeMap<u64, Server>,
    actions: BTreeMap<u64, Action>,
    next_action: u64,
    action_duration: Duration,
    concurrent_actions: bool,
    /// The next actions of a command end in error with (code, message).
    failing_actions: VecDeque<(String, String, String)>,
    /// `add_route` to these destinations is always refused with (status, code, message).
    refused_destinations: BTreeMap<String, (u16, String, String)>,
    /// Tokens accepted besides the first one (other clients of the same project).
    extra_tokens: Vec<String>,
    budget: Budget,
    faults: Vec<InjectedFault>,
    log: Vec<Recorded>,
    read_only_token: Option<String>,
    /// The time actions run and the budget refills in.
    clock: Clock,
    /// Routes a network may hold (100, as the real API; reference §3.6).
    route_limit: usize,
}

/// A source of the current time: the real clock, or a test's virtual one.
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

impl State {
    fn now(&self) -> Instant {
        (self.clock)()
    }
}

struct Inner {
    token: String,
    state: Mutex<State>,
}

/// The running double. Dropping it stops the server.
pub struct HcloudDouble {
    inner: Arc<Inner>,
    server: DoubleServer,
}

impl HcloudDouble {
    /// Starts a double on a free loopback port that accepts `token`. It has no
    /// networks or servers, actions finish after 50 ms, and its rate limit is too high
    /// to matter until [`HcloudDouble::set_rate_limit`] lowers it.
    pub fn start(token: &str) -> HcloudDouble {
        let inner = Arc::new(Inner {
            token: token.to_string(),
            state: Mutex::new(State {
                networks: BTreeMap::new(),
                servers: BTreeMap::new(),
                actions: BTreeMap::new(),
                next_action: 1000,
                action_duration: Duration::from_millis(50),
                concurrent_actions: false,
                failing_actions: VecDeque::new(),
                refused_destinations: BTreeMap::new(),
                extra_tokens: Vec::new(),
                budget: Budget {
                    limit: 1_000_000.0,
                    per_second: 1_000_000.0,
                    tokens: 1_000_000.0,
                    at: Instant::now(),
                },
                faults: Vec::new(),
                log: Vec::new(),
                read_only_token: None,
                clock: Arc::new(Instant::now),
                route_limit: 100,
            }),
        });
        let server = DoubleServer::start("hcloud-double", {
            let inner = inner.clone();
            move |stream, _| serve_connection(stream, &inner)
        });
        HcloudDouble { inner, server }
    }

    /// The base URL to configure as `HCLOUD_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}/v1", self.server.addr())
    }

    pub fn token(&self) -> &str {
        &self.inner.token
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn add_network(&self, id: u64, name: &str, ip_range: &str, subnets: &[&str]) {
        self.state().networks.insert(
            id,
            Network {
                id,
                name: name.into(),
                ip_range: ip_range.into(),
                subnets: subnets.iter().map(|s| s.to_string()).collect(),
                routes: Vec::new(),
            },
        );
    }

    /// Adds a server, attached to `network` with `ip` if given.
    pub fn add_server(&self, id: u64, name: &str, attach: Option<(u64, &str)>) {
        self.state().servers.insert(
            id,
            Server {
                id,
                name: name.into(),
                private_net: attach
                    .map(|(n, ip)| vec![(n, ip.to_string())])
                    .unwrap_or_default(),
            },
        );
    }

    pub fn attach_server(&self, id: u64, network: u64, ip: &str) {
        if let Some(s) = self.state().servers.get_mut(&id) {
            s.private_net.push((network, ip.to_string()));
        }
    }

    pub fn remove_server(&self, id: u64) {
        self.state().servers.remove(&id);
    }

    /// Puts a route in the network directly, as another client would have.
    pub fn put_route(&self, network: u64, destination: &str, gateway: &str) {
        if let Some(n) = self.state().networks.get_mut(&network) {
            n.routes.push((destination.into(), gateway.into()));
        }
    }

    /// The network's routes once every finished action has taken effect.
    pub fn routes(&self, network: u64) -> Vec<RouteEntry> {
        let mut state = self.state();
        let now = state.now();
        settle(&mut state, now);
        state
            .networks
            .get(&network)
            .map(|n| n.routes.clone())
            .unwrap_or_default()
    }

    /// Actions run, and the budget refills, in the time `clock` reads (a test's virtual
    /// clock, shared with the provider's action poller); the real clock until then.
    pub fn set_clock(&self, clock: Clock) {
        self.state().clock = clock;
    }

    /// How long new actions run before they end.
    pub fn set_action_duration(&self, d: Duration) {
        self.state().action_duration = d;
    }

    /// Lets actions run at the same time on one network (the real API answers
    /// `conflict` instead).
    pub fn allow_concurrent_actions(&self, allow: bool) {
        self.state().concurrent_actions = allow;
    }

    /// The next action of `command` (`add_route`, `delete_route`) ends in error.
    pub fn fail_next_action(&self, command: &str, code: &str, message: &str) {
        self.state()
            .failing_actions
            .push_back((command.into(), code.into(), message.into()));
    }

    /// A bucket of `limit` requests that refills at `per_second`, starting full.
    pub fn set_rate_limit(&self, limit: u32, per_second: f64) {
        let mut state = self.state();
        let at = state.now();
        state.budget = Budget {
            limit: f64::from(limit),
            per_second,
            tokens: f64::from(limit),
            at,
        };
    }

    /// Accepts `token` too, with full rights: another client of the same project.
    pub fn add_token(&self, token: &str) {
        self.state().extra_tokens.push(token.into());
    }

    /// Every `add_route` to `destination` (as the request spells it) is refused with
    /// this status and error code, until [`HcloudDouble::stop_refusing`].
    pub fn refuse_routes_to(&self, destination: &str, status: u16, code: &str, message: &str) {
        self.state()
            .refused_destinations
            .insert(destination.into(), (status, code.into(), message.into()));
    }

    pub fn stop_refusing(&self, destination: &str) {
        self.state().refused_destinations.remove(destination);
    }

    /// A second token that may read but not write (`token_readonly` on POST).
    pub fn set_read_only_token(&self, token: &str) {
        self.state().read_only_token = Some(token.into());
    }

    /// The next `times` requests with this method and exact path (without `/v1`)
    /// suffer `fault`.
    pub fn inject(&self, method: &str, path: &str, times: usize, fault: Fault) {
        self.state().faults.push(InjectedFault {
            method: method.into(),
            path: path.into(),
            remaining: times,
            fault,
        });
    }

    /// Every request so far, in order of arrival.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state().log.clone()
    }

    pub fn clear_requests(&self) {
        self.state().log.clear();
    }

    /// Requests with this method whose path starts with `prefix`.
    pub fn count(&self, method: &str, prefix: &str) -> usize {
        self.state()
            .log
            .iter()
            .filter(|r| r.method == method && r.path.starts_with(prefix))
            .count()
    }

    /// Requests answered 429 `rate_limit_exceeded`.
    pub fn throttled(&self) -> usize {
        self.state().log.iter().filter(|r| r.status == 429).count()
    }

    /// Routes a network may hold from now on (default 100, the real API's limit).
    pub fn set_route_limit(&self, limit: usize) {
        self.state().route_limit = limit;
    }

    /// `add_route` requests refused 403 `resource_limit_exceeded` (the network held its
    /// maximum of routes).
    pub fn route_limit_refusals(&self) -> usize {
        self.state()
            .log
            .iter()
            .filter(|r| r.status == 403 && r.path.ends_with("/actions/add_route"))
            .count()
    }

    /// Requests answered 409 `conflict` (the network was busy).
    pub fn conflicts(&self) -> usize {
        self.state().log.iter().filter(|r| r.status == 409).count()
    }
}

// ---------------------------------------------------------------------------------
// HTTP/1.1, just enough: request line, headers, Content-Length bodies, keep-alive.

struct HttpRequest {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpRequest {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn query_values(&self, key: &str) -> Vec<String> {
        self.query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| http_wire::percent_decode(v, true))
            .collect()
    }
}

struct Reply {
    status: u16,
    body: Value,
}

fn reply(status: u16, body: Value) -> Reply {
    Reply { status, body }
}

fn error_reply(status: u16, code: &str, message: &str) -> Reply {
    reply(
        status,
        json!({"error": {"code": code, "message": message, "details": {}}}),
    )
}

/// `invalid_input` with the field it is about in `details.fields`, as the API sends it
/// (hcloud-go decodes them into `ErrorDetailsInvalidInput`).
fn invalid_input(field: &str, message: &str) -> Reply {
    reply(
        400,
        json!({"error": {"code": "invalid_input", "message": message,
                         "details": {"fields": [{"name": field, "messages": [message]}]}}}),
    )
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<HttpRequest> {
    let request = http_wire::read_request(reader)?;
    let (path, query) = request.path_and_query();
    let path = path.strip_prefix("/v1").unwrap_or(path).to_string();
    let query = query.to_string();
    Some(HttpRequest {
        method: request.method,
        path,
        query,
        headers: request.headers,
        body: request.body,
    })
}

fn write_reply(stream: &mut TcpStream, status: u16, headers: &[(String, String)], body: &[u8]) {
    write_reply_part(stream, status, headers, body, body.len());
}

/// Writes a reply whose head announces all of `body` but only its first `sent` bytes.
fn write_reply_part(
    stream: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
    sent: usize,
) {
    let reason = match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        // `resource_unavailable`'s status.
        412 => "Precondition Failed",
        423 => "Locked",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    };
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    // One write: a head and a body in two small segments would meet Nagle's algorithm
    // and the peer's delayed ACK, 40 ms per reply.
    let mut message = head.into_bytes();
    message.extend_from_slice(&body[..sent.min(body.len())]);
    let _ = stream.write_all(&message);
    let _ = stream.flush();
}

fn serve_connection(stream: TcpStream, inner: &Inner) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut stream = stream;
    let mut served: u64 = 0;
    while let Some(request) = read_request(&mut reader) {
        served += 1;
        let correlation = format!("{:016x}", unix_now() ^ served.rotate_left(17));
        let outcome = handle(inner, &request);
        let (status, body, headers) = match outcome {
            Outcome::Close => return,
            Outcome::CutShort { status, body } => {
                write_reply_part(&mut stream, status, &[], &body, body.len() / 2);
                return;
            }
            Outcome::Reply {
                status,
                body,
                mut headers,
            } => {
                headers.push(("X-Correlation-Id".into(), correlation));
                (status, body, headers)
            }
        };
        write_reply(&mut stream, status, &headers, &body);
        if request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
        {
            return;
        }
    }
}

enum Outcome {
    Reply {
        status: u16,
        body: Vec<u8>,
        headers: Vec<(String, String)>,
    },
    Close,
    /// Send the head and half the body, then close.
    CutShort {
        status: u16,
        body: Vec<u8>,
    },
}

/// Authenticates, charges the budget, applies injected faults and routes the request.
fn handle(inner: &Inner, request: &HttpRequest) -> Outcome {
    let mut state = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    let now = state.now();
    state.budget.refill(now);
    let token = request
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let destination = request
        .path
        .contains("/actions/")
        .then(|| serde_json::from_slice::<Value>(&request.body).ok())
        .flatten()
        .and_then(|b| {
            b.get("destination")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
    let record = |state: &mut State, status: u16| {
        state.log.push(Recorded {
            method: request.method.clone(),
            path: request.path.clone(),
            query: request.query.clone(),
            status,
            at: now,
            token: token.to_string(),
            destination: destination.clone(),
        });
    };
    if state.budget.tokens < 1.0 {
        let headers = state.budget.headers();
        record(&mut state, 429);
        return json_outcome(
            error_reply(
                429,
                "rate_limit_exceeded",
                "limit of requests per hour reached",
            ),
            headers,
        );
    }
    state.budget.tokens -= 1.0;
    let headers = state.budget.headers();

    let read_only = state.read_only_token.as_deref() == Some(token);
    let known = token == inner.token || state.extra_tokens.iter().any(|t| t == token);
    if !known && !read_only {
        record(&mut state, 401);
        return json_outcome(
            error_reply(401, "unauthorized", "unable to authenticate"),
            headers,
        );
    }
    if read_only && request.method == "POST" {
        record(&mut state, 403);
        return json_outcome(
            error_reply(403, "token_readonly", "the token is read-only"),
            headers,
        );
    }

    let fault = take_fault(&mut state, request);
    match fault {
        Some(Fault::Error { status, code }) => {
            record(&mut state, status);
            return json_outcome(error_reply(status, &code, "injected failure"), headers);
        }
        Some(Fault::BareStatus(status)) => {
            record(&mut state, status);
            return Outcome::Reply {
                status,
                body: Vec::new(),
                headers,
            };
        }
        Some(Fault::Close) => {
            record(&mut state, 0);
            return Outcome::Close;
        }
        Some(Fault::Stall(d)) => {
            drop(state);
            std::thread::sleep(d);
            state = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        }
        Some(Fault::Garbage | Fault::CutShort) | None => {}
    }
    let now = state.now();
    settle(&mut state, now);
    let answer = route(&mut state, request);
    record(&mut state, answer.status);
    if matches!(fault, Some(Fault::CutShort)) {
        return Outcome::CutShort {
            status: answer.status,
            body: serde_json::to_vec(&answer.body).unwrap_or_default(),
        };
    }
    if matches!(fault, Some(Fault::Garbage)) {
        return Outcome::Reply {
            status: 200,
            body: b"<html>not json</html>".to_vec(),
            headers,
        };
    }
    json_outcome(answer, headers)
}

fn json_outcome(reply: Reply, headers: Vec<(String, String)>) -> Outcome {
    Outcome::Reply {
        status: reply.status,
        body: serde_json::to_vec(&reply.body).unwrap_or_default(),
        headers,
    }
}

fn take_fault(state: &mut State, request: &HttpRequest) -> Option<Fault> {
    let i = state
        .faults
        .iter()
        .position(|f| f.remaining > 0 && f.method == request.method && f.path == request.path)?;
    let f = &mut state.faults[i];
    f.remaining -= 1;
    let fault = f.fault.clone();
    if f.remaining == 0 {
        state.faults.remove(i);
    }
    Some(fault)
}

/// Ends the actions whose time has come, making their changes in order.
fn settle(state: &mut State, now: Instant) {
    let due: Vec<u64> = state
        .actions
        .values()
        .filter(|a| a.status == "running" && a.finishes <= now)
        .map(|a| a.id)
        .collect();
    for id in due {
        let Some(action) = state.actions.get(&id).cloned() else {
            continue;
        };
        let status = if action.error.is_some() {
            "error"
        } else {
            if let Some(n) = state.networks.get_mut(&action.network) {
                match action.command.as_str() {
                    "add_route" => n.routes.push(action.route.clone()),
                    _ => n.routes.retain(|r| *r != action.route),
                }
            }
            "success"
        };
        if let Some(a) = state.actions.get_mut(&id) {
            a.status = status;
        }
    }
}

fn route(state: &mut State, request: &HttpRequest) -> Reply {
    let segments: Vec<&str> = request.path.trim_matches('/').split('/').collect();
    match (request.method.as_str(), segments.as_slice()) {
        ("GET", ["networks"]) => list_networks(state, request),
        ("GET", ["networks", id]) => match network_by_id(state, id) {
            Some(n) => reply(200, json!({"network": network_json(n, &state.servers)})),
            None => error_reply(404, "not_found", "network not found"),
        },
        (
            "POST",
            [
                "networks",
                id,
                "actions",
                command @ ("add_route" | "delete_route"),
            ],
        ) => route_action(state, id, command, &request.body),
        ("GET", ["servers"]) => list_servers(state, request),
        ("GET", ["servers", id]) => match id.parse().ok().and_then(|id| state.servers.get(&id)) {
            Some(s) => reply(200, json!({"server": server_json(s)})),
            None => error_reply(404, "not_found", "server not found"),
        },
        ("GET", ["actions"]) => {
            let ids: Vec<u64> = request
                .query_values("id")
                .iter()
                .filter_map(|v| v.parse().ok())
                .collect();
            if ids.is_empty() {
                return error_reply(
                    400,
                    "invalid_input",
                    "listing actions without an id is no longer supported",
                );
            }
            let actions: Vec<Value> = ids
                .iter()
                .filter_map(|id| state.actions.get(id))
                .map(action_json)
                .collect();
            reply(
                200,
                json!({"actions": actions, "meta": pagination(1, 25, actions.len())}),
            )
        }
        ("GET", ["actions", id]) => match id.parse().ok().and_then(|id| state.actions.get(&id)) {
            Some(a) => reply(200, json!({"action": action_json(a)})),
            None => error_reply(404, "not_found", "action not found"),
        },
        _ => error_reply(404, "not_found", "no such endpoint"),
    }
}

fn network_by_id<'a>(state: &'a State, id: &str) -> Option<&'a Network> {
    id.parse().ok().and_then(|id| state.networks.get(&id))
}

fn list_networks(state: &State, request: &HttpRequest) -> Reply {
    let name = request.query_values("name").into_iter().next();
    let networks: Vec<Value> = state
        .networks
        .values()
        .filter(|n| name.as_ref().is_none_or(|want| *want == n.name))
        .map(|n| network_json(n, &state.servers))
        .collect();
    let total = networks.len();
    reply(
        200,
        json!({"networks": networks, "meta": pagination(1, 25, total)}),
    )
}

fn list_servers(state: &State, request: &HttpRequest) -> Reply {
    let first = |key: &str| request.query_values(key).into_iter().next();
    let page: usize = first("page")
        .and_then(|p| p.parse().ok())
        .unwrap_or(1)
        .max(1);
    let per_page: usize = first("per_page")
        .and_then(|p| p.parse().ok())
        .unwrap_or(25)
        .clamp(1, 50);
    let name = first("name");
    let matching: Vec<&Server> = state
        .servers
        .values()
        .filter(|s| name.as_ref().is_none_or(|want| *want == s.name))
        .collect();
    let servers: Vec<Value> = matching
        .iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .map(|s| server_json(s))
        .collect();
    reply(
        200,
        json!({"servers": servers, "meta": pagination(page, per_page, matching.len())}),
    )
}

fn pagination(page: usize, per_page: usize, total: usize) -> Value {
    let last = total.div_ceil(per_page).max(1);
    json!({"pagination": {
        "page": page,
        "per_page": per_page,
        "previous_page": if page > 1 { json!(page - 1) } else { Value::Null },
        "next_page": if page < last { json!(page + 1) } else { Value::Null },
        "last_page": last,
        "total_entries": total,
    }})
}

fn route_action(state: &mut State, network_id: &str, command: &str, body: &[u8]) -> Reply {
    let Some(network) = network_by_id(state, network_id).cloned() else {
        return error_reply(404, "not_found", "network not found");
    };
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return error_reply(400, "json_error", "request body is not valid JSON");
    };
    let field = |k: &str| {
        body.get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (destination, gateway) = (field("destination"), field("gateway"));
    let Some(dest) = parse_cidr(&destination) else {
        return invalid_input("destination", "invalid input in field 'destination'");
    };
    let Ok(gw) = gateway.parse::<Ipv4Addr>() else {
        return invalid_input("gateway", "invalid input in field 'gateway'");
    };
    let busy = state
        .actions
        .values()
        .any(|a| a.network == network.id && a.status == "running");
    if busy && !state.concurrent_actions {
        return error_reply(
            409,
            "conflict",
            "a change is currently being performed on this network",
        );
    }
    let route = (format_cidr(dest), gw.to_string());
    if command == "add_route"
        && let Some((status, code, message)) = state.refused_destinations.get(&destination)
    {
        return error_reply(*status, code, message);
    }
    match command {
        "add_route" => {
            if let Some((field, problem)) = add_route_problem(&network, dest, gw) {
                return invalid_input(field, problem);
            }
            let adding = state
                .actions
                .values()
                .filter(|a| a.network == network.id && a.status == "running")
                .filter(|a| a.command == "add_route")
                .count();
            if network.routes.len() + adding >= state.route_limit {
                return error_reply(
                    403,
                    "resource_limit_exceeded",
                    "network route limit exceeded",
                );
            }
        }
        _ => {
            let exists = network.routes.iter().any(|(d, g)| {
                parse_cidr(d) == Some(dest) && g.parse::<Ipv4Addr>().ok() == Some(gw)
            });
            if !exists {
                return error_reply(404, "not_found", "route not found");
            }
        }
    }
    let id = state.next_action;
    state.next_action += 1;
    let error = match state
        .failing_actions
        .iter()
        .position(|(c, _, _)| c == command)
    {
        Some(i) => state
            .failing_actions
            .remove(i)
            .map(|(_, code, message)| (code, message)),
        None => None,
    };
    let action = Action {
        id,
        command: command.to_string(),
        network: network.id,
        route,
        finishes: state.now() + state.action_duration,
        error,
        status: "running",
    };
    let json = action_json(&action);
    state.actions.insert(id, action);
    reply(201, json!({"action": json}))
}

/// What the real API would refuse about a new route (reference §3.6): the field and why.
fn add_route_problem(
    network: &Network,
    dest: (u32, u8),
    gateway: Ipv4Addr,
) -> Option<(&'static str, &'static str)> {
    let private = [("10.0.0.0/8"), ("172.16.0.0/12"), ("192.168.0.0/16")]
        .iter()
        .filter_map(|r| parse_cidr(r))
        .any(|r| contains(r, dest));
    if !private && dest != (0, 0) {
        return Some((
            "destination",
            "network route destination must be a private IPv4 range or 0.0.0.0/0",
        ));
    }
    let taken = network
        .subnets
        .iter()
        .chain(network.routes.iter().map(|(d, _)| d))
        .filter_map(|r| parse_cidr(r))
        .any(|r| contains(r, dest) || contains(dest, r));
    if taken {
        return Some((
            "destination",
            "network route destination overlaps with another subnetwork or network route",
        ));
    }
    let in_range =
        parse_cidr(&network.ip_range).is_some_and(|r| contains(r, (u32::from(gateway), 32)));
    if !in_range || gateway == Ipv4Addr::new(172, 31, 1, 1) {
        return Some(("gateway", "invalid gateway"));
    }
    None
}

/// (network address, prefix) of an IPv4 CIDR, masked.
fn parse_cidr(s: &str) -> Option<(u32, u8)> {
    let (addr, prefix) = s.split_once('/')?;
    let addr: Ipv4Addr = addr.parse().ok()?;
    let prefix: u8 = prefix.parse().ok()?;
    if prefix > 32 {
        return None;
    }
    Some((u32::from(addr) & mask(prefix), prefix))
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix))
    }
}

/// Whether `outer` contains all of `inner`.
fn contains(outer: (u32, u8), inner: (u32, u8)) -> bool {
    outer.1 <= inner.1 && inner.0 & mask(outer.1) == outer.0
}

fn format_cidr((addr, prefix): (u32, u8)) -> String {
    format!("{}/{prefix}", Ipv4Addr::from(addr))
}

/// A network as the API shows it; `servers` lists the servers attached to it.
fn network_json(n: &Network, servers: &BTreeMap<u64, Server>) -> Value {
    let attached: Vec<u64> = servers
        .values()
        .filter(|s| s.private_net.iter().any(|(net, _)| *net == n.id))
        .map(|s| s.id)
        .collect();
    json!({
        "id": n.id,
        "name": n.name,
        "ip_range": n.ip_range,
        "subnets": n.subnets.iter().map(|s| json!({
            "type": "cloud", "ip_range": s, "network_zone": "eu-central", "gateway": "10.0.0.1"
        })).collect::<Vec<_>>(),
        "routes": n.routes.iter().map(|(d, g)| json!({"destination": d, "gateway": g})).collect::<Vec<_>>(),
        "servers": attached,
        "load_balancers": [],
        "protection": {"delete": false},
        "labels": {},
        "created": "2016-01-30T23:55:00+00:00",
        "expose_routes_to_vswitch": false
    })
}

fn server_json(s: &Server) -> Value {
    json!({
        "id": s.id,
        "name": s.name,
        "status": "running",
        "public_net": {"ipv4": {"id": s.id, "ip": "198.51.100.1", "blocked": false}, "ipv6": null,
                       "floating_ips": [], "firewalls": []},
        "private_net": s.private_net.iter().map(|(n, ip)| json!({
            "network": n, "ip": ip, "alias_ips": [], "mac_address": "86:00:00:00:00:01"
        })).collect::<Vec<_>>(),
        "labels": {}
    })
}

fn action_json(a: &Action) -> Value {
    json!({
        "id": a.id,
        "command": a.command,
        "status": a.status,
        "progress": if a.status == "running" { 0 } else { 100 },
        "started": "2016-01-30T23:50:00+00:00",
        "finished": if a.status == "running" { Value::Null } else { json!("2016-01-30T23:50:01+00:00") },
        "resources": [{"id": a.network, "type": "network"}],
        "error": match (&a.error, a.status) {
            (Some((code, message)), "error") => json!({"code": code, "message": message}),
            _ => Value::Null,
        },
    })
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
