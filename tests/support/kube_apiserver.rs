//! A real kube-apiserver, backed by a real embedded etcd, for end-to-end tests.
//!
//! The server is the Go program in `tests/kube-apiserver/` (upstream
//! `k8s.io/kubernetes` and etcd, versions pinned in its go.mod). This module
//! builds it once into `target/kube-apiserver/` (rebuilt when its sources
//! change), starts it on 127.0.0.1 and talks to it with the admin token.
//!
//! Include it from an integration test with
//! `#[path = "support/kube_apiserver.rs"] mod kube_apiserver;`, then use
//! [`shared()`] for one server per test binary, or [`KubeApiserver::start`] /
//! [`KubeApiserver::start_fresh`] for a private one that a test can stop,
//! restart or kill.
//!
//! The same Go module holds the other Go programs, built the same way: upstream's
//! route controller with a counting fake cloud
//! (`tests/kube-apiserver/upstream-route-controller`,
//! [`upstream_route_controller_binary`], run by `tests/support/upstream_controller.rs`),
//! the same with cloud-provider-aws's real routes (`aws-route-controller`,
//! [`aws_route_controller_binary`]) and with cloud-provider-gcp's
//! (`gcp-route-controller`, [`gcp_route_controller_binary`]), hcloud-go driving the Hetzner double
//! (`hcloud-conformance`, [`hcloud_conformance_binary`]), Microsoft's armnetwork
//! and armcompute driving the ARM double (`azure-conformance`,
//! [`azure_conformance_binary`]), and Google's compute/v1 client driving the GCE
//! double (`gce-conformance`, [`gce_conformance_binary`]).
//!
//! An older Kubernetes minor is a Go module of its own beside it
//! (`tests/kube-apiserver-1.31/`), built and cached the same way; choose it with
//! [`Version`] ([`KubeApiserver::start_fresh_version`], [`shared_version`]).
//!
//! Needs Go (1.26 or newer) on `PATH`, or in the `GO` environment variable;
//! without it every test that uses this module fails with a message saying so.
//! The first build downloads the modules and takes a few minutes.
//! `KUBE_APISERVER_HARNESS_LOG=1` echoes the server's logs to the test's stderr;
//! otherwise they are in `kube-apiserver.log` and `etcd.log` in the data dir.

// Every test binary that includes this module uses only part of it.
#![allow(dead_code)]

// Each support module that needs it includes it: a test may include several.
#[allow(clippy::duplicate_mod)]
#[path = "go_build.rs"]
mod go_build;

use std::collections::VecDeque;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use ureq::Agent;
use ureq::tls::{PemItem, RootCerts, TlsConfig};

/// How long a start may take before the harness is killed and the test fails.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a clean stop may take after stdin is closed.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// Timeout for one ordinary API request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Lines of the harness's stderr kept for failure messages.
const STDERR_TAIL_LINES: usize = 200;
/// Expiry asked for in TokenRequests.
const SA_TOKEN_SECONDS: u64 = 3600;

/// The process-wide server of this test binary, started on first use.
///
/// Tests share it, so they must use their own object names. It is never
/// stopped explicitly: when the test binary exits, the harness sees its stdin
/// close and shuts down by itself.
pub fn shared() -> &'static KubeApiserver {
    static SHARED: OnceLock<KubeApiserver> = OnceLock::new();
    // The harness deletes the scratch directory itself when it exits, since
    // a static is never dropped.
    SHARED.get_or_init(|| KubeApiserver::launch_in(scratch_dir("shared"), true))
}

/// A running (or stopped) harness process and what it reported when ready.
pub struct KubeApiserver {
    data_dir: PathBuf,
    remove_data_dir: bool,
    process: Option<Process>,
    info: ReadyInfo,
    agent: Agent,
    /// The harness binary of the server's Kubernetes version.
    binary: &'static Path,
}

struct Process {
    child: Child,
    stdin: Option<ChildStdin>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    stderr_thread: Option<JoinHandle<()>>,
}

#[derive(Clone, Debug)]
struct ReadyInfo {
    server: String,
    port: u16,
    admin_kubeconfig: PathBuf,
    controller_kubeconfig: PathBuf,
    ca_file: PathBuf,
    ca_pem: String,
    admin_token: String,
    controller_token: String,
    controller_user: String,
    /// The embedded etcd's client URL (`http://127.0.0.1:PORT`).
    etcd_url: String,
}

impl KubeApiserver {
    /// Starts a private server with its data in `data_dir` (created if
    /// missing, kept afterwards). A directory that held a server before brings
    /// back its objects, port, CA and tokens.
    pub fn start(data_dir: impl Into<PathBuf>) -> KubeApiserver {
        KubeApiserver::launch_in(data_dir.into(), false)
    }

