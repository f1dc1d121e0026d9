//! Upstream's real route controller as a child process, beside a real
//! kube-apiserver, for tests and benchmarks that compare it with ours.
//!
//! The program is `tests/kube-apiserver/upstream-route-controller` (upstream's
//! `k8s.io/cloud-provider/controllers/route` at the version pinned in the Go
//! module, wired as the cloud-controller-manager wires it, with an in-memory
//! cloud that counts its calls). [`crate::kube_apiserver`] builds it; include
//! both modules:
//!
//! ```ignore
//! #[path = "support/kube_apiserver.rs"]
//! mod kube_apiserver;
//! #[path = "support/upstream_controller.rs"]
//! mod upstream_controller;
//! ```
//!
//! [`UpstreamController::start`] returns once the controller's node informer
//! has synced; [`UpstreamController::stop`] closes its stdin, waits for it to
//! exit and returns what its cloud saw. It never outlives the value: dropping
//! it kills the process.

// Every test binary that includes this module uses only part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::kube_apiserver::upstream_route_controller_binary;

/// How long the controller may take to sync its node informer.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a stop may take after stdin is closed.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The program's flags. [`UpstreamOptions::new`] gives the CCM's defaults.
#[derive(Clone, Debug)]
pub struct UpstreamOptions {
    pub kubeconfig: PathBuf,
    /// `--cluster-cidr`.
    pub cluster_cidr: String,
    /// `--cluster-name` (default `kubernetes`).
    pub cluster_name: String,
    /// Turns on the gate `CloudControllerManagerWatchBasedRoutesReconciliation`
    /// (default off: poll mode).
    pub watch: bool,
    /// `--route-reconciliation-period` (default 10 s).
    pub route_reconciliation_period: Duration,
    /// `--min-resync-period` (default 12 h).
    pub min_resync_period: Duration,
    /// How long each cloud call takes (default 100 ms).
    pub cloud_latency: Duration,
    /// `--announce-routes`: the program prints a line when its cloud first holds this
    /// many routes, for [`UpstreamController::wait_for_routes`] (default 0: never).
    pub announce_routes: usize,
}

impl UpstreamOptions {
    pub fn new(kubeconfig: impl Into<PathBuf>, cluster_cidr: &str) -> UpstreamOptions {
        UpstreamOptions {
            kubeconfig: kubeconfig.into(),
            cluster_cidr: cluster_cidr.to_string(),
            cluster_name: "kubernetes".to_string(),
            watch: false,
            route_reconciliation_period: Duration::from_secs(10),
            min_resync_period: Duration::from_secs(12 * 3600),
            cloud_latency: Duration::from_millis(100),
            announce_routes: 0,
        }
    }
}

/// A running upstream route controller.
pub struct UpstreamController {
    child: Child,
    stdin: Option<ChildStdin>,
    report: PathBuf,
    log: PathBuf,
    ready_at: SystemTime,
    /// When the `ROUTES` line arrived (see [`UpstreamOptions::announce_routes`]).
    routes_rx: mpsc::Receiver<SystemTime>,
}

impl UpstreamController {
    /// Starts the controller with its report and log (`upstream-route-controller.log`)
    /// in `dir`, and waits until its node informer has synced. Panics, with the end of
    /// its log, if it exits or is not ready within 60 s.
    pub fn start(options: &UpstreamOptions, dir: &Path) -> UpstreamController {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let report = dir.join("upstream-report.json");
        let log = dir.join("upstream-route-controller.log");
        let _ = fs::remove_file(&report);
        let log_file =
            File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let binary = upstream_route_controller_binary();
        let mut child = Command::new(binary)
            .arg(format!("--kubeconfig={}", options.kubeconfig.display()))
            .arg(format!("--cluster-cidr={}", options.cluster_cidr))
            .arg(format!("--cluster-name={}", options.cluster_name))
            .arg(format!("--watch={}", options.watch))
            .arg(format!(
                "--route-reconciliation-period={}",
                go_duration(options.route_reconciliation_period)
            ))
            .arg(format!(
                "--min-resync-period={}",
                go_duration(options.min_resync_period)
            ))
            .arg(format!(
                "--cloud-latency={}",
                go_duration(options.cloud_latency)
            ))
            .arg(format!("--announce-routes={}", options.announce_routes))
            .arg(format!("--report={}", report.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (ready_tx, ready_rx) = mpsc::channel();
        let (routes_tx, routes_rx) = mpsc::channel();
        thread::spawn(move || {
            let mut ready_tx = Some(ready_tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.starts_with("READY ")
                    && let Some(tx) = ready_tx.take()
                {
                    let _ = tx.send(SystemTime::now());
                }
                if line.starts_with("ROUTES ") {
                    let _ = routes_tx.send(SystemTime::now());
                }
            }
        });
        let mut controller = UpstreamController {
            child,
            stdin,
            report,
            log,
            ready_at: UNIX_EPOCH,
            routes_rx,
        };
        match ready_rx.recv_timeout(READY_TIMEOUT) {
            Ok(at) => controller.ready_at = at,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "upstream-route-controller was not ready within {READY_TIMEOUT:?}{}",
                controller.log_tail()
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = controller.child.wait().map(|s| s.to_string());
                panic!(
                    "upstream-route-controller exited ({}) before it was ready{}",
                    status.unwrap_or_else(|e| e.to_string()),
                    controller.log_tail()
                )
            }
        }
        controller
    }

    /// When the READY line arrived: the node informer had synced, and the first
    /// reconcile starts about then.
    pub fn ready_at(&self) -> SystemTime {
        self.ready_at
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the cloud holds [`UpstreamOptions::announce_routes`] routes and
    /// returns when it did; `None` if that did not happen within `timeout`.
    pub fn wait_for_routes(&self, timeout: Duration) -> Option<SystemTime> {
        self.routes_rx.recv_timeout(timeout).ok()
    }

    pub fn log_file(&self) -> &Path {
        &self.log
    }

    /// Stops the controller (closes its stdin), waits until it has exited with
    /// status 0, and reads its report. Panics otherwise, with the end of its log.
    pub fn stop(mut self) -> UpstreamReport {
        drop(self.stdin.take());
        let deadline = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
                Ok(None) => panic!(
                    "upstream-route-controller did not exit within {STOP_TIMEOUT:?} after its stdin closed{}",
                    self.log_tail()
                ),
                Err(e) => panic!("waiting for upstream-route-controller: {e}"),
            }
        };
        assert!(
            status.success(),
            "upstream-route-controller exited with {status}{}",
            self.log_tail()
        );
        let text = fs::read_to_string(&self.report)
            .unwrap_or_else(|e| panic!("read {}: {e}{}", self.report.display(), self.log_tail()));
        UpstreamReport::parse(&text)
            .unwrap_or_else(|e| panic!("{}: {e}\n{text}", self.report.display()))
    }

    fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let start = lines.len().saturating_sub(30);
        format!(
            "\n---- {} (last lines):\n{}",
            self.log.display(),
            lines[start..].join("\n")
        )
    }
}

impl Drop for UpstreamController {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What the controller's cloud saw, from its report.
#[derive(Clone, Debug, Default)]
pub struct UpstreamReport {
    pub list: u64,
    pub create: u64,
    pub delete: u64,
    /// Every route created, `(node, CIDR)`, with when it was created (the last time,
    /// if it was created twice).
    pub routes: BTreeMap<(String, String), SystemTime>,
    /// Every call, `list`, `create` or `delete`, with when it started.
    pub calls: Vec<(String, SystemTime)>,
    /// The routes the cloud held at the end, `(node, CIDR)`, sorted.
    pub current: Vec<(String, String)>,
}

impl UpstreamReport {
    pub fn parse(text: &str) -> Result<UpstreamReport, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let count = |key: &str| v[key].as_u64().ok_or_else(|| format!("no count {key:?}"));
        let time = |value: &Value| {
            value
                .as_str()
                .and_then(parse_rfc3339_utc)
                .ok_or_else(|| format!("not an RFC 3339 UTC time: {value}"))
        };
        let node_cidr = |key: &str| {
            key.split_once(' ')
                .map(|(n, c)| (n.to_string(), c.to_string()))
                .ok_or_else(|| format!("not \"NODE CIDR\": {key:?}"))
        };
        let mut report = UpstreamReport {
            list: count("list")?,
            create: count("create")?,
            delete: count("delete")?,
            ..UpstreamReport::default()
        };
        for (key, at) in v["routes"].as_object().ok_or("no \"routes\" object")? {
            report.routes.insert(node_cidr(key)?, time(at)?);
        }
        for call in v["calls"].as_array().ok_or("no \"calls\" array")? {
            let op = call["op"].as_str().ok_or("a call without \"op\"")?;
            report.calls.push((op.to_string(), time(&call["at"])?));
        }
        for key in v["current"].as_array().ok_or("no \"current\" array")? {
            report.current.push(node_cidr(
                key.as_str().ok_or("a current route not a string")?,
            )?);
        }
        Ok(report)
    }

    /// Calls of `op` that started in `[from, to)`.
    pub fn calls_between(&self, op: &str, from: SystemTime, to: SystemTime) -> u64 {
        self.calls
            .iter()
            .filter(|(o, at)| o == op && *at >= from && *at < to)
            .count() as u64
    }
}

/// Parses a UTC time as Go's `time.RFC3339Nano` writes it (`2026-11-30T22:12:08.5853Z`:
/// 0 to 9 fraction digits, always `Z`).
pub fn parse_rfc3339_utc(text: &str) -> Option<SystemTime> {
    let rest = text.strip_suffix('Z')?;
    let (date, clock) = rest.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<u64>().ok());
    let (hour, minute, second) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos: u32 = format!("{fraction:0<9}").parse().ok()?;
    let days = u64::try_from(days_from_civil(year, month, day)).ok()?;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::new(secs, nanos))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A duration in Go's syntax, exactly (e.g. `100ms`, `10s`, `1500us`).
pub fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    match nanos {
        0 => "0s".to_string(),
        n if n % 1_000_000_000 == 0 => format!("{}s", n / 1_000_000_000),
        n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}
