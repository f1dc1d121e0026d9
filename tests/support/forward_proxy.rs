#![allow(dead_code)]
//! A real forward proxy that speaks CONNECT, for the proxy tests: proxy.py from PyPI,
//! pinned, installed into a virtualenv under `target/proxy-venv/` once per target
//! directory (a lock file keeps test binaries that start together from installing
//! twice), started on 127.0.0.1 with an ephemeral port.
//!
//! proxy.py rather than Debian's tinyproxy: it installs without root into the target
//! directory like moto, reports the port it bound (`--port-file`), and lets the
//! tests give it a resolver of its own. That resolver maps every name under
//! `route-controller.test` to 127.0.0.1 and writes each lookup to a journal, the
//! moment the proxy connects upstream. The client cannot resolve those names itself,
//! so a request that reaches a double by such a name went through the proxy, and a
//! name missing from the journal never reached it. (Go's rules, which ours follow,
//! never proxy `localhost` or a loopback address, so a double at 127.0.0.1 could not
//! show it.)
//!
//! The proxy runs in a process group of its own, ended when the [`ForwardProxy`] is
//! dropped or our end of its stdin closes (the test process exited). A missing
//! `python3` or venv module fails the test with what to install.

// Each support module that needs it includes it: a test may include several.
#[allow(clippy::duplicate_mod)]
#[path = "venv.rs"]
mod venv;

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What pip installs: proxy.py has no dependencies.
pub const REQUIREMENTS: &str = "proxy.py==2.4.10\n";

/// Runs proxy.py with the test resolver; ends its process group when stdin closes.
const WRAPPER: &str = r#"
import os, signal, socket, sys, threading

JOURNAL = os.environ["RC_PROXY_JOURNAL"]
DOMAIN = ".route-controller.test"
_getaddrinfo = socket.getaddrinfo

def getaddrinfo(host, port, *args, **kwargs):
    name = host.decode() if isinstance(host, bytes) else host
    if isinstance(name, str) and name.endswith(DOMAIN):
        with open(JOURNAL, "a") as journal:
            journal.write(f"{name}:{port}\n")
        host = "127.0.0.1"
    return _getaddrinfo(host, port, *args, **kwargs)

socket.getaddrinfo = getaddrinfo

# os.read, not sys.stdin: a thread blocked in sys.stdin holds its lock across the
# fork of proxy.py's acceptor, which then hangs closing its stdin.
def watchdog():
    while os.read(0, 4096):
        pass
    os.killpg(0, signal.SIGTERM)

threading.Thread(target=watchdog, daemon=True).start()
import proxy
proxy.main()
"#;

/// The virtualenv's directory, installing it first if needed.
pub fn venv() -> PathBuf {
    static READY: OnceLock<PathBuf> = OnceLock::new();
    READY
        .get_or_init(|| {
            venv::install(
                "proxy-venv",
                REQUIREMENTS,
                "the proxy tests run proxy.py",
                "proxy.py",
            )
        })
        .clone()
}

/// A running proxy.py.
pub struct ForwardProxy {
    child: Child,
    stdin: Option<ChildStdin>,
    port: u16,
    journal: PathBuf,
    log: PathBuf,
    _dir: super::tls_front::TempDir,
}

impl ForwardProxy {
    pub fn start() -> ForwardProxy {
        let venv = venv();
        let dir = super::tls_front::TempDir::new("proxy");
        let wrapper = dir.write("proxy_wrapper.py", WRAPPER);
        let port_file = dir.path().join("port");
        let journal = dir.path().join("journal");
        let log = dir.path().join("proxy.log");
        File::create(&journal).expect("create the journal");
        let mut child = Command::new(venv.join("bin/python"))
            .arg(&wrapper)
            .args([
                "--hostname",
                "127.0.0.1",
                "--port",
                "0",
                "--num-acceptors",
                "1",
            ])
            .args(["--threaded", "--log-level", "INFO", "--port-file"])
            .arg(&port_file)
            .arg("--log-file")
            .arg(&log)
            .env("RC_PROXY_JOURNAL", &journal)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start proxy.py from {}: {e}", venv.display()));
        let stdin = child.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = loop {
            if let Some(port) = fs::read_to_string(&port_file)
                .ok()
                .and_then(|p| p.trim().parse::<u16>().ok())
            {
                break port;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "proxy.py exited ({status}) before listening:\n{}",
                    fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "proxy.py did not report its port in 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        ForwardProxy {
            child,
            stdin,
            port,
            journal,
            log,
            _dir: dir,
        }
    }

    /// `http://127.0.0.1:<port>`, for `HTTPS_PROXY`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The `host:port` of every upstream connection the proxy made, in order.
    pub fn journal(&self) -> Vec<String> {
        fs::read_to_string(&self.journal)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// proxy.py's log (its access lines name each CONNECT once the tunnel closes).
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ForwardProxy {
    fn drop(&mut self) {
        // Closing stdin makes the wrapper end its process group.
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.flush();
        }
        let _ = self.child.wait();
    }
}
