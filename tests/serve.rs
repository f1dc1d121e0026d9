//! The metrics and health server over real sockets: the exposition parsed back as
//! Prometheus would, probes following the health callback, HTTP errors, and the
//! behaviour under slow, silent, oversized and many clients.

#[path = "support/prometheus.rs"]
mod prometheus;
#[path = "support/raw_http.rs"]
mod raw_http;
#[path = "support/tempdir.rs"]
mod tempdir;

use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use route_controller::serve::{
    Health, HealthFn, ServerConfig, ServerHandle, spawn_server, spawn_server_with,
};
use route_controller::{CloudOperation, CloudOutcome, Metrics, SyncOutcome, TriggerKind};

use raw_http::{PATIENCE, connect, exchange, exchange_bytes, get, parse_response, read_response};

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn healthy() -> Health {
    Health {
        live: true,
        ready: true,
        detail: "watch connected; synced; leading".into(),
    }
}

fn fixed(health: Health) -> HealthFn {
    Arc::new(move || health.clone())
}

fn server() -> ServerHandle {
    spawn_server(localhost(), Arc::new(Metrics::new()), fixed(healthy())).expect("start server")
}

fn server_with(config: ServerConfig) -> ServerHandle {
    spawn_server_with(
        localhost(),
        Arc::new(Metrics::new()),
        fixed(healthy()),
        config,
    )
    .expect("start server")
}

// --- /metrics ---------------------------------------------------------------------

