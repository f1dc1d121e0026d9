//! The HTTP fault layer of the chaos runs with moto and Neutron
//! (`tests/support/http_fault.rs`), against a stub EC2 and a stub Neutron: each fault
//! does what its docs say and the request log records what the cloud got. These pin the test tool itself, so that the chaos run's
//! "faults injected" are real and its checker reads a true log.

#[path = "support/http_fault.rs"]
mod http_fault;
#[path = "support/stub_http.rs"]
mod stub_http;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use http_fault::{Answer, HttpFaultLayer};
use stub_http::{Reply, StubServer};

const PATIENCE: Duration = Duration::from_secs(10);
/// How long "no reply arrives" is watched for.
const QUIET: Duration = Duration::from_millis(300);

/// Answers CreateRoute with `RouteAlreadyExists`, everything else with 200.
fn ec2() -> (StubServer, SocketAddr) {
    let stub = StubServer::start(|r| match r.action().as_str() {
        "CreateRoute" => Reply::ec2_error(400, "RouteAlreadyExists", "exists"),
        _ => Reply::xml(200, "<Ok><return>true</return></Ok>"),
    });
    let addr = stub
        .url()
        .trim_start_matches("http://")
        .parse()
        .expect("the stub's address");
    (stub, addr)
}

fn connect(layer: &HttpFaultLayer) -> TcpStream {
    let s = TcpStream::connect(layer.addr()).expect("connect to the layer");
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    s
}

fn send(s: &mut TcpStream, action: &str) {
    let body = format!("Action={action}&Version=2016-11-15&DestinationCidrBlock=10.244.1.0%2F24");
    let head = format!(
        "POST / HTTP/1.1\r\nHost: ec2\r\nAuthorization: AWS4-HMAC-SHA256 \
         Credential=AKIDREPLICA1/20261201/us-east-1/ec2/aws4_request, SignedHeaders=host, \
         Signature=00\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("send");
}

/// `(status, body)` of the next reply, or `None` on close or timeout.
fn reply(s: &mut TcpStream) -> Option<(u16, String)> {
    let mut reader = BufReader::new(s.try_clone().ok()?);
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status = line.split_whitespace().nth(1)?.parse().ok()?;
    let mut length = 0;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

#[test]
fn requests_pass_on_one_connection_and_the_log_records_who_and_what_the_cloud_answered() {
    let (stub, addr) = ec2();
    let layer = HttpFaultLayer::start(addr);
    let mut c = connect(&layer);
    send(&mut c, "DescribeRouteTables");
    assert_eq!(reply(&mut c).map(|r| r.0), Some(200));
    send(&mut c, "CreateRoute");
    let (status, body) = reply(&mut c).expect("a reply on the same connection");
    assert_eq!(status, 400);
    assert!(body.contains("RouteAlreadyExists"), "{body}");
    assert_eq!(stub.actions(), ["DescribeRouteTables", "CreateRoute"]);
    let log = layer.log();
    assert_eq!(log.len(), 2);
    assert_eq!(log[1].action, "CreateRoute");
    assert_eq!(log[1].key_id, "AKIDREPLICA1");
    assert_eq!(log[1].status, 400);
    assert_eq!(log[1].code.as_deref(), Some("RouteAlreadyExists"));
    assert_eq!(
        log[1]
            .params
            .get("DestinationCidrBlock")
            .map(String::as_str),
        Some("10.244.1.0/24")
    );
}

#[test]
fn an_injected_error_is_answered_by_the_layer_and_never_reaches_the_cloud() {
    let (stub, addr) = ec2();
    let layer = HttpFaultLayer::start(addr);
    layer.inject(Some("DeleteRoute"), 1, Answer::Throttle);
    let mut c = connect(&layer);
    send(&mut c, "DescribeRouteTables");
    assert_eq!(reply(&mut c).map(|r| r.0), Some(200), "other actions pass");
    send(&mut c, "DeleteRoute");
    let (status, body) = reply(&mut c).expect("the layer's answer");
    assert_eq!(status, 503);
    assert!(body.contains("<Code>RequestLimitExceeded</Code>"), "{body}");
    send(&mut c, "DeleteRoute");
    assert_eq!(reply(&mut c).map(|r| r.0), Some(200), "only once");
    assert_eq!(
        stub.actions(),
        ["DescribeRouteTables", "DeleteRoute"],
        "the throttled request never reached the cloud"
    );
    let log = layer.log();
    assert!(!log[1].reached_cloud());
    assert_eq!(log[1].fault, Some(Answer::Throttle));
}

#[test]
fn a_lost_reply_has_its_effect_and_the_client_sees_the_connection_close() {
    let (stub, addr) = ec2();
    let layer = HttpFaultLayer::start(addr);
    layer.inject(None, 1, Answer::LoseReply);
    let mut c = connect(&layer);
    send(&mut c, "DeleteRoute");
    assert_eq!(reply(&mut c), None, "no reply, the connection closed");
    assert_eq!(stub.actions(), ["DeleteRoute"], "the cloud got it");
    assert_eq!(layer.log()[0].status, 200, "and the log has its answer");
}

#[test]
fn held_replies_reach_the_client_only_when_released() {
    let (stub, addr) = ec2();
    let layer = HttpFaultLayer::start(addr);
    layer.hold(true);
    let mut c = connect(&layer);
    c.set_read_timeout(Some(QUIET)).expect("timeout");
    send(&mut c, "ModifyInstanceAttribute");
    assert_eq!(reply(&mut c), None, "held");
    assert_eq!(stub.actions(), ["ModifyInstanceAttribute"], "but sent on");
    layer.hold(false);
    c.set_read_timeout(Some(PATIENCE)).expect("timeout");
    assert_eq!(reply(&mut c).map(|r| r.0), Some(200));
}

/// Guards the layer's EC2 buckets: each action is throttled in a bucket of its own,
/// as EC2 does. `DeleteRoute`'s bucket of 2 (refilling slowly) refuses the third
/// request, and `CreateRoute`'s own bucket still lets a request through.
#[test]
fn each_action_is_throttled_in_a_bucket_of_its_own() {
    let (stub, addr) = ec2();
    let layer = HttpFaultLayer::start(addr);
    layer.ec2_buckets(&[("DeleteRoute", 2.0, 0.01), ("CreateRoute", 2.0, 0.01)]);
    let mut c = connect(&layer);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        send(&mut c, "DeleteRoute");
        statuses.push(reply(&mut c).map(|r| r.0));
    }
    send(&mut c, "CreateRoute");
    statuses.push(reply(&mut c).map(|r| r.0));
    assert_eq!(statuses, [Some(200), Some(200), Some(503), Some(400)]);
    assert_eq!(
        stub.actions(),
        ["DeleteRoute", "DeleteRoute", "CreateRoute"]
    );
    let throttled = layer.throttled();
    assert_eq!(throttled.len(), 1);
    assert_eq!(throttled[0].action, "DeleteRoute");
}

/// A Neutron request through the layer: `method path` with the token and a JSON body.
fn send_neutron(s: &mut TcpStream, method: &str, path: &str, body: &str) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: neutron\r\nX-Auth-Token: token-of-replica-a\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("send");
}

