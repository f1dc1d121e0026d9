//! A Keystone v3 and Neutron v2.0 test double: a loopback HTTP/1.1 server (std only,
//! one thread per connection) serving what the OpenStack provider uses, as Keystone
//! and Neutron do (checked against gophercloud v2 by `tests/openstack_conformance.rs`):
//!
//! - `POST /v3/auth/tokens`: application-credential or password auth; the token in
//!   `X-Subject-Token`, `expires_at`/`issued_at` and a catalog with the network
//!   endpoint of region `RegionOne`;
//! - `GET /` (the version document) and `GET /v2.0/extensions` (with or without `extraroute-atomic`);
//! - `GET/PUT /v2.0/routers/{id}` (`revision_number` bumped on every change; `PUT`
//!   honours `If-Match: revision_number=N` with 412), `PUT …/add_extraroutes` and
//!   `…/remove_extraroutes` (only with the atomic extension), Neutron's
//!   `RoutesExhausted` 400 past `max_routes`;
//! - `GET /v2.0/ports` (filters `device_id`, `network_id`, `fixed_ips=ip_address=…`),
//!   `GET /v2.0/ports/{id}`, `PUT /v2.0/ports/{id}` (`allowed_address_pairs`, replaced
//!   whole; `If-Match: revision_number=N` with 412, as the real Neutron's
//!   `revision-if-match` extension does, which the double lists unless told not to).
//!
//! Faults: any status for a request, a reply lost after the change, and another
//! writer changing the router right after a request was answered. Every request is
//! recorded with its method, path, query and status.
#![allow(dead_code)]
// Each test binary uses only part of this support module.

#[allow(clippy::duplicate_mod)]
#[path = "double_server.rs"]
mod double_server;
#[path = "http_wire.rs"]
mod http_wire;

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};

use double_server::DoubleServer;

pub const APP_CREDENTIAL_ID: &str = "ac-route-controller";
pub const APP_CREDENTIAL_SECRET: &str = "s3cret-never-logged";
pub const REGION: &str = "RegionOne";

/// What an injected fault does to a matching request.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer with this status and Neutron error type, changing nothing.
    Error { status: u16, kind: String },
    /// Make the change, then close the connection without an answer.
    LostReply,
    /// Answer, then another writer adds this route (destination, nexthop) to the
    /// router, bumping its revision.
    WriterAfter(String, String),
}

