//! An Azure Resource Manager test double: a loopback HTTP/1.1 server (std only, one
//! thread per connection, the shape of `hcloud_double.rs`) serving the part of ARM a
//! route controller uses, close enough to test an Azure provider against it:
//!
//! - **Route tables** (`Microsoft.Network`, api-version [`NETWORK_API_VERSION`], the one
//!   armnetwork v9 sends): GET of a table with its `etag` and `properties.routes[]`;
//!   PUT of the whole table, honouring `If-Match` / `If-None-Match` (a stale ETag is
//!   412 `PreconditionFailed` with ARM's `PreconditionFailedEtagMismatch` detail), a new
//!   weak ETag (`W/"<uuid>"`) for every change; GET, PUT and DELETE of one route
//!   (`/routeTables/{t}/routes/{r}`) and the route list. Every write is a long-running
//!   operation (LRO): the change is visible at once with `provisioningState`
//!   `Updating`, the reply (200/201, or 202 for a DELETE, 204 when the route is absent)
//!   carries `Azure-AsyncOperation` (and `Location` for a DELETE), and the operation
//!   URL answers `InProgress` for a configurable number of polls and time, then
//!   `Succeeded` (or `Failed` with an error, after which the table's routes are put
//!   back as they were and its state is `Failed`).
//! - **One write at a time per table**: a write while a table's LRO runs is refused as
//!   the network resource provider refuses it: 409 `AnotherOperationInProgress` by
//!   default, or 429 `RetryableError` / `RetryableErrorDueToAnotherOperation` with
//!   `Retry-After` (Microsoft documents the 429 form for a locked resource), see
//!   [`BusyReply`].
//! - **VMs and NICs**: GET of a VM (`Microsoft.Compute`, api-version
//!   [`COMPUTE_API_VERSION`], armcompute v8's) with `networkProfile.networkInterfaces`,
//!   and of a NIC with `enableIPForwarding` and its `ipConfigurations[]`'
//!   `privateIPAddress` (the pre-flight "IP forwarding must be on").
//! - **Tokens**: Entra ID client credentials (`POST /{tenant}/oauth2/v2.0/token` with a
//!   client secret, or a `client_assertion` for workload identity) and the IMDS
//!   managed identity endpoint (`GET /metadata/identity/oauth2/token`, header
//!   `Metadata: true`, optional `client_id` / `msi_res_id`). ARM requests need a token
//!   the double issued (or one added with [`ArmDouble::add_token`]); a missing or
//!   unknown one is 401 with ARM's body and `WWW-Authenticate`. The log names the
//!   identity behind every request.
//! - **Budget headers**: `x-ms-ratelimit-remaining-subscription-reads` on reads and
//!   `-writes` on writes, counting down from values a test sets; at zero the class is
//!   throttled (429 `SubscriptionRequestsThrottled`, `Retry-After`).
//! - **Faults** ([`Fault`]): an ARM error (412, 409, 5xx, ...), 429 with `Retry-After`,
//!   a closed connection, a reply lost after the change was made, an extra field the
//!   SDK's schema lacks (to prove the conformance check strict), and through the
//!   settings slow and failing LROs.
//!
//! It leaves out: other resource types and the list endpoints of tables, VMs and NICs;
//! VM scale sets (VMSS VMs and their NICs); PATCH (tags) and table DELETE; route
//! validation beyond the fields, ARM's name rule (`400 InvalidResourceName` with
//! ARM's message, for the whole PUT) and the route limit (no overlap or next-hop
//! reachability checks; its other 400 codes are the double's own:
//! `InvalidRequestFormat`, and for the limit, whose code Azure documents nowhere,
//! `RouteTableRouteLimitExceeded`);
//! `CanceledAndSupersededDueToAnotherOperation` (ARM cancels a running PUT when
//! a later one is accepted; the double refuses the later one instead); token
//! signatures and expiry (tokens are opaque strings); HTTPS (clients must allow a
//! credential over HTTP, as azcore's `InsecureAllowCredentialWithHTTP` does).
//!
//! `tests/azure_conformance.rs` checks the double against Microsoft's own Go SDK.
#![allow(dead_code)]
// Each test binary uses only part of this support module.

#[allow(clippy::duplicate_mod)]
#[path = "double_server.rs"]
mod double_server;
#[path = "http_wire.rs"]
mod http_wire;

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use double_server::DoubleServer;

/// Routes a table holds at most unless a test sets otherwise: Azure's documented
/// "User-defined routes per route table: 1,000" (azure-subscription-service-limits).
pub const DEFAULT_ROUTE_LIMIT: usize = 1000;

/// The refusal of a table over its limit: 400 in ARM's error shape. Azure's code for
/// it is in none of its API definitions (azure-rest-api-specs has no error catalogue
/// for route tables), so the code is the double's own (the provider reads any code
/// naming a route limit as a full table); the provider must never write a table over
/// the limit it is given.
fn route_limit_reached(id: &str, routes: usize, limit: usize) -> Reply {
    arm_error(
        400,
        "RouteTableRouteLimitExceeded",
        &format!(
            "Route table {id} would have {routes} routes, more than the {limit} user-defined \
             routes a route table may have. [the double's code: Azure documents none]"
        ),
    )
}

/// The `Microsoft.Network` api-version the double serves (armnetwork v9.0.0's).
pub const NETWORK_API_VERSION: &str = "2025-05-01";
/// The `Microsoft.Compute` api-version the double serves (armcompute v8.4.0's).
pub const COMPUTE_API_VERSION: &str = "2026-04-01";
/// The IMDS token endpoint's api-version.
pub const IMDS_API_VERSION: &str = "2018-02-01";
/// The audience ARM tokens are for; a client-credentials `scope` is this plus
/// `/.default`, an IMDS `resource` this with or without a trailing slash.
pub const ARM_AUDIENCE: &str = "https://management.azure.com";

/// What an injected fault does to a matching request.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer with this status and ARM error code, without processing the request.
    Error {
        status: u16,
        code: String,
        message: String,
    },
    /// 412 `PreconditionFailed` as for a stale ETag, without processing the request.
    PreconditionFailed,
    /// 429 with `Retry-After: seconds` (ARM's subscription throttling), unprocessed.
    Throttle { retry_after: u32 },
    /// Read the request and close the connection without processing or answering.
    Close,
    /// Process the request (the change is made), then close the connection without
    /// an answer: the client cannot know whether its write happened.
    LostReply,
    /// Process the request, then answer with `name: value` added to the JSON object at
    /// `pointer` (an RFC 6901 pointer into the reply, `""` for the top) — a field the
    /// client's schema may not know.
    ExtraField {
        pointer: String,
        name: String,
        value: Value,
    },
}

impl Fault {
    pub fn error(status: u16, code: &str, message: &str) -> Fault {
        Fault::Error {
            status,
            code: code.into(),
            message: message.into(),
        }
    }

    /// A 5xx with ARM's body (`InternalServerError`, `ServiceUnavailable`, ...).
    pub fn server_error(status: u16) -> Fault {
        let code = match status {
            503 => "ServiceUnavailable",
            504 => "GatewayTimeout",
            502 => "BadGateway",
            _ => "InternalServerError",
        };
        Fault::error(status, code, "injected server error")
    }

    /// 409 `AnotherOperationInProgress`, as if the table were busy.
    pub fn another_operation() -> Fault {
        Fault::error(
            409,
            "AnotherOperationInProgress",
            "Another operation on this or dependent resource is in progress.",
        )
    }

    pub fn extra_field(pointer: &str, name: &str, value: Value) -> Fault {
        Fault::ExtraField {
            pointer: pointer.into(),
            name: name.into(),
            value,
        }
    }
}

/// How the double refuses a write to a table whose LRO still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusyReply {
    /// 409 `AnotherOperationInProgress` (the default).
    AnotherOperationInProgress,
    /// 429 `RetryableError` with detail `RetryableErrorDueToAnotherOperation` and
    /// `Retry-After: seconds`.
    Retryable { retry_after: u32 },
}