#[test]
fn the_scrape_parses_back_with_every_family_issue_5_asks_for() {
    let metrics = Arc::new(Metrics::new());
    metrics.set_provider("hcloud");
    metrics.pass_started(TriggerKind::NodeAdd);
    metrics.pass_started(TriggerKind::NodeAdd);
    metrics.pass_started(TriggerKind::Resync);
    metrics.pass_finished(TriggerKind::NodeAdd, SyncOutcome::Changed);
    metrics.pass_finished(TriggerKind::NodeAdd, SyncOutcome::Changed);
    metrics.pass_finished(TriggerKind::Resync, SyncOutcome::Noop);
    metrics.trigger(TriggerKind::NodeAdd);
    metrics.triggers_coalesced.add(4);
    metrics.cloud_request(
        CloudOperation::Create,
        CloudOutcome::Success,
        Duration::from_millis(30),
    );
    metrics.cloud_request(
        CloudOperation::List,
        CloudOutcome::RateLimited,
        Duration::from_millis(700),
    );
    metrics.trigger_to_pass.observe(Duration::from_millis(20));
    metrics.node_to_route.observe(Duration::from_secs(2));
    metrics.node_to_route.observe(Duration::from_secs(90_000));
    metrics.routes_ok.set(5);
    metrics.routes_pending.set(2);
    metrics.watch_relists.inc();
    metrics.leader.set(1);
    let server = spawn_server(localhost(), Arc::clone(&metrics), fixed(healthy())).unwrap();

    let response = get(server.local_addr(), "/metrics");
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert_eq!(response.header("connection"), Some("close"));
    let text = response.text();
    let exposition = prometheus::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));

    for (family, kind) in [
        ("route_controller_route_sync_total", "counter"),
        ("route_controller_passes_total", "counter"),
        ("route_controller_triggers_total", "counter"),
        ("route_controller_triggers_coalesced_total", "counter"),
        ("route_controller_cloud_requests_total", "counter"),
        (
            "route_controller_cloud_request_duration_seconds",
            "histogram",
        ),
        ("route_controller_trigger_to_pass_seconds", "histogram"),
        ("route_controller_node_to_route_seconds", "histogram"),
        ("route_controller_routes", "gauge"),
        ("route_controller_watch_relists_total", "counter"),
        ("route_controller_leader", "gauge"),
        ("route_controller_leader_transitions_total", "counter"),
    ] {
        let f = exposition.family(family);
        assert_eq!(f.kind, kind, "{family}");
        assert!(
            f.help.as_ref().is_some_and(|h| !h.is_empty()),
            "{family} has no HELP"
        );
        assert!(!f.samples.is_empty(), "{family} has no samples");
    }
    let triggers = exposition.label_values("route_controller_passes_total", "trigger");
    for t in [
        "node_add",
        "node_delete",
        "node_update",
        "resync",
        "poll",
        "retry",
        "startup",
    ] {
        assert!(
            triggers.contains(t),
            "no passes_total{{trigger={t:?}}}: {triggers:?}"
        );
    }
    assert_eq!(
        exposition.label_values("route_controller_routes", "state"),
        BTreeSet::from(["ok", "pending", "failing"].map(String::from))
    );
    assert_eq!(
        exposition.label_values("route_controller_cloud_requests_total", "operation"),
        BTreeSet::from(["list", "create", "delete", "apply"].map(String::from))
    );

    // What was recorded comes back.
    assert_eq!(
        exposition.value(
            "route_controller_route_sync_total",
            &[("outcome", "changed"), ("trigger", "node_change")]
        ),
        2.0
    );
    assert_eq!(
        exposition.value(
            "route_controller_route_sync_total",
            &[("outcome", "noop"), ("trigger", "periodic")]
        ),
        1.0
    );
    assert_eq!(
        exposition.value("route_controller_passes_total", &[("trigger", "node_add")]),
        2.0
    );
    assert_eq!(
        exposition.value("route_controller_triggers_coalesced_total", &[]),
        4.0
    );
    let create_ok = [
        ("provider", "hcloud"),
        ("operation", "create"),
        ("outcome", "success"),
    ];
    assert_eq!(
        exposition.value("route_controller_cloud_requests_total", &create_ok),
        1.0
    );
    let list_limited = [("operation", "list"), ("outcome", "rate_limited")];
    assert_eq!(
        exposition.value("route_controller_cloud_requests_total", &list_limited),
        1.0
    );
    let list_duration = "route_controller_cloud_request_duration_seconds";
    assert_eq!(
        exposition.value(
            &format!("{list_duration}_bucket"),
            &[("operation", "list"), ("le", "0.5")]
        ),
        0.0
    );
    assert_eq!(
        exposition.value(
            &format!("{list_duration}_bucket"),
            &[("operation", "list"), ("le", "1")]
        ),
        1.0
    );
    assert!(
        (exposition.value(&format!("{list_duration}_sum"), &[("operation", "list")]) - 0.7).abs()
            < 1e-9
    );
    assert_eq!(
        exposition.value("route_controller_node_to_route_seconds_count", &[]),
        2.0
    );
    assert_eq!(
        exposition.value(
            "route_controller_node_to_route_seconds_bucket",
            &[("le", "86400")]
        ),
        1.0,
        "a day-long wait is only in +Inf"
    );
    assert_eq!(
        exposition.value("route_controller_routes", &[("state", "pending")]),
        2.0
    );
    assert_eq!(
        exposition.value("route_controller_watch_relists_total", &[]),
        1.0
    );
    assert_eq!(exposition.value("route_controller_leader", &[]), 1.0);
}

#[test]
fn the_exposition_parser_rejects_what_prometheus_rejects() {
    let good = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 2\n\
                # TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n";
    assert!(prometheus::parse(good).is_ok());
    for (bad, why) in [
        ("a_total 1\n", "no TYPE"),
        ("# TYPE a counter\na{x=1} 1\n", "unquoted label"),
        ("# TYPE a counter\na one\n", "bad value"),
        ("# TYPE a counter\na 1\n# TYPE a counter\n", "second TYPE"),
        ("# TYPE a counter\na 1\na 2\n", "duplicate series"),
        (
            "# TYPE a counter\n# TYPE b counter\na 1\nb 1\na{x=\"y\"} 1\n",
            "interleaved",
        ),
        (
            "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 3\nh_count 1\n",
            "not cumulative",
        ),
        (
            "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 3\n",
            "+Inf differs from count",
        ),
        (
            "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 3\nh_count 1\n",
            "no +Inf",
        ),
        ("# TYPE a counter\na 1", "no final newline"),
    ] {
        assert!(prometheus::parse(bad).is_err(), "accepted ({why}): {bad:?}");
    }
}