/// Guards the Neutron dialect of the OpenStack chaos run: calls named as the
/// provider's metrics name them, the token as the credential, the request's body and
/// the resource's ID kept, Neutron's error type read from its JSON, and an injected
/// fault answered as a Neutron fault that never reaches the server.
#[test]
fn in_front_of_neutron_calls_tokens_bodies_and_faults_are_neutrons() {
    let stub = StubServer::start(|r| match (r.method.as_str(), r.path.as_str()) {
        ("PUT", p) if p.ends_with("/add_extraroutes") => Reply::Respond {
            status: 400,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: r#"{"NeutronError": {"type": "InvalidRoutes", "message": "no", "detail": ""}}"#
                .into(),
        },
        _ => Reply::Respond {
            status: 200,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: "{}".into(),
        },
    });
    let addr = stub
        .url()
        .trim_start_matches("http://")
        .parse()
        .expect("the stub's address");
    let layer = HttpFaultLayer::start_neutron(addr);
    layer.inject(Some("ports.update"), 1, Answer::Unavailable);
    let mut c = connect(&layer);
    let routes =
        r#"{"router": {"routes": [{"destination": "10.244.1.0/24", "nexthop": "10.0.0.11"}]}}"#;
    send_neutron(&mut c, "PUT", "/v2.0/routers/r-1/add_extraroutes", routes);
    assert_eq!(reply(&mut c).map(|r| r.0), Some(400));
    send_neutron(&mut c, "GET", "/v2.0/ports?device_owner=compute%3Anova", "");
    assert_eq!(reply(&mut c).map(|r| r.0), Some(200));
    send_neutron(&mut c, "PUT", "/v2.0/ports/p-1", r#"{"port": {}}"#);
    let (status, body) = reply(&mut c).expect("the layer's answer");
    assert_eq!(status, 503);
    assert!(
        body.contains(r#""type":"HTTPServiceUnavailable""#),
        "{body}"
    );

    assert_eq!(
        stub.requests().len(),
        2,
        "the faulted write never reached Neutron"
    );
    let log = layer.log();
    let calls: Vec<&str> = log.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        calls,
        ["routers.add_extraroutes", "ports.list", "ports.update"]
    );
    assert!(log.iter().all(|e| e.key_id == "token-of-replica-a"));
    assert_eq!(log[0].params.get("id").map(String::as_str), Some("r-1"));
    assert_eq!(log[0].params.get("body").map(String::as_str), Some(routes));
    assert_eq!(log[0].code.as_deref(), Some("InvalidRoutes"));
    assert!(!log[2].reached_cloud());
    assert_eq!(log[2].fault, Some(Answer::Unavailable));
}