/// What a request was, for counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A GET of a resource or a list.
    Read,
    /// A PUT or DELETE.
    Write,
    /// A GET of an async operation's status (`/operations/` or `/operationResults/`).
    Poll,
    /// A token request (Entra ID or IMDS).
    Token,
    /// Anything else (answered 404 or 405).
    Other,
}

/// One request as the double saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub kind: Kind,
    /// The status answered; 0 when the connection was closed instead.
    pub status: u16,
    pub at: Instant,
    /// The bearer token the request carried ("" without one).
    pub token: String,
    /// Whose token it was (see [`ArmDouble::identity_of`]); `None` when the token was
    /// missing or unknown, and for token requests the identity a token was issued to.
    pub identity: Option<String>,
    /// `If-Match` of a write, as sent.
    pub if_match: Option<String>,
    /// The ARM error code answered (`error.code` of the body), if any.
    pub code: Option<String>,
}

/// A route as the double holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteEntry {
    pub name: String,
    pub address_prefix: String,
    /// `VirtualAppliance`, `VnetLocal`, `Internet`, `VirtualNetworkGateway` or `None`.
    pub next_hop_type: String,
    pub next_hop_ip: Option<String>,
}

impl RouteEntry {
    /// A `VirtualAppliance` route to `next_hop_ip`, as a route controller makes them.
    pub fn appliance(name: &str, prefix: &str, next_hop_ip: &str) -> RouteEntry {
        RouteEntry {
            name: name.into(),
            address_prefix: prefix.into(),
            next_hop_type: "VirtualAppliance".into(),
            next_hop_ip: Some(next_hop_ip.into()),
        }
    }
}

/// Requests counted by kind, and the refusals among them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub reads: usize,
    pub writes: usize,
    pub polls: usize,
    pub tokens: usize,
    /// Answered 412.
    pub precondition_failed: usize,
    /// Answered 409, or 429 `RetryableError`, because the table was busy.
    pub busy: usize,
    /// Answered 429 for the budget (`SubscriptionRequestsThrottled`).
    pub throttled: usize,
    /// ARM requests answered 401 (token requests refused are not counted).
    pub unauthorized: usize,
}

#[derive(Clone, Debug)]
struct StoredRoute {
    route: RouteEntry,
    etag: String,
    state: &'static str,
}

#[derive(Clone, Debug)]
struct Table {
    name: String,
    location: String,
    etag: String,
    guid: String,
    routes: Vec<StoredRoute>,
    state: &'static str,
    disable_bgp: bool,
    tags: BTreeMap<String, String>,
}

#[derive(Clone, Debug)]
struct Vm {
    name: String,
    location: String,
    vm_id: String,
    /// NIC resource IDs; the first is primary.
    nics: Vec<String>,
}

#[derive(Clone, Debug)]
struct Nic {
    name: String,
    location: String,
    etag: String,
    private_ip: String,
    ip_forwarding: bool,
    vm: Option<String>,
}

/// An async operation: a write to one table.
#[derive(Clone, Debug)]
struct Operation {
    /// (resource group, table), lowercased.
    table: (String, String),
    /// `InProgress` answers still to give.
    polls_left: u32,
    /// Not done before this instant.
    not_before: Instant,
    /// The error it ends with, if it fails.
    fails: Option<(String, String)>,
    /// The routes to put back when it fails.
    before: Vec<StoredRoute>,
    /// `InProgress`, `Succeeded` or `Failed`.
    status: &'static str,
}

struct InjectedFault {
    method: String,
    /// Matches a path that ends with this (case-insensitive); `None`: every poll.
    path_suffix: Option<String>,
    remaining: usize,
    fault: Fault,
}

#[derive(Clone, Debug)]
struct Client {
    tenant: String,
    client_id: String,
    secret: Option<String>,
    assertion: Option<String>,
}

#[derive(Clone, Debug)]
struct ManagedIdentity {
    client_id: String,
    resource_id: Option<String>,
}

struct State {
    tables: BTreeMap<(String, String), Table>,
    vms: BTreeMap<(String, String), Vm>,
    nics: BTreeMap<(String, String), Nic>,
    operations: BTreeMap<String, Operation>,
    clients: Vec<Client>,
    identities: Vec<ManagedIdentity>,
    /// Accepted bearer tokens and whose they are.
    tokens: BTreeMap<String, String>,
    lro_polls: u32,
    lro_duration: Duration,
    poll_retry_after: Option<u32>,
    failing_operations: Vec<(String, String)>,
    busy_reply: BusyReply,
    reads_left: u64,
    writes_left: u64,
    throttle_retry_after: u32,
    /// Routes a table may hold (ARM refuses a PUT of more).
    route_limit: usize,
    /// Route names refused besides ARM's name rule (a rule the provider cannot check
    /// before writing), as ARM refuses a name: the whole PUT.
    refused_names: Vec<String>,
    faults: Vec<InjectedFault>,
    log: Vec<Recorded>,
    serial: u64,
    /// The time LROs run in.
    clock: Clock,
}

/// A source of the current time: the real clock, or a test's virtual one.
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

impl State {
    fn uuid(&mut self) -> String {
        self.serial += 1;
        let n = self.serial;
        let seed = unix_now() as u32;
        format!(
            "{seed:08x}-{:04x}-4{:03x}-8{:03x}-{n:012x}",
            (n >> 16) & 0xffff,
            n & 0xfff,
            (n >> 4) & 0xfff
        )
    }

    fn etag(&mut self) -> String {
        format!("W/\"{}\"", self.uuid())
    }

    fn issue_token(&mut self, identity: &str) -> String {
        let token = format!("arm-double-token-{}", self.uuid());
        self.tokens.insert(token.clone(), identity.to_string());
        token
    }

    /// Whether the table has an operation that has not ended.
    fn busy(&self, key: &(String, String), now: Instant) -> bool {
        self.operations
            .values()
            .any(|o| &o.table == key && o.status == "InProgress" && !o.may_end(now))
    }
}

impl Operation {
    fn may_end(&self, now: Instant) -> bool {
        self.polls_left == 0 && now >= self.not_before
    }
}

struct Inner {
    subscription: String,
    state: Mutex<State>,
    addr: SocketAddr,
}

/// The running double. Dropping it stops the server.
pub struct ArmDouble {
    inner: Arc<Inner>,
    server: DoubleServer,
}

impl ArmDouble {
    /// Starts a double for `subscription` on a free loopback port. It holds no
    /// resources and no identities; LROs answer one `InProgress` poll and then end;
    /// the budget counters start at ARM's hourly 12 000 reads and 1 200 writes.
    pub fn start(subscription: &str) -> ArmDouble {
        let bound = DoubleServer::bind("arm-double");
        let addr = bound.addr();
        let inner = Arc::new(Inner {
            subscription: subscription.to_string(),
            state: Mutex::new(State {
                tables: BTreeMap::new(),
                vms: BTreeMap::new(),
                nics: BTreeMap::new(),
                operations: BTreeMap::new(),
                clients: Vec::new(),
                identities: Vec::new(),
                tokens: BTreeMap::new(),
                lro_polls: 1,
                lro_duration: Duration::ZERO,
                poll_retry_after: None,
                failing_operations: Vec::new(),
                busy_reply: BusyReply::AnotherOperationInProgress,
                reads_left: 12_000,
                writes_left: 1_200,
                throttle_retry_after: 5,
                route_limit: DEFAULT_ROUTE_LIMIT,
                refused_names: Vec::new(),
                faults: Vec::new(),
                log: Vec::new(),
                serial: 0,
                clock: Arc::new(Instant::now),
            }),
            addr,
        });
        let server = bound.serve({
            let inner = inner.clone();
            move |stream, _| serve_connection(stream, &inner)
        });
        ArmDouble { inner, server }
    }

    /// The base URL of ARM, of the Entra ID authority and of IMDS alike
    /// (`http://127.0.0.1:PORT`, no trailing slash).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    pub fn subscription(&self) -> &str {
        &self.inner.subscription
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    // ---- identities -------------------------------------------------------------