impl Fault {
    pub fn error(status: u16, kind: &str) -> Fault {
        Fault::Error {
            status,
            kind: kind.to_string(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub status: u16,
    pub if_match: Option<String>,
}

impl Recorded {
    /// `tokens.issue`, `extensions.list`, `routers.get`, `routers.update`,
    /// `routers.add_extraroutes`, `routers.remove_extraroutes`, `ports.list`,
    /// `ports.get`, `ports.update` or `other`.
    pub fn call(&self) -> &'static str {
        let parts: Vec<&str> = self.path.trim_matches('/').split('/').collect();
        match (self.method.as_str(), parts.as_slice()) {
            ("POST", ["v3", "auth", "tokens"]) => "tokens.issue",
            ("GET", ["v2.0", "extensions"]) => "extensions.list",
            ("GET", ["v2.0", "routers", _]) => "routers.get",
            ("PUT", ["v2.0", "routers", _]) => "routers.update",
            ("PUT", ["v2.0", "routers", _, "add_extraroutes"]) => "routers.add_extraroutes",
            ("PUT", ["v2.0", "routers", _, "remove_extraroutes"]) => "routers.remove_extraroutes",
            ("GET", ["v2.0", "ports"]) => "ports.list",
            ("GET", ["v2.0", "ports", _]) => "ports.get",
            ("GET", ["v2.0", "subnets"]) => "subnets.list",
            ("PUT", ["v2.0", "ports", _]) => "ports.update",
            _ => "other",
        }
    }
}

/// A port as the double holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortEntry {
    pub id: String,
    pub network_id: String,
    pub device_id: String,
    pub device_owner: String,
    pub ip: String,
    pub mac: String,
    pub pairs: Vec<String>,
    pub revision: u64,
    /// Port security off: Neutron refuses allowed address pairs on it.
    pub security_off: bool,
}

struct State {
    atomic: bool,
    /// `revision-if-match` is listed (the real Neutron's revision plugin).
    if_match: bool,
    router_id: String,
    routes: Vec<(String, String)>,
    revision: u64,
    max_routes: usize,
    ports: BTreeMap<String, PortEntry>,
    /// Subnet ID to CIDR; a port's subnet is `subnet-<network>`.
    subnets: BTreeMap<String, String>,
    tokens: Vec<String>,
    issued: u64,
    token_lifetime: i64,
    faults: Vec<(String, String, usize, Fault)>,
    log: Vec<Recorded>,
    auth_bodies: Vec<Value>,
    next_id: u64,
}

struct Inner {
    state: Mutex<State>,
    base: String,
}

/// The double; stops when dropped.
pub struct NeutronDouble {
    inner: Arc<Inner>,
    server: DoubleServer,
}

impl NeutronDouble {
    /// A double with one router `router_id`, no routes, no networks, `max_routes` 30
    /// (Neutron's default), `extraroute-atomic` if `atomic`.
    pub fn start(router_id: &str, atomic: bool) -> NeutronDouble {
        let bound = DoubleServer::bind("neutron-double");
        let addr = bound.addr();
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                atomic,
                if_match: true,
                router_id: router_id.to_string(),
                routes: Vec::new(),
                revision: 1,
                max_routes: 30,
                ports: BTreeMap::new(),
                subnets: BTreeMap::new(),
                tokens: Vec::new(),
                issued: 0,
                token_lifetime: 3600,
                faults: Vec::new(),
                log: Vec::new(),
                auth_bodies: Vec::new(),
                next_id: 1,
            }),
            base: format!("http://{addr}"),
        });
        let server = bound.serve({
            let inner = inner.clone();
            move |stream, _| serve_connection(stream, &inner)
        });
        NeutronDouble { inner, server }
    }

    /// Keystone's v3 URL, for `auth-url`.
    pub fn auth_url(&self) -> String {
        format!("{}/v3", self.inner.base)
    }

    /// The network endpoint the catalog names.
    pub fn network_url(&self) -> String {
        format!("{}/network", self.inner.base)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A cloud.conf for this double with an application credential.
    pub fn cloud_conf(&self, router_id: &str) -> String {
        format!(
            "[Global]\nauth-url = {}\nregion = {REGION}\napplication-credential-id = {APP_CREDENTIAL_ID}\n\
             application-credential-secret = {APP_CREDENTIAL_SECRET}\n[Route]\nrouter-id = {router_id}\n",
            self.auth_url()
        )
    }

    pub fn set_atomic(&self, atomic: bool) {
        self.state().atomic = atomic;
    }

    /// Whether `revision-if-match` is listed (a Neutron without the revision plugin).
    pub fn set_if_match(&self, listed: bool) {
        self.state().if_match = listed;
    }

    /// Sets the pairs of the port with fixed IP `ip` as another writer would (bumps
    /// its revision).
    pub fn put_pairs(&self, ip: &str, pairs: &[&str]) {
        for p in self.state().ports.values_mut().filter(|p| p.ip == ip) {
            p.pairs = pairs.iter().map(|s| s.to_string()).collect();
            p.revision += 1;
        }
    }

    pub fn set_max_routes(&self, n: usize) {
        self.state().max_routes = n;
    }

    pub fn set_token_lifetime(&self, seconds: i64) {
        self.state().token_lifetime = seconds;
    }

    /// Every token issued so far stops being accepted (as if revoked).
    pub fn revoke_tokens(&self) {
        self.state().tokens.clear();
    }

    pub fn tokens_issued(&self) -> u64 {
        self.state().issued
    }

    /// The bodies of every token request.
    pub fn auth_bodies(&self) -> Vec<Value> {
        self.state().auth_bodies.clone()
    }

    /// Attaches the router to `network` (an interface port of the router).
    /// Its subnet (`subnet-<network>`) is the /24 of `router_ip`.
    pub fn attach_network(&self, network: &str, router_ip: &str) {
        let cidr = match router_ip.rsplit_once('.') {
            Some((head, _)) => format!("{head}.0/24"),
            None => format!("{router_ip}/64"),
        };
        self.state()
            .subnets
            .insert(format!("subnet-{network}"), cidr);
        let router = self.state().router_id.clone();
        self.add_port(network, &router, "network:router_interface", router_ip);
    }

    /// A port of instance `device_id` with fixed IP `ip` on `network`; its ID.
    pub fn add_port(&self, network: &str, device_id: &str, device_owner: &str, ip: &str) -> String {
        let mut s = self.state();
        s.next_id += 1;
        let id = format!("port-{:04}", s.next_id);
        let mac = format!(
            "fa:16:3e:00:{:02x}:{:02x}",
            (s.next_id >> 8) & 0xff,
            s.next_id & 0xff
        );
        s.ports.insert(
            id.clone(),
            PortEntry {
                id: id.clone(),
                network_id: network.to_string(),
                device_id: device_id.to_string(),
                device_owner: device_owner.to_string(),
                ip: ip.to_string(),
                mac,
                pairs: Vec::new(),
                revision: 1,
                security_off: false,
            },
        );
        id
    }

    /// A Nova instance's port on `network`.
    pub fn add_instance(&self, network: &str, instance_id: &str, ip: &str) -> String {
        self.add_port(network, instance_id, "compute:nova", ip)
    }

    /// Turns port security off on the port with fixed IP `ip`.
    pub fn disable_port_security(&self, ip: &str) {
        for p in self.state().ports.values_mut().filter(|p| p.ip == ip) {
            p.security_off = true;
        }
    }

    pub fn remove_port(&self, id: &str) {
        self.state().ports.remove(id);
    }

    /// The allowed address pairs of the port with fixed IP `ip`.
    pub fn pairs_of(&self, ip: &str) -> Vec<String> {
        self.state()
            .ports
            .values()
            .find(|p| p.ip == ip)
            .map(|p| p.pairs.clone())
            .unwrap_or_default()
    }

    /// Adds a route as another writer would (bumps the revision).
    pub fn put_route(&self, destination: &str, nexthop: &str) {
        let mut s = self.state();
        s.routes
            .push((destination.to_string(), nexthop.to_string()));
        s.revision += 1;
    }

    /// The router's routes, sorted.
    pub fn routes(&self) -> Vec<(String, String)> {
        let mut r = self.state().routes.clone();
        r.sort();
        r
    }

    pub fn revision(&self) -> u64 {
        self.state().revision
    }

    /// The next `times` requests of `method` whose path starts with `path_prefix`
    /// meet `fault`.
    pub fn inject(&self, method: &str, path_prefix: &str, times: usize, fault: Fault) {
        self.state()
            .faults
            .push((method.to_string(), path_prefix.to_string(), times, fault));
    }

    /// Whether another writer injected to write `destination` (`Fault::WriterAfter`)
    /// is still waiting for its request.
    pub fn writer_pending(&self, destination: &str) -> bool {
        self.state().faults.iter().any(|(_, _, times, fault)| {
            *times > 0 && matches!(fault, Fault::WriterAfter(d, _) if d == destination)
        })
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state().log.clone()
    }

    pub fn clear_requests(&self) {
        self.state().log.clear();
    }

    pub fn count(&self, call: &str) -> usize {
        self.state().log.iter().filter(|r| r.call() == call).count()
    }
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

    /// Every `key=value` of the query, decoded.
    fn query_pairs(&self) -> Vec<(String, String)> {
        self.query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| {
                (
                    http_wire::percent_decode(k, true),
                    http_wire::percent_decode(v, true),
                )
            })
            .collect()
    }
}