// --- probes and HTTP errors -------------------------------------------------------

#[test]
fn healthz_and_readyz_follow_the_health_callback() {
    let state = Arc::new(Mutex::new(healthy()));
    let shared = Arc::clone(&state);
    let health: HealthFn = Arc::new(move || shared.lock().unwrap().clone());
    let server = spawn_server(localhost(), Arc::new(Metrics::new()), health).unwrap();
    let addr = server.local_addr();
    let set = |live: bool, ready: bool, detail: &str| {
        *state.lock().unwrap() = Health {
            live,
            ready,
            detail: detail.into(),
        }
    };

    set(
        true,
        false,
        "watch connected; waiting for the first node list",
    );
    let h = get(addr, "/healthz");
    assert_eq!(
        (h.status, h.text().as_str()),
        (
            200,
            "ok: watch connected; waiting for the first node list\n"
        )
    );
    let r = get(addr, "/readyz");
    assert_eq!(r.status, 503);
    assert!(
        r.text().contains("waiting for the first node list"),
        "{}",
        r.text()
    );

    set(true, true, "watch connected; synced; standing by");
    assert_eq!(get(addr, "/readyz").status, 200);
    assert_eq!(
        get(addr, "/readyz?verbose").status,
        200,
        "query strings are ignored"
    );

    set(false, false, "watch failing for 5m: connection refused");
    let h = get(addr, "/healthz");
    assert_eq!(h.status, 503);
    assert!(h.text().contains("connection refused"), "{}", h.text());
    assert_eq!(get(addr, "/readyz").status, 503);

    set(true, true, "recovered");
    assert_eq!(get(addr, "/healthz").status, 200);
}