    /// Registers an app that gets tokens with a client secret.
    pub fn add_client_secret(&self, tenant: &str, client_id: &str, secret: &str) {
        self.state().clients.push(Client {
            tenant: tenant.into(),
            client_id: client_id.into(),
            secret: Some(secret.into()),
            assertion: None,
        });
    }

    /// Registers an app that gets tokens with a federated `client_assertion`
    /// (workload identity: the projected service account token).
    pub fn add_federated_client(&self, tenant: &str, client_id: &str, assertion: &str) {
        self.state().clients.push(Client {
            tenant: tenant.into(),
            client_id: client_id.into(),
            secret: None,
            assertion: Some(assertion.into()),
        });
    }

    /// Gives the "VM" a managed identity that IMDS hands tokens for; the first one
    /// added is the default (no `client_id` / `msi_res_id` in the request).
    pub fn add_managed_identity(&self, client_id: &str, resource_id: Option<&str>) {
        self.state().identities.push(ManagedIdentity {
            client_id: client_id.into(),
            resource_id: resource_id.map(str::to_string),
        });
    }

    /// Accepts `token` as a bearer token of `identity` without a token request.
    pub fn add_token(&self, token: &str, identity: &str) {
        self.state()
            .tokens
            .insert(token.to_string(), identity.to_string());
    }

    /// Whose token this is: `client:<tenant>/<client_id>`, `federated:<tenant>/<client_id>`,
    /// `msi:<client_id>`, or the name given to [`ArmDouble::add_token`].
    pub fn identity_of(&self, token: &str) -> Option<String> {
        self.state().tokens.get(token).cloned()
    }

    // ---- resources --------------------------------------------------------------

    /// Creates an empty route table (state `Succeeded`) and returns its ETag.
    pub fn create_route_table(&self, rg: &str, name: &str, location: &str) -> String {
        let mut state = self.state();
        let etag = state.etag();
        let guid = state.uuid();
        state.tables.insert(
            key(rg, name),
            Table {
                name: name.into(),
                location: location.into(),
                etag: etag.clone(),
                guid,
                routes: Vec::new(),
                state: "Succeeded",
                disable_bgp: false,
                tags: BTreeMap::new(),
            },
        );
        etag
    }

    /// Adds or replaces a route directly, as another writer would, and bumps the
    /// table's ETag. Returns the new ETag (`None` without such a table).
    pub fn put_route(&self, rg: &str, table: &str, route: RouteEntry) -> Option<String> {
        let mut state = self.state();
        let etag = state.etag();
        let route_etag = etag.clone();
        let t = state.tables.get_mut(&key(rg, table))?;
        t.routes
            .retain(|r| !r.route.name.eq_ignore_ascii_case(&route.name));
        t.routes.push(StoredRoute {
            route,
            etag: route_etag,
            state: "Succeeded",
        });
        t.etag = etag.clone();
        Some(etag)
    }

    /// Removes a route directly, as another writer would, and bumps the ETag.
    pub fn remove_route(&self, rg: &str, table: &str, name: &str) -> Option<String> {
        let mut state = self.state();
        let etag = state.etag();
        let t = state.tables.get_mut(&key(rg, table))?;
        t.routes
            .retain(|r| !r.route.name.eq_ignore_ascii_case(name));
        t.etag = etag.clone();
        Some(etag)
    }

    /// The table's routes as it holds them now (including an LRO's pending change).
    pub fn routes(&self, rg: &str, table: &str) -> Vec<RouteEntry> {
        self.state()
            .tables
            .get(&key(rg, table))
            .map(|t| t.routes.iter().map(|r| r.route.clone()).collect())
            .unwrap_or_default()
    }

    pub fn table_etag(&self, rg: &str, table: &str) -> Option<String> {
        self.state()
            .tables
            .get(&key(rg, table))
            .map(|t| t.etag.clone())
    }

    /// The table's `provisioningState`: `Succeeded`, `Updating` or `Failed`.
    pub fn table_state(&self, rg: &str, table: &str) -> Option<String> {
        self.state()
            .tables
            .get(&key(rg, table))
            .map(|t| t.state.to_string())
    }

    /// The ARM resource ID of a resource in this subscription, e.g.
    /// `resource_id("rg", "Microsoft.Network/networkInterfaces", "nic-1")`.
    pub fn resource_id(&self, rg: &str, kind: &str, name: &str) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{rg}/providers/{kind}/{name}",
            self.inner.subscription
        )
    }

    /// Creates a NIC with one IP configuration `ipconfig1` holding `private_ip`.
    pub fn create_nic(&self, rg: &str, name: &str, private_ip: &str, ip_forwarding: bool) {
        let mut state = self.state();
        let etag = state.etag();
        state.nics.insert(
            key(rg, name),
            Nic {
                name: name.into(),
                location: "westeurope".into(),
                etag,
                private_ip: private_ip.into(),
                ip_forwarding,
                vm: None,
            },
        );
    }

    pub fn set_ip_forwarding(&self, rg: &str, nic: &str, on: bool) {
        let mut state = self.state();
        let etag = state.etag();
        if let Some(n) = state.nics.get_mut(&key(rg, nic)) {
            n.ip_forwarding = on;
            n.etag = etag;
        }
    }

    /// Creates a VM with these NICs (names of NICs in the same resource group, the
    /// first primary), and attaches them to it.
    pub fn create_vm(&self, rg: &str, name: &str, nics: &[&str]) {
        let vm_id = self.resource_id(rg, "Microsoft.Compute/virtualMachines", name);
        let ids: Vec<String> = nics
            .iter()
            .map(|n| self.resource_id(rg, "Microsoft.Network/networkInterfaces", n))
            .collect();
        let mut state = self.state();
        let uuid = state.uuid();
        for n in nics {
            if let Some(nic) = state.nics.get_mut(&key(rg, n)) {
                nic.vm = Some(vm_id.clone());
            }
        }
        state.vms.insert(
            key(rg, name),
            Vm {
                name: name.into(),
                location: "westeurope".into(),
                vm_id: uuid,
                nics: ids,
            },
        );
    }

    // ---- behaviour --------------------------------------------------------------

    /// New LROs answer `polls` `InProgress` polls and do not end before `duration`
    /// has passed; while one runs, its table refuses other writes ([`BusyReply`]).
    pub fn set_lro(&self, polls: u32, duration: Duration) {
        let mut state = self.state();
        state.lro_polls = polls;
        state.lro_duration = duration;
    }

    /// `Retry-After` (seconds) on the first reply of a write and on `InProgress`
    /// polls, as ARM sends it; `None` (the default) sends none.
    pub fn set_poll_retry_after(&self, seconds: Option<u32>) {
        self.state().poll_retry_after = seconds;
    }

    /// The next LRO ends `Failed` with this error; its change is undone.
    pub fn fail_next_operation(&self, code: &str, message: &str) {
        self.state()
            .failing_operations
            .push((code.into(), message.into()));
    }

    /// Ends every running LRO now, as if its time and polls were used up.
    pub fn finish_operations(&self) {
        let mut state = self.state();
        let now = (state.clock)();
        for o in state.operations.values_mut() {
            o.polls_left = 0;
            o.not_before = now;
        }
    }

    /// LROs run in the time `clock` reads (a test's virtual clock, shared with the
    /// provider's poller); the real clock until then.
    pub fn set_clock(&self, clock: Clock) {
        self.state().clock = clock;
    }

    pub fn set_busy_reply(&self, reply: BusyReply) {
        self.state().busy_reply = reply;
    }

    /// The budget: reads and writes left (the values of the
    /// `x-ms-ratelimit-remaining-subscription-*` headers), and the `Retry-After` of a
    /// 429 once a class is exhausted.
    pub fn set_remaining(&self, reads: u64, writes: u64, retry_after: u32) {
        let mut state = self.state();
        state.reads_left = reads;
        state.writes_left = writes;
        state.throttle_retry_after = retry_after;
    }

    /// Routes a table may hold from now on (default [`DEFAULT_ROUTE_LIMIT`]).
    pub fn set_route_limit(&self, limit: usize) {
        self.state().route_limit = limit;
    }

    /// Refuses, as ARM refuses an invalid name (400 `InvalidResourceName` for the
    /// whole PUT, the name in its message), any route whose name contains `part`:
    /// a rule a provider could not check before writing.
    pub fn refuse_route_names_containing(&self, part: &str) {
        self.state().refused_names.push(part.to_string());
    }

    /// The next `times` requests with this method whose path ends with `path_suffix`
    /// (case-insensitive, e.g. `/routeTables/rt`) suffer `fault`.
    pub fn inject(&self, method: &str, path_suffix: &str, times: usize, fault: Fault) {
        self.state().faults.push(InjectedFault {
            method: method.to_ascii_uppercase(),
            path_suffix: Some(path_suffix.to_ascii_lowercase()),
            remaining: times,
            fault,
        });
    }

    /// The next `times` polls of any async operation suffer `fault`.
    pub fn inject_poll(&self, times: usize, fault: Fault) {
        self.state().faults.push(InjectedFault {
            method: "GET".into(),
            path_suffix: None,
            remaining: times,
            fault,
        });
    }

    // ---- the log ----------------------------------------------------------------

    /// Every request so far, in order of arrival.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state().log.clone()
    }

    pub fn clear_requests(&self) {
        self.state().log.clear();
    }

    pub fn counts(&self) -> Counts {
        let state = self.state();
        let mut c = Counts::default();
        for r in &state.log {
            match r.kind {
                Kind::Read => c.reads += 1,
                Kind::Write => c.writes += 1,
                Kind::Poll => c.polls += 1,
                Kind::Token => c.tokens += 1,
                Kind::Other => {}
            }
            match r.status {
                412 => c.precondition_failed += 1,
                401 if r.kind != Kind::Token => c.unauthorized += 1,
                _ => {}
            }
        }
        let code =
            |r: &&Recorded, codes: &[&str]| r.code.as_deref().is_some_and(|c| codes.contains(&c));
        c.busy = state
            .log
            .iter()
            .filter(|r| code(r, &["AnotherOperationInProgress", "RetryableError"]))
            .count();
        c.throttled = state
            .log
            .iter()
            .filter(|r| code(r, &["SubscriptionRequestsThrottled"]))
            .count();
        c
    }

    /// Requests with this method and kind.
    pub fn count(&self, method: &str, kind: Kind) -> usize {
        self.state()
            .log
            .iter()
            .filter(|r| r.method == method && r.kind == kind)
            .count()
    }
}

