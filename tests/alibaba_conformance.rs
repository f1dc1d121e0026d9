//! The Alibaba Cloud double checked against the official Go SDKs
//! (`github.com/alibabacloud-go/vpc-20160428/v6` v6.12.8 and `ecs-20140526/v7`
//! v7.7.0 on darabonba-openapi v2, pinned in `tests/alibaba-conformance/go.mod`).
//! The SDK signs every request with the V3 signature (ACS3-HMAC-SHA256) and the
//! double checks it, so every test also proves the double's signature check agrees
//! with the SDK's signer. A reply the SDK's response body models do not hold exactly
//! (unknown field, wrong type), or a request of the SDK the double refuses when it
//! should not, fails the test: the double is then wrong, not the SDK.
//!
//! The Go side is `tests/alibaba-conformance` (a Go module of its own, built into
//! `target/alibaba-conformance/` on first use): one JSON command per line in, one
//! JSON answer out, so a test can change the double between commands.

#[path = "support/alibaba_double.rs"]
mod alibaba_double;
#[path = "support/go_build.rs"]
mod go_build;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use alibaba_double::{
    AlibabaDouble, DEFAULT_TABLE, DEFAULT_VPC, DEFAULT_VSWITCH, EntryStatus, Fault, Instance,
    REGION, StatusWords,
};
use serde_json::{Value, json};

// ---- building the Go program ----

/// The `alibaba-conformance` binary, built once through the Go module proxy into
/// `target/alibaba-conformance/` (with a Go build cache of its own there, which CI
/// keeps with target/), rebuilt when go.mod, go.sum, a .go file or Go change.
fn sdk_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/alibaba-conformance");
        let out_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/alibaba-conformance");
        let cache = out_dir.join("go-build");
        let what = "the Alibaba Cloud SDK conformance driver (tests/alibaba-conformance)";
        let (go, go_version) = go_build::go(what, &src);
        let mut files: Vec<PathBuf> = fs::read_dir(&src)
            .unwrap_or_else(|e| panic!("read {}: {e}", src.display()))
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|e| e == "go")
                    || p.file_name()
                        .is_some_and(|n| n == "go.mod" || n == "go.sum")
            })
            .collect();
        files.sort();
        let mut stamp = go_version.clone().into_bytes();
        for file in &files {
            stamp.extend_from_slice(file.file_name().unwrap_or_default().as_encoded_bytes());
            stamp.push(0xff);
            stamp.extend(fs::read(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display())));
            stamp.push(0xff);
        }
        let stamp = format!("{:016x}\n", go_build::fnv1a(&stamp));
        go_build::build(
            &go_build::GoBuild {
                module: &src,
                package: ".",
                out_dir: &out_dir,
                binary: "alibaba-conformance",
                what,
                ldflags: "-s -w",
                cache: Some(&cache),
            },
            &go,
            &go_version,
            &stamp,
        )
    })
}

// ---- the SDK behind a pipe ----

struct Sdk {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Sdk {
    fn start(double: &AlibabaDouble) -> Sdk {
        let binary = sdk_binary();
        let (id, secret) = double.access_key();
        let mut child = Command::new(binary)
            .arg(format!("--endpoint={}", double.host()))
            .arg(format!("--region={REGION}"))
            .arg(format!("--access-key-id={id}"))
            .arg(format!("--access-key-secret={secret}"))
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

    /// One command; every raw reply must have decoded strictly into the SDK's models.
    fn ask(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").expect("write a command to alibaba-conformance");
        self.stdin.flush().expect("flush the command");
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .expect("read alibaba-conformance's answer");
        assert!(n > 0, "alibaba-conformance exited on {command}");
        let answer: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("alibaba-conformance answered {line:?}: {e}"));
        assert_eq!(
            answer["strict"],
            json!([]),
            "the SDK's models do not hold the double's replies to {command}: {answer:#}"
        );
        answer
    }

    /// The command must have succeeded; returns the decoded body.
    fn ok(&mut self, command: Value) -> Value {
        let answer = self.ask(command.clone());
        assert_eq!(
            answer["error"],
            Value::Null,
            "the SDK failed on {command}: {answer:#}"
        );
        answer["body"].clone()
    }

