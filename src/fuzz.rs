//! Test support for the "bad bytes never crash anything" tests (invariant 8): inputs
//! for every parser of outside input, random or mutated from real payloads, and a
//! bound on each input's time.
//!
//! The tests sit next to the private parsers (`mod fuzz` in the node watch, kubeconfig,
//! Hetzner API and AWS credentials modules) and, for the parsers the crate's modules
//! export, in [`parsers`] below. Each calls [`check`]: the parser must return (an
//! error value is fine), never panic, never take longer than [`TIME_LIMIT`] on one
//! input. Inputs are at most [`MAX_INPUT`] bytes, and where a parser builds lists the
//! tests assert the result is bounded by the input's size (none of these formats
//! carries a length field to allocate by). Failing inputs shrink and are kept under
//! `proptest-regressions/`.
//!
//! `PROPTEST_CASES` sets the number of inputs per parser (default [`DEFAULT_CASES`]).

use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm};

/// Inputs per parser in `cargo test`.
pub const DEFAULT_CASES: u32 = 512;
/// The largest input: above every real payload the seeds come from, far below what
/// could exhaust memory if a parser copied it a few times.
pub const MAX_INPUT: usize = 16 * 1024;
/// One input's time. A parser takes microseconds; the bound is generous because the
/// machine running the tests may be loaded, and it only has to tell a hang apart.
pub const TIME_LIMIT: Duration = Duration::from_secs(10);

/// proptest's settings for the parser tests.
pub fn config() -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_CASES),
        // ChaCha, the default, dominates the time of a debug build.
        rng_algorithm: RngAlgorithm::XorShift,
        ..Config::default()
    }
}

/// Random bytes, or one of `seeds` mutated: bytes flipped, replaced, inserted or
/// removed, cut short, a piece repeated (deep nesting, long runs), or two seeds
/// spliced. Half of the inputs start from a seed, so that most get past the first
/// byte of the format.
pub fn bytes(seeds: &'static [&'static [u8]]) -> impl Strategy<Value = Vec<u8>> {
    let random = proptest::collection::vec(any::<u8>(), 0..1024);
    let mutated = (
        0..seeds.len(),
        0..seeds.len(),
        proptest::collection::vec(mutation(), 1..8),
    )
        .prop_map(move |(a, b, mutations)| {
            let mut input = seeds[a].to_vec();
            for m in mutations {
                m.apply(&mut input, seeds[b]);
            }
            input.truncate(MAX_INPUT);
            input
        });
    prop_oneof![1 => random, 3 => mutated]
}

/// Like [`bytes`], as text (invalid UTF-8 replaced), for parsers that take `&str`.
pub fn text(seeds: &'static [&'static [u8]]) -> impl Strategy<Value = String> {
    bytes(seeds).prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}

#[derive(Clone, Debug)]
pub enum Mutation {
    Flip {
        at: usize,
        bit: u8,
    },
    Set {
        at: usize,
        byte: u8,
    },
    /// Inserts a byte that matters to most formats.
    Insert {
        at: usize,
        byte: u8,
    },
    Remove {
        at: usize,
        len: usize,
    },
    Truncate {
        at: usize,
    },
    /// Repeats `len` bytes at `at`, `times` times.
    Repeat {
        at: usize,
        len: usize,
        times: usize,
    },
    /// Replaces the tail from `at` with the other seed's tail from `from`.
    Splice {
        at: usize,
        from: usize,
    },
}

const INTERESTING: &[u8] = b"\0\"\\{}[]:,<>/=&;\r\n \t-+.0123456789eE\x7f\xff";

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<usize>();
    prop_oneof![
        (at, 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (at, any::<u8>()).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        (at, prop::sample::select(INTERESTING))
            .prop_map(|(at, byte)| Mutation::Insert { at, byte }),
        (at, 1usize..64).prop_map(|(at, len)| Mutation::Remove { at, len }),
        at.prop_map(|at| Mutation::Truncate { at }),
        (at, 1usize..32, 1usize..256).prop_map(|(at, len, times)| Mutation::Repeat {
            at,
            len,
            times
        }),
        (at, any::<usize>()).prop_map(|(at, from)| Mutation::Splice { at, from }),
    ]
}