fn key(rg: &str, name: &str) -> (String, String) {
    (rg.to_ascii_lowercase(), name.to_ascii_lowercase())
}

// ---------------------------------------------------------------------------------
// HTTP

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
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| http_wire::percent_decode(v, true))
    }

    fn kind(&self) -> Kind {
        let lower = self.path.to_ascii_lowercase();
        if lower.ends_with("/oauth2/v2.0/token") || lower == "/metadata/identity/oauth2/token" {
            Kind::Token
        } else if lower.contains("/operations/") || lower.contains("/operationresults/") {
            Kind::Poll
        } else if !lower.starts_with("/subscriptions/") {
            Kind::Other
        } else {
            match self.method.as_str() {
                "GET" => Kind::Read,
                "PUT" | "DELETE" | "PATCH" | "POST" => Kind::Write,
                _ => Kind::Other,
            }
        }
    }
}

/// An answer before it goes on the wire.
struct Reply {
    status: u16,
    body: Option<Value>,
    headers: Vec<(String, String)>,
    /// Set for token endpoints' form-style errors: the content type.
    content_type: &'static str,
}

fn reply(status: u16, body: Value) -> Reply {
    Reply {
        status,
        body: Some(body),
        headers: Vec::new(),
        content_type: "application/json; charset=utf-8",
    }
}

fn empty(status: u16) -> Reply {
    Reply {
        status,
        body: None,
        headers: Vec::new(),
        content_type: "application/json; charset=utf-8",
    }
}

impl Reply {
    fn header(mut self, name: &str, value: impl Into<String>) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// ARM's error body: `{"error": {"code", "message", "details": []}}`.
fn arm_error(status: u16, code: &str, message: &str) -> Reply {
    arm_error_with(status, code, message, json!([]))
}

fn arm_error_with(status: u16, code: &str, message: &str, details: Value) -> Reply {
    reply(
        status,
        json!({"error": {"code": code, "message": message, "details": details}}),
    )
    .header("x-ms-error-code", code)
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
            path: http_wire::percent_decode(path, false),
            query: query.to_string(),
            headers: wire.headers.clone(),
            body: wire.body.clone(),
        };
        let Some(reply) = handle(inner, &request) else {
            // Close for real: the acceptor's clone of the stream would keep it open.
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        };
        write_reply(&mut stream, &reply);
        if request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
        {
            return;
        }
    }
}

fn write_reply(stream: &mut TcpStream, reply: &Reply) {
    let body = reply
        .body
        .as_ref()
        .map(|b| serde_json::to_vec(b).unwrap_or_default())
        .unwrap_or_default();
    let reason = match reply.status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        412 => "Precondition Failed",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Length: {}\r\nCache-Control: no-cache\r\n",
        reply.status,
        body.len()
    );
    if reply.body.is_some() {
        head.push_str(&format!("Content-Type: {}\r\n", reply.content_type));
    }
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    // One write: head and body in two segments would meet Nagle and delayed ACKs.
    let mut message = head.into_bytes();
    message.extend_from_slice(&body);
    let _ = stream.write_all(&message);
    let _ = stream.flush();
}

/// Authenticates, charges the budget, applies faults and routes the request;
/// `None` closes the connection without an answer.
fn handle(inner: &Inner, request: &Request) -> Option<Reply> {
    let mut state = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    let now = (state.clock)();
    let kind = request.kind();
    let token = request
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_string();
    let mut log = Recorded {
        method: request.method.clone(),
        path: request.path.clone(),
        query: request.query.clone(),
        kind,
        status: 0,
        at: now,
        token: token.clone(),
        identity: state.tokens.get(&token).cloned(),
        if_match: request.header("if-match").map(str::to_string),
        code: None,
    };
    let request_id = state.uuid();
    let finish = |state: &mut State, mut log: Recorded, reply: Option<Reply>| {
        log.status = reply.as_ref().map_or(0, |r| r.status);
        log.code = reply
            .as_ref()
            .and_then(|r| r.body.as_ref())
            .and_then(|b| b.pointer("/error/code"))
            .and_then(Value::as_str)
            .map(str::to_string);
        state.log.push(log);
        reply.map(|r| r.header("x-ms-request-id", request_id.clone()))
    };

    if kind == Kind::Token {
        let (reply, identity) = token_endpoint(&mut state, request);
        log.identity = identity;
        return finish(&mut state, log, Some(reply));
    }
    if kind == Kind::Other
        && !request
            .path
            .to_ascii_lowercase()
            .starts_with("/subscriptions/")
    {
        let reply = arm_error(404, "NotFound", "no such endpoint in the ARM double");
        return finish(&mut state, log, Some(reply));
    }

    if log.identity.is_none() {
        let (code, message) = if token.is_empty() {
            (
                "AuthenticationFailed",
                "Authentication failed. The 'Authorization' header is missing.",
            )
        } else {
            ("InvalidAuthenticationToken", "The access token is invalid.")
        };
        let challenge = format!(
            "Bearer authorization_uri=\"{}/common\", error=\"invalid_token\", error_description=\"{message}\"",
            format_args!("http://{}", inner.addr)
        );
        let reply = arm_error(401, code, message).header("WWW-Authenticate", challenge);
        return finish(&mut state, log, Some(reply));
    }

    // The budget: reads (and polls) and writes count down separately.
    let write = kind == Kind::Write;
    let left = if write {
        &mut state.writes_left
    } else {
        &mut state.reads_left
    };
    if *left == 0 {
        let retry_after = state.throttle_retry_after;
        let class = if write { "write" } else { "read" };
        let reply = arm_error(
            429,
            "SubscriptionRequestsThrottled",
            &format!(
                "Number of '{class}' requests for subscription '{}' exceeded. Please try again after '{retry_after}' seconds after additional tokens are available.",
                inner.subscription
            ),
        )
        .header("Retry-After", retry_after.to_string());
        let reply = with_budget(&state, write, reply);
        return finish(&mut state, log, Some(reply));
    }
    *left -= 1;

    let fault = take_fault(&mut state, request, kind);
    let reply = match &fault {
        Some(Fault::Error {
            status,
            code,
            message,
        }) => Some(arm_error(*status, code, message)),
        Some(Fault::PreconditionFailed) => Some(arm_error_with(
            412,
            "PreconditionFailed",
            "Precondition failed.",
            json!([{"code": "PreconditionFailedEtagMismatch",
                    "message": "Etag provided in if-match header does not match the etag of the resource (injected)."}]),
        )),
        Some(Fault::Throttle { retry_after }) => Some(
            arm_error(
                429,
                "SubscriptionRequestsThrottled",
                "Number of requests for subscription exceeded (injected).",
            )
            .header("Retry-After", retry_after.to_string()),
        ),
        Some(Fault::Close) => return finish(&mut state, log, None),
        Some(Fault::LostReply | Fault::ExtraField { .. }) | None => None,
    };
    if let Some(reply) = reply {
        let reply = with_budget(&state, write, reply);
        return finish(&mut state, log, Some(reply));
    }

    let mut reply = route(&mut state, inner, request, now);
    match fault {
        Some(Fault::LostReply) => return finish(&mut state, log, None),
        Some(Fault::ExtraField {
            pointer,
            name,
            value,
        }) => {
            if let Some(Value::Object(o)) =
                reply.body.as_mut().and_then(|b| b.pointer_mut(&pointer))
            {
                o.insert(name, value);
            }
        }
        _ => {}
    }
    let reply = with_budget(&state, write, reply);
    finish(&mut state, log, Some(reply))
}

