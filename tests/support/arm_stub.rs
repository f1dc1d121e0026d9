#![allow(dead_code)]
// Each test binary uses only part of this module.

//! A small stand-in for Azure Resource Manager and Entra ID on loopback, on top of
//! [`stub_http`]: one route table with an ETag that changes on every write, VMs with
//! one NIC each, a token endpoint, and route-table PUTs that run as long-running
//! operations (one `InProgress` poll, then `Succeeded`). Faults a test switches on: a
//! second writer that changes the table just before our PUT lands (412), a write that
//! Azure reports done but that leaves the table without the new routes, 429s.
//!
//! It follows the documented REST shapes only as far as the provider reads them; the
//! full double checked against azure-sdk-for-go is tests/support/arm_double.rs.

#[path = "stub_http.rs"]
mod stub_http;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

pub use stub_http::{Reply, Request, StubServer};

pub const SUBSCRIPTION: &str = "sub-1";
pub const GROUP: &str = "rg-1";
pub const TABLE: &str = "rt-1";
pub const TENANT: &str = "tenant-1";
pub const TOKEN: &str = "arm-token-1";

/// The route table's path.
pub fn table_path() -> String {
    format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.Network/routeTables/{TABLE}"
    )
}

/// A VM's path.
pub fn vm_path(vm: &str) -> String {
    format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.Compute/virtualMachines/{vm}"
    )
}

/// The providerID of instance `n` of scale set `ss` (add it with `add_vm("ss_<n>", ..)`).
pub fn scale_set_provider_id(n: u32) -> String {
    format!(
        "azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.Compute/virtualMachineScaleSets/ss/virtualMachines/{n}"
    )
}

/// The providerID cloud-node-manager gives a node on `vm`.
pub fn provider_id(vm: &str) -> String {
    format!("azure://{}", vm_path(vm))
}

fn nic_path(vm: &str) -> String {
    format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.Network/networkInterfaces/{vm}-nic"
    )
}

/// The state the stub serves, shared with the test.
#[derive(Default)]
pub struct State {
    pub etag: u64,
    pub routes: Vec<Value>,
    /// VM name → (IP forwarding, private IP).
    pub vms: BTreeMap<String, (bool, String)>,
    /// Operation ID → polls answered so far.
    pub operations: BTreeMap<u64, u32>,
    /// PUTs before which another writer adds a route of its own (a 412 for ours).
    pub interfere: u32,
    /// Successful PUTs whose new routes Azure then drops (reported done, not held).
    pub lose_writes: u32,
    /// Requests answered 429 with `Retry-After: 7`.
    pub throttle: u32,
    /// PUTs answered 409 `RetryableErrorDueToAnotherOperation` with `Retry-After: 11`
    /// (the table busy with another writer's operation).
    pub busy: u32,
    pub puts: u32,
    pub accepted_puts: u32,
    pub token_requests: u32,
    /// Every If-Match a PUT carried.
    pub if_match: Vec<Option<String>>,
    /// The table is served without an ETag (header and body).
    pub no_etag: bool,
    /// Closed when the next PUT arrives: the lease is lost while the write is out.
    pub close_on_put: Option<route_controller::Fence>,
    /// The api-versions served, as Azure Stack Hub serves only its profile's; any
    /// other is answered 400 `NoRegisteredProviderFound` as there. `None`: all.
    pub profile: Option<Vec<&'static str>>,
}

impl State {
    fn table(&self) -> Value {
        json!({
            "name": TABLE,
            "id": table_path(),
            "etag": format!("W/\"{}\"", self.etag),
            "type": "Microsoft.Network/routeTables",
            "location": "westeurope",
            "tags": {"owner": "cloud-provider-azure"},
            "properties": {
                "provisioningState": "Succeeded",
                "disableBgpRoutePropagation": true,
                "routes": self.routes,
                "subnets": [{"id": "/subscriptions/sub-1/resourceGroups/rg-1/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes"}]
            }
        })
    }
}

/// A route as cloud-provider-azure writes it (and as ARM returns it).
pub fn route(name: &str, prefix: &str, next_hop: &str) -> Value {
    json!({
        "name": name,
        "id": format!("{}/routes/{name}", table_path()),
        "etag": "W/\"0\"",
        "type": "Microsoft.Network/routeTables/routes",
        "properties": {
            "provisioningState": "Succeeded",
            "addressPrefix": prefix,
            "nextHopType": "VirtualAppliance",
            "nextHopIpAddress": next_hop,
            "hasBgpOverride": false
        }
    })
}

pub struct ArmStub {
    pub server: StubServer,
    pub state: Arc<Mutex<State>>,
}

impl ArmStub {
    pub fn start() -> ArmStub {
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let base = Arc::new(Mutex::new(String::new()));
        let base_for_handler = base.clone();
        let server = StubServer::start(move |req| {
            let base = base_for_handler.lock().unwrap().clone();
            handle(&mut shared.lock().unwrap(), &base, req)
        });
        *base.lock().unwrap() = server.url();
        ArmStub { server, state }
    }

