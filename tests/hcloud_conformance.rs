//! The Hetzner double checked against the official client. hcloud-go (the client the
//! Hetzner cloud-controller-manager itself uses, the version pinned in
//! tests/kube-apiserver/go.mod) drives the double through every endpoint our provider
//! uses: networks by ID and by name, add_route and delete_route with their actions
//! polled to the end, servers by ID, by name and by private IP from the paginated
//! list, error codes and rate-limit headers. A reply the client does not decode
//! strictly into its schema types, decodes to something other than what the double
//! holds, or a request of the client the double refuses, fails the test: the double is
//! then wrong, not the client, since our provider is only as right as the double it is
//! tested against.
//!
//! The Go side is `tests/kube-apiserver/hcloud-conformance` (one JSON command per line
//! in, one JSON answer out), so a test can change the double between commands.

#[path = "support/hcloud_double.rs"]
mod hcloud_double;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hcloud_double::{Fault, HcloudDouble};
use kube_apiserver::hcloud_conformance_binary;
use serde_json::{Value, json};

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const NET: u64 = 4711;

/// hcloud-go behind a pipe.
struct HcloudGo {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl HcloudGo {
    fn start(double: &HcloudDouble, token: &str) -> HcloudGo {
        let binary = hcloud_conformance_binary();
        let mut child = Command::new(binary)
            .arg(format!("--endpoint={}", double.endpoint()))
            .arg(format!("--token={token}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        HcloudGo {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends one command and returns hcloud-go's answer, after checking that every
    /// reply of the double decoded strictly into hcloud-go's schema.
    fn ask(&mut self, command: Value) -> Value {
        let answer = self.ask_unchecked(command.clone());
        assert_eq!(
            answer["strict"],
            json!([]),
            "hcloud-go's schema does not accept the double's replies to {command}: {answer:#}"
        );
        answer
    }

    /// Sends one command and returns hcloud-go's answer, whatever the replies were.
    fn ask_unchecked(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").expect("write a command to hcloud-conformance");
        self.stdin.flush().expect("flush the command");
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .expect("read hcloud-conformance's answer");
        assert!(n > 0, "hcloud-conformance exited on {command}");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("hcloud-conformance answered {line:?}: {e}"))
    }

    /// Like [`HcloudGo::ask`], and the command must have succeeded.
    fn ok(&mut self, command: Value) -> Value {
        let answer = self.ask(command.clone());
        assert_eq!(
            answer["error"],
            Value::Null,
            "hcloud-go failed on {command}: {answer:#}"
        );
        answer
    }
}

impl Drop for HcloudGo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A double with network `k8s` (10.0.0.0/8, subnet 10.0.0.0/24) and `servers`
/// servers `worker-<i>` (ID 100+i) attached with IP 10.0.0.<i+1>.
fn cluster(servers: u64) -> HcloudDouble {
    let double = HcloudDouble::start(TOKEN);
    double.add_network(NET, "k8s", "10.0.0.0/8", &["10.0.0.0/24"]);
    for i in 1..=servers {
        double.add_server(100 + i, &format!("worker-{i}"), Some((NET, &ip(i))));
    }
    double
}

fn ip(i: u64) -> String {
    format!("10.0.{}.{}", (i + 1) / 256, (i + 1) % 256)
}

/// Every request the double saw was answered with a status below 400: the double
/// accepted everything the official client sent.
fn assert_all_accepted(double: &HcloudDouble) {
    let refused: Vec<_> = double
        .requests()
        .into_iter()
        .filter(|r| r.status >= 400 || r.status == 0)
        .map(|r| format!("{} {}?{} -> {}", r.method, r.path, r.query, r.status))
        .collect();
    assert!(
        refused.is_empty(),
        "the double refused requests of hcloud-go: {refused:#?}"
    );
}

fn network_json(servers: &[u64], routes: &[(&str, &str)]) -> Value {
    json!({
        "id": NET,
        "name": "k8s",
        "ip_range": "10.0.0.0/8",
        "subnets": [{"type": "cloud", "ip_range": "10.0.0.0/24", "network_zone": "eu-central",
                     "gateway": "10.0.0.1"}],
        "routes": routes.iter().map(|(d, g)| json!({"destination": d, "gateway": g})).collect::<Vec<_>>(),
        "servers": servers,
        "created": "2016-01-30T23:55:00Z",
    })
}

/// Guards the network's shape (ID, range, subnets, routes, attached servers) as
/// hcloud-go decodes it, by ID, by name and by `Get` (ID first, then name, as HCCM
/// resolves `HCLOUD_NETWORK`).
#[test]
fn network_by_id_and_by_name_decode_as_the_double_holds_them() {
    let double = cluster(2);
    double.add_server(200, "not-attached", None);
    double.put_route(NET, "10.244.1.0/24", "10.0.0.2");
    double.put_route(NET, "10.244.2.0/24", "10.0.0.3");
    let mut go = HcloudGo::start(&double, TOKEN);
    let want = network_json(
        &[101, 102],
        &[("10.244.1.0/24", "10.0.0.2"), ("10.244.2.0/24", "10.0.0.3")],
    );

    let by_id = go.ok(json!({"op": "network_by_id", "id": NET}));
    assert_eq!(by_id["result"], want);
    assert_eq!(by_id["requests"], json!(["GET /v1/networks/4711"]));

    let by_name = go.ok(json!({"op": "network_by_name", "name": "k8s"}));
    assert_eq!(by_name["result"], want);
    assert_eq!(by_name["requests"], json!(["GET /v1/networks?name=k8s"]));
    assert_eq!(by_name["pagination"]["LastPage"], 1);

    assert_eq!(
        go.ok(json!({"op": "network_get", "id_or_name": "k8s"}))["result"],
        want
    );
    assert_eq!(
        go.ok(json!({"op": "network_get", "id_or_name": "4711"}))["result"],
        want
    );
    assert_all_accepted(&double);
}

/// Guards the not-found replies: hcloud-go turns a 404 `not_found` into "nothing,
/// no error", and an empty name lookup into nothing.
#[test]
fn missing_network_and_server_are_nothing_for_hcloud_go() {
    let double = cluster(1);
    let mut go = HcloudGo::start(&double, TOKEN);
    for command in [
        json!({"op": "network_by_id", "id": 9}),
        json!({"op": "network_by_name", "name": "other"}),
        json!({"op": "server_by_id", "id": 9}),
        json!({"op": "server_by_name", "name": "worker-9"}),
    ] {
        let answer = go.ok(command.clone());
        assert_eq!(answer["result"], Value::Null, "{command}: {answer:#}");
    }
}

/// Guards pagination (hcloud-go pages with per_page=50 while `next_page` is set) and
/// the server fields the provider maps with: ID, name and the private IP in the
/// managed network, by ID, by name and by private IP from the full list.
#[test]
fn servers_page_through_every_page_and_map_by_id_name_and_private_ip() {
    let double = cluster(120);
    double.add_server(300, "elsewhere", Some((99, "10.0.0.2")));
    let mut go = HcloudGo::start(&double, TOKEN);

    let all = go.ok(json!({"op": "servers_all"}));
    let servers = all["result"].as_array().expect("a list of servers");
    assert_eq!(servers.len(), 121);
    assert_eq!(
        all["requests"],
        json!([
            "GET /v1/servers?page=1&per_page=50",
            "GET /v1/servers?page=2&per_page=50",
            "GET /v1/servers?page=3&per_page=50",
        ])
    );
    // One page as hcloud-go's List reads its meta.pagination.
    let page = go.ok(json!({"op": "servers_page", "page": 2, "per_page": 50}));
    assert_eq!(page["result"].as_array().map(Vec::len), Some(50));
    assert_eq!(
        page["pagination"],
        json!({"Page": 2, "PerPage": 50, "PreviousPage": 1, "NextPage": 3, "LastPage": 3,
               "TotalEntries": 121})
    );
    let last = go.ok(json!({"op": "servers_page", "page": 3, "per_page": 50}));
    assert_eq!(last["result"].as_array().map(Vec::len), Some(21));
    assert_eq!(last["pagination"]["NextPage"], 0);
    let worker = |i: u64| {
        json!({"id": 100 + i, "name": format!("worker-{i}"), "status": "running",
               "private_net": [{"network": NET, "ip": ip(i)}]})
    };
    assert_eq!(servers[0], worker(1));
    assert_eq!(servers[119], worker(120));

    assert_eq!(
        go.ok(json!({"op": "server_by_id", "id": 107}))["result"],
        worker(7)
    );
    assert_eq!(
        go.ok(json!({"op": "server_by_name", "name": "worker-7"}))["result"],
        worker(7)
    );
    // 10.0.0.2 is worker-1's in the managed network and another server's elsewhere.
    assert_eq!(
        go.ok(json!({"op": "server_by_private_ip", "network": NET, "ip": "10.0.0.2"}))["result"],
        worker(1)
    );
    assert_eq!(
        go.ok(json!({"op": "server_by_private_ip", "network": NET, "ip": ip(120)}))["result"],
        worker(120)
    );
    assert_all_accepted(&double);
}

/// Guards the route actions: add_route and delete_route as hcloud-go sends them, the
/// action they return (`running`, the network as its resource), and its polling with
/// `GET /actions?id=…&sort=status&sort=id` until `success`, after which the network
/// shows the change.
#[test]
fn add_and_delete_route_actions_are_polled_to_success() {
    let double = cluster(2);
    double.set_action_duration(Duration::from_millis(60));
    let mut go = HcloudGo::start(&double, TOKEN);
    let route = json!({"network": NET, "destination": "10.244.1.0/24", "gateway": "10.0.0.2"});
    let mut add = route.clone();
    add["op"] = json!("add_route");

    let added = go.ok(add);
    let created = &added["result"]["created"];
    assert_eq!(created["command"], "add_route");
    assert_eq!(created["status"], "running");
    assert_eq!(created["finished"], false);
    assert_eq!(
        created["resources"],
        json!([{"id": NET, "type": "network"}])
    );
    let id = created["id"].as_u64().expect("an action ID");
    let final_ = &added["result"]["final"];
    assert_eq!(final_["id"], id);
    assert_eq!(final_["status"], "success");
    assert_eq!(final_["progress"], 100);
    assert_eq!(final_["finished"], true);
    let requests = added["requests"].as_array().expect("requests");
    assert_eq!(
        requests[0],
        json!(format!("POST /v1/networks/{NET}/actions/add_route"))
    );
    let poll = format!("GET /v1/actions?id={id}&page=1&sort=status&sort=id");
    assert!(requests.len() >= 2, "{requests:?}");
    assert!(
        requests[1..].iter().all(|r| *r == json!(poll)),
        "polls should be {poll}: {requests:?}"
    );
    assert_eq!(
        go.ok(json!({"op": "network_by_id", "id": NET}))["result"]["routes"],
        json!([{"destination": "10.244.1.0/24", "gateway": "10.0.0.2"}])
    );
    assert_eq!(
        go.ok(json!({"op": "action_by_id", "id": id}))["result"]["status"],
        "success"
    );

    let mut delete = route;
    delete["op"] = json!("delete_route");
    let deleted = go.ok(delete);
    assert_eq!(deleted["result"]["created"]["command"], "delete_route");
    assert_eq!(deleted["result"]["final"]["status"], "success");
    assert_eq!(double.routes(NET), vec![]);
    assert_all_accepted(&double);
}

/// Guards an action that ends in `error`: hcloud-go's WaitFor turns it into an
/// ActionError with the action's code and message.
#[test]
fn a_failed_action_is_an_action_error_for_hcloud_go() {
    let double = cluster(1);
    double.fail_next_action("add_route", "server_error", "the route could not be added");
    let mut go = HcloudGo::start(&double, TOKEN);
    let answer = go.ask(json!({"op": "add_route", "network": NET,
                               "destination": "10.244.1.0/24", "gateway": "10.0.0.2"}));
    let error = &answer["error"];
    assert_eq!(error["action"], true, "{answer:#}");
    assert_eq!(error["code"], "server_error");
    assert_eq!(error["message"], "the route could not be added");
    assert_eq!(double.routes(NET), vec![]);
}

fn add_route(destination: &str, gateway: &str) -> Value {
    json!({"op": "add_route", "network": NET, "destination": destination, "gateway": gateway})
}

/// The API error hcloud-go decoded: (HTTP status, code).
fn api_error(answer: &Value) -> (u64, String) {
    let e = &answer["error"];
    assert_ne!(e, &Value::Null, "expected an error: {answer:#}");
    (
        e["status"].as_u64().unwrap_or(0),
        e["code"].as_str().unwrap_or_default().to_string(),
    )
}

/// Guards the error replies: each decodes as an hcloud.Error with the code the
/// provider branches on and the documented status, including the double's own
/// validation (with `invalid_input` naming the field, as the real API does).
#[test]
fn api_errors_decode_with_their_codes_and_statuses() {
    let double = cluster(2);
    double.put_route(NET, "10.244.1.0/24", "10.0.0.2");
    let mut go = HcloudGo::start(&double, TOKEN);

    // Validation by the double itself.
    let overlapping = go.ask(add_route("10.244.1.0/25", "10.0.0.3"));
    assert_eq!(api_error(&overlapping), (400, "invalid_input".into()));
    assert_eq!(overlapping["error"]["fields"], json!(["destination"]));
    let public = go.ask(add_route("8.8.8.0/24", "10.0.0.3"));
    assert_eq!(api_error(&public), (400, "invalid_input".into()));
    assert_eq!(public["error"]["fields"], json!(["destination"]));
    let bad_gateway_ip = go.ask(add_route("10.244.9.0/24", "192.168.1.1"));
    assert_eq!(api_error(&bad_gateway_ip), (400, "invalid_input".into()));
    assert_eq!(bad_gateway_ip["error"]["fields"], json!(["gateway"]));
    let absent = go.ask(json!({"op": "delete_route", "network": NET,
                               "destination": "10.244.7.0/24", "gateway": "10.0.0.2"}));
    assert_eq!(api_error(&absent), (404, "not_found".into()));
    let no_network = go.ask(json!({"op": "delete_route", "network": 9,
                                   "destination": "10.244.1.0/24", "gateway": "10.0.0.2"}));
    assert_eq!(api_error(&no_network), (404, "not_found".into()));
}

/// Guards the codes the provider treats specially, injected as the real API sends
/// them: hcloud-go decodes each with its status, and a bare status without a JSON
/// body is a status-only error, not an API error.
#[test]
fn injected_errors_decode_as_hcloud_go_errors() {
    let double = cluster(1);
    let mut go = HcloudGo::start(&double, TOKEN);
    let path = format!("/networks/{NET}");
    for (status, code) in [
        (409, "conflict"),
        (423, "locked"),
        (429, "rate_limit_exceeded"),
        (503, "unavailable"),
        (500, "server_error"),
        (504, "timeout"),
    ] {
        double.inject("GET", &path, 1, Fault::error(status, code));
        let answer = go.ask(json!({"op": "network_by_id", "id": NET}));
        assert_eq!(
            api_error(&answer),
            (u64::from(status), code.to_string()),
            "{answer:#}"
        );
    }
    double.inject("GET", &path, 1, Fault::BareStatus(502));
    let bare = go.ask(json!({"op": "network_by_id", "id": NET}));
    assert_eq!(bare["error"]["status_only"], true, "{bare:#}");
    assert_eq!(bare["error"]["status"], 502);
    // A 200 whose body is not JSON: hcloud-go fails the call (and the strict check
    // names the reply), rather than returning an empty network.
    double.inject("GET", &path, 1, Fault::Garbage);
    let garbage = go.ask_unchecked(json!({"op": "network_by_id", "id": NET}));
    assert_ne!(garbage["error"], Value::Null, "{garbage:#}");
    assert_eq!(garbage["result"], Value::Null, "{garbage:#}");
    assert_eq!(garbage["strict"].as_array().map(Vec::len), Some(1));
}

/// Guards the retry policy hcloud-go applies to the double's codes: `conflict` and
/// `rate_limit_exceeded` are retried (and then succeed), `locked` is not.
#[test]
fn hcloud_go_retries_the_double_s_retryable_codes() {
    let double = cluster(1);
    let mut go = HcloudGo::start(&double, TOKEN);
    let path = format!("/networks/{NET}");
    for code in [(409, "conflict"), (429, "rate_limit_exceeded")] {
        double.clear_requests();
        double.inject("GET", &path, 1, Fault::error(code.0, code.1));
        let answer = go.ok(json!({"op": "network_by_id", "id": NET, "retries": 3}));
        assert_eq!(
            answer["requests"].as_array().map(Vec::len),
            Some(2),
            "{answer:#}"
        );
    }
    double.inject("GET", &path, 1, Fault::error(423, "locked"));
    let locked = go.ask(json!({"op": "network_by_id", "id": NET, "retries": 3}));
    assert_eq!(api_error(&locked), (423, "locked".into()));
    assert_eq!(locked["requests"].as_array().map(Vec::len), Some(1));
}

/// Guards authentication: a wrong token is `unauthorized` (401), a read-only token
/// may read but gets `token_readonly` (403) on a change.
#[test]
fn tokens_are_checked_as_hcloud_go_expects() {
    let double = cluster(1);
    double.set_read_only_token("read-only");
    let mut wrong = HcloudGo::start(&double, "wrong");
    assert_eq!(
        api_error(&wrong.ask(json!({"op": "network_by_id", "id": NET}))),
        (401, "unauthorized".into())
    );
    let mut read_only = HcloudGo::start(&double, "read-only");
    read_only.ok(json!({"op": "network_by_id", "id": NET}));
    assert_eq!(
        api_error(&read_only.ask(add_route("10.244.1.0/24", "10.0.0.2"))),
        (403, "token_readonly".into())
    );
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Guards the rate-limit headers: hcloud-go parses `RateLimit-Limit`, `-Remaining`
/// and `-Reset` (a UNIX time at which the budget is full again) from every reply,
/// also from a 429, which carries `rate_limit_exceeded`.
#[test]
fn rate_limit_headers_parse_as_the_double_sends_them() {
    let double = cluster(1);
    // 5 requests, refilled at one per 10 s: nothing refills during the test.
    double.set_rate_limit(5, 0.1);
    let mut go = HcloudGo::start(&double, TOKEN);
    for remaining in (0..5).rev() {
        let before = unix_now();
        let answer = go.ok(json!({"op": "network_by_id", "id": NET}));
        let rl = &answer["ratelimit"];
        assert_eq!(rl["limit"], 5, "{answer:#}");
        assert_eq!(rl["remaining"], remaining, "{answer:#}");
        let missing = (5 - remaining) as i64;
        let reset = rl["reset"].as_i64().expect("reset");
        assert!(
            (before + missing * 10..=unix_now() + missing * 10 + 1).contains(&reset),
            "reset {reset} should be about {missing} × 10 s from now: {answer:#}"
        );
    }
    let refused = go.ask(json!({"op": "network_by_id", "id": NET}));
    assert_eq!(api_error(&refused), (429, "rate_limit_exceeded".into()));
    assert_eq!(refused["ratelimit"]["limit"], 5);
    assert_eq!(refused["ratelimit"]["remaining"], 0);
}