fn with_budget(state: &State, write: bool, reply: Reply) -> Reply {
    if write {
        reply.header(
            "x-ms-ratelimit-remaining-subscription-writes",
            state.writes_left.to_string(),
        )
    } else {
        reply.header(
            "x-ms-ratelimit-remaining-subscription-reads",
            state.reads_left.to_string(),
        )
    }
}

fn take_fault(state: &mut State, request: &Request, kind: Kind) -> Option<Fault> {
    let path = request.path.to_ascii_lowercase();
    let i = state.faults.iter().position(|f| {
        f.remaining > 0
            && f.method == request.method
            && match &f.path_suffix {
                Some(suffix) => path.ends_with(suffix.as_str()),
                None => kind == Kind::Poll,
            }
    })?;
    let f = &mut state.faults[i];
    f.remaining -= 1;
    let fault = f.fault.clone();
    if f.remaining == 0 {
        state.faults.remove(i);
    }
    Some(fault)
}

// ---------------------------------------------------------------------------------
// ARM routing

fn route(state: &mut State, inner: &Inner, request: &Request, now: Instant) -> Reply {
    let segments: Vec<&str> = request.path.trim_matches('/').split('/').collect();
    let lower: Vec<String> = segments.iter().map(|s| s.to_ascii_lowercase()).collect();
    let lower: Vec<&str> = lower.iter().map(String::as_str).collect();
    let subscription = segments.get(1).copied().unwrap_or("");
    if !subscription.eq_ignore_ascii_case(&inner.subscription) {
        return arm_error(
            404,
            "SubscriptionNotFound",
            &format!("The subscription '{subscription}' could not be found."),
        );
    }
    let m = request.method.as_str();
    match lower.as_slice() {
        [
            "subscriptions",
            _,
            "providers",
            "microsoft.network",
            "locations",
            _,
            kind,
            id,
        ] if *kind == "operations" || *kind == "operationresults" => {
            if let Some(bad) = check_api_version(request, NETWORK_API_VERSION) {
                return bad;
            }
            let id = segments[7].to_string();
            poll(state, &id, *kind == "operationresults", now)
        }
        [
            "subscriptions",
            _,
            "resourcegroups",
            _,
            "providers",
            "microsoft.network",
            "routetables",
            _,
            rest @ ..,
        ] => {
            if let Some(bad) = check_api_version(request, NETWORK_API_VERSION) {
                return bad;
            }
            let (rg, table) = (segments[3], segments[7]);
            match (m, rest) {
                ("GET", []) => get_table(state, inner, rg, table),
                ("PUT", []) => put_table(state, inner, request, rg, table, now),
                ("GET", ["routes"]) => list_routes(state, inner, rg, table),
                ("GET", ["routes", _]) => get_route(state, inner, rg, table, segments[9]),
                ("PUT", ["routes", _]) => {
                    put_route(state, inner, request, rg, table, segments[9], now)
                }
                ("DELETE", ["routes", _]) => {
                    delete_route(state, inner, request, rg, table, segments[9], now)
                }
                _ => arm_error(405, "MethodNotAllowed", "The double does not serve this."),
            }
        }
        [
            "subscriptions",
            _,
            "resourcegroups",
            _,
            "providers",
            "microsoft.network",
            "networkinterfaces",
            _,
        ] if m == "GET" => {
            if let Some(bad) = check_api_version(request, NETWORK_API_VERSION) {
                return bad;
            }
            let (rg, name) = (segments[3], segments[7]);
            match state.nics.get(&key(rg, name)) {
                Some(nic) => reply(200, nic_json(inner, rg, nic)),
                None => not_found(rg, "Microsoft.Network/networkInterfaces", name),
            }
        }
        [
            "subscriptions",
            _,
            "resourcegroups",
            _,
            "providers",
            "microsoft.compute",
            "virtualmachines",
            _,
        ] if m == "GET" => {
            if let Some(bad) = check_api_version(request, COMPUTE_API_VERSION) {
                return bad;
            }
            let (rg, name) = (segments[3], segments[7]);
            match state.vms.get(&key(rg, name)) {
                Some(vm) => reply(200, vm_json(inner, rg, vm)),
                None => not_found(rg, "Microsoft.Compute/virtualMachines", name),
            }
        }
        _ => arm_error(404, "NotFound", "no such endpoint in the ARM double"),
    }
}

fn check_api_version(request: &Request, want: &str) -> Option<Reply> {
    match request.query_value("api-version") {
        None => Some(arm_error(
            400,
            "MissingApiVersionParameter",
            "The api-version query parameter (?api-version=) is required for all requests.",
        )),
        Some(v) if v != want => Some(arm_error(
            400,
            "InvalidApiVersionParameter",
            &format!("The api-version '{v}' is invalid. The supported versions are '{want}'."),
        )),
        Some(_) => None,
    }
}

fn not_found(rg: &str, kind: &str, name: &str) -> Reply {
    arm_error(
        404,
        "ResourceNotFound",
        &format!(
            "The Resource '{kind}/{name}' under resource group '{rg}' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix"
        ),
    )
}

fn table_id(inner: &Inner, rg: &str, table: &str) -> String {
    format!(
        "/subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.Network/routeTables/{table}",
        inner.subscription
    )
}

fn table_json(inner: &Inner, rg: &str, t: &Table) -> Value {
    let id = table_id(inner, rg, &t.name);
    let mut body = json!({
        "name": t.name,
        "id": id,
        "etag": t.etag,
        "type": "Microsoft.Network/routeTables",
        "location": t.location,
        "properties": {
            "provisioningState": t.state,
            "resourceGuid": t.guid,
            "disableBgpRoutePropagation": t.disable_bgp,
            "routes": t.routes.iter().map(|r| route_json(&id, r)).collect::<Vec<_>>(),
        },
    });
    if !t.tags.is_empty() {
        body["tags"] = json!(t.tags);
    }
    body
}

fn route_json(table_id: &str, r: &StoredRoute) -> Value {
    let mut properties = json!({
        "provisioningState": r.state,
        "addressPrefix": r.route.address_prefix,
        "nextHopType": r.route.next_hop_type,
        "hasBgpOverride": false,
    });
    if let Some(ip) = &r.route.next_hop_ip {
        properties["nextHopIpAddress"] = json!(ip);
    }
    json!({
        "name": r.route.name,
        "id": format!("{table_id}/routes/{}", r.route.name),
        "etag": r.etag,
        "type": "Microsoft.Network/routeTables/routes",
        "properties": properties,
    })
}