impl Mutation {
    fn apply(&self, input: &mut Vec<u8>, other: &[u8]) {
        let pos = |at: usize, len: usize| if len == 0 { 0 } else { at % (len + 1) };
        match *self {
            Mutation::Flip { at, bit } if !input.is_empty() => {
                let i = at % input.len();
                input[i] ^= 1 << bit;
            }
            Mutation::Set { at, byte } if !input.is_empty() => {
                let i = at % input.len();
                input[i] = byte;
            }
            Mutation::Insert { at, byte } => {
                let i = pos(at, input.len());
                input.insert(i, byte);
            }
            Mutation::Remove { at, len } if !input.is_empty() => {
                let i = at % input.len();
                let end = (i + len).min(input.len());
                input.drain(i..end);
            }
            Mutation::Truncate { at } => {
                let i = pos(at, input.len());
                input.truncate(i);
            }
            Mutation::Repeat { at, len, times } if !input.is_empty() => {
                let i = at % input.len();
                let end = (i + len).min(input.len());
                let piece = input[i..end].to_vec();
                let room = MAX_INPUT.saturating_sub(input.len()) / piece.len().max(1);
                let copies: Vec<u8> = piece.repeat(times.min(room));
                input.splice(end..end, copies);
            }
            Mutation::Splice { at, from } => {
                let i = pos(at, input.len());
                let j = pos(from, other.len());
                input.truncate(i);
                input.extend_from_slice(&other[j..]);
            }
            _ => {}
        }
    }
}

/// Runs `parse` on its own thread and returns its result; panics (failing the test
/// with the input shown by proptest) if it panicked or took longer than
/// [`TIME_LIMIT`]. A parser that hangs keeps its thread; the test fails anyway.
pub fn check<T: Send + 'static>(what: &str, parse: impl FnOnce() -> T + Send + 'static) -> T {
    check_within(TIME_LIMIT, what, parse)
}

fn check_within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    parse: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::Builder::new()
        .name(format!("fuzz {what}"))
        .spawn(move || {
            let result = parse();
            let _ = tx.send(());
            result
        })
        .expect("spawning the parser's thread");
    match rx.recv_timeout(limit) {
        Ok(()) => match worker.join() {
            Ok(result) => result,
            Err(_) => panic!("{what} panicked on this input"),
        },
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let _ = worker.join();
            panic!("{what} panicked on this input")
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} took longer than {limit:?} on one input")
        }
    }
}

/// Reads a seed from `testdata/fuzz/` at compile time.
#[macro_export]
macro_rules! fuzz_seed {
    ($name:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/fuzz/",
            $name
        ))
        .as_slice()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the harness itself: a panicking parser fails the check.
    #[test]
    #[should_panic(expected = "panicked on this input")]
    fn a_panicking_parser_fails_the_check() {
        check("a parser", || -> u8 { panic!("boom") });
    }

    /// Guards the harness: a parser that does not return fails the check (its thread
    /// is left behind, parked).
    #[test]
    #[should_panic(expected = "took longer than")]
    fn a_hanging_parser_fails_the_check() {
        check_within(Duration::from_millis(50), "a parser", || {
            loop {
                std::thread::park();
            }
        });
    }

    #[test]
    fn mutations_stay_within_the_input_bound() {
        let mut input = vec![b'a'; MAX_INPUT];
        Mutation::Repeat {
            at: 3,
            len: 31,
            times: 255,
        }
        .apply(&mut input, b"x");
        assert!(input.len() <= MAX_INPUT + 31, "{}", input.len());
    }
}

/// The parsers reachable from the crate's modules; the private ones have their own
/// `mod fuzz` next to them (kube watch and config, hcloud API, AWS credentials).
#[cfg(test)]
mod parsers {
    use std::io::{Read, Write};
    use std::net::{Shutdown, SocketAddr, TcpStream};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use proptest::prelude::*;

    use super::{bytes, check, config, text};
    use crate::cloud::aws::{ec2, xml};
    use crate::kube::config::ExecConfig;
    use crate::kube::watch::{Reflector, WatchConfig};
    use crate::model::{Cidr, LabeledNode, NodeList};
    use crate::selector::{Labels, Selector};

