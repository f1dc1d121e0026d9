//! Stamps the commit the binary is built from into `ROUTE_CONTROLLER_COMMIT`, for
//! `route-controller --version` and the start-up log line: `git rev-parse --short HEAD`,
//! with `-dirty` when tracked files differ from it. Outside a git checkout (a crate
//! tarball, a container build without `.git`) it sets nothing and the version stands
//! alone; `ROUTE_CONTROLLER_COMMIT` in the build's environment (the Dockerfile's build
//! stage) takes the place of git.

use std::path::Path;
use std::process::Command;

const COMMIT_VAR: &str = "ROUTE_CONTROLLER_COMMIT";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={COMMIT_VAR}");
    if let Some(commit) = std::env::var(COMMIT_VAR).ok().filter(|c| !c.is_empty()) {
        println!("cargo:rustc-env={COMMIT_VAR}={commit}");
        return;
    }
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return;
    };
    // Run again when HEAD moves (a checkout, a commit on the branch it names), and
    // when the sources change, which rebuild the crate anyway, so that `-dirty` is
    // as true as the build; a change elsewhere (tests, docs) does not rerun it.
    for path in ["HEAD", "index", "packed-refs"] {
        watch_git_path(path);
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch_git_path(&branch);
    }
    for path in ["src", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={path}");
    }
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let suffix = if dirty { "-dirty" } else { "" };
    println!("cargo:rustc-env={COMMIT_VAR}={head}{suffix}");
}

/// `git ARGS`' trimmed output, or `None` when git is missing or fails (not a checkout).
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Reruns the script when the git file `name` changes; `--git-path` finds it in a
/// worktree as in a plain checkout.
fn watch_git_path(name: &str) {
    if let Some(path) = git(&["rev-parse", "--git-path", name])
        && Path::new(&path).exists()
    {
        println!("cargo:rerun-if-changed={path}");
    }
}