fn get_table(state: &State, inner: &Inner, rg: &str, table: &str) -> Reply {
    match state.tables.get(&key(rg, table)) {
        Some(t) => reply(200, table_json(inner, rg, t)).header("ETag", t.etag.clone()),
        None => not_found(rg, "Microsoft.Network/routeTables", table),
    }
}

fn list_routes(state: &State, inner: &Inner, rg: &str, table: &str) -> Reply {
    match state.tables.get(&key(rg, table)) {
        Some(t) => {
            let id = table_id(inner, rg, &t.name);
            let value: Vec<Value> = t.routes.iter().map(|r| route_json(&id, r)).collect();
            reply(200, json!({"value": value}))
        }
        None => not_found(rg, "Microsoft.Network/routeTables", table),
    }
}

fn get_route(state: &State, inner: &Inner, rg: &str, table: &str, name: &str) -> Reply {
    let Some(t) = state.tables.get(&key(rg, table)) else {
        return not_found(rg, "Microsoft.Network/routeTables", table);
    };
    match t
        .routes
        .iter()
        .find(|r| r.route.name.eq_ignore_ascii_case(name))
    {
        Some(r) => reply(200, route_json(&table_id(inner, rg, &t.name), r)),
        None => arm_error(
            404,
            "NotFound",
            &format!(
                "Resource {}/routes/{name} not found.",
                table_id(inner, rg, &t.name)
            ),
        ),
    }
}

/// 412 unless `If-Match` / `If-None-Match` hold for a resource whose ETag is
/// `current` (`None`: it does not exist).
fn check_preconditions(request: &Request, current: Option<&str>, id: &str) -> Option<Reply> {
    let mismatch = |sent: &str| {
        arm_error_with(
            412,
            "PreconditionFailed",
            "Precondition failed.",
            json!([{"code": "PreconditionFailedEtagMismatch",
                    "message": format!("Etag provided in if-match header {sent} does not match etag {} of resource {id} in NRP data store.",
                                       current.unwrap_or("(none)"))}]),
        )
    };
    if let Some(sent) = request.header("if-match") {
        let ok = match current {
            Some(etag) => sent == "*" || sent == etag,
            None => false,
        };
        if !ok {
            return Some(mismatch(sent));
        }
    }
    if request.header("if-none-match") == Some("*") && current.is_some() {
        return Some(mismatch("*"));
    }
    None
}

fn busy_reply(state: &State, inner: &Inner, key: &(String, String), location: &str) -> Reply {
    let op = state
        .operations
        .iter()
        .find(|(_, o)| &o.table == key && o.status == "InProgress")
        .map(|(id, _)| id.clone())
        .unwrap_or_default();
    match state.busy_reply {
        BusyReply::AnotherOperationInProgress => arm_error(
            409,
            "AnotherOperationInProgress",
            &format!(
                "Another operation on this or dependent resource is in progress. To retrieve status of the operation use uri: {}",
                operation_url(inner, location, &op, false)
            ),
        ),
        BusyReply::Retryable { retry_after } => arm_error_with(
            429,
            "RetryableError",
            "A retryable error occurred.",
            json!([{"code": "RetryableErrorDueToAnotherOperation",
                    "message": format!("Operation PutRouteTableOperation (00000000-0000-0000-0000-000000000000) is updating resource {}/{}. The call can be retried in {retry_after} seconds.", key.0, key.1)}]),
        )
        .header("Retry-After", retry_after.to_string()),
    }
}

fn operation_url(inner: &Inner, location: &str, id: &str, result: bool) -> String {
    format!(
        "http://{}/subscriptions/{}/providers/Microsoft.Network/locations/{location}/{}/{id}?api-version={NETWORK_API_VERSION}",
        inner.addr,
        inner.subscription,
        if result {
            "operationResults"
        } else {
            "operations"
        }
    )
}

/// Starts an LRO on a table; returns its ID.
fn start_operation(
    state: &mut State,
    table: (String, String),
    before: Vec<StoredRoute>,
    now: Instant,
) -> String {
    let id = state.uuid();
    let fails = (!state.failing_operations.is_empty()).then(|| state.failing_operations.remove(0));
    state.operations.insert(
        id.clone(),
        Operation {
            table,
            polls_left: state.lro_polls,
            not_before: now + state.lro_duration,
            fails,
            before,
            status: "InProgress",
        },
    );
    id
}

fn lro_headers(state: &State, inner: &Inner, reply: Reply, location: &str, op: &str) -> Reply {
    let reply = reply.header(
        "Azure-AsyncOperation",
        operation_url(inner, location, op, false),
    );
    match state.poll_retry_after {
        Some(s) => reply.header("Retry-After", s.to_string()),
        None => reply,
    }
}

