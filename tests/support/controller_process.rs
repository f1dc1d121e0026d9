//! The `route-controller run` binary as a child process, for end-to-end tests.
//!
//! [`ControllerProcess::spawn`] starts the binary Cargo built for this test run (or
//! the build `RC_TEST_CONTROLLER` names: `.ci/run` runs end-to-end tests on the static
//! musl build with it) with an empty environment plus only what the test passes (and a temporary `HOME`), so that
//! nothing from the machine (a `~/.kube/config`, `KUBECONFIG`, AWS or Hetzner
//! variables, proxies) leaks into a test. Its log goes to a file under
//! `target/tmp/e2e-controllers/`, kept after the test, and the tail of that log is
//! part of every failure message. The metrics server binds `127.0.0.1:0`; the port
//! it got is read from the log, so no port is ever guessed.
//!
//! Every wait polls with a deadline and fails with a message saying what it waited
//! for; nothing here sleeps to let something happen. A process still running when
//! its value is dropped is killed, so a failing test leaves no controller behind.
//!
//! Include it with `#[path = "support/controller_process.rs"] mod controller_process;`.
//! It carries its own copy of the Prometheus parser (`controller_process::prometheus`).

// Every test binary that includes this module uses only part of it.
#![allow(dead_code)]

#[path = "prometheus.rs"]
pub mod prometheus;

use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use prometheus::Exposition;

/// How long the process may take to start serving metrics.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a clean shutdown after SIGTERM may take: in-flight calls finish, the
/// lease is released, the threads are joined.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// Lines of the log shown in a failure message.
const LOG_TAIL_LINES: usize = 60;
/// The log line that names the metrics address (src/main.rs).
const SERVING: &str = "serving /metrics, /healthz and /readyz on http://";
/// The log line that names the secure port's address.
const SERVING_SECURE: &str = "serving /metrics, /healthz and /readyz on https://";

/// A running (or exited) `route-controller run`.
pub struct ControllerProcess {
    label: String,
    child: Child,
    exit: Option<ExitStatus>,
    log: PathBuf,
    home: PathBuf,
    metrics: SocketAddr,
    agent: ureq::Agent,
}