    fn launch_in(data_dir: PathBuf, remove_on_exit: bool) -> KubeApiserver {
        KubeApiserver::launch_binary(harness_binary(), data_dir, remove_on_exit)
    }

    fn launch_binary(
        binary: &'static Path,
        data_dir: PathBuf,
        remove_on_exit: bool,
    ) -> KubeApiserver {
        fs::create_dir_all(&data_dir)
            .unwrap_or_else(|e| panic!("create data dir {}: {e}", data_dir.display()));
        let (process, info) = launch(binary, &data_dir, None, remove_on_exit);
        let agent = api_agent(&info.ca_pem);
        KubeApiserver {
            data_dir,
            remove_data_dir: false,
            process: Some(process),
            info,
            agent,
            binary,
        }
    }

    /// Starts a private server in a new scratch directory that is removed
    /// when the value is dropped.
    pub fn start_fresh() -> KubeApiserver {
        let mut server = KubeApiserver::start(scratch_dir("private"));
        server.remove_data_dir = true;
        server
    }

    /// Stops the server cleanly: closes its stdin and waits until it has
    /// exited (apiserver stopped, etcd closed). Panics if it does not exit
    /// with status 0 within 60 s.
    pub fn stop(&mut self) {
        let mut process = self
            .process
            .take()
            .expect("stop: the server is not running");
        drop(process.stdin.take());
        let deadline = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            match process.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
                Ok(None) => {
                    let _ = process.child.kill();
                    let _ = process.child.wait();
                    panic!(
                        "kube-apiserver harness did not exit within {STOP_TIMEOUT:?} after its stdin closed; killed it{}",
                        process.failure_details(&self.data_dir, true)
                    );
                }
                Err(e) => panic!("waiting for the kube-apiserver harness: {e}"),
            }
        };
        if !status.success() {
            panic!(
                "kube-apiserver harness exited with {status} when stopped{}",
                process.failure_details(&self.data_dir, false)
            );
        }
    }

    /// Kills the server with SIGKILL (no clean shutdown), as a crash would.
    /// What etcd had written survives; [`KubeApiserver::restart`] brings it back.
    pub fn kill(&mut self) {
        let mut process = self
            .process
            .take()
            .expect("kill: the server is not running");
        let _ = process.child.kill();
        let _ = process.child.wait();
    }

    /// Starts the server again on the same data directory and port, stopping
    /// it cleanly first if it is running.
    pub fn restart(&mut self) {
        if self.process.is_some() {
            self.stop();
        }
        let (process, info) = launch(self.binary, &self.data_dir, Some(self.info.port), false);
        assert_eq!(
            info.port, self.info.port,
            "the restarted kube-apiserver came back on another port"
        );
        self.agent = api_agent(&info.ca_pem);
        self.info = info;
        self.process = Some(process);
    }

    /// True while the harness process runs.
    pub fn is_running(&mut self) -> bool {
        match self.process.as_mut() {
            Some(p) => matches!(p.child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The embedded etcd's client URL, `http://127.0.0.1:PORT` (it may change on a
    /// restart), for tests that act on the storage itself, e.g. compact its history.
    pub fn etcd_url(&self) -> &str {
        &self.info.etcd_url
    }

    /// `https://127.0.0.1:PORT`.
    pub fn server(&self) -> &str {
        &self.info.server
    }

    pub fn port(&self) -> u16 {
        self.info.port
    }

    /// The PEM of the CA that signed the serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.info.ca_pem
    }

    pub fn ca_file(&self) -> &Path {
        &self.info.ca_file
    }

    /// Bearer token of user `admin`, group `system:masters`.
    pub fn admin_token(&self) -> &str {
        &self.info.admin_token
    }

    /// Bearer token of the controller user, which has no permissions until a
    /// test binds a role to [`KubeApiserver::controller_user`].
    pub fn controller_token(&self) -> &str {
        &self.info.controller_token
    }

    /// The controller token's user name (`route-controller-user`).
    pub fn controller_user(&self) -> &str {
        &self.info.controller_user
    }

    pub fn admin_kubeconfig(&self) -> &Path {
        &self.info.admin_kubeconfig
    }

    pub fn controller_kubeconfig(&self) -> &Path {
        &self.info.controller_kubeconfig
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The apiserver's log file (unless `KUBE_APISERVER_HARNESS_LOG` is set).
    pub fn log_file(&self) -> PathBuf {
        self.data_dir.join("kube-apiserver.log")
    }

    /// A ureq agent that trusts the harness CA and returns 4xx/5xx responses
    /// instead of errors; it sends no credentials of its own.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// One request with any token; transport errors panic, HTTP errors do not.
    /// `path` starts with `/` (e.g. `/api/v1/nodes?limit=5`).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        token: &str,
        content_type: Option<&str>,
        body: Option<&[u8]>,
    ) -> ApiResponse {
        let url = format!("{}{path}", self.info.server);
        let mut builder = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("Authorization", format!("Bearer {token}"))
            .header("Accept", "application/json");
        if let Some(ct) = content_type {
            builder = builder.header("Content-Type", ct);
        }
        let result = match body {
            Some(b) => self.agent.run(builder.body(b.to_vec()).expect("request")),
            None => self.agent.run(builder.body(()).expect("request")),
        };
        let mut response = result.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .unwrap_or_else(|e| panic!("{method} {url}: reading the body: {e}"));
        ApiResponse { status, body }
    }

    /// GET with the admin token; panics unless the answer is 2xx.
    pub fn get_json(&self, path: &str) -> Value {
        self.admin("GET", path, None, None)
    }

    /// POST a JSON body with the admin token; panics unless the answer is 2xx.
    pub fn post_json(&self, path: &str, body: &Value) -> Value {
        self.admin("POST", path, Some("application/json"), Some(body))
    }

    /// PUT a JSON body with the admin token; panics unless the answer is 2xx.
    pub fn put_json(&self, path: &str, body: &Value) -> Value {
        self.admin("PUT", path, Some("application/json"), Some(body))
    }

    /// PATCH with the admin token and the given patch type, e.g.
    /// `application/merge-patch+json` or `application/strategic-merge-patch+json`;
    /// panics unless the answer is 2xx.
    pub fn patch(&self, path: &str, content_type: &str, body: &Value) -> Value {
        self.admin("PATCH", path, Some(content_type), Some(body))
    }

    /// DELETE with the admin token; panics unless the answer is 2xx.
    pub fn delete(&self, path: &str) -> Value {
        self.admin("DELETE", path, None, None)
    }

    /// Creates a Node with `spec.podCIDR(s)` and `status.addresses` given as
    /// `(type, address)` pairs, e.g. `("InternalIP", "10.0.0.2")`. Returns the
    /// created object.
    pub fn create_node(&self, name: &str, pod_cidrs: &[&str], addresses: &[(&str, &str)]) -> Value {
        let mut spec = json!({});
        if let Some(first) = pod_cidrs.first() {
            spec = json!({ "podCIDR": first, "podCIDRs": pod_cidrs });
        }
        let addresses: Vec<Value> = addresses
            .iter()
            .map(|(kind, address)| json!({ "type": kind, "address": address }))
            .collect();
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": { "name": name },
            "spec": spec,
            "status": { "addresses": addresses },
        });
        self.post_json("/api/v1/nodes", &node)
    }

    /// Creates the namespace unless it exists.
    pub fn ensure_namespace(&self, name: &str) {
        let body = json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } });
        let r = self.admin_request("POST", "/api/v1/namespaces", Some(&body));
        assert!(
            r.status == 201 || r.status == 409,
            "create namespace {name}: {} {}",
            r.status,
            r.body
        );
    }

    /// A bearer token for ServiceAccount `namespace/name` from the
    /// TokenRequest API (valid one hour), creating the namespace and the
    /// ServiceAccount if needed.
    pub fn service_account_token(&self, namespace: &str, name: &str) -> String {
        self.ensure_namespace(namespace);
        let sa =
            json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": name } });
        let r = self.admin_request(
            "POST",
            &format!("/api/v1/namespaces/{namespace}/serviceaccounts"),
            Some(&sa),
        );
        assert!(
            r.status == 201 || r.status == 409,
            "create serviceaccount {namespace}/{name}: {} {}",
            r.status,
            r.body
        );
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": { "expirationSeconds": SA_TOKEN_SECONDS },
        });
        let answer = self.post_json(
            &format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"),
            &request,
        );
        answer["status"]["token"]
            .as_str()
            .unwrap_or_else(|| panic!("TokenRequest answer has no status.token: {answer}"))
            .to_string()
    }

    /// Opens a watch (`path` must contain `watch=1`) with `token`. Each read
    /// may wait at most `idle_timeout` for data. Panics unless the answer is 200.
    pub fn watch(&self, path: &str, token: &str, idle_timeout: Duration) -> WatchStream {
        let url = format!("{}{path}", self.info.server);
        let request = ureq::http::Request::get(&url)
            .header("Authorization", format!("Bearer {token}"))
            .header("Accept", "application/json")
            .body(())
            .expect("request");
        let request = self
            .agent
            .configure_request(request)
            .timeout_global(None)
            .timeout_per_read(Some(idle_timeout))
            .build();
        let mut response = self
            .agent
            .run(request)
            .unwrap_or_else(|e| panic!("watch {url}: {e}"));
        let status = response.status().as_u16();
        if status != 200 {
            let body = response.body_mut().read_to_string().unwrap_or_default();
            panic!("watch {url}: {status} {body}");
        }
        WatchStream {
            reader: BufReader::new(Box::new(response.into_body().into_reader())),
            url,
        }
    }

    fn admin(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<&Value>,
    ) -> Value {
        let bytes = body.map(|b| serde_json::to_vec(b).expect("serialize body"));
        let r = self.request(
            method,
            path,
            &self.info.admin_token,
            content_type,
            bytes.as_deref(),
        );
        assert!(r.is_success(), "{method} {path}: {} {}", r.status, r.body);
        r.json()
    }

    fn admin_request(&self, method: &str, path: &str, body: Option<&Value>) -> ApiResponse {
        let bytes = body.map(|b| serde_json::to_vec(b).expect("serialize body"));
        self.request(
            method,
            path,
            &self.info.admin_token,
            Some("application/json"),
            bytes.as_deref(),
        )
    }
}