/// Reads `properties.routes` (or one route's `properties`) of a request body.
fn parse_route(name: &str, properties: &Value) -> Result<RouteEntry, String> {
    let field = |k: &str| {
        properties
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let prefix = field("addressPrefix").ok_or("properties.addressPrefix is required")?;
    if !valid_prefix(&prefix) {
        return Err(format!("addressPrefix {prefix:?} is not a valid CIDR"));
    }
    let hop = field("nextHopType").ok_or("properties.nextHopType is required")?;
    const HOPS: [&str; 5] = [
        "VirtualNetworkGateway",
        "VnetLocal",
        "Internet",
        "VirtualAppliance",
        "None",
    ];
    let Some(hop) = HOPS.iter().find(|h| h.eq_ignore_ascii_case(&hop)) else {
        return Err(format!("nextHopType {hop:?} is not one of {HOPS:?}"));
    };
    let ip = field("nextHopIpAddress").filter(|s| !s.is_empty());
    match (*hop, &ip) {
        ("VirtualAppliance", None) => {
            return Err("nextHopIpAddress is required for nextHopType VirtualAppliance".into());
        }
        ("VirtualAppliance", Some(ip)) if ip.parse::<std::net::IpAddr>().is_err() => {
            return Err(format!("nextHopIpAddress {ip:?} is not an IP address"));
        }
        ("VirtualAppliance", _) => {}
        (_, Some(_)) => {
            return Err(format!(
                "nextHopIpAddress is allowed only for nextHopType VirtualAppliance, not {hop}"
            ));
        }
        _ => {}
    }
    Ok(RouteEntry {
        name: name.to_string(),
        address_prefix: prefix,
        next_hop_type: hop.to_string(),
        next_hop_ip: ip,
    })
}

fn valid_prefix(s: &str) -> bool {
    let Some((addr, len)) = s.split_once('/') else {
        return false;
    };
    match (addr.parse::<std::net::IpAddr>(), len.parse::<u8>()) {
        (Ok(std::net::IpAddr::V4(_)), Ok(l)) => l <= 32,
        (Ok(std::net::IpAddr::V6(_)), Ok(l)) => l <= 128,
        _ => false,
    }
}

fn bad_request(message: &str) -> Reply {
    arm_error(400, "InvalidRequestFormat", message)
}

/// ARM's rule for a resource name as its error states it (Microsoft.Network, routes
/// included): 1 to 80 characters, beginning with a word character, ending with a word
/// character or `_`, of word characters, `.`, `-` and `_`.
fn valid_resource_name(name: &str) -> bool {
    let word = |b: &u8| b.is_ascii_alphanumeric();
    let bytes = name.as_bytes();
    matches!((bytes.first(), bytes.last()), (Some(f), Some(l)) if word(f) && (word(l) || *l == b'_'))
        && bytes.len() <= 80
        && bytes
            .iter()
            .all(|b| word(b) || matches!(b, b'_' | b'.' | b'-'))
}

/// ARM's refusal of a resource name, in its shape: 400 `InvalidResourceName`, the
/// name and the rule in the message.
fn invalid_name(name: &str) -> Reply {
    arm_error(
        400,
        "InvalidResourceName",
        &format!(
            "Resource name {name} is invalid. The name can be up to 80 characters long. It \
             must begin with a word character, and it must end with a word character or with \
             '_'. The name may contain word characters or '.', '-', '_'."
        ),
    )
}

/// A route name the double refuses: ARM's rule, or one a test added.
fn refused_name(state: &State, name: &str) -> bool {
    !valid_resource_name(name)
        || state
            .refused_names
            .iter()
            .any(|p| name.contains(p.as_str()))
}

fn put_table(
    state: &mut State,
    inner: &Inner,
    request: &Request,
    rg: &str,
    name: &str,
    now: Instant,
) -> Reply {
    let k = key(rg, name);
    let id = table_id(inner, rg, name);
    let existing = state.tables.get(&k).cloned();
    if let Some(bad) = check_preconditions(request, existing.as_ref().map(|t| t.etag.as_str()), &id)
    {
        return bad;
    }
    let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
        return bad_request("Cannot parse the request.");
    };
    let location = body
        .get("location")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| existing.as_ref().map(|t| t.location.clone()));
    let Some(location) = location else {
        return bad_request("The location property is required for this definition.");
    };
    if state.busy(&k, now) {
        return busy_reply(state, inner, &k, &location);
    }
    let empty_list = json!([]);
    let routes = body
        .pointer("/properties/routes")
        .unwrap_or(&empty_list)
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut parsed: Vec<RouteEntry> = Vec::new();
    for r in &routes {
        let Some(rname) = r.get("name").and_then(Value::as_str) else {
            return bad_request("A route of properties.routes has no name.");
        };
        if parsed.iter().any(|p| p.name.eq_ignore_ascii_case(rname)) {
            return bad_request(&format!("Route name {rname:?} appears more than once."));
        }
        if refused_name(state, rname) {
            return invalid_name(rname);
        }
        match parse_route(rname, r.get("properties").unwrap_or(&Value::Null)) {
            Ok(route) => parsed.push(route),
            Err(e) => return bad_request(&format!("route {rname}: {e}")),
        }
    }
    if parsed.len() > state.route_limit {
        return route_limit_reached(&id, parsed.len(), state.route_limit);
    }
    let etag = state.etag();
    let guid = state.uuid();
    let before = existing
        .as_ref()
        .map(|t| t.routes.clone())
        .unwrap_or_default();
    // A route keeps its ETag when it did not change.
    let mut stored = Vec::new();
    for route in parsed {
        let kept = before
            .iter()
            .find(|b| b.route == route)
            .map(|b| b.etag.clone());
        let route_etag = kept.unwrap_or_else(|| etag.clone());
        stored.push(StoredRoute {
            route,
            etag: route_etag,
            state: "Updating",
        });
    }
    let table = Table {
        name: existing
            .as_ref()
            .map_or(name.to_string(), |t| t.name.clone()),
        location: location.clone(),
        etag,
        guid: existing.as_ref().map_or(guid, |t| t.guid.clone()),
        routes: stored,
        state: "Updating",
        disable_bgp: body
            .pointer("/properties/disableBgpRoutePropagation")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        tags: body
            .get("tags")
            .and_then(Value::as_object)
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default(),
    };
    let status = if existing.is_some() { 200 } else { 201 };
    let json = table_json(inner, rg, &table);
    let etag = table.etag.clone();
    state.tables.insert(k.clone(), table);
    let op = start_operation(state, k, before, now);
    let r = reply(status, json).header("ETag", etag);
    lro_headers(state, inner, r, &location, &op)
}

fn put_route(
    state: &mut State,
    inner: &Inner,
    request: &Request,
    rg: &str,
    table: &str,
    name: &str,
    now: Instant,
) -> Reply {
    let k = key(rg, table);
    let Some(t) = state.tables.get(&k).cloned() else {
        return not_found(rg, "Microsoft.Network/routeTables", table);
    };
    let id = format!("{}/routes/{name}", table_id(inner, rg, &t.name));
    let existing = t
        .routes
        .iter()
        .position(|r| r.route.name.eq_ignore_ascii_case(name));
    let current = existing.map(|i| t.routes[i].etag.as_str());
    if let Some(bad) = check_preconditions(request, current, &id) {
        return bad;
    }
    let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
        return bad_request("Cannot parse the request.");
    };
    if state.busy(&k, now) {
        return busy_reply(state, inner, &k, &t.location);
    }
    if refused_name(state, name) {
        return invalid_name(name);
    }
    let route = match parse_route(name, body.get("properties").unwrap_or(&Value::Null)) {
        Ok(r) => r,
        Err(e) => return bad_request(&format!("route {name}: {e}")),
    };
    if existing.is_none() && t.routes.len() >= state.route_limit {
        return route_limit_reached(&id, t.routes.len() + 1, state.route_limit);
    }
    let etag = state.etag();
    let stored = StoredRoute {
        route,
        etag: etag.clone(),
        state: "Updating",
    };
    let json = route_json(&table_id(inner, rg, &t.name), &stored);
    let before = t.routes.clone();
    let location = t.location.clone();
    if let Some(tm) = state.tables.get_mut(&k) {
        match existing {
            Some(i) => tm.routes[i] = stored,
            None => tm.routes.push(stored),
        }
        tm.etag = etag.clone();
        tm.state = "Updating";
    }
    let op = start_operation(state, k, before, now);
    let status = if existing.is_some() { 200 } else { 201 };
    lro_headers(state, inner, reply(status, json), &location, &op)
}

fn delete_route(
    state: &mut State,
    inner: &Inner,
    request: &Request,
    rg: &str,
    table: &str,
    name: &str,
    now: Instant,
) -> Reply {
    let k = key(rg, table);
    let Some(t) = state.tables.get(&k).cloned() else {
        return not_found(rg, "Microsoft.Network/routeTables", table);
    };
    let Some(i) = t
        .routes
        .iter()
        .position(|r| r.route.name.eq_ignore_ascii_case(name))
    else {
        return empty(204);
    };
    let id = format!("{}/routes/{name}", table_id(inner, rg, &t.name));
    if let Some(bad) = check_preconditions(request, Some(&t.routes[i].etag), &id) {
        return bad;
    }
    if state.busy(&k, now) {
        return busy_reply(state, inner, &k, &t.location);
    }
    let etag = state.etag();
    let before = t.routes.clone();
    if let Some(tm) = state.tables.get_mut(&k) {
        tm.routes.remove(i);
        tm.etag = etag;
        tm.state = "Updating";
    }
    let op = start_operation(state, k, before, now);
    let r = empty(202).header("Location", operation_url(inner, &t.location, &op, true));
    lro_headers(state, inner, r, &t.location, &op)
}

/// An async operation's status; `result` for the `Location` URL of a DELETE (204
/// when done, 202 before).
fn poll(state: &mut State, id: &str, result: bool, now: Instant) -> Reply {
    let Some(op) = state.operations.get(id).cloned() else {
        return arm_error(
            404,
            "NotFound",
            &format!("The operation {id} was not found."),
        );
    };
    if op.status == "InProgress" && !op.may_end(now) {
        if let Some(o) = state.operations.get_mut(id) {
            o.polls_left = o.polls_left.saturating_sub(1);
        }
        let r = if result {
            empty(202)
        } else {
            reply(200, json!({"status": "InProgress"}))
        };
        return match state.poll_retry_after {
            Some(s) => r.header("Retry-After", s.to_string()),
            None => r,
        };
    }
    if op.status == "InProgress" {
        end_operation(state, id);
    }
    let op = &state.operations[id];
    match (op.status, &op.fails, result) {
        ("Failed", Some((code, message)), false) => reply(
            200,
            json!({"status": "Failed", "error": {"code": code, "message": message, "details": []}}),
        ),
        ("Failed", Some((code, message)), true) => arm_error(400, code, message),
        (_, _, false) => reply(200, json!({"status": "Succeeded"})),
        (_, _, true) => empty(204),
    }
}