enum Outcome {
    Reply(u16, Value, Vec<(String, String)>),
    Close,
}

fn reply(status: u16, body: Value) -> Outcome {
    Outcome::Reply(status, body, Vec::new())
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
                let _ = stream.shutdown(std::net::Shutdown::Both);
                return;
            }
            Outcome::Reply(status, body, headers) => {
                let body = serde_json::to_vec(&body).unwrap_or_default();
                let mut head = format!(
                    "HTTP/1.1 {status} Status\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
                    body.len()
                );
                for (k, v) in headers {
                    head.push_str(&format!("{k}: {v}\r\n"));
                }
                head.push_str("\r\n");
                let mut message = head.into_bytes();
                message.extend_from_slice(&body);
                if stream.write_all(&message).is_err() {
                    return;
                }
            }
        }
    }
}

/// Neutron's error body.
fn neutron_error(status: u16, kind: &str, message: &str) -> Outcome {
    reply(
        status,
        json!({"NeutronError": {"type": kind, "message": message, "detail": ""}}),
    )
}

fn handle(inner: &Inner, request: &Request) -> Outcome {
    let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    let path = request
        .path
        .strip_prefix("/network")
        .unwrap_or(&request.path)
        .to_string();
    let fault = s
        .faults
        .iter_mut()
        .find(|(m, p, n, _)| *n > 0 && *m == request.method && path.starts_with(p.as_str()))
        .map(|f| {
            f.2 -= 1;
            f.3.clone()
        });
    let mut outcome = match &fault {
        Some(Fault::Error { status, kind }) => {
            neutron_error(*status, kind, &format!("injected fault {status} {kind}"))
        }
        _ => route(inner, &mut s, request, &path),
    };
    match fault {
        Some(Fault::LostReply) => outcome = Outcome::Close,
        Some(Fault::WriterAfter(d, n)) => {
            s.routes.push((d, n));
            s.revision += 1;
        }
        _ => {}
    }
    let status = match &outcome {
        Outcome::Reply(status, ..) => *status,
        Outcome::Close => 0,
    };
    s.log.push(Recorded {
        method: request.method.clone(),
        path,
        query: request.query.clone(),
        status,
        if_match: request.header("If-Match").map(str::to_string),
    });
    outcome
}