impl Drop for KubeApiserver {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.child.kill();
            let _ = process.child.wait();
        }
        if self.remove_data_dir {
            let _ = fs::remove_dir_all(&self.data_dir);
        }
    }
}

/// Status and body of one API answer.
#[derive(Clone, Debug)]
pub struct ApiResponse {
    pub status: u16,
    pub body: String,
}

impl ApiResponse {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as JSON; panics if it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("answer {} is not JSON ({e}): {}", self.status, self.body))
    }

    /// `reason` of a `Status` body (`Forbidden`, `NotFound`, `Conflict`, ...).
    pub fn reason(&self) -> Option<String> {
        let v: Value = serde_json::from_str(&self.body).ok()?;
        if v["kind"] != "Status" {
            return None;
        }
        v["reason"].as_str().map(str::to_string)
    }
}

/// The newline-delimited JSON events of a watch.
pub struct WatchStream {
    reader: BufReader<Box<dyn Read + Send>>,
    url: String,
}

impl WatchStream {
    /// The next event (`{"type": ..., "object": ...}`), or `None` when the
    /// server ends the stream. Panics on a read error, including the idle
    /// timeout, or on a line that is not JSON.
    pub fn next_event(&mut self) -> Option<Value> {
        let mut line = String::new();
        loop {
            line.clear();
            match self.reader.read_line(&mut line) {
                Ok(0) => return None,
                Ok(_) if line.trim().is_empty() => continue,
                Ok(_) => {
                    return Some(serde_json::from_str(&line).unwrap_or_else(|e| {
                        panic!("watch {}: line is not JSON ({e}): {line}", self.url)
                    }));
                }
                // ureq wraps its own errors (e.g. the per-read timeout) in io::Error.
                Err(e) => panic!("watch {}: {}", self.url, ureq::Error::from(e)),
            }
        }
    }

