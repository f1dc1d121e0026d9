//! `route-controller plan` as an operator runs it: files shipped in testdata, both
//! output formats, stdin, and every kind of bad input.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn plan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_route-controller"))
        .arg("plan")
        .args(args)
        .output()
        .expect("run the binary")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const NODES: &str = "testdata/plan/nodes.json";
const ROUTES: &str = "testdata/plan/routes.json";

fn dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn path(p: &str) -> String {
    dir().join(p).to_string_lossy().into_owned()
}

#[test]
fn json_output_lists_deletes_creates_and_conditions() {
    let out = plan(&[
        "--nodes",
        &path(NODES),
        "--routes",
        &path(ROUTES),
        "--cluster-cidr=10.244.0.0/16",
        "--output",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let deletes: Vec<(&str, &str)> = v["deletes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["destinationCIDR"].as_str().unwrap(),
                d["reason"].as_str().unwrap(),
            )
        })
        .collect();
    // In route-list order; the VPN route outside the cluster CIDR is left alone.
    assert_eq!(
        deletes,
        vec![
            ("10.244.9.0/24", "node gone"),
            ("10.244.7.0/24", "blackhole")
        ]
    );
    let creates = v["creates"].as_array().unwrap();
    assert_eq!(creates.len(), 1);
    assert_eq!(creates[0]["targetNode"], "worker-2");
    assert_eq!(creates[0]["destinationCIDR"], "10.244.2.0/24");
    assert_eq!(
        creates[0]["nameHint"],
        "c3e9d0a4-5b6f-4e71-9a8b-2c4d6e8f0a32"
    );
    assert_eq!(creates[0]["targetNodeAddresses"][0]["address"], "10.0.0.4");
    // cp-1 and worker-1 already show False/RouteCreated: skipped. worker-3 has no
    // pod CIDR and no route: untouched.
    let conditions = v["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 1, "{conditions:?}");
    assert_eq!(
        (
            conditions[0]["node"].as_str(),
            conditions[0]["status"].as_str()
        ),
        (Some("worker-2"), Some("False"))
    );
}

#[test]
fn table_output_is_for_people() {
    let out = plan(&[
        "--nodes",
        &path(NODES),
        "--routes",
        &path(ROUTES),
        "--cluster-cidr",
        "10.244.0.0/16",
    ]);
    assert!(out.status.success());
    // Exactly the README's example, reasons included (they are what an operator reads).
    let t = text(&out.stdout);
    assert_eq!(
        t,
        "DELETE     worker-old         10.244.9.0/24            route 10.0.0.9-10.244.9.0/24 (node gone)\n\
         DELETE     -                  10.244.7.0/24            route 10.0.0.7-10.244.7.0/24 (blackhole)\n\
         CREATE     worker-2           10.244.2.0/24            name hint c3e9d0a4-5b6f-4e71-9a8b-2c4d6e8f0a32; addresses InternalIP=10.0.0.4,Hostname=worker-2\n\
         CONDITION  worker-2           NetworkUnavailable=False (RouteCreated)\n\
         NOT OURS   -                  192.168.100.0/24         route 10.0.0.254-192.168.100.0/24 (outside the cluster CIDRs; never deleted)\n\
         2 to delete, 1 to create, 2 kept, 1 condition writes, 1 not ours\n"
    );
}

#[test]
fn nodes_can_come_from_stdin() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_route-controller"))
        .args([
            "plan",
            "--nodes",
            "-",
            "--routes",
            &path(ROUTES),
            "--cluster-cidr",
            "10.244.0.0/16",
            "--output=json",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(path(NODES)).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["creates"].as_array().unwrap().len(), 1);
}

#[test]
fn an_invalid_pod_cidr_is_reported_for_its_node_and_the_rest_is_planned() {
    let out = plan(&[
        "--nodes",
        &path("testdata/plan/nodes-invalid-pod-cidr.json"),
        "--routes",
        &path(ROUTES),
        "--cluster-cidr",
        "10.244.0.0/16",
        "--output",
        "json",
    ]);
    assert!(out.status.success());
    assert!(
        text(&out.stderr).contains("node bad-cidr: pod CIDR \"10.244.300.0/24\" is invalid"),
        "{}",
        text(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["creates"][0]["targetNode"], "worker-2");
    assert_eq!(v["problems"].as_array().unwrap().len(), 1);
    let bad = v["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["node"] == "bad-cidr")
        .unwrap();
    assert_eq!(bad["status"], "True");
}

#[test]
fn bad_input_exits_2_with_one_line_naming_the_file_or_flag() {
    let routes = path(ROUTES);
    let nodes = path(NODES);
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--nodes".into(),
                path("testdata/plan/missing.json"),
                "--routes".into(),
                routes.clone(),
                "--cluster-cidr".into(),
                "10.0.0.0/8".into(),
            ],
            "--nodes",
        ),
        (
            vec![
                "--nodes".into(),
                path("testdata/plan/not-json.json"),
                "--routes".into(),
                routes.clone(),
                "--cluster-cidr".into(),
                "10.0.0.0/8".into(),
            ],
            "not valid JSON",
        ),
        (
            vec![
                "--nodes".into(),
                path("testdata/plan/not-a-node-list.json"),
                "--routes".into(),
                routes.clone(),
                "--cluster-cidr".into(),
                "10.0.0.0/8".into(),
            ],
            "expected a NodeList",
        ),
        (
            vec![
                "--nodes".into(),
                nodes.clone(),
                "--routes".into(),
                nodes.clone(),
                "--cluster-cidr".into(),
                "10.0.0.0/8".into(),
            ],
            "--routes",
        ),
        (
            vec![
                "--nodes".into(),
                nodes.clone(),
                "--routes".into(),
                routes.clone(),
                "--cluster-cidr".into(),
                "10.0.0.0/8,10.1.0.0/16".into(),
            ],
            "one IP family",
        ),
        (
            vec![
                "--nodes".into(),
                nodes.clone(),
                "--routes".into(),
                routes.clone(),
                "--cluster-cidr".into(),
                "10.0.0.0/8,fd00::/8,fd01::/8".into(),
            ],
            "3 CIDRs",
        ),
        (
            vec![
                "--nodes".into(),
                nodes.clone(),
                "--routes".into(),
                routes.clone(),
                "--cluster-cidr".into(),
                "banana".into(),
            ],
            "--cluster-cidr",
        ),
        (
            vec![
                "--nodes".into(),
                nodes.clone(),
                "--routes".into(),
                routes.clone(),
            ],
            "--cluster-cidr",
        ),
        (
            vec![
                "--nodes".into(),
                nodes.clone(),
                "--routes".into(),
                routes.clone(),
                "--cluster-cidr".into(),
                "10.0.0.0/8".into(),
                "--output".into(),
                "yaml".into(),
            ],
            "--output",
        ),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = plan(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn routes_outside_the_cluster_cidrs_are_listed_as_not_ours_in_json() {
    let out = plan(&[
        "--nodes",
        &path(NODES),
        "--routes",
        &path(ROUTES),
        "--cluster-cidr=10.244.0.0/16",
        "--output=json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let not_ours: Vec<&str> = v["notOurs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["destinationCIDR"].as_str().unwrap())
        .collect();
    assert_eq!(not_ours, ["192.168.100.0/24"]);
}

/// Guards the check that a node file holds Nodes: `kubectl get pods -o json` has the
/// same shape (a List with items) and used to plan as if the cluster had no nodes,
/// deleting every route.
#[test]
fn a_list_of_pods_is_refused() {
    let out = plan(&[
        "--nodes",
        &path("testdata/plan/pods.json"),
        "--routes",
        &path(ROUTES),
        "--cluster-cidr=10.244.0.0/16",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("item 1 is a Pod"), "{err}");
    assert!(out.stdout.is_empty());
}

/// Guards `--allow-partial`: one Node (`kubectl get node worker-1 -o json`) is not the
/// cluster, and a plan from it would delete every other node's route.
#[test]
fn a_single_node_is_the_cluster_only_with_allow_partial() {
    let single = path("testdata/plan/single-node.json");
    let args = [
        "--nodes",
        &single,
        "--routes",
        &path(ROUTES),
        "--cluster-cidr=10.244.0.0/16",
    ];
    let out = plan(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("a single Node") && err.contains("--allow-partial"),
        "{err}"
    );
    let mut partial = args.to_vec();
    partial.push("--allow-partial");
    let out = plan(&partial);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(
        t.contains("DELETE     cp-1"),
        "with one node, the others' routes go: {t}"
    );
}

#[test]
fn stdin_carries_nodes_or_routes_not_both() {
    let out = plan(&[
        "--nodes",
        "-",
        "--routes",
        "-",
        "--cluster-cidr=10.244.0.0/16",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("stdin can carry only one"), "{err}");
}

/// 20 000 nodes as `kubectl get nodes -o json` prints them (each a copy of a real
/// node with its managed fields, labels and images), planned under a memory limit.
/// Guards the streaming reader: holding the document and a generic JSON tree of it
/// took 676 MB; the limit is far below that. The list stays in
/// `target/tmp/plan-20000-nodes.json` for the README's measurement.
#[test]
fn twenty_thousand_nodes_are_planned_in_bounded_memory() {
    let nodes = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("plan-20000-nodes.json");
    write_big_node_list(&nodes, 20_000);
    let script = format!(
        "ulimit -v {LIMIT_KB} && exec \"$0\" plan --nodes {} --routes {} --cluster-cidr 10.0.0.0/8 --output json",
        nodes.display(),
        path("testdata/plan/no-routes.json")
    );
    let out = Command::new("sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_route-controller")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "under ulimit -v {LIMIT_KB}: {}",
        text(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["creates"].as_array().unwrap().len(), 20_000);
}

/// The address space `plan` gets for 20 000 nodes, in KiB: a quarter of what the
/// document and its JSON tree took (676 MB peak RSS), four times what the stream
/// takes (49 MB; README, "route-controller plan").
const LIMIT_KB: u64 = 160 * 1024;

fn write_big_node_list(path: &std::path::Path, count: usize) {
    use std::io::BufWriter;
    let sample: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path_of(NODES)).unwrap()).unwrap();
    let template = sample["items"][0].clone();
    let mut out = BufWriter::new(std::fs::File::create(path).unwrap());
    write!(
        out,
        r#"{{"apiVersion":"v1","kind":"List","metadata":{{"resourceVersion":""}},"items":["#
    )
    .unwrap();
    for i in 0..count {
        let mut node = template.clone();
        node["metadata"]["name"] = format!("node-{i}").into();
        node["metadata"]["uid"] = format!("00000000-0000-4000-8000-{i:012}").into();
        let cidr = format!("10.{}.{}.0/24", 64 + i / 256, i % 256);
        node["spec"]["podCIDR"] = cidr.clone().into();
        node["spec"]["podCIDRs"] = serde_json::json!([cidr]);
        node["spec"]["providerID"] = format!("hcloud://{}", 1000 + i).into();
        if i > 0 {
            out.write_all(b",").unwrap();
        }
        serde_json::to_writer(&mut out, &node).unwrap();
    }
    out.write_all(b"]}").unwrap();
    out.flush().unwrap();
}

fn path_of(p: &str) -> std::path::PathBuf {
    dir().join(p)
}

const MIXED_NODES: &str = "testdata/plan/hetzner-mixed-nodes.json";
const MIXED_ROUTES: &str = "testdata/plan/hetzner-mixed-routes.json";

fn mixed_plan(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "--nodes".to_string(),
        path(MIXED_NODES),
        "--routes".to_string(),
        path(MIXED_ROUTES),
        "--cluster-cidr=10.244.0.0/16".to_string(),
        "--cloud-provider=hcloud".to_string(),
        "--node-selector=role=worker".to_string(),
        "--output=json".to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = plan(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn pairs(v: &serde_json::Value, list: &str, field: &str) -> Vec<(String, String)> {
    v[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d[field].as_str().unwrap_or_default().to_string(),
                d["destinationCIDR"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Guards that `plan` honours the node filter as run does: a Hetzner cluster with a
/// Robot node (hrobot://), a node the selector leaves out (whose route is kept and
/// listed as unselected), a node not initialised yet (routed) and a gone node (its
/// route deleted).
#[test]
fn plan_honours_the_node_selector_and_skips_other_providers_nodes() {
    let v = mixed_plan(&[]);
    assert_eq!(
        pairs(&v, "creates", "targetNode"),
        [
            ("cloud-1".to_string(), "10.244.1.0/24".to_string()),
            ("new-1".to_string(), "10.244.4.0/24".to_string())
        ]
    );
    assert_eq!(
        pairs(&v, "deletes", "reason"),
        [("node gone".to_string(), "10.244.9.0/24".to_string())]
    );
    assert_eq!(
        pairs(&v, "unselected", "targetNode"),
        [("infra-1".to_string(), "10.244.3.0/24".to_string())]
    );
    let written: Vec<&str> = v["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["node"].as_str().unwrap())
        .collect();
    assert_eq!(written, ["cloud-1", "new-1"], "none on robot-1 or infra-1");

    // With the delete flag, the unselected node's route goes too.
    let v = mixed_plan(&["--delete-routes-of-unselected-nodes"]);
    assert_eq!(
        pairs(&v, "deletes", "reason"),
        [
            ("node not selected".to_string(), "10.244.3.0/24".to_string()),
            ("node gone".to_string(), "10.244.9.0/24".to_string())
        ]
    );
    // Without the providerID rule, the Robot node is planned like any other.
    let v = mixed_plan(&["--skip-nodes-of-other-providers=false"]);
    assert!(
        pairs(&v, "creates", "targetNode")
            .contains(&("robot-1".to_string(), "10.244.5.0/24".to_string()))
    );
}

#[test]
fn the_table_shows_unselected_nodes_routes_as_left_alone() {
    let out = plan(&[
        "--nodes",
        &path(MIXED_NODES),
        "--routes",
        &path(MIXED_ROUTES),
        "--cluster-cidr=10.244.0.0/16",
        "--cloud-provider=hcloud",
        "--node-selector",
        "role=worker",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.contains("UNSELECTED infra-1            10.244.3.0/24            route 10.0.0.4-10.244.3.0/24 (the node is not routed here; left alone)"),
        "{table}"
    );
    assert!(
        table.ends_with("0 not ours, 1 of unselected nodes left alone\n"),
        "{table}"
    );
}

#[test]
fn a_bad_node_selector_exits_2_pointing_at_the_bad_part() {
    let out = plan(&[
        "--nodes",
        &path(MIXED_NODES),
        "--routes",
        &path(MIXED_ROUTES),
        "--cluster-cidr=10.244.0.0/16",
        "--node-selector",
        "role=worker,zone notin fsn1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("--node-selector: label selector \"role=worker,zone notin fsn1\": found \"fsn1\", expected '(' (at character 24: \"fsn1\")"),
        "{err}"
    );
}