    /// The command must have failed: (kind, HTTP status, code) as the SDK saw them.
    fn fails(&mut self, command: Value) -> (String, u64, String) {
        let answer = self.ask(command.clone());
        let e = &answer["error"];
        assert!(!e.is_null(), "{command} succeeded: {answer:#}");
        (
            e["kind"].as_str().unwrap_or_default().to_string(),
            e["status"].as_u64().unwrap_or(0),
            e["code"].as_str().unwrap_or_default().to_string(),
        )
    }
}

impl Drop for Sdk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn setup() -> (AlibabaDouble, Sdk) {
    let double = AlibabaDouble::start();
    for n in 1..=4 {
        double.add_instance(Instance::new(
            &format!("i-node{n}"),
            DEFAULT_VPC,
            &format!("192.168.0.{}", 10 + n),
        ));
    }
    let sdk = Sdk::start(&double);
    (double, sdk)
}

fn entry(dst: &str, hop: &str) -> Value {
    json!({"table": DEFAULT_TABLE, "dst": dst, "nextHop": hop, "nextHopType": "Instance"})
}

/// (destination, status) of the custom entries the SDK lists, every page.
fn listed(sdk: &mut Sdk) -> Vec<(String, String)> {
    let body = sdk.ok(
        json!({"op": "listAll", "table": DEFAULT_TABLE, "maxResult": 100,
                             "filters": {"RouteEntryType": "Custom"}}),
    );
    body["RouteEntry"]
        .as_array()
        .expect("RouteEntry")
        .iter()
        .map(|e| {
            (
                e["DestinationCidrBlock"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
                e["Status"].as_str().unwrap_or_default().into(),
            )
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Guards the batch write's reply as the SDK decodes it (counts, IDs, per-entry
/// failures with the peer's duplicate code), the asynchronous states (`Pending`
/// on the first read, `Available` after), and the delete's `Deleting` then gone.
#[test]
fn batch_create_and_delete_are_asynchronous_and_decode() {
    let (double, mut sdk) = setup();
    double.fill_as_peer(DEFAULT_TABLE, &[("10.244.9.0/24", "i-node4")]);
    let body = sdk.ok(json!({"op": "create", "entries": [
        entry("10.244.1.0/24", "i-node1"),
        entry("10.244.2.0/24", "i-node2"),
        entry("10.244.9.0/24", "i-node3"),
    ]}));
    assert_eq!(body["SuccessCount"], 2, "{body:#}");
    assert_eq!(body["FailedCount"], 1, "{body:#}");
    assert_eq!(body["RouteEntryIds"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        body["FailedRouteEntries"],
        json!([{"DstCidrBlock": "10.244.9.0/24", "NextHop": "i-node3",
                "FailedCode": "VPC_ROUTE_ENTRY_CIDR_BLOCK_DUPLICATE",
                "FailedMessage": "Specified CIDR block is already exists, entry.cidrBlock=10.244.9.0/24"}])
    );
    assert!(double.in_flight(DEFAULT_VPC));
    assert_eq!(
        listed(&mut sdk),
        pairs(&[
            ("10.244.9.0/24", "Available"),
            ("10.244.1.0/24", "Pending"),
            ("10.244.2.0/24", "Pending"),
        ])
    );
    assert!(!double.in_flight(DEFAULT_VPC), "one read settles the batch");
    assert_eq!(
        listed(&mut sdk),
        pairs(&[
            ("10.244.9.0/24", "Available"),
            ("10.244.1.0/24", "Available"),
            ("10.244.2.0/24", "Available"),
        ])
    );

    let body = sdk.ok(json!({"op": "delete", "entries": [
        {"table": DEFAULT_TABLE, "dst": "10.244.1.0/24", "nextHop": "i-node1"},
        {"table": DEFAULT_TABLE, "dst": "10.244.7.0/24", "nextHop": "i-node1"},
    ]}));
    assert_eq!(body["SuccessCount"], 1, "{body:#}");
    assert_eq!(
        body["FailedRouteEntries"][0]["FailedCode"],
        "VPC_ROUTER_ENTRY_NOT_EXIST"
    );
    assert_eq!(
        listed(&mut sdk),
        pairs(&[
            ("10.244.9.0/24", "Available"),
            ("10.244.1.0/24", "Deleting"),
            ("10.244.2.0/24", "Available"),
        ])
    );
    assert_eq!(
        double.available(DEFAULT_TABLE),
        pairs(&[("10.244.9.0/24", "i-node4"), ("10.244.2.0/24", "i-node2")])
    );
    assert_eq!(double.calls_of("CreateRouteEntries"), 1);
    assert_eq!(double.calls_of("DeleteRouteEntries"), 1);
}

/// Guards one batch at a time per VPC: while a batch is in flight the next one is
/// refused with the busy code (a ClientError, HTTP 400, nothing changed) until it
/// settles; the code is the test's choice.
#[test]
fn a_busy_vpc_refuses_the_next_batch_until_it_settles() {
    let (double, mut sdk) = setup();
    double.set_settle_after_reads(None);
    sdk.ok(json!({"op": "create", "entries": [entry("10.244.1.0/24", "i-node1")]}));
    let refused =
        sdk.fails(json!({"op": "create", "entries": [entry("10.244.2.0/24", "i-node2")]}));
    assert_eq!(refused, ("client".into(), 400, "TaskConflict".into()));
    let refused = sdk.fails(json!({"op": "delete", "entries": [
        {"table": DEFAULT_TABLE, "dst": "10.244.1.0/24", "nextHop": "i-node1"}]}));
    assert_eq!(refused.2, "TaskConflict");
    double.set_busy_code("IncorrectRouteEntryStatus");
    let refused =
        sdk.fails(json!({"op": "create", "entries": [entry("10.244.2.0/24", "i-node2")]}));
    assert_eq!(refused.2, "IncorrectRouteEntryStatus");
    // Reads do not settle it in this mode, nor does an age it has not reached.
    assert_eq!(listed(&mut sdk), pairs(&[("10.244.1.0/24", "Pending")]));
    assert_eq!(listed(&mut sdk), pairs(&[("10.244.1.0/24", "Pending")]));
    double.settle_older_than(Duration::from_secs(3600));
    assert!(double.in_flight(DEFAULT_VPC));
    double.settle_older_than(Duration::ZERO);
    assert!(!double.in_flight(DEFAULT_VPC));
    sdk.ok(json!({"op": "create", "entries": [entry("10.244.3.0/24", "i-node3")]}));
    double.settle();
    sdk.ok(json!({"op": "create", "entries": [entry("10.244.2.0/24", "i-node2")]}));
    double.settle();
    assert_eq!(
        listed(&mut sdk),
        pairs(&[
            ("10.244.1.0/24", "Available"),
            ("10.244.3.0/24", "Available"),
            ("10.244.2.0/24", "Available"),
        ])
    );
}

/// Guards a second writer's batch in flight (`begin_foreign_batch`) as the SDK sees
/// it: its entries listed `Pending`, our batch refused with the busy code until it
/// settles (by reads, as the double's own batches), then accepted.
#[test]
fn a_second_writers_batch_in_flight_makes_the_vpc_busy_until_it_settles() {
    let (double, mut sdk) = setup();
    double.add_instance(Instance::new("i-vpn", DEFAULT_VPC, "192.168.0.250"));
    double.begin_foreign_batch(DEFAULT_TABLE, &[("10.244.250.0/24", "i-vpn")]);
    assert!(double.in_flight(DEFAULT_VPC));
    let refused =
        sdk.fails(json!({"op": "create", "entries": [entry("10.244.1.0/24", "i-node1")]}));
    assert_eq!(refused, ("client".into(), 400, "TaskConflict".into()));
    assert_eq!(listed(&mut sdk), pairs(&[("10.244.250.0/24", "Pending")]));
    assert_eq!(listed(&mut sdk), pairs(&[("10.244.250.0/24", "Available")]));
    assert!(!double.in_flight(DEFAULT_VPC));
    sdk.ok(json!({"op": "create", "entries": [entry("10.244.1.0/24", "i-node1")]}));
}

/// Guards `NextToken` paging as the peer follows it, `MaxResult`'s default (10) and
/// ceiling (100, the peer's 500 served as 100), the `Custom` filter hiding the
/// system entries, and a token of another table refused.
#[test]
fn the_list_pages_by_next_token() {
    let (double, mut sdk) = setup();
    double.set_quota(DEFAULT_TABLE, 300);
    let routes: Vec<(String, String)> = (0..250)
        .map(|i| {
            (
                format!("10.{}.{}.0/24", 100 + i / 256, i % 256),
                "i-node1".to_string(),
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = routes
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    double.fill_as_peer(DEFAULT_TABLE, &refs);

    let answer = sdk.ask(json!({"op": "listAll", "table": DEFAULT_TABLE, "maxResult": 500,
                                "filters": {"RouteEntryType": "Custom", "NextHopType": "Instance"}}));
    assert_eq!(answer["pages"], 3, "500 is served as 100 a page");
    let got = answer["body"]["RouteEntry"].as_array().expect("entries");
    assert_eq!(got.len(), 250);
    assert_eq!(got[0]["DestinationCidrBlock"], "10.100.0.0/24");
    assert_eq!(got[0]["RouteEntryName"], "", "the peer names no entry");
    assert_eq!(got[0]["Description"], "");
    assert_eq!(got[0]["NextHops"]["NextHop"][0]["NextHopId"], "i-node1");
    assert_eq!(got[0]["NextHops"]["NextHop"][0]["NextHopType"], "Instance");

    let first = sdk.ok(json!({"op": "list", "table": DEFAULT_TABLE}));
    assert_eq!(
        first["RouteEntrys"]["RouteEntry"].as_array().map(Vec::len),
        Some(10)
    );
    let all = sdk.ask(json!({"op": "listAll", "table": DEFAULT_TABLE, "maxResult": 100}));
    let all = all["body"]["RouteEntry"].as_array().expect("entries");
    assert_eq!(
        all.len(),
        252,
        "the vSwitch's and 100.64.0.0/10's system entries"
    );
    assert!(
        all.iter()
            .any(|e| e["Type"] == "System" && e["DestinationCidrBlock"] == "100.64.0.0/10")
    );

    let token = first["NextToken"]
        .as_str()
        .expect("a NextToken")
        .to_string();
    double.add_custom_table(DEFAULT_VPC, "vtb-other");
    let refused = sdk.fails(json!({"op": "list", "table": "vtb-other", "nextToken": token}));
    assert_eq!(refused, ("client".into(), 400, "InvalidNextToken".into()));
}

/// Guards the destination rules of CreateRouteEntries' description, each refused
/// for its entry alone (100.64.0.0/10, a vSwitch's CIDR, a next hop outside the
/// VPC, IPv6 without an IPv6 CIDR), the 50-entry batch and the table's quota
/// refused whole, and DryRun.
#[test]
fn destination_rules_batch_size_and_quota() {
    let (double, mut sdk) = setup();
    double.add_vpc("vpc-other", "172.16.0.0/16", "vtb-other");
    double.add_instance(Instance::new("i-elsewhere", "vpc-other", "172.16.0.5"));
    let body = sdk.ok(json!({"op": "create", "entries": [
        entry("100.64.3.0/24", "i-node1"),
        entry("192.168.0.128/25", "i-node1"),
        entry("10.244.1.0/24", "i-elsewhere"),
        entry("fd00:10:244::/64", "i-node1"),
        entry("10.244.2.0/24", "i-node2"),
        entry("10.244.3.1/24", "i-node3"),
    ]}));
    let codes: Vec<&str> = body["FailedRouteEntries"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| f["FailedCode"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        codes,
        [
            "VPC_ROUTE_ENTRY_CIDR_BLOCK_RESERVED",
            "VPC_ROUTE_ENTRY_CIDR_BLOCK_OVERLAP_VSWITCH",
            "VPC_ROUTE_ENTRY_NEXT_HOP_INVALID",
            "VPC_ROUTE_ENTRY_CIDR_BLOCK_INVALID",
            "VPC_ROUTE_ENTRY_CIDR_BLOCK_INVALID",
        ],
        "{body:#}"
    );
    assert_eq!(body["SuccessCount"], 1);
    double.settle();

    let fifty_one: Vec<Value> = (0..51)
        .map(|i| entry(&format!("10.250.{i}.0/24"), "i-node1"))
        .collect();
    let refused = sdk.fails(json!({"op": "create", "entries": fifty_one}));
    assert_eq!(
        refused,
        ("client".into(), 400, "InvalidParameter.RouteEntries".into())
    );

    double.set_quota(DEFAULT_TABLE, 2);
    let refused = sdk.fails(json!({"op": "create", "entries": [
        entry("10.244.5.0/24", "i-node1"), entry("10.244.6.0/24", "i-node2")]}));
    assert_eq!(
        refused,
        ("client".into(), 400, "QuotaExceeded.RouteEntry".into())
    );
    assert_eq!(
        double.entries(DEFAULT_TABLE).len(),
        1,
        "nothing of a refused batch is made"
    );

    let refused = sdk.fails(json!({"op": "create", "dryRun": true,
                                   "entries": [entry("10.244.5.0/24", "i-node1")]}));
    assert_eq!(refused.2, "DryRunOperation");
    assert!(!double.in_flight(DEFAULT_VPC));

    double.set_vpc_ipv6(DEFAULT_VPC, "2408:4000:1::/56");
    double.set_quota(DEFAULT_TABLE, 200);
    let body = sdk.ok(json!({"op": "create", "entries": [
        {"table": DEFAULT_TABLE, "dst": "fd00:10:244::/64", "nextHop": "i-node1",
         "nextHopType": "Instance", "ipVersion": 6}]}));
    assert_eq!(body["SuccessCount"], 1, "{body:#}");
}

/// Guards the V3 signature check against the SDK's signer: the right key passes
/// (every other test), a wrong secret is `SignatureDoesNotMatch`, an unknown key
/// `InvalidAccessKeyId.NotFound`, a temporary key without its token refused; and
/// the gateway's errors for an unsigned request, an unknown action or version.
#[test]
fn the_signature_is_checked_as_the_sdk_signs() {
    let (double, mut sdk) = setup();
    let refused = sdk.fails(json!({"op": "tables", "accessKeyId": double.access_key().0,
                                   "accessKeySecret": "not-the-secret"}));
    assert_eq!(
        refused,
        ("client".into(), 400, "SignatureDoesNotMatch".into())
    );
    let refused = sdk.fails(json!({"op": "tables", "accessKeyId": "LTAI-unknown",
                                   "accessKeySecret": "x"}));
    assert_eq!(
        refused,
        ("client".into(), 404, "InvalidAccessKeyId.NotFound".into())
    );
    double.add_temporary_key("STS.temp", "temp-secret", "temp-token");
    let refused = sdk.fails(json!({"op": "tables", "accessKeyId": "STS.temp",
                                   "accessKeySecret": "temp-secret"}));
    assert_eq!(refused.2, "InvalidSecurityToken.MismatchWithAccessKey");
    sdk.ok(
        json!({"op": "tables", "accessKeyId": "STS.temp", "accessKeySecret": "temp-secret",
                  "securityToken": "temp-token"}),
    );

    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let post = |headers: &[(&str, &str)]| -> (u16, Value) {
        let mut request = agent.post(format!("{}/?RegionId={REGION}", double.endpoint()));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let mut resp = request.send("").expect("POST to the double");
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    };
    let (status, body) = post(&[
        ("x-acs-action", "DescribeRouteTableList"),
        ("x-acs-version", "2016-04-28"),
    ]);
    assert_eq!(
        (status, body["Code"].as_str()),
        (400, Some("MissingAuthorization"))
    );
    assert!(body["RequestId"].is_string() && body["Message"].is_string());
    let (status, body) = post(&[
        ("x-acs-action", "CreateVpc"),
        ("x-acs-version", "2016-04-28"),
    ]);
    assert_eq!(
        (status, body["Code"].as_str()),
        (404, Some("InvalidAction.NotFound"))
    );
    let (status, body) = post(&[
        ("x-acs-action", "DescribeRouteTableList"),
        ("x-acs-version", "2014-05-26"),
    ]);
    assert_eq!(
        (status, body["Code"].as_str()),
        (404, Some("InvalidAction.NotFound"))
    );
    let (status, body) = post(&[
        ("x-acs-action", "DescribeRouteTableList"),
        ("x-acs-version", "2099-01-01"),
    ]);
    assert_eq!(
        (status, body["Code"].as_str()),
        (400, Some("InvalidVersion"))
    );
}

/// Guards what the provider reads besides entries, as the SDK decodes it: the route
/// tables with their vSwitches (a custom table bound to one), the vSwitches, the
/// VPC, and ECS instances with their VPC, private IP and ENI; and a missing
/// `RouteTableId` refused as the gateway does.
#[test]
fn tables_vswitches_vpcs_and_instances_decode() {
    let (double, mut sdk) = setup();
    double.add_custom_table(DEFAULT_VPC, "vtb-custom1");
    double.add_vswitch(
        DEFAULT_VPC,
        "vsw-second",
        "192.168.1.0/24",
        Some("vtb-custom1"),
    );

    let tables = sdk.ok(json!({"op": "tables", "vpc": DEFAULT_VPC}));
    let list = tables["RouterTableList"]["RouterTableListType"]
        .as_array()
        .expect("tables");
    assert_eq!(tables["TotalCount"], 2);
    assert_eq!(list[0]["RouteTableId"], DEFAULT_TABLE);
    assert_eq!(list[0]["RouteTableType"], "System");
    assert_eq!(list[0]["VSwitchIds"]["VSwitchId"], json!([DEFAULT_VSWITCH]));
    assert_eq!(list[1]["RouteTableId"], "vtb-custom1");
    assert_eq!(list[1]["RouteTableType"], "Custom");
    assert_eq!(list[1]["VSwitchIds"]["VSwitchId"], json!(["vsw-second"]));

    let vswitches = sdk.ok(json!({"op": "vswitches", "vpc": DEFAULT_VPC}));
    let cidrs: Vec<&str> = vswitches["VSwitches"]["VSwitch"]
        .as_array()
        .expect("vswitches")
        .iter()
        .map(|w| w["CidrBlock"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(cidrs, ["192.168.0.0/24", "192.168.1.0/24"]);
    let vpcs = sdk.ok(json!({"op": "vpcs", "vpc": DEFAULT_VPC}));
    assert_eq!(vpcs["Vpcs"]["Vpc"][0]["CidrBlock"], "192.168.0.0/16");

    let instances = sdk.ok(json!({"op": "instances", "ids": ["i-node2", "i-node3"]}));
    let list = instances["Instances"]["Instance"]
        .as_array()
        .expect("instances");
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["InstanceId"], "i-node2");
    assert_eq!(list[0]["VpcAttributes"]["VpcId"], DEFAULT_VPC);
    assert_eq!(
        list[0]["VpcAttributes"]["PrivateIpAddress"]["IpAddress"],
        json!(["192.168.0.12"])
    );
    assert_eq!(
        list[0]["NetworkInterfaces"]["NetworkInterface"][0]["NetworkInterfaceId"],
        "eni-node2"
    );

    let refused = sdk.fails(json!({"op": "list", "table": ""}));
    assert_eq!(
        refused,
        ("client".into(), 400, "MissingRouteTableId".into())
    );
}

/// Guards the faults as the SDK meets them: `Throttling.User` becomes its
/// ThrottlingError, a 503 its ServerError, a lost reply an error with the change
/// made (the entry is there, `Pending`), a slow reply still decodes; and that the
/// double counts requests by action.
#[test]
fn faults_reach_the_sdk_as_the_api_sends_them() {
    let (double, mut sdk) = setup();
    double.inject("CreateRouteEntries", Fault::throttling());
    let refused =
        sdk.fails(json!({"op": "create", "entries": [entry("10.244.1.0/24", "i-node1")]}));
    assert_eq!(
        refused,
        ("throttling".into(), 400, "Throttling.User".into())
    );
    assert!(double.entries(DEFAULT_TABLE).is_empty());

    double.inject("DescribeRouteEntryList", Fault::unavailable());
    let refused = sdk.fails(json!({"op": "list", "table": DEFAULT_TABLE}));
    assert_eq!(refused, ("server".into(), 503, "ServiceUnavailable".into()));

    double.inject("CreateRouteEntries", Fault::LostReply);
    let answer = sdk.ask(json!({"op": "create", "entries": [entry("10.244.1.0/24", "i-node1")]}));
    assert!(!answer["error"].is_null(), "{answer:#}");
    let made = double.entries(DEFAULT_TABLE);
    assert_eq!(made.len(), 1);
    assert_eq!(made[0].status, EntryStatus::Pending);

    double.inject(
        "DescribeRouteTableList",
        Fault::Slow(Duration::from_millis(200)),
    );
    sdk.ok(json!({"op": "tables"}));

    double.set_status_words(StatusWords::Description);
    let body = sdk.ok(json!({"op": "list", "table": DEFAULT_TABLE,
                             "filters": {"RouteEntryType": "Custom"}}));
    assert_eq!(body["RouteEntrys"]["RouteEntry"][0]["Status"], "Creating");

    let calls = double.calls();
    assert_eq!(calls.get("CreateRouteEntries"), Some(&2), "{calls:?}");
    assert_eq!(calls.get("DescribeRouteEntryList"), Some(&2), "{calls:?}");
    assert_eq!(calls.get("DescribeRouteTableList"), Some(&1), "{calls:?}");
}

/// Guards the ECS RAM role path as credentials-go walks it (IMDSv2 token, the role's
/// name, its temporary key; the double in hardened mode), and that the VPC API then
/// takes that key only with its security token, which the SDK sends and signs.
#[test]
fn ecs_ram_role_credentials_sign_requests() {
    let (double, mut sdk) = setup();
    double.set_metadata_token_required(true);
    double.set_metadata_role("k8s-route-controller");
    sdk.ok(json!({"op": "tables", "credentials": "ecsRamRole"}));
    let calls = double.calls();
    assert_eq!(
        calls.get("metadata:/latest/api/token"),
        Some(&2),
        "{calls:?}"
    );
    assert_eq!(
        calls.get("metadata:/latest/meta-data/ram/security-credentials/"),
        Some(&1),
        "{calls:?}"
    );
    assert_eq!(
        calls.get("metadata:/latest/meta-data/ram/security-credentials/k8s-route-controller"),
        Some(&1),
        "{calls:?}"
    );
    let issued = double.issued_keys();
    assert!(
        issued.len() == 1 && issued[0].starts_with("STS.ECS"),
        "{issued:?}"
    );
    let last = double.requests().pop().expect("a request");
    assert_eq!(
        (last.action.as_str(), last.status),
        ("DescribeRouteTableList", 200)
    );
}

/// (status, JSON body, text) of a request to the double.
fn send(
    double: &AlibabaDouble,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    form: &str,
) -> (u16, Value, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("{}{path}", double.endpoint());
    let mut resp = match method {
        "GET" => {
            let mut r = agent.get(&url);
            for (k, v) in headers {
                r = r.header(*k, *v);
            }
            r.call()
        }
        _ => {
            let mut r = if method == "PUT" {
                agent.put(&url)
            } else {
                agent.post(&url)
            };
            for (k, v) in headers {
                r = r.header(*k, *v);
            }
            r.send(form)
        }
    }
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    )
}

/// Guards STS `AssumeRoleWithOIDC` as credentials-go's OIDC provider sends it
/// (providers/oidc.go: `Action`, `Version`, `Format`, `Timestamp` in the query, the
/// role, provider, token, session name and duration as a form, no signature) and
/// what it reads back (`Credentials` with an `Expiration` in `2006-01-02T15:04:05Z`);
/// a wrong token refused; the key it gives works with its token, through the SDK.
#[test]
fn assume_role_with_oidc_as_credentials_go_sends_it() {
    let (double, mut sdk) = setup();
    let provider = "acs:ram::1234567890123456:oidc-provider/ack-rrsa-c1";
    let role = "acs:ram::1234567890123456:role/route-controller";
    double.set_oidc(provider, role, "eyJhbGciOiJSUzI1NiJ9.double.token");
    let path = "/?Version=2015-04-01&Action=AssumeRoleWithOIDC&Format=JSON&Timestamp=2026-12-06T20%3A00%3A00Z";
    let form = |token: &str| {
        format!(
            "RoleArn={}&OIDCProviderArn={}&OIDCToken={token}&RoleSessionName=route-controller&DurationSeconds=3600",
            role.replace(':', "%3A").replace('/', "%2F"),
            provider.replace(':', "%3A").replace('/', "%2F"),
        )
    };
    let content = [("Content-Type", "application/x-www-form-urlencoded")];
    let (status, body, _) = send(&double, "POST", path, &content, &form("not-the-token"));
    assert_eq!(
        (status, body["Code"].as_str()),
        (400, Some("AuthenticationFail.OIDCToken.Invalid"))
    );
    let (status, body, text) = send(
        &double,
        "POST",
        path,
        &content,
        &form("eyJhbGciOiJSUzI1NiJ9.double.token"),
    );
    assert_eq!(status, 200, "{text}");
    let creds = &body["Credentials"];
    let expiration = creds["Expiration"].as_str().expect("an Expiration");
    assert_eq!(expiration.len(), 20, "{expiration}");
    assert!(
        expiration.ends_with('Z') && expiration.as_bytes()[10] == b'T',
        "{expiration}"
    );
    let id = creds["AccessKeyId"].as_str().expect("AccessKeyId");
    let secret = creds["AccessKeySecret"].as_str().expect("AccessKeySecret");
    let token = creds["SecurityToken"].as_str().expect("SecurityToken");
    sdk.ok(
        json!({"op": "tables", "accessKeyId": id, "accessKeySecret": secret,
                  "securityToken": token}),
    );
    let refused = sdk.fails(json!({"op": "tables", "accessKeyId": id, "accessKeySecret": secret}));
    assert_eq!(refused.2, "InvalidSecurityToken.MismatchWithAccessKey");
}

/// Guards the metadata values the provider reads at start (region, instance, VPC),
/// with and without a token, and a bad token refused.
#[test]
fn metadata_serves_region_instance_and_vpc() {
    let (double, _sdk) = setup();
    for (path, want) in [
        ("/latest/meta-data/region-id", REGION),
        ("/latest/meta-data/instance-id", "i-node1"),
        ("/latest/meta-data/vpc-id", DEFAULT_VPC),
        ("/latest/meta-data/vswitch-id", DEFAULT_VSWITCH),
    ] {
        let (status, _, text) = send(&double, "GET", path, &[], "");
        assert_eq!((status, text.as_str()), (200, want), "{path}");
    }
    let (status, _, _) = send(
        &double,
        "GET",
        "/latest/meta-data/vpc-id",
        &[("X-aliyun-ecs-metadata-token", "forged")],
        "",
    );
    assert_eq!(status, 401);
    double.set_metadata_token_required(true);
    let (status, _, _) = send(&double, "GET", "/latest/meta-data/vpc-id", &[], "");
    assert_eq!(status, 401);
    let (status, _, token) = send(
        &double,
        "PUT",
        "/latest/api/token",
        &[("X-aliyun-ecs-metadata-token-ttl-seconds", "21600")],
        "",
    );
    assert_eq!(status, 200);
    let (status, _, text) = send(
        &double,
        "GET",
        "/latest/meta-data/vpc-id",
        &[("X-aliyun-ecs-metadata-token", &token)],
        "",
    );
    assert_eq!((status, text.as_str()), (200, DEFAULT_VPC));
}

/// Guards the V1 signature (HMAC-SHA1) of the peer's SDK, aliyun/alibaba-cloud-sdk-go
/// v1.63.99, called as the peer's vpc.go calls it (batch create, list with
/// `MaxResult` 500 and the `Custom`/`Instance` filters, batch delete), its decoding of
/// the double's replies, and the HMAC-SHA1 under it (RFC 2202's first two vectors).
#[test]
fn the_peers_sdk_signs_v1_and_decodes_the_double() {
    assert_eq!(
        alibaba_double::hmac_sha1(&[0x0b; 20], b"Hi There"),
        *b"\xb6\x17\x31\x86\x55\x05\x72\x64\xe2\x8b\xc0\xb6\xfb\x37\x8c\x8e\xf1\x46\xbe\x00"
    );
    assert_eq!(
        alibaba_double::hmac_sha1(b"Jefe", b"what do ya want for nothing?"),
        *b"\xef\xfc\xdf\x6a\xe5\xeb\x2f\xa2\xd2\x74\x16\xd5\xf1\x84\xdf\x9c\x25\x9a\x7c\x79"
    );
    let (double, mut sdk) = setup();
    let body = sdk.ok(json!({"op": "peerCreate", "entries": [
        entry("10.244.1.0/24", "i-node1"), entry("10.244.2.0/24", "i-node2")]}));
    assert_eq!(body["SuccessCount"], 2, "{body:#}");
    let body = sdk.ok(json!({"op": "peerList", "table": DEFAULT_TABLE}));
    let got = body["RouteEntrys"]["RouteEntry"]
        .as_array()
        .expect("entries");
    assert_eq!(got.len(), 2, "{body:#}");
    assert_eq!(got[1]["DestinationCidrBlock"], "10.244.2.0/24");
    assert_eq!(got[1]["NextHops"]["NextHop"][0]["NextHopId"], "i-node2");
    assert_eq!(got[1]["Type"], "Custom");
    let body = sdk.ok(json!({"op": "peerDelete", "entries": [
        {"table": DEFAULT_TABLE, "dst": "10.244.1.0/24", "nextHop": "i-node1"}]}));
    assert_eq!(body["SuccessCount"], 1, "{body:#}");
    let v1 = double
        .requests()
        .into_iter()
        .filter(|r| {
            r.params
                .get("SignatureMethod")
                .is_some_and(|m| m == "HMAC-SHA1")
        })
        .count();
    assert_eq!(v1, 3, "every call of the peer's SDK signed V1");
    let refused =
        sdk.fails(json!({"op": "peerCreate", "entries": [entry("10.244.3.0/24", "i-node3")]}));
    assert_eq!((refused.1, refused.2.as_str()), (400, "TaskConflict"));
}

/// Guards the double's Quota Center against the all-in-one SDK's quotas client (V1
/// signature, parameters in the form body): `ListProductQuotas` for product `vpc`
/// decodes strictly into the SDK's `ListProductQuotasResponse`, the route table's
/// quota is the account's (`set_account_quota`), filtered by action code and the
/// `regionId` dimension as the provider asks, and an injected refusal reaches the SDK
/// as the API's error.
#[test]
fn quota_center_list_product_quotas_decodes_in_the_sdk() {
    let (double, mut sdk) = setup();
    double.set_account_quota(7);
    let body = sdk.ok(json!({"op": "listProductQuotas", "productCode": "vpc"}));
    let quotas = body["Quotas"].as_array().expect("Quotas");
    assert_eq!(quotas.len(), 2, "{body:#}");
    let body = sdk.ok(json!({"op": "listProductQuotas", "productCode": "vpc",
        "quotaActionCode": alibaba_double::ROUTE_ENTRY_QUOTA,
        "dimensions": {"regionId": REGION}}));
    let quotas = body["Quotas"].as_array().expect("Quotas");
    assert_eq!(quotas.len(), 1, "{body:#}");
    assert_eq!(
        quotas[0]["QuotaActionCode"],
        alibaba_double::ROUTE_ENTRY_QUOTA
    );
    assert_eq!(quotas[0]["TotalQuota"], 7.0, "{body:#}");
    assert_eq!(quotas[0]["Dimensions"]["regionId"], REGION);
    assert_eq!(body["TotalCount"], 1);
    let other = sdk.ok(json!({"op": "listProductQuotas", "productCode": "vpc",
        "quotaActionCode": alibaba_double::ROUTE_ENTRY_QUOTA,
        "dimensions": {"regionId": "cn-beijing"}}));
    assert_eq!(other["Quotas"], json!([]), "{other:#}");
    let v1 = double
        .requests()
        .iter()
        .filter(|r| r.action == "ListProductQuotas")
        .filter(|r| {
            r.params
                .get("SignatureMethod")
                .is_some_and(|m| m == "HMAC-SHA1")
        })
        .count();
    assert_eq!(v1, 3, "signed V1 and served: {:?}", double.calls());
    double.inject(
        "ListProductQuotas",
        Fault::error(
            403,
            "NoPermission",
            "You are not authorized to do this action.",
        ),
    );
    let refused = sdk.fails(json!({"op": "listProductQuotas", "productCode": "vpc"}));
    assert_eq!(
        refused,
        ("server".into(), 403, "NoPermission".into()),
        "the refusal as the SDK sees it"
    );
    // The quota without dimensions, a page at a time: an empty Dimensions map and
    // the NextToken decode as the SDK's models have them.
    double.serve_quota_without_dimensions(1);
    let page = sdk.ok(json!({"op": "listProductQuotas", "productCode": "vpc",
        "quotaActionCode": alibaba_double::ROUTE_ENTRY_QUOTA}));
    assert_eq!(page["Quotas"].as_array().map(Vec::len), Some(1), "{page:#}");
    assert_eq!(page["Quotas"][0]["Dimensions"]["regionId"], "cn-beijing");
    assert_eq!(
        (page["TotalCount"].clone(), page["NextToken"].clone()),
        (json!(2), json!("nt-1"))
    );
}