/// What to run: the arguments after `run` and the environment.
#[derive(Clone, Debug, Default)]
pub struct Spawn {
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Another build of the controller (the benchmarks' static musl build); the one
    /// Cargo built for this run when `None`.
    binary: Option<std::path::PathBuf>,
}

impl Spawn {
    pub fn new() -> Spawn {
        Spawn::default()
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Spawn {
        self.args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Spawn
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// One environment variable; the process gets no others except `HOME` (a fresh
    /// directory) and `RUST_LOG` (`info` unless given here).
    pub fn env(mut self, key: &str, value: impl Into<String>) -> Spawn {
        self.env.push((key.to_string(), value.into()));
        self
    }

    /// Runs `binary` instead of the build Cargo made for this run.
    pub fn binary(mut self, binary: impl Into<std::path::PathBuf>) -> Spawn {
        self.binary = Some(binary.into());
        self
    }

    pub fn spawn(self, label: &str) -> ControllerProcess {
        ControllerProcess::spawn(label, self)
    }
}

impl ControllerProcess {
    /// Starts `route-controller run ARGS --metrics-bind-address=127.0.0.1:0` and waits
    /// until it serves metrics. `label` names the log file (use the test's name).
    pub fn spawn(label: &str, spawn: Spawn) -> ControllerProcess {
        let dir = scratch_dir(label);
        let home = dir.join("home");
        fs::create_dir_all(&home).unwrap_or_else(|e| panic!("create {}: {e}", home.display()));
        let log = dir.join("controller.log");
        let file = File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let stderr = file
            .try_clone()
            .unwrap_or_else(|e| panic!("clone {}: {e}", log.display()));

        let binary = spawn
            .binary
            .clone()
            .or_else(|| std::env::var_os("RC_TEST_CONTROLLER").map(Into::into))
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_route-controller").into());
        let mut command = Command::new(&binary);
        command
            .arg("run")
            .args(&spawn.args)
            .arg("--metrics-bind-address=127.0.0.1:0");
        // Off unless the test asks for it: its default port is fixed, and tests run
        // side by side.
        if !spawn.args.iter().any(|a| a.starts_with("--secure-port")) {
            command.arg("--secure-port=0");
        }
        command
            .env_clear()
            .env("HOME", &home)
            .env("RUST_BACKTRACE", "1");
        if !spawn.env.iter().any(|(k, _)| k == "RUST_LOG") {
            command.env("RUST_LOG", "info");
        }
        command
            .envs(spawn.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(stderr);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let mut process = ControllerProcess {
            label: label.to_string(),
            child,
            exit: None,
            log,
            home,
            metrics: "127.0.0.1:0".parse().expect("a socket address"),
            agent: metrics_agent(),
        };
        process.metrics = process.wait_for_metrics_address();
        process
    }

    fn wait_for_metrics_address(&mut self) -> SocketAddr {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let log = self.log();
            if let Some(addr) = log.lines().find_map(|l| {
                l.split_once(SERVING)
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .and_then(|a| a.parse::<SocketAddr>().ok())
            }) {
                return addr;
            }
            if !self.is_running() {
                self.fail("the controller exited before it served metrics");
            }
            if Instant::now() > deadline {
                self.fail(&format!(
                    "the controller did not log {SERVING:?} within {START_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn metrics_address(&self) -> SocketAddr {
        self.metrics
    }

    /// The secure port's address, from its log line (spawn with
    /// `--secure-port=0 --bind-address=127.0.0.1` to have one chosen).
    pub fn secure_address(&mut self) -> SocketAddr {
        let found = self.log().lines().find_map(|l| {
            l.split_once(SERVING_SECURE)
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .and_then(|a| a.parse::<SocketAddr>().ok())
        });
        match found {
            Some(addr) => addr,
            None => self.fail(&format!("the controller did not log {SERVING_SECURE:?}")),
        }
    }

    /// The whole log so far.
    pub fn log(&self) -> String {
        fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_else(|e| format!("<cannot read {}: {e}>", self.log.display()))
    }

    /// The last lines of the log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let start = lines.len().saturating_sub(LOG_TAIL_LINES);
        lines[start..].join("\n")
    }

    /// Panics with `message`, the process state and the tail of its log.
    pub fn fail(&mut self, message: &str) -> ! {
        let state = match self.try_exit() {
            Some(status) => format!("exited with {status}"),
            None => "still running".to_string(),
        };
        panic!(
            "{message}\n---- controller {:?} (pid {}, {state}), last lines of {}:\n{}",
            self.label,
            self.child.id(),
            self.log.display(),
            self.log_tail()
        );
    }

    fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    pub fn is_running(&mut self) -> bool {
        self.try_exit().is_none()
    }

    /// Fails the test if the process has exited.
    pub fn assert_running(&mut self) {
        if !self.is_running() {
            self.fail("the controller exited, but it should still be running");
        }
    }

    // --- HTTP: health and metrics -----------------------------------------------------

    /// `GET path` on the metrics server: (status, body), or `None` without an answer.
    pub fn http_get(&self, path: &str) -> Option<(u16, String)> {
        let url = format!("http://{}{path}", self.metrics);
        let mut response = self.agent.get(&url).call().ok()?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().ok()?;
        Some((status, body))
    }

    /// Waits until `/readyz` answers 200: the controller has a complete node list.
    pub fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            match self.http_get("/readyz") {
                Some((200, _)) => return,
                other => last = other.or(last),
            }
            if !self.is_running() {
                self.fail("the controller exited before /readyz answered 200");
            }
            if Instant::now() > deadline {
                self.fail(&format!(
                    "/readyz did not answer 200 within {timeout:?}; last answer: {last:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Scrapes `/metrics` and parses it strictly.
    pub fn scrape(&mut self) -> Exposition {
        let text = match self.http_get("/metrics") {
            Some((200, body)) => body,
            other => self.fail(&format!("GET /metrics answered {other:?}")),
        };
        match prometheus::parse(&text) {
            Ok(exposition) => exposition,
            Err(e) => self.fail(&format!("/metrics does not parse: {e}\n{text}")),
        }
    }

    /// The value of the one sample `name` whose labels include `labels`.
    pub fn metric(&mut self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.scrape().value(name, labels)
    }

    /// The sum of the samples `name` whose labels include `labels` (0 if none).
    pub fn metric_sum(&mut self, name: &str, labels: &[(&str, &str)]) -> f64 {
        sum(&self.scrape(), name, labels)
    }

    /// Scrapes until `done` holds for the exposition, and returns that exposition.
    pub fn wait_for_metrics(
        &mut self,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&Exposition) -> bool,
    ) -> Exposition {
        let deadline = Instant::now() + timeout;
        loop {
            let exposition = self.scrape();
            if done(&exposition) {
                return exposition;
            }
            if !self.is_running() {
                self.fail(&format!("the controller exited while waiting for {what}"));
            }
            if Instant::now() > deadline {
                self.fail(&format!("waited {timeout:?} for {what}"));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Waits until the sample `name{labels}` reaches at least `at_least`.
    pub fn wait_for_metric(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        at_least: f64,
        timeout: Duration,
    ) -> f64 {
        let what = format!("{name}{labels:?} >= {at_least}");
        let exposition =
            self.wait_for_metrics(&what, timeout, |e| sum(e, name, labels) >= at_least);
        sum(&exposition, name, labels)
    }

    /// Waits until the log contains `needle`.
    pub fn wait_for_log(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.log().contains(needle) {
            if !self.is_running() {
                self.fail(&format!("the controller exited before logging {needle:?}"));
            }
            if Instant::now() > deadline {
                self.fail(&format!(
                    "the log did not show {needle:?} within {timeout:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    // --- signals ----------------------------------------------------------------------

    /// Sends SIGTERM and waits for the exit; fails the test unless the process exits
    /// with status 0 within [`SHUTDOWN_TIMEOUT`]. Returns how long it took.
    pub fn terminate(&mut self) -> Duration {
        if !self.is_running() {
            self.fail("SIGTERM: the controller had already exited");
        }
        let started = Instant::now();
        self.signal("TERM");
        let deadline = started + SHUTDOWN_TIMEOUT;
        loop {
            if let Some(status) = self.try_exit() {
                if !status.success() {
                    self.fail(&format!(
                        "after SIGTERM the controller exited with {status}"
                    ));
                }
                return started.elapsed();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.fail(&format!(
                    "the controller did not exit within {SHUTDOWN_TIMEOUT:?} of SIGTERM; killed it"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `SIG<name>` (`TERM`, `INT`) without waiting.
    pub fn send_signal(&mut self, name: &str) {
        self.signal(name);
    }

    /// Waits up to `timeout` for the process to exit on its own; `None` if it still
    /// runs then.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL, as a crash or an evicted pod: no clean shutdown, the lease stays.
    pub fn kill(&mut self) {
        if self.is_running() {
            let _ = self.child.kill();
        }
        self.exit = self.child.wait().ok();
    }

    fn signal(&mut self, name: &str) {
        // `kill` from coreutils/procps: no unsafe `libc::kill` of our own.
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .env_clear()
            .status();
        match status {
            Ok(s) if s.success() => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.fail(&format!(
                "sending SIG{name} needs the `kill` command; install procps (Debian, Ubuntu) \
                 or util-linux"
            )),
            other => self.fail(&format!("`kill -{name} {}`: {other:?}", self.child.id())),
        }
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        if self.exit.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // The log stays for a look after a failure; the home directory is empty.
        let _ = fs::remove_dir_all(&self.home);
    }
}

/// The sum of the samples `name` whose labels include `labels`.
pub fn sum(exposition: &Exposition, name: &str, labels: &[(&str, &str)]) -> f64 {
    exposition
        .families
        .values()
        .flat_map(|f| &f.samples)
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

fn metrics_agent() -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(5)))
        .build();
    ureq::Agent::new_with_config(config)
}

/// `target/tmp/e2e-controllers/<pid>-<label>-<n>/`. Directories of test processes
/// that have exited are removed on the way, so logs of the last run stay and older
/// ones do not pile up.
fn scratch_dir(label: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-controllers");
    if n == 0 {
        remove_dirs_of_exited_processes(&root);
    }
    let dir = root.join(format!("{}-{label}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

fn remove_dirs_of_exited_processes(root: &Path) {
    // Liveness comes from /proc; without it, leave everything alone.
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name.split('-').next().unwrap_or_default();
        if !pid.is_empty()
            && pid.bytes().all(|b| b.is_ascii_digit())
            && !Path::new("/proc").join(pid).exists()
        {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}
