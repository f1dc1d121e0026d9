//! The server's logic without sockets: the site's answers, the connection state
//! machine on a scripted stream, and the table's evictions, on a virtual clock.

use std::collections::VecDeque;

use super::*;

fn request(path: &str) -> Parsed {
    Parsed::Request {
        head_only: false,
        path: path.into(),
        bearer: None,
    }
}

fn site_response(parsed: &Parsed, health: Health) -> String {
    let metrics = Metrics::new();
    for _ in 0..7 {
        metrics.pass_finished(
            crate::metrics::TriggerKind::NodeAdd,
            crate::metrics::SyncOutcome::Changed,
        );
    }
    let health: HealthFn = Arc::new(move || health.clone());
    let site = Site {
        metrics: &metrics,
        health: &health,
    };
    String::from_utf8(site.respond(parsed)).unwrap()
}

fn health(live: bool, ready: bool) -> Health {
    Health {
        live,
        ready,
        detail: "watch connected; synced; leading".into(),
    }
}

#[test]
fn metrics_are_served_in_the_prometheus_text_format() {
    let text = site_response(&request("/metrics"), health(true, true));
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let head = format!("{head}\r\n");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
    assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
    assert!(head.contains("Connection: close\r\n"));
    assert!(
        body.contains(
            "\nroute_controller_route_sync_total{outcome=\"changed\",trigger=\"node_change\"} 7\n"
        ),
        "{body}"
    );
}

#[test]
fn probes_answer_503_with_the_detail_when_down() {
    let text = site_response(&request("/healthz"), health(true, false));
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\nok: watch connected; synced; leading\n"));
    let text = site_response(&request("/livez"), health(true, false));
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    let text = site_response(&request("/readyz"), health(true, false));
    assert!(
        text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\nnot ready: watch connected; synced; leading\n"));
    let text = site_response(&request("/healthz"), health(false, false));
    assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
}

#[test]
fn head_gets_the_length_of_the_body_without_it() {
    let parsed = Parsed::Request {
        head_only: true,
        path: "/healthz".into(),
        bearer: None,
    };
    let text = site_response(&parsed, health(true, true));
    let body = "ok: watch connected; synced; leading\n";
    assert!(
        text.ends_with(&format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )),
        "{text}"
    );
}

#[test]
fn access_decisions_map_to_401_403_and_503() {
    let metrics = Metrics::new();
    let health: HealthFn = Arc::new(|| health(true, true));
    let site = Site {
        metrics: &metrics,
        health: &health,
    };
    let status = |d: Decision| {
        let out = String::from_utf8(site.answer(&d, "/metrics", false)).unwrap();
        out[9..12].to_string()
    };
    assert_eq!(status(Decision::Allow), "200");
    assert_eq!(status(Decision::Unauthenticated("x".into())), "401");
    assert_eq!(status(Decision::Forbidden("x".into())), "403");
    assert_eq!(status(Decision::Unavailable("x".into())), "503");
}

// --- the connection state machine, on a scripted stream and a virtual clock ---