    /// Reads events until one satisfies `pred` and returns it; panics if the
    /// stream ends first.
    pub fn wait_for(&mut self, mut pred: impl FnMut(&Value) -> bool) -> Value {
        loop {
            match self.next_event() {
                Some(event) if pred(&event) => return event,
                Some(_) => {}
                None => panic!("watch {}: stream ended before the expected event", self.url),
            }
        }
    }
}

// ---- starting the process ----

fn launch(
    binary: &Path,
    data_dir: &Path,
    port: Option<u16>,
    remove_on_exit: bool,
) -> (Process, ReadyInfo) {
    let echo =
        std::env::var_os("KUBE_APISERVER_HARNESS_LOG").is_some_and(|v| !v.is_empty() && v != "0");
    let mut cmd = Command::new(binary);
    cmd.arg("--data-dir").arg(data_dir);
    if let Some(port) = port {
        cmd.arg("--port").arg(port.to_string());
    }
    if echo {
        cmd.arg("--log-to-stderr");
    }
    if remove_on_exit {
        cmd.arg("--remove-data-dir-on-exit");
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
    // Lets scratch-directory cleanup see that this directory is in use.
    let _ = fs::write(data_dir.join("harness.pid"), child.id().to_string());

    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");

    let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
    let tail = Arc::clone(&stderr_tail);
    let stderr_thread = thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if echo {
                eprintln!("[kube-apiserver] {line}");
            }
            let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    });

    let (ready_tx, ready_rx) = mpsc::channel();
    thread::spawn(move || {
        let mut ready_tx = Some(ready_tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(json) = line.strip_prefix("READY ")
                && let Some(tx) = ready_tx.take()
            {
                let _ = tx.send(json.to_string());
            }
        }
        // Dropping the sender without a READY line tells launch() that the
        // process ended before it was ready.
    });

    let mut process = Process {
        child,
        stdin,
        stderr_tail,
        stderr_thread: Some(stderr_thread),
    };
    let line = match ready_rx.recv_timeout(READY_TIMEOUT) {
        Ok(line) => line,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            let _ = process.child.kill();
            let _ = process.child.wait();
            panic!(
                "kube-apiserver harness was not ready within {READY_TIMEOUT:?}; killed it{}",
                process.failure_details(data_dir, true)
            );
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let status = process
                .child
                .wait()
                .map(|s| s.to_string())
                .unwrap_or_else(|e| e.to_string());
            panic!(
                "kube-apiserver harness exited ({status}) before it was ready{}",
                process.failure_details(data_dir, false)
            );
        }
    };
    let info = parse_ready(&line);
    (process, info)
}