#[test]
fn unknown_paths_get_404_other_methods_405_and_garbage_400() {
    let server = server();
    let addr = server.local_addr();
    assert_eq!(get(addr, "/").status, 404);
    assert_eq!(get(addr, "/metrics/extra").status, 404);
    let post = exchange(
        addr,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
    assert_eq!(exchange(addr, b"hello there\r\n\r\n").status, 400);
    assert_eq!(
        exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n").status,
        400,
        "1.1 needs Host"
    );
    assert_eq!(
        exchange(addr, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").status,
        505
    );
    // HTTP/1.0 and a bare-LF client are served.
    assert_eq!(exchange(addr, b"GET /metrics HTTP/1.0\r\n\r\n").status, 200);
    assert_eq!(exchange(addr, b"GET /healthz HTTP/1.0\n\n").status, 200);
    // The server survived all of that.
    assert_eq!(get(addr, "/healthz").status, 200);
}

#[test]
fn head_requests_get_the_headers_without_a_body() {
    let server = server();
    let raw = exchange_bytes(
        server.local_addr(),
        b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let response = parse_response(&raw, false);
    assert_eq!(response.status, 200);
    assert!(response.body.is_empty(), "HEAD got a body");
    let full = get(server.local_addr(), "/metrics");
    let announced: usize = response.header("content-length").unwrap().parse().unwrap();
    assert_eq!(announced, full.body.len());
}

#[test]
fn a_request_head_over_the_cap_is_refused_with_431() {
    let server = server();
    let mut raw = b"GET /metrics HTTP/1.1\r\nHost: x\r\nCookie: ".to_vec();
    raw.resize(64 * 1024, b'c');
    raw.extend_from_slice(b"\r\n\r\n");
    // The server answers after 8 KiB and stops reading; the client's remaining bytes
    // are drained, so the answer arrives instead of a reset.
    let response = exchange(server.local_addr(), &raw);
    assert_eq!(response.status, 431);
    let declared = exchange(
        server.local_addr(),
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n",
    );
    assert_eq!(declared.status, 413);
    assert_eq!(get(server.local_addr(), "/healthz").status, 200);
}

// --- slow, silent, large and many clients -----------------------------------------

#[test]
fn a_slow_client_with_half_a_request_does_not_block_others() {
    // A head timeout that the slow client stays within on a loaded machine.
    let server = server_with(ServerConfig {
        head_timeout: PATIENCE,
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    let mut slow = connect(addr);
    slow.write_all(b"GET /metr").unwrap();
    for _ in 0..5 {
        assert_eq!(get(addr, "/metrics").status, 200);
    }
    // The slow client finishes and is served too.
    slow.write_all(b"ics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut slow).status, 200);
}

#[test]
fn a_large_response_to_a_client_that_does_not_read_blocks_no_one() {
    // Far more than the loopback socket buffers hold, so the server must park the
    // rest of the response and come back to it on writability.
    let detail = "x".repeat(16 * 1024 * 1024);
    let server = spawn_server(
        localhost(),
        Arc::new(Metrics::new()),
        fixed(Health {
            live: true,
            ready: true,
            detail: detail.clone(),
        }),
    )
    .unwrap();
    let addr = server.local_addr();
    let mut big = connect(addr);
    big.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    // Read a little, so the response is surely under way, then stall.
    let mut first = [0u8; 16];
    big.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200 OK\r");
    for _ in 0..3 {
        assert_eq!(get(addr, "/metrics").status, 200);
    }
    let mut rest = Vec::new();
    big.read_to_end(&mut rest).unwrap();
    let mut raw = first.to_vec();
    raw.extend_from_slice(&rest);
    let response = parse_response(&raw, true);
    assert_eq!(response.body.len(), "ok: ".len() + detail.len() + 1);
}

#[test]
fn a_hundred_concurrent_scrapes_all_succeed() {
    let server = server();
    let addr = server.local_addr();
    let start = Barrier::new(100);
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..100)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    let response = get(addr, "/metrics");
                    prometheus::parse(&response.text()).expect("a complete exposition");
                    response.status
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(statuses, vec![200; 100]);
}

#[test]
fn a_silent_client_is_dropped_after_the_head_timeout() {
    let head_timeout = Duration::from_millis(200);
    let server = server_with(ServerConfig {
        head_timeout,
        ..ServerConfig::default()
    });
    let started = Instant::now();
    let mut silent = connect(server.local_addr());
    let mut half = connect(server.local_addr());
    half.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let mut buf = [0u8; 64];
    // EOF, not a response: the server closed the connection.
    assert_eq!(silent.read(&mut buf).expect("closed, not timed out"), 0);
    assert_eq!(half.read(&mut buf).expect("closed, not timed out"), 0);
    let waited = started.elapsed();
    assert!(
        waited >= head_timeout,
        "dropped after {waited:?}, before the timeout"
    );
    assert!(waited < PATIENCE);
    assert_eq!(get(server.local_addr(), "/healthz").status, 200);
}

/// Guards the eviction at the cap. The head timeout is far beyond the test's read
/// timeout (`PATIENCE`), so only an eviction closes the first connection in time:
/// without it the read below times out and the test fails, however slow the machine
/// (with the head timeout equal to `PATIENCE`, it used to pass on the head timeout
/// alone).
#[test]
fn a_new_connection_beyond_the_cap_evicts_the_oldest_idle_one() {
    let server = server_with(ServerConfig {
        max_connections: 2,
        head_timeout: 6 * PATIENCE,
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    let mut first = connect(addr);
    // The server has taken the first before the second arrives.
    assert_eq!(get(addr, "/healthz").status, 200);
    // Past the eviction grace (100 ms from its accept), so the first may be evicted.
    std::thread::sleep(Duration::from_millis(200));
    let _second = connect(addr);
    let mut third = connect(addr);
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut third).status, 200);
    let mut buf = [0u8; 1];
    match first.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("the oldest idle connection is still open: {other:?}"),
    }
}

/// Guards the health port against starvation (issue 13): 300 idle connections and
/// 100 slow-loris ones (a byte every 50 ms) are held open against a table of 64
/// slots, and reopened when the server drops them (up to 400 a second, far more than
/// the "few a second" that used to be enough), while the kubelet's probe is timed. Before the fix, 70 idle connections made `/healthz` wait 10 s. The logic
/// guarantees a probe is never queued behind an idle connection (so it never waits
/// for their 1 s head timeout); the median must stay under the 100 ms the issue asks
/// for, every probe under the head timeout.
#[test]
fn hundreds_of_idle_and_slow_loris_connections_never_delay_healthz() {
    let server = server();
    let addr = server.local_addr();
    let head_timeout = ServerConfig::default().head_timeout;
    let open = |loris: bool| {
        let mut s = connect(addr);
        if loris {
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n");
        }
        s.set_nonblocking(true).unwrap();
        (s, loris)
    };
    let attackers: Vec<(std::net::TcpStream, bool)> = (0..400).map(|i| open(i % 4 == 0)).collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let reopened = std::sync::atomic::AtomicUsize::new(0);
    let mut latencies: Vec<Duration> = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut attackers = attackers;
            let mut buf = [0u8; 64];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut budget = 20;
                for (s, loris) in &mut attackers {
                    let closed = match s.read(&mut buf) {
                        Ok(_) => true,
                        Err(e) => e.kind() != ErrorKind::WouldBlock,
                    };
                    if closed && budget > 0 {
                        budget -= 1;
                        *s = open(*loris).0;
                        reopened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    } else if *loris {
                        let _ = s.write(b"X");
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        // Stops the attackers however this closure ends, so a failure cannot hang.
        struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        let mut latencies = Vec::new();
        for _ in 0..40 {
            let started = Instant::now();
            let response = get(addr, "/healthz");
            latencies.push(started.elapsed());
            assert_eq!(response.status, 200);
            std::thread::sleep(Duration::from_millis(50));
        }
        latencies
    });
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    let max = latencies[latencies.len() - 1];
    println!(
        "/healthz under 300 idle + 100 slow-loris connections ({} reopened): median {median:?}, max {max:?} ({} probes)",
        reopened.load(std::sync::atomic::Ordering::Relaxed),
        latencies.len()
    );
    assert!(
        median < Duration::from_millis(100),
        "median {median:?}: {latencies:?}"
    );
    assert!(max < head_timeout, "max {max:?}: {latencies:?}");
}

// --- lifecycle ----------------------------------------------------------------------

#[test]
fn stop_returns_promptly_and_frees_the_port() {
    let server = server();
    let addr = server.local_addr();
    assert_eq!(get(addr, "/healthz").status, 200);
    let mut pending = connect(addr);
    pending.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let started = Instant::now();
    server.stop();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "stop took {took:?}");
    // Open connections are closed: with a FIN, or a reset if the server had not yet
    // read what the client sent.
    let mut buf = [0u8; 16];
    match pending.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("the connection is still open after stop: {other:?}"),
    }
    std::net::TcpListener::bind(addr).expect("the port is free after stop");
}

#[test]
fn dropping_the_handle_stops_the_server() {
    let addr = {
        let server = server();
        server.local_addr()
    };
    std::net::TcpListener::bind(addr).expect("the port is free after drop");
}

#[test]
fn a_port_in_use_is_reported_by_spawn() {
    let taken = std::net::TcpListener::bind(localhost()).unwrap();
    let err = spawn_server(
        taken.local_addr().unwrap(),
        Arc::new(Metrics::new()),
        fixed(healthy()),
    )
    .expect_err("the port is taken");
    assert_eq!(err.kind(), ErrorKind::AddrInUse);
}

// --- the secure port: TLS and delegated authorization, with a scripted reviewer ---

mod secure {
    use super::*;
    use k8s_openapi::api::authentication::v1::UserInfo;
    use route_controller::kube::review::TokenIdentity;
    use route_controller::serve::{
        AccessConfig, CertSource, Reviewer, SELF_SIGNED_CERT, Secret, Secure, spawn_secure_server,
        tls_config,
    };
    use ureq::tls::{PemItem, RootCerts, TlsConfig};

    /// The API server's answers: `good` may read /metrics, `nobody` may not, `slow`
    /// takes 2 s to be reviewed, anything else is unknown.
    struct Scripted {
        reviews: Mutex<usize>,
    }

    impl Reviewer for Scripted {
        fn authenticate(&self, token: &Secret) -> Result<TokenIdentity, String> {
            *self.reviews.lock().unwrap() += 1;
            match token.expose() {
                "slow" => {
                    std::thread::sleep(Duration::from_secs(2));
                    Ok(TokenIdentity::User(user("slow")))
                }
                t @ ("good" | "nobody") => Ok(TokenIdentity::User(user(t))),
                _ => Ok(TokenIdentity::Unauthenticated("unknown token".into())),
            }
        }

        fn authorize(&self, user: &UserInfo, _path: &str) -> Result<Result<(), String>, String> {
            match user.username.as_deref() {
                Some("nobody") => Ok(Err("no RBAC rule".into())),
                _ => Ok(Ok(())),
            }
        }
    }

    fn user(name: &str) -> UserInfo {
        UserInfo {
            username: Some(name.into()),
            ..UserInfo::default()
        }
    }

    fn https_agent(cert_pem: &str) -> ureq::Agent {
        let certs: Vec<_> = ureq::tls::parse_pem(cert_pem.as_bytes())
            .filter_map(|i| match i {
                Ok(PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        let tls = TlsConfig::builder()
            .root_certs(RootCerts::new_with_certs(&certs))
            .build();
        ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .tls_config(tls)
                .http_status_as_error(false)
                .timeout_global(Some(PATIENCE))
                .build(),
        )
    }

    fn status(agent: &ureq::Agent, url: &str, token: Option<&str>) -> u16 {
        let mut request = agent.get(url);
        if let Some(t) = token {
            request = request.header("Authorization", format!("Bearer {t}"));
        }
        request.call().map(|r| r.status().as_u16()).unwrap_or(0)
    }

    /// Guards the secure port's decisions over real TLS, and that a review the API
    /// server is slow to answer never delays a probe (the reviews run on their own
    /// thread).
    #[test]
    fn tokens_are_reviewed_off_the_poll_thread_and_probes_never_wait_for_them() {
        let dir = tempdir::TempDir::new("serve-secure");
        let cert = CertSource::SelfSigned {
            cert_dir: Some(dir.path().to_path_buf()),
            hosts: vec![],
        };
        let reviewer = Arc::new(Scripted {
            reviews: Mutex::new(0),
        });
        let secure = Secure {
            tls: tls_config(&cert).expect("a self-signed certificate"),
            access: AccessConfig::new(),
            reviewer: reviewer.clone(),
        };
        let server = spawn_secure_server(
            localhost(),
            Arc::new(Metrics::new()),
            fixed(healthy()),
            ServerConfig::default(),
            secure,
        )
        .unwrap();
        let pem = std::fs::read_to_string(dir.path().join(SELF_SIGNED_CERT)).unwrap();
        let agent = https_agent(&pem);
        let url = |p: &str| format!("https://localhost:{}{p}", server.local_addr().port());

        assert_eq!(status(&agent, &url("/healthz"), None), 200);
        assert_eq!(status(&agent, &url("/metrics"), None), 401);
        assert_eq!(status(&agent, &url("/metrics"), Some("made-up")), 401);
        assert_eq!(status(&agent, &url("/metrics"), Some("nobody")), 403);
        assert_eq!(status(&agent, &url("/metrics"), Some("good")), 200);
        let before = *reviewer.reviews.lock().unwrap();
        assert_eq!(status(&agent, &url("/metrics"), Some("good")), 200);
        assert_eq!(
            *reviewer.reviews.lock().unwrap(),
            before,
            "served from the cache"
        );

        std::thread::scope(|s| {
            let slow = s.spawn(|| status(&agent, &url("/metrics"), Some("slow")));
            std::thread::sleep(Duration::from_millis(200));
            let started = Instant::now();
            assert_eq!(status(&agent, &url("/healthz"), None), 200);
            let took = started.elapsed();
            println!("/healthz while a review takes 2 s: {took:?}");
            assert!(took < Duration::from_secs(1), "{took:?}");
            assert_eq!(slow.join().unwrap(), 200);
        });
    }
}
