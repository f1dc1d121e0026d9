//! The GCE double checked against Google's official client. google.golang.org/api's
//! compute/v1 (the client cloud-provider-gcp uses, the version pinned in
//! tests/kube-apiserver/go.mod) drives the double through every call our provider
//! makes: the project's quotas, instances, routes listed with the API's filter and
//! paged, inserted and deleted with their operations got and waited on, and the
//! faults (403 `rateLimitExceeded`, 409, 404, quota, an operation that ends in error,
//! a slow operation, a reply lost after the change). A reply field that compute/v1's
//! types lack (checked on the Go side, since compute/v1 ignores unknown fields), a
//! decoded value other than what the double holds, or a request of the client the
//! double refuses for its token, fails the test: the double is then wrong.
//!
//! The Go side is `tests/kube-apiserver/gce-conformance` (one JSON command per line
//! in, one JSON answer out), so the test can change the double between commands.

#[path = "support/gce_double.rs"]
mod gce_double;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use gce_double::{Fault, GceDouble, RouteEntry, ZONES};
use kube_apiserver::gce_conformance_binary;
use serde_json::{Value, json};

const PROJECT: &str = "conf-project";
const ZONE: &str = "europe-west1-b";

/// compute/v1 behind a pipe.
struct ComputeV1 {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl ComputeV1 {
    fn start(double: &GceDouble, token: &str) -> ComputeV1 {
        let binary = gce_conformance_binary();
        let mut child = Command::new(binary)
            .arg(format!("--endpoint={}", double.api_endpoint()))
            .arg(format!("--project={PROJECT}"))
            .arg(format!("--token={token}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        ComputeV1 {
            child,
            stdin,
            stdout,
        }
    }

    /// One command; every reply must have decoded strictly.
    fn ask(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").expect("write a command");
        self.stdin.flush().expect("flush the command");
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).expect("read the answer");
        assert!(n > 0, "gce-conformance exited on {command}");
        let answer: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("gce-conformance answered {line:?}: {e}"));
        assert_eq!(
            answer["strict"],
            json!([]),
            "compute/v1's types lack fields of the double's replies to {command}: {answer:#}"
        );
        answer
    }

    /// One command that must have succeeded; its result.
    fn ok(&mut self, command: Value) -> Value {
        let answer = self.ask(command.clone());
        assert_eq!(answer["error"], Value::Null, "{command} failed: {answer:#}");
        answer["result"].clone()
    }

    /// One command that must have failed with `code` and `reason`.
    fn refused(&mut self, command: Value, code: u16, reason: &str) -> Value {
        let answer = self.ask(command.clone());
        assert_eq!(
            answer["error"]["code"],
            json!(code),
            "{command}: {answer:#}"
        );
        assert_eq!(
            answer["error"]["reasons"],
            json!([reason]),
            "{command}: {answer:#}"
        );
        answer
    }
}

impl Drop for ComputeV1 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the client decoded of a route, against what the double holds.
fn assert_same_route(decoded: &Value, held: &RouteEntry) {
    assert_eq!(
        decoded,
        &json!({
            "name": held.name, "network": held.network, "dest_range": held.dest_range,
            "next_hop_instance": held.next_hop_instance, "priority": held.priority,
            "description": held.description, "id": held.id, "warnings": [],
        })
    );
}

fn insert(name: &str, dest: &str, hop: &str, network: &str) -> Value {
    json!({"op": "route_insert", "name": name, "dest_range": dest, "next_hop_instance": hop,
           "network": network, "priority": 1000, "description": "k8s-node-route"})
}

/// The filter our provider sends (src/cloud/gce/mod.rs, `list_filter`).
fn provider_filter(cluster: &str, network: &str) -> String {
    format!(
        "(name eq {cluster}-.*) (network eq .*/projects/{PROJECT}/global/networks/{network}) (description eq k8s-node-route)"
    )
}