fn parse_ready(line: &str) -> ReadyInfo {
    let v: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("READY line is not JSON ({e}): {line}"));
    let text = |key: &str| -> String {
        v[key]
            .as_str()
            .unwrap_or_else(|| panic!("READY line has no string {key:?}: {line}"))
            .to_string()
    };
    let ca_file = PathBuf::from(text("caFile"));
    let ca_pem =
        fs::read_to_string(&ca_file).unwrap_or_else(|e| panic!("read {}: {e}", ca_file.display()));
    ReadyInfo {
        server: text("server"),
        port: v["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or_else(|| panic!("READY line has no port: {line}")),
        admin_kubeconfig: text("adminKubeconfig").into(),
        controller_kubeconfig: text("controllerKubeconfig").into(),
        ca_file,
        ca_pem,
        admin_token: text("adminToken"),
        controller_token: text("controllerToken"),
        controller_user: text("controllerUser"),
        etcd_url: text("etcdURL"),
    }
}

impl Process {
    /// The harness's stderr tail and, since the process has exited or been
    /// killed, the end of the apiserver log, for a failure message.
    fn failure_details(&mut self, data_dir: &Path, with_log: bool) -> String {
        if let Some(t) = self.stderr_thread.take() {
            let _ = t.join();
        }
        let tail = self.stderr_tail.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = format!(
            "\n---- harness stderr (last {} lines):\n{}",
            tail.len(),
            tail.iter().cloned().collect::<Vec<_>>().join("\n")
        );
        let log = data_dir.join("kube-apiserver.log");
        if !with_log {
            return out;
        }
        if let Ok(text) = fs::read_to_string(&log) {
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(30);
            out.push_str(&format!(
                "\n---- {} (last lines):\n{}",
                log.display(),
                lines[start..].join("\n")
            ));
        }
        out
    }
}

fn api_agent(ca_pem: &str) -> Agent {
    let certs: Vec<_> = ureq::tls::parse_pem(ca_pem.as_bytes())
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(cert)) => Some(cert),
            _ => None,
        })
        .collect();
    assert!(
        !certs.is_empty(),
        "the harness CA file holds no certificate"
    );
    let tls = TlsConfig::builder()
        .root_certs(RootCerts::new_with_certs(&certs))
        .build();
    let config = Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .proxy(None)
        .timeout_connect(Some(Duration::from_secs(5)))
        .timeout_global(Some(REQUEST_TIMEOUT))
        .build();
    Agent::new_with_config(config)
}

// ---- scratch directories ----

