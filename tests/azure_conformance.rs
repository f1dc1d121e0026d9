//! The ARM double checked against Microsoft's official Go SDK. armnetwork and
//! armcompute (the versions pinned in tests/kube-apiserver/go.mod, on azcore's ARM
//! pipeline with its own retry policy and LRO pollers) drive the double through what
//! an Azure route provider uses: the route table read and written whole with its
//! ETag, the write's long-running operation polled to its end, single routes, the
//! VM and its NIC, and the errors a provider must tell apart (412, 409
//! `AnotherOperationInProgress`, 429, 5xx, a failed LRO, a lost reply). A reply the
//! SDK's model types do not hold exactly, a decoded value other than what the double
//! holds, or a request of the SDK the double refuses, fails the test: the double is
//! then wrong, not the SDK.
//!
//! The Go side is `tests/kube-apiserver/azure-conformance` (one JSON command per line
//! in, one JSON answer out), so a test can change the double between commands. Its
//! token is one the double's own Entra ID endpoint issued, so every test also walks
//! the client-credentials flow.

#[path = "support/arm_double.rs"]
mod arm_double;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use arm_double::{ArmDouble, BusyReply, Fault, Kind, NETWORK_API_VERSION, RouteEntry};
use kube_apiserver::azure_conformance_binary;
use serde_json::{Value, json};

const SUB: &str = "00000000-1111-2222-3333-444444444444";
const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const CLIENT: &str = "c0ffee00-0000-4000-8000-000000000001";
const SECRET: &str = "route-controller-secret";
const RG: &str = "k8s-rg";
const TABLE: &str = "k8s-routes";