/// Ends an operation: its table's routes settle (or are put back when it fails).
fn end_operation(state: &mut State, id: &str) {
    let etag = state.etag();
    let Some(op) = state.operations.get_mut(id) else {
        return;
    };
    let failed = op.fails.is_some();
    op.status = if failed { "Failed" } else { "Succeeded" };
    let (table, before) = (op.table.clone(), op.before.clone());
    let Some(t) = state.tables.get_mut(&table) else {
        return;
    };
    if failed {
        t.routes = before;
        t.state = "Failed";
        t.etag = etag;
    } else {
        t.state = "Succeeded";
    }
    for r in &mut t.routes {
        r.state = "Succeeded";
    }
}

fn nic_json(inner: &Inner, rg: &str, nic: &Nic) -> Value {
    let id = format!(
        "/subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces/{}",
        inner.subscription, nic.name
    );
    let subnet = format!(
        "/subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes",
        inner.subscription
    );
    let mut properties = json!({
        "provisioningState": "Succeeded",
        "resourceGuid": "6a3f4a62-1d3b-4c8b-9d6f-0123456789ab",
        "ipConfigurations": [{
            "name": "ipconfig1",
            "id": format!("{id}/ipConfigurations/ipconfig1"),
            "etag": nic.etag,
            "type": "Microsoft.Network/networkInterfaces/ipConfigurations",
            "properties": {
                "provisioningState": "Succeeded",
                "privateIPAddress": nic.private_ip,
                "privateIPAllocationMethod": "Dynamic",
                "privateIPAddressVersion": "IPv4",
                "subnet": {"id": subnet},
                "primary": true,
            },
        }],
        "enableAcceleratedNetworking": false,
        "enableIPForwarding": nic.ip_forwarding,
        "primary": true,
        "nicType": "Standard",
    });
    if let Some(vm) = &nic.vm {
        properties["virtualMachine"] = json!({"id": vm});
    }
    json!({
        "name": nic.name,
        "id": id,
        "etag": nic.etag,
        "type": "Microsoft.Network/networkInterfaces",
        "location": nic.location,
        "properties": properties,
    })
}

fn vm_json(inner: &Inner, rg: &str, vm: &Vm) -> Value {
    json!({
        "name": vm.name,
        "id": format!("/subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{}",
                      inner.subscription, vm.name),
        "type": "Microsoft.Compute/virtualMachines",
        "location": vm.location,
        "properties": {
            "vmId": vm.vm_id,
            "hardwareProfile": {"vmSize": "Standard_D2s_v5"},
            "osProfile": {"computerName": vm.name, "adminUsername": "azureuser"},
            "networkProfile": {
                "networkInterfaces": vm.nics.iter().enumerate().map(|(i, id)| json!({
                    "id": id,
                    "properties": {"primary": i == 0},
                })).collect::<Vec<_>>(),
            },
            "provisioningState": "Succeeded",
        },
    })
}

// ---------------------------------------------------------------------------------
// Tokens

/// Answers a token request; also returns the identity a token was issued to.
fn token_endpoint(state: &mut State, request: &Request) -> (Reply, Option<String>) {
    if request
        .path
        .eq_ignore_ascii_case("/metadata/identity/oauth2/token")
    {
        return imds_token(state, request);
    }
    if request.method != "POST" {
        return (
            aad_error(
                405,
                "invalid_request",
                900561,
                "The endpoint only accepts POST requests.",
            ),
            None,
        );
    }
    let tenant = request
        .path
        .trim_matches('/')
        .split('/')
        .next()
        .unwrap_or("")
        .to_string();
    let form: BTreeMap<String, String> = String::from_utf8_lossy(&request.body)
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| {
            (
                http_wire::percent_decode(k, true),
                http_wire::percent_decode(v, true),
            )
        })
        .collect();
    let get = |k: &str| form.get(k).map(String::as_str).unwrap_or("");
    if get("grant_type") != "client_credentials" {
        return (
            aad_error(
                400,
                "unsupported_grant_type",
                70003,
                "The app requested an unsupported grant type.",
            ),
            None,
        );
    }
    if !get("scope").ends_with("/.default") {
        return (
            aad_error(
                400,
                "invalid_scope",
                1002012,
                "The provided value for scope is not valid. Client credential flows must have a scope value with /.default suffixed to the resource identifier.",
            ),
            None,
        );
    }
    let Some(client) = state
        .clients
        .iter()
        .find(|c| c.client_id == get("client_id"))
        .cloned()
    else {
        return (
            aad_error(
                400,
                "unauthorized_client",
                700016,
                &format!(
                    "Application with identifier '{}' was not found in the directory '{tenant}'.",
                    get("client_id")
                ),
            ),
            None,
        );
    };
    if !client.tenant.eq_ignore_ascii_case(&tenant) {
        return (
            aad_error(
                400,
                "invalid_request",
                90002,
                &format!("Tenant '{tenant}' not found."),
            ),
            None,
        );
    }
    let (ok, identity) = match (&client.secret, &client.assertion) {
        (Some(secret), _) => (
            get("client_secret") == secret,
            format!("client:{}/{}", client.tenant, client.client_id),
        ),
        (None, Some(assertion)) => (
            get("client_assertion_type")
                == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
                && get("client_assertion") == assertion,
            format!("federated:{}/{}", client.tenant, client.client_id),
        ),
        (None, None) => (false, String::new()),
    };
    if !ok {
        return (
            aad_error(
                401,
                "invalid_client",
                7000215,
                "Invalid client secret or assertion provided.",
            ),
            None,
        );
    }
    let token = state.issue_token(&identity);
    (
        reply(
            200,
            json!({"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599,
                   "access_token": token}),
        ),
        Some(identity),
    )
}

/// Entra ID's error body (`error`, `error_description`, `error_codes`, ...).
fn aad_error(status: u16, error: &str, code: u32, description: &str) -> Reply {
    reply(
        status,
        json!({
            "error": error,
            "error_description": format!("AADSTS{code}: {description}"),
            "error_codes": [code],
            "timestamp": "2026-01-01 00:00:00Z",
            "trace_id": "00000000-0000-0000-0000-000000000000",
            "correlation_id": "00000000-0000-0000-0000-000000000000",
        }),
    )
}

fn imds_token(state: &mut State, request: &Request) -> (Reply, Option<String>) {
    let imds_error = |status: u16, error: &str, description: &str| {
        reply(
            status,
            json!({"error": error, "error_description": description}),
        )
    };
    if request.header("metadata") != Some("true") {
        return (
            imds_error(
                400,
                "invalid_request",
                "Required metadata header not specified",
            ),
            None,
        );
    }
    if request.method != "GET" {
        return (
            imds_error(405, "invalid_request", "Only GET is allowed"),
            None,
        );
    }
    if request.query_value("api-version").as_deref() != Some(IMDS_API_VERSION) {
        return (
            imds_error(400, "invalid_request", "Invalid or missing api-version"),
            None,
        );
    }
    let Some(resource) = request.query_value("resource") else {
        return (
            imds_error(
                400,
                "invalid_request",
                "Required query variable 'resource' is missing",
            ),
            None,
        );
    };
    let wanted_client = request.query_value("client_id");
    let wanted_resource = request
        .query_value("msi_res_id")
        .or_else(|| request.query_value("mi_res_id"));
    let identity = state
        .identities
        .iter()
        .find(|i| match (&wanted_client, &wanted_resource) {
            (Some(c), _) => &i.client_id == c,
            (None, Some(r)) => i
                .resource_id
                .as_deref()
                .is_some_and(|x| x.eq_ignore_ascii_case(r)),
            (None, None) => true,
        });
    let Some(identity) = identity.cloned() else {
        return (
            imds_error(400, "invalid_request", "Identity not found"),
            None,
        );
    };
    let name = format!("msi:{}", identity.client_id);
    let token = state.issue_token(&name);
    let now = unix_now();
    (
        reply(
            200,
            json!({
                "access_token": token,
                "client_id": identity.client_id,
                "expires_in": "86399",
                "expires_on": (now + 86399).to_string(),
                "ext_expires_in": "86399",
                "not_before": now.to_string(),
                "resource": resource,
                "token_type": "Bearer",
            }),
        ),
        Some(name),
    )
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