/// A new empty directory under `target/kube-apiserver/run/`, named after
/// this process. Directories left by test processes that have exited (and
/// whose harness has exited too) are removed here.
pub fn scratch_dir(label: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let run = work_dir().join("run");
    fs::create_dir_all(&run).unwrap_or_else(|e| panic!("create {}: {e}", run.display()));
    remove_stale_scratch_dirs(&run);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = run.join(format!("{}-{label}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

fn remove_stale_scratch_dirs(run: &Path) {
    // Liveness comes from /proc; without it, leave everything alone.
    if !Path::new("/proc/self").exists() {
        return;
    }
    let alive = |pid: &str| !pid.is_empty() && Path::new("/proc").join(pid.trim()).exists();
    let Ok(entries) = fs::read_dir(run) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let owner = name.split('-').next().unwrap_or_default();
        if owner.is_empty() || !owner.bytes().all(|b| b.is_ascii_digit()) || alive(owner) {
            continue;
        }
        let harness = fs::read_to_string(entry.path().join("harness.pid")).unwrap_or_default();
        if !alive(&harness) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

// ---- building the harness ----

/// `target/kube-apiserver`.
fn work_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR has a parent")
        .join("kube-apiserver")
}

fn harness_source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kube-apiserver")
}

/// A `package main` of the Go module in `tests/kube-apiserver/`, built into
/// `target/kube-apiserver/`.
struct GoProgram {
    /// The package directory relative to the module (`.` for the harness).
    package: &'static str,
    /// The binary's file name under `target/kube-apiserver/`.
    binary: &'static str,
    /// What it is, for messages.
    what: &'static str,
}

const HARNESS: GoProgram = GoProgram {
    package: ".",
    binary: "kube-apiserver-harness",
    what: "the kube-apiserver harness",
};

/// Upstream's route controller with a counting fake cloud
/// (`tests/kube-apiserver/upstream-route-controller`), which benchmarks and tests
/// run beside ours; see [`upstream_route_controller_binary`].
const UPSTREAM_ROUTE_CONTROLLER: GoProgram = GoProgram {
    package: "upstream-route-controller",
    binary: "upstream-route-controller",
    what: "upstream's route controller (tests/kube-apiserver/upstream-route-controller)",
};

/// The official Hetzner Cloud client, hcloud-go, driving the Hetzner double
/// (`tests/kube-apiserver/hcloud-conformance`); see [`hcloud_conformance_binary`].
const HCLOUD_CONFORMANCE: GoProgram = GoProgram {
    package: "hcloud-conformance",
    binary: "hcloud-conformance",
    what: "the hcloud-go conformance driver (tests/kube-apiserver/hcloud-conformance)",
};

/// Microsoft's Go SDK (armnetwork, armcompute) driving the ARM double
/// (`tests/kube-apiserver/azure-conformance`); see [`azure_conformance_binary`].
const AZURE_CONFORMANCE: GoProgram = GoProgram {
    package: "azure-conformance",
    binary: "azure-conformance",
    what: "the Azure SDK conformance driver (tests/kube-apiserver/azure-conformance)",
};

/// Google's compute/v1 client driving the GCE double
/// (`tests/kube-apiserver/gce-conformance`); see [`gce_conformance_binary`].
const GCE_CONFORMANCE: GoProgram = GoProgram {
    package: "gce-conformance",
    binary: "gce-conformance",
    what: "the compute/v1 conformance driver (tests/kube-apiserver/gce-conformance)",
};

/// gophercloud v2 driving the Keystone and Neutron double
/// (`tests/kube-apiserver/openstack-conformance`); see [`openstack_conformance_binary`].
const OPENSTACK_CONFORMANCE: GoProgram = GoProgram {
    package: "openstack-conformance",
    binary: "openstack-conformance",
    what: "the gophercloud conformance driver (tests/kube-apiserver/openstack-conformance)",
};

/// Upstream's route controller with cloud-provider-aws's real `Routes`
/// (`tests/kube-apiserver/aws-route-controller`); see [`aws_route_controller_binary`].
const AWS_ROUTE_CONTROLLER: GoProgram = GoProgram {
    package: "aws-route-controller",
    binary: "aws-route-controller",
    what: "upstream's route controller with cloud-provider-aws (tests/kube-apiserver/aws-route-controller)",
};

/// Upstream's route controller with cloud-provider-gcp's real `Routes`
/// (`tests/kube-apiserver/gcp-route-controller`); see [`gcp_route_controller_binary`].
/// cloud-provider-gcp v0.28.2 builds with this module's pinned v0.37.2 graph, so it
/// needs no module of its own.
const GCP_ROUTE_CONTROLLER: GoProgram = GoProgram {
    package: "gcp-route-controller",
    binary: "gcp-route-controller",
    what: "upstream's route controller with cloud-provider-gcp (tests/kube-apiserver/gcp-route-controller)",
};

/// Upstream's cloud-controller-manager command, which prints its flags and feature
/// gates (`tests/kube-apiserver/ccm-flags`); see [`ccm_flags_binary`].
const CCM_FLAGS: GoProgram = GoProgram {
    package: "ccm-flags",
    binary: "ccm-flags",
    what: "upstream's cloud-controller-manager flag set (tests/kube-apiserver/ccm-flags)",
};

/// Package directories of the module that are programs of their own. The
/// harness's stamp leaves them out, so that changing one rebuilds only it.
const OTHER_PROGRAMS: &[&str] = &[
    UPSTREAM_ROUTE_CONTROLLER.package,
    HCLOUD_CONFORMANCE.package,
    AZURE_CONFORMANCE.package,
    GCE_CONFORMANCE.package,
    OPENSTACK_CONFORMANCE.package,
    AWS_ROUTE_CONTROLLER.package,
    GCP_ROUTE_CONTROLLER.package,
    CCM_FLAGS.package,
];

/// The harness binary, built on first use in this process if the cached one
/// is missing or was built from other sources.
pub fn harness_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| build_go_program(&HARNESS))
}

