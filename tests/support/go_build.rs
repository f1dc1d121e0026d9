//! Building the tests' Go programs (the kube-apiserver harness and the programs beside
//! it, Helm, the SDK conformance drivers) once, through the Go module proxy: each
//! binary is cached under `target/` with a stamp of what it was built from, and a lock
//! file makes test binaries that need it at the same time build it once.

use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// One Go program to build.
pub struct GoBuild<'a> {
    /// The module's directory (its go.mod and go.sum).
    pub module: &'a Path,
    /// What `go build` builds: `./dir` of the module, or an import path it requires.
    pub package: &'a str,
    /// Where the binary, its stamp and the lock live.
    pub out_dir: &'a Path,
    /// The binary's file name in `out_dir`.
    pub binary: &'a str,
    /// What it is, for messages.
    pub what: &'a str,
    pub ldflags: &'a str,
    /// A Go build cache of its own (`GOCACHE`), kept under target/ so that CI keeps it.
    pub cache: Option<&'a Path>,
}

/// The `go` command (`GO` or `go` on PATH) and its `go version` line; fails the test
/// with what to install when there is none.
pub fn go(what: &str, module: &Path) -> (PathBuf, String) {
    let go = std::env::var_os("GO")
        .map(PathBuf::from)
        .unwrap_or_else(|| "go".into());
    match Command::new(&go).arg("version").output() {
        Ok(out) if out.status.success() => {
            let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (go, version)
        }
        Ok(out) => panic!(
            "`{} version` failed ({}): {}",
            go.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "Building {what} (a Go program in {}) needs Go, but `{}` was not found. Install \
             Go 1.26 or newer (https://go.dev/dl/) and put `go` on PATH, or set GO=/path/to/go. \
             The Go module proxy must be reachable for the first build.",
            module.display(),
            go.display()
        ),
        Err(e) => panic!("running `{} version`: {e}", go.display()),
    }
}

/// The binary, built unless the one in `out_dir` carries `stamp` (the caller's hash
/// of its sources, the Go version and the flags).
pub fn build(b: &GoBuild<'_>, go: &Path, go_version: &str, stamp: &str) -> PathBuf {
    fs::create_dir_all(b.out_dir).unwrap_or_else(|e| panic!("create {}: {e}", b.out_dir.display()));
    let binary = b.out_dir.join(b.binary);
    let stamp_file = b.out_dir.join(format!("{}.stamp", b.binary));
    let current = || binary.is_file() && fs::read_to_string(&stamp_file).is_ok_and(|s| s == stamp);
    if current() {
        return binary;
    }
    // One build at a time across test binaries; the lock goes with the file handle,
    // also when a process dies.
    let lock_path = b.out_dir.join("build.lock");
    let lock =
        File::create(&lock_path).unwrap_or_else(|e| panic!("create {}: {e}", lock_path.display()));
    lock.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", lock_path.display()));
    if current() {
        return binary;
    }
    let pid = std::process::id();
    let tmp = b.out_dir.join(format!("{}.tmp-{pid}", b.binary));
    let started = Instant::now();
    eprintln!(
        "building {} ({go_version}; the first build downloads modules and takes minutes)",
        b.what
    );
    let mut command = Command::new(go);
    command.current_dir(b.module);
    if let Some(cache) = b.cache {
        command.env("GOCACHE", cache);
    }
    let out = command
        .args([
            "build",
            "-trimpath",
            "-buildvcs=false",
            "-mod=readonly",
            "-ldflags",
            b.ldflags,
            "-o",
        ])
        .arg(&tmp)
        .arg(b.package)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running `{} build`: {e}", go.display()));
    if !out.status.success() {
        let _ = fs::remove_file(&tmp);
        panic!(
            "building {} failed ({}); reproduce with `cd {} && go build {}`\n---- go build stderr:\n{}",
            b.what,
            out.status,
            b.module.display(),
            b.package,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fs::rename(&tmp, &binary)
        .unwrap_or_else(|e| panic!("rename {} -> {}: {e}", tmp.display(), binary.display()));
    let stamp_tmp = b.out_dir.join(format!("{}.stamp.tmp-{pid}", b.binary));
    fs::write(&stamp_tmp, stamp).unwrap_or_else(|e| panic!("write {}: {e}", stamp_tmp.display()));
    fs::rename(&stamp_tmp, &stamp_file)
        .unwrap_or_else(|e| panic!("rename {}: {e}", stamp_tmp.display()));
    eprintln!("built {} in {:.0?}", b.what, started.elapsed());
    drop(lock);
    binary
}

/// FNV-1a, the stamps' hash.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}