fn route(inner: &Inner, s: &mut State, request: &Request, path: &str) -> Outcome {
    if request.method == "POST" && path == "/v3/auth/tokens" {
        return issue_token(inner, s, request);
    }
    // Neutron's version document, which clients read without a token.
    if request.method == "GET" && (path.is_empty() || path == "/") {
        let href = format!("{}/network/v2.0/", inner.base);
        return reply(
            200,
            json!({"versions": [{"id": "v2.0", "status": "CURRENT",
            "links": [{"href": href, "rel": "self"}]}]}),
        );
    }
    let authorized = request
        .header("X-Auth-Token")
        .is_some_and(|t| s.tokens.iter().any(|k| k == t));
    if !authorized {
        return reply(
            401,
            json!({"error": {"code": 401, "title": "Unauthorized",
            "message": "The request you have made requires authentication."}}),
        );
    }
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (request.method.as_str(), parts.as_slice()) {
        ("GET", ["v2.0", "extensions"]) => {
            let mut aliases = vec![
                "router",
                "extraroute",
                "allowed-address-pairs",
                "standard-attr-revisions",
            ];
            if s.atomic {
                aliases.push("extraroute-atomic");
            }
            if s.if_match {
                aliases.push("revision-if-match");
            }
            let extensions: Vec<Value> = aliases
                .iter()
                .map(|a| {
                    json!({"alias": a, "name": a, "description": format!("the {a} extension"),
                                "updated": "2019-01-01T00:00:00-00:00", "links": []})
                })
                .collect();
            reply(200, json!({"extensions": extensions}))
        }
        ("GET", ["v2.0", "routers", id]) if *id == s.router_id => {
            reply(200, json!({"router": router_json(s)}))
        }
        ("PUT", ["v2.0", "routers", id]) if *id == s.router_id => {
            if let Some(m) = request.header("If-Match") {
                let want = m
                    .strip_prefix("revision_number=")
                    .and_then(|n| n.parse::<u64>().ok());
                if want != Some(s.revision) {
                    return neutron_error(
                        412,
                        "PreconditionFailed",
                        &format!(
                            "Constrained to {m}, but current revision_number is {}",
                            s.revision
                        ),
                    );
                }
            }
            let Some(routes) = routes_of(&body) else {
                return neutron_error(400, "HTTPBadRequest", "Invalid input: router.routes");
            };
            if routes.len() > s.max_routes && routes.len() > s.routes.len() {
                return exhausted(s);
            }
            s.routes = routes;
            s.revision += 1;
            reply(200, json!({"router": router_json(s)}))
        }
        (
            "PUT",
            [
                "v2.0",
                "routers",
                id,
                action @ ("add_extraroutes" | "remove_extraroutes"),
            ],
        ) if *id == s.router_id => {
            if !s.atomic {
                return neutron_error(404, "HTTPNotFound", "The resource could not be found.");
            }
            let Some(routes) = routes_of(&body) else {
                return neutron_error(400, "HTTPBadRequest", "Invalid input: router.routes");
            };
            if *action == "add_extraroutes" {
                let mut next = s.routes.clone();
                for r in routes {
                    if !next.contains(&r) {
                        next.push(r);
                    }
                }
                if next.len() > s.max_routes && next.len() > s.routes.len() {
                    return exhausted(s);
                }
                s.routes = next;
            } else {
                s.routes.retain(|r| !routes.contains(r));
            }
            s.revision += 1;
            reply(200, json!({"router": router_json(s)}))
        }
        ("GET", ["v2.0", "routers", _]) | ("PUT", ["v2.0", "routers", ..]) => {
            neutron_error(404, "RouterNotFound", "Router could not be found")
        }
        ("GET", ["v2.0", "ports"]) => {
            let filters = request.query_pairs();
            let ports: Vec<Value> = s
                .ports
                .values()
                .filter(|p| {
                    filters.iter().all(|(k, v)| match k.as_str() {
                        "device_id" => p.device_id == *v,
                        "network_id" => p.network_id == *v,
                        "device_owner" => p.device_owner == *v,
                        "fixed_ips" => v.strip_prefix("ip_address=").is_some_and(|ip| p.ip == ip),
                        _ => true,
                    })
                })
                .map(port_json)
                .collect();
            reply(200, json!({"ports": ports}))
        }
        ("GET", ["v2.0", "subnets"]) => {
            let ids: Vec<String> = request
                .query_pairs()
                .into_iter()
                .filter(|(k, _)| k == "id")
                .map(|(_, v)| v)
                .collect();
            let subnets: Vec<Value> = s
                .subnets
                .iter()
                .filter(|(id, _)| ids.is_empty() || ids.contains(id))
                .map(|(id, cidr)| json!({"id": id, "cidr": cidr, "ip_version": 4}))
                .collect();
            reply(200, json!({"subnets": subnets}))
        }
        ("GET", ["v2.0", "ports", id]) => match s.ports.get(*id) {
            Some(port) => reply(200, json!({"port": port_json(port)})),
            None => neutron_error(
                404,
                "PortNotFound",
                &format!("Port {id} could not be found."),
            ),
        },
        ("PUT", ["v2.0", "ports", id]) => {
            let Some(pairs) = body["port"]["allowed_address_pairs"].as_array().cloned() else {
                return neutron_error(
                    400,
                    "HTTPBadRequest",
                    "Invalid input: port.allowed_address_pairs",
                );
            };
            let Some(port) = s.ports.get_mut(*id) else {
                return neutron_error(
                    404,
                    "PortNotFound",
                    &format!("Port {id} could not be found."),
                );
            };
            if let Some(m) = request.header("If-Match") {
                let want = m
                    .strip_prefix("revision_number=")
                    .and_then(|n| n.parse::<u64>().ok());
                if want != Some(port.revision) {
                    return neutron_error(
                        412,
                        "PreconditionFailed",
                        &format!(
                            "Constrained to {m}, but current revision_number is {}",
                            port.revision
                        ),
                    );
                }
            }
            if port.security_off && !pairs.is_empty() {
                return neutron_error(
                    409,
                    "AddressPairAndPortSecurityRequired",
                    "Port Security must be enabled in order to have allowed address pairs on a port.",
                );
            }
            port.pairs = pairs
                .iter()
                .filter_map(|p| p["ip_address"].as_str().map(str::to_string))
                .collect();
            port.revision += 1;
            let port = port.clone();
            reply(200, json!({"port": port_json(&port)}))
        }
        _ => neutron_error(404, "HTTPNotFound", "The resource could not be found."),
    }
}