/// The `upstream-route-controller` binary (upstream's
/// `k8s.io/cloud-provider/controllers/route` at the version pinned in go.mod),
/// built like the harness: once, cached under `target/kube-apiserver/`, rebuilt
/// when go.mod, go.sum or its own sources change.
pub fn upstream_route_controller_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| build_go_program(&UPSTREAM_ROUTE_CONTROLLER))
}

/// The `hcloud-conformance` binary: hcloud-go (the version pinned in go.mod)
/// answering JSON commands on stdin, used by `tests/hcloud_conformance.rs`. Built
/// like the harness.
pub fn hcloud_conformance_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| build_go_program(&HCLOUD_CONFORMANCE))
}

/// The `azure-conformance` binary: armnetwork and armcompute (the versions pinned
/// in go.mod) answering JSON commands on stdin, used by
/// `tests/azure_conformance.rs`. Built like the harness.
pub fn azure_conformance_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| build_go_program(&AZURE_CONFORMANCE))
}

/// The `gce-conformance` binary: google.golang.org/api/compute/v1 (the version
/// pinned in go.mod) answering JSON commands on stdin, used by
/// `tests/gce_conformance.rs`. Built like the harness.
pub fn gce_conformance_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| build_go_program(&GCE_CONFORMANCE))
}

/// The `openstack-conformance` binary: gophercloud v2 (the version pinned in
/// go.mod) running one scenario against the Neutron double, used by
/// `tests/openstack_conformance.rs`. Built like the harness.
pub fn openstack_conformance_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| build_go_program(&OPENSTACK_CONFORMANCE))
}

/// The `aws-route-controller` binary: upstream's route controller with
/// cloud-provider-aws's real `Routes`, run by `tests/support/aws_peer.rs`. Built
/// like the harness.
pub fn aws_route_controller_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| build_go_program(&AWS_ROUTE_CONTROLLER))
}

/// The `gcp-route-controller` binary: upstream's route controller with
/// cloud-provider-gcp's real `Routes`, run by `tests/support/gce_peer.rs`. Built like
/// the harness.
pub fn gcp_route_controller_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| build_go_program(&GCP_ROUTE_CONTROLLER))
}

/// The `ccm-flags` binary: upstream's `k8s.io/cloud-provider/app` command at the
/// version pinned in go.mod, printing its flags and gates as JSON; built like the
/// harness.
pub fn ccm_flags_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| build_go_program(&CCM_FLAGS))
}

fn build_go_program(program: &GoProgram) -> PathBuf {
    build_go_program_in(&harness_source_dir(), program)
}

/// Builds `program` of the Go module in `src` (its own go.mod and go.sum) into
/// `target/kube-apiserver/`, unless the binary there is current.
fn build_go_program_in(src: &Path, program: &GoProgram) -> PathBuf {
    let (go, go_version) = go_build::go(program.what, src);
    let ldflags = version_ldflags(src);
    let stamp = source_hash(src, program.package, &[&go_version, &ldflags]);
    let package = format!("./{}", program.package.trim_start_matches("./"));
    let build = go_build::GoBuild {
        module: src,
        package: &package,
        out_dir: &work_dir(),
        binary: program.binary,
        what: program.what,
        ldflags: &ldflags,
        cache: None,
    };
    go_build::build(&build, &go, &go_version, &stamp)
}

/// Stamps the Kubernetes version from go.mod into the binary, as the
/// upstream build does, so that `/version` reports it.
fn version_ldflags(src: &Path) -> String {
    let go_mod = fs::read_to_string(src.join("go.mod"))
        .unwrap_or_else(|e| panic!("read {}/go.mod: {e}", src.display()));
    let version = go_mod
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("k8s.io/kubernetes v"))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| {
            panic!(
                "{}/go.mod does not require k8s.io/kubernetes",
                src.display()
            )
        });
    let mut parts = version.split('.');
    let (major, minor) = (parts.next().unwrap_or("1"), parts.next().unwrap_or("0"));
    let pkg = "k8s.io/component-base/version";
    format!(
        "-s -w -X {pkg}.gitVersion=v{version} -X {pkg}.gitMajor={major} -X {pkg}.gitMinor={minor} -X {pkg}.gitTreeState=clean"
    )
}