/// What the script's socket does on each call.
enum Io {
    Data(&'static [u8]),
    Eof,
    Block,
}

#[derive(Default)]
struct Script {
    reads: VecDeque<Io>,
    /// How many bytes each write call takes; `None` blocks. Empty: take all.
    writes: VecDeque<Option<usize>>,
    written: Vec<u8>,
    shut: bool,
}

impl Read for Script {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.reads.pop_front() {
            Some(Io::Data(d)) => {
                assert!(d.len() <= buf.len());
                buf[..d.len()].copy_from_slice(d);
                Ok(d.len())
            }
            Some(Io::Eof) => {
                // A closed stream stays closed.
                self.reads.push_front(Io::Eof);
                Ok(0)
            }
            Some(Io::Block) | None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for Script {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.writes.pop_front() {
            Some(None) => Err(io::ErrorKind::WouldBlock.into()),
            Some(Some(n)) => {
                let n = n.min(buf.len());
                self.written.extend_from_slice(&buf[..n]);
                Ok(n)
            }
            None => {
                self.written.extend_from_slice(buf);
                Ok(buf.len())
            }
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Transport for Script {
    fn shutdown_write(&mut self) {
        self.shut = true;
    }
}

fn conn(script: Script, t0: Instant) -> Conn<Script> {
    Conn::new(
        script,
        "127.0.0.1:1".parse().unwrap(),
        t0,
        &ServerConfig::default(),
    )
}

fn echo_path(p: &Parsed) -> Reply {
    Reply::Now(p.describe().into_bytes())
}

#[test]
fn a_request_in_pieces_is_answered_once_its_head_is_complete() {
    let t0 = Instant::now();
    let config = ServerConfig::default();
    let mut c = conn(
        Script {
            reads: VecDeque::from([
                Io::Data(b"GET /met"),
                Io::Block,
                Io::Data(b"rics HTTP/1.1\r\nHost: x\r\n"),
                Io::Block,
                Io::Data(b"\r\n"),
                Io::Block,
                Io::Eof,
            ]),
            ..Script::default()
        },
        t0,
    );
    let t1 = t0 + Duration::from_secs(1);
    assert_eq!(
        c.on_ready(t1, &config, &mut echo_path),
        Step::Wait(Interest::READABLE)
    );
    assert_eq!(
        c.on_ready(t1, &config, &mut echo_path),
        Step::Wait(Interest::READABLE)
    );
    assert!(c.stream.written.is_empty());
    assert_eq!(
        c.deadline,
        t0 + config.head_timeout,
        "trickling does not extend the head's time"
    );
    // The head completes: the response is written and our side shut.
    assert_eq!(
        c.on_ready(t1, &config, &mut echo_path),
        Step::Wait(Interest::READABLE)
    );
    assert_eq!(c.stream.written, b"GET /metrics");
    assert!(c.stream.shut);
    assert!(matches!(c.phase, Phase::Lingering { .. }));
    assert_eq!(c.deadline, t1 + LINGER);
    // The client closes.
    assert_eq!(c.on_ready(t1, &config, &mut echo_path), Step::Close);
}

#[test]
fn a_response_larger_than_the_socket_takes_is_finished_on_writable() {
    let t0 = Instant::now();
    let config = ServerConfig::default();
    let mut c = conn(
        Script {
            reads: VecDeque::from([Io::Data(b"GET /metrics HTTP/1.0\r\n\r\n")]),
            writes: VecDeque::from([Some(3), None, Some(4), None]),
            ..Script::default()
        },
        t0,
    );
    let body = || b"0123456789".to_vec();
    let t1 = t0 + Duration::from_secs(1);
    let mut respond = |_: &Parsed| Reply::Now(body());
    assert_eq!(
        c.on_ready(t1, &config, &mut respond),
        Step::Wait(Interest::READABLE | Interest::WRITABLE)
    );
    assert_eq!(c.stream.written, b"012");
    assert_eq!(c.deadline, t1 + config.idle_timeout);
    let t2 = t1 + Duration::from_secs(5);
    assert_eq!(
        c.on_ready(t2, &config, &mut respond),
        Step::Wait(Interest::READABLE | Interest::WRITABLE)
    );
    assert_eq!(c.stream.written, b"0123456");
    assert_eq!(
        c.deadline,
        t2 + config.idle_timeout,
        "progress moves the deadline"
    );
    assert_eq!(
        c.on_ready(t2, &config, &mut respond),
        Step::Wait(Interest::READABLE)
    );
    assert_eq!(c.stream.written, body());
    assert!(c.stream.shut);
}

#[test]
fn a_client_that_closes_at_once_is_dropped_without_an_answer() {
    let t0 = Instant::now();
    let mut c = conn(
        Script {
            reads: VecDeque::from([Io::Eof]),
            ..Script::default()
        },
        t0,
    );
    let step = c.on_ready(t0, &ServerConfig::default(), &mut echo_path);
    assert_eq!(step, Step::Close);
    assert!(c.stream.written.is_empty());
}

#[test]
fn half_a_request_then_close_gets_400() {
    let t0 = Instant::now();
    let mut c = conn(
        Script {
            reads: VecDeque::from([Io::Data(b"GET /metr"), Io::Eof]),
            ..Script::default()
        },
        t0,
    );
    let config = ServerConfig::default();
    let mut site = |p: &Parsed| Reply::Now(format!("{p:?}").into_bytes());
    let step = c.on_ready(t0, &config, &mut site);
    assert_eq!(step, Step::Close, "the EOF is seen again while lingering");
    assert_eq!(
        String::from_utf8(c.stream.written).unwrap(),
        "Reject(BadRequest, \"incomplete request\")"
    );
}

#[test]
fn a_client_that_keeps_sending_after_its_answer_is_cut_off() {
    let t0 = Instant::now();
    static JUNK: [u8; 4096] = [b'x'; 4096];
    let mut reads = VecDeque::from([Io::Data(b"GET /readyz HTTP/1.0\r\n\r\n")]);
    for _ in 0..=LINGER_MAX_BYTES / JUNK.len() {
        reads.push_back(Io::Data(&JUNK));
    }
    let mut c = conn(
        Script {
            reads,
            ..Script::default()
        },
        t0,
    );
    let step = c.on_ready(t0, &ServerConfig::default(), &mut echo_path);
    assert_eq!(step, Step::Close);
    assert_eq!(c.stream.written, b"GET /readyz");
}

// --- the table: who gives way when every slot is taken ---

fn table_with(phases: Vec<(u64, Phase)>, t0: Instant) -> Table<Script> {
    let mut table = Table::new(phases.len());
    for (i, (age_ms, phase)) in phases.into_iter().enumerate() {
        let mut c = conn(Script::default(), t0 + Duration::from_millis(age_ms));
        c.phase = phase;
        table.conns.insert(Token(FIRST_CONN + i), c);
    }
    table
}

fn reading() -> Phase {
    Phase::Reading { head: Vec::new() }
}

/// Guards the eviction order: the oldest connection that has not sent its request
/// within the grace goes first, then one that only lingers; a connection being
/// answered never goes, nor a young one whose request may be on its way.
#[test]
fn a_full_table_evicts_the_oldest_idle_connection_and_never_one_being_answered() {
    let t0 = Instant::now();
    let now = t0 + Duration::from_secs(1);
    let table = table_with(
        vec![
            (
                0,
                Phase::Writing {
                    out: vec![1],
                    written: 0,
                },
            ),
            (5, Phase::Lingering { discarded: 0 }),
            (10, reading()),
            (20, reading()),
            (30, Phase::Reviewing { head_only: false }),
        ],
        t0,
    );
    assert_eq!(
        table.victim_if_full(now),
        Some(Token(FIRST_CONN + 2)),
        "the oldest reader"
    );
    assert!(table.has_room_or_victim(now));
    // Within the grace the readers are spared; the lingerer goes instead.
    let young = t0 + Duration::from_millis(50);
    assert_eq!(table.victim_if_full(young), Some(Token(FIRST_CONN + 1)));

    let table = table_with(
        vec![
            (
                0,
                Phase::Writing {
                    out: vec![1],
                    written: 0,
                },
            ),
            (30, Phase::Reviewing { head_only: false }),
            (40, reading()),
        ],
        t0,
    );
    let young = t0 + Duration::from_millis(40) + EVICTION_GRACE - Duration::from_millis(1);
    assert_eq!(
        table.victim_if_full(young),
        None,
        "a young reader is spared"
    );
    assert!(
        !table.has_room_or_victim(young),
        "new ones wait in the backlog"
    );
    assert_eq!(
        table.next_eviction(),
        Some(t0 + Duration::from_millis(40) + EVICTION_GRACE),
        "the server wakes when the grace ends"
    );
    assert_eq!(
        table.victim_if_full(young + Duration::from_millis(1)),
        Some(Token(FIRST_CONN + 2))
    );

    let table = table_with(
        vec![
            (
                0,
                Phase::Writing {
                    out: vec![1],
                    written: 0,
                },
            ),
            (30, Phase::Reviewing { head_only: false }),
        ],
        t0,
    );
    assert_eq!(table.victim_if_full(now), None);
    assert!(
        !table.has_room_or_victim(now),
        "busy slots make new ones wait in the backlog"
    );

    let mut table = table_with(vec![(0, reading())], t0);
    table.max = 2;
    assert_eq!(
        table.victim_if_full(now),
        None,
        "not full: nobody is evicted"
    );
}

/// Guards the starvation fix end to end in virtual time: 300 idle connections (one
/// every 10 ms, 100 a second) and a probe arrive at a table of 64; every arrival is
/// taken, the probe's request is read at once, and every idle connection is gone a
/// head timeout after its accept.
#[test]
fn hundreds_of_idle_connections_never_keep_a_probe_out() {
    let t0 = Instant::now();
    let config = ServerConfig::default();
    let mut table: Table<Script> = Table::new(config.max_connections);
    let admit = |table: &mut Table<Script>, token: usize, script: Script, at: Instant| {
        if let Some(victim) = table.victim_if_full(at) {
            table.conns.remove(&victim);
        }
        assert!(table.conns.len() < table.max, "no room at {:?}", at - t0);
        let c = Conn::new(script, "127.0.0.1:2".parse().unwrap(), at, &config);
        table.conns.insert(Token(token), c);
    };
    for i in 0..300 {
        let at = t0 + Duration::from_millis(10 * i);
        admit(&mut table, FIRST_CONN + i as usize, Script::default(), at);
    }
    assert_eq!(table.conns.len(), config.max_connections);
    let probe_at = t0 + Duration::from_millis(3000);
    let probe = Script {
        reads: VecDeque::from([Io::Data(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")]),
        ..Script::default()
    };
    let probe_token = Token(FIRST_CONN + 1000);
    admit(&mut table, probe_token.0, probe, probe_at);
    let c = table
        .conns
        .get_mut(&probe_token)
        .expect("the probe was taken");
    let step = c.on_ready(probe_at, &config, &mut echo_path);
    assert_eq!(step, Step::Wait(Interest::READABLE));
    assert_eq!(c.stream.written, b"GET /healthz");

    // One head timeout after the last idle accept, only the probe is left.
    let later = t0 + Duration::from_millis(2990) + config.head_timeout;
    let expired = table.expired(later);
    assert_eq!(expired.len(), config.max_connections - 1);
    assert!(!expired.contains(&probe_token));
}