    static DURATIONS: &[&[u8]] = &[
        b"10s",
        b"1h30m",
        b"300ms",
        b"-1.5h",
        b"2h45m0.5s",
        b"1us",
        b"1\xc2\xb5s",
        b"0",
        b"9223372036854775807ns",
        b".5m",
        b"1e3s",
    ];
    static CIDRS: &[&[u8]] = &[
        b"10.244.1.0/24",
        b"10.120.000.000/24",
        b"0.0.0.0/0",
        b"a00:100:0::/24",
        b"fd00:10:244:1::/64",
        b"::ffff:10.0.0.1/128",
        b"2001:db8::/129",
        b"1.2.3.4/33",
    ];
    static NODE_LISTS: &[&[u8]] = &[
        fuzz_seed!("../plan/nodes.json"),
        fuzz_seed!("../plan/nodes-invalid-pod-cidr.json"),
        fuzz_seed!("../plan/not-a-node-list.json"),
        fuzz_seed!("../plan/hetzner-mixed-nodes.json"),
    ];
    static SELECTORS: &[&[u8]] = &[
        b"role=worker,zone in (fsn1,nbg1),!instance.hetzner.cloud/is-root-server",
        b"node-role.kubernetes.io/worker, a notin (x,,y), b!=c, gen>3, d==e",
        b"a in (), b=, !c, d<10",
    ];
    static ROUTE_FILES: &[&[u8]] = &[fuzz_seed!("../plan/routes.json")];
    static EXEC_OUTPUTS: &[&[u8]] = &[
        fuzz_seed!("exec-credential.json"),
        fuzz_seed!("exec-credential.yaml"),
    ];
    static RETRY_AFTER: &[&[u8]] = &[
        b"1",
        b"120",
        b" 3",
        b"18446744073709551615",
        b"Wed, 21 Oct 2026 07:28:00 GMT",
    ];
    static KUBE_STATUS: &[&[u8]] = &[
        fuzz_seed!("kube-status.json"),
        fuzz_seed!("watch-error.json"),
    ];
    static LEASES: &[&[u8]] = &[fuzz_seed!("lease.json")];
    static EC2_XML: &[&[u8]] = &[
        fuzz_seed!("ec2-describe-route-tables.xml"),
        fuzz_seed!("ec2-describe-instances.xml"),
        fuzz_seed!("ec2-create-route.xml"),
        fuzz_seed!("ec2-error.xml"),
        fuzz_seed!("aws-error-iam.xml"),
    ];
    static REQUEST_HEADS: &[&[u8]] = &[
        b"GET /metrics HTTP/1.1\r\nHost: 10.0.0.3:10258\r\nUser-Agent: Prometheus/2.53.0\r\nAccept: text/plain;version=0.0.4;q=0.9,*/*;q=0.1\r\nAuthorization: Bearer abc\r\n\r\n",
        b"HEAD /healthz?verbose=1 HTTP/1.0\r\n\r\n",
        b"GET /readyz HTTP/1.1\nHost: x\n\n",
        b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello",
        b"GET http://host:1/metrics HTTP/1.1\r\nHost: host\r\nX-A:\r\n b\r\n\r\n",
    ];

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn go_durations(input in text(DURATIONS)) {
            let parsed = check("duration::parse", move || crate::duration::parse(&input));
            if let Ok(d) = parsed {
                // Whatever parses must format, as the flags' --help shows defaults.
                let _ = crate::duration::format(d);
            }
        }

        #[test]
        fn cidrs(input in text(CIDRS)) {
            let shown = input.clone();
            let parsed = check("Cidr::parse", move || Cidr::parse(&input));
            if let Ok(c) = parsed {
                let again = Cidr::parse(&c.to_string());
                prop_assert_eq!(again, Ok(c), "{} does not survive its own spelling", shown);
            }
        }