fn exhausted(s: &State) -> Outcome {
    neutron_error(
        400,
        "RoutesExhausted",
        &format!(
            "Unable to complete operation for {}. The number of routes exceeds the maximum {}.",
            s.router_id, s.max_routes
        ),
    )
}

fn routes_of(body: &Value) -> Option<Vec<(String, String)>> {
    body["router"]["routes"]
        .as_array()?
        .iter()
        .map(|r| {
            Some((
                r["destination"].as_str()?.to_string(),
                r["nexthop"].as_str()?.to_string(),
            ))
        })
        .collect()
}

fn router_json(s: &State) -> Value {
    let routes: Vec<Value> = s
        .routes
        .iter()
        .map(|(d, n)| json!({"destination": d, "nexthop": n}))
        .collect();
    json!({
        "id": s.router_id, "name": "cluster-router", "description": "", "status": "ACTIVE",
        "admin_state_up": true, "tenant_id": "project-1", "project_id": "project-1",
        "distributed": false, "availability_zone_hints": [],
        "external_gateway_info": null, "tags": [],
        "routes": routes, "revision_number": s.revision,
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
    })
}

fn port_json(p: &PortEntry) -> Value {
    let mut port = port_fields(p);
    // The port-security extension's field, shown where it matters (gophercloud's
    // ports.Port lacks it; its portsecurity extension adds it).
    if p.security_off {
        port["port_security_enabled"] = json!(false);
    }
    port
}

