#![allow(dead_code)]
//! A network namespace of the test's own, made with `ip netns`, for the reference
//! Linux router plugin: it holds a veth pair whose one end carries the "node
//! network" (so routes via node addresses are accepted by the kernel) and is deleted
//! on drop. Nothing of the host's routing is touched.
//!
//! The tests need root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), `ip` (iproute2 with
//! `-json`) and python3; where one is missing, [`Netns::new`] panics with what to
//! install or how to run the test, so the test fails instead of passing in silence.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The reference plugin.
pub fn linux_router() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/plugins/linux-router")
}

pub struct Netns {
    pub name: String,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Panics, naming what is missing, unless this test can make network namespaces.
pub fn require_netns_tools() {
    let hint = "this end-to-end test runs the reference Linux router plugin in a network \
                namespace of its own";
    if run(&["ip", "-V"]).is_err() {
        panic!(
            "`ip` (iproute2) is not installed: {hint}; install iproute2 (apt-get install iproute2)"
        );
    }
    if run(&["python3", "--version"]).is_err() {
        panic!("python3 is not installed: {hint}, which is a python3 script; install python3");
    }
    let uid = run(&["id", "-u"]).unwrap_or_default();
    if uid.trim() != "0" {
        panic!(
            "not root (uid {}): {hint}, and `ip netns add` needs root; run it as root, e.g. \
             `sudo -E cargo test --test e2e_exec_router --test plugin_check`",
            uid.trim()
        );
    }
}

impl Netns {
    /// A namespace with `veth0` (the gateway's leg, `gateway_cidr`, e.g.
    /// `10.99.0.1/24`) up, and its peer up.
    pub fn new(label: &str, gateway_cidr: &str) -> Netns {
        require_netns_tools();
        let name = format!(
            "rc-{label}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        run(&["ip", "netns", "add", &name]).unwrap_or_else(|e| {
            panic!("cannot create a network namespace ({e}); run the test as root on Linux")
        });
        let ns = Netns { name };
        // A veth pair (not a dummy link: the dummy module may be missing in containers).
        ns.ip(&[
            "link", "add", "veth0", "type", "veth", "peer", "name", "veth1",
        ]);
        ns.ip(&["addr", "add", gateway_cidr, "dev", "veth0"]);
        ns.ip(&["link", "set", "veth0", "up"]);
        ns.ip(&["link", "set", "veth1", "up"]);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NAME args…`, which must succeed.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["ip", "-n", &self.name];
        all.extend_from_slice(args);
        run(&all).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `(destination, gateway, proto)` of every IPv4 route in `table`, sorted.
    pub fn routes(&self, table: &str) -> Vec<(String, String, String)> {
        let out = match run(&[
            "ip", "-n", &self.name, "-4", "-json", "route", "show", "table", table,
        ]) {
            Ok(out) => out,
            Err(e) if e.contains("does not exist") => return Vec::new(),
            Err(e) => panic!("{e}"),
        };
        let routes: Vec<serde_json::Value> = if out.trim().is_empty() {
            Vec::new()
        } else {
            serde_json::from_str(&out).expect("ip -json output")
        };
        let mut v: Vec<_> = routes
            .iter()
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
                (s("dst"), s("gateway"), s("protocol"))
            })
            .collect();
        v.sort();
        v
    }

    /// A `--cloud-config` that runs the reference plugin in this namespace.
    pub fn plugin_config(&self, state: &Path, extra: &str) -> String {
        format!(
            "Name=linux-router\nCommand=ip\nArg=netns\nArg=exec\nArg={}\nArg={}\n\
             Env=LINUX_ROUTER_STATE={}\n{extra}",
            self.name,
            linux_router().display(),
            state.display()
        )
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}