#[test]
fn compute_v1_decodes_every_reply_of_the_double_strictly_and_as_the_double_holds_it() {
    let double = GceDouble::start(PROJECT, "k8s", None);
    double.add_network("other-net");
    let node_1 = double.add_instance(ZONE, "node-1", true);
    double.add_instance(ZONE, "node-2", false);
    let token = double.issue_token();
    let mut client = ComputeV1::start(&double, &token);
    let network = double.network_url("k8s");

    // The project's ROUTES quota, as compute/v1 decodes it.
    let project = client.ok(json!({"op": "project_get"}));
    assert_eq!(
        project["quotas"]["ROUTES"],
        json!({"limit": 250, "usage": 0})
    );
    // The region's zones (cloud-provider-gcp lists them once with `multizone`), as
    // the double holds them and in its order; the double ignores the filter.
    let zones = client.ok(json!({"op": "zones_list", "filter": "region eq .*europe-west1"}));
    let names: Vec<&str> = zones
        .as_array()
        .expect("a list of zones")
        .iter()
        .map(|z| z["name"].as_str().expect("a zone's name"))
        .collect();
    assert_eq!(names, ZONES);
    assert_eq!(
        (&zones[0]["status"], &zones[0]["self_link"]),
        (
            &json!("UP"),
            &json!(format!(
                "{}projects/{PROJECT}/zones/{}",
                double.api_endpoint(),
                ZONES[0]
            ))
        )
    );
    assert!(
        zones[0]["region"]
            .as_str()
            .is_some_and(|r| r.ends_with(&format!("projects/{PROJECT}/regions/europe-west1"))),
        "{zones:#}"
    );
    // Instances, with canIpForward both ways.
    let i = client.ok(json!({"op": "instance_get", "zone": ZONE, "name": "node-1"}));
    assert_eq!(
        (&i["self_link"], &i["can_ip_forward"]),
        (&json!(node_1), &json!(true))
    );
    let i = client.ok(json!({"op": "instance_get", "zone": ZONE, "name": "node-2"}));
    assert_eq!(i["can_ip_forward"], json!(false));
    client.refused(
        json!({"op": "instance_get", "zone": ZONE, "name": "gone"}),
        404,
        "notFound",
    );

    // An insert answers an operation; the route is there when it is done. The peer's
    // partial next hop (zones/<z>/instances/<n>) is stored as a full URL.
    let op = client.ok(insert(
        "e2e-uid-1",
        "10.244.1.0/24",
        &format!("zones/{ZONE}/instances/node-1"),
        &network,
    ));
    assert_eq!(
        (&op["operation_type"], &op["error_codes"]),
        (&json!("insert"), &json!([]))
    );
    let done = client.ok(json!({"op": "operation_wait", "name": op["name"]}));
    assert_eq!(done["status"], json!("DONE"));
    assert!(
        done["target_link"]
            .as_str()
            .unwrap()
            .ends_with("/global/routes/e2e-uid-1")
    );
    let held = double.route("e2e-uid-1").expect("the insert's route");
    assert_eq!(held.next_hop_instance, node_1);
    assert_same_route(
        &client.ok(json!({"op": "route_get", "name": "e2e-uid-1"})),
        &held,
    );

    // Three of ours, two of others (another network, another description): a filtered
    // list in pages of two gives exactly ours, as the double holds them.
    for (name, dest) in [
        ("e2e-uid-2", "10.244.2.0/24"),
        ("e2e-uid-3", "10.244.3.0/24"),
    ] {
        let op = client.ok(insert(name, dest, &node_1, &network));
        client.ok(json!({"op": "operation_wait", "name": op["name"]}));
    }
    let foreign = |name: &str, network: String, description: &str| RouteEntry {
        name: name.into(),
        network,
        dest_range: "10.0.9.0/24".into(),
        next_hop_instance: node_1.clone(),
        priority: 900,
        description: description.into(),
        id: 0,
    };
    double.put_route(foreign(
        "e2e-other-net",
        double.network_url("other-net"),
        "k8s-node-route",
    ));
    double.put_route(foreign("e2e-manual", network.clone(), "made by hand"));
    let ours: Vec<RouteEntry> = double
        .routes()
        .into_iter()
        .filter(|r| r.name.starts_with("e2e-uid-"))
        .collect();
    for filter in [
        provider_filter("e2e", "k8s"),
        // The peer's form: the network's full URL.
        format!("(name eq e2e-.*) (network eq {network}) (description eq k8s-node-route)"),
    ] {
        let answer = client.ask(json!({"op": "routes_list", "filter": filter, "max_results": 2}));
        let listed = answer["result"].as_array().expect("a list").clone();
        assert_eq!(listed.len(), ours.len(), "{filter}: {answer:#}");
        for (decoded, held) in listed.iter().zip(&ours) {
            assert_same_route(decoded, held);
        }
        let pages: Vec<&Value> = answer["requests"].as_array().unwrap().iter().collect();
        assert_eq!(pages.len(), 2, "two pages: {pages:?}");
        assert!(
            pages[1].as_str().unwrap().contains("pageToken="),
            "{pages:?}"
        );
    }
    let page = client.ok(
        json!({"op": "routes_page", "filter": provider_filter("e2e", "k8s"), "max_results": 2}),
    );
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(page["next_page_token"], json!("page-2"));

    // Faults, each as the client sees them.
    let path = format!("/projects/{PROJECT}/global/routes");
    double.inject("POST", &path, 1, Fault::error(403, "rateLimitExceeded"));
    client.refused(
        insert("e2e-uid-4", "10.244.4.0/24", &node_1, &network),
        403,
        "rateLimitExceeded",
    );
    double.inject("GET", &path, 1, Fault::error(429, "rateLimitExceeded"));
    client.refused(
        json!({"op": "routes_list", "filter": provider_filter("e2e", "k8s")}),
        429,
        "rateLimitExceeded",
    );
    client.refused(
        insert("e2e-uid-1", "10.244.1.0/24", &node_1, &network),
        409,
        "alreadyExists",
    );
    client.refused(
        json!({"op": "route_delete", "name": "e2e-uid-9"}),
        404,
        "notFound",
    );
    client.refused(
        insert("Bad_Name", "10.244.4.0/24", &node_1, &network),
        400,
        "invalid",
    );

    // An operation that ends in error: the route never appears.
    double.fail_next_operation("RESOURCE_NOT_FOUND", "The resource 'node-9' was not found");
    let op = client.ok(insert("e2e-uid-5", "10.244.5.0/24", &node_1, &network));
    let failed = client.ok(json!({"op": "operation_wait", "name": op["name"]}));
    assert_eq!(failed["status"], json!("DONE"));
    assert_eq!(failed["error_codes"], json!(["RESOURCE_NOT_FOUND"]));
    assert_eq!(failed["http_error_status_code"], json!(400));
    assert!(double.route("e2e-uid-5").is_none());

    // The project's quota: full, an insert is refused.
    let used = double.routes().len();
    double.set_routes_quota(used);
    let project = client.ok(json!({"op": "project_get"}));
    assert_eq!(
        project["quotas"]["ROUTES"],
        json!({"limit": used, "usage": used})
    );
    client.refused(
        insert("e2e-uid-6", "10.244.6.0/24", &node_1, &network),
        403,
        "quotaExceeded",
    );
    double.set_routes_quota(250);

    // A slow operation: a wait returns it still running after its slice, the next
    // one when it is done.
    double.set_operation_duration(gce_double::WAIT_SLICE + Duration::from_millis(500));
    let op = client.ok(json!({"op": "route_delete", "name": "e2e-uid-3"}));
    assert_eq!(op["status"], json!("RUNNING"));
    assert_eq!(
        client.ok(json!({"op": "operation_get", "name": op["name"]}))["status"],
        json!("RUNNING")
    );
    let waited = client.ok(json!({"op": "operation_wait", "name": op["name"]}));
    assert_eq!(
        waited["status"],
        json!("RUNNING"),
        "a wait slice passed first"
    );
    let waited = client.ok(json!({"op": "operation_wait", "name": op["name"]}));
    assert_eq!(waited["status"], json!("DONE"));
    assert!(double.route("e2e-uid-3").is_none());
    double.set_operation_duration(Duration::from_millis(50));

    // A reply lost after the change: the client sees no reply, the route is made.
    double.inject("POST", &path, 1, Fault::LostReply);
    let answer = client.ask(insert("e2e-uid-7", "10.244.7.0/24", &node_1, &network));
    assert!(
        answer["error"]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{answer:#}"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(double.route("e2e-uid-7").is_some(), "the change was made");

    assert_eq!(
        double.unauthorized(),
        vec![],
        "every request carried the token"
    );
}