fn port_fields(p: &PortEntry) -> Value {
    let pairs: Vec<Value> = p
        .pairs
        .iter()
        .map(|ip| json!({"ip_address": ip, "mac_address": p.mac}))
        .collect();
    json!({
        "id": p.id, "name": "", "description": "", "network_id": p.network_id,
        "admin_state_up": true, "status": "ACTIVE", "mac_address": p.mac,
        "fixed_ips": [{"subnet_id": format!("subnet-{}", p.network_id), "ip_address": p.ip}],
        "tenant_id": "project-1", "project_id": "project-1", "device_owner": p.device_owner,
        "security_groups": [], "device_id": p.device_id, "allowed_address_pairs": pairs,
        "tags": [], "revision_number": p.revision,
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
    })
}

fn issue_token(inner: &Inner, s: &mut State, request: &Request) -> Outcome {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    s.auth_bodies.push(body.clone());
    let identity = &body["auth"]["identity"];
    let ok = match identity["methods"][0].as_str() {
        Some("application_credential") => {
            identity["application_credential"]["id"] == APP_CREDENTIAL_ID
                && identity["application_credential"]["secret"] == APP_CREDENTIAL_SECRET
        }
        Some("password") => {
            identity["password"]["user"]["password"] == "pw"
                && body["auth"]["scope"]["project"].is_object()
        }
        _ => false,
    };
    if !ok {
        return reply(
            401,
            json!({"error": {"code": 401, "title": "Unauthorized",
            "message": "The request you have made requires authentication."}}),
        );
    }
    s.issued += 1;
    let token = format!("gAAAAA-double-token-{}", s.issued);
    s.tokens.push(token.clone());
    // Keystone's clock: a fixed day, so that only the lifetime matters.
    let issued_at = "2026-12-03T08:00:00.000000Z";
    let end = 8 * 3600 + s.token_lifetime;
    let expires_at = format!(
        "2026-12-{:02}T{:02}:{:02}:{:02}.000000Z",
        3 + end / 86_400,
        (end % 86_400) / 3600,
        (end % 3600) / 60,
        end % 60
    );
    let network = format!("{}/network", inner.base);
    Outcome::Reply(
        201,
        json!({"token": {
            "methods": [identity["methods"][0]], "expires_at": expires_at, "issued_at": issued_at,
            "audit_ids": ["audit"], "user": {"id": "user-1", "name": "routes", "domain": {"id": "default", "name": "Default"}},
            "project": {"id": "project-1", "name": "cluster", "domain": {"id": "default", "name": "Default"}},
            "roles": [{"id": "r1", "name": "member"}],
            "catalog": [
                {"type": "identity", "id": "svc-ks", "name": "keystone", "endpoints": [
                    {"id": "e0", "interface": "public", "region": REGION, "region_id": REGION, "url": format!("{}/v3", inner.base)}]},
                {"type": "network", "id": "svc-net", "name": "neutron", "endpoints": [
                    {"id": "e1", "interface": "internal", "region": REGION, "region_id": REGION, "url": "http://192.0.2.1:9696"},
                    {"id": "e2", "interface": "public", "region": "RegionTwo", "region_id": "RegionTwo", "url": "http://192.0.2.2:9696"},
                    {"id": "e3", "interface": "public", "region": REGION, "region_id": REGION, "url": network}]}
            ]
        }}),
        vec![("X-Subject-Token".into(), token)],
    )
}