        /// `--node-selector`: any text parses or gives an error that points inside it;
        /// whatever parses prints as a selector that parses to the same thing.
        #[test]
        fn label_selectors(input in text(SELECTORS)) {
            let parsed = check("Selector::parse", {
                let input = input.clone();
                move || Selector::parse(&input)
            });
            match parsed {
                Ok(s) => {
                    let again = Selector::parse(&s.to_string());
                    prop_assert_eq!(again.as_ref(), Ok(&s), "{:?} printed as {}", input, s);
                    let _ = s.matches(&Labels::new());
                }
                Err(e) => {
                    prop_assert!(e.at <= input.len() && input.is_char_boundary(e.at), "{e:?}");
                    let _ = e.to_string();
                }
            }
        }

        #[test]
        fn labeled_node_lists(input in bytes(NODE_LISTS)) {
            let len = input.len();
            let parsed = check("NodeList<LabeledNode>", move || {
                serde_json::from_slice::<NodeList<LabeledNode>>(&input)
            });
            if let Ok(list) = parsed {
                prop_assert!(list.items.len() <= len);
                prop_assert!(list.items.iter().all(|n| n.labels.len() <= len));
            }
        }

        #[test]
        fn node_lists(input in bytes(NODE_LISTS)) {
            let len = input.len();
            let parsed = check("NodeList", move || serde_json::from_slice::<NodeList>(&input));
            if let Ok(list) = parsed {
                prop_assert!(list.items.len() <= len);
            }
        }

        /// Error replies of the API server, with their `Retry-After`, as the node
        /// watch gets them for a list (it waits at least that long).
        #[test]
        fn kube_status_bodies(
            input in bytes(KUBE_STATUS),
            code in 100u16..600,
            retry_after in text(RETRY_AFTER),
        ) {
            check("ApiError::from_response", move || {
                let e = crate::kube::ApiError::from_response(
                    "GET /api/v1/nodes".into(),
                    code,
                    Some(&retry_after),
                    &input,
                );
                let _ = e.to_string();
                let mut watch = Reflector::new(WatchConfig::default());
                let t0 = Instant::now();
                let _ = watch.next_action(t0);
                let _ = watch.on_list_page(Err(&crate::kube::KubeError::Api(e)), t0);
                let _ = watch.next_action(t0);
            });
        }

        /// The Lease as the API server returns it (written by any replica, or by
        /// hand), through the leader election's decisions: reading it, claiming it,
        /// the write's answer, and when to try next.
        #[test]
        fn leases(input in bytes(LEASES), ours in any::<bool>(), jitter in 0.0f64..1.0) {
            check("the lease decoder and elector", move || {
                use k8s_openapi::api::coordination::v1::Lease;
                use crate::kube::lease::{Elector, LeaseAction, LeaseConfig};
                let Ok(lease) = serde_json::from_slice::<Lease>(&input) else {
                    return;
                };
                let identity = if ours {
                    "node-a_5f0e1d2c-3b4a-4c5d-8e9f-0a1b2c3d4e5f"
                } else {
                    "node-b"
                };
                let mut elector = Elector::new(LeaseConfig::new(identity));
                let (t0, wall) = (Instant::now(), std::time::SystemTime::now());
                let _ = elector.attempt(t0, wall);
                if let Some(LeaseAction::Create(l) | LeaseAction::Update(l)) =
                    elector.on_get(Ok(Some(lease.clone())), t0, wall)
                {
                    elector.on_write(Ok(l), t0);
                }
                elector.on_write(Ok(lease), t0);
                let _ = elector.leadership_change(t0);
                let _ = elector.next_attempt(t0, jitter);
                let _ = elector.attempt(t0, wall);
                let _ = elector.release(wall);
            });
        }

        #[test]
        fn exec_plugin_output(input in bytes(EXEC_OUTPUTS), v1 in any::<bool>()) {
            let config = ExecConfig {
                api_version: if v1 {
                    "client.authentication.k8s.io/v1"
                } else {
                    "client.authentication.k8s.io/v1beta1"
                }
                .into(),
                command: "plugin".into(),
                args: vec![],
                env: vec![],
                provide_cluster_info: false,
                install_hint: None,
            };
            let _ = check("parse_exec_output", move || {
                crate::kube::auth::parse_exec_output(&input, &config).map(|_| ())
            });
        }

