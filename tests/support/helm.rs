#![allow(dead_code)]
//! Helm, built from its module (`tests/helm/`, its version pinned in go.mod and go.sum)
//! through the Go module proxy, once: cached in `target/helm/` with a stamp of the
//! sources and the Go version, and a lock so that test binaries build it one at a
//! time (as `kube_apiserver.rs` builds the harness). Its Go build cache is its own,
//! `target/helm/go-build`, so CI keeps it with target/.

use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    repo().join("charts/route-controller")
}

/// The `helm` binary, built on first use if missing or built from other sources.
pub fn helm() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(build)
}

/// Runs `helm ARGS`; returns its output whatever the exit status.
pub fn run(args: &[&str]) -> Output {
    Command::new(helm())
        .args(args)
        .env("HELM_CACHE_HOME", work_dir().join("home/cache"))
        .env("HELM_CONFIG_HOME", work_dir().join("home/config"))
        .env("HELM_DATA_HOME", work_dir().join("home/data"))
        .stdin(Stdio::null())
        .output()
        .expect("run helm")
}

/// `helm template` of the chart in `namespace` with `--set` values; panics naming
/// helm's message if it fails.
pub fn template(sets: &[String]) -> String {
    let chart = chart_dir();
    let mut args = vec![
        "template",
        "route-controller",
        chart.to_str().expect("a UTF-8 path"),
    ];
    for set in sets {
        args.push("--set");
        args.push(set);
    }
    let out = run(&args);
    assert!(
        out.status.success(),
        "helm {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn work_dir() -> PathBuf {
    repo().join("target/helm")
}

fn build() -> PathBuf {
    let src = repo().join("tests/helm");
    let go = std::env::var_os("GO")
        .map(PathBuf::from)
        .unwrap_or_else(|| "go".into());
    let go_version = match Command::new(&go).arg("version").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Ok(out) => panic!(
            "`{} version` failed: {}",
            go.display(),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "building Helm (tests/helm) needs Go, but `{}` was not found: install Go 1.26 or \
             newer (https://go.dev/dl/) and put `go` on PATH, or set GO=/path/to/go; the Go \
             module proxy must be reachable for the first build",
            go.display()
        ),
        Err(e) => panic!("running `{} version`: {e}", go.display()),
    };
    let mut stamp_value = go_version.clone();
    for file in ["go.mod", "go.sum"] {
        let path = src.join(file);
        let text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        stamp_value.push('\n');
        stamp_value.push_str(&text);
    }
    let stamp_value = format!("{:016x}", fnv1a(stamp_value.as_bytes()));
    let dir = work_dir();
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let binary = dir.join("helm");
    let stamp = dir.join("helm.stamp");
    let current = || binary.is_file() && fs::read_to_string(&stamp).is_ok_and(|s| s == stamp_value);
    if current() {
        return binary;
    }
    // One build at a time across test binaries; the lock goes with the file handle,
    // also when a process dies.
    let lock_path = dir.join("build.lock");
    let lock =
        File::create(&lock_path).unwrap_or_else(|e| panic!("create {}: {e}", lock_path.display()));
    lock.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", lock_path.display()));
    if current() {
        return binary;
    }
    let tmp = dir.join(format!("helm.tmp-{}", std::process::id()));
    let started = Instant::now();
    eprintln!(
        "building Helm from tests/helm ({go_version}; the first build downloads modules and takes minutes)"
    );
    let out = Command::new(&go)
        .current_dir(&src)
        .env("GOCACHE", dir.join("go-build"))
        .args([
            "build",
            "-trimpath",
            "-buildvcs=false",
            "-mod=readonly",
            "-ldflags",
            "-s -w",
            "-o",
        ])
        .arg(&tmp)
        .arg("helm.sh/helm/v4/cmd/helm")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running `{} build`: {e}", go.display()));
    if !out.status.success() {
        let _ = fs::remove_file(&tmp);
        panic!(
            "building Helm failed ({}); reproduce with `cd {} && go build helm.sh/helm/v4/cmd/helm`\n---- go build stderr:\n{}",
            out.status,
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fs::rename(&tmp, &binary).unwrap_or_else(|e| panic!("rename {}: {e}", tmp.display()));
    fs::write(&stamp, &stamp_value).unwrap_or_else(|e| panic!("write {}: {e}", stamp.display()));
    eprintln!("built Helm in {:.0?}", started.elapsed());
    drop(lock);
    binary
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}