/// FNV-1a over go.mod, go.sum and every .go file of `package` and the
/// directories below it (names and contents), leaving out the other programs
/// when `package` is the module root, plus `extra` (Go version, build flags).
fn source_hash(src: &Path, package: &str, extra: &[&str]) -> String {
    let mut files = vec![src.join("go.mod"), src.join("go.sum")];
    let skip: Vec<PathBuf> = if package == "." {
        OTHER_PROGRAMS.iter().map(|p| src.join(p)).collect()
    } else {
        Vec::new()
    };
    let root = match package {
        "." => src.to_path_buf(),
        sub => src.join(sub),
    };
    collect_go_files(&root, &skip, &mut files);
    files.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes.iter().chain(&[0xff]) {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for e in extra {
        feed(e.as_bytes());
    }
    for file in &files {
        let data = fs::read(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        feed(
            file.strip_prefix(src)
                .unwrap_or(file)
                .to_string_lossy()
                .as_bytes(),
        );
        feed(&data);
    }
    format!("{hash:016x}\n")
}

fn collect_go_files(dir: &Path, skip: &[PathBuf], out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if !skip.contains(&path) {
                collect_go_files(&path, skip, out);
            }
        } else if path.extension().is_some_and(|e| e == "go") {
            out.push(path);
        }
    }
}

// ---- other Kubernetes versions ----

/// A Kubernetes minor the harness runs. Each is a Go module of its own
/// (`tests/kube-apiserver/` for the current one, `tests/kube-apiserver-1.31/`),
/// built and cached like the harness under its own binary name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// The version pinned in `tests/kube-apiserver/go.mod` (v1.37.2).
    Current,
    /// v1.31.14 with etcd v3.5 (`tests/kube-apiserver-1.31/`): the oldest minor the
    /// end-to-end tests run on.
    V1_31,
}

/// The Kubernetes 1.31 harness, `tests/kube-apiserver-1.31/`.
const HARNESS_1_31: GoProgram = GoProgram {
    package: ".",
    binary: "kube-apiserver-harness-1.31",
    what: "the Kubernetes 1.31 kube-apiserver harness (tests/kube-apiserver-1.31)",
};

impl Version {
    /// The harness binary of this version, built on first use in this process.
    pub fn harness_binary(self) -> &'static Path {
        match self {
            Version::Current => harness_binary(),
            Version::V1_31 => {
                static BINARY: OnceLock<PathBuf> = OnceLock::new();
                BINARY.get_or_init(|| {
                    let src =
                        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kube-apiserver-1.31");
                    build_go_program_in(&src, &HARNESS_1_31)
                })
            }
        }
    }

    /// What `/version` reports as `minor`, e.g. `"31"`.
    pub fn minor(self) -> &'static str {
        match self {
            Version::Current => "37",
            Version::V1_31 => "31",
        }
    }
}

/// The process-wide server of `version` for this test binary, as [`shared()`].
pub fn shared_version(version: Version) -> &'static KubeApiserver {
    static SHARED_1_31: OnceLock<KubeApiserver> = OnceLock::new();
    match version {
        Version::Current => shared(),
        Version::V1_31 => SHARED_1_31.get_or_init(|| {
            KubeApiserver::launch_binary(version.harness_binary(), scratch_dir("shared-1.31"), true)
        }),
    }
}

impl KubeApiserver {
    /// [`KubeApiserver::start_fresh`] on a server of `version`.
    pub fn start_fresh_version(version: Version) -> KubeApiserver {
        let mut server = KubeApiserver::launch_binary(
            version.harness_binary(),
            scratch_dir(&format!("private-1.{}", version.minor())),
            false,
        );
        server.remove_data_dir = true;
        server
    }

    /// The minor version the server reports at `/version` (e.g. `"31"`).
    pub fn reported_minor(&self) -> String {
        let response = self.request("GET", "/version", self.admin_token(), None, None);
        assert!(
            response.is_success(),
            "GET /version answered {}",
            response.status
        );
        response.json()["minor"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

impl std::fmt::Debug for KubeApiserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeApiserver")
            .field("server", &self.info.server)
            .field("data_dir", &self.data_dir)
            .field("running", &self.process.is_some())
            .finish()
    }
}
