//! Version skew at run time (issue 30): `route-controller run` against a fake API
//! server that lacks an API the run needs, as one of another version or with a group
//! switched off (`--runtime-config=GROUP/VERSION=false`) would.
//!
//! Each missing API gives one start-up error (exit status 2) that names the API,
//! what needs it and the fix, after a single discovery request: never a retry loop
//! with a 404 in it. With the part that needs it switched off, the same server runs
//! the controller. (Events are core/v1, which every server serves; a 404 on creating
//! one is covered in `kube_status.rs`.)

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;

use std::time::Duration;

use controller_process::{ControllerProcess, Spawn};
use fake_apiserver::{FakeApiServer, node_json};

const PATIENCE: Duration = Duration::from_secs(30);

/// A fake API server with one node and without `absent`.
fn server_without(absent: &str) -> FakeApiServer {
    let server = FakeApiServer::start();
    server.put_node(node_json("n1", 5, &["10.244.1.0/24"], "10.0.0.1"));
    server.remove_api(absent);
    server
}

fn controller(server: &FakeApiServer, label: &str, extra: &[String]) -> ControllerProcess {
    Spawn::new()
        .args([
            "--cloud-provider=fake",
            "--cluster-cidr=10.244.0.0/16",
            &format!("--master={}", server.url()),
        ])
        .args(extra.iter().cloned())
        .spawn(label)
}

/// Runs `route-controller run` (the fake cloud) against `server` to its end, which
/// must come within 30 s with exit status 2 and one `error:` line on stderr that
/// contains every one of `needles`.
fn exits_2_naming(server: &FakeApiServer, extra: &[String], needles: &[&str]) {
    let stderr_path = std::env::temp_dir().join(format!(
        "route-controller-api-skew-{}-{}.stderr",
        std::process::id(),
        server.url().rsplit(':').next().unwrap_or_default()
    ));
    let stderr_file = std::fs::File::create(&stderr_path).expect("create the stderr file");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_route-controller"))
        .args([
            "run",
            "--cloud-provider=fake",
            "--cluster-cidr=10.244.0.0/16",
            &format!("--master={}", server.url()),
        ])
        .args(extra)
        .env_clear()
        .env("HOME", std::env::temp_dir())
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr_file)
        .spawn()
        .expect("run the binary");
    let deadline = std::time::Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the binary") {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let _ = std::fs::remove_file(&stderr_path);
    let Some(status) = status else {
        panic!("still running {PATIENCE:?} after a start without the API; killed it:\n{stderr}");
    };
    assert_eq!(status.code(), Some(2), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no `error:` line:\n{stderr}"));
    for needle in needles {
        assert!(
            line.contains(needle),
            "the error does not name {needle:?}: {line}"
        );
    }
}

/// A port the OS chose and freed just now (`--secure-port=0` turns the port off).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("its address").port()
}

fn requests_under(server: &FakeApiServer, prefix: &str) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with(prefix))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// Guards the Lease API: without coordination.k8s.io/v1, leader election (on by
/// default) stops the start with an error naming the API and `--leader-elect=false`,
/// after one discovery request and no Lease request; with `--leader-elect=false` the
/// same server runs the controller, which routes its node.
#[test]
fn without_the_lease_api_leader_election_is_a_start_up_error_naming_the_api_and_the_fix() {
    let server = server_without("coordination.k8s.io/v1");
    exits_2_naming(
        &server,
        &["--secure-port=0".into()],
        &[
            "coordination.k8s.io/v1",
            "leader election",
            "--leader-elect=false",
            "404",
        ],
    );
    assert_eq!(
        requests_under(&server, "/apis/coordination.k8s.io"),
        ["GET /apis/coordination.k8s.io/v1"],
        "one discovery request, no Lease request"
    );
    assert_eq!(
        requests_under(&server, "/api/v1/nodes"),
        Vec::<String>::new()
    );

    let mut c = controller(
        &server,
        "skew-no-leases-single",
        &["--secure-port=0".into(), "--leader-elect=false".into()],
    );
    c.wait_ready(PATIENCE);
    c.wait_for_metric("route_controller_routes", &[("state", "ok")], 1.0, PATIENCE);
    c.terminate();
}

/// Guards TokenReview: with the secure port on and authentication.k8s.io/v1 not
/// served, the start stops before binding the port, naming the API and the ways out;
/// no review is ever sent.
#[test]
fn without_token_reviews_the_secure_port_is_a_start_up_error_naming_the_api_and_the_fix() {
    let server = server_without("authentication.k8s.io/v1");
    let port = free_port();
    exits_2_naming(
        &server,
        &[
            format!("--secure-port={port}"),
            "--bind-address=127.0.0.1".into(),
            "--leader-elect=false".into(),
        ],
        &[
            "authentication.k8s.io/v1",
            "tokenreviews",
            "--secure-port=0",
            "--authentication-kubeconfig",
        ],
    );
    assert_eq!(
        requests_under(&server, "/apis/authentication.k8s.io"),
        ["GET /apis/authentication.k8s.io/v1"]
    );
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
        "the secure port was left bound"
    );
}

/// Guards SubjectAccessReview, as TokenReview: authorization.k8s.io/v1 not served is
/// a start-up error naming it; with the secure port off the controller runs.
#[test]
fn without_subject_access_reviews_the_secure_port_is_a_start_up_error_naming_the_api() {
    let server = server_without("authorization.k8s.io/v1");
    exits_2_naming(
        &server,
        &[
            format!("--secure-port={}", free_port()),
            "--bind-address=127.0.0.1".into(),
            "--leader-elect=false".into(),
        ],
        &[
            "authorization.k8s.io/v1",
            "subjectaccessreviews",
            "--authorization-kubeconfig",
        ],
    );

    let mut c = controller(
        &server,
        "skew-no-sars-insecure",
        &["--secure-port=0".into(), "--leader-elect=false".into()],
    );
    c.wait_ready(PATIENCE);
    c.terminate();
}
