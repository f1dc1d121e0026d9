//! The Keystone and Neutron double checked against gophercloud v2 (the client
//! cloud-provider-openstack uses, the version pinned in tests/kube-apiserver/go.mod):
//! a Go program (tests/kube-apiserver/openstack-conformance) authenticates with an
//! application credential, finds the network endpoint in the catalog, and drives
//! every call our provider makes. A reply gophercloud cannot decode, a field its
//! types lack, or a status it does not expect fails the test: the double is then
//! wrong.

#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/neutron_double.rs"]
mod neutron_double;

use std::process::Command;

use kube_apiserver::openstack_conformance_binary;
use neutron_double::{APP_CREDENTIAL_ID, APP_CREDENTIAL_SECRET, NeutronDouble, REGION};
use serde_json::Value;

const ROUTER: &str = "router-1";

fn run(d: &NeutronDouble) -> Vec<Value> {
    let out = Command::new(openstack_conformance_binary())
        .args(["--auth-url", &d.auth_url(), "--region", REGION])
        .args([
            "--app-id",
            APP_CREDENTIAL_ID,
            "--app-secret",
            APP_CREDENTIAL_SECRET,
        ])
        .args(["--router", ROUTER, "--node-ip", "10.0.0.11"])
        .output()
        .expect("run openstack-conformance");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "openstack-conformance failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).expect("the report is JSON")
}

fn step<'a>(steps: &'a [Value], name: &str) -> &'a Value {
    steps
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name:?} in {steps:?}"))
}

#[test]
fn gophercloud_decodes_every_reply_of_the_double_with_no_field_it_lacks() {
    let d = NeutronDouble::start(ROUTER, true);
    d.attach_network("net-nodes", "10.0.0.1");
    d.add_instance("net-nodes", "inst-1", "10.0.0.11");
    let steps = run(&d);
    for s in &steps {
        assert!(
            s["strict"].as_array().is_none_or(|a| a.is_empty()),
            "step {}: fields gophercloud's types lack: {}",
            s["name"],
            s["strict"]
        );
    }
    assert_eq!(step(&steps, "authenticate")["result"], true);
    assert_eq!(
        step(&steps, "network endpoint")["result"],
        format!("{}/", d.network_url()),
        "the public endpoint of the region, as gophercloud picks it"
    );
    let aliases = step(&steps, "extensions")["result"].to_string();
    assert!(aliases.contains("extraroute-atomic"), "{aliases}");
    let add = step(&steps, "add_extraroutes");
    assert_eq!(add["error"], Value::Null, "{add}");
    assert_eq!(add["result"]["routes"][0]["nexthop"], "10.0.0.11");
    assert_eq!(
        step(&steps, "remove_extraroutes")["result"]["routes"],
        serde_json::json!([])
    );
    let stale = step(&steps, "update at a stale revision");
    assert_eq!(stale["status"], 412, "{stale}");
    assert!(
        stale["request"]
            .as_str()
            .unwrap_or("")
            .contains("If-Match: revision_number="),
        "{stale}"
    );
    let fresh = step(&steps, "update at the revision");
    assert_eq!(fresh["error"], Value::Null, "{fresh}");
    assert_eq!(
        step(&steps, "ports by fixed ip")["result"][0],
        "port-0003 inst-1"
    );
    assert_eq!(step(&steps, "router interfaces")["result"][0], "net-nodes");
    assert_eq!(step(&steps, "port update")["result"][0], "10.244.7.0/24");
    assert_eq!(step(&steps, "router of another id")["status"], 404);
    assert_eq!(d.pairs_of("10.0.0.11"), ["10.244.7.0/24"]);
}