    pub fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn add_vm(&self, vm: &str, ip: &str, forwarding: bool) {
        self.state().vms.insert(vm.into(), (forwarding, ip.into()));
    }

    /// The routes as (name, prefix, next hop).
    pub fn routes(&self) -> Vec<(String, String, String)> {
        self.state()
            .routes
            .iter()
            .map(|r| {
                let t = |p: &str| {
                    r.pointer(p)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                (
                    t("/name"),
                    t("/properties/addressPrefix"),
                    t("/properties/nextHopIpAddress"),
                )
            })
            .collect()
    }

    /// Writes an Azure Stack environment file and an azure.json pointing at the stub,
    /// and returns the azure.json text and the variables that go with it.
    pub fn config(&self, dir: &std::path::Path) -> (String, Vec<(String, String)>) {
        let env_file = dir.join("azurestack.json");
        std::fs::write(
            &env_file,
            json!({
                "name": "AzureStackCloud",
                "resourceManagerEndpoint": format!("{}/", self.server.url()),
                "activeDirectoryEndpoint": format!("{}/", self.server.url()),
            })
            .to_string(),
        )
        .expect("write the environment file");
        let azure_json = json!({
            "cloud": "AzureStackCloud",
            "tenantId": TENANT,
            "subscriptionId": SUBSCRIPTION,
            "resourceGroup": GROUP,
            "location": "westeurope",
            "vnetName": "vnet",
            "subnetName": "nodes",
            "securityGroupName": "nsg",
            "routeTableName": TABLE,
            "aadClientId": "client-1",
            "aadClientSecret": "secret-1",
            "loadBalancerSku": "standard",
        })
        .to_string();
        (
            azure_json,
            vec![(
                "AZURE_ENVIRONMENT_FILEPATH".into(),
                env_file.display().to_string(),
            )],
        )
    }
}

fn json_reply(status: u16, body: &Value, extra: Vec<(String, String)>) -> Reply {
    let mut headers = vec![
        ("Content-Type".to_string(), "application/json".to_string()),
        ("x-ms-request-id".to_string(), "stub-request".to_string()),
    ];
    headers.extend(extra);
    Reply::Respond {
        status,
        headers,
        body: body.to_string(),
    }
}

fn arm_error(status: u16, code: &str, message: &str) -> Reply {
    json_reply(
        status,
        &json!({"error": {"code": code, "message": message}}),
        Vec::new(),
    )
}

fn handle(s: &mut State, base: &str, req: &Request) -> Reply {
    let path = req.path.split('?').next().unwrap_or("").to_string();
    if req.method == "POST" && path == format!("/{TENANT}/oauth2/v2.0/token") {
        s.token_requests += 1;
        if !req.body.contains("client_secret=secret-1") {
            return json_reply(
                401,
                &json!({"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided."}),
                Vec::new(),
            );
        }
        return json_reply(
            200,
            &json!({"token_type": "Bearer", "expires_in": 3599, "access_token": TOKEN}),
            Vec::new(),
        );
    }
    if req.header("authorization") != Some(&format!("Bearer {TOKEN}")) {
        return arm_error(401, "InvalidAuthenticationToken", "no or a wrong token");
    }
    if let Some(profile) = &s.profile {
        let version = req
            .path
            .split_once("api-version=")
            .map(|(_, v)| v.split('&').next().unwrap_or(v))
            .unwrap_or("");
        if !profile.contains(&version) {
            return arm_error(
                400,
                "NoRegisteredProviderFound",
                &format!(
                    "No registered resource provider found for location 'local' and API \
                     version '{version}'. The supported api-versions are '{}'.",
                    profile.join(", ")
                ),
            );
        }
    }
    if s.throttle > 0 {
        s.throttle -= 1;
        return Reply::Respond {
            status: 429,
            headers: vec![("Retry-After".into(), "7".into())],
            body:
                json!({"error": {"code": "SubscriptionRequestsThrottled", "message": "throttled"}})
                    .to_string(),
        };
    }
    let reads = vec![(
        "x-ms-ratelimit-remaining-subscription-reads".to_string(),
        "249".to_string(),
    )];
    match (req.method.as_str(), path.as_str()) {
        ("GET", p) if p == table_path() => {
            let mut h = reads;
            let mut table = s.table();
            if s.no_etag {
                table.as_object_mut().map(|t| t.remove("etag"));
            } else {
                h.push(("ETag".into(), format!("W/\"{}\"", s.etag)));
            }
            json_reply(200, &table, h)
        }
        ("PUT", p) if p == table_path() => put_table(s, base, req),
        ("GET", p) if p.contains("/operations/") => {
            let id: u64 = p
                .rsplit('/')
                .next()
                .and_then(|i| i.parse().ok())
                .unwrap_or(0);
            let polls = s.operations.entry(id).or_insert(0);
            *polls += 1;
            let status = if *polls == 1 {
                "InProgress"
            } else {
                "Succeeded"
            };
            json_reply(
                200,
                &json!({"status": status}),
                vec![("Retry-After".into(), "0".into())],
            )
        }
        // A scale-set instance's NIC, served by Microsoft.Compute at its own version.
        ("GET", p)
            if p.contains("/virtualMachineScaleSets/") && p.contains("/networkInterfaces/") =>
        {
            if !req.path.contains("api-version=2018-10-01") {
                return arm_error(
                    400,
                    "InvalidApiVersionParameter",
                    "scale-set NICs are served at 2018-10-01",
                );
            }
            let instance = p
                .split("/virtualMachines/")
                .nth(1)
                .and_then(|r| r.split('/').next())
                .unwrap_or("");
            let vm = format!("ss_{instance}");
            let Some((forwarding, ip)) = s.vms.get(&vm) else {
                return arm_error(404, "ResourceNotFound", "no such NIC");
            };
            json_reply(
                200,
                &json!({"name": "nic", "properties": {"enableIPForwarding": forwarding,
                    "ipConfigurations": [{"name": "ipconfig1", "properties": {"privateIPAddress": ip}}]}}),
                reads.clone(),
            )
        }
        // A scale-set instance (uniform orchestration): its NICs live under it.
        ("GET", p) if p.contains("/virtualMachineScaleSets/") => {
            let instance = p.rsplit('/').next().unwrap_or("");
            if !s.vms.contains_key(&format!("ss_{instance}")) {
                return arm_error(404, "ResourceNotFound", "no such instance");
            }
            json_reply(
                200,
                &json!({"name": format!("ss_{instance}"), "properties": {"networkProfile": {"networkInterfaces": [
                    {"id": format!("{p}/networkInterfaces/nic"), "properties": {"primary": true}}]}}}),
                reads,
            )
        }
        ("GET", p) if p.contains("/virtualMachines/") => {
            let vm = p.rsplit('/').next().unwrap_or("");
            if !s.vms.contains_key(vm) {
                return arm_error(404, "ResourceNotFound", "no such VM");
            }
            json_reply(
                200,
                &json!({"name": vm, "properties": {"networkProfile": {"networkInterfaces": [
                    {"id": nic_path(vm), "properties": {"primary": true}}]}}}),
                reads,
            )
        }
        ("GET", p) if p.contains("/networkInterfaces/") => {
            let vm = p.rsplit('/').next().unwrap_or("").trim_end_matches("-nic");
            let Some((forwarding, ip)) = s.vms.get(vm) else {
                return arm_error(404, "ResourceNotFound", "no such NIC");
            };
            json_reply(
                200,
                // Several addresses, comma-separated: one IP configuration each (dual stack).
                &json!({"name": format!("{vm}-nic"), "properties": {"enableIPForwarding": forwarding,
                    "ipConfigurations": ip.split(',').enumerate().map(|(i, ip)| json!({"name": format!("ipconfig{}", i + 1),
                        "properties": {"privateIPAddress": ip, "primary": i == 0}})).collect::<Vec<_>>()}}),
                reads,
            )
        }
        _ => arm_error(404, "ResourceNotFound", &format!("{} {path}", req.method)),
    }
}

fn put_table(s: &mut State, base: &str, req: &Request) -> Reply {
    s.puts += 1;
    if s.busy > 0 {
        s.busy -= 1;
        return Reply::Respond {
            status: 409,
            headers: vec![("Retry-After".into(), "11".into())],
            body: json!({"error": {"code": "RetryableErrorDueToAnotherOperation",
                "message": "Operation PutRouteTableOperation (abc) on resource rt-1 is \
                    conflicting with operation (def). Retry in 11 seconds."}})
            .to_string(),
        };
    }
    if let Some(fence) = s.close_on_put.take() {
        fence.close();
    }
    s.if_match.push(req.header("if-match").map(str::to_string));
    if s.interfere > 0 {
        s.interfere -= 1;
        let n = s.routes.len();
        s.routes.push(route(
            &format!("other-writer-{n}"),
            &format!("192.168.{n}.0/24"),
            "10.0.0.250",
        ));
        s.etag += 1;
    }
    let current = format!("W/\"{}\"", s.etag);
    if req.header("if-match") != Some(current.as_str()) {
        return arm_error(
            412,
            "PreconditionFailed",
            "The condition specified using HTTP conditional header(s) is not met.",
        );
    }
    let Ok(body) = serde_json::from_str::<Value>(&req.body) else {
        return arm_error(400, "InvalidRequestContent", "not JSON");
    };
    let mut routes: Vec<Value> = body
        .pointer("/properties/routes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if s.lose_writes > 0 {
        s.lose_writes -= 1;
        let before = s.routes.len();
        routes.truncate(before.min(routes.len()));
    }
    s.routes = routes;
    s.etag += 1;
    s.accepted_puts += 1;
    let id = s.accepted_puts as u64;
    let mut table = s.table();
    table["properties"]["provisioningState"] = json!("Updating");
    json_reply(
        201,
        &table,
        vec![
            (
                "Azure-AsyncOperation".into(),
                format!(
                    "{base}/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Network/locations/westeurope/operations/{id}?api-version=2024-05-01"
                ),
            ),
            ("Retry-After".into(), "0".into()),
            (
                "x-ms-ratelimit-remaining-subscription-writes".into(),
                "199".into(),
            ),
        ],
    )
}