/// The SDK behind a pipe.
struct Sdk {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Sdk {
    fn start(double: &ArmDouble, token: &str) -> Sdk {
        let binary = azure_conformance_binary();
        let mut child = Command::new(binary)
            .arg(format!("--endpoint={}", double.endpoint()))
            .arg(format!("--subscription={}", double.subscription()))
            .arg(format!("--token={token}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Sdk {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends one command and returns the SDK's answer, after checking that every
    /// reply of the double decoded exactly into the SDK's models.
    fn ask(&mut self, command: Value) -> Value {
        let answer = self.ask_unchecked(command.clone());
        assert_eq!(
            answer["strict"],
            json!([]),
            "the SDK's models do not hold the double's replies to {command}: {answer:#}"
        );
        answer
    }

    /// Sends one command and returns the SDK's answer, whatever the replies were.
    fn ask_unchecked(&mut self, mut command: Value) -> Value {
        if command.get("rg").is_none() {
            command["rg"] = json!(RG);
        }
        if command.get("table").is_none() {
            command["table"] = json!(TABLE);
        }
        writeln!(self.stdin, "{command}").expect("write a command to azure-conformance");
        self.stdin.flush().expect("flush the command");
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .expect("read azure-conformance's answer");
        assert!(n > 0, "azure-conformance exited on {command}");
        if std::env::var_os("AZURE_CONFORMANCE_LOG").is_some() {
            eprintln!("azure-conformance: {command}\n  -> {}", line.trim_end());
        }
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("azure-conformance answered {line:?}: {e}"))
    }

    /// Like [`Sdk::ask`], and the command must have succeeded.
    fn ok(&mut self, command: Value) -> Value {
        let answer = self.ask(command.clone());
        assert_eq!(
            answer["error"],
            Value::Null,
            "the SDK failed on {command}: {answer:#}"
        );
        answer
    }

    /// Like [`Sdk::ask`], and the command must have failed with an
    /// azcore.ResponseError: (status, code).
    fn response_error(&mut self, command: Value) -> (u64, String) {
        let answer = self.ask(command.clone());
        response_error(&answer)
    }
}

fn response_error(answer: &Value) -> (u64, String) {
    let e = &answer["error"];
    assert_eq!(
        e["response"], true,
        "expected an azcore.ResponseError: {answer:#}"
    );
    (
        e["status"].as_u64().unwrap_or(0),
        e["code"].as_str().unwrap_or_default().to_string(),
    )
}

impl Drop for Sdk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// (status, JSON body) of a POST of a form to the double.
fn post_form(double: &ArmDouble, path: &str, form: &[(&str, &str)]) -> (u16, Value) {
    let body: Vec<String> = form
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    let mut resp = agent()
        .post(format!("{}{path}", double.endpoint()))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(body.join("&"))
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn get(double: &ArmDouble, path: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut request = agent().get(format!("{}{path}", double.endpoint()));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let mut resp = request.call().unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A token from the double's Entra ID endpoint, by client secret.
fn client_secret_token(double: &ArmDouble) -> String {
    let (status, body) = post_form(
        double,
        &format!("/{TENANT}/oauth2/v2.0/token"),
        &[
            ("grant_type", "client_credentials"),
            ("client_id", CLIENT),
            ("client_secret", SECRET),
            ("scope", "https://management.azure.com/.default"),
        ],
    );
    assert_eq!(status, 200, "{body:#}");
    body["access_token"]
        .as_str()
        .expect("an access_token")
        .to_string()
}

/// A double with an empty route table, a registered app, and the SDK with that
/// app's token.
fn setup() -> (ArmDouble, Sdk) {
    let double = ArmDouble::start(SUB);
    double.add_client_secret(TENANT, CLIENT, SECRET);
    double.create_route_table(RG, TABLE, "westeurope");
    let token = client_secret_token(&double);
    let sdk = Sdk::start(&double, &token);
    (double, sdk)
}

fn route(name: &str, prefix: &str, ip: &str) -> Value {
    json!({"name": name, "prefix": prefix, "hop_type": "VirtualAppliance", "hop_ip": ip})
}

fn table_id() -> String {
    format!(
        "/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/routeTables/{TABLE}"
    )
}

/// A route as the Go side prints what the SDK decoded.
fn decoded_route(r: &RouteEntry, etag: &Value, state: &str) -> Value {
    json!({
        "name": r.name,
        "id": format!("{}/routes/{}", table_id(), r.name),
        "etag": etag,
        "type": "Microsoft.Network/routeTables/routes",
        "prefix": r.address_prefix,
        "hop_type": r.next_hop_type,
        "hop_ip": r.next_hop_ip.clone().unwrap_or_default(),
        "provisioning_state": state,
    })
}

/// Every request the double saw was answered below 400: it accepted everything
/// the SDK sent.
fn assert_all_accepted(double: &ArmDouble) {
    let refused: Vec<_> = double
        .requests()
        .into_iter()
        .filter(|r| r.status >= 400 || r.status == 0)
        .map(|r| format!("{} {}?{} -> {}", r.method, r.path, r.query, r.status))
        .collect();
    assert!(
        refused.is_empty(),
        "the double refused requests of the SDK: {refused:#?}"
    );
}

fn requests(answer: &Value) -> Vec<String> {
    answer["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .map(|r| r.as_str().unwrap_or_default().to_string())
        .collect()
}

/// Guards the route table's shape as armnetwork decodes it (name, ID, ETag, type,
/// location, every route's fields and state), the api-version and path the SDK
/// sends, the scope it asks the credential for, and that the double names the
/// identity behind the request.
#[test]
fn route_table_decodes_as_the_double_holds_it() {
    let (double, mut sdk) = setup();
    let a = RouteEntry::appliance("node-a", "10.244.1.0/24", "10.0.0.4");
    let b = RouteEntry::appliance("node-b", "10.244.2.0/24", "10.0.0.5");
    double.put_route(RG, TABLE, a.clone());
    let etag = double.put_route(RG, TABLE, b.clone()).expect("the table");

    let got = sdk.ok(json!({"op": "table_get"}));
    let table = &got["result"];
    assert_eq!(table["name"], TABLE);
    assert_eq!(table["id"], table_id());
    assert_eq!(table["etag"], etag);
    assert_eq!(table["type"], "Microsoft.Network/routeTables");
    assert_eq!(table["location"], "westeurope");
    assert_eq!(table["provisioning_state"], "Succeeded");
    let routes = table["routes"].as_array().expect("routes");
    assert_eq!(routes.len(), 2, "{table:#}");
    assert_eq!(
        routes[0],
        decoded_route(&a, &routes[0]["etag"], "Succeeded")
    );
    assert_eq!(
        routes[1],
        decoded_route(&b, &routes[1]["etag"], "Succeeded")
    );
    assert!(
        routes[1]["etag"]
            .as_str()
            .is_some_and(|e| e.starts_with("W/\"")),
        "{routes:#?}"
    );
    assert_eq!(
        requests(&got),
        vec![format!(
            "GET {}?api-version={NETWORK_API_VERSION} -> 200",
            table_id()
        )]
    );
    assert_eq!(
        got["scopes"],
        json!(["https://management.azure.com/.default"])
    );
    let seen = double.requests();
    let last = seen.last().expect("a request");
    assert_eq!(
        last.identity.as_deref(),
        Some(format!("client:{TENANT}/{CLIENT}").as_str())
    );
    assert_all_accepted(&double);
}

/// Guards the whole-table write as cloud-provider-azure makes it: PUT with
/// `If-Match`, a first reply with `Azure-AsyncOperation` and state `Updating`,
/// `InProgress` polls until `Succeeded`, then the SDK's final GET of the table, which
/// shows the routes and a new ETag.
#[test]
fn whole_table_put_with_its_etag_is_polled_to_succeeded() {
    let (double, mut sdk) = setup();
    double.set_lro(2, Duration::ZERO);
    let etag = sdk.ok(json!({"op": "table_get"}))["result"]["etag"].clone();
    double.clear_requests();

    let put = sdk.ok(
        json!({"op": "table_put", "location": "westeurope", "if_match": etag,
        "routes": [route("node-a", "10.244.1.0/24", "10.0.0.4"),
                   route("node-b", "10.244.2.0/24", "10.0.0.5")]}),
    );
    let initial = &put["initial"];
    assert_eq!(initial["status"], 200, "{put:#}");
    assert_eq!(initial["provisioning_state"], "Updating");
    let operation = initial["azure_async_operation"].as_str().expect("a URL");
    assert!(
        operation.starts_with(&format!(
            "{}/subscriptions/{SUB}/providers/Microsoft.Network/locations/westeurope/operations/",
            double.endpoint()
        )),
        "{operation}"
    );
    let sent = requests(&put);
    let poll = format!(
        "GET {} -> 200",
        operation.trim_start_matches(&double.endpoint())
    );
    assert_eq!(
        sent,
        vec![
            format!(
                "PUT {}?api-version={NETWORK_API_VERSION} -> 200",
                table_id()
            ),
            poll.clone(),
            poll.clone(),
            poll,
            format!(
                "GET {}?api-version={NETWORK_API_VERSION} -> 200",
                table_id()
            ),
        ],
        "one PUT, two InProgress polls and the Succeeded one, then the final GET"
    );
    let table = &put["result"];
    assert_eq!(table["provisioning_state"], "Succeeded");
    let new_etag = double.table_etag(RG, TABLE).expect("the table");
    assert_eq!(table["etag"], new_etag);
    assert_ne!(table["etag"], etag);
    assert_eq!(
        double.routes(RG, TABLE),
        vec![
            RouteEntry::appliance("node-a", "10.244.1.0/24", "10.0.0.4"),
            RouteEntry::appliance("node-b", "10.244.2.0/24", "10.0.0.5"),
        ]
    );
    assert_eq!(table["routes"][1]["prefix"], "10.244.2.0/24");
    let writes: Vec<_> = double
        .requests()
        .into_iter()
        .filter(|r| r.kind == Kind::Write)
        .collect();
    assert_eq!(writes.len(), 1);
    assert_eq!(
        writes[0].if_match.as_ref(),
        etag.as_str().map(str::to_string).as_ref()
    );
    let counts = double.counts();
    assert_eq!((counts.writes, counts.polls, counts.reads), (1, 3, 1));
    assert_all_accepted(&double);
}

/// Guards slow LROs: one that runs for a time is polled `InProgress` until the
/// time is up, and azcore waits between polls what ARM's `Retry-After` says (on the
/// first reply and on every `InProgress` poll), not its own frequency.
#[test]
fn slow_lros_are_polled_until_done_at_the_pace_retry_after_sets() {
    let (double, mut sdk) = setup();
    double.set_lro(0, Duration::from_millis(300));
    let timed = sdk.ok(json!({"op": "table_put", "location": "westeurope",
                              "routes": [route("node-a", "10.244.1.0/24", "10.0.0.4")]}));
    assert!(timed["millis"].as_u64().unwrap_or(0) >= 300, "{timed:#}");
    let polls = requests(&timed)
        .iter()
        .filter(|r| r.contains("/operations/"))
        .count();
    assert!(polls >= 3, "polled every 20 ms for 300 ms: {timed:#}");
    assert_eq!(timed["result"]["provisioning_state"], "Succeeded");

    double.set_lro(1, Duration::ZERO);
    double.set_poll_retry_after(Some(1));
    let paced = sdk.ok(json!({"op": "table_put", "location": "westeurope", "routes": []}));
    assert_eq!(paced["initial"]["retry_after"], "1");
    let sent = requests(&paced);
    assert_eq!(
        sent.len(),
        4,
        "PUT, InProgress, Succeeded, final GET: {sent:#?}"
    );
    assert!(
        paced["millis"].as_u64().unwrap_or(0) >= 2_000,
        "one second after the PUT and one after the InProgress poll: {paced:#}"
    );
}

/// Guards optimistic concurrency: after another writer changed the table, a PUT
/// with the ETag read before is refused 412 `PreconditionFailed` (an
/// azcore.ResponseError with that code), and the other writer's change stands.
#[test]
fn stale_etag_put_is_a_412_precondition_failed() {
    let (double, mut sdk) = setup();
    let stale = sdk.ok(json!({"op": "table_get"}))["result"]["etag"].clone();
    let theirs = RouteEntry::appliance("other", "10.9.0.0/16", "10.0.0.9");
    double.put_route(RG, TABLE, theirs.clone());

    let put = json!({"op": "table_put", "location": "westeurope", "if_match": stale,
                     "routes": [route("node-a", "10.244.1.0/24", "10.0.0.4")]});
    assert_eq!(
        sdk.response_error(put.clone()),
        (412, "PreconditionFailed".into())
    );
    assert_eq!(double.routes(RG, TABLE), vec![theirs.clone()]);
    assert_eq!(double.counts().precondition_failed, 1);

    // With the fresh ETag the write goes through; one injected 412 is one refusal.
    let fresh = sdk.ok(json!({"op": "table_get"}))["result"]["etag"].clone();
    let mut retry = put;
    retry["if_match"] = fresh;
    double.inject(
        "PUT",
        &format!("/routeTables/{TABLE}"),
        1,
        Fault::PreconditionFailed,
    );
    assert_eq!(
        sdk.response_error(retry.clone()),
        (412, "PreconditionFailed".into())
    );
    sdk.ok(retry);
    assert_eq!(
        double.routes(RG, TABLE),
        vec![RouteEntry::appliance("node-a", "10.244.1.0/24", "10.0.0.4")]
    );
}

/// Guards the one-write-at-a-time rule: while a table's LRO runs, another PUT of
/// the table or of one of its routes is 409 `AnotherOperationInProgress` (which
/// azcore does not retry), or, in the documented 429 form, `RetryableError` with
/// `Retry-After` (which azcore does retry); after the LRO ends the write succeeds.
#[test]
fn a_write_during_a_running_lro_is_refused_as_another_operation() {
    let (double, mut sdk) = setup();
    double.set_lro(1_000, Duration::ZERO);
    let first = sdk.ok(
        json!({"op": "table_put", "location": "westeurope", "no_wait": true,
                              "routes": [route("node-a", "10.244.1.0/24", "10.0.0.4")]}),
    );
    assert_eq!(first["result"]["done"], false, "{first:#}");
    assert_eq!(first["initial"]["provisioning_state"], "Updating");

    let second = json!({"op": "table_put", "location": "westeurope", "retries": 3,
                        "routes": [route("node-b", "10.244.2.0/24", "10.0.0.5")]});
    let refused = sdk.ask(second.clone());
    assert_eq!(
        response_error(&refused),
        (409, "AnotherOperationInProgress".into())
    );
    assert_eq!(requests(&refused).len(), 1, "azcore does not retry a 409");
    let one = json!({"op": "route_put", "route": route("node-c", "10.244.3.0/24", "10.0.0.6")});
    assert_eq!(
        sdk.response_error(one.clone()),
        (409, "AnotherOperationInProgress".into())
    );
    let delete = json!({"op": "route_delete", "route": "node-a"});
    assert_eq!(
        sdk.response_error(delete),
        (409, "AnotherOperationInProgress".into())
    );

    double.set_busy_reply(BusyReply::Retryable { retry_after: 0 });
    assert_eq!(
        sdk.response_error(one.clone()),
        (429, "RetryableError".into())
    );
    assert_eq!(double.counts().busy, 4);

    double.finish_operations();
    double.set_lro(1, Duration::ZERO);
    sdk.ok(second);
    assert_eq!(
        double.routes(RG, TABLE),
        vec![RouteEntry::appliance("node-b", "10.244.2.0/24", "10.0.0.5")]
    );
}

/// Guards throttling: a 429 with `Retry-After` is retried by azcore itself after
/// the time it names (so a provider on the SDK sees the 429 only when retries run
/// out), and the budget headers count down on every reply until the class is
/// exhausted.
#[test]
fn throttling_429_is_retried_by_the_sdk_after_retry_after() {
    let (double, mut sdk) = setup();
    let path = format!("/routeTables/{TABLE}");
    double.inject("GET", &path, 1, Fault::Throttle { retry_after: 1 });
    let retried = sdk.ok(json!({"op": "table_get", "retries": 3}));
    let sent = requests(&retried);
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert!(
        sent[0].ends_with("-> 429") && sent[1].ends_with("-> 200"),
        "{sent:#?}"
    );
    assert!(
        retried["millis"].as_u64().unwrap_or(0) >= 1_000,
        "azcore waits the Retry-After second: {retried:#}"
    );

    double.inject("GET", &path, 1, Fault::Throttle { retry_after: 1 });
    assert_eq!(
        sdk.response_error(json!({"op": "table_get"})),
        (429, "SubscriptionRequestsThrottled".into())
    );

    double.set_remaining(2, 1, 7);
    let one = sdk.ok(json!({"op": "table_get"}));
    assert_eq!(one["initial"]["remaining_reads"], "1");
    let two = sdk.ok(json!({"op": "table_get"}));
    assert_eq!(two["initial"]["remaining_reads"], "0");
    let three = sdk.ask(json!({"op": "table_get"}));
    assert_eq!(
        response_error(&three),
        (429, "SubscriptionRequestsThrottled".into())
    );
    assert_eq!(three["initial"]["retry_after"], "7");
    assert_eq!(double.counts().throttled, 3);
}

/// Guards single routes: create (201, an LRO, the SDK's final GET of the route),
/// get, list, delete (202 with `Location` and `Azure-AsyncOperation`, polled), a
/// delete of an absent route (204, done at once) and a get of it (404 `NotFound`).
#[test]
fn single_route_is_created_read_listed_and_deleted() {
    let (double, mut sdk) = setup();
    let created =
        sdk.ok(json!({"op": "route_put", "route": route("node-a", "10.244.1.0/24", "10.0.0.4")}));
    assert_eq!(created["initial"]["status"], 201, "{created:#}");
    assert_eq!(created["initial"]["provisioning_state"], "Updating");
    let a = RouteEntry::appliance("node-a", "10.244.1.0/24", "10.0.0.4");
    let decoded = &created["result"];
    assert_eq!(*decoded, decoded_route(&a, &decoded["etag"], "Succeeded"));
    assert_eq!(double.routes(RG, TABLE), vec![a.clone()]);

    let got = sdk.ok(json!({"op": "route_get", "route": "node-a"}));
    assert_eq!(got["result"], *decoded);
    let listed = sdk.ok(json!({"op": "routes_list"}));
    assert_eq!(listed["result"], json!([decoded.clone()]));

    let deleted = sdk.ok(json!({"op": "route_delete", "route": "node-a"}));
    assert_eq!(deleted["initial"]["status"], 202, "{deleted:#}");
    assert!(
        deleted["initial"]["location"]
            .as_str()
            .is_some_and(|l| l.contains("/operationResults/")),
        "{deleted:#}"
    );
    assert_eq!(deleted["result"], json!({"deleted": true}));
    assert_eq!(double.routes(RG, TABLE), vec![]);

    let again = sdk.ok(json!({"op": "route_delete", "route": "node-a"}));
    assert_eq!(again["initial"]["status"], 204);
    assert_eq!(
        requests(&again).len(),
        1,
        "a 204 is done at once: {again:#}"
    );
    assert_eq!(
        sdk.response_error(json!({"op": "route_get", "route": "node-a"})),
        (404, "NotFound".into())
    );

    // A client may poll a DELETE's Location instead: 202 while it runs, then 204.
    sdk.ok(json!({"op": "route_put", "route": route("node-b", "10.244.2.0/24", "10.0.0.5")}));
    let pending = sdk.ok(json!({"op": "route_delete", "route": "node-b", "no_wait": true}));
    assert_eq!(pending["result"]["done"], false, "{pending:#}");
    let location = pending["initial"]["location"].as_str().expect("a Location");
    let path = location.trim_start_matches(&double.endpoint()).to_string();
    let bearer = format!("Bearer {}", client_secret_token(&double));
    let auth = [("Authorization", bearer.as_str())];
    assert_eq!(get(&double, &path, &auth).0, 202);
    assert_eq!(get(&double, &path, &auth).0, 204);
    assert_eq!(double.routes(RG, TABLE), vec![]);
}

/// Guards the pre-flight reads: the VM's NICs (IDs, the primary one) as armcompute
/// decodes them, and the NIC's `enableIPForwarding`, private IP and VM as armnetwork
/// decodes them, before and after IP forwarding is turned on.
#[test]
fn vm_and_nic_decode_with_their_nics_and_ip_forwarding() {
    let (double, mut sdk) = setup();
    double.create_nic(RG, "node-a-nic", "10.0.0.4", false);
    double.create_nic(RG, "node-a-nic2", "10.0.1.4", true);
    double.create_vm(RG, "node-a", &["node-a-nic", "node-a-nic2"]);
    let nic_id = double.resource_id(RG, "Microsoft.Network/networkInterfaces", "node-a-nic");
    let nic2_id = double.resource_id(RG, "Microsoft.Network/networkInterfaces", "node-a-nic2");
    let vm_id = double.resource_id(RG, "Microsoft.Compute/virtualMachines", "node-a");

    let vm = sdk.ok(json!({"op": "vm_get", "vm": "node-a"}));
    assert_eq!(
        vm["result"],
        json!({"name": "node-a", "id": vm_id, "provisioning_state": "Succeeded",
               "nics": [{"id": nic_id, "primary": true}, {"id": nic2_id, "primary": false}]})
    );
    assert!(
        requests(&vm)[0].contains("api-version=2026-04-01"),
        "{vm:#}"
    );

    let nic = sdk.ok(json!({"op": "nic_get", "nic": "node-a-nic"}));
    assert_eq!(
        nic["result"],
        json!({"name": "node-a-nic", "id": nic_id, "ip_forwarding": false,
               "provisioning_state": "Succeeded", "private_ips": ["10.0.0.4"], "vm": vm_id})
    );
    double.set_ip_forwarding(RG, "node-a-nic", true);
    let on = sdk.ok(json!({"op": "nic_get", "nic": "node-a-nic"}));
    assert_eq!(on["result"]["ip_forwarding"], true);
    assert_all_accepted(&double);
    assert_eq!(
        sdk.response_error(json!({"op": "vm_get", "vm": "node-z"})),
        (404, "ResourceNotFound".into())
    );
}

/// Guards an LRO that ends `Failed`: PollUntilDone returns an azcore.ResponseError
/// with the operation's error code (and the status of the final poll, 200), the
/// double puts the routes back and marks the table `Failed`.
#[test]
fn an_lro_that_ends_failed_is_a_response_error_and_undoes_the_change() {
    let (double, mut sdk) = setup();
    let before = RouteEntry::appliance("node-a", "10.244.1.0/24", "10.0.0.4");
    double.put_route(RG, TABLE, before.clone());
    double.fail_next_operation("InternalServerError", "An error occurred.");
    let answer = sdk.ask(json!({"op": "table_put", "location": "westeurope",
                                "routes": [route("node-b", "10.244.2.0/24", "10.0.0.5")]}));
    assert_eq!(
        response_error(&answer),
        (200, "InternalServerError".into()),
        "{answer:#}"
    );
    assert_eq!(double.routes(RG, TABLE), vec![before]);
    assert_eq!(double.table_state(RG, TABLE).as_deref(), Some("Failed"));
    let table = sdk.ok(json!({"op": "table_get"}));
    assert_eq!(table["result"]["provisioning_state"], "Failed");
}

/// Guards the replies that leave a provider unsure: a reply lost after the change
/// (the SDK sees a transport error, not a ResponseError, and the change was made),
/// and a 500 (a ResponseError without retries, retried by azcore with them).
#[test]
fn lost_replies_and_server_errors_reach_the_sdk_as_they_should() {
    let (double, mut sdk) = setup();
    let path = format!("/routeTables/{TABLE}");
    double.inject("PUT", &path, 1, Fault::LostReply);
    let lost = sdk.ask(json!({"op": "table_put", "location": "westeurope",
                              "routes": [route("node-a", "10.244.1.0/24", "10.0.0.4")]}));
    assert_ne!(lost["error"], Value::Null, "{lost:#}");
    assert_eq!(lost["error"]["response"], false, "{lost:#}");
    assert_eq!(
        double.routes(RG, TABLE),
        vec![RouteEntry::appliance("node-a", "10.244.1.0/24", "10.0.0.4")]
    );

    double.inject("GET", &path, 1, Fault::server_error(500));
    assert_eq!(
        sdk.response_error(json!({"op": "table_get"})),
        (500, "InternalServerError".into())
    );
    double.inject("GET", &path, 1, Fault::server_error(503));
    let retried = sdk.ok(json!({"op": "table_get", "retries": 2}));
    assert_eq!(requests(&retried).len(), 2, "{retried:#}");
    double.inject("GET", &path, 1, Fault::another_operation());
    assert_eq!(
        sdk.response_error(json!({"op": "table_get", "retries": 2})),
        (409, "AnotherOperationInProgress".into())
    );
}

/// Guards the token endpoints a provider will use and what ARM does with their
/// tokens: client secret and federated assertion (workload identity) at Entra ID,
/// the managed identity at IMDS (only with `Metadata: true`), their errors, and 401
/// with ARM's body for a token the double did not issue. The log tells whose token
/// each request carried.
#[test]
fn tokens_from_entra_id_and_imds_are_told_apart_and_a_bad_token_is_401() {
    let double = ArmDouble::start(SUB);
    double.create_route_table(RG, TABLE, "westeurope");
    double.add_client_secret(TENANT, CLIENT, SECRET);
    double.add_federated_client(TENANT, "wi-client", "projected-sa-token");
    double.add_managed_identity("msi-client", Some("/subscriptions/x/uami"));
    let token_path = format!("/{TENANT}/oauth2/v2.0/token");
    let scope = ("scope", "https://management.azure.com/.default");

    let secret = client_secret_token(&double);
    let (status, federated) = post_form(
        &double,
        &token_path,
        &[
            ("grant_type", "client_credentials"),
            ("client_id", "wi-client"),
            (
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            ),
            ("client_assertion", "projected-sa-token"),
            scope,
        ],
    );
    assert_eq!(status, 200, "{federated:#}");
    assert_eq!(federated["token_type"], "Bearer");
    let (status, bad) = post_form(
        &double,
        &token_path,
        &[
            ("grant_type", "client_credentials"),
            ("client_id", CLIENT),
            ("client_secret", "wrong"),
            scope,
        ],
    );
    assert_eq!(
        (status, bad["error"].clone()),
        (401, json!("invalid_client"))
    );

    let imds = "/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https%3A%2F%2Fmanagement.azure.com%2F";
    let (status, refused) = get(&double, imds, &[]);
    assert_eq!(
        (status, refused["error"].clone()),
        (400, json!("invalid_request"))
    );
    let (status, msi) = get(&double, imds, &[("Metadata", "true")]);
    assert_eq!(status, 200, "{msi:#}");
    assert_eq!(msi["client_id"], "msi-client");
    assert_eq!(msi["resource"], "https://management.azure.com/");
    assert!(
        msi["expires_in"].is_string(),
        "IMDS sends numbers as strings"
    );
    let (status, _) = get(
        &double,
        &format!("{imds}&client_id=someone-else"),
        &[("Metadata", "true")],
    );
    assert_eq!(status, 400);

    for (token, identity) in [
        (secret, format!("client:{TENANT}/{CLIENT}")),
        (
            federated["access_token"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            format!("federated:{TENANT}/wi-client"),
        ),
        (
            msi["access_token"].as_str().unwrap_or_default().to_string(),
            "msi:msi-client".to_string(),
        ),
    ] {
        let mut sdk = Sdk::start(&double, &token);
        sdk.ok(json!({"op": "table_get"}));
        let last = double.requests().pop().expect("a request");
        assert_eq!(last.identity.as_deref(), Some(identity.as_str()));
        assert_eq!(last.token, token);
    }

    let mut wrong = Sdk::start(&double, "not-a-token");
    let answer = wrong.ask(json!({"op": "table_get"}));
    assert_eq!(
        response_error(&answer),
        (401, "InvalidAuthenticationToken".into())
    );
    assert_eq!(answer["initial"]["www_authenticate_given"], true);
    assert_eq!(
        requests(&answer).len(),
        1,
        "azcore does not retry a 401: {answer:#}"
    );
    assert_eq!(double.counts().unauthorized, 1);
}

/// Guards the api-version check: a request with another version, or none, is 400
/// as ARM answers it.
#[test]
fn other_api_versions_are_refused() {
    let (double, _sdk) = setup();
    let token = client_secret_token(&double);
    let bearer = format!("Bearer {token}");
    let path = format!("{}?api-version=2020-01-01", table_id());
    let (status, body) = get(&double, &path, &[("Authorization", bearer.as_str())]);
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!("InvalidApiVersionParameter"))
    );
    let (status, body) = get(&double, &table_id(), &[("Authorization", bearer.as_str())]);
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!("MissingApiVersionParameter"))
    );
}

/// Guards the check itself: a field the SDK's model lacks, in a table, in one of
/// its routes, or in an LRO poll, and a value of the wrong type in a NIC, each make
/// the answer name the reply as not strict, so a double that drifts from the SDK's
/// schema cannot pass the tests above.
#[test]
fn the_strict_check_fails_on_replies_the_sdk_does_not_hold() {
    let (double, mut sdk) = setup();
    double.put_route(
        RG,
        TABLE,
        RouteEntry::appliance("node-a", "10.244.1.0/24", "10.0.0.4"),
    );
    let path = format!("/routeTables/{TABLE}");
    let cases = [
        ("/properties", "nextHopIpAddresses", json!(["10.0.0.4"])),
        (
            "/properties/routes/0/properties",
            "nextHopIP",
            json!("10.0.0.4"),
        ),
        ("", "eTag", json!("W/\"x\"")),
    ];
    for (pointer, name, value) in cases {
        double.inject("GET", &path, 1, Fault::extra_field(pointer, name, value));
        let answer = sdk.ask_unchecked(json!({"op": "table_get"}));
        let strict = answer["strict"].as_array().expect("strict");
        assert_eq!(strict.len(), 1, "{answer:#}");
        let problem = strict[0].as_str().unwrap_or_default();
        assert!(
            problem.contains(&format!("{pointer}/{name}: not a field of the SDK's model")),
            "{problem}"
        );
    }

    double.set_lro(1, Duration::ZERO);
    double.inject_poll(1, Fault::extra_field("", "percentComplete", json!(50)));
    let put = sdk.ask_unchecked(json!({"op": "table_put", "location": "westeurope", "routes": []}));
    assert_eq!(put["error"], Value::Null, "{put:#}");
    assert!(
        put["strict"][0]
            .as_str()
            .is_some_and(|p| p.contains("/percentComplete")),
        "{put:#}"
    );

    double.create_nic(RG, "nic", "10.0.0.4", false);
    double.inject(
        "GET",
        "/networkInterfaces/nic",
        1,
        Fault::extra_field("/properties", "enableIPForwarding", json!("yes")),
    );
    let nic = sdk.ask_unchecked(json!({"op": "nic_get", "nic": "nic"}));
    assert!(
        nic["strict"][0]
            .as_str()
            .is_some_and(|p| p.contains("does not decode into")),
        "{nic:#}"
    );
}

/// Guards the double's ARM name rule (issue 36, item 7): a table PUT holding one
/// route whose name breaks the rule (81 characters, cloud-provider-azure's name for
/// an FQDN-long node) is refused whole, 400 `InvalidResourceName` as the SDK decodes
/// it, and nothing of it is written; a name of 80 characters ending in `_` passes.
#[test]
fn a_route_name_arm_refuses_fails_the_whole_put() {
    let (double, mut sdk) = setup();
    let etag = sdk.ok(json!({"op": "table_get"}))["result"]["etag"].clone();
    let too_long = format!("{}____102441024", "n".repeat(68));
    assert_eq!(too_long.len(), 81);
    let put = json!({"op": "table_put", "location": "westeurope", "if_match": etag,
        "routes": [route("node-a____102442024", "10.244.2.0/24", "10.0.0.4"),
                   route(&too_long, "10.244.1.0/24", "10.0.0.5")]});
    assert_eq!(sdk.response_error(put), (400, "InvalidResourceName".into()));
    assert!(double.routes(RG, TABLE).is_empty());
    let edge = format!("{}_", "n".repeat(79));
    let etag = sdk.ok(json!({"op": "table_get"}))["result"]["etag"].clone();
    sdk.ok(
        json!({"op": "table_put", "location": "westeurope", "if_match": etag,
        "routes": [route(&edge, "10.244.1.0/24", "10.0.0.5")]}),
    );
    assert_eq!(double.routes(RG, TABLE).len(), 1);
}

/// Guards the double's route limit: a PUT over it is refused whole (400, in ARM's
/// error shape, the code the double's own: Azure documents none), one at it passes.
#[test]
fn a_table_over_its_route_limit_is_refused_whole() {
    let (double, mut sdk) = setup();
    double.set_route_limit(2);
    let routes = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| route(&format!("n{i}"), &format!("10.244.{i}.0/24"), "10.0.0.4"))
            .collect()
    };
    let etag = sdk.ok(json!({"op": "table_get"}))["result"]["etag"].clone();
    let (status, _) = sdk.response_error(json!({"op": "table_put", "location": "westeurope",
        "if_match": etag, "routes": routes(3)}));
    assert_eq!(status, 400);
    assert!(double.routes(RG, TABLE).is_empty());
    let etag = sdk.ok(json!({"op": "table_get"}))["result"]["etag"].clone();
    sdk.ok(
        json!({"op": "table_put", "location": "westeurope", "if_match": etag,
        "routes": routes(2)}),
    );
    assert_eq!(double.routes(RG, TABLE).len(), 2);
}