        #[test]
        fn ec2_xml_replies_and_error_bodies(input in text(EC2_XML)) {
            let len = input.len();
            let (tables, instances, error) = check("EC2 XML", move || {
                let error = xml::ErrorReply::parse(&input);
                match xml::Element::parse(&input) {
                    Ok(root) => {
                        let (tables, _) = ec2::parse_route_tables(&root);
                        let (instances, _) = ec2::parse_instances(&root);
                        let routes: usize = tables.iter().map(|t| t.routes.len()).sum();
                        (tables.len() + routes, instances.len(), error)
                    }
                    Err(e) => {
                        let _ = e.to_string();
                        (0, 0, error)
                    }
                }
            });
            // Every element takes at least four bytes (`<a/>`).
            prop_assert!(tables <= len / 4 && instances <= len / 4);
            if let Some(e) = error {
                prop_assert!(e.code.len() + e.message.len() <= len);
            }
        }

        #[test]
        fn plan_files(nodes in bytes(NODE_LISTS), routes in bytes(ROUTE_FILES)) {
            let dir = std::env::temp_dir().join(format!(
                "route-controller-fuzz-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let (n, r) = (dir.join("nodes.json"), dir.join("routes.json"));
            std::fs::write(&n, &nodes).expect("write nodes");
            std::fs::write(&r, &routes).expect("write routes");
            let (n, r) = (n.display().to_string(), r.display().to_string());
            let (nodes_len, routes_len) = (nodes.len(), routes.len());
            let (got_nodes, got_routes) = check("plan's files", move || {
                // A single Node is accepted too, so that it reaches the parser.
                let nodes = crate::cli::read_nodes(&n, true, &crate::node_filter::NodeFilter::everything())
                    .map(|v| v.len());
                let routes = crate::cli::read_routes(&r).map(|v| v.len());
                (nodes, routes)
            });
            let _ = std::fs::remove_dir_all(&dir);
            if let Ok(count) = got_nodes {
                prop_assert!(count <= nodes_len);
            }
            if let Ok(count) = got_routes {
                prop_assert!(count <= routes_len);
            }
        }
    }

    /// The metrics server, fed bad request heads one connection at a time while
    /// another client holds a connection with half a head, answers each with an
    /// HTTP status or a close, and still answers `/healthz` on a new connection after
    /// every one. Goes through the socket, so it holds whatever parses the head.
    #[test]
    fn bad_request_heads_never_stop_the_metrics_server() {
        let health: crate::serve::HealthFn = Arc::new(|| crate::serve::Health {
            live: true,
            ready: true,
            detail: "fuzz".into(),
        });
        let server = crate::serve::spawn_server(
            "127.0.0.1:0".parse().expect("loopback"),
            Arc::new(crate::metrics::Metrics::new()),
            health,
        )
        .expect("server");
        let addr = server.local_addr();
        let mut staller = TcpStream::connect(addr).expect("connect");
        staller
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: a")
            .expect("half a head");

        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: config().cases / 2,
            ..config()
        });
        let result = runner.run(&bytes(REQUEST_HEADS), |input| {
            let answer = exchange(addr, &input);
            prop_assert!(
                answer.is_empty() || answer.starts_with(b"HTTP/1.1 "),
                "not an HTTP answer: {:?}",
                String::from_utf8_lossy(&answer[..answer.len().min(200)])
            );
            let health = exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: fuzz\r\n\r\n");
            prop_assert!(
                health.starts_with(b"HTTP/1.1 200"),
                "/healthz after that input: {:?}",
                String::from_utf8_lossy(&health)
            );
            Ok(())
        });
        drop(staller);
        server.stop();
        if let Err(e) = result {
            panic!("{e}");
        }
    }

    /// Sends `request`, closes the sending side and reads the answer.
    fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        // The server may answer and close before reading everything; that is fine.
        let _ = s.write_all(request);
        let _ = s.shutdown(Shutdown::Write);
        let mut answer = Vec::new();
        match s.read_to_end(&mut answer) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("reading the answer to {} bytes failed: {e}", request.len()),
        }
        answer
    }
}
