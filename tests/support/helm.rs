#![allow(dead_code)]
//! Helm, built from its module (`tests/helm/`, its version pinned in go.mod and go.sum)
//! through the Go module proxy, once: cached in `target/helm/` with a stamp of the
//! sources and the Go version, and a lock so that test binaries build it one at a
//! time (as `kube_apiserver.rs` builds the harness). Its Go build cache is its own,
//! `target/helm/go-build`, so CI keeps it with target/.

// Each support module that needs it includes it: a test may include several.
#[allow(clippy::duplicate_mod)]
#[path = "go_build.rs"]
mod go_build;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

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
    let what = "Helm (tests/helm)";
    let (go, go_version) = go_build::go(what, &src);
    let mut stamp = go_version.clone();
    for file in ["go.mod", "go.sum"] {
        let path = src.join(file);
        let text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        stamp.push('\n');
        stamp.push_str(&text);
    }
    let stamp = format!("{:016x}", go_build::fnv1a(stamp.as_bytes()));
    let dir = work_dir();
    let build = go_build::GoBuild {
        module: &src,
        package: "helm.sh/helm/v4/cmd/helm",
        out_dir: &dir,
        binary: "helm",
        what,
        ldflags: "-s -w",
        cache: Some(&dir.join("go-build")),
    };
    go_build::build(&build, &go, &go_version, &stamp)
}
